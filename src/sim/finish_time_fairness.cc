#include "sim/finish_time_fairness.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace gandiva::sim {

core::Status MeasureFinishTimeFairness(const Workload& workload,
                                       const Catalog& catalog,
                                       const SimOptions& options,
                                       const PolicyForQueues& make,
                                       SimResult& shared) {
  if (!shared.fairness) {
    return core::InvalidArgument(
        "finish-time fairness: the run was not measured with queues");
  }
  const int per_server = options.server.gpus;
  const int total = options.servers * per_server;
  // Each simulated job's result in the shared run: per_job leaves out the
  // jobs larger than the cluster.
  std::vector<const JobResult*> in_shared(workload.jobs.size(), nullptr);
  size_t next = 0;
  for (size_t i = 0; i < workload.jobs.size(); ++i) {
    if (workload.jobs[i].gpus > total) continue;
    if (next >= shared.per_job.size()) {
      return core::InvalidArgument(
          "finish-time fairness: the run's jobs do not match the workload");
    }
    in_shared[i] = &shared.per_job[next++];
  }
  std::vector<double> rhos;
  const core::QueueQuotas queues(options.queues);
  for (size_t q = 0; q < queues.size(); ++q) {
    const std::string& queue = queues.name(q);
    const int quota = queues.quota(q);
    if (quota <= 0 || !queues.leaf(q)) continue;
    Workload alone;
    alone.description = workload.description + " (queue " + queue + " alone)";
    std::vector<size_t> index;  // into workload.jobs
    int largest = 0;
    for (size_t i = 0; i < workload.jobs.size(); ++i) {
      const TraceJob& tj = workload.jobs[i];
      if (tj.vc != queue || !in_shared[i]) continue;
      alone.jobs.push_back(tj);
      index.push_back(i);
      largest = std::max(largest, tj.gpus);
    }
    if (alone.jobs.empty()) continue;
    const int gpus = std::max(quota, largest);
    SimOptions o = options;
    if (gpus < per_server) {
      // Part of a server: one server of that many GPUs.
      o.servers = 1;
      o.server.gpus = gpus;
      o.server.sockets = 1;
      o.server.switches_per_socket = 1;
    } else {
      o.servers = (gpus + per_server - 1) / per_server;
    }
    o.cluster_events.clear();
    o.timeline_every = core::Duration();
    o.snapshot_every_events = 0;
    o.progress = nullptr;
    o.on_tick = nullptr;
    const std::vector<core::QueueConfig> alone_queues = {
        {.name = queue, .quota = o.servers * o.server.gpus}};
    o.queues.clear();
    auto policy = make(alone_queues);
    if (!policy.ok()) return policy.status();
    auto r = Simulate(alone, catalog, std::move(*policy), o);
    if (!r.ok()) return r.status();
    for (size_t k = 0; k < index.size() && k < r->per_job.size(); ++k) {
      const JobResult& here = *in_shared[index[k]];
      const JobResult& there = r->per_job[k];
      if (!here.finished || !there.finished) continue;
      const double jct_here = (here.finish - here.submit).seconds();
      const double jct_alone = (there.finish - there.submit).seconds();
      if (jct_alone <= 0) continue;
      rhos.push_back(jct_here / jct_alone);
    }
  }
  FairnessResult& f = *shared.fairness;
  f.finish_time_measured = true;
  f.finish_time_jobs = static_cast<int64_t>(rhos.size());
  f.mean_finish_time_fairness = 0;
  f.max_finish_time_fairness = 0;
  f.finish_time_fairness_above_1 = 0;
  if (rhos.empty()) return core::Status::Ok();
  double sum = 0;
  int64_t above = 0;
  for (double x : rhos) {
    sum += x;
    f.max_finish_time_fairness = std::max(f.max_finish_time_fairness, x);
    above += x > 1 + 1e-9;
  }
  f.mean_finish_time_fairness = sum / static_cast<double>(rhos.size());
  f.finish_time_fairness_above_1 =
      static_cast<double>(above) / static_cast<double>(rhos.size());
  return core::Status::Ok();
}

}  // namespace gandiva::sim
