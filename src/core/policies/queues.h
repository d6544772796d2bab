// Queues (teams) by name, each with a quota in GPUs, as the queue-aware
// policies (gandiva-fair, drf-reclaim) take them. A job's queue is its
// virtual cluster (JobSpec::vc); a job of a VC not named is in the queue
// "" (quota 0 unless named). Queues are numbered in name order.
#pragma once

#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/event.h"
#include "core/queue_reasons.h"
#include "core/state.h"

namespace gandiva::core {

class QueueQuotas {
 public:
  explicit QueueQuotas(const std::map<std::string, int>& quotas);

  size_t size() const { return names_.size(); }
  const std::string& name(size_t q) const { return names_[q]; }
  // Never negative.
  int quota(size_t q) const { return quotas_[q]; }
  // The queue a VC's jobs are in.
  size_t Of(const std::string& vc) const;
  // "queue 'NAME'", or "the shared queue" for "".
  std::string Describe(size_t q) const;

 private:
  std::vector<std::string> names_;
  std::vector<int> quotas_;
  std::map<std::string, size_t> index_;
};

// Each queue's fair share of `gpus` GPUs, for the GPUs its jobs ask for
// (`demand[q]`) and its quota (`quotas[q]`): every queue with demand first
// gets up to its quota; the GPUs left are lent to the queues still short,
// in proportion to their quotas, max-min (water-filling: none gets more
// than it asks; what one cannot use goes to the others); queues of quota 0
// share what is left after that equally. Quotas over the cluster's size
// are scaled down to it.
std::vector<double> FairShares(const std::vector<double>& demand,
                               const std::vector<double>& quotas, double gpus);

// Why queued jobs wait under a queue policy: each job's reason, given by
// the policy; the default reason for a job it gave none, or one that asks
// for more GPUs than the cluster has.
class QueueWaitReasons final : public QueueReasons {
 public:
  std::map<JobId, std::string> why;
  OpenGpus gpus;

  std::string Why(JobId job, int need) const override;
};

// The jobs not ended, kept from event to event at the cost of the jobs
// each event changed (ClusterState::changed_jobs); rebuilt from the state
// at first, and after MarkStale (a policy's LoadState).
class LiveJobs {
 public:
  // Brings the set up to date with `state`, after `event`.
  void Keep(const ClusterState& state, const Event& event);
  void Forget(std::span<const JobId> jobs);
  void MarkStale() { stale_ = true; }
  bool stale() const { return stale_; }
  // Up to date once Keep has run since the last MarkStale.
  const std::set<JobId>& jobs() const { return live_; }
  // The live jobs of `state`, counted afresh.
  static std::set<JobId> Of(const ClusterState& state);

 private:
  std::set<JobId> live_;
  bool stale_ = true;
};

}  // namespace gandiva::core
