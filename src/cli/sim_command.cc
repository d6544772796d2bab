// `gandiva sim`: run policies on one workload in the simulator.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli/commands.h"
#include "core/policies/registry.h"
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
  double window_s = 0;
  std::string trace;
  std::string format = "philly";
  std::string vc;
  size_t max_jobs = 0;
  double min_duration_s = 0;
  bool skip_unknown = false;
  int gpus = 180;
  int gpus_per_server = 4;
  int sockets = 1;
  int switches_per_socket = 1;
  uint64_t seed = 1;
  std::string json;
  std::string per_job;
  std::string timeline;
  double quantum_s = 60;
  double tick_s = 60;
  int max_height = 4;
  double starvation_s = 300;
  std::string gpu_type = "v100";
  std::string vc_quotas = "none";
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

int RunSim(const SimFlags& f) {
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "gandiva sim: %s\n", msg.c_str());
    return 2;
  };
  if (f.gpus_per_server < 1) {
    return fail("--gpus-per-server: must be at least 1");
  }
  if (f.gpus < 1 || f.gpus % f.gpus_per_server != 0) {
    return fail("--gpus: must be a positive multiple of --gpus-per-server (" +
                std::to_string(f.gpus_per_server) + "), got " +
                std::to_string(f.gpus));
  }
  if (f.quantum_s <= 0) return fail("--quantum: must be positive");
  if (f.tick_s <= 0) return fail("--tick: must be positive");
  auto gpu_type = sim::ParseGpuType(f.gpu_type);
  if (!gpu_type.ok()) return fail("--gpu-type: " + gpu_type.status().message());
  const std::string data_dir =
      f.data_dir.empty() ? sim::DefaultDataDir() : f.data_dir;
  auto catalog = sim::Catalog::Load(data_dir, *gpu_type);
  if (!catalog.ok()) return fail(catalog.status().ToString());

  // The workload.
  sim::Workload workload;
  if (!f.trace.empty()) {
    core::StatusOr<sim::Workload> w = core::InvalidArgument("");
    if (f.format == "philly") {
      sim::PhillyOptions o;
      o.vc = f.vc;
      o.max_jobs = f.max_jobs;
      o.min_duration = core::Duration::FromSeconds(f.min_duration_s);
      o.seed = f.seed;
      w = sim::ReadPhillyTrace(f.trace, *catalog, o);
    } else if (f.format == "gavel") {
      sim::GavelOptions o;
      o.skip_unknown = f.skip_unknown;
      w = sim::ReadGavelTrace(f.trace, *catalog, o);
    } else if (f.format == "tiresias") {
      w = sim::ReadTiresiasTrace(f.trace, *catalog);
    } else {
      return fail("--format: expected philly, gavel or tiresias, got '" +
                  f.format + "'");
    }
    if (!w.ok()) return fail(w.status().ToString());
    workload = std::move(*w);
    if (f.trace.size() && f.format != "philly" && f.max_jobs > 0 &&
        workload.jobs.size() > f.max_jobs) {
      workload.jobs.resize(f.max_jobs);
    }
  } else if (f.workload == "gandiva-synthetic") {
    sim::SyntheticOptions o;
    o.jobs = f.jobs;
    o.total_gpus = f.gpus;
    o.seed = f.seed;
    if (f.window_s > 0) o.window = core::Duration::FromSeconds(f.window_s);
    if (core::Status st = sim::ValidateSyntheticOptions(*catalog, o);
        !st.ok()) {
      return fail(st.ToString());
    }
    workload = sim::GenerateSynthetic(*catalog, o);
  } else {
    return fail(
        "--workload: expected gandiva-synthetic (or use --trace), "
        "got '" +
        f.workload + "'");
  }
  std::fprintf(stderr, "workload: %s\n", workload.description.c_str());

  sim::SimOptions so;
  so.servers = f.gpus / f.gpus_per_server;
  so.server.gpus = f.gpus_per_server;
  so.server.sockets = f.sockets;
  so.server.switches_per_socket = f.switches_per_socket;
  if (std::string err = core::ValidateServerSpec(so.server); !err.empty()) {
    return fail("server topology: " + err);
  }
  so.tick = core::Duration::FromSeconds(f.tick_s);
  using Kind = sim::ClusterEvent::Kind;
  for (const auto& [flag, texts, kind] :
       {std::tuple{"--drain", &f.drains, Kind::kDrain},
        std::tuple{"--server-down", &f.downs, Kind::kServerDown},
        std::tuple{"--server-up", &f.ups, Kind::kServerUp},
        std::tuple{"--agent-restart", &f.restarts, Kind::kAgentRestart},
        std::tuple{"--agent-crash", &f.crashes, Kind::kAgentRestart}}) {
    for (const std::string& text : *texts) {
      auto e = ParseClusterEvent(flag, text, kind, so.servers);
      if (!e.ok()) return fail(e.status().message());
      e->keep_checkpoints = texts == &f.restarts;
      so.cluster_events.push_back(*e);
    }
  }
  if (!f.timeline.empty()) so.timeline_every = core::Duration::Seconds(60);

  core::PolicyOptions po;
  po.gandiva.quantum = core::Duration::FromSeconds(f.quantum_s);
  po.gandiva.max_height = f.max_height;
  po.gandiva.starvation_timeout =
      f.starvation_s < 0 ? core::Duration::Infinite()
                         : core::Duration::FromSeconds(f.starvation_s);

  if (f.vc_quotas == "proportional") {
    std::map<std::string, double> demand;
    for (const sim::TraceJob& j : workload.jobs) {
      demand[j.vc] += j.duration.seconds() * j.gpus;
    }
    po.fifo.vc_quotas =
        core::ProportionalVcQuotas(std::vector<std::pair<std::string, double>>(
                                       demand.begin(), demand.end()),
                                   f.gpus);
    po.fifo.allow_borrowing = f.allow_borrowing;
    std::string shown;
    for (const auto& [vc, q] : po.fifo.vc_quotas) {
      shown += (shown.empty() ? "" : " ") + (vc.empty() ? "(none)" : vc) + ":" +
               std::to_string(q);
    }
    std::fprintf(stderr, "fifo VC quotas (GPUs): %s\n", shown.c_str());
  } else if (f.vc_quotas != "none") {
    return fail("--vc-quotas: expected none or proportional, got '" +
                f.vc_quotas + "'");
  }

  const std::vector<std::string> names = Split(f.policies);
  if (names.empty()) return fail("--policy: give at least one policy");
  std::vector<sim::SimResult> results;
  for (const std::string& name : names) {
    auto policy = core::MakePolicy(name, po);
    if (!policy.ok()) return fail("--policy: " + policy.status().message());
    ProgressBar bar(name);
    if (f.progress) so.progress = [&bar](double x) { bar.Update(x); };
    auto r = sim::Simulate(workload, *catalog, std::move(*policy), so);
    if (!r.ok()) return fail(r.status().ToString());
    results.push_back(std::move(*r));
  }
  std::printf("%s", sim::SummaryTable(results).c_str());

  auto with_suffix = [&](const std::string& path, const std::string& policy) {
    if (results.size() == 1) return path;
    const size_t dot = path.rfind('.');
    return dot == std::string::npos || dot < path.rfind('/') + 1
               ? path + "." + policy
               : path.substr(0, dot) + "." + policy + path.substr(dot);
  };
  for (const sim::SimResult& r : results) {
    if (!f.json.empty() &&
        !WriteFile(with_suffix(f.json, r.policy), sim::ResultJson(r))) {
      return 1;
    }
    if (!f.per_job.empty() && !WriteFile(with_suffix(f.per_job, r.policy),
                                         sim::PerJobCsv(r, *catalog))) {
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
      if (!WriteFile(with_suffix(f.timeline, r.policy), csv)) return 1;
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
  sim->add_option("--gpus", flags->gpus, "GPUs in the cluster")
      ->capture_default_str();
  sim->add_option("--gpus-per-server", flags->gpus_per_server,
                  "GPUs per server")
      ->capture_default_str();
  sim->add_option("--sockets", flags->sockets, "CPU sockets per server")
      ->capture_default_str();
  sim->add_option("--switches-per-socket", flags->switches_per_socket,
                  "PCIe switches per socket")
      ->capture_default_str();
  sim->add_option("--seed", flags->seed, "Seed for every random choice")
      ->capture_default_str();
  sim->add_option("--json", flags->json,
                  "Write the summary as JSON (one file per policy)");
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
