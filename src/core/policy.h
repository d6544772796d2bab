// Policy: the pure decision part of the scheduler, and Actions, the sink
// through which it decides.
//
// Contract: decide() is called once for every event, after the Scheduler has
// applied the event to the state. It reads the state and takes zero or more
// actions through `out`; each is checked and applied to the state at once
// (so the policy sees its own earlier decisions) and handed to the world.
// A policy must be deterministic: the same events give the same actions. It
// may keep state of its own (timers, remembered failures) but no clock, I/O
// or randomness it was not handed. Asking for an impossible action (a GPU
// that is busy, a job in the wrong state) is a bug and stops the program.
// Not thread-safe; a Scheduler calls it from one thread.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/action.h"
#include "core/event.h"
#include "core/queue_reasons.h"
#include "core/snapshot.h"
#include "core/state.h"

namespace gandiva::core {

class Scheduler;

class Actions {
 public:
  // Launches a queued job on `gpus`, which no running job may hold.
  // Equivalent to Assign then Run.
  void Start(JobId job, std::vector<GpuId> gpus);
  // Places a queued job on `gpus` without running it: it waits there for its
  // time slice (state suspended, never started). The GPUs may be busy.
  void Assign(JobId job, std::vector<GpuId> gpus);
  // Runs a placed, suspended job on its GPUs, none of which may be held by a
  // running job: a Start action if it never ran, else a Resume. Both carry
  // the job's GPUs in `gpus`; a Resume `relocates` the job when they are
  // not laid out as those it last ran on (Job::ran_on).
  void Run(JobId job);
  // Moves a placed, suspended job to `gpus` (none held by a running job) and
  // runs it there. A job that never ran has nothing to move: it is placed
  // anew and started (a Start action). Otherwise a Migrate action.
  void Migrate(JobId job, std::vector<GpuId> gpus);
  // Packs a suspended job onto the GPUs that `with` (running alone, nothing
  // under way) holds: both run at once. The job must be placed on exactly
  // those GPUs. A Pack action (`relocates` as a Resume's).
  void Pack(JobId job, JobId with);
  // Suspends a packed job (an Unpack action); its partner runs on alone.
  void Unpack(JobId job);
  // Resizes a running elastic job (nothing under way, not packed) to `gpus`,
  // a power of two on its one server: a superset of its GPUs whose new ones
  // are free (Grow), or a subset (Shrink). The job restarts from a
  // checkpoint at the new size.
  void Resize(JobId job, std::vector<GpuId> gpus);
  // Asks a running job to suspend at its next mini-batch boundary.
  void Suspend(JobId job);
  // Stops a running job at once, as a pod is evicted: a Suspend action
  // marked `lossy`. The world keeps only the job's last checkpoint; what it
  // trained since is lost, and it restarts from there when it runs again.
  // For the baselines whose reclaim kills (drf-reclaim); the runtime does
  // not carry it out.
  void Preempt(JobId job);
  // Moves a placed, suspended job with no mechanism under way back to the
  // queue (in its submission order), releasing its GPUs. Nothing is sent to
  // the world. The job keeps `launched` and Job::ran_on, so once placed
  // again (Assign, Run) it gets a Resume action whose `gpus` say where: on
  // GPUs laid out otherwise than those it left, the Resume `relocates` it
  // (the world restores it there from its saved state).
  void Requeue(JobId job);
  // Stops a job for good.
  void Kill(JobId job, std::string reason);
  void SetPriority(JobId job, int priority);

  // The actions taken so far in this call.
  std::span<const Action> taken() const {
    return std::span<const Action>(*out_).subspan(first_);
  }

 private:
  friend class Scheduler;
  Actions(Scheduler* s, std::vector<Action>* out)
      : s_(s), out_(out), first_(out->size()) {}
  // The job, which must exist.
  Job& CheckedJob(JobId id);
  // Every GPU exists and is on a server that is up; with `idle`, none is
  // held by a running job.
  void CheckGpus(JobId id, const std::vector<GpuId>& gpus, bool idle);
  // Appends an action of `kind` for `job` and returns it; a mechanism is
  // recorded as the job's action under way.
  Action& Emit(Job& job, ActionKind kind, bool mechanism);
  Scheduler* s_;
  std::vector<Action>* out_;
  size_t first_;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  virtual void decide(const ClusterState& state, const Event& event,
                      Actions& out) = 0;

  // The policy's own state, for Scheduler::Snapshot. A policy that keeps
  // state across events must save all of it: a scheduler restored from a
  // snapshot must take the same actions as the one that wrote it. LoadState
  // reads what SaveState wrote (same policy, same options) and takes it only
  // when `r` holds all of it and nothing more; otherwise it fails `r` and
  // leaves the policy as it was. The defaults suit a stateless policy.
  virtual void SaveState(SnapshotWriter& /*w*/) const {}
  virtual void LoadState(SnapshotReader& /*r*/) {}
  // These ended jobs leave the state once this returns
  // (Scheduler::Forget): the policy drops whatever it keeps of them, and
  // must decide for the other jobs as it would have with them still there.
  // A stateful policy must override it: it must not look them up again.
  virtual void Forget(const ClusterState& /*state*/,
                      std::span<const JobId> /*jobs*/) {}

  // Why the jobs in the queue (ClusterState::queue) do not run yet, by
  // this policy's rules: a summary of `state` from which each queued job's
  // reason is composed when asked (QueueReasons::Why). It copies what it
  // needs: once returned it never changes, and any thread may read it
  // while the state goes on. Called between events (Scheduler::
  // ExplainQueue), never from decide(); it changes nothing. `previous` is
  // what this policy returned last for the same scheduler (or null):
  // what did not change may be shared with it (a QueuedJobTable while
  // ClusterState::queue_version is the same), so that taking one per
  // publication costs the queue's length only when the queue changed.
  // The default gives DefaultQueueReasons: the default rules
  // (DefaultWaitReason), for a policy whose rules are those.
  virtual std::shared_ptr<const QueueReasons> ExplainQueue(
      const ClusterState& state, const QueueReasons* previous) const;
};

}  // namespace gandiva::core
