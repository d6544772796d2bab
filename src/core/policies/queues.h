// Queues (teams) as the queue-aware policies (gandiva-fair, drf-reclaim)
// take them: a tree (organisation, team, sub-team), each queue with a
// guaranteed quota in GPUs, a weight for borrowing idle GPUs beyond it and
// an optional limit. Jobs are in the queues without children (leaves); a
// job's queue is its virtual cluster (JobSpec::vc); a job of a VC that
// names no leaf is in the shared queue "" (quota 0, weight 0, at the top,
// unless named). Queues are numbered in name order.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/event.h"
#include "core/queue_config.h"
#include "core/queue_reasons.h"
#include "core/state.h"
#include "core/status.h"

namespace gandiva::core {

// Queues at the top, one per (name, quota), with the default weight and no
// limit.
std::vector<QueueConfig> FlatQueues(const std::map<std::string, int>& quotas);

// The quotas of the leaves (the queues no other names as its parent), by
// name: the queues as fifo's per-VC quotas take them.
std::map<std::string, int> LeafQuotas(const std::vector<QueueConfig>& queues);

// Whether `queues` make a tree: names of 1 to 64 of A-Z a-z 0-9 . _ -, each
// once; parents named; no cycle; quotas and limits not negative; a limit
// not under its quota; children's quotas within their parent's. Errors
// name the queue and the field.
Status CheckQueues(const std::vector<QueueConfig>& queues);

class QueueQuotas {
 public:
  // `queues` as CheckQueues takes them (anything else is clamped).
  explicit QueueQuotas(const std::vector<QueueConfig>& queues);
  explicit QueueQuotas(const std::map<std::string, int>& quotas)
      : QueueQuotas(FlatQueues(quotas)) {}

  size_t size() const { return names_.size(); }
  const std::string& name(size_t q) const { return names_[q]; }
  // Never negative.
  int quota(size_t q) const { return quotas_[q]; }
  double weight(size_t q) const { return weights_[q]; }
  // Below 0: none.
  int limit(size_t q) const { return limits_[q]; }
  // The queue above `q`, or -1 at the top.
  int parent(size_t q) const { return parents_[q]; }
  bool leaf(size_t q) const { return children_[q].empty(); }
  // Whether any queue has a parent or a limit.
  bool tree() const { return tree_; }
  // The leaf a VC's jobs are in.
  size_t Of(const std::string& vc) const;
  // The queue of that name, if any (leaf or not).
  std::optional<size_t> Find(const std::string& name) const;
  // "queue 'NAME'", or "the shared queue" for "".
  std::string Describe(size_t q) const;
  // Each queue's fair share of `gpus` GPUs, for the GPUs each leaf's jobs
  // ask for (`demand[q]`; what other queues are given is ignored): the top
  // queues share the GPUs as FairShares does with their quotas, weights
  // and demand (their leaves', up to their limits); each queue's share is
  // split among its children alike. A queue's share is the sum of its
  // children's.
  std::vector<double> Shares(const std::vector<double>& demand,
                             double gpus) const;

 private:
  std::vector<std::string> names_;
  std::vector<int> quotas_;
  std::vector<double> weights_;
  std::vector<int> limits_;
  std::vector<int> parents_;
  std::vector<std::vector<size_t>> children_;
  std::vector<size_t> top_;
  // Parents before their children.
  std::vector<size_t> top_down_;
  std::map<std::string, size_t> index_;
  bool tree_ = false;
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
// The same, with what is lent split by `weights` rather than by quota.
std::vector<double> FairShares(const std::vector<double>& demand,
                               const std::vector<double>& quotas,
                               const std::vector<double>& weights, double gpus);

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
