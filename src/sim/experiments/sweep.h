// Sweeps: many simulations over lists of policies, seeds, cluster sizes and
// loads (`gandiva sim --policy a,b --seed 1..5 --gpus 256,512 --load 1,2`),
// run side by side on threads. Each run is Simulate's, deterministic for
// its inputs; the results come in the sweep's order whatever the threads,
// and go out as one table, a JSON list, CSV rows, and an SVG plot of one
// metric.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "sim/simulator.h"
#include "sim/workload/workload.h"

namespace gandiva::sim::experiments {

// The values of list flag `flag`: comma-separated items, each a number or
// (integers only) an inclusive range A..B. The error names the flag and
// what is wrong with the item.
core::StatusOr<std::vector<uint64_t>> ParseSeedList(const std::string& flag,
                                                    const std::string& text);
// Positive integers (cluster sizes).
core::StatusOr<std::vector<int>> ParsePositiveIntList(const std::string& flag,
                                                      const std::string& text);
// Positive finite numbers, no ranges (loads).
core::StatusOr<std::vector<double>> ParsePositiveNumberList(
    const std::string& flag, const std::string& text);

// A load as the sweep's names and lines show it ("0.5", "2").
std::string LoadText(double load);

// Offered load times `load`: every arrival time divided by it (the same
// jobs, arriving `load` times as fast).
void ScaleArrivals(Workload& workload, double load);

// One run of a sweep: its inputs and its result.
struct SweepRun {
  std::string policy;
  uint64_t seed = 1;
  int gpus = 0;
  double load = 1;
  SimResult result;
};

// Calls fn(0) .. fn(n - 1), each once, on up to `parallel` threads (at
// least 1; the calling thread is one of them). Returns when all are done.
void RunParallel(size_t n, int parallel, const std::function<void(size_t)>& fn);

// The runs as a JSON list, each its inputs (policy, seed, gpus, load) and
// its result (ResultJson's object, under "result").
std::string SweepJson(const std::vector<SweepRun>& runs);
// A header line, then one row per run: its inputs and every metric of
// MetricNames() (and of FairnessMetricNames() when a run has queues; empty
// in a row without), then wall_s.
std::string SweepCsv(const std::vector<SweepRun>& runs);
// A readable table: the inputs that vary and the main metrics.
std::string SweepTable(const std::vector<SweepRun>& runs);

// The metrics a sweep can plot, named as in ResultJson.
const std::vector<std::string>& MetricNames();
// Those measured only in runs with queues (SimOptions::queues); the
// CSV has their columns when a run has them.
const std::vector<std::string>& FairnessMetricNames();
// Refuses a name in neither list, naming those known.
core::Status CheckMetric(const std::string& name);
// A fairness metric of a run without queues is refused.
core::StatusOr<double> Metric(const SimResult& result, const std::string& name);

// An SVG line plot of `metric`: against the cluster's GPUs when the sweep
// varies them, else against the load when it varies, else against the
// seed; one line per policy, each point the mean over the runs that share
// its x (the seeds). Refused for an unknown metric, or a fairness metric
// of a run without queues.
core::StatusOr<std::string> SweepSvg(const std::vector<SweepRun>& runs,
                                     const std::string& metric);

}  // namespace gandiva::sim::experiments
