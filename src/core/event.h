// Events: what the world (simulator or runtime) tells the scheduler.
//
// Every event carries the world's current time; the core has no clock of its
// own. Plain values: thread-compatible.
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/cluster.h"
#include "core/ids.h"
#include "core/job.h"
#include "core/queue_config.h"
#include "core/time.h"

namespace gandiva::core {

// A job was submitted. `id` is fresh, chosen by the world (dense small ints).
//
// With `placed_on`, the job is one the world found already running (or
// suspended, `suspended`) on those GPUs, which it adopts there rather than
// queueing it: a runtime whose state was restored from a backup older than
// the job. The GPUs must be the job's count, on one server that is up, and
// hold no job; else the event is refused. Its start is not counted.
// `submitted` (such a job's, before this event) is when it was submitted;
// Never: at this event.
struct JobArrived {
  JobArrived() = default;
  JobArrived(JobId job, JobSpec job_spec)
      : id(job), spec(std::move(job_spec)) {}
  JobArrived(JobId job, JobSpec job_spec, std::vector<GpuId> gpus,
             bool is_suspended)
      : id(job),
        spec(std::move(job_spec)),
        placed_on(std::move(gpus)),
        suspended(is_suspended) {}

  JobId id;
  JobSpec spec;
  std::vector<GpuId> placed_on;
  bool suspended = false;
  Time submitted = Time::Never();
};
// A queued job the world found already running (or suspended,
// `suspended`) on those GPUs, which it adopts there (placed, launched,
// with no start): a runtime whose state was restored from a backup taken
// before the job started. Refused unless the job is queued and not held,
// and the GPUs are as JobArrived.placed_on's must be.
struct JobFound {
  JobId job;
  std::vector<GpuId> placed_on;
  bool suspended = false;
};
// The job's process ended by itself: `success` when it completed its work.
// A failure is the job's end unless it has retries left (JobSpec::retries)
// and is not `permanent` (the job can never run: its command was not found
// or cannot be executed): then the job is queued again, out of the queue
// for a backoff first, and its next run goes on from `checkpoint` (one the
// world kept of this run, saved at a mini-batch boundary: a Resume that
// relocates it) or starts from the beginning.
struct JobFinished {
  JobId job;
  bool success = true;
  bool permanent = false;
  bool checkpoint = false;
};
// A measurement of a running job.
struct ProfileReport {
  JobId job;
  double minibatch_rate = 0;  // mini-batches per second since the last report
  int64_t minibatches = 0;    // total so far
  double gpu_memory_gb = 0;
  double gpu_utilization = 0;  // 0..1
};
// The world carried out an action; `took` is the time it really took.
struct ActionDone {
  ActionId action;
  JobId job;
  Duration took;
};
// The world could not carry out an action; the job stays as it was before it.
struct ActionFailed {
  ActionId action;
  JobId job;
  Duration took;
  std::string reason;
  // The mechanism can never work for this job (a Migrate of a job that
  // cannot be checkpointed): policies stop asking for it.
  bool permanent = false;
};
// A server joined (its id is the next server id) or came back.
struct ServerUp {
  ServerSpec spec;
  ServerId id;  // invalid for a new server; the id of one coming back
};
// A server was lost; the jobs placed on it go back to the queue.
struct ServerDown {
  ServerId id;
};
// Periodic: lets the policy rotate time slices and act on timeouts.
struct Tick {};
// A user (or operator) asks to stop a job.
struct KillRequest {
  JobId job;
  std::string reason;
};
// The world learned how a job's work is carried when it moves (the
// runtime: the job-side library attached to its process, or the process
// it runs now has none): the job's spec.carrier from now on.
struct CarrierKnown {
  JobId job;
  Carrier carrier = Carrier::kSelf;
};
// The job's process is gone while its server stays up (its agent stopped
// or restarted without the job's exit heard of; the world found it gone),
// with no action under way for the job (the world settles that one first,
// else the event is refused). `checkpoint`: the world keeps a checkpoint of
// it, saved at a mini-batch boundary, from which it can go on where it was.
// The core decides what becomes of the job:
//   running: it runs again on its GPUs at once, a Restart action: from the
//            checkpoint if there is one (`relocates`), else from the
//            beginning (`launch`); a Restart from the checkpoint that
//            fails is followed by one from the beginning, and a Restart
//            from the beginning that fails fails the job;
//   suspended: it goes on when its policy runs it again: a Resume that
//            `relocates` it from the checkpoint, or without one a Start
//            from the beginning (as for a job that never ran);
//   queued or ended: nothing (its process was not the core's).
struct ProcessLost {
  JobId job;
  bool checkpoint = false;
};
// A user (or operator) changes a job's priority.
struct PriorityRequest {
  JobId job;
  int priority = 0;
};

// An operator holds a job (suspends it and keeps it suspended, or keeps it
// out of the queue) or releases it to the policy again.
struct HoldRequest {
  JobId job;
  bool hold = true;
};

// An operator cordons a server (nothing new is placed on it: the first step
// of draining it for maintenance) or opens it again. The jobs placed there
// stay, time-slice and end there unless moved (MechanismRequest migrate).
struct CordonRequest {
  ServerId server;
  bool cordon = true;
};

// An operator drains a server for maintenance: cordons it (as
// CordonRequest) and, unless `cordon_only`, moves off the jobs placed on it,
// in job id order, as operator's requests (MechanismRequest) would: a job
// packed with another is unpacked (its partner, when this drain unpacks it
// already, stays: a later drain moves them); any other is migrated to the
// first open server (up, not cordoned, not this one) that takes it, those
// with the most idle GPUs (no running job holds them) first, ties to the
// lower id. The policy decides once, after all of them (requests one by
// one would let it resume a waiting job on the server between two moves).
// Scheduler::last_drain() says what became of each job. Refused,
// changing nothing, for a server id that is not the cluster's. Opening the
// server again is a CordonRequest{server, false}.
struct DrainRequest {
  ServerId server;
  bool cordon_only = false;
};

// An operator asks for a mechanism by hand. Refused (kFailedPrecondition,
// with the reason) when it cannot be carried out now, and the job is left
// as it was; otherwise the actions are taken at once. The policy may later
// undo the effect (unpack a pack that measures badly, move a job back for
// locality) like any decision of its own.
struct MechanismRequest {
  enum class Kind : uint8_t { kMigrate, kPack, kUnpack, kResize };
  Kind kind = Kind::kMigrate;
  JobId job;
  ServerId server;  // kMigrate: to this server
  JobId with;       // kPack: onto the GPUs this running job holds
  int gpus = 0;     // kResize: the new GPU count
};
const char* MechanismKindName(MechanismRequest::Kind kind);

// An operator replaces the queues (teams, quotas, weights, limits) while
// jobs run: the queue-aware policies take `queues` from now on (what a
// queue was owed carries over where its name stays) and act on them at
// once, a reclaim included. A job whose VC names no leaf any more is in
// the shared queue. Refused, changing nothing, unless `queues` make a tree
// (CheckQueues). `previous`: the queues until now, the world's record (a
// log replayed from before this event starts under them); the core does
// not read it.
struct QueuesChanged {
  std::vector<QueueConfig> queues;
  std::vector<QueueConfig> previous;
};

using EventBody =
    std::variant<JobArrived, JobFinished, ProfileReport, ActionDone,
                 ActionFailed, ServerUp, ServerDown, Tick, KillRequest,
                 PriorityRequest, HoldRequest, MechanismRequest, CordonRequest,
                 JobFound, DrainRequest, CarrierKnown, ProcessLost,
                 QueuesChanged>;

struct Event {
  Time time;
  EventBody body;
};

const char* EventName(const EventBody& body);

}  // namespace gandiva::core
