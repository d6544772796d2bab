// Agents: registration (reconciling what the agent runs and holds with the
// daemon's records, adopting what it may keep), reports (exits, progress,
// the state check), Leave, and liveness (out of reach, away, down:
// agent_liveness.h decides, this part acts on it).

#include "runtime/scheduler/daemon_impl.h"

namespace gandiva::runtime {
namespace {

// An exit that could not be logged: the agent keeps it and reports it again.
grpc::Status ReportAgain(int32_t id) {
  return {grpc::StatusCode::ABORTED,
          "the scheduler cannot log the exit of job " + std::to_string(id) +
              " now: report it again"};
}

}  // namespace

core::StatusOr<int32_t> SchedulerServer::Impl::RegisterAgent(
    const rpc::RegisterAgentRequest& r) {
  auto named = agent_by_name.find(r.name());
  const int32_t id = named == agent_by_name.end()
                         ? static_cast<int32_t>(agents.size())
                         : named->second;
  const int known_gpus =
      named == agent_by_name.end()
          ? -1
          : static_cast<int>(agents[static_cast<size_t>(id)].gpus.size());
  if (named != agent_by_name.end()) {
    const AgentConn& known = agents[static_cast<size_t>(id)];
    GANDIVA_RETURN_IF_ERROR(CheckSameName(r.name(), known, known.incarnation,
                                          known.address, r.incarnation(), lim(),
                                          Now()));
  }
  core::StatusOr<AgentModel::ServerComing> coming =
      Model().PlanServer(ServerId(id), known_gpus, r);
  if (!coming.ok()) return coming.status();
  const core::ServerSpec& spec = coming->spec;
  if (named == agent_by_name.end()) {
    agents.push_back(AgentConn{});
    agent_by_name[r.name()] = id;
  }
  AgentConn& a = agents[static_cast<size_t>(id)];
  a.id = ServerId(id);
  a.name = r.name();
  a.incarnation = r.incarnation();
  a.gpus.assign(r.gpus().begin(), r.gpus().end());
  a.sockets = spec.sockets;
  a.switches_per_socket = spec.switches_per_socket;
  if (a.address != r.address() || a.stub == nullptr) {
    a.address = r.address();
    a.stub = Env().AgentStub(a.address, tls,
                             AgentControlToken(control_token, a.name));
  }
  const WasUnreachable was = Registered(a, Now());
  const bool was_away = was.away;
  const int64_t silent_since_us = was.silent_since_us;
  a.caps = r.capabilities();
  ++a.registrations;
  const bool open_again = a.away_cordon;
  const core::Cluster& c = st().cluster();
  // Held closed while it comes up (AdoptQueuedJobsFound, AdoptLostJobs):
  // recorded as the daemon's cordon (in the row, before it is logged),
  // which the next registration lifts should this one not get that far.
  const bool hold_closed = coming->hold_closed;
  a.away_cordon = hold_closed;
  // The row first: a ServerUp in the log always has its row.
  WriteBatch rows;
  rows.servers.push_back(ServerRowOf(a));
  GANDIVA_RETURN_IF_ERROR(store->Write(rows));
  a.row_dirty = false;
  // Before the server is up or open again, which may place them.
  AdoptKeptCheckpoints(a, r);
  if (hold_closed) {
    GANDIVA_RETURN_IF_ERROR(Feed(core::CordonRequest{ServerId(id), true}));
  }
  if (id > c.num_servers()) {
    return core::Status(core::StatusCode::kInternal,
                        "server ids out of step with the core");
  }
  if (coming->up) {
    GANDIVA_RETURN_IF_ERROR(Feed(core::ServerUp{
        spec, id == c.num_servers() ? ServerId() : ServerId(id)}));
  }
  // Before it opens again, which may place queued jobs on their GPUs.
  MarkLostIds(a, r);
  AdoptQueuedJobsFound(a, r);
  const std::set<int32_t> killed = AdoptLostJobs(a, r);
  if ((open_again || hold_closed) && c.server(ServerId(id)).cordoned) {
    GANDIVA_RETURN_IF_ERROR(Feed(core::CordonRequest{ServerId(id), false}));
  }
  if (hold_closed) {
    a.away_cordon = false;
    a.row_dirty = true;
  }
  if (was_away || silent_since_us > 0) {
    char out[48] = "";
    if (silent_since_us > 0) {
      std::snprintf(
          out, sizeof out, " after %.1f s out of reach",
          static_cast<double>(Env().WallMicros() - silent_since_us) / 1e6);
    }
    Log("agent '" + a.name + "' is back" + out +
        (open_again ? ": server " + std::to_string(id) + " opened again" : ""));
  }
  Log("agent '" + a.name + "' registered as server " + std::to_string(id) +
      " at " + a.address + " with " + std::to_string(r.jobs_size()) + " jobs");
  Reconcile(a, r, killed);
  if (silent_since_us > 0) KeptThroughSilence(a, r, silent_since_us);
  return id;
}

void SchedulerServer::Impl::KeptThroughSilence(
    const AgentConn& a, const rpc::RegisterAgentRequest& r,
    int64_t silent_since_us) {
  const double out_s =
      static_cast<double>(Env().WallMicros() - silent_since_us) / 1e6;
  for (const auto& [id, line] : Model().PlanKeptThroughSilence(
           a.id, a.name, r, out_s, opts.agent_timeout_s)) {
    History(id, line.what, line.ok, 0, line.detail);
  }
}

void SchedulerServer::Impl::AdoptKeptCheckpoints(
    const AgentConn& a, const rpc::RegisterAgentRequest& r) {
  for (int i = 0; i < r.checkpoints_size(); ++i) {
    std::optional<AgentModel::Step> kept =
        Model().PlanKeptCheckpoint(a.id, a.name, r, i);
    if (kept) Carry(static_cast<int32_t>(r.checkpoints(i)), std::move(*kept));
  }
}

void SchedulerServer::Impl::Reconcile(AgentConn& a,
                                      const rpc::RegisterAgentRequest& r,
                                      const std::set<int32_t>& killed) {
  std::map<int32_t, rpc::JobState> reported;
  for (const rpc::AgentJob& j : r.jobs()) {
    const int32_t id = static_cast<int32_t>(j.job_id());
    if (killed.contains(id)) continue;
    (void)Extra(id);  // published again, whatever is decided
    AgentModel::ListedProcess listed =
        Model().PlanListedProcess(a.id, a.name, j);
    if (listed.verdict == AgentModel::Process::kSaveStray) {
      SaveStray(a, j);
      continue;
    }
    if (listed.verdict == AgentModel::Process::kOurs ||
        listed.verdict == AgentModel::Process::kAdopt) {
      reported[id] = j.state();
    }
    Carry(id, std::move(listed.step));
  }
  a.missing.clear();
  a.held.clear();
  for (int i = 0; i < r.checkpoints_size(); ++i) {
    AgentModel::ListedCheckpoint listed =
        Model().PlanListedCheckpoint(a.id, a.name, r, i);
    if (listed.verdict == AgentModel::Checkpoint::kHeld) {
      a.held.insert(static_cast<int32_t>(r.checkpoints(i)));
    }
    Carry(static_cast<int32_t>(r.checkpoints(i)), std::move(listed.step));
  }
  for (auto [id, xp] : UnsettledJobs()) {
    if (xp->proc.On(a.id)) xp->dirty = true;
    auto rep = reported.find(id);
    const PendingAction* in_flight = InFlight(id);
    AgentModel::Listing listing = Model().PlanListing(
        a.id, id,
        rep == reported.end() ? std::nullopt
                              : std::optional<rpc::JobState>(rep->second),
        in_flight != nullptr && in_flight->sent);
    if (listing.kind == AgentModel::Listing::Kind::kMissing) {
      a.missing.insert(id);
    } else if (listing.kind == AgentModel::Listing::Kind::kSettled) {
      Carry(id, std::move(listing.step));
    }
  }
  // After the loop above: a restart there makes it exist.
  for (auto [id, xp] : UnsettledJobs()) {
    std::optional<AgentModel::Step> back = Model().PlanBackWithoutProcess(
        a.id, a.name, id, a.held.contains(id), AnyPartAway(xp->proc));
    if (back) Carry(id, std::move(*back));
  }
  // The core's restarts that waited for this agent go out now: from the
  // checkpoint it kept, or, when it is back without it, from the
  // beginning (the core decides, told that the one from the checkpoint
  // failed).
  SendWaitingRestarts(a, /*unreached_only=*/false);
  a.reconcile_pending = true;
}

void SchedulerServer::Impl::SaveStray(const AgentConn& a,
                                      const rpc::AgentJob& listed) {
  const auto id = static_cast<int32_t>(listed.job_id());
  const Proc at{a.id, {listed.gpus().begin(), listed.gpus().end()}, true};
  // Its exit, once it saved (or was killed when it could not), is not the
  // job's.
  ++Extra(id)->ignore_exits[a.id.value];
  auto stub = StubOf(a.id);
  if (stub == nullptr) {
    KillAt(id, at, InternalActionId());
    return;
  }
  const std::string name = a.name;
  const int64_t action = InternalActionId();
  executor->Run(id, [=, this] {
    const int64_t t0 = Env().SteadyMicros();
    rpc::CheckpointRequest req;
    req.set_job_id(id);
    req.set_action_id(action);
    rpc::CheckpointReply rep;
    auto ctx = Ctx();
    const grpc::Status s = stub->CheckpointJob(ctx.get(), req, &rep);
    const int64_t took = UsSince(t0);
    Post([=, this] { StrayCheckpointed(id, at, name, s, rep, took); });
  });
}

void SchedulerServer::Impl::StrayCheckpointed(int32_t id, const Proc& at,
                                              const std::string& name,
                                              const grpc::Status& s,
                                              const rpc::CheckpointReply& rep,
                                              int64_t took_us) {
  JobExtra* x = Extra(id);
  if (x == nullptr) return;
  const std::string copy =
      "its copy on " + name + ", cut off while the job was requeued,";
  if (!s.ok()) {
    History(id, "kill", true, took_us,
            "stray process on " + name +
                " (cut off while the job was requeued): it could not "
                "save a checkpoint (" +
                RpcError("CheckpointJob", s) + ")");
    KillAt(id, at, InternalActionId());
    return;
  }
  const Proc kept = at.CheckpointOnly();
  const int64_t saved = rep.minibatches();
  const std::string saved_at =
      copy + " saved a checkpoint at mini-batch " + std::to_string(saved);
  auto drop = [&](const std::string& why) {
    History(id, "reconcile", true, took_us, saved_at + ", not used: " + why);
    KillAt(id, kept, InternalActionId());  // drops it there
  };
  if (IsEnded(id)) return drop("the job has ended");
  const core::Job& j = st().job(JobId(id));
  if (j.busy()) return drop("an action on the job was under way");
  auto keep = [&] {
    x->proc = kept;
    x->kept_at = saved;
    x->stopped_us = 0;
    x->progress.set_minibatches(saved);
    x->progress.set_minibatch_rate(0);
    x->dirty = true;
  };
  if (j.state == core::JobState::kQueued) {
    if (x->proc.exists || x->proc.checkpoint) {
      return drop("the job has a checkpoint elsewhere");
    }
    keep();
    History(id, "reconcile", true, took_us,
            saved_at + ": its next start goes on from it");
    return;
  }
  const int64_t now_at = x->progress.minibatches();
  if (!x->proc.exists || x->proc.gang() || now_at >= saved) {
    return drop("the job has gone further since (mini-batch " +
                std::to_string(now_at) + ")");
  }
  const Proc run = x->proc;
  ++x->ignore_exits[run.server.value];
  KillAt(id, run, InternalActionId());
  keep();
  History(id, "reconcile", true, took_us,
          saved_at + ", further on than its run on " + AgentName(run.server) +
              " (at mini-batch " + std::to_string(now_at) +
              "), which is stopped: the job goes on from the checkpoint");
  LoseProcess(id, true,
              "its copy on " + name + " was further on than its run on " +
                  AgentName(run.server));
}

void SchedulerServer::Impl::SendWaitingRestarts(AgentConn& a,
                                                bool unreached_only) {
  const int64_t now_us = Env().WallMicros();
  const auto retry_us = static_cast<int64_t>(kRetryUnreachedS * 1e6);
  std::vector<int64_t> waiting;
  for (const auto& [aid, p] : pending) {
    auto x = extras.find(p.action.job.value);
    if (p.action.kind == ActionKind::kRestart && !p.sent && x != extras.end() &&
        x->second.proc.On(a.id) && !x->second.proc.exists &&
        (!unreached_only ||
         (p.unreached_us > 0 && now_us - p.unreached_us >= retry_us))) {
      waiting.push_back(aid);
    }
  }
  for (int64_t aid : waiting) {
    auto it = pending.find(aid);
    if (it == pending.end()) continue;
    const int32_t id = it->second.action.job.value;
    std::optional<AgentModel::Step> fail = Model().PlanWaitingRestart(
        a.id, a.name, it->second.action, a.held.contains(id));
    if (fail) {
      Carry(id, std::move(*fail));
    } else {
      DispatchRestart(it->second);
    }
  }
}

PendingAction* SchedulerServer::Impl::InFlight(int32_t id) {
  if (!st().has_job(JobId(id))) return nullptr;
  const core::Job& j = st().job(JobId(id));
  if (!j.busy()) return nullptr;
  auto it = pending.find(j.in_flight_id.value);
  return it == pending.end() ? nullptr : &it->second;
}

void SchedulerServer::Impl::Carry(int32_t id, AgentModel::Step step) {
  if (step.proc || step.restart_why || step.line || step.ignore_exit) {
    JobExtra& x = *Extra(id);
    if (step.proc) x.proc = std::move(*step.proc);
    if (step.restart_why) x.restart_why = std::move(*step.restart_why);
    if (step.ignore_exit) ++x.ignore_exits[step.stop->server.value];
    if (step.line) {
      History(id, step.line->what, step.line->ok, 0, step.line->detail);
    }
  }
  if (!step.log.empty()) Log(step.log);
  if (step.stop) KillAt(id, *step.stop, InternalActionId());
  if (step.event) {
    const core::Status s = Feed(std::move(*step.event));
    if (!s.ok()) Warn("job " + std::to_string(id) + ": " + s.ToString());
  }
}

void SchedulerServer::Impl::Lost(AgentConn& a, int32_t id) {
  PendingAction* in_flight = InFlight(id);
  AgentModel::LostProcess lost =
      Model().PlanLost(a.id, a.name, id, a.held.contains(id), in_flight);
  Carry(id, std::move(lost.step));
  JobExtra& x = *Extra(id);
  switch (lost.then) {
    case AgentModel::LostProcess::Then::kNothing:
      return;
    case AgentModel::LostProcess::Then::kMoveFromCheckpoint: {
      in_flight->relocate = true;
      Proc from = x.proc;
      from.checkpoint = true;
      x.proc.exists = x.proc.leaving = true;
      x.proc.checkpoint = false;
      Move(*in_flight, from);
      return;
    }
    case AgentModel::LostProcess::Then::kStartAfresh:
      in_flight->relocate = true;
      x.proc.exists = true;
      Dispatch(*in_flight);
      return;
    case AgentModel::LostProcess::Then::kSendRestart:
      DispatchRestart(*in_flight);
      return;
  }
}

grpc::Status SchedulerServer::Impl::DoReport(const rpc::AgentReport& r) {
  auto it = agent_by_name.find(r.name());
  if (it == agent_by_name.end() ||
      agents[static_cast<size_t>(it->second)].link != AgentConn::Link::kUp) {
    return {grpc::StatusCode::FAILED_PRECONDITION,
            "agent '" + r.name() +
                "' is not registered (new, timed out, or the scheduler "
                "restarted): call RegisterAgent again"};
  }
  AgentConn& a = agents[static_cast<size_t>(it->second)];
  if (a.silent_since_us > 0) {
    // Back from out of reach: registering again says what it runs now
    // (Reconcile) and opens its server.
    return {grpc::StatusCode::FAILED_PRECONDITION,
            "agent '" + r.name() +
                "' was out of reach (not heard of for more than " +
                Seconds(opts.agent_timeout_s) + "): call RegisterAgent again"};
  }
  Heard(a, Now());
  journal.ClearUnlogged();
  for (const rpc::JobExit& e : r.exits()) {
    const int32_t id = static_cast<int32_t>(e.job_id());
    JobExtra* x = Extra(id);
    if (x == nullptr) continue;
    AgentModel::ExitPlan plan = Model().PlanExit(a.id, a.name, e, Now());
    if (!plan.record) continue;
    JobExtra was = std::exchange(*x, std::move(*plan.record));
    x->dirty = true;
    if (plan.line) {
      History(id, plan.line->what, plan.line->ok, 0, plan.line->detail);
    }
    if (plan.finishes) {
      const Proc kept = x->proc;  // where a checkpoint is kept
      (void)Feed(core::JobFinished{JobId(id), *plan.finishes, plan.permanent,
                                   plan.checkpoint});
      if (journal.unlogged()) {
        // Not logged: as if the exit had not come (the agent keeps it and
        // reports it again), its line and the failure streak it would
        // count the next report against too.
        *x = std::move(was);
        x->dirty = true;
        batch.history.pop_back();
        streaks.Forget(id);
        return ReportAgain(id);
      }
      const core::Job& j = st().job(JobId(id));
      if (!*plan.finishes && !core::IsTerminal(j.state)) {
        // Queued again (JobSpec.retries): the attempt is in the history.
        History(
            id, "retry", true, 0,
            "run " + std::to_string(j.run_failures) + " of " +
                std::to_string(j.spec.retries + 1) +
                " failed: it runs again in " +
                Seconds((j.start_retry_at - st().now()).seconds()) +
                (!j.launched       ? ", from the beginning"
                 : x->kept_at >= 0 ? ", from its checkpoint at mini-batch " +
                                         std::to_string(x->kept_at)
                                   : ", from its checkpoint"));
      } else if (plan.checkpoint) {
        // Its end after all: the checkpoint kept for a next run goes.
        x->kept_at = -1;
        KillAt(id, kept, InternalActionId());
      }
    }
    if (plan.stop) {
      KillAt(id, *plan.stop, InternalActionId(), plan.stop_keeps_periodic);
    }
  }
  const int64_t every = static_cast<int64_t>(opts.profile_interval_s * 1e6);
  for (const rpc::JobProfile& p : r.profiles()) {
    const int32_t id = static_cast<int32_t>(p.job_id());
    std::optional<AgentModel::ProfilePlan> plan =
        Model().PlanProfile(a.id, p, Now(), every);
    if (!plan) continue;
    JobExtra& x = *Extra(id);
    x.progress = std::move(plan->progress);
    if (plan->carrier) {
      // Logged in one append with the report that follows (or the pass's
      // others), whether reports are logged together or one each: it
      // comes once per process.
      Defer(core::CarrierKnown{JobId(id), *plan->carrier}, /*together=*/true);
    }
    CheckProbe(id, x);
    StateCheck(a, id, x, p.state());
    x.profile_due_us = plan->profile_due_us;
    if (plan->report) Defer(*plan->report, opts.log_profile_reports_together);
  }
  // A restart whose StartJob did not get through though the agent is
  // registered (a call that failed on the way) is tried again: the agent
  // reaches the daemon, so the daemon may well reach it.
  SendWaitingRestarts(a, /*unreached_only=*/true);
  if (a.reconcile_pending) {
    a.reconcile_pending = false;
    std::set<int32_t> missing;
    missing.swap(a.missing);
    for (int32_t id : Model().LostAtFirstReport(a.id, missing, r)) {
      Lost(a, id);
    }
  }
  return grpc::Status::OK;
}

void SchedulerServer::Impl::StateCheck(const AgentConn& a, int32_t id,
                                       JobExtra& x, rpc::JobState reported) {
  const std::optional<AgentModel::SetRight> set = Model().PlanStateCheck(
      a.id, a.name, id, reported, !Away(a.id).empty(), x.mismatch);
  if (!set) return;
  auto stub = StubOf(a.id);
  if (stub == nullptr) return;
  Warn("job " + std::to_string(id) + ": " + set->detail);
  rpc::JobRequest req;
  req.set_job_id(id);
  req.set_action_id(InternalActionId());
  executor->Run(id, [=, this] {
    auto ctx = Ctx();
    int64_t took_us = 0;
    const grpc::Status s =
        SuspendOrResume(*stub, ctx.get(), req, set->suspend, &took_us);
    const std::string what = set->detail + (s.ok() ? "" : " failed: ") +
                             (s.ok() ? "" : s.error_message());
    Post([=, this] { History(id, "reconcile", s.ok(), took_us, what); });
  });
}

core::StatusOr<rpc::LeaveReply> SchedulerServer::Impl::Leave(
    const rpc::LeaveRequest& r) {
  auto it = agent_by_name.find(r.name());
  if (it == agent_by_name.end() ||
      agents[static_cast<size_t>(it->second)].link != AgentConn::Link::kUp) {
    return core::FailedPrecondition(
        "field 'name': agent '" + r.name() +
        "' is not registered (new, timed out, or the scheduler restarted)");
  }
  AgentConn& a = agents[static_cast<size_t>(it->second)];
  if (a.silent_since_us > 0) {
    // Its jobs' saves would be calls to an agent out of reach: it says
    // what it holds when it registers again.
    return core::FailedPrecondition(
        "field 'name': agent '" + r.name() +
        "' was out of reach (not heard of for more than " +
        Seconds(opts.agent_timeout_s) + "): register again first");
  }
  rpc::LeaveReply reply;
  reply.set_away_s(opts.agent_away_s);
  if (a.away_since_us == 0) {
    // Before it is away (calls to it then fail at once).
    for (auto [id, xp] : UnsettledJobs()) {
      JobExtra& x = *xp;
      if (x.proc.On(a.id)) x.dirty = true;
      // One being saved already (another of its agents stops too): this
      // agent waits for its part as well.
      if ((leave_saving.contains(id) && x.proc.On(a.id)) ||
          SaveGangForLeave(id, x, a)) {
        reply.add_saving(id);
      }
    }
    Leaving(a, Now());
    const core::Cluster& c = st().cluster();
    if (a.id.value < c.num_servers() && !c.server(a.id).cordoned) {
      GANDIVA_RETURN_IF_ERROR(Feed(core::CordonRequest{a.id, true}));
      a.away_cordon = true;
    }
    a.row_dirty = true;
    Log("agent '" + a.name + "' is stopping: server " +
        std::to_string(a.id.value) +
        (a.away_cordon ? " cordoned" : " (cordoned already)") +
        " until it is back, declared down if it is not within " +
        Seconds(opts.agent_away_s) +
        (reply.saving_size() > 0
             ? "; saving " + std::to_string(reply.saving_size()) +
                   " jobs spanning servers"
             : ""));
  }
  return reply;
}

const AgentConn* SchedulerServer::Impl::OutOfReachAgentOf(const Proc& p) const {
  if (!p.exists) return nullptr;
  auto silent = [this](ServerId s) -> const AgentConn* {
    if (!s.valid() || static_cast<size_t>(s.value) >= agents.size()) {
      return nullptr;
    }
    const AgentConn& a = agents[static_cast<size_t>(s.value)];
    return a.silent_since_us > 0 ? &a : nullptr;
  };
  if (const AgentConn* a = silent(p.server)) return a;
  for (const Part& f : p.followers) {
    if (const AgentConn* a = silent(f.server)) return a;
  }
  return nullptr;
}

void SchedulerServer::Impl::CheckAgents() {
  const int64_t now = Now();
  for (AgentConn& a : agents) {
    switch (CheckLiveness(a, lim(), now)) {
      case LivenessChange::kNone:
        continue;
      case LivenessChange::kOutOfReach:
        OutOfReach(a);
        continue;
      case LivenessChange::kDown:
        break;
    }
    a.reconcile_pending = false;
    a.missing.clear();
    const bool was_away = a.away();
    // Down now (its cordon, if the daemon's, still lifts when it is
    // back).
    MarkDown(a);
    Warn(was_away
             ? "agent '" + a.name + "' not back within " +
                   Seconds(opts.agent_away_s) +
                   " of its stop (--agent-away-s): server down"
             : "agent '" + a.name + "' not heard of for more than " +
                   Seconds(static_cast<double>(SilenceAllowedUs(a, lim())) /
                           1e6) +
                   " (--agent-timeout-s and --agent-grace-s): server down");
    a.row_dirty = true;
    if (a.id.value < st().cluster().num_servers() &&
        st().cluster().server(a.id).up) {
      (void)Feed(core::ServerDown{a.id});
    }
  }
}

void SchedulerServer::Impl::OutOfReach(AgentConn& a) {
  MarkOutOfReach(a, lim(), Now());
  a.row_dirty = true;
  const core::Cluster& c = st().cluster();
  const bool placed = a.id.value < c.num_servers() && c.server(a.id).up;
  bool cordoned = false;
  if (placed && !c.server(a.id).cordoned) {
    a.away_cordon = true;
    WriteBatch rows;
    rows.servers.push_back(ServerRowOf(a));
    if (store->Write(rows).ok()) {
      a.row_dirty = false;
      cordoned = Feed(core::CordonRequest{a.id, true}).ok();
    }
    if (!cordoned) {
      a.away_cordon = false;
      a.row_dirty = true;
    }
  }
  int jobs = 0;
  for (auto [id, xp] : UnsettledJobs()) {
    if (!xp->proc.On(a.id)) continue;
    xp->dirty = true;
    ++jobs;
  }
  Warn("agent '" + a.name + "' not heard of for more than " +
       Seconds(opts.agent_timeout_s) + ": out of reach, server " +
       std::to_string(a.id.value) +
       (cordoned                            ? " cordoned"
        : placed && c.server(a.id).cordoned ? " (cordoned already)"
                                            : " (not cordoned)") +
       "; its " + std::to_string(jobs) +
       (jobs == 1 ? " job stays" : " jobs stay") +
       " there until it is back, or it is declared down in " +
       Seconds(opts.agent_grace_s) + " (--agent-grace-s)");
}

}  // namespace gandiva::runtime
