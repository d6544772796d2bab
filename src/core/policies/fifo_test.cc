#include "core/policies/fifo.h"

#include <gtest/gtest.h>

#include "core/test_util.h"

namespace gandiva::core {
namespace {

using testing::CountKind;
using testing::Harness;

TEST(FifoTest, ExclusiveAndStrictlyInOrder) {
  Harness h(std::make_unique<FifoPolicy>(), 2);  // 8 GPUs
  const JobId a = h.Submit(4);
  const JobId b = h.Submit(2);
  const JobId c = h.Submit(4);  // does not fit: 2 free
  const JobId d = h.Submit(1);  // would fit, but waits behind c
  h.CompleteAll();
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  EXPECT_EQ(h.job(b).state, JobState::kRunning);
  EXPECT_EQ(h.job(c).state, JobState::kQueued);
  EXPECT_EQ(h.job(d).state, JobState::kQueued);
  // Never shares: no GPU holds two jobs.
  for (const Gpu& g : h.state().cluster().gpus()) EXPECT_LE(g.jobs.size(), 1u);

  h.Advance(Duration::Seconds(100));
  auto after = h.Send(JobFinished{a, true});
  EXPECT_EQ(CountKind(after, ActionKind::kStart), 2);  // c, then d
  EXPECT_EQ(h.job(c).state, JobState::kRunning);
  EXPECT_EQ(h.job(d).state, JobState::kRunning);
  EXPECT_EQ(h.state().counters().suspends, 0);
}

TEST(FifoTest, BestFitThenAcrossServers) {
  Harness h(std::make_unique<FifoPolicy>(), 3);
  const JobId a = h.Submit(2);  // s0
  const JobId b = h.Submit(2);  // best fit: s0's other two
  const JobId c = h.Submit(4);  // s1
  EXPECT_EQ(h.state().cluster().gpu(h.job(a).gpus[0]).server, ServerId(0));
  EXPECT_EQ(h.state().cluster().gpu(h.job(b).gpus[0]).server, ServerId(0));
  EXPECT_EQ(h.state().cluster().gpu(h.job(c).gpus[0]).server, ServerId(1));
  h.Submit(1);                  // s2
  const JobId e = h.Submit(4);  // 3 free on s2 only: waits
  EXPECT_EQ(h.job(e).state, JobState::kQueued);
  h.Send(JobFinished{a, true});  // 2 free on s0 + 3 on s2: spread
  EXPECT_EQ(h.job(e).state, JobState::kRunning);
  EXPECT_EQ(h.state().cluster().SpreadOf(h.job(e).gpus),
            Spread::kAcrossServers);
}

TEST(FifoTest, KeepsLocalityWhenAsked) {
  for (bool relax : {true, false}) {
    FifoOptions o;
    o.relax_locality = relax;
    Harness h(std::make_unique<FifoPolicy>(o), 2);
    const JobId a = h.Submit(2);
    h.Submit(2);
    const JobId c = h.Submit(2);
    h.Submit(2);
    h.Send(JobFinished{a, true});
    h.Send(JobFinished{c, true});  // 2 free on each server
    const JobId big = h.Submit(4);
    EXPECT_EQ(h.job(big).state, relax ? JobState::kRunning : JobState::kQueued);
  }
}

}  // namespace
}  // namespace gandiva::core
