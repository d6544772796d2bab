#include "runtime/scheduler/move_steps.h"

#include <utility>

#include "runtime/scheduler/agent_calls.h"

namespace gandiva::runtime {
namespace {

constexpr int64_t kCheckpointTimeoutUs = 120'000'000;
constexpr int64_t kReceiveTimeoutUs = 300'000'000;

}  // namespace

MoveSteps::MoveSteps(MovePlan plan, int64_t now_us)
    : plan_(std::move(plan)), t0_(now_us) {}

MoveCall MoveSteps::StartAt(bool at_source, bool warm, bool resume_local,
                            int64_t id) const {
  const Proc& at = at_source ? plan_.from : plan_.to;
  MoveCall c;
  c.kind = MoveCall::Kind::kStart;
  c.at_source = at_source;
  rpc::StartJobRequest& req = c.start;
  req.set_job_id(plan_.job);
  req.set_submitted_us(plan_.submitted_us);
  req.set_action_id(id);
  *req.mutable_spec() = plan_.spec;
  for (int32_t g : at.local) req.add_gpus(g);
  req.set_warm(warm);
  req.set_resume_local(resume_local);
  if (warm) {
    // A warm start replies once the process waits for its checkpoint: the
    // source trains until then.
    const int64_t ready_us = plan_.warm_ready_timeout_us;
    req.set_await_ready_ms(static_cast<int32_t>(ready_us / 1000));
    c.timeout_us = ready_us + plan_.rpc_timeout_us;
  }
  return c;
}

MoveCall MoveSteps::Kill(bool at_source, int64_t id) const {
  MoveCall c;
  c.kind = MoveCall::Kind::kKill;
  c.at_source = at_source;
  c.kill.set_job_id(plan_.job);
  c.kill.set_action_id(id);
  return c;
}

MoveCall MoveSteps::Await(int64_t saved, int64_t since_us) const {
  MoveCall c;
  c.kind = MoveCall::Kind::kAwaitFirstMinibatch;
  c.saved = saved;
  c.since_us = since_us;
  return c;
}

MoveSteps::Step MoveSteps::Done(bool ok, bool permanent, std::string detail,
                                MovedTo moved, int64_t now_us) const {
  return MoveDone{ok, permanent, now_us - t0_, std::move(detail), moved};
}

MoveSteps::Step MoveSteps::Undo(bool at_source, MoveDone then) {
  then_ = std::move(then);
  at_ = At::kUndo;
  return Kill(at_source,
              at_source ? plan_.ids.kill_source : plan_.ids.kill_destination);
}

std::string MoveSteps::RestartPhase(int64_t us) const {
  return (method_ == "criu" ? ", restore " : ", restart ") + Ms(us);
}

MoveSteps::Step MoveSteps::StartAfresh(std::string why) {
  // Nothing to carry over: the source's process goes (a warm one at the
  // destination first), and the job starts afresh where the core wants it.
  fallback_why_ = std::move(why);
  at_ = At::kFallbackKill;
  fallback_killed_source_ = !plan_.warm;
  if (plan_.warm) return Kill(false, plan_.ids.kill_destination);
  MoveCall c = Kill(true, plan_.ids.kill_source);
  c.ignore_exit = true;
  return c;
}

MoveSteps::Step MoveSteps::Start() {
  if (!HasSource()) {
    at_ = At::kFreshStart;
    fallback_why_ = "its process was lost";
    return StartAt(false, false, false, plan_.ids.start);
  }
  if (plan_.warm) {
    at_ = At::kWarmStart;
    return StartAt(false, /*warm=*/true, false, plan_.ids.warm);
  }
  return CheckpointOrOn(t0_);
}

MoveSteps::Step MoveSteps::CheckpointOrOn(int64_t now_us) {
  t_checkpoint_ = now_us;
  if (!plan_.from.exists) return AfterCheckpoint(now_us);
  at_ = At::kCheckpoint;
  MoveCall c;
  c.kind = MoveCall::Kind::kCheckpoint;
  c.at_source = true;
  c.checkpoint.set_job_id(plan_.job);
  c.checkpoint.set_action_id(plan_.ids.action);
  if (plan_.resize) {
    c.checkpoint.set_resize_to(static_cast<int32_t>(plan_.to.local.size()));
  }
  // To another server the destination needs only the files, not the
  // source's GPUs: the source's exit need not be awaited.
  c.checkpoint.set_reply_when_saved(!plan_.resize && !SameServer());
  c.timeout_us = kCheckpointTimeoutUs;
  return c;
}

MoveSteps::Step MoveSteps::AfterCheckpoint(int64_t now_us) {
  t_start_ = now_us;
  if (SameServer()) {
    at_ = At::kRestartHere;
    return StartAt(false, false, /*resume_local=*/true, plan_.ids.start);
  }
  at_ = At::kReceive;
  MoveCall c;
  c.kind = MoveCall::Kind::kReceive;
  c.receive.set_job_id(plan_.job);
  c.receive.set_submitted_us(plan_.submitted_us);
  c.receive.set_action_id(plan_.ids.receive);
  c.receive.set_source_address(plan_.source_address);
  c.receive.set_fetch_ticket(plan_.fetch_ticket);
  c.receive.set_await_first_minibatch(plan_.warm);
  c.timeout_us = kReceiveTimeoutUs;
  return c;
}

MoveSteps::Step MoveSteps::Next(const MoveResult& r) {
  const int64_t now = r.now_us;
  switch (at_) {
    case At::kFreshStart: {
      const bool ok = r.status.ok();
      Step d = Done(
          ok, false,
          ok ? plan_.where + "; restarted from scratch (" + fallback_why_ + ")"
             : RpcError("StartJob", r.status),
          ok ? MovedTo::kDestination : MovedTo::kNowhere, now);
      std::get<MoveDone>(d).afresh = ok;
      return d;
    }
    case At::kWarmStart:
      if (!r.status.ok()) {
        // The new process may have started (a call cancelled by a kill, or
        // one whose reply was lost): it goes.
        return Undo(false,
                    MoveDone{false, false, 0,
                             "warm start: " + RpcError("StartJob", r.status),
                             MovedTo::kAsBefore});
      }
      warm_reply_ = r.start;
      return CheckpointOrOn(now);
    case At::kCheckpoint: {
      if (!r.status.ok()) {
        // The job cannot be checkpointed (or the agent cannot do it).
        const bool cannot =
            r.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
            r.status.error_code() == grpc::StatusCode::UNIMPLEMENTED;
        MoveDone failed{false, cannot, 0,
                        cannot ? CannotCheckpointWhy(r.status)
                               : RpcError("CheckpointJob", r.status),
                        MovedTo::kAsBefore};
        if (cannot && plan_.fresh_fallback) {
          return StartAfresh(r.status.error_message());
        }
        if (plan_.warm) return Undo(false, std::move(failed));
        failed.took_us = now - t0_;
        return failed;
      }
      if (plan_.warm) {
        phases_ = "warm start " +
                  (warm_reply_.ready()
                       ? Ms(warm_reply_.ready_us()) +
                             " (before the checkpoint; the job trained on)"
                       : "not ready after " + Ms(plan_.warm_ready_timeout_us) +
                             " (checkpointed anyway)") +
                  ", ";
      }
      // took_us runs from the request to the process's exit; save_us is
      // the job's own save (from its progress page).
      method_ = r.checkpoint.method();
      if (method_ == "library") saved_ = r.checkpoint.minibatches();
      phases_ += "checkpoint " + Ms(r.checkpoint.took_us()) + " (" + method_ +
                 ", " + Mb(r.checkpoint.bytes()) +
                 (r.checkpoint.save_us() > 0
                      ? (method_ == "criu" ? ", dump " : ", save ") +
                            Ms(r.checkpoint.save_us())
                      : "") +
                 ")";
      return AfterCheckpoint(now);
    }
    case At::kFallbackKill:
      if (!fallback_killed_source_) {
        // The warm process went; now the source's.
        fallback_killed_source_ = true;
        MoveCall c = Kill(true, plan_.ids.kill_source);
        c.ignore_exit = true;
        return c;
      }
      at_ = At::kFreshStart;
      return StartAt(false, false, false, plan_.ids.start);
    case At::kRestartHere:
      if (!r.status.ok()) {
        error_ = RpcError("StartJob", r.status);
        if (plan_.resize) {
          // Back as it was, from the checkpoint, if it can.
          at_ = At::kRestartBack;
          return StartAt(true, false, /*resume_local=*/true, plan_.ids.back);
        }
        return Done(false, false, "restart: " + error_,
                    MovedTo::kCheckpointAtSource, now);
      }
      detail_ = plan_.where + "; " + phases_ + RestartPhase(now - t_start_);
      // Until its first mini-batch from the checkpoint the job trains
      // nowhere (a job without the library: until its restart).
      if (saved_ >= 0) {
        at_ = At::kAwaitHere;
        return Await(saved_, t_start_);
      }
      return Done(true, false,
                  detail_ + "; training paused " + Ms(now - t_checkpoint_),
                  MovedTo::kDestination, now);
    case At::kRestartBack: {
      const bool back = r.status.ok();
      return Done(false, false,
                  "restart: " + error_ + (back ? "; restarted as it was" : ""),
                  back ? MovedTo::kAsBefore : MovedTo::kCheckpointAtSource,
                  now);
    }
    case At::kAwaitHere:
      return Done(
          true, false,
          detail_ + (r.first_us >= 0 ? ", first mini-batch " + Ms(r.first_us) +
                                           " after it; training paused " +
                                           Ms(now - t_checkpoint_)
                                     : ", no mini-batch within a minute of it"),
          MovedTo::kDestination, now);
    case At::kReceive:
      if (r.status.error_code() == grpc::StatusCode::NOT_FOUND) {
        // The source holds no checkpoint of it (lost, or removed by hand):
        // nothing is left to resume from. A resume starts it afresh here
        // now; another move leaves it nowhere.
        const std::string gone = RpcError("ReceiveCheckpoint", r.status);
        if (plan_.fresh_fallback) {
          return StartAfresh("no checkpoint of it is left: " + gone);
        }
        return Undo(false, MoveDone{false, false, 0,
                                    gone + "; no checkpoint of it is left",
                                    MovedTo::kNowhere});
      }
      if (!r.status.ok()) {
        return Undo(false, MoveDone{false, false, 0,
                                    RpcError("ReceiveCheckpoint", r.status) +
                                        "; the checkpoint stays on the source",
                                    MovedTo::kCheckpointAtSource});
      }
      received_ = r.receive;
      t_start_ = now;
      if (!plan_.warm) {
        at_ = At::kStartReceived;
        return StartAt(false, false, /*resume_local=*/true, plan_.ids.start);
      }
      restart_us_ = 0;
      at_ = At::kKillSource;
      return Kill(true, plan_.ids.kill_source);
    case At::kStartReceived:
      if (!r.status.ok()) {
        // Received but not started: the copy at the source stays the one
        // the job resumes from.
        return Undo(false, MoveDone{false, false, 0,
                                    "start from the received checkpoint: " +
                                        RpcError("StartJob", r.status),
                                    MovedTo::kCheckpointAtSource});
      }
      restart_us_ = now - t_start_;
      at_ = At::kKillSource;
      return Kill(true, plan_.ids.kill_source);  // drops the source's copy
    case At::kKillSource: {
      std::string& d = detail_;
      d = plan_.where;
      if (!phases_.empty()) d += "; " + phases_;
      const rpc::ReceiveCheckpointReply& rr = received_;
      d += ", transfer " + Ms(rr.transfer_us()) + " (" + Mb(rr.bytes()) +
           Rate(rr.bytes(), rr.transfer_us()) +
           (rr.channel().empty() ? "" : " over " + rr.channel()) +
           (rr.streamed() ? ", straight into the job's memory" : "") + ")";
      if (!plan_.warm) d += RestartPhase(restart_us_);
      if (!plan_.warm && plan_.kept_at > 0) {
        at_ = At::kAwaitThere;
        return Await(plan_.kept_at, t_start_);
      }
      return Finish(now);
    }
    case At::kAwaitThere:
      detail_ += r.first_us >= 0
                     ? ", first mini-batch " + Ms(r.first_us) + " after it"
                     : ", no mini-batch within a minute of it";
      return Finish(now);
    case At::kUndo: {
      MoveDone d = std::move(then_);
      d.took_us = now - t0_;
      return d;
    }
  }
  return Done(false, false, "move: no step", MovedTo::kAsBefore, now);
}

MoveSteps::Step MoveSteps::Finish(int64_t now_us) {
  std::string d = detail_;
  if (plan_.warm) {
    const rpc::ReceiveCheckpointReply& rr = received_;
    if (!warm_reply_.ready()) {
      d += ", warm start " + Ms(rr.warm_us()) + " (overlapped)";
    }
    d += ", load " + Ms(rr.load_us()) + ", first mini-batch " +
         Ms(rr.first_minibatch_us());
  }
  if (plan_.from.exists) {
    d += "; training paused " + Ms(now_us - t_checkpoint_);
  }
  return Done(true, false, std::move(d), MovedTo::kDestination, now_us);
}

}  // namespace gandiva::runtime
