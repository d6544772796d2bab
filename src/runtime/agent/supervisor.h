// Process supervision for the node agent: starts a job's command as a child
// in a session and process group of its own with the gandiva environment,
// suspends it (SIGTSTP at a mini-batch boundary for jobs using the job-side
// library, SIGSTOP of the group otherwise), resumes it (SIGCONT), kills it
// (SIGTERM, then SIGKILL after a grace period), reaps it and keeps its exit
// record until the caller acknowledges it (the agent does once a report reached
// the daemon). For migration and resize it checkpoints a job (a
// checkpoint-and-exit or resize request on its page; SIGTERM for a restartable
// job without the library), warm-starts one that waits for a checkpoint to
// arrive, and keeps the checkpoints it holds under options.checkpoint_root. A
// job may be several processes (a data-parallel launcher and its ranks):
// signals go to its process group; the process that attached the page (rank
// 0) stops itself at a boundary and the rest of the group is then SIGSTOPped.
// No gRPC here: errors are core::Status values (kNotFound: unknown job;
// kFailedPrecondition: wrong state; kInvalidArgument: bad request, naming the
// field; kUnavailable: the job did not react in time).
//
// Thread-safety: all methods are thread-safe. Actions on one job (Suspend,
// Resume, Kill) are serialised; actions on different jobs run concurrently.
// One waiter thread per running job blocks in waitpid(); the exit callback is
// called from it, outside every lock.
//
// Its parts: the exit journal (exit_journal.h), the held checkpoints
// (held_checkpoints.h), and every signal, spawn and /proc read through
// ProcessOps (process_ops.h), which a test can fault. Its methods are
// defined by part: supervisor.cc (the job table), supervisor_spawn.cc
// (spawning, reaping), supervisor_signals.cc (suspend, resume, kill),
// supervisor_checkpoint.cc (checkpoints, warm starts, CRIU restores).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/page_io.h"
#include "core/status.h"
#include "runtime/agent/capabilities.h"
#include "runtime/agent/exit_journal.h"
#include "runtime/agent/held_checkpoints.h"
#include "runtime/agent/process_ops.h"

namespace gandiva::runtime {

struct SupervisorOptions {
  std::string name = "agent";  // the agent's name (part of page file names)
  std::string work_dir;        // DIR: logs in DIR/jobs/<id>/log
  // Where progress pages go: empty = /dev/shm when it exists, else
  // DIR/jobs/<id>.
  std::string page_dir;
  int num_gpus = 0;  // local GPU indices must be < this (0: not checked)
  bool virtual_gpus = true;  // CUDA_VISIBLE_DEVICES="" + GANDIVA_VIRTUAL_GPUS
  int cpus_per_gpu = 0;      // > 0: pin virtual-GPU jobs to CPUs (affinity)
  std::chrono::milliseconds kill_grace{10000};       // SIGTERM -> SIGKILL
  std::chrono::milliseconds suspend_timeout{30000};  // request -> stopped
  // A job suspended this soon after its start whose library has not yet
  // announced itself is waited for, up to then, before it is stopped
  // without it (SIGSTOP, not at a boundary).
  std::chrono::milliseconds library_start_grace{10000};
  std::chrono::milliseconds resume_timeout{30000};  // SIGCONT -> running
  // Checkpoints: GANDIVA_CHECKPOINT_DIR of job J is
  // ROOT/jobs/J/checkpoint, a warm start's GANDIVA_RESUME_FROM is
  // ROOT/jobs/J/incoming. Empty: work_dir.
  std::string checkpoint_root;
  // Checkpoint(): request -> exited with the checkpoint saved.
  std::chrono::milliseconds checkpoint_timeout{60000};
  // Makes this process a child subreaper (PR_SET_CHILD_SUBREAPER, process
  // wide): what a job's process leaves running when it ends (a background
  // command whose parent exited, the tree a CRIU dump killed) becomes this
  // process's child, and is killed and reaped with the job's group, rather
  // than left to an init that may never reap it (an agent that is PID 1 in
  // its container, or a sandbox's): its zombie would keep the PID, which a
  // CRIU restore needs free.
  bool reap_orphans = true;
  // Jobs run as their owner's Unix account (StartParams::owner): the account
  // `user_map` maps the owner to, else the account of the owner's name;
  // this process must be root. An account that is root (uid 0) is refused
  // unless `allow_root_jobs`. Off: jobs run as this process's user.
  bool run_as_owner = false;
  std::map<std::string, std::string> user_map;
  bool allow_root_jobs = false;
  // The calls that signal and spawn the jobs' processes and read /proc
  // (process_ops.h). Null: the real ones (RealProcessOps). Tests pass one
  // that fails some of them.
  std::shared_ptr<ProcessOps> process_ops;
  // gandiva-job-shim (job_shim.cc), the parent of each job's process, which
  // keeps its exit status when the agent is gone, so that the next agent
  // can take the job back (TakeBackLeftovers). Empty: the one beside this
  // program, else the one built with this library; "none": no shim (an
  // agent's death loses its jobs, as KillLeftovers says).
  std::string job_shim;
};

struct StartParams {
  int64_t job_id = 0;
  // Who submitted it (JobSpec.owner): its account with run_as_owner.
  std::string owner;
  std::string command;  // run as /bin/sh -c <command>
  std::string workdir;  // must exist; empty: DIR/jobs/<id>
  std::map<std::string, std::string> env;
  std::vector<int> gpus;    // local GPU indices
  std::string resume_from;  // GANDIVA_RESUME_FROM when non-empty
  // The job keeps its own checkpoints in GANDIVA_CHECKPOINT_DIR: Checkpoint()
  // may stop it with SIGTERM (JobSpec.restartable).
  bool restartable = false;
  // Warm start: GANDIVA_RESUME_FROM=IncomingDir(job), GANDIVA_RESUME_WAIT=1
  // (the library waits for the ready file there). resume_from must be empty.
  bool warm = false;
  // GANDIVA_RESUME_FROM = the checkpoint held here for the job
  // (HeldCheckpoint); kFailedPrecondition when there is none. A CRIU dump
  // held is restored instead (CriuRestore: the command is not run; the
  // process keeps its environment and is pinned to these GPUs' CPUs).
  bool resume_local = false;
  // One part of a multi-server job (proto Gang): the variables its launcher
  // reads (GANDIVA_NNODES, GANDIVA_NODE_RANK, GANDIVA_WORLD_SIZE over all
  // parts, GANDIVA_LOCAL_WORLD_SIZE, GANDIVA_RANK_OFFSET,
  // GANDIVA_MASTER_ADDR, GANDIVA_MASTER_PORT), set over the spec's. Empty:
  // a single-server job.
  std::map<std::string, std::string> gang_env;
  // JobSpec.checkpoint_every_*: GANDIVA_CHECKPOINT_EVERY_MINIBATCHES or
  // GANDIVA_CHECKPOINT_EVERY_S for the job-side library (0: none). The
  // checkpoint a failed process saved so (GANDIVA_SAVED_FILE) is held, its
  // exit marked checkpoint_kept, method "periodic".
  int64_t checkpoint_every_minibatches = 0;
  int64_t checkpoint_every_us = 0;
  // A part other than the lead: its ranks do not attach to the page, so
  // Suspend stops it with SIGSTOP at once rather than waiting for them to.
  bool without_library = false;
  // When the daemon had the job submitted (StartJobRequest.submitted_us; 0
  // unknown): with the id, it tells this job from another of the same id.
  // Kept with the process (JobView) and the checkpoints it saves
  // (HeldCheckpointSubmitted); resume_local refuses a held checkpoint of
  // another submission.
  int64_t submitted_us = 0;
  // The job's spec as the daemon sent it (a serialized rpc::JobSpec),
  // kept with the process and reported back (JobView::spec): a daemon
  // whose store lost the job (restored from an older backup) adopts it
  // from that. The supervisor does not read it.
  std::string spec;
};

// The variables of a gang part, in the order the launcher documents them.
inline constexpr const char* kGangEnvNames[] = {
    "GANDIVA_NNODES",      "GANDIVA_NODE_RANK",   "GANDIVA_LOCAL_WORLD_SIZE",
    "GANDIVA_RANK_OFFSET", "GANDIVA_MASTER_ADDR", "GANDIVA_MASTER_PORT"};

struct StartResult {
  pid_t pid = 0;
  int64_t took_us = 0;
};
struct SuspendResult {
  int64_t took_us = 0;       // request -> stopped
  bool at_boundary = false;  // the library stopped at a mini-batch boundary
};
struct ResumeResult {
  int64_t took_us = 0;  // SIGCONT -> running again
};
struct CheckpointResult {
  int64_t took_us = 0;  // request -> exited with the checkpoint complete
  // The job's own save, from its page (criu: the dump); 0: unknown.
  int64_t save_us = 0;
  int64_t bytes = 0;  // regular files in the checkpoint directory
  int files = 0;
  std::string method;  // "library", "restart" or "criu"
  int64_t minibatches = 0;
  // 75 / 76 (library), whatever SIGTERM gave (restart), -9 (criu).
  int exit_code = 0;
  // reply_when_saved: the checkpoint was complete and the job leaving
  // (exit_code is the one its page announced), its process not gone yet.
  bool exiting = false;
};
struct WarmReady {
  bool ready = false;    // the job waits for its checkpoint (or restores)
  int64_t ready_us = 0;  // process start -> page state WAITING
};
// The notes a job and its agent leave each other in a checkpoint directory
// (the warm start's ready file and stream files, a periodic checkpoint's
// note: progress_page.h; their temp files): never part of a checkpoint.
bool IsNoteFile(std::string_view name);

struct RestoreResult {
  int64_t warm_us = 0;  // process start -> page state WAITING (0: unseen)
  int64_t load_us = 0;  // restore_end - restore_begin, from the page
  uint64_t restore_begin_ns = 0;  // the page's (CLOCK_MONOTONIC)
  uint64_t restore_end_ns = 0;
  int64_t first_minibatch_us = 0;  // restore end -> a boundary after it
};

enum class RunState { kRunning, kSuspended, kExited };

// A snapshot of one job as the supervisor sees it.
struct JobView {
  int64_t job_id = 0;
  pid_t pid = 0;  // the child (process group leader)
  RunState state = RunState::kRunning;
  std::vector<int> gpus;
  uint64_t minibatches = 0;
  double minibatch_rate = 0;  // smoothed, per second; 0 when unknown
  bool uses_library = false;  // the job attached to its progress page
  pid_t library_pid = 0;      // the process that attached (0: none)
  std::string log_path;
  int exit_code = 0;   // when kExited: status, or -N when killed by signal N
  int world_size = 0;  // GPUs it was started on
  // "exclusive", "time-shared" (another running job here holds one of its
  // GPUs) or "mps" (that, with MPS usable).
  std::string sharing = "exclusive";
  bool warm = false;  // started with StartParams::warm
  bool gang = false;  // one part of a multi-server job (StartParams.gang_env)
  bool has_checkpoint = false;  // HeldCheckpoint(job_id) is set
  client::Metric metric;        // the job's last reported one
  int64_t submitted_us = 0;     // StartParams::submitted_us
  std::string spec;             // StartParams::spec
};

class Supervisor {
 public:
  // `on_exit` (may be empty) is called from a waiter thread after each exit
  // has been recorded.
  explicit Supervisor(SupervisorOptions options,
                      std::function<void(const ExitRecord&)> on_exit = {});
  // Kills every live job (KillAll) and joins the waiter threads.
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  const SupervisorOptions& options() const { return options_; }

  // Kills what an earlier run of an agent with this work_dir left running:
  // each job process it started is recorded in
  // work_dir/jobs/<id>/process.<pid> (with the process's start time) until
  // it ends, so records left are of processes that outlived their agent (it
  // was killed, or crashed). A record whose process is gone, or whose pid
  // names another process now, is only removed; one whose agent still runs
  // (another agent on this work dir, or this one) is left alone. Call
  // before starting jobs. Returns the ids of the jobs whose processes it
  // killed.
  std::vector<int64_t> KillLeftovers();

  // What TakeBackLeftovers did with each job an earlier run left.
  struct TakenBack {
    std::vector<int64_t> adopted;  // runs on (or stays suspended), ours now
    std::vector<int64_t> ended;    // ended meanwhile: its exit is pending
    std::vector<int64_t> killed;   // could not be taken back: killed
  };
  // As KillLeftovers, but a job an earlier run started through the shim
  // (options.job_shim) is not killed: while its shim lives, this supervisor
  // takes the job back (it is listed, suspended, resumed, killed,
  // checkpointed and reaped as one it started; its exit status comes from
  // the shim's exit file), and a job that ended while no agent ran has its
  // exit recorded from that file (PendingExits), with the mini-batches and
  // metric its page showed last. The rest (no shim: a job restored by CRIU,
  // or a record of an older agent; a shim killed) is killed, as
  // KillLeftovers does. Call before starting jobs.
  TakenBack TakeBackLeftovers();
  // The shim jobs are started through ("" none).
  const std::string& job_shim() const { return shim_; }

  // Launches the job; returns once the command runs (exec succeeded).
  // kAlreadyExists if the job already runs here; kInvalidArgument for a
  // bad field (job_id, spec.command, spec.workdir, spec.env, gpus); kIo when
  // a file or the process cannot be created.
  core::StatusOr<StartResult> Start(const StartParams& params);
  // Returns once the job is stopped (bounded by suspend_timeout).
  // kAlreadyExists if it is suspended already; kFailedPrecondition if it
  // has exited.
  core::StatusOr<SuspendResult> Suspend(int64_t job_id);
  // Returns once the job runs again (bounded by resume_timeout).
  // kAlreadyExists if it is not suspended (it runs); kFailedPrecondition if
  // it has exited.
  core::StatusOr<ResumeResult> Resume(int64_t job_id);
  // SIGCONT + SIGTERM to the group, SIGKILL after kill_grace; returns once the
  // job has exited. Ok for a job that already exited. With keep_periodic
  // (a multi-server job's lead, stopped because another part failed) its
  // exit is a failure's: its last periodic checkpoint is kept, as if it
  // had failed itself.
  core::Status Kill(int64_t job_id, bool keep_periodic = false);
  // Kills every live job concurrently, as Kill does; with agent_stopping
  // (the agent shuts down) their exits are marked so.
  void KillAll(bool agent_stopping = false);
  // Before an agent stops: every live job that can save its training state
  // without CRIU (it attached the library, or is restartable), and with
  // `with_criu` any other where CRIU is usable here (a dump, restored by the
  // Start(resume_local) of the next agent), other than a warm start that
  // has not restored its checkpoint yet (one moved here that has trains as
  // any job) and a part of a multi-server job, is checkpointed as for a
  // migration (Checkpoint), all at once, each within `timeout`; each saved
  // job's exit is marked checkpoint_kept and its checkpoint held (on disk
  // too, for RecoverCheckpoints). The jobs that could not be saved are left
  // as they were (for KillAll), the reasons in *failures when given.
  // Meanwhile it waits, within the same `timeout`, for the jobs in
  // `exiting` to exit (parts of multi-server jobs the daemon has save:
  // their ranks leave once rank 0 has saved). Returns the ids of the jobs
  // saved here.
  std::vector<int64_t> CheckpointForStop(
      std::chrono::milliseconds timeout,
      std::vector<std::string>* failures = nullptr,
      const std::vector<int64_t>& exiting = {}, bool with_criu = false);

  // Migration / resize, source side: the job saves its state and exits.
  // A job attached to its page gets a checkpoint-and-exit request (resize
  // when resize_to > 0) and, if suspended, SIGCONT; the reply comes once it
  // exited with 75 (76) and CheckpointDir() is non-empty. If it reports a
  // failed save or does not finish within checkpoint_timeout, the request is
  // cancelled, the job is put back as it was (suspended again if it was) and
  // the result is kFailedPrecondition. A job without the library that is
  // restartable gets SIGTERM (then SIGCONT if suspended); kUnavailable if it
  // does not exit in time. Any other job, when CRIU is usable here and this
  // is no resize: dumped by CRIU into CheckpointDir/criu (CriuDump, which
  // kills it; a failed dump leaves it as it was, with kFailedPrecondition or
  // kUnavailable). Otherwise kFailedPrecondition with the reason, the job
  // untouched. On success the checkpoint directory is held
  // (HeldCheckpoint). The exit is recorded and reported as any other.
  // reply_when_saved (a migration through the library, resize_to == 0):
  // success comes as soon as the page says the checkpoint is saved and the
  // job exits with 75, before its process is gone (`exiting`).
  core::StatusOr<CheckpointResult> Checkpoint(int64_t job_id, int resize_to = 0,
                                              bool reply_when_saved = false);

  // Warm start, destination side: waits (bounded by `timeout`) until the job
  // started warm waits for its checkpoint (page WAITING) or has begun to
  // restore it; ready=false when the time ran out first. kFailedPrecondition
  // if the job was not started warm or exited.
  core::StatusOr<WarmReady> AwaitWarm(int64_t job_id,
                                      std::chrono::milliseconds timeout);

  // Warm start, destination side: waits (bounded by `timeout`) until the job
  // (started warm, still running) waits for its checkpoint (page WAITING),
  // calls make_ready() (which must create the ready file in IncomingDir),
  // then waits until the job restored (restore_end_ns != 0) and, with
  // await_first_minibatch, passed a boundary after that. Then, with `hold`,
  // IncomingDir is the job's held checkpoint (without: the job took its
  // checkpoint from the source itself and none is held here).
  // kFailedPrecondition if the job was not started warm or exited;
  // kUnavailable on timeout; make_ready()'s error.
  core::StatusOr<RestoreResult> AwaitRestore(
      int64_t job_id, bool await_first_minibatch,
      std::chrono::milliseconds timeout,
      const std::function<core::Status()>& make_ready, bool hold = true);

  // The directory of the complete checkpoint held here for the job ("" if
  // none): CheckpointDir after Checkpoint(), IncomingDir after AwaitRestore.
  std::string HeldCheckpoint(int64_t job_id) const;
  // Records `dir` as the complete checkpoint held for the job, saved by
  // the job submitted at `submitted_us` (0: as the checkpoint held before,
  // if any, says). Its spec is the checkpoint's held before, else that of
  // the job's process here, if any.
  void HoldCheckpoint(int64_t job_id, const std::string& dir,
                      int64_t submitted_us = 0);
  // Deletes CHECKPOINT_ROOT/jobs/<id> (checkpoint and incoming) and forgets
  // the held checkpoint. True if there was one.
  bool DropCheckpoint(int64_t job_id);
  // Every held checkpoint is also recorded in
  // CHECKPOINT_ROOT/jobs/<id>/held-checkpoint (its directory) until it is
  // dropped. This takes up the checkpoints an earlier agent on this
  // checkpoint root held (one that stopped, or crashed): those whose files
  // are still there are held again (a record whose files are gone is
  // removed). Call at start, before starting jobs. Returns their job ids.
  std::vector<int64_t> RecoverCheckpoints();
  // The jobs whose checkpoint is held here, by id.
  std::vector<int64_t> HeldCheckpoints() const;
  // The cluster a held checkpoint was saved in ("" unknown, or none held).
  std::string HeldCheckpointCluster(int64_t job_id) const;
  // When the job that saved a held checkpoint was submitted (0 unknown, or
  // none held); on disk, the record's third line.
  int64_t HeldCheckpointSubmitted(int64_t job_id) const;
  // The spec (StartParams::spec) of the job that saved a held checkpoint
  // ("" unknown, or none held); on disk, CHECKPOINT_ROOT/jobs/<id>/held-spec.
  std::string HeldCheckpointSpec(int64_t job_id) const;
  // The cluster the agent is registered with (RegisterAgentReply
  // .cluster_id): recorded with every checkpoint held from now on (on disk
  // too: the record's second line). Drops the held checkpoints recorded for
  // another cluster (another job of the same id) and returns their ids.
  std::vector<int64_t> SetCluster(const std::string& cluster);
  // The cluster SetCluster last set ("" none yet).
  std::string Cluster() const;

  // Found in the background at agent start; used for the refusal reason of
  // Checkpoint(), MPS env of packed jobs and JobView::sharing.
  void SetCapabilities(const Capabilities& caps);
  Capabilities capabilities() const;

  // Live jobs (running or suspended); with `include_exited`, also ended ones.
  std::vector<JobView> Jobs(bool include_exited = false) const;
  core::StatusOr<JobView> Job(int64_t job_id) const;
  // Waits (bounded) until the job has exited; false on timeout or unknown job.
  bool WaitForExit(int64_t job_id, std::chrono::milliseconds timeout) const;

  // Exit records not acknowledged yet, oldest first.
  std::vector<ExitRecord> PendingExits() const;
  // Drops the records with seq <= `up_to_seq`.
  void AckExits(uint64_t up_to_seq);
  // As the agent stops without having reported them: the exits that are a
  // job's end (by itself: not superseded, killed, saved or killed for the
  // stop) are written to WORK_DIR/unreported-exits, so that the next agent
  // on this work dir reports them (RecoverUnreportedExits) before the
  // daemon, missing the job, would start it again. Returns how many.
  size_t SaveUnreportedExits();
  // Takes up what SaveUnreportedExits wrote (as pending exits, in order)
  // and removes the file; then the exits an earlier agent on this work dir
  // kept but had not reported when it was killed (each is written to
  // WORK_DIR/exits as it comes, until acknowledged). Returns how many; an
  // unreadable line is skipped.
  size_t RecoverUnreportedExits();

  std::string JobDir(int64_t job_id) const;
  std::string LogPath(int64_t job_id) const;
  // The job's log from the servers it ran on before it moved here
  // (ReceiveCheckpoint fetches it from the source); LogPath continues it.
  std::string EarlierLogPath(int64_t job_id) const;
  std::string CheckpointDir(int64_t job_id) const;
  std::string IncomingDir(int64_t job_id) const;
  std::string PagePath(int64_t job_id) const;

 private:
  // One process of a job (supervisor_impl.h).
  struct JobRec;
  using Clock = std::chrono::steady_clock;

  std::shared_ptr<JobRec> Find(int64_t job_id) const;
  int ExitCodeOf(const JobRec& job) const;  // takes mu_
  // Waits until pred() or the job exited or the deadline; true if pred().
  bool PollUntil(const JobRec& job, Clock::time_point end,
                 const std::function<bool()>& pred) const;

  // Spawning and reaping (supervisor_spawn.cc).
  // work_dir/jobs/<id>/process.<pid>: "<pid> <start time> <agent pid>
  // <agent start time> <page path>" (start times from /proc/<pid>/stat);
  // for a job started through the shim, then "shim <pid> <start time>
  // <exit file>" and "job <gpus, comma-separated, or -> <submitted_us>
  // <restartable> <warm> <gang> <without_library>" (0 or 1), and its spec
  // in spec.<pid> beside it.
  std::string ProcessRecordPath(int64_t job_id, pid_t pid) const;
  void WriteProcessRecord(const JobRec& job) const;
  // The record of a job about to start: its dirs and page created.
  core::StatusOr<std::shared_ptr<JobRec>> NewJobRec(
      const StartParams& params) const;
  std::vector<int> CpusFor(const std::vector<int>& gpus) const;
  // The waiter thread of a job: reaps it and what it left in its group,
  // then records its exit.
  void Wait(const std::shared_ptr<JobRec>& job);
  // Wait's part for a job started through the shim (ours or taken back):
  // the job's exit code.
  int WaitForShim(const JobRec& job);
  // Records the exit of the job `job` (its process gone): what Wait does
  // once it knows the code.
  void Ended(const std::shared_ptr<JobRec>& job, int code);
  // What becomes of the checkpoint dir of job `job_id`, whose process
  // ended: one that left by itself (not to be moved or resized) keeps no
  // checkpoint there, unless it `failed` having saved a periodic one
  // (PeriodicCheckpointAt), which is held for its next run. Returns that
  // one's mini-batch.
  std::optional<int64_t> SettleCheckpoint(int64_t job_id, bool left_by_itself,
                                          bool failed, int64_t submitted_us,
                                          const std::string& spec);
  // TakeBackLeftovers of one record whose shim lives.
  core::Status Adopt(int64_t job_id, const std::string& record_path);

  // Signals (supervisor_signals.cc).
  core::Status KillLocked(JobRec& job);  // job.action_mu held
  core::StatusOr<SuspendResult> SuspendLocked(
      const std::shared_ptr<JobRec>& job,
      Clock::time_point t0);  // job->action_mu held

  // Checkpointing (supervisor_checkpoint.cc).
  // Checkpoint() bounded by `timeout`; without allow_criu a job that needs
  // CRIU is refused.
  core::StatusOr<CheckpointResult> CheckpointWithin(
      int64_t job_id, int resize_to, bool reply_when_saved,
      std::chrono::milliseconds timeout, bool allow_criu);
  core::StatusOr<CheckpointResult> CheckpointLibrary(
      const std::shared_ptr<JobRec>& job, int resize_to, bool was_suspended,
      bool reply_when_saved, std::chrono::milliseconds timeout,
      Clock::time_point t0);
  core::StatusOr<CheckpointResult> CheckpointRestart(
      const std::shared_ptr<JobRec>& job, bool was_suspended,
      std::chrono::milliseconds timeout, Clock::time_point t0);
  core::StatusOr<CheckpointResult> CheckpointCriu(
      const std::shared_ptr<JobRec>& job, const std::string& criu,
      bool was_suspended, std::chrono::milliseconds timeout,
      Clock::time_point t0);
  // Start(resume_local) of a job whose held checkpoint is a CRIU dump.
  core::StatusOr<StartResult> StartFromCriu(const StartParams& params,
                                            const std::string& checkpoint,
                                            Clock::time_point t0);

  const SupervisorOptions options_;
  const std::function<void(const ExitRecord&)> on_exit_;
  const std::shared_ptr<ProcessOps> ops_;  // never null
  std::vector<int> cpus_;  // CPUs this process may use (for pinning)

  // Lock order: mu_ (and a job's action_mu before it) before the locks of
  // exits_ and held_, which call nothing back.
  mutable std::mutex mu_;
  mutable std::condition_variable exited_cv_;
  std::map<int64_t, std::shared_ptr<JobRec>> jobs_;  // guarded by mu_
  std::vector<std::thread> old_waiters_;             // guarded by mu_
  Capabilities caps_;                                // guarded by mu_
  // Thread-safe parts; called under mu_ where what they change goes with
  // the job table (an exit recorded with its job's state, a checkpoint
  // looked up for a start).
  ExitJournal exits_;
  HeldCheckpointTable held_;
  const std::string shim_;  // the shim resolved from options.job_shim
};

}  // namespace gandiva::runtime
