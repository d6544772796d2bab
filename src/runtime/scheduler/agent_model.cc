#include "runtime/scheduler/agent_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/scheduler.h"

namespace gandiva::runtime {

bool AgentModel::OtherSubmission(int32_t id, int64_t submitted_us) const {
  if (submitted_us == 0) return false;
  const int64_t ours = published_.SubmittedUs(id);
  return ours != 0 && ours != submitted_us;
}

bool AgentModel::CheckpointOfOtherSubmission(const rpc::RegisterAgentRequest& r,
                                             int i) const {
  const int64_t id64 = r.checkpoints(i);
  return i < r.checkpoint_submitted_us_size() &&
         id64 == static_cast<int32_t>(id64) &&
         OtherSubmission(static_cast<int32_t>(id64),
                         r.checkpoint_submitted_us(i));
}

bool AgentModel::ForeignCheckpoint(const rpc::RegisterAgentRequest& r,
                                   int i) const {
  return i < r.checkpoint_clusters_size() &&
         !r.checkpoint_clusters(i).empty() &&
         r.checkpoint_clusters(i) != cluster_id_;
}

int64_t AgentModel::HighestUnknownId(const rpc::RegisterAgentRequest& r) const {
  int64_t top = 0;
  auto unknown = [&](int64_t id) {
    return id > 0 && id <= std::numeric_limits<int32_t>::max() &&
           !jobs_.contains(static_cast<int32_t>(id));
  };
  // Processes this agent started for a daemon of this cluster.
  if (OfThisCluster(r)) {
    for (const rpc::AgentJob& j : r.jobs()) {
      if (unknown(j.job_id())) top = std::max(top, j.job_id());
    }
  }
  for (int i = 0; i < r.checkpoints_size(); ++i) {
    if (i < r.checkpoint_clusters_size() &&
        r.checkpoint_clusters(i) == cluster_id_ && unknown(r.checkpoints(i))) {
      top = std::max(top, r.checkpoints(i));
    }
  }
  return top;
}

bool AgentModel::MayAdopt(const rpc::RegisterAgentRequest& r) const {
  if (!OfThisCluster(r)) return false;
  for (const rpc::AgentJob& j : r.jobs()) {
    if (!j.has_spec() || j.job_id() <= 0 ||
        j.job_id() > std::numeric_limits<int32_t>::max()) {
      continue;
    }
    const auto id = static_cast<int32_t>(j.job_id());
    if (!jobs_.contains(id) ||
        (Live(id) && core_.job(JobId(id)).state == JobState::kQueued)) {
      return true;
    }
  }
  return false;
}

core::StatusOr<AgentModel::ServerComing> AgentModel::PlanServer(
    ServerId id, int known_gpus, const rpc::RegisterAgentRequest& r) const {
  if (r.name().empty()) return core::InvalidArgument("field 'name': empty");
  if (r.address().empty()) {
    return core::InvalidArgument("field 'address': empty");
  }
  ServerComing out;
  core::ServerSpec& spec = out.spec;
  spec.name = r.name();
  spec.gpus = r.gpus_size();
  spec.sockets = std::max(1, r.sockets());
  spec.switches_per_socket = std::max(1, r.switches_per_socket());
  // The smallest GPU's memory, for packing; unknown (0) if any GPU's is
  // (virtual GPUs).
  for (const rpc::Gpu& g : r.gpus()) {
    const double gib =
        static_cast<double>(g.memory_bytes()) / (1024.0 * 1024.0 * 1024.0);
    if (gib <= 0) {
      spec.gpu_memory_gb = 0;
      break;
    }
    if (spec.gpu_memory_gb == 0 || gib < spec.gpu_memory_gb) {
      spec.gpu_memory_gb = gib;
    }
  }
  if (!r.capabilities().criu()) {
    spec.process_images_unusable = r.capabilities().criu_detail().empty()
                                       ? "not checked"
                                       : r.capabilities().criu_detail();
  }
  if (std::string err = core::ValidateServerSpec(spec); !err.empty()) {
    return core::InvalidArgument(err);
  }
  if (known_gpus >= 0 && known_gpus != spec.gpus) {
    return core::FailedPrecondition(
        "agent '" + r.name() + "' registered before with " +
        std::to_string(known_gpus) + (known_gpus == 1 ? " GPU" : " GPUs") +
        ", now " + std::to_string(spec.gpus) +
        "; a server's GPUs cannot change (use another name)");
  }
  const core::Cluster& c = core_.cluster();
  const bool known = id.value < c.num_servers();
  out.up = !known || !c.server(id).up;
  out.hold_closed =
      known && !c.server(id).up && !c.server(id).cordoned && MayAdopt(r);
  return out;
}

std::vector<Part> AgentModel::Parts(
    const std::vector<core::GpuId>& gpus) const {
  std::vector<Part> parts;
  const core::Cluster& c = core_.cluster();
  for (core::GpuId g : gpus) {
    const ServerId s = c.gpu(g).server;
    auto it = std::find_if(parts.begin(), parts.end(),
                           [s](const Part& p) { return p.server == s; });
    if (it == parts.end()) {
      parts.push_back(Part{s, {}});
      it = parts.end() - 1;
    }
    it->local.push_back(c.gpu(g).local);
  }
  return parts;
}

std::vector<core::GpuId> AgentModel::ClusterGpus(
    ServerId server, const std::vector<int32_t>& local) const {
  const core::Server& s = core_.cluster().server(server);
  std::vector<core::GpuId> gpus;
  for (int32_t g : local) {
    if (g < 0 || g >= s.spec.gpus) return {};
    gpus.emplace_back(s.first_gpu.value + g);
  }
  return gpus;
}

bool AgentModel::Adoptable(int32_t id, ServerId server,
                           rpc::JobState reported) const {
  const JobExtra* x = Record(id);
  if (x == nullptr || Ended(id) || x->proc.exists || x->proc.checkpoint) {
    return false;
  }
  const core::Job& j = core_.job(JobId(id));
  if (j.busy() || j.gpus.empty()) return false;
  const bool same_state =
      (j.state == JobState::kRunning && reported == rpc::RUNNING) ||
      (j.state == JobState::kSuspended && reported == rpc::SUSPENDED);
  const std::vector<Part> parts = Parts(j.gpus);
  return same_state && parts.size() == 1 && parts[0].server == server;
}

AgentModel::Process AgentModel::JudgeProcess(
    ServerId server, const rpc::AgentJob& listed) const {
  const auto id = static_cast<int32_t>(listed.job_id());
  const JobExtra* x = Record(id);
  const bool other = OtherSubmission(id, listed.submitted_us());
  const bool placed_here =
      x != nullptr && !Ended(id) && x->proc.exists && x->proc.On(server);
  if (!other && placed_here) return Process::kOurs;
  if (!other && Adoptable(id, server, listed.state())) return Process::kAdopt;
  if (other && placed_here) return Process::kReplacedByStart;
  if (!other && StrayAhead(server, listed)) return Process::kSaveStray;
  return Process::kStray;
}

bool AgentModel::StrayAhead(ServerId server,
                            const rpc::AgentJob& listed) const {
  const auto id = static_cast<int32_t>(listed.job_id());
  const JobExtra* x = Record(id);
  const int64_t at = listed.progress().minibatches();
  if (x == nullptr || Ended(id) || x->proc.On(server) || !listed.has_spec() ||
      !listed.progress().uses_library() || at <= 0 ||
      OtherSubmission(id, listed.submitted_us())) {
    return false;
  }
  const core::Job& j = core_.job(JobId(id));
  if (j.busy() || j.spec.gpus != listed.gpus_size()) return false;
  if (j.state == JobState::kQueued) {
    return !x->proc.exists && !x->proc.checkpoint;
  }
  return (j.state == JobState::kRunning || j.state == JobState::kSuspended) &&
         x->proc.exists && !x->proc.gang() && x->progress.minibatches() < at;
}

AgentModel::Checkpoint AgentModel::JudgeCheckpoint(
    ServerId server, const rpc::RegisterAgentRequest& r, int i) const {
  const int64_t id64 = r.checkpoints(i);
  const auto id = static_cast<int32_t>(id64);
  if (id64 != id) return Checkpoint::kBadId;
  if (ForeignCheckpoint(r, i)) return Checkpoint::kForeign;
  if (CheckpointOfOtherSubmission(r, i)) {
    // Dropped, unless the job itself is there or on its way (a drop would
    // reach its process too): its own save replaces it, and the agent
    // refuses to start it from one of another job.
    const JobExtra* x = Record(id);
    const bool there = x != nullptr && (x->proc.exists || x->proc.checkpoint) &&
                       x->proc.On(server);
    const bool dropped =
        x != nullptr && !there && (Ended(id) || !core_.job(JobId(id)).busy());
    return dropped ? Checkpoint::kOtherSubmissionDropped
                   : Checkpoint::kOtherSubmissionIgnored;
  }
  if (Live(id64) && !Ended(id)) return Checkpoint::kHeld;
  return Checkpoint::kEnded;
}

AgentModel::ListedProcess AgentModel::PlanListedProcess(
    ServerId server, const std::string& agent,
    const rpc::AgentJob& listed) const {
  const auto id = static_cast<int32_t>(listed.job_id());
  ListedProcess out{JudgeProcess(server, listed), {}};
  Step& step = out.step;
  switch (out.verdict) {
    case Process::kOurs:
      break;
    case Process::kAdopt:
      step.proc = Proc::At(Parts(core_.job(JobId(id)).gpus));
      step.line = Line{"reconcile", true,
                       "kept its process on " + agent +
                           ", where the job is placed (the daemon had lost "
                           "track of it)"};
      break;
    case Process::kReplacedByStart:
      // A stop sent now would reach the start's process after it.
      step.line = Line{"reconcile", true,
                       "a process on " + agent +
                           " of another job of this id (submitted before the "
                           "store was restored from a backup): this job's "
                           "start there replaces it"};
      break;
    case Process::kSaveStray:
      break;  // the daemon has it save (SaveStray)
    case Process::kStray:
      if (Record(id) != nullptr) {
        step.ignore_exit = true;
        step.line =
            Line{"kill", true,
                 "stray process on " + agent +
                     (OtherSubmission(id, listed.submitted_us())
                          ? " (of another job of this id, submitted before the "
                            "store was restored from a backup)"
                          : "")};
      }
      step.stop = Proc{server, {}, true};
      break;
  }
  return out;
}

AgentModel::ListedCheckpoint AgentModel::PlanListedCheckpoint(
    ServerId server, const std::string& agent,
    const rpc::RegisterAgentRequest& r, int i) const {
  const int64_t id64 = r.checkpoints(i);
  const auto id = static_cast<int32_t>(id64);
  ListedCheckpoint out{JudgeCheckpoint(server, r, i), {}};
  Step& step = out.step;
  const std::string job = "job " + std::to_string(id64) + ": ";
  const std::string whose = job + "agent '" + agent + "' ";
  const Proc here{server, {}, false, true};  // its checkpoint there
  switch (out.verdict) {
    case Checkpoint::kBadId:
    case Checkpoint::kHeld:
      break;
    case Checkpoint::kForeign:
      step.log = whose + "holds a checkpoint saved in another cluster (" +
                 r.checkpoint_clusters(i) + "): not this job's, ignored";
      break;
    case Checkpoint::kOtherSubmissionDropped:
    case Checkpoint::kOtherSubmissionIgnored: {
      const bool dropped = out.verdict == Checkpoint::kOtherSubmissionDropped;
      step.log = whose +
                 "holds a checkpoint of another job of this id (submitted at " +
                 std::to_string(r.checkpoint_submitted_us(i)) +
                 " us, before the store was restored from a backup; this one "
                 "at " +
                 std::to_string(published_.SubmittedUs(id)) +
                 " us): not this job's, " + (dropped ? "dropped" : "ignored");
      if (dropped) step.stop = here;
      break;
    }
    case Checkpoint::kEnded:
      // Nothing will start from it.
      step.log = job + "dropping the checkpoint agent '" + agent +
                 "' keeps (the job has ended)";
      step.stop = here;
      break;
  }
  return out;
}

AgentModel::Listing AgentModel::PlanListing(
    ServerId server, int32_t id, std::optional<rpc::JobState> reported,
    bool sent) const {
  Listing out;
  const JobExtra* x = Record(id);
  if (x == nullptr || !x->proc.exists || !x->proc.On(server) || Ended(id)) {
    return out;
  }
  const core::Job& j = core_.job(JobId(id));
  if (!reported) {
    // A start sent in this daemon's life may not have reached the agent
    // when it listed its jobs: its reply says what happened.
    if (!(j.busy() && sent && j.in_flight != ActionKind::kSuspend &&
          j.in_flight != ActionKind::kUnpack)) {
      out.kind = Listing::Kind::kMissing;
    }
    return out;
  }
  // A gang's action is settled by its lead's state.
  if (x->proc.server != server) return out;
  const std::optional<bool> settled = SettleByList(id, *reported, sent);
  if (!settled) return out;
  out.kind = Listing::Kind::kSettled;
  const std::string detail = "reconciled: agent reports it " +
                             std::string(rpc::JobState_Name(*reported));
  out.step.line =
      Line{std::string(core::ActionKindName(j.in_flight)), *settled, detail};
  if (*settled) {
    out.step.event = core::ActionDone{j.in_flight_id, JobId(id), {}};
  } else {
    out.step.event = core::ActionFailed{j.in_flight_id, JobId(id), {}, detail};
  }
  return out;
}

std::optional<AgentModel::Step> AgentModel::PlanBackWithoutProcess(
    ServerId server, const std::string& agent, int32_t id, bool held,
    bool part_away) const {
  const JobExtra* x = Record(id);
  const bool gang = x != nullptr && x->proc.gang();
  if (x == nullptr || Ended(id) || x->proc.exists || !x->proc.checkpoint ||
      !(gang ? x->proc.On(server) : x->proc.server == server)) {
    return std::nullopt;
  }
  const core::Job& j = core_.job(JobId(id));
  Step step;
  if (x->proc.server == server && !held) {
    step.proc = x->proc;
    step.proc->checkpoint = false;
    step.line =
        Line{"lost", false,
             "agent '" + agent + "' is back without the checkpoint it kept; " +
                 (gang ? "every part starts" : "the job starts") +
                 " again from the beginning"};
    // Running, the core restarts it; suspended, it starts again when its
    // policy runs it. An action under way: its outcome decides.
    if (!j.busy()) {
      step.proc->leaving = false;
      step.restart_why = "agent '" + agent + "' is back";
      step.event = core::ProcessLost{JobId(id), false};
    }
    return step;
  }
  if (j.state != JobState::kRunning || j.busy() || part_away) {
    return std::nullopt;
  }
  step.proc = x->proc;
  step.proc->leaving = false;
  step.proc->checkpoint = true;
  step.restart_why = "agent '" + agent + "' is back";
  step.event = core::ProcessLost{JobId(id), true};
  return step;
}

AgentModel::LostProcess AgentModel::PlanLost(
    ServerId server, const std::string& agent, int32_t id,
    bool checkpoint_listed, const PendingAction* in_flight) const {
  LostProcess out;
  Step& step = out.step;
  const JobExtra* record = Record(id);
  if (record == nullptr || Ended(id)) return out;
  const JobExtra& x = *record;
  const core::Job& j = core_.job(JobId(id));
  const bool held =
      !x.proc.gang() && x.proc.server == server && checkpoint_listed;
  step.proc = x.proc;
  step.proc->exists = false;
  if (held) {
    step.proc->checkpoint = true;
    step.line = Line{"stop", true,
                     "agent '" + agent +
                         "' no longer runs it but holds a checkpoint of it "
                         "(the agent stopped or restarted)"};
  } else {
    step.line = Line{"lost", false, "agent '" + agent + "' no longer runs it"};
  }
  // Its other parts cannot train on without this one: they go too, and
  // the job starts afresh as a whole (their exits are not its end).
  if (x.proc.gang()) step.stop = x.proc;
  if (!j.busy()) {
    // Running: the core restarts it. Suspended: the core resumes it from
    // the checkpoint when its policy runs it again, or without one starts
    // it again from the beginning.
    step.proc->leaving = false;
    step.proc->checkpoint = held;
    step.restart_why = held ? "agent '" + agent + "' kept it" : "";
    step.event = core::ProcessLost{JobId(id), held};
    return out;
  }
  switch (j.in_flight) {
    case ActionKind::kResume:
      if (in_flight != nullptr) {
        // From the checkpoint, where the core resumes it; else afresh.
        out.then = held && !in_flight->relocate
                       ? LostProcess::Then::kMoveFromCheckpoint
                       : LostProcess::Then::kStartAfresh;
        return out;
      }
      break;
    case ActionKind::kSuspend:
    case ActionKind::kUnpack:
      step.event = core::ActionDone{j.in_flight_id, JobId(id), {}};
      return out;
    case ActionKind::kRestart:
      // A restart replayed from the log that had not reached the agent:
      // sent now, unless the checkpoint it goes on from is gone (the core
      // then restarts the job from the beginning). One sent is settled by
      // its reply.
      if (in_flight != nullptr && in_flight->sent) return out;
      if (in_flight != nullptr && (held || !in_flight->action.relocates)) {
        out.then = LostProcess::Then::kSendRestart;
        return out;
      }
      break;
    default:
      break;
  }
  step.event =
      core::ActionFailed{j.in_flight_id, JobId(id), {}, "process lost"};
  return out;
}

std::optional<AgentModel::Step> AgentModel::PlanWaitingRestart(
    ServerId server, const std::string& agent, const core::Action& restart,
    bool held) const {
  const JobExtra* x = Record(restart.job.value);
  if (x == nullptr || !restart.relocates || x->proc.server != server || held) {
    return std::nullopt;
  }
  Step step;
  step.proc = x->proc;
  step.proc->checkpoint = false;
  step.event = core::ActionFailed{
      restart.id,
      restart.job,
      {},
      "agent '" + agent + "' is back without the checkpoint"};
  return step;
}

std::optional<bool> AgentModel::SettleByList(int32_t id, rpc::JobState reported,
                                             bool sent) const {
  const core::Job& j = core_.job(JobId(id));
  // One this daemon process sent may be under way in the agent still (a
  // call that waited in it while it was out of reach): what it lists may
  // be from before the call, whose reply settles it (every call has a
  // deadline). One replayed from the log is settled here.
  if (!j.busy() || sent) return std::nullopt;
  switch (j.in_flight) {
    case ActionKind::kStart:
      return true;
    case ActionKind::kResume:
    case ActionKind::kPack:
      return reported == rpc::RUNNING;
    case ActionKind::kSuspend:
    case ActionKind::kUnpack:
      return reported == rpc::SUSPENDED;
    default:
      return std::nullopt;  // Migrate and others fail through their reply
  }
}

std::optional<core::JobFound> AgentModel::QueuedJobFound(
    ServerId server, const rpc::RegisterAgentRequest& r,
    const rpc::AgentJob& listed) const {
  const int64_t id64 = listed.job_id();
  if (!OfThisCluster(r) || !Live(id64) || !listed.has_spec() ||
      listed.submitted_us() == 0) {
    return std::nullopt;
  }
  const auto id = static_cast<int32_t>(id64);
  const core::Job& cj = core_.job(JobId(id));
  auto it = jobs_.find(id);
  if (it == jobs_.end() || cj.state != JobState::kQueued || cj.held ||
      cj.busy() || it->second.proc.exists || it->second.proc.checkpoint ||
      listed.submitted_us() != published_.SubmittedUs(id)) {
    return std::nullopt;
  }
  std::string not_kept;
  core::JobFound e{JobId(id),
                   PlaceOfListed(server, listed, cj.spec.gpus, &not_kept),
                   listed.state() == rpc::SUSPENDED};
  if (e.placed_on.empty()) return std::nullopt;
  return e;
}

std::optional<AgentModel::FoundQueued> AgentModel::PlanQueuedJobFound(
    ServerId server, const std::string& agent,
    const rpc::RegisterAgentRequest& r, const rpc::AgentJob& listed) const {
  std::optional<core::JobFound> e = QueuedJobFound(server, r, listed);
  if (!e) return std::nullopt;
  const bool suspended = e->suspended;
  return FoundQueued{
      std::move(*e),
      Proc::At({Part{server, {listed.gpus().begin(), listed.gpus().end()}}}),
      Line{"adopt", true,
           "its process on " + agent + " was kept, " +
               (suspended ? "suspended" : "running") +
               " (the store had it queued: it started after the backup "
               "this store was restored from, or was requeued while its "
               "agent was out of reach)"}};
}

std::optional<AgentModel::Step> AgentModel::PlanKeptCheckpoint(
    ServerId server, const std::string& agent,
    const rpc::RegisterAgentRequest& r, int i) const {
  const int64_t id64 = r.checkpoints(i);
  const auto id = static_cast<int32_t>(id64);
  if (id64 != id || ForeignCheckpoint(r, i) ||
      CheckpointOfOtherSubmission(r, i) || !Live(id64) || Ended(id)) {
    return std::nullopt;
  }
  const JobExtra* x = Record(id);
  if (x == nullptr || x->proc.exists || x->proc.checkpoint) {
    return std::nullopt;
  }
  const core::Job& j = core_.job(JobId(id));
  // Queued, its last placement (which the core keeps) with rank 0 here.
  if (j.state != JobState::kQueued || j.busy() || j.gpus.empty()) {
    return std::nullopt;
  }
  const Part lead = Parts(j.gpus)[0];
  if (lead.server != server) return std::nullopt;
  Step step;
  step.proc = Proc{server, lead.local, false, true};
  step.line = Line{"reconcile", true,
                   "agent '" + agent +
                       "' holds a checkpoint of it, saved where its rank 0 "
                       "last ran: its next start goes on from it"};
  return step;
}

namespace {

constexpr char kLostNote[] =
    "submitted after the backup this store was restored from, its record "
    "lost";

// The job saves checkpoints by itself (JobSpec.checkpoint_every_*).
bool SavesPeriodically(const rpc::JobSpec& spec) {
  return spec.checkpoint_every_minibatches() > 0 ||
         spec.checkpoint_every_us() > 0;
}

}  // namespace

AgentModel::LostJobPlan AgentModel::LostJobAdoption(
    const std::string& agent, int64_t id64, const rpc::JobSpec& spec,
    int64_t submitted_us, const IdRanges& lost, int64_t now_us) const {
  const LostJob verdict = JudgeLostJob(id64, spec, submitted_us, lost, now_us);
  switch (verdict.verdict) {
    case LostJob::Verdict::kNotLost:
      return {};
    case LostJob::Verdict::kRefused:
      return "agent '" + agent + "' holds job " + std::to_string(id64) +
             ", which this store lost, but " + verdict.why + ": not adopted";
    case LostJob::Verdict::kAdopt:
      break;
  }
  Adoption a;
  a.spec = spec;
  a.arrival =
      core::JobArrived{JobId(static_cast<int32_t>(id64)), ToCoreSpec(spec)};
  a.arrival.submitted = core::Time::FromMicros(submitted_us);
  return a;
}

AgentModel::LostJobPlan AgentModel::PlanLostProcess(
    ServerId server, const std::string& agent,
    const rpc::RegisterAgentRequest& r, const rpc::AgentJob& listed,
    const IdRanges& lost, int64_t now_us) const {
  if (!OfThisCluster(r)) return {};
  LostJobPlan plan = LostJobAdoption(agent, listed.job_id(), listed.spec(),
                                     listed.submitted_us(), lost, now_us);
  Adoption* a = std::get_if<Adoption>(&plan);
  if (a == nullptr) return plan;
  a->arrival.suspended = listed.state() == rpc::SUSPENDED;
  std::string not_kept;
  a->arrival.placed_on =
      PlaceOfListed(server, listed, a->arrival.spec.gpus, &not_kept);
  const bool kept = not_kept.empty();
  if (kept) {
    a->proc =
        Proc::At({Part{server, {listed.gpus().begin(), listed.gpus().end()}}});
  }
  a->stop_listed = !kept;
  a->progress = listed.progress();
  a->line =
      Line{"adopt", true,
           kept ? "its process on " + agent + " was kept, " +
                      (a->arrival.suspended ? "suspended" : "running") + " (" +
                      kLostNote + ")"
                : std::string("queued (") + kLostNote + "); its process on " +
                      agent + " could not be kept (" + not_kept +
                      "): it starts again from the beginning"};
  a->log = "agent '" + agent + "' runs job " + std::to_string(listed.job_id()) +
           ", which this store lost: adopted, " +
           (kept ? "its process kept" : "queued");
  return plan;
}

AgentModel::LostJobPlan AgentModel::PlanLostCheckpoint(
    ServerId server, const std::string& agent,
    const rpc::RegisterAgentRequest& r, int i, const IdRanges& lost,
    int64_t now_us) const {
  if (!OfThisCluster(r) || ForeignCheckpoint(r, i) ||
      i >= r.checkpoint_specs_size() || i >= r.checkpoint_submitted_us_size()) {
    return {};
  }
  LostJobPlan plan =
      LostJobAdoption(agent, r.checkpoints(i), r.checkpoint_specs(i),
                      r.checkpoint_submitted_us(i), lost, now_us);
  Adoption* a = std::get_if<Adoption>(&plan);
  if (a == nullptr) return plan;
  a->proc = Proc{server, {}, false, true};
  a->line = Line{"adopt", true,
                 std::string("queued (") + kLostNote +
                     "); it goes on from the checkpoint " + agent + " holds"};
  a->log = "agent '" + agent + "' holds a checkpoint of job " +
           std::to_string(r.checkpoints(i)) +
           ", which this store lost: adopted, to go on from it";
  return plan;
}

std::vector<std::pair<int32_t, AgentModel::Line>>
AgentModel::PlanKeptThroughSilence(ServerId server, const std::string& agent,
                                   const rpc::RegisterAgentRequest& r,
                                   double out_s, double timeout_s) const {
  char detail[160];
  std::snprintf(detail, sizeof detail,
                "agent '%s' was out of reach for %.1f s (not heard of for "
                "%.1f s); the job was kept there and goes on",
                agent.c_str(), out_s, out_s + timeout_s);
  std::vector<std::pair<int32_t, Line>> lines;
  for (const rpc::AgentJob& listed : r.jobs()) {
    const auto id = static_cast<int32_t>(listed.job_id());
    const JobExtra* x = Record(id);
    if (x == nullptr || Ended(id) || !x->proc.exists || !x->proc.On(server)) {
      continue;
    }
    lines.emplace_back(id, Line{"reach", true, detail});
  }
  return lines;
}

AgentModel::LostJob AgentModel::JudgeLostJob(int64_t id64,
                                             const rpc::JobSpec& spec,
                                             int64_t submitted_us,
                                             const IdRanges& lost,
                                             int64_t now_us) const {
  if (id64 <= 0 || id64 > std::numeric_limits<int32_t>::max() ||
      jobs_.contains(static_cast<int32_t>(id64)) || !FindIdRange(lost, id64) ||
      spec.command().empty()) {
    return {};
  }
  if (std::string bad = CheckSpec(spec); !bad.empty()) {
    return {LostJob::Verdict::kRefused, "its spec is refused (" + bad + ")"};
  }
  if (submitted_us <= 0 || submitted_us > now_us) {
    return {LostJob::Verdict::kRefused, "its submission time (" +
                                            std::to_string(submitted_us) +
                                            " us) is not before now"};
  }
  return {LostJob::Verdict::kAdopt, ""};
}

std::vector<core::GpuId> AgentModel::PlaceOfListed(ServerId server,
                                                   const rpc::AgentJob& listed,
                                                   int gpus,
                                                   std::string* why) const {
  const std::vector<int32_t> local(listed.gpus().begin(), listed.gpus().end());
  std::vector<core::GpuId> placed_on = ClusterGpus(server, local);
  if (placed_on.empty()) {
    *why = "its GPUs are not this server's";
    return {};
  }
  const core::Status fits = core::CheckAdoptable(
      core_.cluster(), JobId(static_cast<int32_t>(listed.job_id())), gpus,
      placed_on);
  if (!fits.ok()) {
    *why = fits.message();
    return {};
  }
  return placed_on;
}

AgentModel::Exit AgentModel::JudgeExit(ServerId server,
                                       const rpc::JobExit& e) const {
  const auto id = static_cast<int32_t>(e.job_id());
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Exit::kNotOurs;
  const JobExtra& x = it->second;
  if (auto ig = x.ignore_exits.find(server.value);
      ig != x.ignore_exits.end() && ig->second > 0) {
    return Exit::kIgnored;
  }
  if (e.superseded()) return Exit::kSuperseded;
  if (x.proc.leaving &&
      (e.exit_code() == 75 || e.exit_code() == 76 || e.exit_code() < 0)) {
    return Exit::kLeftToMove;
  }
  const bool ended = Ended(id);
  if (x.proc.exists && x.proc.server != server && x.proc.FollowerOn(server)) {
    // Killed as its agent stopped: the lead's agent decides, or the
    // server is declared down. After a part failed already, the lead's
    // exit ends the run.
    return e.killed() || e.agent_stopped() || e.exit_code() == 0 || ended ||
                   x.part_failed
               ? Exit::kPartPassed
               : Exit::kPartFailed;
  }
  if (!x.proc.exists || x.proc.server != server) return Exit::kNotOurs;
  if (e.checkpoint_kept() && e.checkpoint_method() == "periodic") {
    // A failure: the checkpoint is for the job's next run, if it has one.
    return ended ? Exit::kAfterEnd : Exit::kFailedSaved;
  }
  // The lead of a job whose other part failed, stopped for it: the run's
  // end, a failure.
  if (x.part_failed) return ended ? Exit::kAfterEnd : Exit::kEnds;
  if (e.checkpoint_kept() && !x.proc.gang()) {
    return ended ? Exit::kNotOurs : Exit::kStoppedSaved;
  }
  if (e.agent_stopped() && !ended) return Exit::kStoppedUnsaved;
  // Whatever the daemon then did (or its successor decides at
  // reconciliation) says where the job runs.
  if (e.killed() && !ended) return Exit::kKilledGoesOn;
  return ended ? Exit::kAfterEnd : Exit::kEnds;
}

AgentModel::ExitPlan AgentModel::PlanExit(ServerId server,
                                          const std::string& agent,
                                          const rpc::JobExit& e,
                                          int64_t now_us) const {
  ExitPlan plan;
  plan.verdict = JudgeExit(server, e);
  const JobExtra* was = Record(static_cast<int32_t>(e.job_id()));
  if (was == nullptr) return plan;
  const std::string code = std::to_string(e.exit_code());
  switch (plan.verdict) {
    case Exit::kNotOurs:
    case Exit::kSuperseded:
    case Exit::kLeftToMove:
    case Exit::kPartPassed:
    case Exit::kKilledGoesOn:
      return plan;
    case Exit::kIgnored:
      plan.record = *was;
      --plan.record->ignore_exits[server.value];
      return plan;
    case Exit::kPartFailed:
      plan.record = *was;
      plan.stop = was->proc;
      if (SavesPeriodically(was->spec)) {
        // Its lead's agent keeps its last periodic checkpoint as the lead
        // is stopped: the run ends at the lead's exit, which says whether
        // one was saved.
        plan.record->part_failed = e.exit_code();
        plan.stop_keeps_periodic = true;
        plan.line = Line{"exit", false,
                         "exit code " + code + " of its part on " + agent +
                             "; its other parts are stopped, its lead "
                             "keeping its last periodic checkpoint"};
        return plan;
      }
      plan.record->proc = Proc{};
      plan.record->exit_code = e.exit_code();
      plan.line = Line{"exit", false,
                       "exit code " + code + " of its part on " + agent +
                           "; its other parts are stopped"};
      plan.finishes = false;
      return plan;
    case Exit::kStoppedSaved: {
      plan.record = *was;
      JobExtra& x = *plan.record;
      const std::string& method = e.checkpoint_method();
      x.proc.exists = false;
      x.proc.checkpoint = true;
      // The mini-batch it goes on from: known for a library checkpoint
      // (the restart's history line waits for the one after it), not for
      // a CRIU dump or a job's own checkpoint.
      x.kept_at = method == "criu" || method == "restart"
                      ? -1
                      : std::max<int64_t>(e.minibatches(), -1);
      x.stopped_us = now_us;
      if (e.minibatches() > 0) x.progress.set_minibatches(e.minibatches());
      CopyMetric(e, &x.progress);
      x.progress.set_minibatch_rate(0);
      plan.line =
          Line{"stop", true,
               "agent '" + agent + "' stopped; " +
                   (method == "criu" ? std::string("the job was dumped by CRIU")
                    : method == "restart"
                        ? std::string("the job saved its own checkpoint")
                        : "the job saved a checkpoint at mini-batch " +
                              std::to_string(e.minibatches())) +
                   ", kept there: it goes on from it when the agent is back"};
      return plan;
    }
    case Exit::kFailedSaved: {
      plan.record = *was;
      JobExtra& x = *plan.record;
      x.proc = x.proc.CheckpointOnly();
      x.kept_at = e.minibatches() > 0 ? e.minibatches() : -1;
      x.stopped_us = now_us;
      x.exit_code = x.part_failed ? *x.part_failed : e.exit_code();
      if (e.minibatches() > 0) x.progress.set_minibatches(e.minibatches());
      CopyMetric(e, &x.progress);
      x.progress.set_minibatch_rate(0);
      const std::string at =
          e.minibatches() > 0
              ? "at mini-batch " + std::to_string(e.minibatches())
              : std::string("at a mini-batch not known");
      plan.line =
          Line{"exit", false,
               (x.part_failed
                    ? "its lead stopped after its part failed (exit code " +
                          std::to_string(*x.part_failed) + ")"
                    : "exit code " + code) +
                   "; its last periodic checkpoint, " + at + ", is kept on " +
                   agent};
      x.part_failed.reset();
      if (x.proc.gang()) {
        // Its other parts, if any runs on, are stopped; the checkpoint, one
        // for every part, is its lead's: the next run starts from there.
        plan.stop = x.proc.FollowersOnly();
        x.proc.followers.clear();
      }
      plan.finishes = false;
      plan.checkpoint = true;
      return plan;
    }
    case Exit::kStoppedUnsaved:
      // Its agent stopped and killed it, unsaved: the job stays placed
      // there, as if its process ran on, until the agent registers again
      // without it (then it is lost, and the core restarts it) or is
      // declared down.
      plan.record = *was;
      if (e.minibatches() > 0) {
        plan.record->progress.set_minibatches(e.minibatches());
      }
      plan.record->progress.set_minibatch_rate(0);
      plan.line = Line{"stop", true,
                       "agent '" + agent +
                           "' stopped and killed its process (exit " + code +
                           ") without a checkpoint: the job starts again when "
                           "the agent is back, from the beginning unless it "
                           "keeps its own checkpoints"};
      return plan;
    case Exit::kAfterEnd:
    case Exit::kEnds:
      break;
  }
  plan.record = *was;
  JobExtra& x = *plan.record;
  x.proc = Proc{};
  x.exit_code = e.exit_code();
  if (e.minibatches() > 0) x.progress.set_minibatches(e.minibatches());
  CopyMetric(e, &x.progress);
  if (const std::optional<int32_t> failed = std::exchange(x.part_failed, {});
      failed && plan.verdict == Exit::kEnds &&
      (e.killed() || e.exit_code() != 0)) {
    // Stopped after its part failed, with no periodic checkpoint saved
    // yet: the run failed with the part's exit code.
    x.exit_code = *failed;
    plan.line = Line{"exit", false,
                     "its lead stopped after its part failed (exit code " +
                         std::to_string(*failed) +
                         "), no periodic checkpoint saved yet (exit code " +
                         code + ")"};
    plan.finishes = false;
    if (was->proc.gang()) {
      plan.stop = was->proc.FollowersOnly();
    }
    return plan;
  }
  if (plan.verdict == Exit::kAfterEnd) {
    if (e.checkpoint_kept()) {
      // A periodic checkpoint kept for a run that will not come.
      plan.stop = Proc{server, {}, false};
      plan.stop->checkpoint = true;
    }
    return plan;
  }
  plan.permanent = e.exit_code() == 126 || e.exit_code() == 127;
  plan.line = Line{"exit", e.exit_code() == 0,
                   "exit code " + code +
                       (e.exit_code() == 127   ? " (command not found)"
                        : e.exit_code() == 126 ? " (command not executable)"
                                               : "")};
  plan.finishes = e.exit_code() == 0;
  // A gang's other parts end with their lead; any still running (a rank
  // hung) are stopped.
  if (was->proc.gang()) {
    plan.stop = was->proc.FollowersOnly();
  }
  return plan;
}

std::optional<AgentModel::ProfilePlan> AgentModel::PlanProfile(
    ServerId server, const rpc::JobProfile& p, int64_t now_us,
    int64_t every_us) const {
  const auto id = static_cast<int32_t>(p.job_id());
  const JobExtra* x = Record(id);
  if (x == nullptr || Ended(id) || x->proc.server != server) {
    return std::nullopt;
  }
  ProfilePlan plan;
  // A new process (after a move, a restart) has reported no metric yet:
  // the job's last one stands.
  plan.progress = p.progress();
  // A rate or utilization that is no number, or below 0 (a faulty agent):
  // unknown, 0. It goes into the event log, which takes finite numbers.
  auto measured = [](double v) { return std::isfinite(v) && v > 0 ? v : 0.0; };
  plan.progress.set_minibatch_rate(measured(plan.progress.minibatch_rate()));
  plan.progress.set_gpu_utilization(
      std::min(1.0, measured(plan.progress.gpu_utilization())));
  if (plan.progress.metric_reports() == 0) {
    CopyMetric(x->progress, &plan.progress);
  }
  // Nor has it counted a mini-batch before it has loaded its checkpoint:
  // the job's count stands until then (and below 0, from a faulty page).
  if (plan.progress.minibatches() <= 0) {
    plan.progress.set_minibatches(x->progress.minibatches());
  }
  if (const core::Carrier c = CarrierOf(x->spec, plan.progress.uses_library());
      c != core_.job(JobId(id)).spec.carrier) {
    plan.carrier = c;
  }
  // Due on a grid of the interval, not an interval after the last one
  // fed: reports come at the agent's pace, a little early or late, and the
  // cadence must not fall to every other report.
  plan.profile_due_us = x->profile_due_us;
  if (every_us > 0) {
    if (plan.profile_due_us > now_us) return plan;  // shown by `ls`
    if (plan.profile_due_us == 0) plan.profile_due_us = now_us;
    plan.profile_due_us +=
        ((now_us - plan.profile_due_us) / every_us + 1) * every_us;
  }
  core::ProfileReport& pr = plan.report.emplace();
  pr.job = JobId(id);
  pr.minibatch_rate = plan.progress.minibatch_rate();
  pr.minibatches = plan.progress.minibatches();
  pr.gpu_memory_gb = static_cast<double>(p.progress().gpu_memory_bytes()) /
                     (1024.0 * 1024.0 * 1024.0);
  pr.gpu_utilization = plan.progress.gpu_utilization();
  return plan;
}

std::vector<int32_t> AgentModel::LostAtFirstReport(
    ServerId server, const std::set<int32_t>& missing,
    const rpc::AgentReport& r) const {
  std::set<int32_t> running;
  for (const rpc::JobProfile& p : r.profiles()) {
    running.insert(static_cast<int32_t>(p.job_id()));
  }
  std::vector<int32_t> lost;
  for (int32_t id : missing) {
    const JobExtra* x = Record(id);
    if (x != nullptr && x->proc.exists && x->proc.On(server) && !Ended(id) &&
        !running.contains(id)) {
      lost.push_back(id);
    }
  }
  return lost;
}

AgentModel::State AgentModel::CheckState(int32_t id, rpc::JobState reported,
                                         bool checkable,
                                         StateMismatch& mismatch) const {
  const core::Job& j = core_.job(JobId(id));
  const bool wants_running = j.state == JobState::kRunning;
  checkable = checkable &&
              (reported == rpc::RUNNING || reported == rpc::SUSPENDED) &&
              (wants_running || j.state == JobState::kSuspended) && !j.busy();
  if (!checkable || (reported == rpc::RUNNING) == wants_running) {
    mismatch = {};
    return State::kAgrees;
  }
  if (mismatch.reports == 0 || mismatch.suspends != j.suspends ||
      mismatch.resumes != j.resumes) {
    mismatch = {1, j.suspends, j.resumes};
    return State::kDiffers;
  }
  mismatch = {};
  return State::kSetRight;
}

std::optional<AgentModel::SetRight> AgentModel::PlanStateCheck(
    ServerId server, const std::string& agent, int32_t id,
    rpc::JobState reported, bool agent_away, StateMismatch& mismatch) const {
  const JobExtra* x = Record(id);
  if (x == nullptr || Ended(id)) return std::nullopt;
  const bool checkable = x->proc.exists && !x->proc.leaving &&
                         !x->proc.gang() && x->proc.server == server &&
                         !agent_away;
  if (CheckState(id, reported, checkable, mismatch) != State::kSetRight) {
    return std::nullopt;
  }
  const bool wants_running = core_.job(JobId(id)).state == JobState::kRunning;
  return SetRight{!wants_running,
                  "agent '" + agent + "' has its process " +
                      (wants_running ? "suspended" : "running") +
                      " while the scheduler has it " +
                      (wants_running ? "running" : "suspended") +
                      ", in two reports: " +
                      (wants_running ? "resumed" : "suspended") + " it"};
}

}  // namespace gandiva::runtime
