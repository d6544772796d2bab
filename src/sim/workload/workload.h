// A workload: the jobs a simulation replays, each with its submit time, size,
// model type and isolated run time. Produced by the trace readers
// (trace_reader.h) and the synthetic generator (synthetic.h), consumed by the
// simulator. Plain values: thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "core/time.h"
#include "sim/workload/catalog.h"

namespace gandiva::sim {

struct TraceJob {
  std::string name;
  core::Time submit;  // from the workload's start (the first job is at 0)
  // Isolated run time on its requested GPUs at ideal placement.
  core::Duration duration;
  int gpus = 1;  // a power of two
  ModelId model = kNoModel;
  std::string vc;  // virtual cluster (empty if the source has none)
  int priority = 0;
  std::string group;     // multi-job (hyper-parameter search) id; empty if none
  bool elastic = false;  // opts in to grow-shrink
};

struct Workload {
  std::vector<TraceJob> jobs;  // sorted by submit time, stable
  std::string description;     // source, filters and counts, for logs
};

// Total work of a job in mini-batches: duration x IsolatedRate(model, gpus).
double TotalMiniBatches(const Catalog& catalog, const TraceJob& job);

// Sum over jobs of gpus x duration, in GPU-seconds.
double TotalGpuSeconds(const Workload& workload);

// Stable-sorts jobs by submit time.
void SortBySubmit(std::vector<TraceJob>& jobs);

}  // namespace gandiva::sim
