// SchedulerServer::Impl: the daemon's state, and the methods of its parts,
// defined by part in daemon_*.cc and scheduler_server.cc; not for use
// outside the daemon. The loop thread owns everything not marked as
// guarded by a mutex.
#pragma once

#include "runtime/auth/control_token.h"
#include "runtime/scheduler/agent_calls.h"
#include "runtime/scheduler/agent_model.h"
#include "runtime/scheduler/daemon_service.h"
#include "runtime/scheduler/daemon_types.h"
#include "runtime/scheduler/gang_move_steps.h"
#include "runtime/scheduler/job_rows.h"
#include "runtime/scheduler/journal.h"
#include "runtime/scheduler/move_steps.h"
#include "runtime/scheduler/published.h"
#include "runtime/scheduler/retention.h"
#include "runtime/scheduler/scheduler_server.h"
#include "runtime/scheduler/users.h"

namespace gandiva::runtime {

struct SchedulerServer::Impl final {
  SchedulerOptions opts;
  std::string policy_name;
  // The queues in force (--queues, stored with the policy options; changed
  // by ApplyQueues as a QueuesChanged event): jobs name leaves; members and
  // priority bounds are checked at submission. Read on any thread;
  // replaced on the loop (SetQueues).
  std::shared_ptr<const std::vector<core::QueueConfig>> Queues() const {
    std::lock_guard<std::mutex> lock(queues_mu);
    return queues_in_force;
  }
  void SetQueues(std::vector<core::QueueConfig> q) {
    auto next =
        std::make_shared<const std::vector<core::QueueConfig>>(std::move(q));
    std::lock_guard<std::mutex> lock(queues_mu);
    queues_in_force = std::move(next);
  }
  mutable std::mutex queues_mu;
  std::shared_ptr<const std::vector<core::QueueConfig>> queues_in_force =
      std::make_shared<const std::vector<core::QueueConfig>>();
  // The queues in force are not the stored ones yet (storing them after
  // their change failed): stored before the next compaction. The loop's.
  bool queues_unstored = false;
  // --queues when it differs from the stored queues: applied once the
  // state is recovered (ChangeQueues), as `gandiva queues apply` would.
  std::optional<std::vector<core::QueueConfig>> start_queues;
  // What the core is made with (ResolvePolicy; BuildScheduler).
  core::PolicyOptions policy_options;
  core::SchedulerOptions scheduler_options;
  // The cluster's users (users.h; the handlers identify callers by them).
  Users users;
  std::string address;
  // Mutual TLS (--tls-*), if configured.
  std::optional<TlsConfig> tls;
  // `<db>.lock`, locked (flock) while this daemon uses the database.
  int lock_fd = -1;

  ~Impl() {
    if (lock_fd >= 0) ::close(lock_fd);
  }
  std::unique_ptr<Store> store;
  std::unique_ptr<core::Scheduler> sched;

  // --- Owned by the loop thread (and by Start before it runs). ---
  int64_t clock_us = 0;
  // This cluster's id (RegisterAgentReply.cluster_id): set by Open, before
  // the service starts, and never changed.
  std::string cluster_id;
  // The cluster's secret, from which each agent's control token is derived
  // (AgentControlToken, runtime/auth/control_token.h), given to that agent
  // at registration and carried by every call to it: set by Open, before
  // the service starts, and never changed.
  std::string control_token;
  // The ids of the jobs restores from backups lost (kRestoreLostJobsMeta:
  // RestoreDatabase's, and those agents hold, MarkLostIds): read by Open,
  // added to by MarkLostIds; published with each snapshot.
  std::shared_ptr<const IdRanges> lost_ids = std::make_shared<IdRanges>();
  int64_t next_internal_id = 0;
  std::map<int32_t, JobExtra> extras;  // by job id
  // The jobs of `extras` not settled (those PersistAndPublish publishes),
  // in id order, with their records (extras never drops one, so the
  // pointers hold); and those that became so since the last publication,
  // which merges them in.
  std::vector<std::pair<int32_t, JobExtra*>> unsettled;
  std::vector<std::pair<int32_t, JobExtra*>> unsettling;
  // Answers to Call()s, given once what they did is published.
  std::vector<std::function<void()>> answers;
  // The warm StartJob calls of moves under way, by job: a kill cancels the
  // wait for the new process (it may take a minute) instead of queueing
  // behind it. Guarded by warm_mu (executor threads and the loop).
  std::mutex warm_mu;
  std::map<int32_t, grpc::ClientContext*> warm_calls;
  // Moves waiting for the job's first mini-batch after a restart, by job:
  // true once the job was killed (AwaitFirstMinibatch gives up). Guarded
  // by warm_mu.
  std::map<int32_t, bool> first_minibatch_waits;
  std::vector<AgentConn> agents;  // by server id
  std::map<std::string, int32_t> agent_by_name;
  std::map<int64_t, PendingAction> pending;  // by action id
  // Jobs spanning servers that SaveGangForLeave is saving.
  std::set<int32_t> leave_saving;
  WriteBatch batch;
  // Every server's row is written at the end of the first pass (then only
  // those of AgentConn::row_dirty).
  bool all_server_rows_dirty = true;
  // The last event a snapshot includes (0: none); events logged since.
  int64_t compacted_seq = 0;
  int64_t events_since_compaction = 0;
  int64_t compactions = 0;
  double last_compaction_s = 0;
  // Events a snapshot includes are still in the log: deleted a chunk per
  // loop iteration, so that no iteration holds the loop long.
  bool compacted_events_left = false;
  // When the loop next applies the retention limits (CheckRetention).
  int64_t next_retention_check = 0;  // Env's steady clock
  // Archived jobs past --keep-archived-for may be left to delete, a chunk
  // per loop iteration; those deleted this round, and since the start.
  bool archive_prune_left = false;
  int64_t archive_pruned_round = 0;
  int64_t archive_pruned = 0;
  // Every event is logged here before the core handles it (Feed, Defer).
  Journal journal;
  // Jobs whose row is behind in progress alone (PersistAndPublish), and
  // when those rows are written next (Now()).
  std::set<int32_t> progress_behind;
  int64_t progress_write_due_us = 0;
  // The last 24 hours' GPU-seconds by queue, published; worked out again
  // at most every kQueueUsageEvery (PersistAndPublish).
  std::shared_ptr<const std::map<std::string, double>> queue_usage_day =
      std::make_shared<std::map<std::string, double>>();
  int64_t queue_usage_due_us = 0;
  // The Prometheus endpoint (--metrics-listen), if any.
  std::unique_ptr<MetricsExporter> metrics;

  // --- The queue into the loop. ---
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  // For SchedulerServer::activity (guarded by mu): the loop waits for
  // work or its timer, due at loop_wake_us (Env's steady clock); how often
  // it went to wait, and work was posted.
  bool loop_waiting = false;
  int64_t loop_wake_us = 0;
  uint64_t loop_generation = 0;
  uint64_t posts = 0;
  bool shutdown_started = false;
  bool stopped = false;
  std::condition_variable stopped_cv;
  std::thread loop;

  std::unique_ptr<Dispatcher> executor;
  // The gRPC Scheduler service (daemon_service.h), and the server that
  // serves it (none without SchedulerOptions::listen).
  std::unique_ptr<SchedulerService> service;
  std::unique_ptr<grpc::Server> grpc_server;

  // What readers share without waiting for the loop, and the failure
  // streaks of jobs' histories (published.h).
  Published published;
  FailureStreaks streaks;
  int64_t SubmittedUs(int32_t id) const { return published.SubmittedUs(id); }
  // A published JobInfo (no spec) with its job's spec (from `v`, read under
  // its lock), for a reader; and for a queued job whose reason is the
  // queue's (none published: it is in the core, neither held nor waiting to
  // try its start again), that reason as the policy gave it when the info
  // was published (`reasons`).
  rpc::JobInfo WithSpec(const Published::View& v, const rpc::JobInfo& info,
                        const core::QueueReasons* reasons = nullptr) const;

  // ------------------------------------------------------------ helpers

  void Log(const std::string& s) const {
    if (opts.verbose)
      std::fprintf(stderr, "gandiva-scheduler: %s\n", s.c_str());
  }
  void Warn(const std::string& s) const {
    std::fprintf(stderr, "gandiva-scheduler: %s\n", s.c_str());
  }

  // The clock, timers and agent channels (opts.env, set by Start before
  // anything runs; any thread).
  DaemonEnv& Env() const { return *opts.env; }
  int64_t Now() {
    clock_us = std::max(clock_us, Env().WallMicros());
    return clock_us;
  }
  // Now() without moving the clock on.
  int64_t NowConst() const { return std::max(clock_us, Env().WallMicros()); }
  int64_t InternalActionId() {
    // Distinct from the core's small action ids and from earlier runs.
    next_internal_id = std::max(next_internal_id + 1, Env().WallMicros());
    return (int64_t{1} << 62) | next_internal_id;
  }

  void Post(std::function<void()> f) {
    std::lock_guard lock(mu);
    if (stopping) return;
    queue.push_back(std::move(f));
    ++posts;
    cv.notify_one();
  }

  // Runs `f` on the loop and waits for its answer (nullopt when the daemon
  // shuts down first, or after 60 s).
  template <typename T>
  std::optional<T> Call(std::function<T()> f);

  // The loop's record of a job; whoever looks it up may change it, so it
  // is published again (no longer settled).
  JobExtra* Extra(int32_t job);
  // The records of the jobs not settled (the only ones with a process or a
  // checkpoint anywhere), in id order: what a loop over jobs that may have
  // them visits, rather than every job ever run. A copy, so that the loop
  // may look jobs up (Extra) as it goes.
  std::vector<std::pair<int32_t, JobExtra*>> UnsettledJobs() const;
  const core::ClusterState& st() const { return sched->state(); }
  bool LiveJob(int64_t id) const {
    return id > 0 && id < (int64_t{1} << 31) &&
           st().has_job(JobId(static_cast<int32_t>(id)));
  }
  // Whether the core still awaits the outcome of `action`, the job's
  // action under way (not once the job was killed or requeued).
  bool Awaits(int64_t job, int64_t action) const {
    if (!LiveJob(job)) return false;
    const core::Job& j = st().job(JobId(static_cast<int32_t>(job)));
    return j.busy() && j.in_flight_id.value == action;
  }

  // What the daemon makes of what agents tell it (agent_model.h), over the
  // loop's state as it is now.
  AgentModel Model() const {
    return AgentModel(st(), extras, published, cluster_id);
  }
  // The servers a set of cluster GPUs is on (AgentModel::Parts).
  std::vector<Part> Parts(const std::vector<core::GpuId>& gpus) const {
    return Model().Parts(gpus);
  }

  // The agents of a job's parts, for an executor thread; nullopt (and the
  // server in *missing) when one has no connection.
  std::optional<std::vector<PartConn>> Conns(const std::vector<Part>& parts,
                                             std::string* missing) const;

  void History(int32_t job, const std::string& action, bool ok, int64_t took_us,
               const std::string& detail);
  // Writes how often the job's last failure repeated, if it did, and
  // forgets it.
  void EndStreak(int32_t job);

  // ---------------------------------------------------------- the core

  // Logs `body`, hands it to the core and carries out the actions; the
  // events deferred before it are logged in the same transaction and
  // handled first, in the order they came.
  core::Status Feed(core::EventBody body);
  // Feeds `bodies`, in order, logged in one append (with any deferred
  // before them); each one's outcome: the core's, or the store's error for
  // one that could not be logged (and was not handled).
  std::vector<core::Status> FeedTogether(std::vector<core::EventBody> bodies);
  // Logs and handles `body` with the next event fed, or at the end of the
  // loop's pass (fed at once when not `together`): profile reports, which
  // come by the thousand a second on a large cluster, and the outcomes of
  // actions, by the thousand at a quantum's switch, share their
  // transactions (a store's commit costs the same for one event or for a
  // hundred).
  void Defer(core::EventBody body, bool together) {
    if (!together) {
      (void)Feed(std::move(body));
      return;
    }
    journal.Defer(Now(), std::move(body));
  }

  // Logs the deferred events together (see Store::AppendEvents), then
  // hands them to the core in order; returns the last one's outcome (and
  // each one's into `each`). Those that cannot be logged are dropped, not
  // handled.
  core::Status FlushDeferred(std::vector<core::Status>* each = nullptr);
  // The core's handling of one event logged, with the daemon's bookkeeping
  // after it (AfterHandle).
  core::Status HandleLogged(core::Time time, const core::EventBody& body);

  // Daemon bookkeeping after an event; `live` false while replaying the log
  // (the actions were carried out before the crash).
  void AfterHandle(const core::EventBody& body,
                   const std::vector<core::Action>& actions, bool live);

  void Execute(const core::Action& a, bool live);

  bool IsEnded(int32_t job) const {
    return !st().has_job(JobId(job)) ||
           core::IsTerminal(st().job(JobId(job)).state);
  }

  // On the loop: the outcome of an action goes into the job's history, and
  // to the core unless it is stale (the job ended or moved on).
  void Conclude(int32_t job, int64_t action, const std::string& what, bool ok,
                int64_t took_us, const std::string& detail, bool permanent);

  // Posts the outcome of an action back to the loop.
  void Reply(int32_t job, int64_t action, const std::string& what, bool ok,
             int64_t took_us, const std::string& detail) {
    Post([=, this] {
      Conclude(job, action, what, ok, took_us, detail, /*permanent=*/false);
    });
  }

  std::shared_ptr<rpc::Agent::StubInterface> StubOf(ServerId s) const {
    if (!s.valid() || static_cast<size_t>(s.value) >= agents.size()) {
      return nullptr;
    }
    return agents[static_cast<size_t>(s.value)].stub;
  }
  // The name of the agent of a server that has registered.
  const std::string& AgentName(ServerId s) const {
    return agents[static_cast<size_t>(s.value)].name;
  }

  // A ticket for agent `destination` to fetch job `job`'s checkpoint and
  // log from agent `source` (MakeFetchTicket), for an hour: what a
  // ReceiveCheckpointRequest carries. Thread-safe.
  std::string FetchTicket(int32_t job, const std::string& source,
                          const std::string& destination) {
    return MakeFetchTicket(AgentControlToken(control_token, source), job,
                           destination,
                           Env().WallMicros() + int64_t{3600} * 1'000'000);
  }

  std::unique_ptr<grpc::ClientContext> Ctx() const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::microseconds(static_cast<int64_t>(
                          opts.agent_rpc_timeout_s * 1e6)));
    return ctx;
  }

  // From an executor thread: kills the job's process at `server` and has
  // its exit ignored (the daemon stopped it; it is not the job's end). The
  // loop counts the exit to ignore before the agent can report it.
  void KillIgnoringExit(int32_t job, ServerId server,
                        rpc::Agent::StubInterface& stub, int64_t action_id);

  // Kills a process the daemon no longer wants (fire and forget); a gang's
  // parts on every server. With keep_periodic, its lead's agent keeps its
  // last periodic checkpoint (JobRequest.keep_periodic).
  void KillAt(int32_t job, const Proc& where, int64_t action_id,
              bool keep_periodic = false);

  // Carries out a start, a resume or a suspend at the agent where x.proc
  // says the job's process is (moves are Move()'s).
  void Dispatch(const PendingAction& p);

  // Posts the outcome of a move back to the loop: where the process is now,
  // the history line, and the event for the core.
  void FinishMove(int32_t job, int64_t action, const std::string& what, bool ok,
                  bool permanent, int64_t took_us, const std::string& detail,
                  MovedTo moved, Proc from, bool afresh = false);

  // A running job's process is gone (its agent no longer runs it, a move
  // failed and left its checkpoint at the source, its agent is back after
  // stopping it): the core decides how it goes on (ProcessLost), from the
  // checkpoint its agent keeps if `checkpoint`; `why` is for the history.
  void LoseProcess(int32_t job, bool checkpoint, std::string why);

  // Carries out the core's Restart where x.proc says: from the checkpoint
  // the agent keeps (resume_local) when the action relocates, else afresh.
  // The process counts as there from now on: an action that comes
  // meanwhile is queued behind the start and acts on it. An agent away, or
  // out of reach for a restart from its checkpoint, is waited for: the
  // action stays pending, unsent, until it registers (Reconcile) or, when
  // the agent was registered but its StartJob did not get through, until
  // a report from it kRetryUnreachedS on.
  void DispatchRestart(PendingAction& p);
  static constexpr double kRetryUnreachedS = 5;
  // Sends the restarts waiting for agent `a` (DispatchRestart), or fails
  // those from a checkpoint it no longer holds (the core then restarts
  // them from the beginning). `unreached_only`: only those whose StartJob
  // did not reach it, kRetryUnreachedS or more ago.
  void SendWaitingRestarts(AgentConn& a, bool unreached_only);

  // ------------------------------------------------------------ gangs
  //
  // A job whose GPUs span servers runs one part per server, each a
  // launcher of the ranks on that server's GPUs (StartJobRequest.gang). The
  // lead's part holds rank 0, which alone talks to its agent: a suspend
  // stops it at a mini-batch boundary (the other ranks then wait in their
  // next collective) and then stops the other parts where they wait; a
  // resume continues them first. A gang moves (migrate, resize, a resume
  // or pack elsewhere, and into or out of being a gang) by restarting
  // every part from the one checkpoint rank 0 saves at the lead's agent,
  // copied to each other part's agent first.

  // Action ids for the agent calls of one piece of executor work (Ids,
  // agent_calls.h), drawn on the loop.
  Ids TakeIds(size_t n) {
    Ids r;
    for (size_t i = 0; i < n; ++i) r.ids.push_back(InternalActionId());
    // The fallback above must not reach the next id drawn.
    next_internal_id += static_cast<int64_t>(n) + 64;
    return r;
  }

  // Microseconds of Env()'s steady clock since `t` (SteadyMicros()).
  int64_t UsSince(int64_t t) const { return Env().SteadyMicros() - t; }

  // Executor thread: continues (`resume`) or stops again every part of a
  // suspended gang but its lead's, for the lead's checkpoint (which needs
  // all its ranks) or after it failed.
  void ContinueOrStopFollowers(int32_t job, const std::vector<PartConn>& parts,
                               Ids& ids, bool resume);

  // Executor thread: stops the job's process at a part (its exit comes
  // marked killed, not the job's end); keep_checkpoint leaves the
  // checkpoint that agent holds, else it goes too.
  void KillPart(int32_t job, const PartConn& c, int64_t id,
                bool keep_checkpoint);

  // Executor thread: after a restart from a checkpoint taken at mini-batch
  // `saved`, polls the agent of the job's rank 0 until its process there
  // has trained past it. Returns the time since `since`, or -1 when that
  // did not happen within a minute, the process went away, or the job was
  // killed meanwhile.
  int64_t AwaitFirstMinibatch(int32_t job, const PartConn& lead, int64_t saved,
                              int64_t since);

  // Executor thread: starts the job's parts in rank order, the lead first
  // (its agent picks the port the ranks meet at); resume_local: each from
  // the checkpoint its agent holds. One part alone is a plain start. On a
  // failure the parts started are stopped again, their checkpoints kept.
  bool StartParts(int32_t job, const rpc::JobSpec& spec,
                  const std::vector<PartConn>& parts, bool resume_local,
                  Ids& ids, std::string* err);

  // Executor thread: each part not on the source's server receives the
  // checkpoint the source holds (held there for StartParts(resume_local)),
  // all at once (each pull is its own offer at the source). *summary: the
  // slowest transfer, bytes and channel ("" if none); *err: the first part
  // that failed; *gone (if given): the source holds no checkpoint of the
  // job (a part's ReceiveCheckpoint answered NOT_FOUND).
  bool Distribute(int32_t job, const PartConn& source,
                  const std::vector<PartConn>& parts, Ids& ids,
                  std::string* err, std::string* summary, bool* gone = nullptr);

  // A start, suspend or resume of a gang where x.proc says its parts are.
  void DispatchGang(const PendingAction& p, bool starts, bool suspends);

  // The core's Restart `action` of a gang, afresh: every part starts again
  // where it is placed.
  void RelaunchGang(int32_t id, int64_t action);

  // An agent with a part of this job spanning servers stops (Leave; it
  // serves on until its own jobs have saved): rank 0 saves the job's
  // checkpoint at the lead's agent and every rank exits, as for a move;
  // the job then waits, placed where it was, for the agent to be back
  // (Reconcile restarts every part from that checkpoint) or to be declared
  // down. Without this the ranks left on the other servers fail when
  // their peers go, and the job with them. True when the save is under way
  // (the agent waits for its part to exit).
  bool SaveGangForLeave(int32_t id, JobExtra& x, const AgentConn& a);

  // The core's Restart `action` of a gang from its checkpoint (its move
  // failed once it had checkpointed, or its agents are back): every part
  // starts again where it was, from the checkpoint the lead's agent kept.
  // With `saved` (the mini-batch of the checkpoint; -1: unknown) the
  // history line also says when the job trained its first mini-batch past
  // it, and with `paused_since_us` (wall clock) how long it had not
  // trained.
  void RestartGangAtSource(int32_t job, const Proc& from,
                           const std::string& why, int64_t saved,
                           int64_t paused_since_us, int64_t action);

  // Carries out a move of a gang, or of a job that becomes one or stops
  // being one, from `from` to where x.proc now says: rank 0 saves at a
  // mini-batch boundary and every rank exits (CheckpointJob at the lead;
  // a suspended gang's other parts are continued first so that they can
  // take part); the other parts that remain are stopped; each new part's
  // agent receives the checkpoint from the lead's; every part starts from
  // it. No warm start: the parts must meet afresh at the new lead anyway.
  void MoveGang(const PendingAction& p, const Proc& from);

  // Moves a job's process, or the checkpoint an agent holds for it, from
  // `from` to where x.proc now says, carrying out a Migrate, a Grow or a
  // Shrink, a Resume or Pack on other GPUs than its process is on, or the
  // Start of a job whose checkpoint an agent kept (Execute):
  //   1. the destination starts the job warm (another server only, for a
  //      job running at the source; a kept checkpoint is received cold): the
  //      interpreter starts and the model is built while the job trains on
  //      at the source, until the new process waits for its checkpoint;
  //   2. the source has the job save its training state and exit
  //      (CheckpointJob: at a mini-batch boundary, to a ramdisk; to another
  //      server the call returns once the checkpoint is saved);
  //   3. the destination pulls the checkpoint (bulk TCP channel, else the
  //      gRPC stream) and hands it to the warm process, which loads it and
  //      trains its first mini-batch (ReceiveCheckpoint); on the same server
  //      it restarts from the checkpoint there instead.
  // A job that cannot be checkpointed fails a Migrate for good; a resume
  // elsewhere restarts it from scratch (it has nothing else to go on).
  void Move(const PendingAction& p, const Proc& from);
  // Dispatcher thread: one step of a gang's move (GangMoveSteps).
  GangResult CallForGangMove(const GangCall& c, int32_t job,
                             const rpc::JobSpec& spec,
                             const std::vector<PartConn>& src,
                             const std::vector<PartConn>& dst, Ids& ids);
  // Dispatcher thread: one call of a move (MoveSteps) to the agent at `at`.
  MoveResult CallForMove(
      const MoveCall& c, int32_t job, const Proc& at,
      const std::shared_ptr<rpc::Agent::StubInterface>& stub);

  // After a decision that changes how fast the job (and its partner)
  // trains, the next reports say by how much.
  void StartProbe(int32_t job, const std::string& what, int64_t action);

  void CheckProbe(int32_t job, JobExtra& x);

  // ----------------------------------------------------------- agents

  core::StatusOr<int32_t> RegisterAgent(const rpc::RegisterAgentRequest& r);

  // After an agent out of reach registers again: each job it still runs
  // that the daemon kept there says so in its history, with how long.
  void KeptThroughSilence(const AgentConn& a,
                          const rpc::RegisterAgentRequest& r,
                          int64_t silent_since_us);

  // The checkpoints a registering agent holds of queued jobs that last ran
  // with their rank 0 on its server, which the daemon did not know of: a
  // job requeued when its server, or a server of its gang, was declared
  // down, its checkpoint kept here (by a gang's lead, or by an agent that
  // is back after all), and the daemon restarted since (where a checkpoint
  // is kept is not in the event log) or the agent was declared down
  // meanwhile. The job's next start goes on from it rather than from the
  // beginning. Only such jobs: a checkpoint of a job placed elsewhere (or
  // never) is not taken for theirs.
  void AdoptKeptCheckpoints(const AgentConn& a,
                            const rpc::RegisterAgentRequest& r);

  // Makes the daemon's view and the agent's agree after a (re-)registration.
  // The processes of `killed` are already dealt with (AdoptLostJobs).
  void Reconcile(AgentConn& a, const rpc::RegisterAgentRequest& r,
                 const std::set<int32_t>& killed);
  // The daemon's record of job `id`'s action under way; none when it has
  // none (or the job is not the core's).
  PendingAction* InFlight(int32_t id);
  // Carries out one step of the model's plan for job `id`, in its order
  // (AgentModel::Step); a failure to feed its event is warned of.
  void Carry(int32_t id, AgentModel::Step step);

  // A copy of a job that a registering agent `a` lists, cut off while the
  // job was placed again, and further on than the job is now
  // (AgentModel::Process::kSaveStray): it saves a checkpoint there
  // (CheckpointJob), and then StrayCheckpointed.
  void SaveStray(const AgentConn& a, const rpc::AgentJob& listed);
  // The job goes on from the copy's checkpoint, kept at `at`: a queued job
  // at its next start; a job placed elsewhere at once, its run there
  // stopped, if the copy is still further on than that run (the core
  // restarts it from the checkpoint, which is moved to its GPUs:
  // DispatchRestart); else the checkpoint is dropped. A copy that could
  // not save is killed.
  void StrayCheckpointed(int32_t id, const Proc& at, const std::string& name,
                         const grpc::Status& s, const rpc::CheckpointReply& rep,
                         int64_t took_us);

  // A job the daemon placed on `a` that the agent no longer runs and whose
  // exit never came: its process is lost.
  void Lost(AgentConn& a, int32_t id);

  // A report carried out: each exit's and each profile's plan
  // (AgentModel::PlanExit, PlanProfile), then the jobs its registration did
  // not list that are lost (LostAtFirstReport).
  grpc::Status DoReport(const rpc::AgentReport& r);

  // A job's process that its agent reports in the other state than the
  // core has the job in (suspended while the core has it running, or
  // running while suspended), with no action of it under way, in two
  // reports in a row with no suspend or resume of it between: the daemon
  // and the agent parted ways (an action's outcome seen wrong, a call that
  // got there after its reply), and the job would stay so for good: shown
  // running with no progress, or training unseen on GPUs the core gives
  // others in their turn. The agent is told to set it right: to resume or
  // suspend the process, as the core has the job (history `reconcile`).
  // The second report is built after the first was handled: one that
  // predates an action's reply does not count twice.
  void StateCheck(const AgentConn& a, int32_t id, JobExtra& x,
                  rpc::JobState reported);

  // An agent that stops says so first (its jobs are saving a checkpoint to
  // go on from when it is back): its server is cordoned, so that nothing
  // new is placed on GPUs no agent serves, and it is waited for
  // --agent-away-s before it is declared down.
  core::StatusOr<rpc::LeaveReply> Leave(const rpc::LeaveRequest& r);

  LivenessLimits lim() const {
    return LivenessLimits::FromSeconds(opts.agent_timeout_s, opts.agent_grace_s,
                                       opts.agent_away_s);
  }
  // The out-of-reach agent of a server the job's process is on, if any.
  const AgentConn* OutOfReachAgentOf(const Proc& p) const;
  // Some part of the job is on a server whose agent is away.
  bool AnyPartAway(const Proc& p) const {
    const std::vector<Part> parts = p.parts();
    return std::any_of(parts.begin(), parts.end(), [&](const Part& part) {
      return !Away(part.server).empty();
    });
  }

  // Why calls to the agent of `s` would fail now ("": they may not): it
  // said it was stopping.
  std::string Away(ServerId s) const {
    if (!s.valid() || static_cast<size_t>(s.value) >= agents.size()) return "";
    const AgentConn& a = agents[static_cast<size_t>(s.value)];
    return UnreachableReason(a.name, a, NowConst());
  }

  void CheckAgents();

  // An agent not heard of for --agent-timeout-s: its server is cordoned
  // (the daemon's cordon, in its row before it is logged, lifted when it
  // registers again), calls to it fail at once, and its jobs stay placed
  // there, as they were: a network that parts for a while costs them
  // nothing. Declared down --agent-grace-s later (CheckAgents).
  void OutOfReach(AgentConn& a);

  // ------------------------------------------------------- user requests

  // Stores the jobs (durable before anything else), in order, then hands
  // them to the core, their arrivals logged in one append. When the store
  // fails part way (etcd writes a transaction per 99 jobs) the ones stored
  // go on, and the error names them.
  core::StatusOr<std::vector<int64_t>> Submit(
      std::span<const rpc::JobSpec* const> jobs);

  void AddExtra(int32_t id, const rpc::JobSpec& spec,
                const std::string& spec_json) {
    JobExtra& x = extras[id];
    x.spec = spec;
    x.spec_json = spec_json;
    unsettling.emplace_back(id, &x);
    published.AddSpec(id, spec);
  }
  // Records the jobs' submission times as the core has them (SubmittedUs):
  // as each arrives (AfterHandle), and after a recovery (a snapshot
  // restores jobs without their arrival).
  template <typename Ids>
  void NoteSubmitted(const Ids& ids) {
    for (const auto id : ids) {
      const auto job = static_cast<int32_t>(id);
      if (!st().has_job(JobId(job))) continue;  // not arrived yet
      published.SetSubmitted(job, st().job(JobId(job)).submitted.micros());
    }
  }

  core::Status CheckLiveJob(int64_t id) const;

  // Kills (`kill`), or holds or releases (`hold`), the jobs `ids`, their
  // requests logged in one append: each one's outcome, in order (a job
  // named twice: the outcome of its first). `notes`, if given, gets one
  // per job: for a release that leaves the job waiting (queued, or
  // suspended for its turn), what it waits for; else "".
  std::vector<core::Status> ActOnJobs(
      std::span<const int64_t> ids, bool kill, bool hold,
      const std::string& reason, const Caller& by,
      std::vector<std::string>* notes = nullptr);

  // An operator's request for a mechanism: refused with the core's reason
  // (Scheduler::Check: room, state, and whether the job's work can be
  // carried there) when it cannot be done now.
  core::Status Mechanism(const core::MechanismRequest& m,
                         const std::string& label);

  // The core's DrainRequest (it picks each job's target, or says why it
  // stays), its outcomes as the reply; or opens the server again.
  core::StatusOr<rpc::DrainReply> Drain(const rpc::DrainRequest& r,
                                        const Caller& by);

  // New queues from a queues file's text (ApplyQueuesRequest).
  core::StatusOr<rpc::ApplyQueuesReply> ApplyQueues(
      const rpc::ApplyQueuesRequest& r, const Caller& by);
  // `next` as the queues from now on: checked (a tree; every live job's
  // queue still a leaf), then, unless a dry run or the same as now, fed to
  // the core (QueuesChanged, logged) and stored, and the daemon's log says
  // what changed and who asked (`by`: "by alice from teams.yaml"). The
  // reply lists what changes.
  core::StatusOr<rpc::ApplyQueuesReply> ChangeQueues(
      std::vector<core::QueueConfig> next, bool dry_run, std::string_view by);

  // A change of a live job's priority (history `priority`), by its owner or
  // an admin (access.h); its priority before.
  core::StatusOr<int32_t> SetPriority(int64_t id, int32_t priority,
                                      const Caller& by);

  // --------------------------------------------- persistence and snapshot

  ServerRow ServerRowOf(const AgentConn& a) const;

  // A hash of everything InfoOf(id, x) reads, so that a job whose
  // inputs are unchanged keeps its published info (at 10,000 queued jobs,
  // building every one's again for each request cost the daemon tens of
  // milliseconds a request). 0 (build it again): its waiting reason counts
  // down the time its agent has left.
  uint64_t PublishInputs(int32_t id, const JobExtra& x) const;

  // What is published of the job (without its spec: see Snapshot::jobs).
  rpc::JobInfo InfoOf(int32_t id, const JobExtra& x) const;

  // verify_reused_job_info: the info a publication reuses is the one
  // InfoOf (ServerInfoOf) would build now; the daemon aborts if not.
  template <typename Info>
  void AbortUnlessSame(const std::string& what, const Info& reused,
                       const Info& fresh) {
    if (fresh.SerializeAsString() == reused.SerializeAsString()) return;
    Warn(what +
         ": the published info was reused, but its inputs changed: "
         "published " +
         reused.ShortDebugString() + ", now " + fresh.ShortDebugString());
    std::abort();
  }
  void VerifyReused(int32_t id, const JobExtra& x) {
    AbortUnlessSame("job " + std::to_string(id), *x.published, InfoOf(id, x));
  }

  // What ListServers shows of the server of `a`.
  rpc::ServerInfo ServerInfoOf(const AgentConn& a);

  // A hash of everything ServerInfoOf(a) reads (its GPUs and capabilities
  // through the count of registrations), so that an unchanged server keeps
  // its published info: at 1,250 servers of 8 GPUs, building them all again
  // on each pass of the loop was most of the pass. 0 (build it again): an
  // agent awaited, whose deadline is computed from the clocks each time.
  uint64_t ServerInputs(const AgentConn& a) const;

  void VerifyReused(const AgentConn& a) {
    AbortUnlessSame("server " + std::to_string(a.id.value), *a.published,
                    ServerInfoOf(a));
  }

  // The job's row, as `info` shows it, goes into this pass's batch.
  void WriteRow(const rpc::JobInfo& info, JobExtra& x) {
    JobRow row = RowOf(info, x);
    batch.jobs.push_back(row);
    x.written = std::move(row);
    x.has_written = true;
  }

  // `all_progress`: the rows of jobs whose progress alone changed are
  // written now, whenever they were last (a clean stop).
  void PersistAndPublish(bool all_progress = false);

  // What the metrics export, from the last published snapshot.
  MetricsSample SampleMetrics();

  std::shared_ptr<const Snapshot> Snap() const { return published.snapshot(); }

  // ------------------------------------------------------------ the loop

  void LoopMain();

  static constexpr int64_t kCompactionChunk = 5000;

  // Applies the limits on ended jobs between compactions: compacts (which
  // forgets them) when some ended job is past --keep-ended-for, or the
  // ended jobs exceed --keep-ended-jobs by a tenth (fewer wait for the next
  // compaction); starts deleting the archived jobs past
  // --keep-archived-for.
  void CheckRetention();

  void PruneArchive(int64_t limit);

  void DeleteCompactedEvents(int64_t limit);

  // ------------------------------------------------------ log compaction

  // The daemon's bookkeeping that replaying events rebuilds (where each
  // job's process is, actions under way) and the exits it ignores, as JSON.
  json DaemonState() const;

  core::Status RestoreDaemonState(const std::string& text);

  // Snapshots the core and the bookkeeping after the last event logged, and
  // deletes the events it includes. On the loop, between events.
  void CompactLog();

  // The ended jobs that may be forgotten, as (ended_us, id): settled ones
  // only (nothing of them left on any agent, their rows written), with no
  // action or exit of theirs still awaited.
  std::vector<Retention::Ended> Forgettable() const;
  Retention retention() const {
    return Retention{opts.keep_ended_jobs, opts.keep_ended_for_s};
  }

  // The Forgettable jobs beyond --keep-ended-jobs that ended last, and
  // those that ended longer than --keep-ended-for ago, forgotten by the
  // core (Scheduler::Forget), in no particular order. The daemon drops its
  // records of them once the snapshot is written (DropForgotten).
  std::vector<int32_t> ForgetEndedJobs();

  // Drops the daemon's records of jobs the core forgot and, with
  // `archive`, archives their rows in the store (a failure is warned of:
  // the next start archives them).
  void DropForgotten(std::span<const int32_t> ids, bool archive);

  // ----------------------------------------------------------- startup

  // One daemon per database: a second one would interleave its events with
  // the first's. The kernel drops the lock when the process dies.
  core::Status LockDatabase() {
    auto fd = LockDatabaseFile(opts.db_path);
    if (!fd.ok()) return fd.status();
    lock_fd = *fd;
    return core::Status::Ok();
  }

  // The store, named in messages.
  std::string StoreName() const {
    if (opts.leadership) {
      return "etcd prefix '" + opts.leadership->prefix() + "'";
    }
    return "database '" + opts.db_path + "'";
  }

  core::Status Open();

  // The cluster's id and control token: made at the first start on a
  // store, and stored.
  core::Status ResolveClusterId();

  core::Status ResolveRestoreLost();

  // A registering agent holds jobs of this cluster that this store never
  // gave (HighestUnknownId past its last): the store was restored from a
  // backup older than they are (onto a new machine, where the database it
  // replaced is gone, or an etcd snapshot), and the database that gave them
  // is gone. Their ids are recorded as lost and never given (a job
  // submitted now must not take on their checkpoints); Reconcile then
  // kills their processes and drops their checkpoints, as of jobs this
  // daemon never ran.
  void MarkLostIds(const AgentConn& a, const rpc::RegisterAgentRequest& r);

  // The processes a registering agent of this cluster runs of jobs the
  // core has queued, started by this job's submission (the same
  // submission time) on this server alone: a store restored from a backup
  // taken before they started, or a job requeued while its agent was out
  // of reach and still running there. Each is kept where it runs, running
  // or suspended (JobFound), when its GPUs hold no other job; otherwise
  // Reconcile kills it as a stray, and the job starts when it is placed.
  void AdoptQueuedJobsFound(const AgentConn& a,
                            const rpc::RegisterAgentRequest& r);

  // The processes a registering agent runs, and the checkpoints it holds,
  // of jobs whose ids this store lost (MarkLostIds: it was restored from a
  // backup older than they are), each listed with the spec of the job:
  // adopted, with their own id and submission time, rather than killed or
  // dropped. A running (or suspended) job is kept where it is when its
  // GPUs hold no other job; otherwise its process is killed and it is
  // queued: it starts again from the beginning (the kill goes out before
  // any start). A job of which the agent holds only a checkpoint is queued
  // and goes on from it wherever it is placed. A part of a multi-server
  // job, listed without a spec, is not adopted (Reconcile kills it, its id
  // lost, as before). Returns the jobs whose process it killed.
  std::set<int32_t> AdoptLostJobs(const AgentConn& a,
                                  const rpc::RegisterAgentRequest& r);
  // Carries out the model's plan for one lost job's process or checkpoint
  // (AgentModel::PlanLostProcess, PlanLostCheckpoint); a process it stops
  // goes into *killed.
  void Adopt(const AgentConn& a, AgentModel::LostJobPlan plan,
             std::set<int32_t>* killed);

  core::Status ResolvePolicy();
  // `sched` afresh, its policy given `queues`.
  core::Status BuildScheduler(const std::vector<core::QueueConfig>& queues);
  // The queues in force where the log (after the snapshot, `after`)
  // starts, if it holds a change of them (QueuesChanged: its previous).
  core::StatusOr<std::optional<std::vector<core::QueueConfig>>>
  QueuesAtLogStart(int64_t after);
  // Writes `queues` into the stored policy options.
  core::Status StoreQueues(const std::vector<core::QueueConfig>& queues);

  core::Status Recover();

  // Jobs stored but never handed to the core (the daemon died in between:
  // as many as a SubmitJobs request holds, or a job adopted from an
  // agent), in id order, logged in one append, each submitted when its
  // row says (so that an adopted job keeps its submission time, by which
  // its agent tells its process from another job's of that id).
  void ArriveUnarrived();

  // After a restart (or a takeover) the servers whose agent has not
  // registered with this daemon yet are cordoned by it, as for an away
  // agent: a job placed there would be started through an address the
  // agent may no longer serve. Registration opens each again.
  // The cordons are logged in one append (a large cluster's 1,250 servers
  // would otherwise cost 1,250 transactions of etcd's at each start).
  void CordonAwaiting();

  // -------------------------------------------- reads (SchedulerService)

  // ListJobs and GetJob over what the loop published (and the store's
  // archive), without waiting for the loop.
  grpc::Status ListJobs(const rpc::ListJobsRequest* req,
                        rpc::ListJobsReply* rep);
  grpc::Status GetJob(const rpc::JobIdRequest* req, rpc::JobInfo* rep);
  // Each queue's quota, fair share and use now, over what was published.
  void ListQueues(rpc::ListQueuesReply* rep);
  // GPU-time used by queue and user over the last `last_s` seconds, from
  // the start of that hour (the loop's thread).
  rpc::UsageReply Usage(double last_s);
};

template <typename T>
std::optional<T> SchedulerServer::Impl::Call(std::function<T()> f) {
  auto p = std::make_shared<std::promise<T>>();
  auto fut = p->get_future();
  // Answered once published (LoopMain, after the work at hand): a client
  // reads its own writes, and requests that come together share one
  // publication.
  Post([this, p, f = std::move(f)] {
    auto result = std::make_shared<T>(f());
    answers.push_back([p, result] { p->set_value(std::move(*result)); });
  });
  if (fut.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    return std::nullopt;
  }
  try {
    return fut.get();
  } catch (const std::future_error&) {
    return std::nullopt;  // dropped at shutdown
  }
}

}  // namespace gandiva::runtime
