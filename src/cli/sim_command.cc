// `gandiva sim`: run policies on one workload in the simulator.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "cli/commands.h"
#include "config/queues_file.h"
#include "core/policies/registry.h"
#include "sim/experiments/sweep.h"
#include "sim/finish_time_fairness.h"
#include "sim/simulator.h"
#include "sim/workload/catalog.h"
#include "sim/workload/synthetic.h"
#include "sim/workload/trace_reader.h"

namespace gandiva::cli {
namespace {

struct SimFlags {
  std::string policies = "gandiva";
  std::string workload = "gandiva-synthetic";
  int jobs = 1000;
  int tenants = 0;
  double window_s = 0;
  std::string trace;
  std::string format = "philly";
  std::string vc;
  size_t max_jobs = 0;
  double min_duration_s = 0;
  bool skip_unknown = false;
  std::string gpus = "180";  // a list: --gpus 256,512
  int gpus_per_server = 4;
  int sockets = 1;
  int switches_per_socket = 1;
  std::string seeds = "1";  // a list: --seed 1..5
  std::string loads = "1";  // a list: --load 0.5,1,2
  int jobs_parallel = 0;    // 0: the machine's cores
  std::string csv;
  std::string plot;
  std::string plot_metric = "mean_jct_s";
  std::string json;
  std::string per_job;
  std::string timeline;
  double quantum_s = 60;
  double tick_s = 60;
  int max_height = 4;
  double starvation_s = 300;
  double checkpoint_interval_s = 1800;
  double share_half_life_s = 3600;
  std::string gpu_type = "v100";
  std::string vc_quotas = "none";
  std::string queues = "none";
  bool allow_borrowing = false;
  std::string data_dir;
  bool progress = true;
  // SERVER@SECONDS each (--drain, --server-down, --server-up,
  // --agent-restart, --agent-crash).
  std::vector<std::string> drains;
  std::vector<std::string> downs;
  std::vector<std::string> ups;
  std::vector<std::string> restarts;
  std::vector<std::string> crashes;
};

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) {
    std::fprintf(stderr, "gandiva sim: cannot write '%s'\n", path.c_str());
    return false;
  }
  return true;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// `text` as SERVER@SECONDS (a server index below `servers`, a time in
// seconds from the start): a cluster event of `kind` for flag `flag`.
core::StatusOr<sim::ClusterEvent> ParseClusterEvent(
    const std::string& flag, const std::string& text,
    sim::ClusterEvent::Kind kind, int servers) {
  const std::string what = flag + ": expected SERVER@SECONDS (a server 0.." +
                           std::to_string(servers - 1) +
                           " and a time in seconds), got '" + text + "'";
  const size_t at = text.find('@');
  if (at == std::string::npos || at == 0 || at + 1 == text.size()) {
    return core::InvalidArgument(what);
  }
  const std::string server = text.substr(0, at);
  const std::string when = text.substr(at + 1);
  char* end = nullptr;
  const long index = std::strtol(server.c_str(), &end, 10);
  if (*end != '\0' || index < 0 || index >= servers) {
    return core::InvalidArgument(what);
  }
  const double seconds = std::strtod(when.c_str(), &end);
  if (*end != '\0' || !std::isfinite(seconds) || seconds < 0) {
    return core::InvalidArgument(what);
  }
  sim::ClusterEvent e;
  e.kind = kind;
  e.server = static_cast<int>(index);
  e.at = core::Time::Zero() + core::Duration::FromSeconds(seconds);
  return e;
}

// A progress bar on stderr, shown only on a terminal and only once a run has
// taken more than a second.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label)
      : label_(std::move(label)),
        start_(std::chrono::steady_clock::now()),
        tty_(isatty(STDERR_FILENO) == 1) {}
  void Update(double fraction) {
    if (!tty_) return;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count();
    if (elapsed < 1.0) return;
    shown_ = true;
    const int width = 30;
    const int filled = static_cast<int>(fraction * width);
    std::fprintf(stderr, "\r%-10s [%s%s] %5.1f%% %6.1fs", label_.c_str(),
                 std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), 100 * fraction,
                 elapsed);
    std::fflush(stderr);
  }
  ~ProgressBar() {
    if (shown_) std::fprintf(stderr, "\r%*s\r", 70, "");
  }

 private:
  std::string label_;
  std::chrono::steady_clock::time_point start_;
  bool tty_;
  bool shown_ = false;
};

// One point of a sweep: the workload and cluster every policy runs on.
struct Point {
  uint64_t seed = 1;
  int gpus = 0;
  double load = 1;
  sim::Workload workload;
  sim::SimOptions options;
  core::PolicyOptions policy_options;
  std::string error;  // building it failed
};

int Fail(const std::string& msg) {
  std::fprintf(stderr, "gandiva sim: %s\n", msg.c_str());
  return 2;
}

// The workload of `point` (its seed, GPUs and load) as the flags say.
core::StatusOr<sim::Workload> MakeWorkload(const SimFlags& f,
                                           const sim::Catalog& catalog,
                                           const Point& point) {
  sim::Workload workload;
  if (!f.trace.empty()) {
    core::StatusOr<sim::Workload> w = core::InvalidArgument("");
    if (f.format == "philly") {
      sim::PhillyOptions o;
      o.vc = f.vc;
      o.max_jobs = f.max_jobs;
      o.min_duration = core::Duration::FromSeconds(f.min_duration_s);
      o.seed = point.seed;
      w = sim::ReadPhillyTrace(f.trace, catalog, o);
    } else if (f.format == "gavel") {
      sim::GavelOptions o;
      o.skip_unknown = f.skip_unknown;
      w = sim::ReadGavelTrace(f.trace, catalog, o);
    } else if (f.format == "tiresias") {
      w = sim::ReadTiresiasTrace(f.trace, catalog);
    } else {
      return core::InvalidArgument(
          "--format: expected philly, gavel or tiresias, got '" + f.format +
          "'");
    }
    if (!w.ok()) return w.status();
    workload = std::move(*w);
    if (f.format != "philly" && f.max_jobs > 0 &&
        workload.jobs.size() > f.max_jobs) {
      workload.jobs.resize(f.max_jobs);
    }
  } else if (f.workload == "gandiva-synthetic") {
    sim::SyntheticOptions o;
    o.jobs = f.jobs;
    o.total_gpus = point.gpus;
    o.seed = point.seed;
    o.tenants = f.tenants;
    if (f.window_s > 0) o.window = core::Duration::FromSeconds(f.window_s);
    if (core::Status st = sim::ValidateSyntheticOptions(catalog, o); !st.ok()) {
      return st;
    }
    workload = sim::GenerateSynthetic(catalog, o);
  } else {
    return core::InvalidArgument(
        "--workload: expected gandiva-synthetic (or use --trace), got '" +
        f.workload + "'");
  }
  sim::experiments::ScaleArrivals(workload, point.load);
  return workload;
}

// The cluster and the policies' options of `point`, its workload made.
core::Status Configure(const SimFlags& f, Point& point) {
  sim::SimOptions& so = point.options;
  so.servers = point.gpus / f.gpus_per_server;
  so.server.gpus = f.gpus_per_server;
  so.server.sockets = f.sockets;
  so.server.switches_per_socket = f.switches_per_socket;
  if (std::string err = core::ValidateServerSpec(so.server); !err.empty()) {
    return core::InvalidArgument("server topology: " + err);
  }
  so.tick = core::Duration::FromSeconds(f.tick_s);
  so.checkpoint_interval = core::Duration::FromSeconds(f.checkpoint_interval_s);
  using Kind = sim::ClusterEvent::Kind;
  for (const auto& [flag, texts, kind] :
       {std::tuple{"--drain", &f.drains, Kind::kDrain},
        std::tuple{"--server-down", &f.downs, Kind::kServerDown},
        std::tuple{"--server-up", &f.ups, Kind::kServerUp},
        std::tuple{"--agent-restart", &f.restarts, Kind::kAgentRestart},
        std::tuple{"--agent-crash", &f.crashes, Kind::kAgentRestart}}) {
    for (const std::string& text : *texts) {
      auto e = ParseClusterEvent(flag, text, kind, so.servers);
      if (!e.ok()) return e.status();
      e->keep_checkpoints = texts == &f.restarts;
      so.cluster_events.push_back(*e);
    }
  }
  if (!f.timeline.empty()) so.timeline_every = core::Duration::Seconds(60);

  core::PolicyOptions& po = point.policy_options;
  po.gandiva.quantum = core::Duration::FromSeconds(f.quantum_s);
  po.share_half_life = core::Duration::FromSeconds(f.share_half_life_s);
  po.gandiva.max_height = f.max_height;
  po.gandiva.starvation_timeout =
      f.starvation_s < 0 ? core::Duration::Infinite()
                         : core::Duration::FromSeconds(f.starvation_s);
  if (f.vc_quotas != "none" && f.vc_quotas != "proportional") {
    return core::InvalidArgument(
        "--vc-quotas: expected none or proportional, got '" + f.vc_quotas +
        "'");
  }
  if (f.queues != "none" && f.queues != "vc") {
    // A file of queues: each job's VC names its leaf.
    auto queues = config::LoadQueuesFile(f.queues);
    if (!queues.ok()) {
      return core::InvalidArgument("--queues: " + queues.status().message());
    }
    so.queues = *queues;
    po.queues = *queues;
    po.fifo.vc_quotas = core::LeafQuotas(*queues);
    po.fifo.allow_borrowing = f.allow_borrowing;
    return core::Status::Ok();
  }
  if (f.vc_quotas == "proportional" || f.queues == "vc") {
    std::map<std::string, double> demand;
    for (const sim::TraceJob& j : point.workload.jobs) {
      demand[j.vc] += j.duration.seconds() * j.gpus;
    }
    const std::map<std::string, int> quotas =
        core::ProportionalVcQuotas(std::vector<std::pair<std::string, double>>(
                                       demand.begin(), demand.end()),
                                   point.gpus);
    po.fifo.vc_quotas = quotas;
    po.fifo.allow_borrowing = f.allow_borrowing;
    if (f.queues == "vc") {
      so.queues = core::FlatQueues(quotas);
      po.queues = so.queues;
    }
  }
  return core::Status::Ok();
}

int RunSim(const SimFlags& f) {
  if (f.gpus_per_server < 1) {
    return Fail("--gpus-per-server: must be at least 1");
  }
  auto gpus = sim::experiments::ParsePositiveIntList("--gpus", f.gpus);
  if (!gpus.ok()) return Fail(gpus.status().message());
  for (int g : *gpus) {
    if (g % f.gpus_per_server != 0) {
      return Fail("--gpus: must be a positive multiple of --gpus-per-server (" +
                  std::to_string(f.gpus_per_server) + "), got " +
                  std::to_string(g));
    }
  }
  auto seeds = sim::experiments::ParseSeedList("--seed", f.seeds);
  if (!seeds.ok()) return Fail(seeds.status().message());
  auto loads = sim::experiments::ParsePositiveNumberList("--load", f.loads);
  if (!loads.ok()) return Fail(loads.status().message());
  if (f.quantum_s <= 0) return Fail("--quantum: must be positive");
  if (f.tick_s <= 0) return Fail("--tick: must be positive");
  if (f.checkpoint_interval_s < 0) {
    return Fail("--checkpoint-interval: must be 0 (none) or positive");
  }
  if (f.share_half_life_s <= 0) {
    return Fail("--share-half-life: must be positive");
  }
  if (!f.plot.empty()) {
    if (core::Status m = sim::experiments::CheckMetric(f.plot_metric);
        !m.ok()) {
      return Fail("--plot-metric: " + m.message());
    }
    const auto& fair = sim::experiments::FairnessMetricNames();
    if (f.queues == "none" && f.plot_metric != "lost_gpu_hours" &&
        std::find(fair.begin(), fair.end(), f.plot_metric) != fair.end()) {
      return Fail("--plot-metric: '" + f.plot_metric +
                  "' is measured only with --queues");
    }
  }
  const std::vector<std::string> names = Split(f.policies);
  if (names.empty()) return Fail("--policy: give at least one policy");
  for (const std::string& name : names) {
    if (auto p = core::MakePolicy(name, core::PolicyOptions{}); !p.ok()) {
      return Fail("--policy: " + p.status().message());
    }
  }
  auto gpu_type = sim::ParseGpuType(f.gpu_type);
  if (!gpu_type.ok()) return Fail("--gpu-type: " + gpu_type.status().message());
  const std::string data_dir =
      f.data_dir.empty() ? sim::DefaultDataDir() : f.data_dir;
  auto catalog = sim::Catalog::Load(data_dir, *gpu_type);
  if (!catalog.ok()) return Fail(catalog.status().ToString());

  // The points (every GPU count, load and seed), then a run of each policy
  // at each point, all on up to --jobs-parallel threads.
  std::vector<Point> points;
  for (int g : *gpus) {
    for (double load : *loads) {
      for (uint64_t seed : *seeds) {
        Point p;
        p.seed = seed;
        p.gpus = g;
        p.load = load;
        points.push_back(std::move(p));
      }
    }
  }
  const bool sweep = points.size() > 1;
  const int parallel =
      f.jobs_parallel > 0
          ? f.jobs_parallel
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  sim::experiments::RunParallel(points.size(), parallel, [&](size_t i) {
    Point& p = points[i];
    auto w = MakeWorkload(f, *catalog, p);
    if (!w.ok()) {
      p.error = w.status().ToString();
      return;
    }
    p.workload = std::move(*w);
    if (core::Status s = Configure(f, p); !s.ok()) p.error = s.ToString();
  });
  for (const Point& p : points) {
    if (!p.error.empty()) return Fail(p.error);
    std::string where;
    if (sweep) {
      where = " (seed " + std::to_string(p.seed) + ", " +
              std::to_string(p.gpus) + " GPUs, load " +
              sim::experiments::LoadText(p.load) + ")";
    }
    std::fprintf(stderr, "workload%s: %s\n", where.c_str(),
                 p.workload.description.c_str());
    // Jobs larger than the cluster never run: said, counted (jobs_skipped)
    // and the first named.
    const int cluster = p.gpus / f.gpus_per_server * f.gpus_per_server;
    int64_t oversized = 0;
    std::string named;
    for (const sim::TraceJob& j : p.workload.jobs) {
      if (j.gpus <= cluster) continue;
      if (++oversized <= 5) {
        named += (named.empty() ? "" : ", ") + j.name + " (" +
                 std::to_string(j.gpus) + " GPUs)";
      }
    }
    if (oversized > 0) {
      std::fprintf(stderr,
                   "warning%s: %lld %s for more GPUs than the cluster's %d "
                   "and %s skipped (jobs_skipped): %s%s\n",
                   where.c_str(), static_cast<long long>(oversized),
                   oversized == 1 ? "job asks" : "jobs ask", cluster,
                   oversized == 1 ? "is" : "are", named.c_str(),
                   oversized > 5 ? ", ..." : "");
    }
    if (!p.policy_options.fifo.vc_quotas.empty()) {
      std::string shown;
      for (const auto& [vc, q] : p.policy_options.fifo.vc_quotas) {
        shown += (shown.empty() ? "" : " ") + (vc.empty() ? "(none)" : vc) +
                 ":" + std::to_string(q);
      }
      std::fprintf(stderr, "fifo VC quotas (GPUs)%s: %s\n", where.c_str(),
                   shown.c_str());
    }
  }

  std::vector<sim::experiments::SweepRun> runs;
  for (const Point& p : points) {
    for (const std::string& name : names) {
      sim::experiments::SweepRun r;
      r.policy = name;
      r.seed = p.seed;
      r.gpus = p.gpus;
      r.load = p.load;
      runs.push_back(std::move(r));
    }
  }
  // One run alone shows a progress bar; side by side, a line as each ends.
  const bool alone = runs.size() == 1 || parallel == 1;
  std::mutex mu;
  size_t ended = 0;
  std::vector<std::string> errors(runs.size());
  sim::experiments::RunParallel(runs.size(), parallel, [&](size_t i) {
    sim::experiments::SweepRun& run = runs[i];
    const Point& p = points[i / names.size()];
    auto policy = core::MakePolicy(run.policy, p.policy_options);
    if (!policy.ok()) {
      errors[i] = "--policy: " + policy.status().message();
      return;
    }
    sim::SimOptions so = p.options;
    ProgressBar bar(run.policy);
    if (f.progress && alone) so.progress = [&bar](double x) { bar.Update(x); };
    auto r = sim::Simulate(p.workload, *catalog, std::move(*policy), so);
    if (!r.ok()) {
      errors[i] = r.status().ToString();
      return;
    }
    if (r->fairness) {
      // Each queue alone on its quota, for finish-time fairness.
      const auto policy_alone =
          [&](const std::vector<core::QueueConfig>& queues) {
            core::PolicyOptions po = p.policy_options;
            po.queues = queues;
            po.fifo.vc_quotas = core::LeafQuotas(queues);
            return core::MakePolicy(run.policy, po);
          };
      const double wall = r->wall_s;
      const auto began = std::chrono::steady_clock::now();
      if (core::Status m = sim::MeasureFinishTimeFairness(
              p.workload, *catalog, p.options, policy_alone, *r);
          !m.ok()) {
        errors[i] = m.ToString();
        return;
      }
      r->wall_s = wall + std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - began)
                             .count();
    }
    run.result = std::move(*r);
    if (!alone) {
      std::lock_guard lock(mu);
      std::fprintf(
          stderr,
          "run %zu/%zu ended: %s, seed %llu, %d GPUs, load %s (%.1f s)\n",
          ++ended, runs.size(), run.policy.c_str(),
          static_cast<unsigned long long>(run.seed), run.gpus,
          sim::experiments::LoadText(run.load).c_str(), run.result.wall_s);
    }
  });
  for (const std::string& e : errors) {
    if (!e.empty()) return Fail(e);
  }

  if (sweep) {
    std::printf("%s", sim::experiments::SweepTable(runs).c_str());
  } else {
    std::vector<sim::SimResult> results;
    for (const sim::experiments::SweepRun& r : runs)
      results.push_back(r.result);
    std::printf("%s", sim::SummaryTable(results).c_str());
  }
  // A file per run: its name tagged with the policy, and in a sweep with
  // its seed, GPUs and load too.
  auto with_suffix = [&](const std::string& path,
                         const sim::experiments::SweepRun& r) {
    if (runs.size() == 1) return path;
    std::string tag = r.policy;
    if (sweep) {
      tag += ".seed" + std::to_string(r.seed) + ".gpus" +
             std::to_string(r.gpus) + ".load" +
             sim::experiments::LoadText(r.load);
    }
    const size_t dot = path.rfind('.');
    return dot == std::string::npos || dot < path.rfind('/') + 1
               ? path + "." + tag
               : path.substr(0, dot) + "." + tag + path.substr(dot);
  };
  if (sweep && !f.json.empty() &&
      !WriteFile(f.json, sim::experiments::SweepJson(runs))) {
    return 1;
  }
  if (!f.csv.empty() && !WriteFile(f.csv, sim::experiments::SweepCsv(runs)))
    return 1;
  if (!f.plot.empty() &&
      !WriteFile(f.plot, *sim::experiments::SweepSvg(runs, f.plot_metric))) {
    return 1;
  }
  for (const sim::experiments::SweepRun& run : runs) {
    const sim::SimResult& r = run.result;
    if (!sweep && !f.json.empty() &&
        !WriteFile(with_suffix(f.json, run), sim::ResultJson(r))) {
      return 1;
    }
    if (!f.per_job.empty() &&
        !WriteFile(with_suffix(f.per_job, run), sim::PerJobCsv(r, *catalog))) {
      return 1;
    }
    if (!f.timeline.empty()) {
      std::string csv =
          "time_s,running,queued,suspended,gpus_training,height\n";
      for (const auto& t : r.timeline) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%.0f,%d,%d,%d,%.4f,%d\n",
                      t.time.seconds(), t.running_jobs, t.queued_jobs,
                      t.suspended_jobs, t.gpus_training, t.cluster_height);
        csv += buf;
      }
      if (!WriteFile(with_suffix(f.timeline, run), csv)) return 1;
    }
  }
  return 0;
}

}  // namespace

void AddSimCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<SimFlags>();
  CLI::App* sim = app.add_subcommand(
      "sim", "Replay a workload in the simulator under one or more policies");
  sim->add_option("--policy", flags->policies,
                  "Policy, or several separated by commas (see `gandiva "
                  "policies`)")
      ->capture_default_str();
  sim->add_option("--workload", flags->workload,
                  "Generated workload: gandiva-synthetic")
      ->capture_default_str();
  sim->add_option("--jobs", flags->jobs, "Jobs in the synthetic workload")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sim->add_option("--tenants", flags->tenants,
                  "Teams submitting the synthetic workload (each job's VC "
                  "'tenant-K', team K with weight 1/(K+1)); 0: none. With "
                  "--queues vc each team is a queue")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  sim->add_option("--window", flags->window_s,
                  "Arrival window of the synthetic workload in seconds "
                  "(default: scaled to keep the paper's load per GPU)");
  sim->add_option("--trace", flags->trace, "Replay this trace file instead")
      ->check(CLI::ExistingFile);
  sim->add_option("--format", flags->format,
                  "Trace format: philly, gavel or tiresias")
      ->capture_default_str();
  sim->add_option("--vc", flags->vc, "Philly: keep one virtual cluster");
  sim->add_option("--max-jobs", flags->max_jobs,
                  "Keep the first N jobs of the trace (0: all)");
  sim->add_option("--min-duration", flags->min_duration_s,
                  "Philly: drop jobs shorter than this many seconds");
  sim->add_flag("--skip-unknown", flags->skip_unknown,
                "Gavel: skip jobs whose (type, GPUs) has no throughput");
  sim->add_option("--gpus", flags->gpus,
                  "GPUs in the cluster; a list (256,512) or range sweeps them")
      ->capture_default_str();
  sim->add_option("--gpus-per-server", flags->gpus_per_server,
                  "GPUs per server")
      ->capture_default_str();
  sim->add_option("--sockets", flags->sockets, "CPU sockets per server")
      ->capture_default_str();
  sim->add_option("--switches-per-socket", flags->switches_per_socket,
                  "PCIe switches per socket")
      ->capture_default_str();
  sim->add_option("--seed", flags->seeds,
                  "Seed for every random choice; a list (1,2) or range "
                  "(1..5) sweeps them")
      ->capture_default_str();
  sim->add_option("--load", flags->loads,
                  "Arrivals this many times as fast as the workload's; a "
                  "list (0.5,1,2) sweeps them")
      ->capture_default_str();
  sim->add_option("--jobs-parallel", flags->jobs_parallel,
                  "Runs side by side (default: the machine's cores)")
      ->check(CLI::PositiveNumber);
  sim->add_option("--json", flags->json,
                  "Write the summary as JSON: one file per policy, or for a "
                  "sweep (several seeds, GPU counts or loads) one list");
  sim->add_option("--csv", flags->csv,
                  "Write one CSV row per run: its inputs and metrics");
  sim->add_option("--plot", flags->plot,
                  "Write an SVG plot of --plot-metric against the GPUs, the "
                  "load or the seed, one line per policy");
  sim->add_option("--plot-metric", flags->plot_metric,
                  "The metric --plot shows, named as in --json")
      ->capture_default_str();
  sim->add_option("--per-job", flags->per_job, "Write one CSV row per job");
  sim->add_option("--timeline", flags->timeline,
                  "Write the cluster's state each minute as CSV");
  sim->add_option("--quantum", flags->quantum_s, "Time-slice in seconds")
      ->capture_default_str();
  sim->add_option("--tick", flags->tick_s, "Seconds between scheduling ticks")
      ->capture_default_str();
  sim->add_option("--max-height", flags->max_height,
                  "Most jobs per GPU a server takes, on average (0: no limit)")
      ->capture_default_str();
  sim->add_option("--starvation-timeout", flags->starvation_s,
                  "Seconds before a queued job may share any server (-1: "
                  "never)")
      ->capture_default_str();
  sim->add_option("--gpu-type", flags->gpu_type,
                  "Catalog rates for k80, p100 or v100")
      ->capture_default_str();
  sim->add_option("--data-dir", flags->data_dir,
                  "Where the catalog and traces are (default: "
                  "$GANDIVA_DATA_DIR or the built-in path)");
  sim->add_option("--vc-quotas", flags->vc_quotas,
                  "fifo: none (one queue) or proportional (each virtual "
                  "cluster its own FIFO queue with a GPU quota in proportion "
                  "to its GPU-time demand)")
      ->capture_default_str();
  sim->add_option(
         "--queues", flags->queues,
         "none; vc: each virtual cluster a queue (team) with a GPU quota "
         "in proportion to its GPU-time demand (fifo keeps to the quotas, as "
         "with --vc-quotas proportional); or a YAML file of queues, a tree "
         "(as gandiva-scheduler --queues takes it; a job's VC names its "
         "leaf). The run measures how fairly the queues shared the cluster "
         "(jain_fairness, share_windows_within_10pct, per-queue GPU-hours)")
      ->capture_default_str();
  sim->add_option("--checkpoint-interval", flags->checkpoint_interval_s,
                  "Seconds of training between a job's checkpoints: a job "
                  "killed by a reclaim (drf-reclaim) restarts from its last "
                  "one, and the training since is lost (lost_gpu_hours); 0: "
                  "none")
      ->capture_default_str();
  sim->add_option("--share-half-life", flags->share_half_life_s,
                  "gandiva-fair: seconds in which what a queue is owed (or "
                  "owes) against its fair share fades by half")
      ->capture_default_str();
  sim->add_flag("--allow-borrowing", flags->allow_borrowing,
                "fifo with --vc-quotas: a VC may use idle GPUs beyond its "
                "quota (never preempting)");
  sim->add_option("--drain", flags->drains,
                  "SERVER@SECONDS: drain server SERVER (0..servers-1) at "
                  "that time: cordon it and move its jobs off (repeatable)")
      ->delimiter(',');
  sim->add_option("--server-down", flags->downs,
                  "SERVER@SECONDS: lose the server then; its jobs start "
                  "again elsewhere (repeatable)")
      ->delimiter(',');
  sim->add_option("--server-up", flags->ups,
                  "SERVER@SECONDS: bring a lost server back then (repeatable)")
      ->delimiter(',');
  sim->add_option("--agent-restart", flags->restarts,
                  "SERVER@SECONDS: the server's agent restarts then, keeping "
                  "a checkpoint of each job there: they go on from it "
                  "(repeatable)")
      ->delimiter(',');
  sim->add_option("--agent-crash", flags->crashes,
                  "SERVER@SECONDS: the server's agent restarts then with "
                  "nothing kept: its jobs start again from the beginning "
                  "(repeatable)")
      ->delimiter(',');
  sim->add_flag("!--no-progress", flags->progress, "No progress bar");
  sim->callback([flags, &exit_code] { exit_code = RunSim(*flags); });
}

}  // namespace gandiva::cli
