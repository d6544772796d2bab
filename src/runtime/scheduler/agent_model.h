// AgentModel: what the daemon makes of what an agent tells it (the
// processes and checkpoints a registration lists, the state a report gives
// a process), decided from the daemon's records of its jobs and the core's
// state alone. Pure: no I/O, no threads, no clock; its answers are values
// (verdicts, and for a report's exits and profiles plans: the record
// after, the lines, the events and the commands), and the daemon's agents
// part (daemon_agents.cc, daemon_recovery.cc) carries them out: it writes
// the store, feeds the core, writes history lines and sends the agents
// their commands.
//
// It reads the state it is made with (by reference, valid while it is
// used): make one where it is needed (SchedulerServer::Impl::Model) on the
// loop, which owns that state. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/event.h"
#include "core/state.h"
#include "proto/gandiva.pb.h"
#include "runtime/scheduler/daemon_types.h"
#include "runtime/scheduler/published.h"

namespace gandiva::runtime {

class AgentModel {
 public:
  AgentModel(const core::ClusterState& core,
             const std::map<int32_t, JobExtra>& jobs,
             const Published& published, const std::string& cluster_id)
      : core_(core),
        jobs_(jobs),
        published_(published),
        cluster_id_(cluster_id) {}

  // ------------------------------------------------ identity of what is listed

  // A registering agent of this cluster (its processes and checkpoints may
  // be this store's jobs'): none is before the store has an id.
  bool OfThisCluster(const rpc::RegisterAgentRequest& r) const {
    return !cluster_id_.empty() && r.cluster_id() == cluster_id_;
  }
  // A process or a checkpoint an agent lists for job `id`, of the job
  // submitted at `submitted_us` (0: the agent does not say): another job
  // of that id where both times are known and differ (this cluster gave
  // the id twice: its store was restored from a backup older than the
  // other job, and the agent registered after the id was given again).
  bool OtherSubmission(int32_t id, int64_t submitted_us) const;
  // The same, for checkpoint `i` a registering agent lists
  // (RegisterAgentRequest.checkpoint_submitted_us).
  bool CheckpointOfOtherSubmission(const rpc::RegisterAgentRequest& r,
                                   int i) const;
  // Checkpoint `i` a registering agent lists was saved in another cluster
  // (RegisterAgentRequest.checkpoint_clusters): of another job that has the
  // same id.
  bool ForeignCheckpoint(const rpc::RegisterAgentRequest& r, int i) const;
  // The highest id of a job a registering agent holds, as a process or a
  // checkpoint of this cluster, that the daemon has no record of (0: none):
  // one the store gave and forgot (an ended job, pruned), or one it never
  // gave.
  int64_t HighestUnknownId(const rpc::RegisterAgentRequest& r) const;
  // Whether a registering agent lists a process the daemon may keep (of
  // this cluster, with its spec, of a job the core has queued or one the
  // daemon has no record of): its server is kept cordoned while it comes
  // up, so that coming up does not place queued jobs on those GPUs first.
  bool MayAdopt(const rpc::RegisterAgentRequest& r) const;

  // ------------------------------------------------------ its server

  // A registering agent's server to the core, as the agent of cluster
  // server `id` registers (`known_gpus`: the GPUs it registered with
  // before; -1, a new agent). Refused, naming the field, for a request
  // without a name or an address, a server spec the core refuses, or a
  // GPU count other than before.
  struct ServerComing {
    core::ServerSpec spec;
    // A new server (ServerUp with the next id), or one down coming up
    // again: the core is told.
    bool up = false;
    // Kept cordoned while it comes up: a server down with processes the
    // daemon may keep where they run (MayAdopt), which coming up would
    // place queued jobs on first. Not when an operator cordoned it.
    bool hold_closed = false;
  };
  core::StatusOr<ServerComing> PlanServer(
      ServerId id, int known_gpus, const rpc::RegisterAgentRequest& r) const;

  // ------------------------------------------------------------ placement

  // The servers a set of cluster GPUs is on, with their local indices, in
  // the order the GPUs first name them (rank order).
  std::vector<Part> Parts(const std::vector<core::GpuId>& gpus) const;
  // The GPUs of cluster server `server` that the local indices `local`
  // name, or none when one is not the server's.
  std::vector<core::GpuId> ClusterGpus(ServerId server,
                                       const std::vector<int32_t>& local) const;

  // ------------------------------------------------------------- plans

  // A line of a job's history.
  struct Line {
    std::string what;
    bool ok = true;
    std::string detail;
  };
  // One job's step in what the daemon does about what an agent tells it,
  // carried out in this order: the job's process record set (`proc`, and
  // why it restarts, `restart_why`), a line in its history, a line in the
  // daemon's log, a process stopped (`stop`, its exit ignored with
  // `ignore_exit`), an event fed to the core.
  struct Step {
    std::optional<Proc> proc;
    std::optional<std::string> restart_why;
    std::optional<Line> line;
    std::string log;
    std::optional<Proc> stop;
    bool ignore_exit = false;
    std::optional<core::EventBody> event;
  };

  // ------------------------------------------- what a registration lists

  // What to do with a process a registering agent (of `server`) lists.
  enum class Process {
    // The job's own process, where the daemon has it: what it reports
    // decides the job's action under way, if any.
    kOurs,
    // The job's own, which the daemon lost track of (a move that failed
    // before its checkpoint, replayed after a crash): kept where the core
    // places the job, as its process (Adoptable).
    kAdopt,
    // Another job of this id, where this job's own start is under way: the
    // start replaces it (a start finding a process kills it first).
    kReplacedByStart,
    // This job's own copy on a server alone, cut off while the job was
    // placed again (its agent out of reach past the daemon's timeout and
    // grace), further on than the job is now (StrayAhead): the daemon has
    // it save a checkpoint there, and the job goes on from it.
    kSaveStray,
    // Not wanted there (killed, requeued, moved while the daemon or the
    // agent was away; or of another job of this id): killed, its exit
    // ignored.
    kStray,
  };
  Process JudgeProcess(ServerId server, const rpc::AgentJob& listed) const;
  // A process listed on `server` of this job's own submission, not where
  // the daemon has the job, that attached the job-side library (it can
  // save a checkpoint) and has trained mini-batches, on one server alone,
  // with no action under way for the job, and further on than the job: a
  // queued job with nothing of it kept anywhere, or one placed elsewhere
  // (on a server alone) whose run has trained fewer mini-batches.
  bool StrayAhead(ServerId server, const rpc::AgentJob& listed) const;
  // The verdict and what is done about it, the agent named `agent`.
  struct ListedProcess {
    Process verdict;
    Step step;
  };
  ListedProcess PlanListedProcess(ServerId server, const std::string& agent,
                                  const rpc::AgentJob& listed) const;

  // A process a registering agent (of `server`, registering `r`) lists of a
  // job the core has queued, neither held nor busy, with nothing of it
  // anywhere else, submitted when this job was: it started after the backup
  // the store was restored from, or was requeued while its agent was out
  // of reach. The event that keeps it where it runs, if its GPUs can take
  // it (core::CheckAdoptable); none otherwise.
  std::optional<core::JobFound> QueuedJobFound(
      ServerId server, const rpc::RegisterAgentRequest& r,
      const rpc::AgentJob& listed) const;

  // A process an agent lists for job `id`, which the daemon believes has
  // none, on the one server where the core places the job and in the
  // state the core has it in: the job's own, which the daemon lost track
  // of. Not for a gang (every part would have to be listed) nor while an
  // action is under way (its outcome decides).
  bool Adoptable(int32_t id, ServerId server, rpc::JobState reported) const;

  // The same, with what is done about it, the agent named `agent`: the
  // process record set where it runs, the event fed, and, once fed, its
  // history line.
  struct FoundQueued {
    core::JobFound event;
    Proc proc;
    Line line;
  };
  std::optional<FoundQueued> PlanQueuedJobFound(
      ServerId server, const std::string& agent,
      const rpc::RegisterAgentRequest& r, const rpc::AgentJob& listed) const;

  // Checkpoint `i` a registering agent (of `server`, named `agent`) lists,
  // of a queued job that last ran with its rank 0 there, which the daemon
  // did not know was kept: the job's next start goes on from it (the step
  // sets where it is kept and says so in its history). None for any other.
  std::optional<Step> PlanKeptCheckpoint(ServerId server,
                                         const std::string& agent,
                                         const rpc::RegisterAgentRequest& r,
                                         int i) const;

  // A process a registering agent (of `server`, named `agent`) runs, or
  // checkpoint `i` it holds, of a job this store lost (its id in `lost`),
  // judged at `now_us`: none (not a lost job's), refused (a line for the
  // log), or adopted: stored with its spec, `proc` recorded, its listed
  // process stopped first when it cannot be kept where it runs
  // (`stop_listed`, its exit ignored), its arrival fed, then its progress,
  // its history line and a line for the log.
  struct Adoption {
    rpc::JobSpec spec;
    core::JobArrived arrival;
    Proc proc;
    bool stop_listed = false;
    std::optional<rpc::Progress> progress;
    Line line;
    std::string log;
  };
  using LostJobPlan = std::variant<std::monostate, std::string, Adoption>;
  LostJobPlan PlanLostProcess(ServerId server, const std::string& agent,
                              const rpc::RegisterAgentRequest& r,
                              const rpc::AgentJob& listed, const IdRanges& lost,
                              int64_t now_us) const;
  LostJobPlan PlanLostCheckpoint(ServerId server, const std::string& agent,
                                 const rpc::RegisterAgentRequest& r, int i,
                                 const IdRanges& lost, int64_t now_us) const;

  // After an agent (of `server`, named `agent`) that was out of reach for
  // `out_s` registers again: the line in the history of each job it still
  // runs that the daemon kept there (`timeout_s`: how long an agent may be
  // silent before it is out of reach).
  std::vector<std::pair<int32_t, Line>> PlanKeptThroughSilence(
      ServerId server, const std::string& agent,
      const rpc::RegisterAgentRequest& r, double out_s, double timeout_s) const;

  // A process or checkpoint a registering agent of this cluster lists of
  // job `id64` whose record this store lost (its id in `lost`: the store
  // was restored from a backup older than the job), listed with `spec`,
  // submitted at `submitted_us`, judged at `now_us`.
  struct LostJob {
    enum class Verdict {
      kNotLost,  // known, not a lost id, or listed without a command
      kRefused,  // its spec or its submission time is not sound: left
      kAdopt,    // taken back as a job of this store
    };
    Verdict verdict = Verdict::kNotLost;
    std::string why;  // kRefused: why, for the log
  };
  LostJob JudgeLostJob(int64_t id64, const rpc::JobSpec& spec,
                       int64_t submitted_us, const IdRanges& lost,
                       int64_t now_us) const;
  // Where a process a registering agent (of `server`) lists, of a job of
  // `gpus` GPUs, can be kept: its GPUs there; none, with `why`, when they
  // are not this server's or cannot take it (core::CheckAdoptable). An
  // adopted lost job not kept is queued and starts again.
  std::vector<core::GpuId> PlaceOfListed(ServerId server,
                                         const rpc::AgentJob& listed, int gpus,
                                         std::string* why) const;

  // What to do with checkpoint `i` a registering agent (of `server`)
  // lists.
  enum class Checkpoint {
    kBadId,    // not a job id: passed by
    kForeign,  // saved in another cluster: ignored (the agent drops it
               // itself once it has this cluster's id)
    kOtherSubmissionDropped,  // of another job of this id: dropped
    kOtherSubmissionIgnored,  // the same, while this job's own process or
                              // checkpoint is there or on its way (a drop
                              // would reach it too): ignored
    kHeld,                    // of a live job: held there for it
    kEnded,  // of a job that ended (or that this daemon never ran): dropped
  };
  Checkpoint JudgeCheckpoint(ServerId server,
                             const rpc::RegisterAgentRequest& r, int i) const;
  // The verdict and what is done about it, the agent named `agent`.
  struct ListedCheckpoint {
    Checkpoint verdict;
    Step step;
  };
  ListedCheckpoint PlanListedCheckpoint(ServerId server,
                                        const std::string& agent,
                                        const rpc::RegisterAgentRequest& r,
                                        int i) const;

  // The outcome of job `id`'s action under way, settled by the state its
  // agent lists its process in at a registration (`reported`): true done,
  // false failed; none when the list cannot settle it (no action under
  // way; one this daemon sent, whose reply settles it; or a kind whose own
  // reply does). `sent`: the action was sent by this daemon process.
  std::optional<bool> SettleByList(int32_t id, rpc::JobState reported,
                                   bool sent) const;
  // Job `id`, as the agent at `server` registers listing it in state
  // `reported` (none: not listed), when the daemon has a live process of
  // it there (a part's, for a job spanning servers; else passed by).
  // `sent`: its action under way was sent by this daemon process.
  struct Listing {
    enum class Kind {
      kPassed,   // nothing to do (listed, its action not settled by it)
      kMissing,  // not listed: lost unless its first report shows it
                 // (LostAtFirstReport)
      kSettled,  // its action under way settled by the list: `step`
    };
    Kind kind = Kind::kPassed;
    Step step;
  };
  Listing PlanListing(ServerId server, int32_t id,
                      std::optional<rpc::JobState> reported, bool sent) const;

  // A job with no process but a checkpoint at `server` (saved as its agent
  // stopped, or left by a failed move), as its agent, named `agent`,
  // registers: `held`, the agent lists the checkpoint; `part_away`, an
  // agent of another of its parts is away. Back without the checkpoint,
  // its process is lost unsaved; with it, a running job restarts from it
  // once none of its agents is away (the core decides: ProcessLost).
  // None: it waits on.
  std::optional<Step> PlanBackWithoutProcess(ServerId server,
                                             const std::string& agent,
                                             int32_t id, bool held,
                                             bool part_away) const;

  // Job `id`'s process on `server` is gone: its agent, named `agent`,
  // registered without it and did not show it running since (or it was
  // found gone otherwise). `checkpoint_listed`: the agent listed a
  // checkpoint of it (saved as the agent stopped, its exit not heard of;
  // or one a move left there), which it goes on from. `in_flight`: the
  // daemon's record of the job's action under way, if any. The step (the
  // process record, the line, what of a job spanning servers is stopped,
  // the event), then what the daemon does with the action under way.
  struct LostProcess {
    Step step;
    enum class Then {
      kNothing,
      // A resume under way becomes a move from the checkpoint kept, to
      // where the core resumes it.
      kMoveFromCheckpoint,
      // A resume under way starts the job afresh where the core resumes it.
      kStartAfresh,
      // A restart replayed from the log, not yet sent: sent now.
      kSendRestart,
    };
    Then then = Then::kNothing;
  };
  LostProcess PlanLost(ServerId server, const std::string& agent, int32_t id,
                       bool checkpoint_listed,
                       const PendingAction* in_flight) const;

  // The core's `restart`, not sent while the agent at `server`, named
  // `agent`, was away, as it registers (`held`: listing the job's
  // checkpoint): none, it is sent now; or, for a restart from the
  // checkpoint that agent no longer holds, the step that fails it (the
  // core then restarts the job from the beginning).
  std::optional<Step> PlanWaitingRestart(ServerId server,
                                         const std::string& agent,
                                         const core::Action& restart,
                                         bool held) const;

  // ------------------------------------------------- what a report says

  // What a process's exit an agent (of `server`) reports is to the job.
  enum class Exit {
    kNotOurs,         // of no job of this daemon's, or of a process it does not
                      // have there: passed by
    kIgnored,         // of a process the daemon killed itself (JobExtra::
                      // ignore_exits): counted off, passed by
    kSuperseded,      // the agent started the job again since (a move within
                      // its server): passed by
    kLeftToMove,      // it left to be moved or resized (exit 75 or 76), or a
                      // process of a move was stopped: the move's outcome says
                      // where the job is
    kPartPassed,      // a part of a job spanning servers, not its lead, ended
                      // killed, with its agent, or cleanly (the lead's exit is
                      // the job's), or after the job's end: passed by
    kPartFailed,      // such a part ended in failure (a rank crashed): the
                      // run fails, its other parts are stopped (a job saving
                      // periodic checkpoints: its lead keeping its last one,
                      // and the run ends at the lead's exit)
    kStoppedSaved,    // its agent stopped, the job saved a checkpoint kept
                      // there first: it waits for the agent, to go on from it
    kFailedSaved,     // it failed (not killed at a daemon's request), its
                      // agent keeping the last checkpoint it saved by itself
                      // (JobSpec.checkpoint_every_*): the job's end, unless
                      // a retry goes on from that checkpoint
    kStoppedUnsaved,  // its agent stopped and killed it unsaved: it stays
                      // placed, to start again when the agent is back
    kKilledGoesOn,    // killed at a daemon's request while the job goes on
                      // (a process being replaced): passed by
    kAfterEnd,        // the job had ended already: its process is gone, its
                      // exit code and progress noted
    kEnds,            // the job's end: it finished (exit 0) or failed
  };
  Exit JudgeExit(ServerId server, const rpc::JobExit& e) const;

  // What the daemon does about an exit an agent (of `server`, named
  // `agent`) reports at `now_us`, in this order: the job's record is set
  // to `record`, `line` is written, JobFinished{finishes} is fed, and
  // `stop` is stopped. Unless the JobFinished is logged, nothing of it is
  // kept (neither record nor line) and the agent reports the exit again.
  struct ExitPlan {
    Exit verdict = Exit::kNotOurs;
    std::optional<JobExtra> record;  // none: unchanged
    std::optional<Line> line;
    std::optional<bool> finishes;  // the job's end: passed or failed
    // A failure no retry can mend (JobFinished::permanent): the shell could
    // not find (exit 127) or execute (126) the command.
    bool permanent = false;
    // A failure whose periodic checkpoint the agent keeps
    // (JobFinished::checkpoint): `record` holds it there (proc.checkpoint).
    bool checkpoint = false;
    std::optional<Proc> stop;  // what of it runs on: its other parts
    // The lead of `stop` is stopped keeping its last periodic checkpoint
    // (JobRequest.keep_periodic).
    bool stop_keeps_periodic = false;
  };
  ExitPlan PlanExit(ServerId server, const std::string& agent,
                    const rpc::JobExit& e, int64_t now_us) const;

  // What the daemon does about a job's profile an agent (of `server`)
  // reports at `now_us`, when it is the job's process's (none: passed
  // by). Its reports reach the core on a grid of `every_us` (0: each).
  struct ProfilePlan {
    rpc::Progress progress;  // the job's, after it
    // The library attached, or the process it runs now has none: the core
    // is told (CarrierKnown), and decides moves by it.
    std::optional<core::Carrier> carrier;
    int64_t profile_due_us = 0;  // the job's next report due at the core
    std::optional<core::ProfileReport> report;  // fed now
  };
  std::optional<ProfilePlan> PlanProfile(ServerId server,
                                         const rpc::JobProfile& p,
                                         int64_t now_us,
                                         int64_t every_us) const;

  // The jobs of `missing` (placed on `server`, not listed at its agent's
  // registration) lost at its first report after it: those with a process
  // there still, not ended, that the report does not show running (a start
  // may have got there since the list).
  std::vector<int32_t> LostAtFirstReport(ServerId server,
                                         const std::set<int32_t>& missing,
                                         const rpc::AgentReport& r) const;

  // ------------------------------------------------------ the state check

  // A job's process that its agent reports in the other state than the
  // core has the job in (suspended while the core has it running, or
  // running while suspended), with no action of it under way, in two
  // reports in a row with no suspend or resume of it between: the daemon
  // and the agent parted ways, and the job would stay so for good. The
  // agent is then told to set it right.
  enum class State {
    kAgrees,    // or cannot be checked now
    kDiffers,   // the first report (in a row) that differs
    kSetRight,  // the second: resume (core: running) or suspend it
  };
  // `checkable`: the daemon's own conditions hold (its process is where
  // the report comes from, not leaving, not a gang's, not restarting, its
  // agent not away). Updates `mismatch`, the job's count of such reports.
  State CheckState(int32_t id, rpc::JobState reported, bool checkable,
                   StateMismatch& mismatch) const;
  // The state check of job `id`'s process, which the agent of `server`,
  // named `agent`, reports in state `reported` (`agent_away`: that agent
  // is stopping): checkable when its process is there, not leaving, not a
  // gang's. Updates `mismatch` (CheckState). When it is to be set right:
  // whether the agent is told to suspend it (else resume it), and the line
  // for the warning and the job's history.
  struct SetRight {
    bool suspend = false;
    std::string detail;
  };
  std::optional<SetRight> PlanStateCheck(ServerId server,
                                         const std::string& agent, int32_t id,
                                         rpc::JobState reported,
                                         bool agent_away,
                                         StateMismatch& mismatch) const;

 private:
  // PlanLostProcess and PlanLostCheckpoint's common part: JudgeLostJob's
  // verdict on job `id64`, listed with `spec` and `submitted_us`, as a plan (an
  // adoption with its spec and arrival, the rest to fill in).
  LostJobPlan LostJobAdoption(const std::string& agent, int64_t id64,
                              const rpc::JobSpec& spec, int64_t submitted_us,
                              const IdRanges& lost, int64_t now_us) const;
  const JobExtra* Record(int32_t id) const {
    auto it = jobs_.find(id);
    return it == jobs_.end() ? nullptr : &it->second;
  }
  bool Live(int64_t id) const {
    return id > 0 && id < (int64_t{1} << 31) &&
           core_.has_job(JobId(static_cast<int32_t>(id)));
  }
  bool Ended(int32_t id) const {
    return !core_.has_job(JobId(id)) ||
           core::IsTerminal(core_.job(JobId(id)).state);
  }

  const core::ClusterState& core_;
  const std::map<int32_t, JobExtra>& jobs_;
  const Published& published_;
  const std::string& cluster_id_;
};

}  // namespace gandiva::runtime
