#include "core/policies/drf_reclaim.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/test_util.h"

namespace gandiva::core {
namespace {

using testing::CountKind;
using testing::Harness;

std::unique_ptr<Policy> Drf(std::map<std::string, int> quotas) {
  return std::make_unique<DrfReclaimPolicy>(
      DrfReclaimOptions{.queues = FlatQueues(quotas)});
}

ServerSpec Gpus(int n) {
  ServerSpec s;
  s.gpus = n;
  return s;
}

int Count(const Harness& h, const std::vector<JobId>& jobs, JobState state) {
  int n = 0;
  for (JobId id : jobs) n += h.job(id).state == state;
  return n;
}

// b borrows the whole cluster while a is idle. a's jobs come: at once, the
// two of b's started last are preempted (stopped at once, lossy), go back
// to the queue, and a's start on their GPUs. When a's end, b's run again.
TEST(DrfReclaimTest, AQueueOwedItsQuotaTakesItBackByKillingBorrowers) {
  Harness h(Drf({{"a", 2}, {"b", 2}}), 1, Gpus(4));
  std::vector<JobId> b;
  for (int i = 0; i < 4; ++i) {
    b.push_back(h.Submit(1, 0, false, "b"));
    h.CompleteAll();
    h.Advance(Duration::Seconds(10));
  }
  EXPECT_EQ(Count(h, b, JobState::kRunning), 4) << "idle GPUs are lent";

  const JobId a0 = h.Submit(1, 0, false, "a");
  const std::vector<Action> reclaim = h.last();
  ASSERT_EQ(reclaim.size(), 1u) << "no Tick needed";
  EXPECT_EQ(reclaim[0].kind, ActionKind::kSuspend);
  EXPECT_TRUE(reclaim[0].lossy);
  EXPECT_EQ(reclaim[0].job, b[3]) << "the latest started";
  const JobId a1 = h.Submit(1, 0, false, "a");
  ASSERT_EQ(h.last().size(), 1u);
  EXPECT_EQ(h.last()[0].job, b[2]);
  EXPECT_TRUE(h.last()[0].lossy);

  const std::vector<Action> after = h.CompleteAll();
  EXPECT_EQ(CountKind(after, ActionKind::kStart), 2);
  EXPECT_EQ(h.job(a0).state, JobState::kRunning);
  EXPECT_EQ(h.job(a1).state, JobState::kRunning);
  EXPECT_EQ(Count(h, b, JobState::kRunning), 2);
  EXPECT_EQ(Count(h, b, JobState::kQueued), 2);
  h.Advance(Duration::Seconds(60));
  EXPECT_TRUE(h.Tick().empty()) << "b at its quota is never preempted";

  h.Send(JobFinished{a0, true});
  h.Send(JobFinished{a1, true});
  h.CompleteAll();
  EXPECT_EQ(Count(h, b, JobState::kRunning), 4);
}

// Idle GPUs are lent to the queue holding the fewest per GPU of quota; a
// borrower is not preempted for another borrower, only for a quota, and
// then from the queue most over its quota.
TEST(DrfReclaimTest, IdleGpusAreLentByQuotaAndOnlyAQuotaReclaims) {
  Harness h(Drf({{"a", 3}, {"b", 1}, {"c", 4}}), 2, Gpus(4));
  std::vector<JobId> a, b;
  for (int i = 0; i < 8; ++i) {
    a.push_back(h.Submit(1, 0, false, "a"));
    h.CompleteAll();
  }
  EXPECT_EQ(Count(h, a, JobState::kRunning), 8) << "all lent to a";
  // b's first job is within b's quota: a's last started gives way.
  for (int i = 0; i < 4; ++i) b.push_back(h.Submit(1, 0, false, "b"));
  h.CompleteAll();
  EXPECT_EQ(h.job(a[7]).state, JobState::kQueued);
  EXPECT_EQ(Count(h, a, JobState::kRunning), 7);
  EXPECT_EQ(Count(h, b, JobState::kRunning), 1) << "the rest borrow nothing";
  h.Advance(Duration::Seconds(60));
  EXPECT_EQ(CountKind(h.Tick(), ActionKind::kSuspend), 0);

  // Two of a's end, one at a time. The first GPU goes to b (1 of quota 1
  // held, against a's 6 of 3), the second to a (5 of 3 against b's 2 of 1).
  h.Send(JobFinished{a[0], true});
  h.CompleteAll();
  EXPECT_EQ(Count(h, b, JobState::kRunning), 2);
  h.Send(JobFinished{a[1], true});
  h.CompleteAll();
  EXPECT_EQ(h.job(a[7]).state, JobState::kRunning);
  EXPECT_EQ(Count(h, a, JobState::kRunning), 6);

  // c comes for its quota of 4. Each GPU is taken from the queue most over
  // its quota that stays at or above it: a (6 of 3; a tie with b's 2 of 1
  // goes to the first named), b (2 of 1), a, a.
  std::vector<JobId> c;
  for (int i = 0; i < 4; ++i) c.push_back(h.Submit(1, 0, false, "c"));
  h.CompleteAll();
  EXPECT_EQ(Count(h, c, JobState::kRunning), 4);
  EXPECT_EQ(Count(h, a, JobState::kRunning), 3);
  EXPECT_EQ(Count(h, b, JobState::kRunning), 1);
}

// A job bigger than what borrowers can give back without going below
// their quotas waits, and nothing is preempted in vain.
TEST(DrfReclaimTest, NothingIsPreemptedInVain) {
  Harness h(Drf({{"a", 2}, {"b", 2}}), 1, Gpus(4));
  const JobId b0 = h.Submit(4, 0, false, "b");
  h.CompleteAll();
  ASSERT_EQ(h.job(b0).state, JobState::kRunning);
  const JobId a0 = h.Submit(2, 0, false, "a");
  EXPECT_TRUE(h.last().empty()) << "b0's stop would take b below its quota";
  EXPECT_EQ(h.job(a0).state, JobState::kQueued);
  const std::string why = h.scheduler().ExplainQueue()->Why(a0, 2);
  EXPECT_NE(why.find("queue 'a' holds 0 GPUs (quota 2); within it"),
            std::string::npos)
      << why;
}

// A higher priority goes first within a queue.
TEST(DrfReclaimTest, PriorityOrdersAQueue) {
  Harness h(Drf({{"a", 1}}), 1, Gpus(1));
  const JobId run = h.Submit(1, 0, false, "a");
  h.CompleteAll();
  const JobId low = h.Submit(1, 0, false, "a");
  const JobId high = h.Submit(1, 3, false, "a");
  h.Send(JobFinished{run, true});
  h.CompleteAll();
  EXPECT_EQ(h.job(high).state, JobState::kRunning);
  EXPECT_EQ(h.job(low).state, JobState::kQueued);
}

// New queues take effect at once: a queue given a quota takes it back from
// the borrowers.
TEST(DrfReclaimTest, NewQueuesTakeEffectAtOnce) {
  const std::vector<QueueConfig> before = FlatQueues({{"b", 2}});
  Harness h(
      std::make_unique<DrfReclaimPolicy>(DrfReclaimOptions{.queues = before}),
      1, Gpus(2));
  std::vector<JobId> b;
  for (int i = 0; i < 2; ++i) {
    b.push_back(h.Submit(1, 0, false, "b"));
    h.CompleteAll();
    h.Advance(Duration::Seconds(10));
  }
  const JobId a0 = h.Submit(1, 0, false, "a");
  EXPECT_TRUE(h.last().empty()) << "a is no queue yet: b keeps its quota";
  const std::vector<Action> acted =
      h.Send(QueuesChanged{FlatQueues({{"a", 1}, {"b", 1}}), before});
  ASSERT_EQ(acted.size(), 1u);
  EXPECT_EQ(acted[0].kind, ActionKind::kSuspend);
  EXPECT_EQ(acted[0].job, b[1]) << "the latest started";
  h.CompleteAll();
  EXPECT_EQ(h.job(a0).state, JobState::kRunning);
}

}  // namespace
}  // namespace gandiva::core
