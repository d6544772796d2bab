// Finish-time fairness (Themis, NSDI'20): how much later a job finished
// for sharing the cluster than it would have with its queue's quota to its
// queue alone.
//
// For each leaf queue of quota above 0 (SimOptions::queues; a job's queue
// is the leaf its VC names), its jobs are simulated again, alone, on a cluster
// that holds the quota, or the queue's largest job if larger: whole servers of
// the run's shape, the last rounded up, or one server of that many GPUs (one
// socket, one switch) when less than a server; the same mechanism costs;
// under the same policy, made by `make` for the queue's quota alone (all
// the GPUs of that cluster). A
// job's rho is its JCT (submit to finish) in the shared run over its JCT
// alone. Jobs that did not finish in both, and those the shared run
// skipped, are left out.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/policy.h"
#include "core/status.h"
#include "sim/simulator.h"

namespace gandiva::sim {

// A policy for a run with these queues.
using PolicyForQueues =
    std::function<core::StatusOr<std::unique_ptr<core::Policy>>(
        const std::vector<core::QueueConfig>& queues)>;

// Fills the finish-time fields of `shared.fairness` (which must be set:
// a run with queues) from the runs alone. `options` are the shared run's.
core::Status MeasureFinishTimeFairness(const Workload& workload,
                                       const Catalog& catalog,
                                       const SimOptions& options,
                                       const PolicyForQueues& make,
                                       SimResult& shared);

}  // namespace gandiva::sim
