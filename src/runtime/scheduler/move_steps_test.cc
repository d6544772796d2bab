// MoveSteps driven by scripted agents: each test answers the calls the
// machine asks for and checks the next one, and how the move ends. No
// daemon, socket, thread or clock.
#include "runtime/scheduler/move_steps.h"

#include <gtest/gtest.h>

namespace gandiva::runtime {
namespace {

using Kind = MoveCall::Kind;

constexpr int64_t kMs = 1000;

// Server 0 runs the job on its GPU 0; server 1's GPU 1 is where it goes.
MovePlan Plan() {
  MovePlan p;
  p.job = 7;
  p.submitted_us = 1234;
  p.spec.set_name("j");
  p.from = Proc{ServerId(0), {0}, true};
  p.to = Proc{ServerId(1), {1}, true};
  p.source_address = "10.0.0.1:7071";
  p.where = "from a to gpus [1] on b";
  p.warm_ready_timeout_us = 60'000 * kMs;
  p.rpc_timeout_us = 120'000 * kMs;
  p.ids = {100, 101, 102, 103, 104, 105, 106};
  return p;
}

// A machine started at t = 0, and the script's clock.
class Script {
 public:
  explicit Script(MovePlan plan) : steps_(std::move(plan), 0) {
    step_ = steps_.Start();
  }
  // The call asked for now (a test failure, and an empty call, if the
  // move is done).
  const MoveCall& call() {
    static const MoveCall none;
    const MoveCall* c = std::get_if<MoveCall>(&step_);
    if (c == nullptr) {
      ADD_FAILURE() << "done: " << std::get<MoveDone>(step_).detail;
      return none;
    }
    return *c;
  }
  // Answers the call after `took` ms.
  void Answer(MoveResult r, int64_t took_ms = 1) {
    now_ += took_ms * kMs;
    r.now_us = now_;
    step_ = steps_.Next(r);
  }
  void Ok(int64_t took_ms = 1) { Answer(MoveResult{}, took_ms); }
  void Fail(grpc::StatusCode code, const std::string& why) {
    MoveResult r;
    r.status = grpc::Status(code, why);
    Answer(r);
  }
  bool done() const { return std::holds_alternative<MoveDone>(step_); }
  const MoveDone& result() {
    static const MoveDone none;
    if (!done()) {
      ADD_FAILURE() << "not done";
      return none;
    }
    return std::get<MoveDone>(step_);
  }

 private:
  MoveSteps steps_;
  MoveSteps::Step step_;
  int64_t now_ = 0;
};

MoveResult Checkpointed(const std::string& method, int64_t minibatches) {
  MoveResult r;
  r.checkpoint.set_method(method);
  r.checkpoint.set_minibatches(minibatches);
  r.checkpoint.set_bytes(2'000'000);
  r.checkpoint.set_took_us(30 * kMs);
  r.checkpoint.set_save_us(20 * kMs);
  return r;
}

MoveResult Received() {
  MoveResult r;
  r.receive.set_bytes(2'000'000);
  r.receive.set_transfer_us(4 * kMs);
  r.receive.set_channel("tcp");
  r.receive.set_load_us(5 * kMs);
  r.receive.set_first_minibatch_us(6 * kMs);
  return r;
}

TEST(MoveStepsTest, AJobWithTheLibraryStartsWarmThenCheckpointsSendsAndGoes) {
  MovePlan plan = Plan();
  plan.warm = true;
  Script s(plan);
  // 1. Warm start at the destination, waiting for it to be ready.
  ASSERT_EQ(s.call().kind, Kind::kStart);
  EXPECT_FALSE(s.call().at_source);
  EXPECT_TRUE(s.call().start.warm());
  EXPECT_FALSE(s.call().start.resume_local());
  EXPECT_EQ(s.call().start.action_id(), 101);
  EXPECT_EQ(s.call().start.await_ready_ms(), 60'000);
  EXPECT_EQ(s.call().timeout_us, 180'000 * kMs);
  EXPECT_EQ(s.call().start.submitted_us(), 1234);
  EXPECT_EQ(std::vector<int32_t>(s.call().start.gpus().begin(),
                                 s.call().start.gpus().end()),
            std::vector<int32_t>{1});
  MoveResult ready;
  ready.start.set_ready(true);
  ready.start.set_ready_us(3 * kMs);
  s.Answer(ready, 3);
  // 2. The checkpoint at the source, replied once saved.
  ASSERT_EQ(s.call().kind, Kind::kCheckpoint);
  EXPECT_TRUE(s.call().at_source);
  EXPECT_EQ(s.call().checkpoint.action_id(), 100);
  EXPECT_TRUE(s.call().checkpoint.reply_when_saved());
  EXPECT_EQ(s.call().checkpoint.resize_to(), 0);
  s.Answer(Checkpointed("library", 40), 30);
  // 3. The destination receives it, the waiting process loading it.
  ASSERT_EQ(s.call().kind, Kind::kReceive);
  EXPECT_FALSE(s.call().at_source);
  EXPECT_EQ(s.call().receive.source_address(), "10.0.0.1:7071");
  EXPECT_TRUE(s.call().receive.await_first_minibatch());
  EXPECT_EQ(s.call().receive.action_id(), 103);
  s.Answer(Received(), 15);
  // 5. No start (the warm process is the job); the source's copy goes.
  ASSERT_EQ(s.call().kind, Kind::kKill);
  EXPECT_TRUE(s.call().at_source);
  EXPECT_EQ(s.call().kill.action_id(), 105);
  EXPECT_FALSE(s.call().ignore_exit);
  s.Ok(1);
  const MoveDone& d = s.result();
  EXPECT_TRUE(d.ok);
  EXPECT_EQ(d.moved, MovedTo::kDestination);
  EXPECT_EQ(d.took_us, 49 * kMs);
  EXPECT_EQ(d.detail,
            "from a to gpus [1] on b; warm start 3.0 ms (before the "
            "checkpoint; the job trained on), checkpoint 30.0 ms (library, "
            "2.0 MB, save 20.0 ms), transfer 4.0 ms (2.0 MB at 0.50 GB/s "
            "over tcp), load 5.0 ms, first mini-batch 6.0 ms; training "
            "paused 46.0 ms");
}

TEST(MoveStepsTest, AJobWithoutTheLibraryRestartsFromTheReceivedCheckpoint) {
  Script s(Plan());
  ASSERT_EQ(s.call().kind, Kind::kCheckpoint);
  s.Answer(Checkpointed("restart", 0), 10);
  ASSERT_EQ(s.call().kind, Kind::kReceive);
  EXPECT_FALSE(s.call().receive.await_first_minibatch());
  s.Answer(Received(), 5);
  ASSERT_EQ(s.call().kind, Kind::kStart);
  EXPECT_FALSE(s.call().at_source);
  EXPECT_TRUE(s.call().start.resume_local());
  EXPECT_FALSE(s.call().start.warm());
  EXPECT_EQ(s.call().start.action_id(), 102);
  s.Ok(7);
  ASSERT_EQ(s.call().kind, Kind::kKill);
  EXPECT_TRUE(s.call().at_source);
  s.Ok(1);
  EXPECT_TRUE(s.result().ok);
  EXPECT_EQ(s.result().detail,
            "from a to gpus [1] on b; checkpoint 30.0 ms (restart, 2.0 MB, "
            "save 20.0 ms), transfer 4.0 ms (2.0 MB at 0.50 GB/s over tcp), "
            "restart 7.0 ms; training paused 23.0 ms");
}

TEST(MoveStepsTest, AWarmStartThatFailsIsKilledAndTheJobStaysAsItWas) {
  MovePlan plan = Plan();
  plan.warm = true;
  Script s(plan);
  s.Fail(grpc::StatusCode::DEADLINE_EXCEEDED, "too slow");
  // Its process may have started: it goes.
  ASSERT_EQ(s.call().kind, Kind::kKill);
  EXPECT_FALSE(s.call().at_source);
  EXPECT_EQ(s.call().kill.action_id(), 106);
  s.Ok();
  EXPECT_FALSE(s.result().ok);
  EXPECT_FALSE(s.result().permanent);
  EXPECT_EQ(s.result().moved, MovedTo::kAsBefore);
  EXPECT_EQ(s.result().detail, "warm start: StartJob: too slow (code 4)");
}

TEST(MoveStepsTest, AJobThatCannotBeCheckpointedFailsAMigrationForGood) {
  for (const bool warm : {false, true}) {
    SCOPED_TRACE(warm);
    MovePlan plan = Plan();
    plan.warm = warm;
    Script s(plan);
    if (warm) s.Ok();
    ASSERT_EQ(s.call().kind, Kind::kCheckpoint);
    s.Fail(grpc::StatusCode::FAILED_PRECONDITION, "no library, no CRIU");
    if (warm) {  // the warm process goes
      ASSERT_EQ(s.call().kind, Kind::kKill);
      EXPECT_FALSE(s.call().at_source);
      s.Ok();
    }
    EXPECT_FALSE(s.result().ok);
    EXPECT_TRUE(s.result().permanent);
    EXPECT_EQ(s.result().moved, MovedTo::kAsBefore);
    // The agent's reason alone: the core's refusal of the next migrate
    // quotes it ("it cannot be checkpointed: no library, no CRIU").
    EXPECT_EQ(s.result().detail, "no library, no CRIU");
  }
  {
    // The agent's "job N cannot be migrated: " is said by the refusal.
    Script t(Plan());
    t.Fail(grpc::StatusCode::FAILED_PRECONDITION,
           "job 7 cannot be migrated: it does not use the gandiva job-side "
           "library, is not declared restartable, and CRIU is not usable on "
           "this server (no criu)");
    EXPECT_TRUE(t.result().permanent);
    EXPECT_EQ(t.result().detail,
              "it does not use the gandiva job-side library, is not declared "
              "restartable, and CRIU is not usable on this server (no criu)");
  }
  // A checkpoint that failed otherwise (the save): tried again later.
  Script s(Plan());
  s.Fail(grpc::StatusCode::UNAVAILABLE, "the save failed");
  EXPECT_FALSE(s.result().permanent);
  EXPECT_EQ(s.result().detail, "CheckpointJob: the save failed (code 14)");
}

TEST(MoveStepsTest,
     AResumeElsewhereOfAJobThatCannotBeCheckpointedStartsAfresh) {
  for (const bool warm : {false, true}) {
    SCOPED_TRACE(warm);
    MovePlan plan = Plan();
    plan.fresh_fallback = true;
    plan.warm = warm;
    Script s(plan);
    if (warm) s.Ok();
    s.Fail(grpc::StatusCode::FAILED_PRECONDITION, "not restartable");
    if (warm) {
      ASSERT_EQ(s.call().kind, Kind::kKill);
      EXPECT_FALSE(s.call().at_source);
      s.Ok();
    }
    // The source's process goes, its exit not the job's end.
    ASSERT_EQ(s.call().kind, Kind::kKill);
    EXPECT_TRUE(s.call().at_source);
    EXPECT_TRUE(s.call().ignore_exit);
    EXPECT_EQ(s.call().kill.action_id(), 105);
    s.Ok();
    ASSERT_EQ(s.call().kind, Kind::kStart);
    EXPECT_FALSE(s.call().start.resume_local());
    EXPECT_FALSE(s.call().start.warm());
    s.Ok();
    EXPECT_TRUE(s.result().ok);
    EXPECT_EQ(s.result().moved, MovedTo::kDestination);
    EXPECT_EQ(s.result().detail,
              "from a to gpus [1] on b; restarted from scratch (not "
              "restartable)");
    EXPECT_TRUE(s.result().afresh);
  }
}

TEST(MoveStepsTest, AFailedTransferKeepsTheCheckpointAtTheSource) {
  Script s(Plan());
  s.Answer(Checkpointed("restart", 0));
  ASSERT_EQ(s.call().kind, Kind::kReceive);
  s.Fail(grpc::StatusCode::UNAVAILABLE, "the source went away");
  ASSERT_EQ(s.call().kind, Kind::kKill);  // whatever it received goes
  EXPECT_FALSE(s.call().at_source);
  s.Ok();
  EXPECT_FALSE(s.result().ok);
  EXPECT_EQ(s.result().moved, MovedTo::kCheckpointAtSource);
  EXPECT_EQ(s.result().detail,
            "ReceiveCheckpoint: the source went away (code 14); the "
            "checkpoint stays on the source");
  // Received but not started: the same.
  Script t(Plan());
  t.Answer(Checkpointed("restart", 0));
  t.Answer(Received());
  t.Fail(grpc::StatusCode::INTERNAL, "exec failed");
  ASSERT_EQ(t.call().kind, Kind::kKill);
  EXPECT_FALSE(t.call().at_source);
  t.Ok();
  EXPECT_EQ(t.result().moved, MovedTo::kCheckpointAtSource);
  EXPECT_EQ(t.result().detail,
            "start from the received checkpoint: StartJob: exec failed (code "
            "13)");
}

// The source holds no checkpoint of the job after all (lost, or removed
// by hand): a resume starts it afresh at once; a migration leaves it
// nowhere, not "at the source", whence it would be fetched again.
TEST(MoveStepsTest, ACheckpointMissingAtTheSourceIsTakenAsGone) {
  for (const bool resume : {true, false}) {
    SCOPED_TRACE(resume);
    MovePlan plan = Plan();
    plan.from = plan.from.CheckpointOnly();  // suspended, saved there
    plan.fresh_fallback = resume;
    Script s(plan);
    ASSERT_EQ(s.call().kind, Kind::kReceive);
    s.Fail(grpc::StatusCode::NOT_FOUND,
           "fetching the checkpoint of job 7 from 10.0.0.1:7071: no "
           "checkpoint of job 7 on this agent");
    const std::string gone =
        "ReceiveCheckpoint: fetching the checkpoint of job 7 from "
        "10.0.0.1:7071: no checkpoint of job 7 on this agent (code 5)";
    if (!resume) {
      ASSERT_EQ(s.call().kind, Kind::kKill);  // whatever it received goes
      EXPECT_FALSE(s.call().at_source);
      s.Ok();
      EXPECT_FALSE(s.result().ok);
      EXPECT_FALSE(s.result().permanent);
      EXPECT_EQ(s.result().moved, MovedTo::kNowhere);
      EXPECT_EQ(s.result().detail, gone + "; no checkpoint of it is left");
      continue;
    }
    // Whatever is left at the source goes, its exit not the job's end;
    // then a start from the beginning.
    ASSERT_EQ(s.call().kind, Kind::kKill);
    EXPECT_TRUE(s.call().at_source);
    EXPECT_TRUE(s.call().ignore_exit);
    s.Ok();
    ASSERT_EQ(s.call().kind, Kind::kStart);
    EXPECT_FALSE(s.call().start.resume_local());
    s.Ok();
    EXPECT_TRUE(s.result().ok);
    EXPECT_EQ(s.result().moved, MovedTo::kDestination);
    EXPECT_EQ(s.result().detail,
              "from a to gpus [1] on b; restarted from scratch (no checkpoint "
              "of it is left: " +
                  gone + ")");
    EXPECT_TRUE(s.result().afresh);
  }
}

MovePlan Resize() {
  MovePlan p = Plan();
  p.resize = true;
  p.to = Proc{ServerId(0), {0, 1}, true};
  p.where = "gpus [0,1] on a";
  return p;
}

TEST(MoveStepsTest, AResizeRestartsOnItsServerAndWaitsForItsFirstMiniBatch) {
  Script s(Resize());
  ASSERT_EQ(s.call().kind, Kind::kCheckpoint);
  EXPECT_EQ(s.call().checkpoint.resize_to(), 2);
  EXPECT_FALSE(s.call().checkpoint.reply_when_saved());
  s.Answer(Checkpointed("library", 40), 10);
  ASSERT_EQ(s.call().kind, Kind::kStart);
  EXPECT_FALSE(s.call().at_source);
  EXPECT_TRUE(s.call().start.resume_local());
  EXPECT_EQ(std::vector<int32_t>(s.call().start.gpus().begin(),
                                 s.call().start.gpus().end()),
            (std::vector<int32_t>{0, 1}));
  s.Ok(8);
  ASSERT_EQ(s.call().kind, Kind::kAwaitFirstMinibatch);
  EXPECT_EQ(s.call().saved, 40);
  EXPECT_EQ(s.call().since_us, 10 * kMs);  // from the restart's request
  MoveResult first;
  first.first_us = 12 * kMs;
  s.Answer(first, 12);
  EXPECT_TRUE(s.result().ok);
  EXPECT_EQ(s.result().detail,
            "gpus [0,1] on a; checkpoint 30.0 ms (library, 2.0 MB, save 20.0 "
            "ms), restart 8.0 ms, first mini-batch 12.0 ms after it; training "
            "paused 30.0 ms");
}

TEST(MoveStepsTest, AResizeThatCannotRestartGoesBackAsItWasIfItCan) {
  for (const bool back : {true, false}) {
    SCOPED_TRACE(back);
    Script s(Resize());
    s.Answer(Checkpointed("restart", 0));
    s.Fail(grpc::StatusCode::RESOURCE_EXHAUSTED, "no GPUs today");
    ASSERT_EQ(s.call().kind, Kind::kStart);
    EXPECT_TRUE(s.call().at_source);
    EXPECT_TRUE(s.call().start.resume_local());
    EXPECT_EQ(s.call().start.action_id(), 104);
    if (back) {
      s.Ok();
    } else {
      s.Fail(grpc::StatusCode::RESOURCE_EXHAUSTED, "no GPUs today");
    }
    EXPECT_FALSE(s.result().ok);
    EXPECT_EQ(s.result().moved,
              back ? MovedTo::kAsBefore : MovedTo::kCheckpointAtSource);
    EXPECT_EQ(s.result().detail,
              std::string("restart: StartJob: no GPUs today (code 8)") +
                  (back ? "; restarted as it was" : ""));
  }
}

TEST(MoveStepsTest,
     AKeptCheckpointIsReceivedStartedAndItsFirstMiniBatchAwaited) {
  MovePlan plan = Plan();
  plan.from = plan.from.CheckpointOnly();
  plan.kept_at = 40;
  Script s(plan);
  ASSERT_EQ(s.call().kind, Kind::kReceive);  // nothing to checkpoint
  s.Answer(Received(), 5);
  ASSERT_EQ(s.call().kind, Kind::kStart);
  s.Ok(3);
  ASSERT_EQ(s.call().kind, Kind::kKill);
  EXPECT_TRUE(s.call().at_source);
  s.Ok(1);
  ASSERT_EQ(s.call().kind, Kind::kAwaitFirstMinibatch);
  EXPECT_EQ(s.call().saved, 40);
  MoveResult none;  // no mini-batch within a minute
  s.Answer(none, 60'000);
  EXPECT_TRUE(s.result().ok);
  EXPECT_EQ(s.result().detail,
            "from a to gpus [1] on b, transfer 4.0 ms (2.0 MB at 0.50 GB/s "
            "over tcp), restart 3.0 ms, no mini-batch within a minute of it");
}

TEST(MoveStepsTest, AJobWhoseProcessWasLostStartsAfresh) {
  MovePlan plan = Plan();
  plan.from = Proc{};
  for (const bool ok : {true, false}) {
    Script s(plan);
    ASSERT_EQ(s.call().kind, Kind::kStart);
    EXPECT_FALSE(s.call().start.resume_local());
    if (ok) {
      s.Ok();
    } else {
      s.Fail(grpc::StatusCode::RESOURCE_EXHAUSTED, "no GPUs today");
    }
    EXPECT_EQ(s.result().ok, ok);
    EXPECT_EQ(s.result().moved, ok ? MovedTo::kDestination : MovedTo::kNowhere);
    EXPECT_EQ(s.result().detail,
              ok ? "from a to gpus [1] on b; restarted from scratch (its "
                   "process was lost)"
                 : "StartJob: no GPUs today (code 8)");
    EXPECT_EQ(s.result().afresh, ok);
  }
}

}  // namespace
}  // namespace gandiva::runtime
