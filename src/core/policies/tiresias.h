// TiresiasPolicy: the discretized two-dimensional least-attained-service
// policy (2D-LAS) of Tiresias (Gu et al., NSDI'19), the second baseline
// Gandiva is compared against. It needs no knowledge of job durations.
//
// A job's attained service is its GPU count times the time it has run
// (GPU-seconds; a start, resume or suspension in progress does not count).
// Jobs sit in K = thresholds + 1 queues by attained service: queue 0 (the
// highest) holds those below the first threshold, queue k those that reached
// threshold k but not k + 1. Higher queues go first, and within a queue the
// earlier arrival first; above all, a job of higher JobSpec::priority goes
// before one of lower priority (so it is never suspended for one).
//
// At each Tick, arrival, departure and mechanism report the policy takes the
// desired set: the jobs in that order, each one that fits in the GPUs of the
// servers that are up left by those before it (a job that does not fit is
// skipped, it does not block those behind it). Running jobs outside the set
// are suspended (preempted); the others run.
//
// GPUs are exclusive: a GPU has at most one job placed on it. So a preempted
// job gives its GPUs back: once its suspension is done the policy requeues it
// (Actions::Requeue), unless it is in the desired set again by then, when it
// resumes where it is. A requeued job chosen again is placed anew, maybe on
// other GPUs, and resumes from its saved state (a Resume action with its new
// GPUs). Placement: the server whose free GPUs fit the job most tightly, else
// free GPUs across servers on as few servers as possible. A chosen job whose
// GPUs are still being given back (by jobs suspending) waits for them.
//
// Starvation: a job that has waited (neither running nor starting) for
// `starve_limit` since it last ran, or since it arrived, is promoted to the
// highest queue: its service counts from zero again for queueing (the total
// is kept). Demotion and promotion are looked at on every call, so with
// ticks every minute service is measured to about a minute's worth.
//
// Cost: the policy keeps the live jobs in that order (TiresiasOrder), and
// at each event looks only at the jobs the event changed
// (ClusterState::changed_jobs) and at those whose timer is due: when a
// training job reaches the next queue, when a waiting one has starved,
// when a failed start's wait ends. The desired set is read off the order
// in O(log n) per job chosen behind the first one left out, so that an
// event costs O(log n) for each job it changes, acts on or tries to place,
// not a sort of every live job (the same actions in the same order as such
// a sort; see tiresias_test.cc). Memory: an entry per live job, and 4 bytes
// per job id ever seen.
//
// Why a queued job waits (ExplainQueue): the queue it is in (with its
// attained service) and the jobs that go before it in the order above
// (higher priority, a higher queue, or earlier in its own), which take the
// GPUs up; or, once it is chosen, the GPUs the jobs preempted for it have
// yet to give back.
//
// Deterministic; not thread-safe (see Policy).
#pragma once

#include <string>
#include <vector>

#include "core/policies/tiresias_order.h"
#include "core/policy.h"

namespace gandiva::core {

struct TiresiasOptions {
  // Attained-service thresholds between the queues, in GPU-seconds,
  // ascending (they are sorted); K = size() + 1 queues. Empty = one queue,
  // that is FIFO with preemption only by priority. Default {3200}: K = 2
  // with the threshold the Tiresias paper's evaluation uses.
  std::vector<double> queue_thresholds = {3200.0};
  // A job waiting this long is promoted to the highest queue (Tiresias's
  // STARVELIMIT). Default 1 hour; Duration::Infinite() disables promotion.
  Duration starve_limit = Duration::Seconds(3600);
};

class TiresiasPolicy final : public Policy {
 public:
  explicit TiresiasPolicy(TiresiasOptions options = {},
                          std::string name = "tiresias-las");
  std::string_view name() const override { return name_; }
  void decide(const ClusterState& state, const Event& event,
              Actions& out) override;
  void SaveState(SnapshotWriter& w) const override;
  void LoadState(SnapshotReader& r) override;
  void Forget(const ClusterState& state, std::span<const JobId> jobs) override;
  // Made afresh each time (the order changes with the service attained,
  // not only with the queue): a sort of the live jobs.
  std::shared_ptr<const QueueReasons> ExplainQueue(
      const ClusterState& state, const QueueReasons* previous) const override;

  const TiresiasOptions& options() const { return options_; }
  // GPU-seconds the job has run up to state.now(), the time of the last
  // event (0 for a job that ended or that this policy never saw).
  double AttainedService(const ClusterState& state, JobId job) const;
  // The queue the job is in at state.now(), 0 the highest (0 for a job that
  // ended or that this policy never saw).
  int QueueOf(const ClusterState& state, JobId job) const;
  // How many times the job was promoted for starving.
  int Promotions(JobId job) const;

 private:
  // What the policy measures of a live job.
  struct Account {
    // GPU-seconds of the run intervals that ended.
    double service = 0;
    // Service at the last promotion: queueing counts from it.
    double offset = 0;
    // When the current run interval began; Never when not running.
    Time run_from = Time::Never();
    // When the last interval was closed (a suspension was asked).
    Time closed_at = Time::Never();
    // Since when it has waited, for starvation.
    Time waiting_from = Time::Zero();
    int promotions = 0;
  };
  // A live job: its account, and when it must be looked at again without
  // a change of its own (each Never when not due): when it reaches the
  // next queue while it trains, when it has starved long enough while it
  // waits in a lower queue, when its wait after a failed start ends.
  struct Entry {
    JobId id;
    Account account;
    Time next_level = Time::Never();
    Time starves = Time::Never();
    Time retry = Time::Never();
    uint64_t stamp = 0;  // the pass that last chose or listed it (Plan)
  };
  enum class TimerKind : uint8_t { kLevel, kStarve, kRetry };
  struct Timer {
    Time at;
    JobId id;
    TimerKind kind;
    auto operator<=>(const Timer&) const = default;
  };

  // The account of a live job, or null.
  const Account* Find(JobId job) const;
  int SlotOf(JobId job) const;
  void Add(JobId job, const Account& account);
  void Drop(int slot);
  // Brings a job's account, place in order_ and timers up to date with
  // the state (the job's part of what a walk of every account did at
  // each event). `promoted`: it was promoted in this pass, and is in
  // queue 0 for it whatever its service says.
  void Refresh(const ClusterState& state, int slot, bool promoted = false);
  // Refreshes the jobs the event changed since the last call in this
  // event (ClusterState::changed_jobs).
  void RefreshChanged(const ClusterState& state);
  // After a LoadState: every account, the order and the timers afresh.
  void Rebuild(const ClusterState& state);
  void SetTimer(Time& field, Time at, JobId job, TimerKind kind);
  // Refreshes the jobs whose timers are due, and promotes those that
  // starved.
  void RunTimers(const ClusterState& state);
  void CloseInterval(const Job& job, Account& a, Time now);
  double Attained(const Job& job, const Account& a, Time now) const;
  int Level(const Job& job, const Account& a, Time now) const;
  // When a training job at `level` reaches the next queue: the first
  // microsecond at which Level says so (Never if none).
  Time NextLevelAt(const Job& job, const Account& a, int level, Time now) const;
  void Plan(const ClusterState& state, Actions& out);

  TiresiasOptions options_;
  std::string name_;
  // Live jobs (neither ended nor unknown): a slot each in entries_, by id
  // in slot_of_ (-1: none); slots of jobs that left are reused.
  std::vector<int32_t> slot_of_;
  std::vector<Entry> entries_;
  std::vector<int> free_slots_;
  int64_t live_ = 0;
  // The live jobs in the order they get GPUs, by slot.
  TiresiasOrder order_;
  // Due times (min-heap); an entry whose job's field no longer says that
  // time is stale and skipped.
  std::vector<Timer> timers_;
  // order_ and the timers need making afresh (LoadState).
  bool stale_ = false;
  // How many of the event's changed jobs were refreshed.
  size_t changed_seen_ = 0;
  uint64_t stamp_ = 0;
  // Plan's scratch.
  std::vector<int> due_, chosen_, settle_, requeued_;
};

}  // namespace gandiva::core
