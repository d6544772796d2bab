// Why queued jobs wait: the default rules, the summary's sharing of the
// queue's order, and Scheduler::ExplainQueue.
#include "core/queue_reasons.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "core/scheduler.h"
#include "core/test_util.h"

namespace gandiva::core {
namespace {

using testing::Harness;

// Starts nothing: every job stays queued.
class IdlePolicy final : public Policy {
 public:
  std::string_view name() const override { return "idle"; }
  void decide(const ClusterState&, const Event&, Actions&) override {}
};

TEST(QueueReasonsTest, TheDefaultRulesJudgeAJobAgainstTheOpenServers) {
  OpenGpus g;
  g.total = 8;
  g.free = 3;
  g.most_free_on_one = 2;
  g.largest_server = 4;
  EXPECT_EQ(DefaultWaitReason(16, 2, g),
            "it needs 16 GPUs and the open servers have 8 in all: it waits "
            "for servers to join (or cordoned ones to open)");
  EXPECT_EQ(DefaultWaitReason(4, 1, g),
            "it needs 4 GPUs, 3 are free; 1 job is ahead of it in the queue");
  EXPECT_EQ(DefaultWaitReason(3, 0, g),
            "3 GPUs are free, but no server has 3 free (a job that fits on "
            "one server waits for one)");
  EXPECT_EQ(DefaultWaitReason(3, 2, g, WaitRules{false}),
            "2 jobs are ahead of it in the queue")
      << "a policy that spreads a job across servers";
  EXPECT_EQ(DefaultWaitReason(2, 0, g), "placed at the next scheduling pass");
  EXPECT_EQ(DefaultWaitReason(2, -1, g), "placed at the next scheduling pass");
  EXPECT_EQ(DefaultWaitReason(4, 2, g, WaitRules{true, "in the queue of 'a'"}),
            "it needs 4 GPUs, 3 are free; 2 jobs are ahead of it in the queue "
            "of 'a'");
  g.free = 1;
  EXPECT_EQ(DefaultWaitReason(2, -1, g), "it needs 2 GPUs, 1 is free");
}

// A job's own reasons, which come before its policy's: held, or waiting
// out failed starts (naming the servers they failed on).
TEST(QueueReasonsTest, AHeldJobOrOneWaitingToTryItsStartAgainSaysSo) {
  Harness h(std::make_unique<IdlePolicy>(), 2, ServerSpec{"n", 4, 1, 1});
  const Cluster& cluster = h.state().cluster();
  const Time now = Time::FromMicros(100000000);
  Job j;
  j.state = JobState::kQueued;
  EXPECT_EQ(OwnWaitReason(j, cluster, now), "");
  j.start_failures = 2;
  j.start_retry_at = Time::FromMicros(130000000);
  EXPECT_EQ(OwnWaitReason(j, cluster, now),
            "its start failed 2 times in a row: it waits before it is tried "
            "again");
  j.start_failed_on = {ServerId(0), ServerId(1)};
  const std::string names = cluster.server(ServerId(0)).spec.name + ", " +
                            cluster.server(ServerId(1)).spec.name;
  EXPECT_EQ(StartFailedOn(j, cluster), names);
  EXPECT_EQ(OwnWaitReason(j, cluster, now),
            "its start failed 2 times in a row (on " + names +
                "): it waits before it is tried again, on another server if "
                "one has room");
  EXPECT_EQ(OwnWaitReason(j, cluster, Time::FromMicros(130000000)), "")
      << "its wait is over: the policy's reason";
  j.held = true;
  EXPECT_EQ(OwnWaitReason(j, cluster, now), kHeldReason);
  j.state = JobState::kSuspended;
  EXPECT_EQ(OwnWaitReason(j, cluster, now), "") << "not queued";
}

TEST(QueueReasonsTest, OnlyOpenServersCount) {
  Harness h(std::make_unique<IdlePolicy>(), 3, ServerSpec{"", 4, 1, 1});
  h.Send(CordonRequest{ServerId(1), true});
  h.Send(ServerDown{ServerId(2)});
  const OpenGpus g = OpenGpus::Of(h.state().cluster());
  EXPECT_EQ(g.total, 4);
  EXPECT_EQ(g.free, 4);
  EXPECT_EQ(g.most_free_on_one, 4);
  EXPECT_EQ(g.largest_server, 4);
}

// The summary counts the jobs ahead of each queued one; a job that joins
// the queue after it was taken gets the rules for its size.
TEST(QueueReasonsTest, TheDefaultSummaryCountsTheJobsAheadOfEach) {
  Harness h(std::make_unique<IdlePolicy>(), 1, ServerSpec{"", 2, 1, 1});
  const JobId a = h.Submit(4);
  const JobId b = h.Submit(1, /*priority=*/1);
  const JobId c = h.Submit(2);
  const auto reasons = h.scheduler().ExplainQueue();
  EXPECT_EQ(reasons->Why(b, 1), "placed at the next scheduling pass");
  EXPECT_EQ(reasons->Why(a, 4),
            "it needs 4 GPUs and the open servers have 2 in all: it waits "
            "for servers to join (or cordoned ones to open)");
  EXPECT_EQ(reasons->Why(c, 2), "2 jobs are ahead of it in the queue");
  const JobId d = h.Submit(2);
  EXPECT_EQ(reasons->Why(d, 2), "placed at the next scheduling pass")
      << "not in the queue when it was taken";
  EXPECT_EQ(h.scheduler().ExplainQueue()->Why(d, 2),
            "3 jobs are ahead of it in the queue");
}

// A summary never changes once taken: the scheduler makes a new one when
// its state changed, and shares the queue's order while the queue is the
// same; readers on other threads read an old one while the state goes on.
TEST(QueueReasonsTest, ASummaryIsMadeAgainOnlyWhenTheStateChanged) {
  Harness h(std::make_unique<IdlePolicy>(), 1, ServerSpec{"", 2, 1, 1});
  const JobId a = h.Submit(2);
  const JobId b = h.Submit(2);
  const auto first = h.scheduler().ExplainQueue();
  EXPECT_EQ(h.scheduler().ExplainQueue(), first) << "nothing changed";
  h.Tick();  // the queue is the same
  const auto second = h.scheduler().ExplainQueue();
  EXPECT_NE(second, first);
  EXPECT_EQ(second->Why(b, 2), "1 job is ahead of it in the queue");
  std::vector<std::string> seen(4);
  std::vector<std::thread> readers;
  for (size_t i = 0; i < seen.size(); ++i) {
    readers.emplace_back([&, i] {
      for (int k = 0; k < 1000; ++k) seen[i] = second->Why(b, 2);
    });
  }
  h.Send(KillRequest{a, "test"});
  const auto third = h.scheduler().ExplainQueue();
  for (std::thread& t : readers) t.join();
  for (const std::string& s : seen) {
    EXPECT_EQ(s, "1 job is ahead of it in the queue");
  }
  EXPECT_EQ(third->Why(b, 2), "placed at the next scheduling pass");
}

TEST(QueueReasonsTest, TheQueuesTableIsSharedWhileTheQueueIsTheSame) {
  Harness h(std::make_unique<IdlePolicy>(), 1);
  const JobId a = h.Submit(1);
  const JobId b = h.Submit(1);
  int rows = 0;
  auto make = [&](const Job& j) {
    ++rows;
    return j.id.value;
  };
  const auto t1 = QueuedJobTable<int32_t>::Of(h.state(), nullptr, make);
  EXPECT_EQ(rows, 2);
  ASSERT_NE(t1->Find(b), nullptr);
  EXPECT_EQ(*t1->Find(b), b.value);
  EXPECT_EQ(t1->Find(JobId(7)), nullptr);
  h.Tick();
  EXPECT_EQ(QueuedJobTable<int32_t>::Of(h.state(), t1, make), t1);
  EXPECT_EQ(rows, 2);
  h.Send(KillRequest{a, "test"});
  const auto t2 = QueuedJobTable<int32_t>::Of(h.state(), t1, make);
  EXPECT_NE(t2, t1);
  EXPECT_EQ(rows, 3);
  EXPECT_EQ(t2->Find(a), nullptr);
}

}  // namespace
}  // namespace gandiva::core
