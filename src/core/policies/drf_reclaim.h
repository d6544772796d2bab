// DrfReclaimPolicy ("drf-reclaim"): the baseline the schedulers platform
// teams run today offer (queues with guaranteed quotas, borrowing and
// reclaim, as KAI-Scheduler and Volcano do): each queue is guaranteed its
// quota; GPUs it leaves idle are lent to the others; a queue below its
// quota takes GPUs back by killing borrowers (Actions::Preempt), which go
// back to the queue and restart from their last checkpoint: what they
// trained since is lost. With GPUs the one resource, dominant-resource
// fairness lends to the queue holding the fewest GPUs per GPU of quota.
//
// Queues as QueueQuotas says (a job's queue is its VC). Jobs run until they
// end or are reclaimed: no time-slicing. A queue's order: higher
// JobSpec::priority first, then submission. At each decision:
//  1. Preempted jobs that have stopped go back to the queue (Requeue).
//  2. Quotas: each queue in name order, its waiting jobs in its order: a
//     job that keeps its queue's GPUs (those of its running and starting
//     jobs, and of its jobs owed before it) within its quota is owed them.
//     It starts if the free GPUs not claimed by a job owed before it fit
//     it (best fit on one server, else across servers). If not, the GPUs
//     free and being freed by preemption are claimed for it, and when they
//     fall short, borrowers are preempted: running jobs of queues over
//     their quota that stay at or above it without them, the latest
//     started first, from the queue most over its quota (GPUs held per GPU
//     of quota) -- only if they cover what is short.
//  3. Lending: the free GPUs not claimed go to waiting jobs, turn by turn
//     to the queue holding the fewest GPUs per GPU of quota (queues of
//     quota 0 after the others, fewest held first), each queue's first
//     job in its order that fits.
// A job waiting out a failed start, or held, is not dealt GPUs.
//
// Cost: a decision with GPUs free or jobs waiting is O(n log n) in the
// live jobs.
//
// Deterministic; not thread-safe (see Policy). A simulator baseline: the
// runtime does not carry out Preempt and refuses this policy.
#pragma once

#include <map>
#include <string>

#include "core/policies/queues.h"
#include "core/policy.h"

namespace gandiva::core {

struct DrfReclaimOptions {
  // The queues (QueueQuotas). Each leaf's quota counts; the tree above it,
  // weights and limits are not applied.
  std::vector<QueueConfig> queues;
};

class DrfReclaimPolicy final : public Policy {
 public:
  explicit DrfReclaimPolicy(DrfReclaimOptions options = {});
  std::string_view name() const override { return "drf-reclaim"; }
  void decide(const ClusterState& state, const Event& event,
              Actions& out) override;
  void LoadState(SnapshotReader& r) override;
  void Forget(const ClusterState& state, std::span<const JobId> jobs) override;
  std::shared_ptr<const QueueReasons> ExplainQueue(
      const ClusterState& state, const QueueReasons* previous) const override;

 private:
  QueueQuotas queues_;
  LiveJobs live_;
};

}  // namespace gandiva::core
