// ClusterState: everything the scheduler knows at one moment, as policies see
// it: the time of the event being handled, the cluster, every job (but the
// ended ones it forgot), the queue and the time-slicing candidates.
//
// Policies get it read-only; only the Scheduler changes it, including while a
// policy's decide() runs (each action the policy takes through `Actions` is
// applied at once, so later reads in the same call see it). Thread-compatible.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cluster.h"
#include "core/ids.h"
#include "core/job.h"
#include "core/time.h"

namespace gandiva::core {

// Orders jobs by priority (higher first), then by a time (earlier first),
// then by id: the order of the queue and of time-slicing.
struct JobOrder {
  int neg_priority;
  Time since;
  JobId id;
  auto operator<=>(const JobOrder&) const = default;
};

// Jobs ask for at most 2^(kMaxLog2Gpus - 1) GPUs.
inline constexpr int kMaxLog2Gpus = 24;

// Actions taken. Each run of a job begins with a start, resume, migrate or
// pack, and ends with a suspend, an unpack, its end, or a failed action.
struct Counters {
  int64_t starts = 0;
  int64_t suspends = 0;
  int64_t resumes = 0;
  int64_t migrations = 0;
  int64_t packs = 0;
  int64_t unpacks = 0;
  int64_t grows = 0;
  int64_t shrinks = 0;
  int64_t kills = 0;
  int64_t actions_failed = 0;
  int64_t events = 0;
};

class ClusterState {
 public:
  Time now() const { return now_; }
  const Cluster& cluster() const { return cluster_; }

  bool has_job(JobId id) const {
    return id.valid() && static_cast<size_t>(id.value) < jobs_.size() &&
           jobs_[id.value] != nullptr;
  }
  // The job must exist (has_job).
  const Job& job(JobId id) const { return *jobs_[id.value]; }
  // One past the largest job id submitted (0: none): the jobs are those
  // below it that has_job.
  int32_t job_id_limit() const { return static_cast<int32_t>(jobs_.size()); }
  // Calls f(job) for every job held, in id order.
  template <typename F>
  void ForEachJob(F&& f) const {
    for (const auto& j : jobs_) {
      if (j != nullptr) f(static_cast<const Job&>(*j));
    }
  }
  // An ended job that was dropped (Scheduler::Forget): its id is never
  // used again.
  bool forgotten(JobId id) const {
    return id.valid() && static_cast<size_t>(id.value) < forgotten_.size() &&
           forgotten_[id.value];
  }
  int64_t forgotten_jobs() const { return forgotten_count_; }

  // Queued jobs, priority first, then submission order.
  const std::set<JobOrder>& queue() const { return queue_; }
  // Changes whenever the queue does (never the same for two different
  // queues of one scheduler): a caller that derives something from the
  // queue's order redoes it only then.
  uint64_t queue_version() const { return queue_version_; }
  // The queue split by GPU count: entry k holds the jobs asking for 2^k GPUs.
  const std::array<std::set<JobOrder>, kMaxLog2Gpus>& queue_by_size() const {
    return queue_by_size_;
  }
  // Suspended jobs with no mechanism under way, priority first, then the
  // longest waiting: the candidates for the next time slice.
  const std::set<JobOrder>& waiting() const { return waiting_; }
  // waiting() split by the GPUs each job holds: entry k holds the jobs on
  // 2^k GPUs (on n GPUs, entry countr_zero(n)).
  const std::array<std::set<JobOrder>, kMaxLog2Gpus>& waiting_by_size() const {
    return waiting_by_size_;
  }
  // Queued jobs whose start failed, kept out of the queue until their
  // Job::start_retry_at: (that time, job), earliest first.
  const std::set<std::pair<Time, JobId>>& start_retries() const {
    return start_retries_;
  }
  // Whether some of them joined the queue at the event being handled
  // (their wait ended): a policy that places only when GPUs free up or
  // jobs arrive must look at the queue then too.
  bool start_retries_released() const { return start_retries_released_; }
  // Jobs placed (running, suspended or migrating).
  int64_t placed_jobs() const { return placed_; }
  // The jobs that handling the current event has changed so far, with
  // repeats and in no particular order: the event itself, the actions the
  // scheduler took for it and those the policy has taken so far in
  // decide(). Empty at the start of each event. A policy that keeps
  // something per job up to date looks again at these only.
  std::span<const JobId> changed_jobs() const { return changed_; }
  const Counters& counters() const { return counters_; }

 private:
  friend class Scheduler;
  friend class Actions;

  Job& mutable_job(JobId id) {
    changed_.push_back(id);
    return *jobs_[id.value];
  }
  static JobOrder QueueKey(const Job& j) {
    return {-j.spec.priority, j.submitted, j.id};
  }
  static JobOrder WaitKey(const Job& j) {
    return {-j.spec.priority, j.waiting_since, j.id};
  }
  void Enqueue(const Job& j);
  // Into and out of waiting(); false if it was not there.
  void AddWaiting(const Job& j);
  bool RemoveWaiting(const Job& j);
  static size_t SizeClass(size_t gpus) {
    return static_cast<size_t>(std::countr_zero(gpus)) % kMaxLog2Gpus;
  }
  // Out of the queue (or of the start retries); false if it was in
  // neither.
  bool Dequeue(const Job& j);

  Time now_ = Time::Zero();
  Cluster cluster_;
  // By id: null for ids never submitted and for forgotten jobs (a Job is
  // large; an empty slot costs a pointer, so forgetting frees nearly all).
  std::vector<std::unique_ptr<Job>> jobs_;
  std::vector<bool> forgotten_;  // by id, as far as the last one forgotten
  int64_t forgotten_count_ = 0;
  std::set<JobOrder> queue_;
  std::array<std::set<JobOrder>, kMaxLog2Gpus> queue_by_size_;
  std::set<JobOrder> waiting_;
  std::array<std::set<JobOrder>, kMaxLog2Gpus> waiting_by_size_;
  std::set<std::pair<Time, JobId>> start_retries_;
  bool start_retries_released_ = false;
  int64_t placed_ = 0;
  Counters counters_;
  uint64_t queue_version_ = 0;
  // Every job taken to be changed (mutable_job) while handling the
  // current event (changed_jobs); not part of the state.
  std::vector<JobId> changed_;
};

inline void ClusterState::Enqueue(const Job& j) {
  ++queue_version_;
  queue_.insert(QueueKey(j));
  queue_by_size_[std::countr_zero(static_cast<unsigned>(j.spec.gpus))].insert(
      QueueKey(j));
}

inline void ClusterState::AddWaiting(const Job& j) {
  waiting_.insert(WaitKey(j));
  waiting_by_size_[SizeClass(j.gpus.size())].insert(WaitKey(j));
}

inline bool ClusterState::RemoveWaiting(const Job& j) {
  waiting_by_size_[SizeClass(j.gpus.size())].erase(WaitKey(j));
  return waiting_.erase(WaitKey(j)) > 0;
}

inline bool ClusterState::Dequeue(const Job& j) {
  ++queue_version_;
  queue_by_size_[std::countr_zero(static_cast<unsigned>(j.spec.gpus))].erase(
      QueueKey(j));
  const bool retrying = start_retries_.erase({j.start_retry_at, j.id}) > 0;
  return queue_.erase(QueueKey(j)) > 0 || retrying;
}

}  // namespace gandiva::core
