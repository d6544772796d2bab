#include "core/policies/gandiva_fair.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/snapshot.h"
#include "core/test_util.h"

namespace gandiva::core {
namespace {

using testing::CountKind;
using testing::Harness;

std::unique_ptr<Policy> Fair(std::map<std::string, int> quotas) {
  GandivaFairOptions o;
  o.queues = FlatQueues(quotas);
  return std::make_unique<GandivaFairPolicy>(o);
}

ServerSpec Gpus(int n) {
  ServerSpec s;
  s.gpus = n;
  return s;
}

int Running(const Harness& h, const std::vector<JobId>& jobs) {
  int n = 0;
  for (JobId id : jobs) n += h.job(id).state == JobState::kRunning;
  return n;
}

// Queue b borrows the whole cluster while a is idle. a's jobs come: at the
// next Tick (within a quantum) two of b's are suspended, not killed, and
// give their GPUs to a's; b's go on from where they stopped once a's end.
TEST(GandivaFairTest, AQueueOwedItsQuotaGetsItBackByASuspendLosingNothing) {
  Harness h(Fair({{"a", 2}, {"b", 2}}), 1, Gpus(4));
  std::vector<JobId> b;
  for (int i = 0; i < 4; ++i) b.push_back(h.Submit(1, 0, false, "b"));
  h.CompleteAll();
  EXPECT_EQ(Running(h, b), 4) << "idle GPUs are lent";
  h.Advance(Duration::Seconds(120));
  EXPECT_TRUE(h.Tick().empty()) << "no one else asks";

  const JobId a0 = h.Submit(1, 0, false, "a");
  const JobId a1 = h.Submit(1, 0, false, "a");
  EXPECT_TRUE(h.last().empty()) << "reclaim waits for the Tick";
  h.Advance(Duration::Seconds(30));
  const std::vector<Action> tick = h.Tick();
  EXPECT_EQ(CountKind(tick, ActionKind::kSuspend), 2);
  EXPECT_EQ(CountKind(tick, ActionKind::kKill), 0);
  const std::vector<Action> after = h.CompleteAll();
  EXPECT_EQ(CountKind(after, ActionKind::kStart), 2);
  EXPECT_EQ(h.job(a0).state, JobState::kRunning);
  EXPECT_EQ(h.job(a1).state, JobState::kRunning);
  EXPECT_EQ(Running(h, b), 2);
  std::vector<JobId> waiting;
  for (JobId id : b) {
    if (h.job(id).state == JobState::kQueued) waiting.push_back(id);
  }
  ASSERT_EQ(waiting.size(), 2u);
  for (JobId id : waiting) {
    EXPECT_TRUE(h.job(id).launched) << "its process saved its work";
  }

  // At the next Tick a keeps its quota, and b's jobs take turns in b's.
  h.Advance(Duration::Seconds(60));
  const std::vector<Action> turn = h.Tick();
  ASSERT_EQ(CountKind(turn, ActionKind::kSuspend), 2);
  for (const Action& x : turn) {
    EXPECT_EQ(std::count(waiting.begin(), waiting.end(), x.job), 0)
        << "job " << x.job.value << " ran last turn";
    EXPECT_NE(x.job, a0);
    EXPECT_NE(x.job, a1);
  }
  h.CompleteAll();
  EXPECT_EQ(Running(h, b), 2);

  h.Send(JobFinished{a0, true});
  h.Send(JobFinished{a1, true});
  h.CompleteAll();
  EXPECT_EQ(Running(h, b), 4);
  for (JobId id : b) {
    EXPECT_EQ(h.job(id).resumes, 1) << "resumed, not started afresh";
  }
}

// Quotas first, then idle GPUs lent in proportion to the quotas; what a
// queue was owed is made up within a quantum.
TEST(GandivaFairTest, QuotasFirstThenLentByQuota) {
  Harness h(Fair({{"a", 3}, {"b", 1}}), 2, Gpus(4));
  std::vector<JobId> a, b;
  for (int i = 0; i < 8; ++i) a.push_back(h.Submit(1, 0, false, "a"));
  for (int i = 0; i < 8; ++i) b.push_back(h.Submit(1, 0, false, "b"));
  h.CompleteAll();
  // All of a's came first and took all 8 GPUs. The shares: 8 GPUs dealt
  // 3 + 1, then 4 lent 3:1, so a 6 and b 2. For the quantum b waited, a
  // got 2 GPUs more than its share and b 2 fewer: at the Tick b makes
  // that up over one quantum, 2 GPUs more.
  h.Advance(Duration::Seconds(60));
  h.Tick();
  h.CompleteAll();
  EXPECT_EQ(Running(h, a), 4);
  EXPECT_EQ(Running(h, b), 4);
  // Even, the shares hold from then on.
  for (int turn = 0; turn < 3; ++turn) {
    SCOPED_TRACE(turn);
    h.Advance(Duration::Seconds(60));
    h.Tick();
    h.CompleteAll();
    EXPECT_EQ(Running(h, a), 6);
    EXPECT_EQ(Running(h, b), 2);
  }
}

// A queue whose jobs are bigger than its share runs them in turn, as
// often as its share pays for: b's share is 1 GPU of 4, its job needs 4,
// so it runs one quantum in four.
TEST(GandivaFairTest, AJobBiggerThanItsQueuesShareRunsInTurn) {
  Harness h(Fair({{"a", 3}, {"b", 1}}), 1, Gpus(4));
  std::vector<JobId> a;
  for (int i = 0; i < 4; ++i) a.push_back(h.Submit(1, 0, false, "a"));
  const JobId big = h.Submit(4, 0, false, "b");
  h.CompleteAll();
  int big_turns = 0, a_gpu_turns = 0;
  const int turns = 40;
  for (int turn = 0; turn < turns; ++turn) {
    h.Advance(Duration::Seconds(60));
    h.Tick();
    h.CompleteAll();
    big_turns += h.job(big).state == JobState::kRunning;
    a_gpu_turns += Running(h, a);
  }
  EXPECT_GE(big_turns, turns / 4 - 2);
  EXPECT_LE(big_turns, turns / 4 + 2);
  EXPECT_EQ(a_gpu_turns + 4 * big_turns, 4 * turns) << "no GPU idles";
}

// One queue, one GPU, two jobs: each gets a quantum in turn.
TEST(GandivaFairTest, JobsOfAQueueTakeTurnsAQuantumEach) {
  Harness h(Fair({}), 1, Gpus(1));
  const JobId j0 = h.Submit(1);
  const JobId j1 = h.Submit(1);
  h.CompleteAll();
  EXPECT_EQ(h.job(j0).state, JobState::kRunning);
  h.Advance(Duration::Seconds(20));
  EXPECT_TRUE(h.Tick().empty()) << "its slice is not over";
  for (int turn = 0; turn < 4; ++turn) {
    SCOPED_TRACE(turn);
    const JobId on = turn % 2 == 0 ? j0 : j1;
    const JobId off = turn % 2 == 0 ? j1 : j0;
    h.Advance(Duration::Seconds(60));
    const std::vector<Action> tick = h.Tick();
    ASSERT_EQ(tick.size(), 1u);
    EXPECT_EQ(tick[0].kind, ActionKind::kSuspend);
    EXPECT_EQ(tick[0].job, on);
    const std::vector<Action> then = h.CompleteAll();
    ASSERT_EQ(then.size(), 1u);
    EXPECT_EQ(then[0].job, off);
    EXPECT_EQ(then[0].kind,
              turn == 0 ? ActionKind::kStart : ActionKind::kResume);
    EXPECT_EQ(h.job(off).state, JobState::kRunning);
  }
}

// Within a queue, users take turns job by job: a user who came late with
// one job does not wait behind every job of one who came early with many.
TEST(GandivaFairTest, UsersOfAQueueTakeTurns) {
  Harness h(Fair({}), 1, Gpus(2));
  auto submit = [&](const std::string& owner) {
    JobSpec spec;
    spec.owner = owner;
    return h.SubmitSpec(spec);
  };
  std::vector<JobId> alice;
  for (int i = 0; i < 4; ++i) alice.push_back(submit("alice"));
  h.CompleteAll();
  h.Advance(Duration::Seconds(1));
  const JobId bob = submit("bob");
  h.CompleteAll();
  EXPECT_EQ(Running(h, alice), 2);
  h.Advance(Duration::Seconds(60));
  h.Tick();
  h.CompleteAll();
  EXPECT_EQ(h.job(bob).state, JobState::kRunning)
      << "bob's first job before alice's third and fourth";
  EXPECT_EQ(Running(h, {alice[2], alice[3]}), 1);
  EXPECT_EQ(Running(h, {alice[0], alice[1]}), 0);
}

// Within a queue each user is owed their part of its share over time, as
// queues are of the cluster: bob asked for half the GPU for half an hour
// and got none (alice's job had a higher priority). Later, when alice and
// bob each wait with a job, bob's goes first, though alice's came first;
// without that history alice's would.
TEST(GandivaFairTest, AUserOwedTimeInTheirQueueGoesFirst) {
  for (const bool history : {true, false}) {
    SCOPED_TRACE(history ? "bob owed" : "no history");
    Harness h(Fair({}), 1, Gpus(1));
    auto submit = [&](const std::string& owner, int priority) {
      JobSpec spec;
      spec.owner = owner;
      spec.priority = priority;
      return h.SubmitSpec(spec);
    };
    const JobId a1 = submit("alice", 1);
    h.CompleteAll();
    if (history) {
      const JobId b1 = submit("bob", 0);
      for (int i = 0; i < 30; ++i) {
        h.Advance(Duration::Seconds(60));
        h.Tick();
        h.CompleteAll();
      }
      EXPECT_EQ(h.job(a1).state, JobState::kRunning);
      EXPECT_EQ(h.job(b1).state, JobState::kQueued) << "a lower priority";
      h.Send(KillRequest{b1, "test"});
    } else {
      h.Advance(Duration::Seconds(1800));
    }
    h.Send(JobFinished{a1, true});
    const JobId c = submit("carol", 0);
    h.CompleteAll();
    ASSERT_EQ(h.job(c).state, JobState::kRunning);
    h.Advance(Duration::Seconds(1));
    const JobId a2 = submit("alice", 0);
    h.Advance(Duration::Seconds(1));
    const JobId b2 = submit("bob", 0);
    h.Send(JobFinished{c, true});
    h.CompleteAll();
    EXPECT_EQ(h.job(history ? b2 : a2).state, JobState::kRunning);
    EXPECT_EQ(h.job(history ? a2 : b2).state, JobState::kQueued);
  }
}

// The policy's state from before users' credits were kept (the queues'
// alone) reads, with no user owed anything; what it writes now reads back
// the same.
TEST(GandivaFairTest, StateFromBeforeUsersCreditsReads) {
  GandivaFairPolicy policy(
      GandivaFairOptions{.queues = FlatQueues({{"a", 1}})});
  SnapshotWriter w;
  policy.SaveState(w);
  std::string bytes = w.Take();
  ASSERT_GE(bytes.size(), 8u);
  const std::string users_count = bytes.substr(bytes.size() - 8);
  EXPECT_EQ(users_count, std::string(8, '\0')) << "no user yet";
  GandivaFairPolicy restored(
      GandivaFairOptions{.queues = FlatQueues({{"a", 1}})});
  SnapshotReader older(std::string_view(bytes).substr(0, bytes.size() - 8));
  restored.LoadState(older);
  EXPECT_TRUE(older.ok());
  SnapshotWriter again;
  restored.SaveState(again);
  EXPECT_EQ(again.bytes(), bytes);
  SnapshotReader bad(bytes + "x");
  restored.LoadState(bad);
  EXPECT_FALSE(bad.ok() && bad.at_end()) << "nothing more than it wrote";
}

// At most rotation_per_gpu jobs of a queue take turns per GPU of its
// share; a job not run yet waits for a place among them, in arrival order.
TEST(GandivaFairTest, TurnsAreCappedPerGpuOfTheShare) {
  GandivaFairOptions o;
  o.rotation_per_gpu = 2;
  Harness h(std::make_unique<GandivaFairPolicy>(o), 1, Gpus(1));
  const JobId j0 = h.Submit(1);
  const JobId j1 = h.Submit(1);
  const JobId j2 = h.Submit(1);
  h.CompleteAll();
  for (int turn = 0; turn < 4; ++turn) {
    h.Advance(Duration::Seconds(60));
    h.Tick();
    h.CompleteAll();
    EXPECT_EQ(h.job(j2).state, JobState::kQueued) << "turn " << turn;
    EXPECT_FALSE(h.job(j2).launched);
  }
  EXPECT_TRUE(h.job(j1).launched) << "the first two take turns";
  const JobId on = h.job(j0).state == JobState::kRunning ? j0 : j1;
  h.Send(JobFinished{on, true});
  h.CompleteAll();
  h.Advance(Duration::Seconds(60));
  h.Tick();
  h.CompleteAll();
  EXPECT_TRUE(h.job(j2).launched) << "a place among the turns came free";
}

// A higher priority goes first within a queue, at once; a borrower's job
// in its first half quantum is reclaimed all the same.
TEST(GandivaFairTest, PriorityFirstAndBorrowersAreNotKeptForTheirSlice) {
  Harness h(Fair({{"a", 1}, {"b", 1}}), 1, Gpus(2));
  const JobId b0 = h.Submit(1, 0, false, "b");
  const JobId b1 = h.Submit(1, 0, false, "b");
  h.CompleteAll();
  const JobId a0 = h.Submit(1, 0, false, "a");
  h.Advance(Duration::Seconds(10));
  const std::vector<Action> tick = h.Tick();
  ASSERT_EQ(CountKind(tick, ActionKind::kSuspend), 1);
  EXPECT_EQ(tick[0].job, b1) << "the later of b's";
  h.CompleteAll();
  EXPECT_EQ(h.job(a0).state, JobState::kRunning);
  EXPECT_EQ(h.job(b0).state, JobState::kRunning);

  // In b: a job of higher priority takes b0's GPU at the next Tick.
  const JobId urgent = h.Submit(1, 5, false, "b");
  h.Advance(Duration::Seconds(5));
  const std::vector<Action> next = h.Tick();
  ASSERT_EQ(CountKind(next, ActionKind::kSuspend), 1);
  EXPECT_EQ(next[0].job, b0);
  h.CompleteAll();
  EXPECT_EQ(h.job(urgent).state, JobState::kRunning);
  EXPECT_EQ(h.job(a0).state, JobState::kRunning);
}

// Why a queued job waits names its queue, what it is dealt, its share,
// its quota and what it is owed.
TEST(GandivaFairTest, AQueuedJobsReasonNamesItsQueuesDeal) {
  Harness h(Fair({{"a", 1}, {"b", 1}}), 1, Gpus(2));
  h.Submit(1, 0, false, "a");
  h.Submit(1, 0, false, "b");
  const JobId a1 = h.Submit(1, 0, false, "a");
  h.CompleteAll();
  const auto reasons = h.scheduler().ExplainQueue();
  const std::string why = reasons->Why(a1, 1);
  EXPECT_NE(why.find("queue 'a' is dealt 1 GPUs now (fair share 1.0, "
                     "quota 1, owed 0.00 GPU-hours)"),
            std::string::npos)
      << why;
}

// New queues (an operator's `gandiva queues apply`) are acted on at once,
// not at the next Tick: a queue given a larger quota gets it back from
// the borrowers by suspends. What each queue was owed, or owed, carries
// over to the queue of its name. A change that is no tree is refused and
// changes nothing.
TEST(GandivaFairTest, NewQueuesAreActedOnAtOnceAndCreditsCarryOver) {
  const std::vector<QueueConfig> before = FlatQueues({{"a", 1}, {"b", 1}});
  Harness h(
      std::make_unique<GandivaFairPolicy>(GandivaFairOptions{.queues = before}),
      1, Gpus(2));
  std::vector<JobId> b;
  for (int i = 0; i < 2; ++i) b.push_back(h.Submit(1, 0, false, "b"));
  h.CompleteAll();
  std::vector<JobId> a;
  for (int i = 0; i < 3; ++i) a.push_back(h.Submit(1, 0, false, "a"));
  // For 10 minutes, no Tick: a is owed its GPU, b owes it.
  // (1 - 2^(-600/3600)) * 3600 / ln 2 = 566.5 GPU-seconds, 0.16 hours.
  h.Advance(Duration::Seconds(600));
  h.Send(ProfileReport{b[0], 1.0});
  EXPECT_NE(h.scheduler().ExplainQueue()->Why(a[2], 1).find(
                "quota 1, owed 0.16 GPU-hours"),
            std::string::npos)
      << h.scheduler().ExplainQueue()->Why(a[2], 1);

  const std::vector<QueueConfig> after = FlatQueues({{"a", 2}, {"b", 0}});
  const std::vector<Action> acted = h.Send(QueuesChanged{after, before});
  EXPECT_EQ(CountKind(acted, ActionKind::kSuspend), 2) << "no Tick needed";
  EXPECT_EQ(CountKind(acted, ActionKind::kKill), 0);
  h.CompleteAll();
  EXPECT_EQ(Running(h, a), 2);
  EXPECT_EQ(Running(h, b), 0);
  for (JobId id : b) EXPECT_TRUE(h.job(id).launched) << "suspended, not lost";
  const auto reasons = h.scheduler().ExplainQueue();
  EXPECT_NE(reasons->Why(a[2], 1).find("quota 2, owed 0.16 GPU-hours"),
            std::string::npos)
      << reasons->Why(a[2], 1);
  EXPECT_NE(reasons->Why(b[0], 1).find("quota 0, owing 0.16 GPU-hours"),
            std::string::npos)
      << reasons->Why(b[0], 1);

  std::vector<QueueConfig> bad = after;
  bad.push_back({.name = "c", .parent = "nowhere", .quota = 1});
  const Status refused = h.TrySend(QueuesChanged{bad, after});
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("'c'"), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("parent"), std::string::npos)
      << refused.message();
  EXPECT_NE(h.scheduler().ExplainQueue()->Why(a[2], 1).find("quota 2"),
            std::string::npos)
      << "the queues stay as they were";
}

// A tree: the top queues share the cluster by quota and weight, each
// queue's share split among its children alike; a limit caps a queue and
// the queues under it, and what it cannot take goes to the others.
TEST(QueueTreeTest, SharesGoDownTheTreeByQuotaWeightAndLimit) {
  const std::vector<QueueConfig> queues = {
      {.name = "org", .quota = 4, .weight = 1},
      {.name = "vision", .parent = "org", .quota = 2, .weight = 3},
      {.name = "speech", .parent = "org", .quota = 2, .weight = 1},
      {.name = "ops", .quota = 4, .weight = 1, .limit = 5},
  };
  ASSERT_TRUE(CheckQueues(queues).ok());
  const QueueQuotas q(queues);
  ASSERT_TRUE(q.tree());
  const size_t ops = 1, org = 2, speech = 3, vision = 4;  // by name, "" first
  ASSERT_EQ(q.name(org), "org");
  ASSERT_EQ(q.name(vision), "vision");
  EXPECT_FALSE(q.leaf(org));
  EXPECT_EQ(q.Of("org"), q.Of("")) << "jobs go to leaves only";
  EXPECT_EQ(q.Of("vision"), vision);
  auto shares = [&](double v, double s, double o, double gpus) {
    std::vector<double> demand(q.size(), 0.0);
    demand[vision] = v;
    demand[speech] = s;
    demand[ops] = o;
    return q.Shares(demand, gpus);
  };
  // 16 GPUs, all asking for 10: ops is capped at its limit 5; org gets
  // the other 11, split 2+2 by quota and the 7 left 3:1 by weight.
  std::vector<double> s = shares(10, 10, 10, 16);
  EXPECT_NEAR(s[ops], 5, 1e-9);
  EXPECT_NEAR(s[org], 11, 1e-9);
  EXPECT_NEAR(s[vision], 2 + 7 * 0.75, 1e-9);
  EXPECT_NEAR(s[speech], 2 + 7 * 0.25, 1e-9);
  // 8 GPUs: each top queue its quota; within org, each team its own.
  s = shares(10, 10, 10, 8);
  EXPECT_NEAR(s[ops], 4, 1e-9);
  EXPECT_NEAR(s[vision], 2, 1e-9);
  EXPECT_NEAR(s[speech], 2, 1e-9);
  // speech idle: vision takes org's whole share, and what ops cannot.
  s = shares(12, 0, 10, 16);
  EXPECT_NEAR(s[vision], 11, 1e-9);
  EXPECT_NEAR(s[speech], 0, 1e-9);

  // Refused trees name the queue and the field.
  std::vector<QueueConfig> bad = queues;
  bad[1].parent = "nowhere";
  EXPECT_EQ(CheckQueues(bad).message(),
            "queue 'vision': field 'parent': no queue 'nowhere'");
  bad = queues;
  bad[0].parent = "vision";
  EXPECT_NE(CheckQueues(bad).message().find("makes a cycle"),
            std::string::npos);
  bad = queues;
  bad[0].quota = 3;
  EXPECT_EQ(CheckQueues(bad).message(),
            "queue 'org': field 'quota': 3 is under its children's quotas, "
            "4 together");
}

// gandiva-fair deals no queue more GPUs than its limit (or a limit above
// it) allows, even with GPUs idle; the others still get theirs.
TEST(GandivaFairTest, ALimitCapsAQueueAndTheQueuesUnderIt) {
  GandivaFairOptions o;
  o.queues = {
      {.name = "org", .quota = 2, .limit = 3},
      {.name = "team", .parent = "org", .quota = 2},
      {.name = "solo", .quota = 2, .limit = 2},
      {.name = "free", .quota = 0},
  };
  Harness h(std::make_unique<GandivaFairPolicy>(o), 1, Gpus(8));
  std::vector<JobId> team, solo, free;
  for (int i = 0; i < 5; ++i) team.push_back(h.Submit(1, 0, false, "team"));
  for (int i = 0; i < 5; ++i) solo.push_back(h.Submit(1, 0, false, "solo"));
  h.CompleteAll();
  EXPECT_EQ(Running(h, team), 3) << "org's limit";
  EXPECT_EQ(Running(h, solo), 2) << "solo's limit";
  for (int i = 0; i < 5; ++i) free.push_back(h.Submit(1, 0, false, "free"));
  h.CompleteAll();
  EXPECT_EQ(Running(h, free), 3) << "the GPUs the limits leave";
  h.Advance(Duration::Seconds(120));
  h.Tick();
  h.CompleteAll();
  EXPECT_EQ(Running(h, team), 3);
  EXPECT_EQ(Running(h, solo), 2);
}

}  // namespace
}  // namespace gandiva::core
