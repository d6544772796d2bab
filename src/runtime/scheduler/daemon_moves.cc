// Moves (migrate, grow, shrink, a resume or pack on other GPUs) and jobs
// spanning servers (gangs): checkpoint at the source, transfer, warm start
// at the destination, each as calls from a dispatcher thread; and the
// probes that measure a decision's effect on a job's rate.

#include "runtime/scheduler/daemon_impl.h"

namespace gandiva::runtime {

void SchedulerServer::Impl::ContinueOrStopFollowers(
    int32_t job, const std::vector<PartConn>& parts, Ids& ids, bool resume) {
  for (size_t i = 1; i < parts.size(); ++i) {
    rpc::JobRequest req;
    req.set_job_id(job);
    req.set_action_id(ids());
    auto ctx = Ctx();
    if (resume) {
      rpc::ResumeReply rep;
      (void)parts[i].stub->ResumeJob(ctx.get(), req, &rep);
    } else {
      rpc::SuspendReply rep;
      (void)parts[i].stub->SuspendJob(ctx.get(), req, &rep);
    }
  }
}

void SchedulerServer::Impl::KillPart(int32_t job, const PartConn& c, int64_t id,
                                     bool keep_checkpoint) {
  rpc::JobRequest req;
  req.set_job_id(job);
  req.set_action_id(id);
  req.set_keep_checkpoint(keep_checkpoint);
  rpc::KillReply rep;
  auto ctx = Ctx();
  (void)c.stub->KillJob(ctx.get(), req, &rep);
}

int64_t SchedulerServer::Impl::AwaitFirstMinibatch(int32_t job,
                                                   const PartConn& lead,
                                                   int64_t saved,
                                                   int64_t since) {
  const int64_t end = Env().SteadyMicros() + 60'000'000;
  {
    std::lock_guard<std::mutex> lock(warm_mu);
    first_minibatch_waits[job] = false;
  }
  int64_t result = -1;
  while (Env().SteadyMicros() < end) {
    {
      std::lock_guard<std::mutex> lock(warm_mu);
      if (first_minibatch_waits[job]) break;
    }
    rpc::AgentStatusReply rep;
    auto ctx = Ctx();
    if (lead.stub->Status(ctx.get(), rpc::AgentStatusRequest(), &rep).ok()) {
      const auto it = std::find_if(
          rep.jobs().begin(), rep.jobs().end(),
          [job](const rpc::AgentJob& j) { return j.job_id() == job; });
      if (it == rep.jobs().end()) break;  // it exited
      if (it->progress().minibatches() > saved) {
        result = UsSince(since);
        break;
      }
    }
    Env().SleepFor(10'000);
  }
  std::lock_guard<std::mutex> lock(warm_mu);
  first_minibatch_waits.erase(job);
  return result;
}

bool SchedulerServer::Impl::StartParts(int32_t job, const rpc::JobSpec& spec,
                                       const std::vector<PartConn>& parts,
                                       bool resume_local, Ids& ids,
                                       std::string* err) {
  if (std::string why = UnreachableLead(parts); !why.empty()) {
    *err = why;
    return false;
  }
  int32_t world = 0;
  for (const PartConn& c : parts) {
    world += static_cast<int32_t>(c.part.local.size());
  }
  const std::string host = HostOf(parts[0].address);
  int32_t port = 0;
  int32_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const PartConn& c = parts[i];
    rpc::StartJobRequest req;
    req.set_job_id(job);
    req.set_submitted_us(SubmittedUs(job));
    req.set_action_id(ids());
    *req.mutable_spec() = spec;
    for (int32_t g : c.part.local) req.add_gpus(g);
    req.set_resume_local(resume_local);
    if (parts.size() > 1) {
      rpc::Gang* g = req.mutable_gang();
      g->set_nodes(static_cast<int32_t>(parts.size()));
      g->set_node_rank(static_cast<int32_t>(i));
      g->set_world_size(world);
      g->set_rank_offset(offset);
      g->set_master_addr(host);
      g->set_master_port(port);
    }
    offset += static_cast<int32_t>(c.part.local.size());
    rpc::StartJobReply rep;
    auto ctx = Ctx();
    grpc::Status s = c.stub->StartJob(ctx.get(), req, &rep);
    if (AlreadyRunsThere(s)) {
      // A process of the job that lingers there (a part that was being
      // stopped, a start whose reply was lost): the new one replaces it.
      KillPart(job, c, ids(), /*keep_checkpoint=*/true);
      rep.Clear();
      auto ctx2 = Ctx();
      req.set_action_id(ids());
      s = c.stub->StartJob(ctx2.get(), req, &rep);
    }
    if (s.ok() && i == 0 && parts.size() > 1) {
      port = rep.master_port();
      if (port <= 0) {
        s = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                         "the agent did not say which port the ranks "
                         "meet at (it does not run multi-server jobs)");
        KillPart(job, c, ids(), /*keep_checkpoint=*/true);
      }
    }
    if (!s.ok()) {
      *err = (parts.size() > 1
                  ? "part " + std::to_string(i) + " on " + c.name + ": "
                  : std::string()) +
             RpcError("StartJob", s);
      for (size_t k = 0; k < i; ++k) {
        KillPart(job, parts[k], ids(), /*keep_checkpoint=*/true);
      }
      return false;
    }
  }
  return true;
}

bool SchedulerServer::Impl::Distribute(int32_t job, const PartConn& source,
                                       const std::vector<PartConn>& parts,
                                       Ids& ids, std::string* err,
                                       std::string* summary, bool* gone) {
  struct Pull {
    const PartConn* to;
    int64_t id;
    bool lead;
    grpc::Status status;
    rpc::ReceiveCheckpointReply reply;
  };
  std::vector<Pull> pulls;
  for (const PartConn& c : parts) {
    if (c.part.server == source.part.server) continue;
    pulls.push_back(Pull{&c, ids(), &c == &parts[0], {}, {}});
  }
  std::vector<std::thread> threads;
  for (Pull& p : pulls) {
    threads.emplace_back([&, job] {
      rpc::ReceiveCheckpointRequest req;
      req.set_job_id(job);
      req.set_submitted_us(SubmittedUs(job));
      req.set_action_id(p.id);
      req.set_source_address(source.address);
      req.set_fetch_ticket(FetchTicket(job, source.name, p.to->name));
      // The job's log so far goes to its new lead only.
      req.set_without_log(!p.lead);
      auto ctx = Ctx();
      ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(300));
      p.status = p.to->stub->ReceiveCheckpoint(ctx.get(), req, &p.reply);
    });
  }
  for (std::thread& t : threads) t.join();
  int64_t slowest = -1;
  int64_t bytes = 0;
  std::string channel;
  for (const Pull& p : pulls) {
    if (!p.status.ok()) {
      *err =
          "to " + p.to->name + ": " + RpcError("ReceiveCheckpoint", p.status);
      if (gone != nullptr) {
        *gone = p.status.error_code() == grpc::StatusCode::NOT_FOUND;
      }
      return false;
    }
    bytes = p.reply.bytes();
    if (p.reply.transfer_us() > slowest) {
      slowest = p.reply.transfer_us();
      channel = p.reply.channel();
    }
  }
  summary->clear();
  const size_t n = pulls.size();
  if (n > 0) {
    *summary = "transfer to " + std::to_string(n) +
               (n == 1 ? " server " : " servers at once, the slowest ") +
               Ms(slowest) + " (" + Mb(bytes) + Rate(bytes, slowest) +
               (channel.empty() ? "" : " over " + channel) + ")";
  }
  return true;
}

void SchedulerServer::Impl::DispatchGang(const PendingAction& p, bool starts,
                                         bool suspends) {
  const core::Action& a = p.action;
  JobExtra& x = *Extra(a.job.value);
  const int32_t job = a.job.value;
  const int64_t aid = a.id.value;
  const std::string what(core::ActionKindName(a.kind));
  std::string missing;
  auto conns = Conns(x.proc.parts(), &missing);
  if (!conns) {
    Reply(job, aid, what, false, 0, missing);
    return;
  }
  const rpc::JobSpec spec = x.spec;
  const bool relocated = p.relocate;
  Ids ids = TakeIds(4 * conns->size() + 4);
  executor->Run(job, [=, this]() mutable {
    const int64_t t0 = Env().SteadyMicros();
    if (starts) {
      std::string err;
      const bool ok = StartParts(job, spec, *conns, false, ids, &err);
      Reply(job, aid, what, ok, UsSince(t0),
            ok ? Placement(*conns) +
                     (relocated
                          ? "; restarted from scratch (its process was lost)"
                          : "")
               : err);
      return;
    }
    std::vector<PartConn> order = *conns;
    if (!suspends) std::reverse(order.begin(), order.end());
    bool at_boundary = false;
    for (const PartConn& c : order) {
      rpc::JobRequest req;
      req.set_job_id(job);
      req.set_action_id(ids());
      auto ctx = Ctx();
      grpc::Status s;
      if (suspends) {
        rpc::SuspendReply rep;
        s = c.stub->SuspendJob(ctx.get(), req, &rep);
        if (c.part.server == (*conns)[0].part.server) {
          at_boundary = rep.at_boundary();
        }
      } else {
        rpc::ResumeReply rep;
        s = c.stub->ResumeJob(ctx.get(), req, &rep);
      }
      if (OutcomeOf(s) == AgentOutcome::kAlreadySo) s = grpc::Status::OK;
      if (!s.ok()) {
        Reply(job, aid, what, false, UsSince(t0),
              "part on " + c.name + ": " +
                  RpcError(suspends ? "SuspendJob" : "ResumeJob", s));
        return;
      }
    }
    const std::string n = std::to_string(conns->size()) + " parts";
    Reply(job, aid, what, true, UsSince(t0),
          suspends ? (at_boundary ? "at boundary, " : "not at boundary, ") + n
                   : n);
  });
}

void SchedulerServer::Impl::RelaunchGang(int32_t id, int64_t action) {
  JobExtra& x = *Extra(id);
  std::string missing;
  auto conns = Conns(x.proc.parts(), &missing);
  if (!conns) {
    Conclude(id, action, "restart", false, 0, missing + "; the job failed",
             /*permanent=*/false);
    return;
  }
  x.proc.exists = true;
  const rpc::JobSpec spec = x.spec;
  Ids ids = TakeIds(4 * conns->size() + 4);
  executor->Run(id, [=, this]() mutable {
    const int64_t t0 = Env().SteadyMicros();
    std::string err;
    const bool ok = StartParts(id, spec, *conns, false, ids, &err);
    const int64_t took = UsSince(t0);
    Post([=, this] {
      JobExtra* y = Extra(id);
      if (!ok && y != nullptr && Awaits(id, action)) {
        y->proc.exists = false;
      }
      Conclude(id, action, "restart", ok, took,
               ok ? "relaunched every part afresh (" + Placement(*conns) +
                        ") after one was lost"
                  : err + "; the job failed",
               /*permanent=*/false);
    });
  });
}

bool SchedulerServer::Impl::SaveGangForLeave(int32_t id, JobExtra& x,
                                             const AgentConn& a) {
  if (!x.proc.gang() || !x.proc.exists || x.proc.leaving || !x.proc.On(a.id) ||
      IsEnded(id) || !x.progress.uses_library()) {
    return false;
  }
  const core::Job& j = st().job(JobId(id));
  if (j.busy()) return false;  // that action's outcome decides
  std::string missing;
  auto conns = Conns(x.proc.parts(), &missing);
  if (!conns) return false;
  const Proc from = x.proc;
  x.proc.leaving = true;
  leave_saving.insert(id);
  const bool was_suspended = j.state == JobState::kSuspended;
  const std::string name = a.name;
  Ids ids = TakeIds(4 * conns->size() + 4);
  executor->Run(id, [=, this]() mutable {
    const int64_t t0 = Env().SteadyMicros();
    auto each_follower = [&](bool resume) {
      ContinueOrStopFollowers(id, *conns, ids, resume);
    };
    // A suspended gang's other parts take part in the save.
    if (was_suspended) each_follower(/*resume=*/true);
    rpc::CheckpointRequest req;
    req.set_job_id(id);
    req.set_action_id(ids());
    rpc::CheckpointReply rep;
    auto ctx = Ctx();
    const grpc::Status s =
        (*conns)[0].stub->CheckpointJob(ctx.get(), req, &rep);
    if (s.ok()) {
      // The other parts left with rank 0; any that lingers is stopped.
      for (size_t i = 1; i < conns->size(); ++i) {
        KillPart(id, (*conns)[i], ids(), /*keep_checkpoint=*/false);
      }
    } else if (was_suspended) {
      each_follower(/*resume=*/false);
    }
    const int64_t took = UsSince(t0);
    Post([=, this] {
      leave_saving.erase(id);
      JobExtra* y = Extra(id);
      if (y == nullptr) return;
      y->proc.leaving = false;
      if (!s.ok()) {
        History(id, "stop", false, took,
                "agent '" + name +
                    "' stops, and the job, spanning servers, could not "
                    "save a checkpoint: " +
                    RpcError("CheckpointJob", s));
        return;
      }
      if (IsEnded(id)) {
        y->proc = Proc{};
        KillAt(id, from, InternalActionId());
        return;
      }
      y->proc = from.CheckpointOnly();
      y->kept_at = rep.minibatches();
      y->stopped_us = Now();
      if (rep.minibatches() > 0) {
        y->progress.set_minibatches(rep.minibatches());
      }
      y->progress.set_minibatch_rate(0);
      History(id, "stop", true, took,
              "agent '" + name +
                  "' stopped; the job, spanning servers, saved a "
                  "checkpoint at mini-batch " +
                  std::to_string(rep.minibatches()) + " (" + rep.method() +
                  ", " + Mb(rep.bytes()) + "), kept on " + (*conns)[0].name +
                  ": every part goes on from it when the agent is back");
    });
  });
  return true;
}

void SchedulerServer::Impl::RestartGangAtSource(int32_t job, const Proc& from,
                                                const std::string& why,
                                                int64_t saved,
                                                int64_t paused_since_us,
                                                int64_t action) {
  JobExtra* x = Extra(job);
  if (x == nullptr) return;
  std::string missing;
  auto conns = Conns(from.parts(), &missing);
  if (!conns) {
    x->proc.checkpoint = false;
    Conclude(job, action, "restart", false, 0,
             missing + "; every part starts again from the beginning",
             /*permanent=*/false);
    return;
  }
  x->proc = from;
  x->proc.exists = true;
  x->proc.checkpoint = x->proc.leaving = false;
  const rpc::JobSpec spec = x->spec;
  Ids ids = TakeIds(6 * conns->size() + 4);
  executor->Run(job, [=, this]() mutable {
    const int64_t t0 = Env().SteadyMicros();
    std::string err, transfer;
    const bool ok =
        Distribute(job, (*conns)[0], *conns, ids, &err, &transfer) &&
        StartParts(job, spec, *conns, true, ids, &err);
    const int64_t took = UsSince(t0);
    std::string cost;
    if (ok && saved >= 0) {
      const int64_t first = AwaitFirstMinibatch(job, (*conns)[0], saved, t0);
      cost = first >= 0
                 ? "; first mini-batch " + Ms(first) + " after the restart"
                 : "; no mini-batch within a minute of the restart";
      if (first >= 0 && paused_since_us > 0) {
        cost += "; training paused " +
                Ms(Env().WallMicros() - paused_since_us) + " since it saved";
      }
    }
    Post([=, this] {
      JobExtra* y = Extra(job);
      if (y == nullptr) return;
      if (!ok) {
        // The core starts every part again from the beginning.
        if (Awaits(job, action) && y->proc.exists &&
            y->proc.server == from.server) {
          y->proc.exists = y->proc.checkpoint = false;
        }
        Conclude(job, action, "restart", false, took,
                 Placement(*conns) + " from the checkpoint kept on " +
                     (*conns)[0].name + ": " + err +
                     "; every part starts again from the beginning",
                 /*permanent=*/false);
        return;
      }
      y->kept_at = -1;
      y->stopped_us = 0;
      Conclude(job, action, "restart", true, took,
               Placement(*conns) + " from the checkpoint kept on " +
                   (*conns)[0].name + " (" + why + ")" +
                   (transfer.empty() ? "" : "; " + transfer) + cost,
               /*permanent=*/false);
    });
  });
}

void SchedulerServer::Impl::MoveGang(const PendingAction& p, const Proc& from) {
  const core::Action& a = p.action;
  JobExtra& x = *Extra(a.job.value);
  const int32_t job = a.job.value;
  const int64_t aid = a.id.value;
  const std::string what(core::ActionKindName(a.kind));
  const bool resize =
      a.kind == ActionKind::kGrow || a.kind == ActionKind::kShrink;
  const bool was_suspended = a.kind == ActionKind::kResume ||
                             (a.kind == ActionKind::kPack && !a.launch);
  const bool has_source = from.exists || from.checkpoint;
  std::string missing;
  auto dst = Conns(x.proc.parts(), &missing);
  std::optional<std::vector<PartConn>> src =
      has_source
          ? Conns(from.parts(), &missing)
          : std::optional<std::vector<PartConn>>(std::vector<PartConn>{});
  if (!dst || !src) {
    FinishMove(job, aid, what, false, false, 0, missing,
               from.exists ? MovedTo::kAsBefore : MovedTo::kNowhere, from);
    return;
  }
  const bool library = x.progress.uses_library();
  // A checkpoint kept without a process: the mini-batch it was saved at.
  const int64_t kept_at = from.exists ? -1 : x.kept_at;
  int32_t world = 0;
  for (const PartConn& c : *dst) {
    world += static_cast<int32_t>(c.part.local.size());
  }
  const rpc::JobSpec spec = x.spec;
  const std::string where =
      has_source ? "from " + Placement(*src) + " to " + Placement(*dst)
                 : Placement(*dst);
  GangMovePlan plan;
  plan.job = job;
  plan.action = aid;
  for (const PartConn& c : *src) plan.from.push_back(c.part.server);
  plan.from_exists = from.exists;
  for (const PartConn& c : *dst) plan.to.push_back(c.part.server);
  plan.world = world;
  plan.resize = resize;
  plan.was_suspended = was_suspended;
  plan.library = library;
  plan.kept_at = kept_at;
  plan.where = where;
  if (!src->empty()) plan.source_name = (*src)[0].name;
  Ids ids = TakeIds(8 * (dst->size() + src->size()) + 8);
  executor->Run(job, [=, this]() mutable {
    GangMoveSteps steps(plan, Env().SteadyMicros());
    GangMoveSteps::Step step = steps.Start();
    while (const GangCall* c = std::get_if<GangCall>(&step)) {
      step = steps.Next(CallForGangMove(*c, job, spec, *src, *dst, ids));
    }
    const MoveDone& d = std::get<MoveDone>(step);
    FinishMove(job, aid, what, d.ok, d.permanent, d.took_us, d.detail, d.moved,
               from, d.afresh);
  });
}

GangResult SchedulerServer::Impl::CallForGangMove(
    const GangCall& c, int32_t job, const rpc::JobSpec& spec,
    const std::vector<PartConn>& src, const std::vector<PartConn>& dst,
    Ids& ids) {
  GangResult r;
  switch (c.kind) {
    case GangCall::Kind::kFollowers:
      ContinueOrStopFollowers(job, src, ids, c.resume);
      break;
    case GangCall::Kind::kCheckpoint: {
      auto ctx = Ctx();
      ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::microseconds(c.timeout_us));
      r.status =
          src[0].stub->CheckpointJob(ctx.get(), c.checkpoint, &r.checkpoint);
      break;
    }
    case GangCall::Kind::kKillPart:
      KillPart(job, (c.of_source ? src : dst)[c.part], ids(),
               c.keep_checkpoint);
      break;
    case GangCall::Kind::kDistribute:
      r.ok = Distribute(job, src[0], dst, ids, &r.error, &r.summary,
                        &r.checkpoint_gone);
      break;
    case GangCall::Kind::kStartParts:
      r.ok = StartParts(job, spec, dst, c.resume_local, ids, &r.error);
      break;
    case GangCall::Kind::kAwaitFirstMinibatch:
      r.first_us = AwaitFirstMinibatch(job, dst[0], c.saved, c.since_us);
      break;
  }
  r.now_us = Env().SteadyMicros();
  return r;
}

void SchedulerServer::Impl::Move(const PendingAction& p, const Proc& from) {
  const core::Action& a = p.action;
  JobExtra& x = *Extra(a.job.value);
  const int32_t job = a.job.value;
  const int64_t aid = a.id.value;
  const std::string what(core::ActionKindName(a.kind));
  const Proc to = x.proc;
  const bool resize =
      a.kind == ActionKind::kGrow || a.kind == ActionKind::kShrink;
  const bool fresh_fallback =
      a.kind == ActionKind::kResume || a.kind == ActionKind::kPack;
  auto dst = StubOf(to.server);
  const bool has_source = from.exists || from.checkpoint;
  auto src = has_source ? StubOf(from.server) : nullptr;
  std::string away = Away(to.server);
  if (away.empty() && has_source) away = Away(from.server);
  if (!away.empty()) {
    // Its process, or the checkpoint it saved as its agent stopped, stays
    // where it is.
    FinishMove(job, aid, what, false, false, 0, away,
               from.exists       ? MovedTo::kAsBefore
               : from.checkpoint ? MovedTo::kCheckpointAtSource
                                 : MovedTo::kNowhere,
               from);
    return;
  }
  if (dst == nullptr || (has_source && src == nullptr)) {
    FinishMove(job, aid, what, false, false, 0,
               "no agent connected for server " +
                   std::to_string((dst == nullptr ? to : from).server.value),
               from.exists ? MovedTo::kAsBefore : MovedTo::kNowhere, from);
    return;
  }
  const bool same_server = has_source && from.server == to.server;
  const std::string src_address =
      has_source ? agents[static_cast<size_t>(from.server.value)].address : "";
  std::string where =
      "gpus " + json(to.local).dump() + " on " + AgentName(to.server);
  if (has_source && !same_server) {
    where = "from " + AgentName(from.server) + " to " + where;
  }
  MovePlan plan;
  plan.job = job;
  plan.submitted_us = SubmittedUs(job);
  plan.spec = x.spec;
  plan.from = from;
  plan.to = to;
  plan.resize = resize;
  plan.fresh_fallback = fresh_fallback;
  // Only a job that attached the library can wait for its checkpoint, and
  // only a running one needs to: a checkpoint kept without a process is
  // received and held, and the job started from it.
  plan.warm = x.progress.uses_library() && !same_server && from.exists;
  // A checkpoint kept without a process: the mini-batch it was saved at.
  plan.kept_at = from.exists ? -1 : x.kept_at;
  plan.source_address = src_address;
  if (has_source && !same_server) {
    plan.fetch_ticket =
        FetchTicket(job, AgentName(from.server), AgentName(to.server));
  }
  plan.where = where;
  plan.warm_ready_timeout_us =
      static_cast<int64_t>(opts.warm_ready_timeout_s * 1e6);
  plan.rpc_timeout_us = static_cast<int64_t>(opts.agent_rpc_timeout_s * 1e6);
  plan.ids.action = aid;
  plan.ids.warm = InternalActionId();
  plan.ids.start = InternalActionId();
  plan.ids.receive = InternalActionId();
  plan.ids.back = InternalActionId();
  plan.ids.kill_source = InternalActionId();
  plan.ids.kill_destination = InternalActionId();
  executor->Run(job, [=, this] {
    MoveSteps steps(plan, Env().SteadyMicros());
    MoveSteps::Step step = steps.Start();
    while (const MoveCall* c = std::get_if<MoveCall>(&step)) {
      step = steps.Next(c->at_source ? CallForMove(*c, job, from, src)
                                     : CallForMove(*c, job, to, dst));
    }
    const MoveDone& d = std::get<MoveDone>(step);
    FinishMove(job, aid, what, d.ok, d.permanent, d.took_us, d.detail, d.moved,
               from, d.afresh);
  });
}

MoveResult SchedulerServer::Impl::CallForMove(
    const MoveCall& c, int32_t job, const Proc& at,
    const std::shared_ptr<rpc::Agent::StubInterface>& stub) {
  MoveResult r;
  std::unique_ptr<grpc::ClientContext> ctx = Ctx();
  if (c.timeout_us > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::microseconds(c.timeout_us));
  }
  switch (c.kind) {
    case MoveCall::Kind::kStart: {
      // A warm start may wait a minute for its process: a kill cancels it.
      const bool warm = c.start.warm();
      if (warm) {
        std::lock_guard<std::mutex> lock(warm_mu);
        warm_calls[job] = ctx.get();
      }
      r.status = stub->StartJob(ctx.get(), c.start, &r.start);
      if (warm) {
        std::lock_guard<std::mutex> lock(warm_mu);
        warm_calls.erase(job);
      }
      break;
    }
    case MoveCall::Kind::kCheckpoint:
      r.status = stub->CheckpointJob(ctx.get(), c.checkpoint, &r.checkpoint);
      break;
    case MoveCall::Kind::kReceive:
      r.status = stub->ReceiveCheckpoint(ctx.get(), c.receive, &r.receive);
      break;
    case MoveCall::Kind::kKill:
      if (c.ignore_exit) {
        KillIgnoringExit(job, at.server, *stub, c.kill.action_id());
      } else {
        rpc::KillReply rep;
        r.status = stub->KillJob(ctx.get(), c.kill, &rep);
      }
      break;
    case MoveCall::Kind::kAwaitFirstMinibatch:
      r.first_us = AwaitFirstMinibatch(
          job, PartConn{Part{at.server, at.local}, stub, "", ""}, c.saved,
          c.since_us);
      break;
  }
  r.now_us = Env().SteadyMicros();
  return r;
}

void SchedulerServer::Impl::StartProbe(int32_t job, const std::string& what,
                                       int64_t action) {
  auto it = pending.find(action);
  if (it == pending.end()) return;
  const core::ActionKind k = it->second.action.kind;
  if (k == ActionKind::kRestart) return;  // no policy's choice to weigh
  if (k == ActionKind::kStart || k == ActionKind::kResume ||
      k == ActionKind::kSuspend || k == ActionKind::kKill) {
    if (!it->second.relocate) return;
  }
  const int64_t due = Now() + static_cast<int64_t>(opts.probe_delay_s * 1e6);
  JobExtra* x = Extra(job);
  if (x == nullptr) return;
  x->probe = Probe{what, it->second.rate_before, due};
  // A pack or unpack changes the partner's rate too.
  const core::JobId peer = it->second.action.peer;
  if (peer.valid() && (k == ActionKind::kPack || k == ActionKind::kUnpack)) {
    if (JobExtra* px = Extra(peer.value)) {
      px->probe = Probe{what + " of job " + std::to_string(job),
                        px->progress.minibatch_rate(), due};
    }
  }
}

void SchedulerServer::Impl::CheckProbe(int32_t job, JobExtra& x) {
  if (!x.probe || Now() < x.probe->due_us) return;
  const double after = x.progress.minibatch_rate();
  if (after <= 0) return;
  char b[160];
  if (x.probe->before > 0) {
    std::snprintf(
        b, sizeof b, "after %s: %.2f mini-batches/s, before %.2f (x%.2f)",
        x.probe->what.c_str(), after, x.probe->before, after / x.probe->before);
  } else {
    std::snprintf(b, sizeof b, "after %s: %.2f mini-batches/s",
                  x.probe->what.c_str(), after);
  }
  History(job, "profile", true, 0, b);
  x.probe.reset();
}

}  // namespace gandiva::runtime
