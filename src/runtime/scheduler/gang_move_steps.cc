#include "runtime/scheduler/gang_move_steps.h"

#include <algorithm>
#include <utility>

#include "runtime/scheduler/agent_calls.h"

namespace gandiva::runtime {
namespace {

constexpr int64_t kCheckpointTimeoutUs = 120'000'000;

}  // namespace

GangMoveSteps::GangMoveSteps(GangMovePlan plan, int64_t now_us)
    : plan_(std::move(plan)), t0_(now_us) {}

GangCall GangMoveSteps::KillPart(bool of_source, size_t part, bool keep) const {
  GangCall c;
  c.kind = GangCall::Kind::kKillPart;
  c.of_source = of_source;
  c.part = part;
  c.keep_checkpoint = keep;
  return c;
}

GangMoveSteps::Step GangMoveSteps::Done(bool ok, bool permanent,
                                        std::string detail, MovedTo moved,
                                        int64_t now_us) const {
  return MoveDone{ok, permanent, now_us - t0_, std::move(detail), moved};
}

GangMoveSteps::Step GangMoveSteps::Start() {
  if (plan_.from.empty()) return Fresh("its process was lost");
  if (plan_.from_exists && !plan_.library) {
    std::string why =
        "a job that spans servers moves only with the gandiva job-side "
        "library (its parts restart from the checkpoint rank 0 saves)";
    if (plan_.was_suspended) return Fresh(std::move(why));
    return Done(false, /*permanent=*/true, std::move(why), MovedTo::kAsBefore,
                t0_);
  }
  t_checkpoint_ = t0_;
  saved_ = plan_.kept_at > 0 ? plan_.kept_at : -1;
  if (!plan_.from_exists) {
    next_part_ = 1;
    return NextLeftover(t0_);
  }
  if (plan_.was_suspended) {
    at_ = At::kContinue;
    GangCall c;
    c.kind = GangCall::Kind::kFollowers;
    c.resume = true;
    return c;
  }
  return Checkpoint();
}

// Nothing to carry over: every part of the source goes, and every part
// starts afresh.
GangMoveSteps::Step GangMoveSteps::Fresh(std::string why) {
  why_ = std::move(why);
  at_ = At::kFreshKills;
  next_part_ = 0;
  return NextFreshKill();
}

GangMoveSteps::Step GangMoveSteps::NextFreshKill() {
  if (next_part_ < plan_.from.size())
    return KillPart(true, next_part_++, false);
  at_ = At::kFreshStart;
  GangCall c;
  c.kind = GangCall::Kind::kStartParts;
  c.resume_local = false;
  return c;
}

GangMoveSteps::Step GangMoveSteps::Checkpoint() {
  at_ = At::kCheckpoint;
  GangCall c;
  c.kind = GangCall::Kind::kCheckpoint;
  c.checkpoint.set_job_id(plan_.job);
  c.checkpoint.set_action_id(plan_.action);
  if (plan_.resize) c.checkpoint.set_resize_to(plan_.world);
  c.timeout_us = kCheckpointTimeoutUs;
  return c;
}

// The source's other parts left with the lead; any that lingers is
// stopped, so that its agent can take the checkpoint in.
GangMoveSteps::Step GangMoveSteps::NextLeftover(int64_t now_us) {
  if (next_part_ < plan_.from.size()) {
    at_ = At::kLeftovers;
    return KillPart(true, next_part_++, false);
  }
  (void)now_us;
  at_ = At::kDistribute;
  GangCall c;
  c.kind = GangCall::Kind::kDistribute;
  return c;
}

// A failed step after the checkpoint: the copies the destination's parts
// received go (those not on the source lead's server), then it ends.
GangMoveSteps::Step GangMoveSteps::NextDropCopy(int64_t now_us) {
  while (next_part_ < plan_.to.size()) {
    const size_t i = next_part_++;
    if (plan_.to[i] != plan_.from[0]) {
      at_ = At::kDropCopies;
      return KillPart(false, i, false);
    }
  }
  MoveDone d = failed_;
  d.took_us = now_us - t0_;
  return d;
}

GangMoveSteps::Step GangMoveSteps::Next(const GangResult& r) {
  const int64_t now = r.now_us;
  switch (at_) {
    case At::kFreshKills:
      return NextFreshKill();
    case At::kFreshStart: {
      Step d =
          Done(r.ok, false,
               r.ok ? plan_.where + "; restarted from scratch (" + why_ + ")"
                    : r.error,
               r.ok ? MovedTo::kDestination : MovedTo::kNowhere, now);
      std::get<MoveDone>(d).afresh = r.ok;
      return d;
    }
    case At::kContinue:
      return Checkpoint();
    case At::kCheckpoint: {
      if (!r.status.ok()) {
        const bool cannot =
            r.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
            r.status.error_code() == grpc::StatusCode::UNIMPLEMENTED;
        if (cannot && plan_.was_suspended) {
          return Fresh(r.status.error_message());
        }
        failed_ = MoveDone{false, cannot, 0,
                           cannot ? CannotCheckpointWhy(r.status)
                                  : RpcError("CheckpointJob", r.status),
                           MovedTo::kAsBefore};
        if (plan_.was_suspended) {
          // As it was: a suspended gang's other parts stop again.
          at_ = At::kStopAgain;
          GangCall c;
          c.kind = GangCall::Kind::kFollowers;
          c.resume = false;
          return c;
        }
        failed_.took_us = now - t0_;
        return failed_;
      }
      const rpc::CheckpointReply& rep = r.checkpoint;
      phases_ = "checkpoint " + Ms(rep.took_us()) + " (" + rep.method() + ", " +
                Mb(rep.bytes()) +
                (rep.save_us() > 0 ? ", save " + Ms(rep.save_us()) : "") + ")";
      saved_ = rep.minibatches();
      next_part_ = 1;
      return NextLeftover(now);
    }
    case At::kStopAgain: {
      MoveDone d = failed_;
      d.took_us = now - t0_;
      return d;
    }
    case At::kLeftovers:
      return NextLeftover(now);
    case At::kDistribute:
      if (!r.ok) {
        // The source holds no checkpoint of it (lost, or removed by hand):
        // nothing is left of it; else the checkpoint stays there.
        failed_ = r.checkpoint_gone
                      ? MoveDone{false, false, 0,
                                 r.error + "; no checkpoint of it is left",
                                 MovedTo::kNowhere}
                      : MoveDone{false, false, 0,
                                 r.error + "; the checkpoint stays on " +
                                     plan_.source_name,
                                 MovedTo::kCheckpointAtSource};
        next_part_ = 0;
        return NextDropCopy(now);
      }
      transfer_ = r.summary;
      t_start_ = now;
      at_ = At::kStartParts;
      {
        GangCall c;
        c.kind = GangCall::Kind::kStartParts;
        c.resume_local = true;
        return c;
      }
    case At::kDropCopies:
      return NextDropCopy(now);
    case At::kStartParts:
      if (!r.ok) {
        failed_ =
            MoveDone{false, false, 0, "start from the checkpoint: " + r.error,
                     MovedTo::kCheckpointAtSource};
        next_part_ = 0;
        return NextDropCopy(now);
      }
      restart_us_ = now - t_start_;
      // The parts meet, rank 0 loads and they train: until then the job
      // trains nowhere.
      if (saved_ >= 0) {
        at_ = At::kAwait;
        GangCall c;
        c.kind = GangCall::Kind::kAwaitFirstMinibatch;
        c.saved = saved_;
        c.since_us = t_start_;
        return c;
      }
      return AfterStart(now);
    case At::kAwait:
      first_us_ = r.first_us;
      return AfterStart(now);
    case At::kDropSource:
      return Finish(now);
  }
  return Done(false, false, "move: no step", MovedTo::kAsBefore, now);
}

GangMoveSteps::Step GangMoveSteps::AfterStart(int64_t now_us) {
  const bool source_kept = std::find(plan_.to.begin(), plan_.to.end(),
                                     plan_.from[0]) != plan_.to.end();
  if (!source_kept) {  // its copy goes
    at_ = At::kDropSource;
    return KillPart(true, 0, false);
  }
  return Finish(now_us);
}

GangMoveSteps::Step GangMoveSteps::Finish(int64_t now_us) {
  std::string d = plan_.where;
  if (!phases_.empty()) d += "; " + phases_;
  if (!transfer_.empty()) d += ", " + transfer_;
  d += ", restart " + Ms(restart_us_);
  if (saved_ >= 0) {
    d += first_us_ >= 0 ? ", first mini-batch " + Ms(first_us_) + " after it"
                        : ", no mini-batch within a minute of it";
  }
  if (plan_.from_exists && first_us_ >= 0) {
    d += "; training paused " + Ms(now_us - t_checkpoint_);
  }
  return Done(true, false, std::move(d), MovedTo::kDestination, now_us);
}

}  // namespace gandiva::runtime
