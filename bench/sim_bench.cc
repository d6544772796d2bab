// Simulator speed: the paper's 1,000-job run (median of several repetitions,
// fifo and gandiva side by side) and a 100,000-job run on 10,000 GPUs, with
// the process's peak memory. Prints its figures; asserts nothing.
//
//   gandiva_bench_sim [--reps N] [--large-jobs N] [--large-gpus N]
//                     [--policies a,b] [--skip-large]
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/policies/registry.h"
#include "sim/simulator.h"
#include "sim/workload/catalog.h"
#include "sim/workload/synthetic.h"

namespace {

using namespace gandiva;

double PeakRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

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

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  int large_jobs = 100000;
  int large_gpus = 10000;
  bool skip_large = false;
  std::string policies = "fifo,gandiva-timeslice,gandiva";
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--reps"))
      reps = std::atoi(next());
    else if (!std::strcmp(argv[i], "--large-jobs"))
      large_jobs = std::atoi(next());
    else if (!std::strcmp(argv[i], "--large-gpus"))
      large_gpus = std::atoi(next());
    else if (!std::strcmp(argv[i], "--policies"))
      policies = next();
    else if (!std::strcmp(argv[i], "--skip-large"))
      skip_large = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  auto catalog = sim::Catalog::Load(sim::DefaultDataDir());
  if (!catalog.ok()) {
    std::fprintf(stderr, "%s\n", catalog.status().ToString().c_str());
    return 2;
  }

  sim::SyntheticOptions so;
  const sim::Workload small = sim::GenerateSynthetic(*catalog, so);
  std::printf("1,000 jobs on 180 GPUs (45 x 4), median of %d runs\n", reps);
  std::printf("%-18s %10s %10s %10s %12s\n", "policy", "median_s", "min_s",
              "max_s", "events");
  for (const std::string& policy : Split(policies)) {
    std::vector<double> walls;
    int64_t events = 0;
    for (int r = 0; r < reps; ++r) {
      sim::SimResult res = RunOnce(small, *catalog, policy, 180);
      walls.push_back(res.wall_s);
      events = res.events;
    }
    std::sort(walls.begin(), walls.end());
    std::printf("%-18s %10.4f %10.4f %10.4f %12lld\n", policy.c_str(),
                walls[walls.size() / 2], walls.front(), walls.back(),
                static_cast<long long>(events));
  }
  if (skip_large) return 0;

  so.jobs = large_jobs;
  so.total_gpus = large_gpus;
  const sim::Workload large = sim::GenerateSynthetic(*catalog, so);
  std::printf("\n%d jobs on %d GPUs (%d x 4), one run each\n", large_jobs,
              large_gpus, large_gpus / 4);
  std::printf("%-18s %10s %12s %14s %16s\n", "policy", "wall_s", "events",
              "events_per_s", "peak_rss_MiB");
  for (const std::string& policy : Split(policies)) {
    sim::SimResult res = RunOnce(large, *catalog, policy, large_gpus);
    std::printf("%-18s %10.2f %12lld %14.0f %16.1f\n", policy.c_str(),
                res.wall_s, static_cast<long long>(res.events),
                static_cast<double>(res.events) / res.wall_s, PeakRssMiB());
  }
  std::printf("(peak RSS is the process's high-water mark so far)\n");
  return 0;
}
