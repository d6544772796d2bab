#include "sim/workload/workload.h"

#include <algorithm>

namespace gandiva::sim {

double TotalMiniBatches(const Catalog& catalog, const TraceJob& job) {
  return job.duration.seconds() * catalog.IsolatedRate(job.model, job.gpus);
}

double TotalGpuSeconds(const Workload& workload) {
  double total = 0.0;
  for (const TraceJob& j : workload.jobs) {
    total += j.duration.seconds() * j.gpus;
  }
  return total;
}

void SortBySubmit(std::vector<TraceJob>& jobs) {
  std::stable_sort(
      jobs.begin(), jobs.end(),
      [](const TraceJob& a, const TraceJob& b) { return a.submit < b.submit; });
}

}  // namespace gandiva::sim
