// Scheduler: the one scheduling brain both worlds drive.
//
// Handle() takes an event from the world, applies it to the ClusterState,
// asks the Policy what to do and returns the actions, already applied to the
// state. The world carries them out and answers with ActionDone or
// ActionFailed events. Pure: no clock, no I/O, no threads. The same event
// stream always gives the same actions.
//
// Events that make no sense (an unknown job, a job id used twice, an invalid
// spec) are refused with an error Status and change nothing. Not thread-safe:
// one thread calls Handle (the simulator's loop or the daemon's event loop).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/action.h"
#include "core/event.h"
#include "core/policy.h"
#include "core/queue_reasons.h"
#include "core/state.h"
#include "core/status.h"
#include "core/usage.h"

namespace gandiva::core {

struct SchedulerOptions {
  // Weight of a new report in the smoothed mini-batch rate (exponential
  // moving average): 1 keeps only the last report. Default 0.3, which
  // forgets a report's influence to under 10% after about seven reports.
  double profile_smoothing = 0.3;
  // A job whose start fails waits start_retry_delay out of the queue before
  // it is placed again, twice as long after each further failure in a row,
  // at most kMaxStartRetryDelay; the start_attempts-th failure in a row
  // fails the job (0: it is tried for ever). Its next start goes to
  // another server when one has room (Job::start_failed_on). A start that
  // succeeds clears the count. Defaults 5 attempts, 10 s.
  int start_attempts = 5;
  Duration start_retry_delay = Duration::Seconds(10);
  // Keep GPU-time used by queue and user (Scheduler::usage), by the hour,
  // for this long; zero keeps none (the simulator's default).
  Duration keep_usage;
};

// The longest wait between two tries to start a job.
inline constexpr Duration kMaxStartRetryDelay = Duration::Seconds(300);
// How many of the servers a job's failed starts were on it remembers
// (Job::start_failed_on), the latest.
inline constexpr int kMaxStartFailedServers = 8;

// What a DrainRequest did with one job placed on the drained server.
struct DrainOutcome {
  enum class Kind : uint8_t {
    kMoving,     // its Migrate to `to` is under way (a Start there, for a
                 // job that never ran)
    kUnpacking,  // packed: its Unpack is under way; a later drain moves it
    kStays,      // left where it is; `reason` says why
  };
  JobId job;
  Kind kind = Kind::kStays;
  ServerId to;         // kMoving: the server it goes to
  std::string reason;  // kUnpacking, kStays: why, for the operator
};
const char* DrainOutcomeKindName(DrainOutcome::Kind kind);

// Whether job `id`, of `gpus` GPUs, could be adopted on `placed_on` in
// `cluster` now: the GPUs exist, are the job's count, on one server that
// is up, and hold no job (Scheduler::CheckAdoptable on its own state).
Status CheckAdoptable(const Cluster& cluster, JobId id, int gpus,
                      const std::vector<GpuId>& placed_on);

class Scheduler {
 public:
  Scheduler(std::unique_ptr<Policy> policy, SchedulerOptions options = {});

  // Applies `event` and appends the resulting actions to `out`. Time must not
  // go backwards.
  Status Handle(const Event& event, std::vector<Action>& out);
  // Whether job `id`, of `gpus` GPUs, could be adopted on `placed_on` now
  // (what Handle checks of a JobArrived or JobFound's GPUs): the world
  // asks before it logs one.
  Status CheckAdoptable(JobId id, int gpus,
                        const std::vector<GpuId>& placed_on) const;

  // Whether an operator's request could be carried out now (what Handle
  // would say of it), without carrying it out.
  Status Check(const MechanismRequest& m) const {
    std::vector<GpuId> gpus;
    return PlanMechanism(m, &gpus);
  }

  const ClusterState& state() const { return state_; }
  // GPU-time used by queue and user (SchedulerOptions::keep_usage; null
  // when kept for no time). Kept in snapshots.
  const UsageLedger* usage() const { return usage_ ? &*usage_ : nullptr; }

  // What the last event Handle accepted did with each job placed on the
  // server, if it was a DrainRequest: one outcome per job, in job id order
  // (none for a cordon_only drain, nor for a server with no job). Empty
  // after any other event, a refused one included, and after a Restore.
  const std::vector<DrainOutcome>& last_drain() const { return last_drain_; }

  // From now on, notes every job that handling an event may change (with
  // repeats, in no particular order), for a caller that keeps something
  // per job up to date: it then looks again at those only. TakeChangedJobs
  // hands them over and starts afresh. Off by default (the simulator needs
  // none of it); a Restore keeps it on.
  void TrackChangedJobs() { track_changes_ = true; }
  std::vector<JobId> TakeChangedJobs() {
    std::vector<JobId> out;
    out.swap(changed_);
    return out;
  }

  // Why each job in the queue does not run yet, as the policy sees it now
  // (Policy::ExplainQueue): an immutable summary that composes a queued
  // job's reason when asked (QueueReasons::Why), safe to read from any
  // thread while this scheduler goes on. A world that publishes its state
  // takes one per publication: it is made again only when the state
  // changed since the last call (an event, a Restore, a Forget), and then
  // shares with the last one what did not change.
  std::shared_ptr<const QueueReasons> ExplainQueue();

  // The whole state (cluster, jobs, queues, counters and the policy's own
  // state) as bytes. A scheduler built with the same policy and options
  // that Restores them takes the same actions for the same events as this
  // one would from here: a world that logs events may keep a snapshot and
  // the events after it instead of every event.
  std::string Snapshot() const;
  // Replaces the state with a Snapshot's. Refuses, changing nothing, bytes
  // that are not a whole snapshot of this version, or were written by
  // another policy, or name jobs and GPUs inconsistently.
  Status Restore(std::string_view bytes);
  const Policy& policy() const { return *policy_; }

  // Drops ended jobs from the state, and the policy's records of them, to
  // free their memory: has_job is then false for them, and forgotten true
  // (their ids are never used again). Not an event: a world that logs
  // events and replays them from a snapshot must write a Snapshot right
  // after (replaying the log from an older one would bring them back).
  // Refuses, changing nothing, a job that is unknown or has not ended.
  Status Forget(std::span<const JobId> jobs);

 private:
  friend class Actions;

  // Handle, less the noting of the jobs it changed (TrackChangedJobs).
  Status HandleEvent(const Event& event, std::vector<Action>& out);
  Status Apply(const Event& event);
  // Checks an operator's request; on success `gpus` holds where the job
  // goes (migrate, resize) and the request can be carried out now.
  Status PlanMechanism(const MechanismRequest& m,
                       std::vector<GpuId>* gpus) const;
  // PlanMechanism's parts: where the mechanism takes the job, and whether
  // its work can be carried there (JobSpec::carrier).
  Status PlanGpus(const MechanismRequest& m, std::vector<GpuId>* gpus) const;
  Status CheckCarried(const MechanismRequest& m) const;
  void CarryOut(const MechanismRequest& m, Actions& actions);
  // DrainRequest (core/drain.cc). Apply checks the server and cordons it;
  // Drain then decides for each job placed there, into last_drain_.
  Status CheckDrain(const DrainRequest& d) const;
  void Drain(const DrainRequest& d, Actions& actions);
  DrainOutcome DrainPacked(JobId id, std::vector<JobId>& unpacking,
                           Actions& actions);
  DrainOutcome DrainMove(JobId id, ServerId from, Actions& actions);
  // The open servers other than `from`, most idle GPUs first, ties to the
  // lower id: where a drain tries to move a job, in order.
  std::vector<ServerId> DrainTargets(ServerId from) const;
  void OnJobEnded(Job& job, JobState end);
  // The wait before the next try after `failures` failed starts (or runs)
  // in a row: start_retry_delay, doubling, at most kMaxStartRetryDelay.
  Duration RetryDelay(int failures) const;
  // A run that failed with retries left: queued again after a backoff, to
  // resume from the checkpoint kept or start from the beginning.
  void RetryRun(Job& job, bool from_checkpoint);
  void OnActionDone(Job& job, const ActionDone& done);
  void OnActionFailed(Job& job, const ActionFailed& failed);
  void RequeueLost(Job& job);
  // A Restart of a running job whose process was lost (ProcessLost).
  void Restart(Job& job, bool from_checkpoint, Actions& actions);
  // Where a queued job waits: nowhere the policy sees while held, in the
  // start retries until its start_retry_at, else in the queue.
  void Queue(Job& job);
  // Queues the jobs whose start retry is due.
  void ReleaseStartRetries();
  // Ends a pack when one of its jobs stops running there.
  void Unlink(Job& job);

  // Adopts a job of a JobArrived or JobFound with `placed_on` (placed,
  // running or suspended, launched).
  void Adopt(Job& job, const std::vector<GpuId>& gpus, bool suspended);

  // Bookkeeping helpers, shared with Actions.
  void SetWaiting(Job& job, bool waiting);
  void Unplace(Job& job);
  ActionId NextActionId() { return ActionId(next_action_++); }

  std::unique_ptr<Policy> policy_;
  SchedulerOptions options_;
  ClusterState state_;
  std::optional<UsageLedger> usage_;
  bool track_changes_ = false;  // TrackChangedJobs
  std::vector<JobId> changed_;
  std::vector<DrainOutcome> last_drain_;
  int64_t next_action_ = 1;
  // ExplainQueue's last summary, and the count of changes to the state
  // (events handled, restores, forgets) it was made at.
  std::shared_ptr<const QueueReasons> explained_;
  uint64_t changes_ = 0;
  uint64_t explained_at_ = 0;
};

}  // namespace gandiva::core
