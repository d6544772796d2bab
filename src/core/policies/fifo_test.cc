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

// A job larger than all the GPUs up blocks no one; once a server joins and
// it fits, it is first in line again.
TEST(FifoTest, AJobLargerThanTheServersUpBlocksNoOne) {
  Harness h(std::make_unique<FifoPolicy>(), 1);  // 4 GPUs
  const JobId big = h.Submit(8);
  const JobId a = h.Submit(2);
  const JobId b = h.Submit(2);
  h.CompleteAll();
  EXPECT_EQ(h.job(big).state, JobState::kQueued);
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  EXPECT_EQ(h.job(b).state, JobState::kRunning);
  const JobId c = h.Submit(1);  // no room: waits
  ServerSpec more;
  more.name = "s1";
  h.Send(ServerUp{more, ServerId()});  // 8 GPUs up: big could start
  h.CompleteAll();
  EXPECT_EQ(h.job(big).state, JobState::kQueued);  // 4 free, needs 8
  EXPECT_EQ(h.job(c).state, JobState::kQueued) << "it went before big";
  h.Send(JobFinished{a, true});
  h.Send(JobFinished{b, true});
  h.CompleteAll();
  EXPECT_EQ(h.job(big).state, JobState::kRunning);
  EXPECT_EQ(h.job(c).state, JobState::kQueued);
}

// An operator's suspend holds the job on its GPUs (no queued job takes
// them); released, it runs there again, whether the release comes after its
// suspend completed or while it is under way. Under VC quotas too.
TEST(FifoTest, AJobReleasedByTheOperatorRunsAgainOnItsGpus) {
  for (bool vcs : {false, true}) {
    for (bool early : {false, true}) {
      SCOPED_TRACE(std::string(vcs ? "vc quotas, " : "") +
                   (early ? "released during its suspend" : "released after"));
      FifoOptions o;
      if (vcs) o.vc_quotas = {{"a", 2}};              // the rest (2) is shared
      Harness h(std::make_unique<FifoPolicy>(o), 1);  // 4 GPUs
      const JobId a = h.Submit(vcs ? 2 : 4);
      h.CompleteAll();
      const std::vector<GpuId> gpus = h.job(a).gpus;
      auto held = h.Send(HoldRequest{a, true});
      ASSERT_EQ(CountKind(held, ActionKind::kSuspend), 1);
      const JobId b = h.Submit(vcs ? 4 : 1);  // a's GPUs stay a's
      if (early) {
        EXPECT_TRUE(h.Send(HoldRequest{a, false}).empty());
        h.CompleteAll();  // the suspend completes; a runs again
      } else {
        h.CompleteAll();
        EXPECT_EQ(h.job(a).state, JobState::kSuspended);
        auto released = h.Send(HoldRequest{a, false});
        EXPECT_EQ(CountKind(released, ActionKind::kResume), 1);
        h.CompleteAll();
      }
      EXPECT_EQ(h.job(a).state, JobState::kRunning);
      EXPECT_EQ(h.job(a).gpus, gpus);
      EXPECT_EQ(h.job(b).state, JobState::kQueued);
    }
  }
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

TEST(VcQuotaTest, ProportionalLargestRemainder) {
  using V = std::vector<std::pair<std::string, double>>;
  using Q = std::map<std::string, int>;
  // One GPU each, the other 7 split 3:1:0 -> 5.25, 1.75, 0.
  EXPECT_EQ(
      ProportionalVcQuotas(V{{"a", 100}, {"b", 100}, {"c", 0}, {"a", 200}}, 10),
      (Q{{"a", 6}, {"b", 3}, {"c", 1}}));
  // Too few GPUs for one each: pure proportion; a tie goes to the first name.
  EXPECT_EQ(ProportionalVcQuotas(V{{"b", 1}, {"a", 1}, {"c", 0}}, 1),
            (Q{{"a", 1}, {"b", 0}, {"c", 0}}));
  // No demand: evenly.
  EXPECT_EQ(ProportionalVcQuotas(V{{"x", 0}, {"y", -5}, {"z", 0}}, 4),
            (Q{{"x", 2}, {"y", 1}, {"z", 1}}));
  EXPECT_TRUE(ProportionalVcQuotas(V{}, 8).empty());
  // Always sums to the cluster.
  const Q big = ProportionalVcQuotas(
      V{{"p", 1e6}, {"q", 3.3e5}, {"r", 12}, {"s", 7.7e4}}, 180);
  int sum = 0;
  for (const auto& [vc, q] : big) {
    sum += q;
    EXPECT_GE(q, 1);
  }
  EXPECT_EQ(sum, 180);
}

// Submits jobs with a VC; these tests never use Harness::Submit.
class VcJobs {
 public:
  explicit VcJobs(Harness& h) : h_(h) {}
  JobId Submit(std::string vc, int gpus) {
    JobSpec spec;
    spec.gpus = gpus;
    spec.vc = std::move(vc);
    const JobId id(next_++);
    h_.Send(JobArrived{id, spec});
    return id;
  }

 private:
  Harness& h_;
  int32_t next_ = 0;
};

FifoOptions Quotas(std::map<std::string, int> q, bool borrow = false) {
  FifoOptions o;
  o.vc_quotas = std::move(q);
  o.allow_borrowing = borrow;
  return o;
}

// Each VC is its own FIFO queue held to its quota: a blocked head blocks its
// own VC only.
TEST(FifoVcTest, QueuesAndQuotasPerVc) {
  Harness h(std::make_unique<FifoPolicy>(Quotas({{"a", 4}, {"b", 4}})), 2);
  VcJobs v(h);
  const JobId a1 = v.Submit("a", 4);
  const JobId a2 = v.Submit("a", 2);  // a is at its quota
  const JobId b1 = v.Submit("b", 2);  // not blocked by a2
  const JobId b2 = v.Submit("b", 2);
  const JobId b3 = v.Submit("b", 1);  // b at its quota
  EXPECT_EQ(h.job(a1).state, JobState::kRunning);
  EXPECT_EQ(h.job(a2).state, JobState::kQueued);
  EXPECT_EQ(h.job(b1).state, JobState::kRunning);
  EXPECT_EQ(h.job(b2).state, JobState::kRunning);
  EXPECT_EQ(h.job(b3).state, JobState::kQueued);
  h.Send(JobFinished{b1, true});
  EXPECT_EQ(h.job(b3).state, JobState::kRunning);
  EXPECT_EQ(h.job(a2).state, JobState::kQueued);  // still a's quota
  h.Send(JobFinished{a1, true});
  EXPECT_EQ(h.job(a2).state, JobState::kRunning);
  for (const Gpu& g : h.state().cluster().gpus()) EXPECT_LE(g.jobs.size(), 1u);
}

// VCs not named share one queue with what the named quotas leave.
TEST(FifoVcTest, UnnamedVcsShareTheRest) {
  Harness h(std::make_unique<FifoPolicy>(Quotas({{"a", 4}})), 3);  // 12
  VcJobs v(h);
  const JobId z = v.Submit("z", 8);
  const JobId anon = v.Submit("", 1);  // the rest (8) is used up
  const JobId a = v.Submit("a", 4);
  EXPECT_EQ(h.job(z).state, JobState::kRunning);
  EXPECT_EQ(h.job(anon).state, JobState::kQueued);
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  h.Send(JobFinished{z, true});
  EXPECT_EQ(h.job(anon).state, JobState::kRunning);
}

// With borrowing, a VC at its quota takes idle GPUs, without preemption,
// and only while no VC within its quota waits for GPUs.
TEST(FifoVcTest, BorrowsIdleGpusOnlyWhenAllowed) {
  for (bool borrow : {false, true}) {
    Harness h(
        std::make_unique<FifoPolicy>(Quotas({{"a", 4}, {"b", 4}}, borrow)), 2);
    VcJobs v(h);
    std::vector<JobId> a;
    for (int i = 0; i < 4; ++i) a.push_back(v.Submit("a", 2));
    EXPECT_EQ(h.job(a[2]).state,
              borrow ? JobState::kRunning : JobState::kQueued);
    EXPECT_EQ(h.job(a[3]).state,
              borrow ? JobState::kRunning : JobState::kQueued);
    if (!borrow) continue;
    const JobId b = v.Submit("b", 4);  // within quota, but no GPUs: waits
    const JobId a5 = v.Submit("a", 1);
    EXPECT_EQ(h.job(b).state, JobState::kQueued);
    EXPECT_EQ(h.state().counters().suspends, 0);
    h.Send(JobFinished{a[0], true});                // 2 free: too few for b
    EXPECT_EQ(h.job(a5).state, JobState::kQueued);  // b waits: no borrowing
    EXPECT_EQ(h.state().cluster().free_gpus(), 2);
    h.Send(JobFinished{a[1], true});
    EXPECT_EQ(h.job(b).state, JobState::kRunning);
    EXPECT_EQ(h.job(a5).state, JobState::kQueued);  // a at 4 of 4, none idle
    h.Send(JobFinished{a[2], true});                // a back at 2 of 4
    EXPECT_EQ(h.job(a5).state, JobState::kRunning);
  }
}

// Why a queued job waits, by fifo's rules: a job that fits on one server
// is not kept waiting for one while it can be spread across servers
// (relax_locality), only when locality is kept.
TEST(FifoReasonsTest, AJobWaitsForOneServerOnlyWhenLocalityIsKept) {
  for (bool relax : {true, false}) {
    SCOPED_TRACE(relax);
    FifoOptions o;
    o.relax_locality = relax;
    Harness h(std::make_unique<FifoPolicy>(o), 2);  // 8 GPUs
    std::vector<JobId> ones;
    for (int i = 0; i < 8; ++i) ones.push_back(h.Submit(1));
    h.CompleteAll();
    // One GPU free on each server.
    const Cluster& c = h.state().cluster();
    ASSERT_NE(c.gpu(h.job(ones[0]).gpus[0]).server,
              c.gpu(h.job(ones[7]).gpus[0]).server);
    h.Send(KillRequest{ones[0], "test"});
    h.Send(KillRequest{ones[7], "test"});
    const JobId big = h.Submit(4);
    const JobId small = h.Submit(2);
    ASSERT_EQ(h.job(small).state, JobState::kQueued);
    const auto reasons = h.scheduler().ExplainQueue();
    EXPECT_EQ(reasons->Why(big, 4), "it needs 4 GPUs, 2 are free");
    EXPECT_EQ(reasons->Why(small, 2),
              relax ? "1 job is ahead of it in the queue"
                    : "2 GPUs are free, but no server has 2 free (a job that "
                      "fits on one server waits for one); 1 job is ahead of "
                      "it in the queue");
  }
}

// With VC quotas, a job whose VC would go past its quota says so, naming
// the VC, what it holds and its quota; a job larger than its quota cannot
// start without borrowing; the jobs ahead of a job are those of its VC's
// queue.
TEST(FifoReasonsTest, AJobWhoseVcIsAtItsQuotaSaysSo) {
  Harness h(std::make_unique<FifoPolicy>(Quotas({{"a", 4}, {"b", 2}})),
            3);  // 12 GPUs, 6 of them the shared queue's
  VcJobs v(h);
  const JobId a1 = v.Submit("a", 4);
  const JobId a2 = v.Submit("a", 2);  // a at its quota
  const JobId a3 = v.Submit("a", 1);
  const JobId b1 = v.Submit("b", 4);  // more than b's quota
  const JobId z0 = v.Submit("z", 4);
  const JobId z1 = v.Submit("z", 4);  // the shared queue at its quota
  const JobId z2 = v.Submit("", 1);
  h.CompleteAll();
  ASSERT_EQ(h.job(a1).state, JobState::kRunning);
  ASSERT_EQ(h.job(z0).state, JobState::kRunning);
  ASSERT_EQ(h.job(z2).state, JobState::kQueued);
  const auto reasons = h.scheduler().ExplainQueue();
  EXPECT_EQ(reasons->Why(a2, 2),
            "virtual cluster 'a' holds 4 of its quota of 4 GPUs and it needs "
            "2: it waits for jobs of its queue to end");
  EXPECT_EQ(reasons->Why(a3, 1),
            "virtual cluster 'a' holds 4 of its quota of 4 GPUs and it needs "
            "1: it waits for jobs of its queue to end; 1 job is ahead of it "
            "in the queue of virtual cluster 'a'");
  EXPECT_EQ(reasons->Why(b1, 4),
            "it needs 4 GPUs, more than the quota of virtual cluster 'b' "
            "(2), and borrowing is off: it cannot start");
  EXPECT_EQ(reasons->Why(z1, 4),
            "the shared queue (jobs of no virtual cluster named in the "
            "quotas) holds 4 of its quota of 6 GPUs and it needs 4: it waits "
            "for jobs of its queue to end");
  // Within its queue's quota: the default rules, counting the jobs of its
  // queue only.
  EXPECT_EQ(reasons->Why(z2, 1), "1 job is ahead of it in the shared queue");
  // A VC's jobs end: its queue's reasons follow.
  h.Send(JobFinished{a1, true});
  EXPECT_EQ(h.job(a3).state, JobState::kRunning);
  EXPECT_EQ(h.scheduler().ExplainQueue()->Why(b1, 4), reasons->Why(b1, 4));
}

// With borrowing, a VC at its quota waits to borrow idle GPUs too, and a
// job larger than its quota runs only on borrowed ones.
TEST(FifoReasonsTest, AVcAtItsQuotaMayBorrow) {
  Harness h(std::make_unique<FifoPolicy>(
                Quotas({{"a", 4}, {"b", 4}}, /*borrow=*/true)),
            2);
  VcJobs v(h);
  for (int i = 0; i < 4; ++i) v.Submit("a", 2);  // 4 of them borrowed
  const JobId b = v.Submit("b", 4);  // within its quota: no GPU free
  const JobId a5 = v.Submit("a", 1);
  const JobId a6 = v.Submit("a", 8);
  h.CompleteAll();
  ASSERT_EQ(h.job(b).state, JobState::kQueued);
  const auto reasons = h.scheduler().ExplainQueue();
  EXPECT_EQ(reasons->Why(b, 4), "it needs 4 GPUs, 0 are free");
  EXPECT_EQ(reasons->Why(a5, 1),
            "virtual cluster 'a' holds 8 of its quota of 4 GPUs and it needs "
            "1: it waits for jobs of its queue to end, or to borrow idle GPUs "
            "(while no virtual cluster's job within its quota waits)");
  EXPECT_EQ(reasons->Why(a6, 8),
            "it needs 8 GPUs, more than the quota of virtual cluster 'a' (4): "
            "it runs only on borrowed GPUs, idle while no virtual cluster's "
            "job within its quota waits; 1 job is ahead of it in the queue of "
            "virtual cluster 'a'");
}

}  // namespace
}  // namespace gandiva::core
