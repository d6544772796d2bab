// Jobs as the scheduler sees them: what was asked for (JobSpec), where the job
// is in its life (JobState and its transitions), what was measured of it
// (Profile) and the bookkeeping the policies read.
//
// Job records live inside ClusterState and are changed only by the Scheduler;
// policies read them. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/ids.h"
#include "core/time.h"

namespace gandiva::core {

// How a job's work is carried to other GPUs when it is migrated, resized,
// or packed onto another job's GPUs. The checks apply to a job whose
// process was launched (one not launched yet simply starts there).
enum class Carrier : uint8_t {
  // It saves and restores its own state at a mini-batch boundary (the
  // gandiva job-side library): it may go anywhere, be resized, and span
  // servers.
  kSelf,
  // It is declared restartable (it starts again from what it saved
  // itself): it may move and be resized, but not while it spans servers.
  kRestart,
  // Only an image of its process carries it (CRIU): between servers that
  // can save one (ServerSpec::process_images_unusable empty), whole (never
  // resized), and not while it spans servers.
  kProcessImage,
};
std::string_view CarrierName(Carrier c);

// What a user asks for. Validated by ValidateJobSpec before it is accepted.
struct JobSpec {
  // Human-readable name; need not be unique.
  std::string name;
  // GPUs requested: a power of two, at least 1.
  int gpus = 1;
  // Larger is more important. A job is never suspended for one of lower
  // priority. Default 0.
  int priority = 0;
  // Who submitted it (free text; empty = anonymous).
  std::string owner;
  // Multi-job (for example one hyper-parameter search); empty = none.
  std::string group;
  // Virtual cluster (a trace's quota group); empty = none.
  std::string vc;
  // Opts in to grow-shrink: the job may run on more or fewer GPUs than asked.
  bool elastic = false;
  // Mini-batches to train, when known (0 = unknown; the job says when it is
  // done). Used for progress displays only.
  int64_t total_minibatches = 0;
  // The model type when known (the simulator's catalog id; -1 = unknown).
  int32_t model = -1;
  // How its work is carried when it moves: at first from what the job
  // declares (the runtime: restartable or not), then as the world learns
  // more (CarrierKnown: the runtime sees the job-side library attach).
  Carrier carrier = Carrier::kSelf;
  // Runs that may fail before the job does: a run that ends in failure
  // (not a permanent one, JobFinished::permanent) with retries left sends
  // the job back to the queue, after a backoff (SchedulerOptions::
  // start_retry_delay, doubling, at most kMaxStartRetryDelay), to go on
  // from the checkpoint the world kept or from the beginning. 0..kMaxRetries.
  int retries = 0;
};
inline constexpr int kMaxRetries = 100;

// Empty when valid, else "field 'gpus': must be a power of two, got 3".
std::string ValidateJobSpec(const JobSpec& spec);

enum class JobState : uint8_t {
  kQueued,     // waiting for GPUs; holds none
  kRunning,    // holds its GPUs actively (possibly inside a mechanism)
  kSuspended,  // placed (its GPUs count towards height) but not running
  kMigrating,  // moving to other GPUs
  kFinished,   // completed its work
  kFailed,     // exited with an error or its server was lost for good
  kKilled,     // stopped by a user or a policy
};

std::string_view JobStateName(JobState s);
bool IsTerminal(JobState s);
// The state machine: which transitions are legal.
bool CanTransition(JobState from, JobState to);

// What the job looks like when it runs, from ProfileReport events.
struct Profile {
  // Mini-batches per second, exponentially smoothed (see
  // SchedulerOptions::profile_smoothing); 0 until the first report.
  double minibatch_rate = 0;
  // The rate reported last, unsmoothed.
  double last_rate = 0;
  double gpu_memory_gb = 0;
  // 0..1, the share of the GPU's time the job keeps it busy.
  double gpu_utilization = 0;
  int64_t minibatches = 0;
  int reports = 0;
  Time updated = Time::Zero();
  // The rate in each situation the job has been measured in, smoothed the
  // same way: running alone on the GPUs it asked for, and packed with its
  // current partner (reset at every new pack). Reports classify by the
  // job's situation when they arrive.
  double rate_alone = 0;
  int alone_reports = 0;
  double rate_packed = 0;
  int packed_reports = 0;
};

enum class ActionKind : uint8_t {
  kNone,
  kStart,
  kSuspend,
  kResume,
  kMigrate,
  kPack,
  kUnpack,
  kGrow,
  kShrink,
  kKill,
  kSetPriority,
  kRestart,
};
std::string_view ActionKindName(ActionKind k);

struct Job {
  JobId id;
  JobSpec spec;
  JobState state = JobState::kQueued;
  // The GPUs the job is placed on (while running or suspended), or was last
  // placed on (after it ended).
  std::vector<GpuId> gpus;
  // A mechanism under way for this job, if any; the policy must not ask for
  // another until it is done.
  ActionKind in_flight = ActionKind::kNone;
  ActionId in_flight_id;

  Time submitted = Time::Zero();
  // When its first start was sent; Never again if that start failed and
  // the job never ran.
  Time first_started = Time::Never();
  // When it last started running productively (after its start or resume
  // completed); meaningful while running.
  Time run_since = Time::Never();
  // When it was last suspended (or queued); orders time-slicing.
  Time waiting_since = Time::Zero();
  Time ended = Time::Never();

  // Held by an operator: suspended (or kept out of the queue) until
  // released; policies never run it.
  bool held = false;
  // Whether a process was launched for this placement (Run then resumes);
  // cleared when its process is lost with no checkpoint kept (ProcessLost):
  // it then starts again.
  bool launched = false;
  // Where its process last ran: the GPUs of its last Start, Resume,
  // Migrate, Pack, Grow or Shrink that completed (ActionDone), or those it
  // was adopted on (JobArrived, JobFound). Kept while it waits, queued
  // (requeued by its policy) or suspended; a failed action leaves it as
  // it was. Empty before its first run and once its process is lost (its
  // server down, its start failed, ProcessLost). A Resume or Pack on GPUs
  // laid out otherwise relocates the job (Action::relocates).
  std::vector<GpuId> ran_on;
  // Mechanisms carried out on this job: suspends, resumes, migrations,
  // packs and resizes (one that failed is not counted).
  int suspends = 0;
  int resumes = 0;
  int migrations = 0;
  int packs = 0;
  // The job sharing its GPUs while both run (packed), if any; and when the
  // pack was made.
  JobId packed_with;
  Time packed_since = Time::Never();
  // While migrating or resizing: the GPUs it had before (it goes back to
  // them on failure).
  std::vector<GpuId> migrating_from;
  // While shrinking: the GPUs it keeps.
  std::vector<GpuId> shrinking_to;
  int resizes = 0;
  // Starts that failed in a row (a start that succeeds clears it). After a
  // failed start the job waits out of the queue until `start_retry_at`
  // (SchedulerOptions::start_retry_delay, doubling, at most
  // kMaxStartRetryDelay); at SchedulerOptions::start_attempts failures it
  // fails. A failed resume counts here too and waits as long, suspended
  // where it was (out of the waiting jobs), but never fails the job: its
  // process or checkpoint is still there to go on from. A resume that
  // succeeds clears both.
  int start_failures = 0;
  Time start_retry_at = Time::Zero();
  // The servers those failed starts were on (the latest
  // kMaxStartFailedServers): policies place the next start elsewhere when
  // they can, there only when nowhere else will do. Cleared with
  // start_failures.
  std::vector<ServerId> start_failed_on;
  // A Migrate of the running job is under way (it runs again where it was
  // if the migration fails).
  bool migrating_running = false;
  // A migration failed for good (the job cannot be checkpointed): policies
  // leave it where it is; `immovable_reason` says why.
  bool immovable = false;
  std::string immovable_reason;
  // Migrations and grows of this job that failed in a row, not for good;
  // policies do not migrate or grow it again before `move_retry_at` (30 s
  // after the first failure, doubling, at most 30 min). A shrink the
  // cluster needs and an operator's request are not held back. A migrate,
  // grow or shrink that succeeds clears both.
  int move_failures = 0;
  Time move_retry_at = Time::Zero();
  // Its process was lost while it ran and a Restart is under way from the
  // checkpoint the world kept (ProcessLost): if that fails, the core
  // restarts it from the beginning.
  bool restarting_from_checkpoint = false;
  // Lost processes run again (Restarts that completed).
  int restarts = 0;
  // Runs that ended in failure and were tried again (JobSpec::retries); the
  // next waits out of the queue until `start_retry_at`.
  int run_failures = 0;
  Profile profile;

  bool placed() const {
    return state == JobState::kRunning || state == JobState::kSuspended ||
           state == JobState::kMigrating;
  }
  bool busy() const { return in_flight != ActionKind::kNone; }
  // Queued or suspended, but waiting out a failed start or resume: out of
  // the queue (or the waiting jobs) until then, and not to be run.
  bool awaits_start_retry(Time now) const {
    return (state == JobState::kQueued || state == JobState::kSuspended) &&
           start_retry_at > now;
  }
};

}  // namespace gandiva::core
