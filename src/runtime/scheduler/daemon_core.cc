// The daemon's part that feeds the core and carries out its actions:
// every event logged (journal.h) before it is handled (Feed, Defer,
// FlushDeferred, HandleLogged), each action sent to its agent through the
// dispatcher (Execute, Dispatch), and each outcome taken back to the core
// (Conclude, FinishMove).

#include "runtime/scheduler/daemon_impl.h"

namespace gandiva::runtime {

core::Status SchedulerServer::Impl::Feed(core::EventBody body) {
  if (journal.handling_left() > 0) {
    // It would be logged after the rest of the batch but handled before
    // it: a recovery would replay another order.
    Warn(std::string("event ") + EventKindName(body) +
         " fed while a batch of logged events is handled");
  }
  journal.Defer(Now(), std::move(body));
  return FlushDeferred();
}

std::vector<core::Status> SchedulerServer::Impl::FeedTogether(
    std::vector<core::EventBody> bodies) {
  const size_t n = bodies.size();
  const size_t before = journal.queued();
  for (core::EventBody& b : bodies) journal.Defer(Now(), std::move(b));
  std::vector<core::Status> each;
  (void)FlushDeferred(&each);
  return std::vector<core::Status>(
      each.begin() + static_cast<std::ptrdiff_t>(before),
      each.begin() + static_cast<std::ptrdiff_t>(before + n));
}

core::Status SchedulerServer::Impl::FlushDeferred(
    std::vector<core::Status>* each) {
  if (journal.empty()) return core::Status::Ok();
  const Journal::Io io{
      *store, [this] { return opts.leadership && opts.leadership->leading(); },
      [this](int64_t us) { Env().SleepFor(us); },
      [this](const std::string& m) { Warn(m); }};
  std::vector<core::Status> out =
      journal.Flush(io, [this](core::Time t, const core::EventBody& body) {
        return HandleLogged(t, body);
      });
  const core::Status last = out.back();
  if (each != nullptr) *each = std::move(out);
  return last;
}

core::Status SchedulerServer::Impl::HandleLogged(core::Time time,
                                                 const core::EventBody& body) {
  ++events_since_compaction;
  std::vector<core::Action> actions;
  core::Status s = sched->Handle(core::Event{time, body}, actions);
  for (JobId changed : sched->TakeChangedJobs()) (void)Extra(changed.value);
  if (!s.ok()) {
    Log(std::string(EventKindName(body)) + " refused: " + s.ToString());
  }
  AfterHandle(body, actions, /*live=*/true);
  return s;
}

void SchedulerServer::Impl::AfterHandle(
    const core::EventBody& body, const std::vector<core::Action>& actions,
    bool live) {
  if (const auto* arrived = std::get_if<core::JobArrived>(&body)) {
    // Before its first start goes out.
    NoteSubmitted(std::array<int32_t, 1>{arrived->id.value});
  } else if (const auto* f = std::get_if<core::JobFinished>(&body)) {
    // A failed run whose checkpoint its agent keeps stays placed there,
    // without a process, while the job runs again.
    const bool goes_on =
        f->checkpoint && !core::IsTerminal(st().job(f->job).state);
    if (JobExtra* x = Extra(f->job.value); x != nullptr && !goes_on) {
      x->proc = Proc{};
    } else if (x != nullptr && !live && x->proc.exists) {
      // Replayed: the exit (AgentModel::PlanExit, kFailedSaved) left it
      // kept where its lead ran, which the log does not say otherwise.
      // Else the job's next run, due before that agent registers again,
      // would take its process for running there, and start afresh.
      x->proc = x->proc.CheckpointOnly();
      x->proc.followers.clear();
    }
  } else if (const auto* d = std::get_if<core::ActionDone>(&body)) {
    pending.erase(d->action.value);
  } else if (const auto* fl = std::get_if<core::ActionFailed>(&body)) {
    auto it = pending.find(fl->action.value);
    if (it != pending.end()) {
      const ActionKind k = it->second.action.kind;
      JobExtra* x = Extra(fl->job.value);
      // A failed start leaves no process; a move that failed says
      // itself where it left it (FinishMove), e.g. running where it was
      // when it could not checkpoint.
      if (x != nullptr && !it->second.settled &&
          (k == ActionKind::kStart || k == ActionKind::kRestart ||
           it->second.relocate ||
           (k == ActionKind::kPack && it->second.action.launch))) {
        x->proc.exists = false;
      }
      pending.erase(it);
    }
  } else if (const auto* q = std::get_if<core::QueuesChanged>(&body)) {
    // As the core took them (it refuses what is no tree).
    if (core::CheckQueues(q->queues).ok()) SetQueues(q->queues);
  } else if (const auto* down = std::get_if<core::ServerDown>(&body)) {
    // A restart there waits no longer: the core queued the job again.
    std::erase_if(pending, [&](const auto& e) {
      const PendingAction& p = e.second;
      return p.action.kind == ActionKind::kRestart &&
             !Awaits(p.action.job.value, p.action.id.value);
    });
    for (auto& [id, x] : extras) {
      if (!x.proc.On(down->id)) continue;
      x.dirty = true;
      if (x.proc.gang() && x.proc.checkpoint && !x.proc.exists &&
          x.proc.server != down->id) {
        // A gang waiting, without processes, for the agent of a part
        // (it saved as that agent stopped): its lead's agent, not the
        // one down, keeps the checkpoint, and the job's next start goes
        // on from it wherever the core places it (Execute).
        x.proc.followers.clear();
        if (live) {
          History(id, "requeue", true, 0,
                  "server " + AgentName(down->id) +
                      ", which it waited for, is down: the job goes back "
                      "to the queue and on from the checkpoint kept on " +
                      AgentName(x.proc.server) + " (mini-batch " +
                      std::to_string(x.kept_at) +
                      ") wherever it is placed next");
        }
        continue;
      }
      if (live && !x.proc.gang() && (x.proc.exists || x.proc.checkpoint)) {
        History(id, "requeue", true, 0,
                "server " + AgentName(down->id) +
                    " is down: the job goes back to the queue, its " +
                    (x.proc.exists ? "process" : "checkpoint") +
                    " there lost, and starts again wherever it is placed "
                    "next");
      }
      // A gang with a part on the lost server cannot train on: its other
      // parts are stopped (their exits are not the job's end).
      if (live && x.proc.gang() && x.proc.exists) {
        History(id, "kill", true, 0,
                "the parts of a job spanning server " +
                    std::to_string(down->id.value) + ", which is down");
        KillAt(id, x.proc, InternalActionId());
      }
      x.proc = Proc{};
      x.kept_at = -1;
      x.stopped_us = 0;
    }
  }
  for (const core::Action& a : actions) Execute(a, live);
}

void SchedulerServer::Impl::Execute(const core::Action& a, bool live) {
  JobExtra* x = Extra(a.job.value);
  if (x == nullptr) {
    Warn("action for a job without a record: " + std::to_string(a.job.value));
    return;
  }
  const bool resume_like = a.kind == ActionKind::kResume ||
                           (a.kind == ActionKind::kPack && !a.launch);
  switch (a.kind) {
    case ActionKind::kStart:
    case ActionKind::kResume:
    case ActionKind::kPack:
    case ActionKind::kMigrate:
    case ActionKind::kGrow:
    case ActionKind::kShrink: {
      PendingAction p{a, Now(), false, x->progress.minibatch_rate()};
      const Proc old = x->proc;
      const std::vector<Part> parts = Parts(a.gpus);
      if (parts.empty()) {
        // No GPUs: the core never asks for that.
        Warn("action without GPUs for job " + std::to_string(a.job.value));
        return;
      }
      // A gang, or a job that becomes one or stops being one, moves as
      // one (MoveGang).
      const bool gang = parts.size() > 1 || old.gang();
      // A start of a job whose checkpoint an agent keeps (a gang's after
      // a server of it went down) moves that checkpoint to the new
      // place and starts from it.
      const bool from_checkpoint =
          a.kind == ActionKind::kStart && old.checkpoint && !old.exists;
      // The core says whether the job moves (a migration, a resize, a
      // resume or pack elsewhere than it last ran); the daemon adds what
      // only it knows: the job's process was lost (a resume starts it
      // afresh, or from the checkpoint an agent keeps), or a start goes on
      // from a checkpoint kept elsewhere.
      p.relocate =
          a.relocates || from_checkpoint || (resume_like && !old.exists);
      if (live && a.kind == ActionKind::kStart && !from_checkpoint) {
        ForgetRunProgress(&x->progress);  // a run from the beginning
        x->dirty = true;
      }
      x->proc = Proc::At(parts);
      x->proc.leaving = p.relocate;
      p.sent = live;
      pending[a.id.value] = p;
      if (live) {
        if (!p.relocate) {
          Dispatch(p);
        } else if (gang) {
          MoveGang(p, old);
        } else {
          Move(p, old);
        }
      }
      return;
    }
    case ActionKind::kSuspend:
    case ActionKind::kUnpack: {
      PendingAction& p = pending[a.id.value] =
          PendingAction{a, Now(), false, x->progress.minibatch_rate()};
      p.sent = live;
      if (live) Dispatch(p);
      return;
    }
    case ActionKind::kKill: {
      const Proc old = x->proc;
      x->proc = Proc{};
      // A restart waiting for its agent is not sent now (one sent is
      // forgotten when its reply comes: Conclude).
      std::erase_if(pending, [&](const auto& e) {
        const PendingAction& p = e.second;
        return p.action.job == a.job && p.action.kind == ActionKind::kRestart &&
               !p.sent;
      });
      if (live) {
        {
          // A move waiting for its warm process gives up now; what it
          // leaves is killed when it concludes (FinishMove).
          std::lock_guard<std::mutex> lock(warm_mu);
          if (auto it = warm_calls.find(a.job.value); it != warm_calls.end()) {
            it->second->TryCancel();
          }
          if (auto it = first_minibatch_waits.find(a.job.value);
              it != first_minibatch_waits.end()) {
            it->second = true;
          }
        }
        History(a.job.value, "kill", true, 0, a.reason);
        if (old.exists || old.checkpoint) KillAt(a.job.value, old, a.id.value);
      }
      return;
    }
    case ActionKind::kRestart: {
      // Where its process was (LoseProcess); not sent while replayed: the
      // agent's list at its registration settles it, or it is sent then.
      PendingAction& p = pending[a.id.value] =
          PendingAction{a, Now(), a.relocates, 0};
      if (live) DispatchRestart(p);
      return;
    }
    case ActionKind::kSetPriority:
    case ActionKind::kNone:
      return;
  }
}

void SchedulerServer::Impl::Conclude(int32_t job, int64_t action,
                                     const std::string& what, bool ok,
                                     int64_t took_us, const std::string& detail,
                                     bool permanent) {
  if (metrics) metrics->ObserveMechanism(what, ok, took_us / 1e6);
  const bool current = Awaits(job, action);
  const auto took = core::Duration::Micros(took_us);
  std::string line = detail;
  if (current && !ok) {
    (void)Feed(core::ActionFailed{core::ActionId(action), JobId(job), took,
                                  detail, permanent});
    // What the core made of a failed start: a wait, or the job's end.
    const core::Job& after = st().job(JobId(job));
    if (after.state == core::JobState::kFailed && after.start_failures > 0) {
      line += "; the job failed: " + std::to_string(after.start_failures) +
              " starts failed in a row (--start-attempts)";
    } else if (after.awaits_start_retry(st().now())) {
      char wait[32];
      std::snprintf(wait, sizeof wait, "%g s",
                    (after.start_retry_at - st().now()).seconds());
      line += (what == "start" ? "; start " : "; " + what + " ") +
              std::to_string(after.start_failures) +
              " failed in a row, tried again in " + wait;
      // Where it is not tried first (core: Job::start_failed_on).
      const std::string avoid = core::StartFailedOn(after, st().cluster());
      if (!avoid.empty()) {
        line += " (away from " + avoid + " if another server has room)";
      }
    }
  }
  History(job, what, ok, took_us, line);
  // One the core no longer awaits (the job was killed, its server lost)
  // is settled by nothing else: forgotten, or the job would never be.
  if (!current) pending.erase(action);
  if (current && ok) {
    StartProbe(job, what, action);
    Defer(core::ActionDone{core::ActionId(action), JobId(job), took},
          opts.log_action_outcomes_together);
  }
}

void SchedulerServer::Impl::KillIgnoringExit(int32_t job, ServerId server,
                                             rpc::Agent::StubInterface& stub,
                                             int64_t action_id) {
  Post([this, job, server] {
    if (JobExtra* x = Extra(job)) ++x->ignore_exits[server.value];
  });
  rpc::JobRequest req;
  req.set_job_id(job);
  req.set_action_id(action_id);
  rpc::KillReply rep;
  auto ctx = Ctx();
  (void)stub.KillJob(ctx.get(), req, &rep);
}

void SchedulerServer::Impl::KillAt(int32_t job, const Proc& where,
                                   int64_t action_id, bool keep_periodic) {
  for (const Part& f : where.followers) {
    KillAt(job, Proc{f.server, f.local, true}, InternalActionId());
  }
  auto stub = StubOf(where.server);
  if (stub == nullptr) return;
  executor->Run(job, [this, stub, job, action_id, keep_periodic] {
    rpc::JobRequest req;
    req.set_job_id(job);
    req.set_action_id(action_id);
    req.set_keep_periodic(keep_periodic);
    rpc::KillReply rep;
    auto ctx = Ctx();
    grpc::Status s = stub->KillJob(ctx.get(), req, &rep);
    if (!s.ok())
      Log("job " + std::to_string(job) + ": " + RpcError("KillJob", s));
  });
}

void SchedulerServer::Impl::Dispatch(const PendingAction& p) {
  const core::Action& a = p.action;
  JobExtra& x = *Extra(a.job.value);
  const int32_t job = a.job.value;
  const int64_t aid = a.id.value;
  const std::string what(core::ActionKindName(a.kind));
  const bool starts = a.kind == ActionKind::kStart || p.relocate ||
                      (a.kind == ActionKind::kPack && a.launch);
  const bool suspends =
      a.kind == ActionKind::kSuspend || a.kind == ActionKind::kUnpack;
  if (suspends && !x.proc.exists) {
    Reply(job, aid, what, true, 0,
          x.proc.checkpoint
              ? "no process to stop; it resumes from the checkpoint kept "
                "on " +
                    AgentName(x.proc.server)
              : "no process to stop; it restarts afresh");
    return;
  }
  if (x.proc.gang()) {
    DispatchGang(p, starts, suspends);
    return;
  }
  if (std::string away = Away(x.proc.server); !away.empty()) {
    Reply(job, aid, what, false, 0, away);
    return;
  }
  auto stub = StubOf(x.proc.server);
  if (stub == nullptr) {
    Reply(
        job, aid, what, false, 0,
        "no agent connected for server " + std::to_string(x.proc.server.value));
    return;
  }
  const int64_t t0 = Env().SteadyMicros();
  auto took = [this, t0] { return UsSince(t0); };
  if (starts) {
    // A relocation reaches here only for a lost process (Lost()); the
    // others are moves (Move()).
    std::string detail = "gpus " + json(x.proc.local).dump();
    if (p.relocate) {
      detail += "; restarted from scratch (its process was lost)";
    }
    rpc::StartJobRequest req;
    req.set_job_id(job);
    req.set_submitted_us(SubmittedUs(job));
    req.set_action_id(aid);
    *req.mutable_spec() = x.spec;
    for (int32_t g : x.proc.local) req.add_gpus(g);
    const int64_t stray_kill_id = InternalActionId();
    const int64_t retry_id = InternalActionId();
    const ServerId start_server = x.proc.server;
    executor->Run(job, [=, this]() mutable {
      rpc::StartJobReply rep;
      auto ctx = Ctx();
      grpc::Status s = stub->StartJob(ctx.get(), req, &rep);
      if (AlreadyRunsThere(s)) {
        // A process of this job the daemon lost track of (a start whose
        // reply was lost in a crash): the daemon wants a new one here.
        KillIgnoringExit(job, start_server, *stub, stray_kill_id);
        rep.Clear();
        auto ctx2 = Ctx();
        req.set_action_id(retry_id);
        s = stub->StartJob(ctx2.get(), req, &rep);
        detail += "; replaced a stray process of the job";
      }
      if (s.ok()) {
        Reply(job, aid, what, true, rep.took_us() > 0 ? rep.took_us() : took(),
              detail);
      } else {
        Reply(job, aid, what, false, took(), RpcError("StartJob", s));
      }
    });
    return;
  }
  rpc::JobRequest req;
  req.set_job_id(job);
  req.set_action_id(aid);
  // A pack in place resumes the job beside its partner.
  const std::string packed_with =
      a.kind == ActionKind::kPack && a.peer.valid()
          ? "with job " + std::to_string(a.peer.value) + ", gpus " +
                json(x.proc.local).dump() + " on " + AgentName(x.proc.server)
          : "";
  executor->Run(job, [=, this] {
    auto ctx = Ctx();
    int64_t agent_took = 0;
    std::string detail = packed_with;
    bool at_boundary = false;
    grpc::Status s = SuspendOrResume(*stub, ctx.get(), req, suspends,
                                     &agent_took, &at_boundary);
    // Jobs with the library stop at a mini-batch boundary; others are
    // stopped wherever they are (SIGSTOP).
    if (suspends) detail = at_boundary ? "at boundary" : "not at boundary";
    // The process is already where the action wants it (a call of an
    // earlier daemon life got there first): done.
    if (OutcomeOf(s) == AgentOutcome::kAlreadySo) {
      s = grpc::Status::OK;
      agent_took = 0;
      detail = suspends ? "already suspended" : "already running";
    }
    if (s.ok()) {
      Reply(job, aid, what, true, agent_took > 0 ? agent_took : took(), detail);
    } else {
      Reply(job, aid, what, false, took(),
            RpcError(suspends ? "SuspendJob" : "ResumeJob", s));
    }
  });
}

void SchedulerServer::Impl::FinishMove(int32_t job, int64_t action,
                                       const std::string& what, bool ok,
                                       bool permanent, int64_t took_us,
                                       const std::string& detail, MovedTo moved,
                                       Proc from, bool afresh) {
  Post([=, this]() mutable {
    JobExtra* x = Extra(job);
    if (x == nullptr) return;
    const auto pit = pending.find(action);
    const bool current = pit != pending.end();
    if (current) {
      pit->second.settled = true;
      switch (moved) {
        case MovedTo::kDestination:
          x->proc.exists = true;
          x->proc.leaving = false;
          x->proc.checkpoint = false;
          if (afresh) {
            ForgetRunProgress(&x->progress);  // restarted from scratch
            x->dirty = true;
          }
          break;
        case MovedTo::kAsBefore:
          x->proc = from;
          x->proc.exists = true;
          x->proc.checkpoint = x->proc.leaving = false;
          break;
        case MovedTo::kCheckpointAtSource:
          x->proc = from.CheckpointOnly();
          break;
        case MovedTo::kNowhere:
          x->proc = Proc{};
          break;
      }
    }
    // Killed while it moved: the kill went to the destination; what the
    // move left at the source goes too.
    if (IsEnded(job) && (moved == MovedTo::kAsBefore ||
                         moved == MovedTo::kCheckpointAtSource)) {
      x->proc = Proc{};
      KillAt(job, from, InternalActionId());
    }
    Conclude(job, action, what, ok, took_us, detail, permanent);
    // The core takes a failed migrate (grow, shrink) back to the GPUs the
    // job had, running; its process is gone. With its checkpoint at the
    // source, it restarts there from it; with its checkpoint gone on the
    // way (the source no longer held it), nothing is left of it anywhere,
    // and it restarts there afresh.
    if (current && LiveJob(job) &&
        st().job(JobId(job)).state == core::JobState::kRunning &&
        !x->proc.exists) {
      if (moved == MovedTo::kCheckpointAtSource && x->proc.checkpoint &&
          x->proc.server == from.server) {
        LoseProcess(job, true, "the move failed");
      } else if (moved == MovedTo::kNowhere && !x->proc.checkpoint &&
                 from.server.valid()) {
        x->proc = from;
        LoseProcess(job, false,
                    "the move failed, and no checkpoint of it is left");
      }
    }
  });
}

void SchedulerServer::Impl::LoseProcess(int32_t job, bool checkpoint,
                                        std::string why) {
  JobExtra& x = *Extra(job);
  x.proc.exists = x.proc.leaving = false;
  x.proc.checkpoint = checkpoint;
  x.restart_why = std::move(why);
  const core::Status s = Feed(core::ProcessLost{JobId(job), checkpoint});
  if (!s.ok()) Warn("job " + std::to_string(job) + ": " + s.ToString());
}

void SchedulerServer::Impl::DispatchRestart(PendingAction& p) {
  const int32_t job = p.action.job.value;
  const int64_t aid = p.action.id.value;
  const bool from_checkpoint = p.action.relocates;
  JobExtra& x = *Extra(job);
  if (const std::vector<Part> dest = Parts(p.action.gpus);
      !x.proc.gang() && dest.size() == 1 && dest[0].server != x.proc.server) {
    // Its checkpoint is kept elsewhere than the GPUs the core restarts it
    // on (a copy further on was found there: StrayCheckpointed): moved to
    // them. From the beginning: there, and what is kept elsewhere dropped.
    const Proc kept = x.proc;
    x.proc = Proc::At(dest);
    if (from_checkpoint && kept.checkpoint) {
      x.proc.leaving = true;
      p.sent = true;
      p.relocate = true;
      Move(p, kept);
      return;
    }
    if (kept.checkpoint) KillAt(job, kept, InternalActionId());
  }
  const Proc at = x.proc;
  auto stub = StubOf(at.server);
  std::string missing;
  if (at.gang() ? AnyPartAway(at) || !Conns(at.parts(), &missing)
                : stub == nullptr || !Away(at.server).empty()) {
    // An agent of it is away: the job waits for it there (or for its
    // server to be declared down), its restart sent when the agent
    // registers.
    p.sent = false;
    x.proc.exists = false;
    return;
  }
  p.sent = true;
  if (!from_checkpoint) {
    ForgetRunProgress(&x.progress);  // a run from the beginning
    x.dirty = true;
  }
  const std::string why =
      x.restart_why.empty() ? "its process was lost" : x.restart_why;
  const int64_t saved = from_checkpoint ? x.kept_at : -1;
  const int64_t paused_since_us = from_checkpoint ? x.stopped_us : 0;
  if (at.gang()) {
    // Every part, from the checkpoint at its lead's agent or afresh.
    if (from_checkpoint) {
      RestartGangAtSource(job, at, why, saved, paused_since_us, aid);
    } else {
      RelaunchGang(job, aid);
    }
    return;
  }
  x.proc = Proc{at.server, at.local, true, false, false};
  rpc::StartJobRequest req;
  req.set_job_id(job);
  req.set_submitted_us(SubmittedUs(job));
  req.set_action_id(aid);
  *req.mutable_spec() = x.spec;
  for (int32_t g : at.local) req.add_gpus(g);
  req.set_resume_local(from_checkpoint);
  const std::string name = AgentName(at.server);
  executor->Run(job, [=, this] {
    const int64_t t0 = Env().SteadyMicros();
    rpc::StartJobReply rep;
    auto ctx = Ctx();
    grpc::Status s = stub->StartJob(ctx.get(), req, &rep);
    const int64_t took = UsSince(t0);
    // A start of this daemon's that the agent's list had not shown yet
    // got there first: the job runs there.
    const bool already = AlreadyRunsThere(s);
    if (already) s = grpc::Status::OK;
    std::string cost;
    if (s.ok() && saved >= 0) {
      const int64_t first = AwaitFirstMinibatch(
          job, PartConn{Part{at.server, at.local}, stub, name, ""}, saved, t0);
      cost = first >= 0 ? "; first mini-batch " + Ms(first) + " after the start"
                        : "; no mini-batch within a minute of the start";
      if (first >= 0 && paused_since_us > 0) {
        cost += "; training paused " +
                Ms(Env().WallMicros() - paused_since_us) +
                " since its agent reported its stop";
      }
    }
    Post([=, this] {
      JobExtra* y = Extra(job);
      // One no longer awaited is dropped by Conclude.
      const bool current = Awaits(job, aid) && y != nullptr;
      auto pit = pending.find(aid);
      const std::string where =
          from_checkpoint ? "on " + name + " from the checkpoint kept there"
                          : "relaunched a lost process";
      if (s.ok()) {
        if (current) {
          y->kept_at = -1;
          y->stopped_us = 0;
        }
        // Killed or moved on meanwhile: that action, queued behind this
        // start, dealt with the process.
        Conclude(job, aid, "restart", true, took,
                 where + " (" + why + ")" +
                     (already ? "; it was already running there" : "") + cost,
                 /*permanent=*/false);
        return;
      }
      std::string detail = where + ": " + RpcError("StartJob", s);
      if (current) {
        y->proc.exists = false;
        const bool unreachable =
            s.error_code() == grpc::StatusCode::UNAVAILABLE ||
            s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
        if (from_checkpoint && unreachable) {
          // The agent went away again, or the call did not get through:
          // the job waits for it with its checkpoint (restarted from it at
          // its next registration or at a report from it a while on, or
          // placed again if its server is declared down).
          y->proc.checkpoint = true;
          pit->second.sent = false;
          pit->second.unreached_us = Env().WallMicros();
          History(job, "restart", false, took,
                  detail +
                      "; it waits for the agent, with its checkpoint (tried "
                      "again when the agent registers, or reports " +
                      Seconds(kRetryUnreachedS) + " on)");
          return;
        }
        // The agent could not start it from its checkpoint (gone,
        // unreadable): the core starts it again from the beginning there
        // rather than fail it; a start from the beginning that fails ends
        // it.
        y->proc.checkpoint = false;
        detail += from_checkpoint ? "; it starts again from the beginning"
                                  : "; the job failed";
      }
      Conclude(job, aid, "restart", false, took, detail, /*permanent=*/false);
    });
  });
}

}  // namespace gandiva::runtime
