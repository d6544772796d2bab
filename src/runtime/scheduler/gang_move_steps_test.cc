// GangMoveSteps driven by scripted agents, as MoveStepsTest.
#include "runtime/scheduler/gang_move_steps.h"

#include <gtest/gtest.h>

namespace gandiva::runtime {
namespace {

using Kind = GangCall::Kind;

constexpr int64_t kMs = 1000;

// Parts on servers 0 and 1 (lead on 0), moving to servers 1 and 2.
GangMovePlan Plan() {
  GangMovePlan p;
  p.job = 9;
  p.action = 50;
  p.from = {ServerId(0), ServerId(1)};
  p.from_exists = true;
  p.to = {ServerId(1), ServerId(2)};
  p.world = 4;
  p.library = true;
  p.where = "from A to B";
  p.source_name = "a";
  return p;
}

class Script {
 public:
  explicit Script(GangMovePlan plan) : steps_(std::move(plan), 0) {
    step_ = steps_.Start();
  }
  const GangCall& call() {
    static const GangCall none;
    const GangCall* c = std::get_if<GangCall>(&step_);
    if (c == nullptr) {
      ADD_FAILURE() << "done: " << std::get<MoveDone>(step_).detail;
      return none;
    }
    return *c;
  }
  void Answer(GangResult r, int64_t took_ms = 1) {
    now_ += took_ms * kMs;
    r.now_us = now_;
    step_ = steps_.Next(r);
  }
  void Ok(int64_t took_ms = 1) { Answer(GangResult{}, took_ms); }
  // Expects a kill of part `part` of the source or destination, answered.
  void ExpectKill(bool of_source, size_t part) {
    ASSERT_EQ(call().kind, Kind::kKillPart);
    EXPECT_EQ(call().of_source, of_source);
    EXPECT_EQ(call().part, part);
    EXPECT_FALSE(call().keep_checkpoint);
    Ok();
  }
  const MoveDone& result() {
    static const MoveDone none;
    if (!std::holds_alternative<MoveDone>(step_)) {
      ADD_FAILURE() << "not done";
      return none;
    }
    return std::get<MoveDone>(step_);
  }

 private:
  GangMoveSteps steps_;
  GangMoveSteps::Step step_;
  int64_t now_ = 0;
};

GangResult Checkpointed(int64_t minibatches) {
  GangResult r;
  r.checkpoint.set_method("library");
  r.checkpoint.set_minibatches(minibatches);
  r.checkpoint.set_bytes(3'000'000);
  r.checkpoint.set_took_us(20 * kMs);
  return r;
}

TEST(GangMoveStepsTest, EveryPartRestartsFromTheCheckpointRankZeroSaves) {
  Script s(Plan());
  ASSERT_EQ(s.call().kind, Kind::kCheckpoint);
  EXPECT_EQ(s.call().checkpoint.action_id(), 50);
  EXPECT_EQ(s.call().checkpoint.resize_to(), 0);
  s.Answer(Checkpointed(40), 20);
  s.ExpectKill(true, 1);  // the source's other part, if it lingers
  ASSERT_EQ(s.call().kind, Kind::kDistribute);
  GangResult sent;
  sent.summary = "transfer 5.0 ms";
  s.Answer(sent, 5);
  ASSERT_EQ(s.call().kind, Kind::kStartParts);
  EXPECT_TRUE(s.call().resume_local);
  s.Ok(8);
  ASSERT_EQ(s.call().kind, Kind::kAwaitFirstMinibatch);
  EXPECT_EQ(s.call().saved, 40);
  EXPECT_EQ(s.call().since_us, 26 * kMs);
  GangResult first;
  first.first_us = 10 * kMs;
  s.Answer(first, 10);
  s.ExpectKill(true, 0);  // no new part on the lead's server: its copy goes
  EXPECT_TRUE(s.result().ok);
  EXPECT_EQ(s.result().moved, MovedTo::kDestination);
  EXPECT_EQ(s.result().detail,
            "from A to B; checkpoint 20.0 ms (library, 3.0 MB), transfer 5.0 "
            "ms, restart 8.0 ms, first mini-batch 10.0 ms after it; training "
            "paused 45.0 ms");
}

TEST(GangMoveStepsTest, ASuspendedGangsPartsAreContinuedForTheCheckpoint) {
  GangMovePlan plan = Plan();
  plan.was_suspended = true;
  plan.to = {ServerId(0), ServerId(2)};  // the lead's server stays
  Script s(plan);
  ASSERT_EQ(s.call().kind, Kind::kFollowers);
  EXPECT_TRUE(s.call().resume);
  s.Ok();
  s.Answer(Checkpointed(40));
  s.ExpectKill(true, 1);
  s.Ok();  // distributed
  s.Ok();  // started
  ASSERT_EQ(s.call().kind, Kind::kAwaitFirstMinibatch);
  s.Answer(GangResult{});      // no mini-batch within a minute
  EXPECT_TRUE(s.result().ok);  // the lead's copy is kept: its part is there
  EXPECT_EQ(s.result().detail,
            "from A to B; checkpoint 20.0 ms (library, 3.0 MB), restart 1.0 "
            "ms, no mini-batch within a minute of it");
}

TEST(GangMoveStepsTest, AFailedCheckpointStopsTheContinuedPartsAgain) {
  GangMovePlan plan = Plan();
  plan.was_suspended = true;
  Script s(plan);
  s.Ok();  // continued
  GangResult failed;
  failed.status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "gone");
  s.Answer(failed);
  ASSERT_EQ(s.call().kind, Kind::kFollowers);
  EXPECT_FALSE(s.call().resume);
  s.Ok();
  EXPECT_FALSE(s.result().ok);
  EXPECT_FALSE(s.result().permanent);
  EXPECT_EQ(s.result().moved, MovedTo::kAsBefore);
  EXPECT_EQ(s.result().detail, "CheckpointJob: gone (code 14)");
}

TEST(GangMoveStepsTest, AGangWithoutTheLibraryFailsForGoodOrStartsAfresh) {
  GangMovePlan plan = Plan();
  plan.library = false;
  Script s(plan);
  EXPECT_FALSE(s.result().ok);
  EXPECT_TRUE(s.result().permanent);
  EXPECT_EQ(s.result().moved, MovedTo::kAsBefore);
  plan.was_suspended = true;  // a resume elsewhere
  Script t(plan);
  t.ExpectKill(true, 0);
  t.ExpectKill(true, 1);
  ASSERT_EQ(t.call().kind, Kind::kStartParts);
  EXPECT_FALSE(t.call().resume_local);
  t.Ok();
  EXPECT_TRUE(t.result().ok);
  EXPECT_EQ(t.result().moved, MovedTo::kDestination);
  EXPECT_NE(t.result().detail.find("restarted from scratch (a job that spans "
                                   "servers moves only with the gandiva"),
            std::string::npos)
      << t.result().detail;
  EXPECT_TRUE(t.result().afresh);
}

TEST(GangMoveStepsTest, AFailedTransferOrStartDropsTheCopiesAndKeepsTheSource) {
  for (const bool transfer : {true, false}) {
    SCOPED_TRACE(transfer);
    GangMovePlan plan = Plan();
    plan.to = {ServerId(0), ServerId(2), ServerId(3)};  // one on the lead's
    Script s(plan);
    s.Answer(Checkpointed(40));
    s.ExpectKill(true, 1);
    GangResult failed;
    failed.ok = false;
    failed.error = "part 2 on c: ReceiveCheckpoint: gone";
    if (!transfer) s.Ok();  // distributed; the start fails
    s.Answer(failed);
    s.ExpectKill(false, 1);  // the copies off the lead's server go
    s.ExpectKill(false, 2);
    EXPECT_FALSE(s.result().ok);
    EXPECT_EQ(s.result().moved, MovedTo::kCheckpointAtSource);
    EXPECT_EQ(s.result().detail,
              transfer ? "part 2 on c: ReceiveCheckpoint: gone; the "
                         "checkpoint stays on a"
                       : "start from the checkpoint: part 2 on c: "
                         "ReceiveCheckpoint: gone");
  }
}

// The source holds no checkpoint of the job when a part asks for it (lost
// there): the copies go, and nothing of the job is left anywhere.
TEST(GangMoveStepsTest, ACheckpointMissingAtTheSourceLeavesTheJobNowhere) {
  GangMovePlan plan = Plan();
  plan.to = {ServerId(0), ServerId(2), ServerId(3)};
  Script s(plan);
  s.Answer(Checkpointed(40));
  s.ExpectKill(true, 1);
  GangResult gone;
  gone.ok = false;
  gone.checkpoint_gone = true;
  gone.error = "to c: ReceiveCheckpoint: no checkpoint of job 7 (code 5)";
  s.Answer(gone);
  s.ExpectKill(false, 1);
  s.ExpectKill(false, 2);
  EXPECT_FALSE(s.result().ok);
  EXPECT_EQ(s.result().moved, MovedTo::kNowhere);
  EXPECT_EQ(s.result().detail,
            "to c: ReceiveCheckpoint: no checkpoint of job 7 (code 5); no "
            "checkpoint of it is left");
}

TEST(GangMoveStepsTest, AKeptCheckpointOrALostGangIsStartedWhereItGoes) {
  GangMovePlan kept = Plan();
  kept.from_exists = false;  // its lead's agent keeps its checkpoint
  kept.kept_at = 30;
  Script s(kept);
  s.ExpectKill(true, 1);  // nothing to checkpoint
  s.Ok();                 // distributed
  s.Ok();                 // started
  ASSERT_EQ(s.call().kind, Kind::kAwaitFirstMinibatch);
  EXPECT_EQ(s.call().saved, 30);
  GangResult first;
  first.first_us = 2 * kMs;
  s.Answer(first);
  s.ExpectKill(true, 0);
  EXPECT_TRUE(s.result().ok);
  EXPECT_EQ(s.result().detail.find("training paused"), std::string::npos);
  GangMovePlan lost = Plan();
  lost.from.clear();
  Script t(lost);
  ASSERT_EQ(t.call().kind, Kind::kStartParts);
  EXPECT_FALSE(t.call().resume_local);
  GangResult no;
  no.ok = false;
  no.error = "StartJob: no GPUs today";
  t.Answer(no);
  EXPECT_FALSE(t.result().ok);
  EXPECT_EQ(t.result().moved, MovedTo::kNowhere);
  EXPECT_EQ(t.result().detail, "StartJob: no GPUs today");
}

}  // namespace
}  // namespace gandiva::runtime
