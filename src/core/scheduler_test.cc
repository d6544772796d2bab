#include "core/scheduler.h"

#include <gtest/gtest.h>

#include "core/policies/fifo.h"
#include "core/test_util.h"

namespace gandiva::core {
namespace {

using testing::CountKind;
using testing::Harness;

// A policy that does nothing, so the scheduler's own bookkeeping shows.
class IdlePolicy final : public Policy {
 public:
  std::string_view name() const override { return "idle"; }
  void decide(const ClusterState&, const Event&, Actions&) override {}
};

TEST(SchedulerTest, RefusesBadEventsAndKeepsState) {
  Scheduler s(std::make_unique<IdlePolicy>());
  std::vector<Action> out;
  JobSpec bad;
  bad.gpus = 3;
  Status st = s.Handle({Time::Zero(), JobArrived{JobId(0), bad}}, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'gpus'"), std::string::npos);
  EXPECT_FALSE(s.state().has_job(JobId(0)));

  JobSpec good;
  ASSERT_TRUE(s.Handle({Time::Zero(), JobArrived{JobId(0), good}}, out).ok());
  st = s.Handle({Time::Zero(), JobArrived{JobId(0), good}}, out);
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(s.state().queue().size(), 1u);

  st = s.Handle({Time::Zero(), JobFinished{JobId(7), true}}, out);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);

  ASSERT_TRUE(s.Handle({Time::FromMicros(10), Tick{}}, out).ok());
  st = s.Handle({Time::FromMicros(5), Tick{}}, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.empty());
}

TEST(SchedulerTest, ActionLifecycle) {
  Harness h(std::make_unique<FifoPolicy>(), 1);
  const JobId a = h.Submit(2);
  ASSERT_EQ(h.last().size(), 1u);
  const Action start = h.last()[0];
  EXPECT_EQ(start.kind, ActionKind::kStart);
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  EXPECT_EQ(h.job(a).in_flight, ActionKind::kStart);
  EXPECT_EQ(h.state().cluster().free_gpus(), 2);

  // A stale report changes nothing.
  h.Send(ActionDone{ActionId(999), a, Duration()});
  EXPECT_TRUE(h.job(a).busy());
  h.Advance(Duration::Seconds(3));
  h.CompleteAll();
  EXPECT_FALSE(h.job(a).busy());
  EXPECT_EQ(h.job(a).run_since, Time::Zero() + Duration::Seconds(3));

  h.Send(ProfileReport{a, 10.0, 100, 2.0, 0.5});
  h.Send(ProfileReport{a, 20.0, 200, 2.0, 0.5});
  EXPECT_DOUBLE_EQ(h.job(a).profile.last_rate, 20.0);
  EXPECT_DOUBLE_EQ(h.job(a).profile.minibatch_rate, 0.3 * 20 + 0.7 * 10);
  EXPECT_EQ(h.job(a).profile.minibatches, 200);

  h.Send(JobFinished{a, true});
  EXPECT_EQ(h.job(a).state, JobState::kFinished);
  EXPECT_EQ(h.state().cluster().free_gpus(), 4);
  EXPECT_EQ(h.state().placed_jobs(), 0);
}

TEST(SchedulerTest, FailedStartRequeuesAndKillFrees) {
  Harness h(std::make_unique<IdlePolicy>(), 1);
  const JobId a = h.Submit(1);
  h.Send(KillRequest{a, "user"});
  EXPECT_EQ(h.job(a).state, JobState::kKilled);
  EXPECT_TRUE(h.state().queue().empty());

  Harness f(std::make_unique<FifoPolicy>(), 1);
  const JobId b = f.Submit(4);
  const Action start = f.last()[0];
  // The start fails; FIFO tries again at once (same head of the queue).
  auto again = f.Send(ActionFailed{start.id, b, Duration(), "no such file"});
  EXPECT_EQ(f.job(b).start_failures, 1);
  EXPECT_EQ(CountKind(again, ActionKind::kStart), 1);
  EXPECT_EQ(f.state().counters().actions_failed, 1);
  auto killed = f.Send(KillRequest{b, "operator"});
  EXPECT_EQ(CountKind(killed, ActionKind::kKill), 1);
  EXPECT_EQ(f.state().cluster().free_gpus(), 4);
}

TEST(SchedulerTest, ServerDownRequeuesItsJobs) {
  Harness h(std::make_unique<FifoPolicy>(), 2);
  const JobId a = h.Submit(4);
  const JobId b = h.Submit(4);
  h.CompleteAll();
  const ServerId lost = h.state().cluster().gpu(h.job(a).gpus[0]).server;
  h.Send(ServerDown{lost});
  EXPECT_EQ(h.job(a).state, JobState::kQueued);
  EXPECT_FALSE(h.job(a).launched);
  EXPECT_EQ(h.job(b).state, JobState::kRunning);
  EXPECT_EQ(h.state().cluster().up_gpus(), 4);
  auto back = h.Send(ServerUp{ServerSpec{}, lost});
  EXPECT_EQ(CountKind(back, ActionKind::kStart), 1);
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
}

}  // namespace
}  // namespace gandiva::core
