// Simulator speed. Prints its figures; asserts nothing. Four parts:
//  1. the paper's 1,000-job run on 180 GPUs, median of several repetitions,
//     policies side by side;
//  2. cost per event (wall time / events handled) at 1,000, 10,000 and
//     100,000 GPUs (ten synthetic jobs per GPU), each policy side by side,
//     with each run's wall time and peak memory;
//  3. memory per GPU and per job, from the peak memory of a run with few
//     jobs on few GPUs, few jobs on many GPUs, and many jobs on many GPUs;
//  4. the whole shipped Philly table (data/philly) on 512 GPUs, each policy's
//     cost per event.
// Each run of parts 2-4 is a process of its own (this program run again
// with --run-one), so that its peak memory is its own.
//
//   gandiva_bench_sim [--reps N] [--policies a,b] [--scale-gpus a,b,c]
//                     [--jobs-per-gpu N] [--scale-policies a,b]
//                     [--philly-gpus N] [--philly-policies a,b]
//                     [--skip-small] [--skip-scale] [--skip-memory]
//                     [--skip-philly]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/policies/registry.h"
#include "sim/simulator.h"
#include "sim/workload/catalog.h"
#include "sim/workload/synthetic.h"
#include "sim/workload/trace_reader.h"

namespace {

using namespace gandiva;

sim::SimResult RunOnce(const sim::Workload& w, const sim::Catalog& catalog,
                       const std::string& policy, int gpus) {
  auto p = core::MakePolicy(policy);
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", p.status().ToString().c_str());
    std::exit(2);
  }
  sim::SimOptions o;
  o.servers = gpus / 4;
  o.server.gpus = 4;
  auto r = sim::Simulate(w, catalog, std::move(*p), o);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
    std::exit(2);
  }
  return std::move(*r);
}

// What a run in a child process reports.
struct Figures {
  double wall_s = 0;
  long long events = 0;
  long long jobs = 0;
  double peak_mib = 0;  // the child's peak resident memory
  bool ok = false;
};

double MicrosPerEvent(const Figures& f) {
  return f.events == 0 ? 0 : 1e6 * f.wall_s / static_cast<double>(f.events);
}

// One run in a fresh process (this program again, with --run-one), so
// that its peak memory is its own: `what` is "synthetic POLICY JOBS GPUS"
// or "philly POLICY GPUS". Returns its figures and peak memory.
Figures InChild(const std::vector<std::string>& what) {
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("pipe");
    std::exit(2);
  }
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(2);
  }
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDOUT_FILENO);
    std::vector<std::string> args = {"gandiva_bench_sim", "--run-one"};
    args.insert(args.end(), what.begin(), what.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    std::perror("execv");
    _exit(3);
  }
  close(fds[1]);
  std::string text;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) {
    text.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  rusage u{};
  wait4(pid, &status, 0, &u);
  Figures f;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      std::sscanf(text.c_str(), "%lf %lld %lld", &f.wall_s, &f.events,
                  &f.jobs) != 3) {
    std::fprintf(stderr, "a child run failed (status %d)\n", status);
    return Figures{};
  }
  f.ok = true;
  f.peak_mib = static_cast<double>(u.ru_maxrss) / 1024.0;
  return f;
}

// The child's side of InChild: runs `what` and prints its figures.
int RunOne(const sim::Catalog& catalog, const std::vector<std::string>& what) {
  sim::SimResult r;
  if (what.size() == 4 && what[0] == "synthetic") {
    sim::SyntheticOptions so;
    so.jobs = std::atoi(what[2].c_str());
    so.total_gpus = std::atoi(what[3].c_str());
    const sim::Workload w = sim::GenerateSynthetic(catalog, so);
    r = RunOnce(w, catalog, what[1], so.total_gpus);
  } else if (what.size() == 3 && what[0] == "philly") {
    auto w = sim::ReadPhillyTrace(
        sim::DefaultDataDir() + "/philly/philly_jobs_excl_6c71a0.csv", catalog);
    if (!w.ok()) {
      std::fprintf(stderr, "%s\n", w.status().ToString().c_str());
      return 2;
    }
    r = RunOnce(*w, catalog, what[1], std::atoi(what[2].c_str()));
  } else {
    std::fprintf(stderr,
                 "--run-one: synthetic POLICY JOBS GPUS or philly "
                 "POLICY GPUS\n");
    return 2;
  }
  std::printf("%.6f %lld %lld\n", r.wall_s, static_cast<long long>(r.events),
              static_cast<long long>(r.jobs));
  return 0;
}

Figures Synthetic(const std::string& policy, int jobs, int gpus) {
  return InChild(
      {"synthetic", policy, std::to_string(jobs), std::to_string(gpus)});
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string Thousands(long long n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) {
    s.insert(static_cast<size_t>(i), ",");
  }
  return s;
}

double LoadAverage() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::string policies = "fifo,gandiva-timeslice,gandiva";
  std::string scale_gpus = "1000,10000,100000";
  int jobs_per_gpu = 10;
  std::string scale_policies =
      "fifo,gandiva-reactive,gandiva-timeslice,gandiva,tiresias-las";
  int philly_gpus = 512;
  std::string philly_policies = "gandiva,tiresias-las";
  bool skip_small = false, skip_scale = false, skip_memory = false,
       skip_philly = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    const std::string a = argv[i];
    if (a == "--run-one") {
      auto catalog = sim::Catalog::Load(sim::DefaultDataDir());
      if (!catalog.ok()) return 2;
      return RunOne(*catalog,
                    std::vector<std::string>(argv + i + 1, argv + argc));
    } else if (a == "--reps") {
      reps = std::atoi(next());
    } else if (a == "--policies") {
      policies = next();
    } else if (a == "--scale-gpus") {
      scale_gpus = next();
    } else if (a == "--jobs-per-gpu") {
      jobs_per_gpu = std::atoi(next());
    } else if (a == "--scale-policies") {
      scale_policies = next();
    } else if (a == "--philly-gpus") {
      philly_gpus = std::atoi(next());
    } else if (a == "--philly-policies") {
      philly_policies = next();
    } else if (a == "--skip-small") {
      skip_small = true;
    } else if (a == "--skip-scale") {
      skip_scale = true;
    } else if (a == "--skip-memory") {
      skip_memory = true;
    } else if (a == "--skip-philly") {
      skip_philly = true;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (reps < 1 || jobs_per_gpu < 1 || philly_gpus < 4) {
    std::fprintf(stderr,
                 "--reps and --jobs-per-gpu must be >= 1, --philly-gpus "
                 ">= 4\n");
    return 2;
  }
  auto catalog = sim::Catalog::Load(sim::DefaultDataDir());
  if (!catalog.ok()) {
    std::fprintf(stderr, "%s\n", catalog.status().ToString().c_str());
    return 2;
  }
  std::printf("load average at start: %.2f\n\n", LoadAverage());

  if (!skip_small) {
    sim::SyntheticOptions so;
    const sim::Workload small = sim::GenerateSynthetic(*catalog, so);
    std::printf("1,000 jobs on 180 GPUs (45 x 4), median of %d runs\n", reps);
    std::printf("%-18s %10s %10s %10s %12s %12s\n", "policy", "median_s",
                "min_s", "max_s", "events", "us_per_event");
    for (const std::string& policy : Split(policies)) {
      std::vector<double> walls;
      int64_t events = 0;
      for (int r = 0; r < reps; ++r) {
        sim::SimResult res = RunOnce(small, *catalog, policy, 180);
        walls.push_back(res.wall_s);
        events = res.events;
      }
      std::sort(walls.begin(), walls.end());
      const double median = walls[walls.size() / 2];
      std::printf("%-18s %10.4f %10.4f %10.4f %12lld %12.3f\n", policy.c_str(),
                  median, walls.front(), walls.back(),
                  static_cast<long long>(events),
                  1e6 * median / static_cast<double>(events));
    }
    std::printf("\n");
  }

  std::vector<int> gpu_counts;
  for (const std::string& g : Split(scale_gpus)) {
    const int n = std::atoi(g.c_str());
    if (n < 4 || n % 4 != 0) {
      std::fprintf(stderr, "--scale-gpus: %s is not a multiple of 4\n",
                   g.c_str());
      return 2;
    }
    gpu_counts.push_back(n);
  }
  // policy -> GPUs -> figures
  std::map<std::string, std::map<int, Figures>> scale;
  if (!skip_scale && !gpu_counts.empty()) {
    std::printf(
        "Synthetic workload, %d jobs per GPU (4-GPU servers), one run each "
        "(a child process)\n",
        jobs_per_gpu);
    std::printf("%-18s %8s %10s %12s %10s %12s %10s\n", "policy", "gpus",
                "jobs", "events", "wall_s", "us_per_event", "peak_MiB");
    for (const std::string& policy : Split(scale_policies)) {
      for (int gpus : gpu_counts) {
        const Figures f = Synthetic(policy, jobs_per_gpu * gpus, gpus);
        scale[policy][gpus] = f;
        std::printf("%-18s %8d %10lld %12lld %10.2f %12.3f %10.1f\n",
                    policy.c_str(), gpus, f.jobs, f.events, f.wall_s,
                    MicrosPerEvent(f), f.peak_mib);
        std::fflush(stdout);
      }
    }
    std::printf("\nCost per event (us), side by side\n%-18s", "policy");
    for (int gpus : gpu_counts) {
      std::printf(" %14s", (Thousands(gpus) + " GPUs").c_str());
    }
    std::printf(" %10s\n", "max/min");
    for (const std::string& policy : Split(scale_policies)) {
      std::printf("%-18s", policy.c_str());
      double lo = 0, hi = 0;
      for (int gpus : gpu_counts) {
        const double c = MicrosPerEvent(scale[policy][gpus]);
        std::printf(" %14.3f", c);
        if (c > 0) {
          lo = lo == 0 ? c : std::min(lo, c);
          hi = std::max(hi, c);
        }
      }
      std::printf(" %10.2f\n", lo > 0 ? hi / lo : 0.0);
    }
    std::printf("\n");
  }

  if (!skip_memory && !gpu_counts.empty()) {
    // Few jobs on few GPUs, few jobs on the most GPUs, and the most jobs on
    // the most GPUs (the scale run's, when it was made): the differences
    // give the memory per GPU and per job.
    const int few = 1000;
    const int most_gpus =
        *std::max_element(gpu_counts.begin(), gpu_counts.end());
    const int most_jobs = jobs_per_gpu * most_gpus;
    const Figures base = Synthetic("gandiva", few, 1000);
    const Figures gpus_only = Synthetic("gandiva", few, most_gpus);
    Figures all = scale["gandiva"][most_gpus];
    if (!all.ok) all = Synthetic("gandiva", most_jobs, most_gpus);
    const double per_gpu =
        (gpus_only.peak_mib - base.peak_mib) * 1048576.0 / (most_gpus - 1000);
    const double per_job =
        (all.peak_mib - gpus_only.peak_mib) * 1048576.0 / (most_jobs - few);
    std::printf("Memory (gandiva, peak resident, workload included)\n");
    std::printf(
        "  %s jobs on 1,000 GPUs: %.1f MiB; on %s GPUs: %.1f MiB; "
        "%s jobs on %s GPUs: %.1f MiB\n",
        Thousands(few).c_str(), base.peak_mib, Thousands(most_gpus).c_str(),
        gpus_only.peak_mib, Thousands(most_jobs).c_str(),
        Thousands(most_gpus).c_str(), all.peak_mib);
    std::printf("  per GPU: %.0f bytes; per job: %.0f bytes\n\n", per_gpu,
                per_job);
  }

  if (!skip_philly) {
    const std::string trace =
        sim::DefaultDataDir() + "/philly/philly_jobs_excl_6c71a0.csv";
    std::printf("The whole Philly table (%s) on %d GPUs, one run each\n",
                trace.c_str(), philly_gpus);
    std::printf("%-18s %10s %12s %10s %12s %10s\n", "policy", "jobs", "events",
                "wall_s", "us_per_event", "peak_MiB");
    std::map<std::string, double> cost;
    for (const std::string& policy : Split(philly_policies)) {
      const Figures f =
          InChild({"philly", policy, std::to_string(philly_gpus)});
      cost[policy] = MicrosPerEvent(f);
      std::printf("%-18s %10lld %12lld %10.2f %12.3f %10.1f\n", policy.c_str(),
                  f.jobs, f.events, f.wall_s, MicrosPerEvent(f), f.peak_mib);
      std::fflush(stdout);
    }
    if (cost.count("gandiva") && cost["gandiva"] > 0) {
      for (const auto& [policy, c] : cost) {
        if (policy == "gandiva") continue;
        std::printf("  %s / gandiva cost per event: %.2f\n", policy.c_str(),
                    c / cost["gandiva"]);
      }
    }
  }
  std::printf("load average at end: %.2f\n", LoadAverage());
  return 0;
}
