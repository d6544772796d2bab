#include "core/policies/tiresias.h"

#include <gtest/gtest.h>

#include <functional>
#include <tuple>

#include "core/policies/registry.h"
#include "core/test_util.h"

namespace gandiva::core {
namespace {

using testing::CountKind;
using testing::Harness;

// A policy that does what a test tells it, for the core's Requeue.
class ScriptPolicy final : public Policy {
 public:
  std::function<void(const ClusterState&, const Event&, Actions&)> fn;
  std::string_view name() const override { return "script"; }
  void decide(const ClusterState& s, const Event& e, Actions& out) override {
    if (fn) fn(s, e, out);
  }
};

void ExpectExclusive(const Harness& h) {
  for (const Gpu& g : h.state().cluster().gpus()) {
    EXPECT_LE(g.jobs.size(), 1u) << "GPU " << g.id.value;
  }
}

TEST(RequeueTest, ReleasesGpusAndResumesElsewhere) {
  auto owned = std::make_unique<ScriptPolicy>();
  ScriptPolicy* p = owned.get();
  Harness h(std::move(owned), 2);
  const JobId a = h.Submit(2);
  p->fn = [&](const ClusterState& s, const Event&, Actions& out) {
    out.Start(a, {s.cluster().GpusOf(ServerId(0))[0],
                  s.cluster().GpusOf(ServerId(0))[1]});
  };
  h.Send(Tick{});
  p->fn = nullptr;
  h.CompleteAll();
  p->fn = [&](const ClusterState&, const Event&, Actions& out) {
    out.Suspend(a);
  };
  h.Send(Tick{});
  p->fn = nullptr;
  h.CompleteAll();
  ASSERT_EQ(h.job(a).state, JobState::kSuspended);
  ASSERT_EQ(h.state().waiting().size(), 1u);

  p->fn = [&](const ClusterState&, const Event&, Actions& out) {
    out.Requeue(a);
  };
  EXPECT_TRUE(h.Send(Tick{}).empty());  // nothing for the world
  EXPECT_EQ(h.job(a).state, JobState::kQueued);
  EXPECT_TRUE(h.job(a).launched);
  EXPECT_TRUE(h.job(a).gpus.empty());
  EXPECT_EQ(h.state().queue().size(), 1u);
  EXPECT_TRUE(h.state().waiting().empty());
  EXPECT_EQ(h.state().placed_jobs(), 0);
  EXPECT_EQ(h.state().cluster().free_gpus(), 8);

  // Placed again on the other server, it resumes there.
  p->fn = [&](const ClusterState& s, const Event&, Actions& out) {
    out.Start(a, {s.cluster().GpusOf(ServerId(1))[2],
                  s.cluster().GpusOf(ServerId(1))[3]});
  };
  auto acts = h.Send(Tick{});
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, ActionKind::kResume);
  EXPECT_EQ(acts[0].gpus, h.job(a).gpus);
  EXPECT_TRUE(acts[0].relocates) << "its process is on server 0";
  EXPECT_EQ(h.state().cluster().gpu(acts[0].gpus[0]).server, ServerId(1));
  EXPECT_EQ(h.state().counters().starts, 1);
  EXPECT_EQ(h.state().counters().resumes, 1);
}

// The core says whether a Resume (or Pack) carries the job to other GPUs
// (Action::relocates), from where the job last ran (Job::ran_on): not when
// it is placed back on its own GPUs, nor on the same GPUs of each server
// listed in another interleaving; it does when its servers come in
// another order (another rank 0) or when a move of it failed. A lost
// server leaves the job nowhere: its next run is a start.
TEST(RequeueTest, AResumeRelocatesAJobOnlyWhereItDidNotLastRun) {
  auto owned = std::make_unique<ScriptPolicy>();
  ScriptPolicy* p = owned.get();
  Harness h(std::move(owned), 3);
  const Cluster& c = h.state().cluster();
  auto gpus = [&](std::initializer_list<std::pair<int, int>> at) {
    std::vector<GpuId> out;
    for (auto [server, local] : at)
      out.push_back(c.GpusOf(ServerId(server))[local]);
    return out;
  };
  auto act = [&](std::function<void(Actions&)> f) {
    p->fn = [&](const ClusterState&, const Event&, Actions& out) { f(out); };
    std::vector<Action> acts = h.Send(Tick{});
    p->fn = nullptr;
    return acts;
  };
  // Requeued and placed as it was (a gang on servers 0 and 1), then with its
  // GPUs listed in another order.
  const JobId a = h.Submit(4);
  const std::vector<GpuId> first = gpus({{0, 0}, {0, 1}, {1, 0}, {1, 1}});
  act([&](Actions& out) { out.Start(a, first); });
  h.CompleteAll();
  EXPECT_EQ(h.job(a).ran_on, first);
  auto pause = [&] {
    act([&](Actions& out) { out.Suspend(a); });
    h.CompleteAll();
    act([&](Actions& out) { out.Requeue(a); });
    ASSERT_EQ(h.job(a).state, JobState::kQueued);
  };
  pause();
  EXPECT_EQ(h.job(a).ran_on, first) << "kept while it is queued";
  auto resume = [&](std::vector<GpuId> where) {
    std::vector<Action> acts =
        act([&](Actions& out) { out.Start(a, std::move(where)); });
    EXPECT_EQ(acts.size(), 1u);
    EXPECT_EQ(acts.back().kind, ActionKind::kResume);
    return acts.back();
  };
  EXPECT_FALSE(resume(first).relocates);
  h.CompleteAll();
  pause();
  const std::vector<GpuId> interleaved = gpus({{0, 0}, {1, 0}, {0, 1}, {1, 1}});
  EXPECT_FALSE(resume(interleaved).relocates)
      << "the same GPUs of each server, in order";
  h.CompleteAll();
  EXPECT_EQ(h.job(a).ran_on, interleaved);
  pause();
  EXPECT_TRUE(resume(gpus({{1, 0}, {1, 1}, {0, 0}, {0, 1}})).relocates)
      << "its rank 0 on server 1";
  // That resume fails: the job did not run there, and a resume where it
  // last ran does not relocate it.
  h.Fail(a);
  EXPECT_EQ(h.job(a).ran_on, interleaved);
  act([&](Actions& out) { out.Requeue(a); });
  EXPECT_FALSE(resume(first).relocates);
  h.CompleteAll();
  // Suspended and resumed in place: nothing to carry.
  act([&](Actions& out) { out.Suspend(a); });
  h.CompleteAll();
  EXPECT_FALSE(act([&](Actions& out) { out.Run(a); }).back().relocates);
  h.CompleteAll();
  // Its server lost: requeued with no process anywhere; it starts afresh.
  h.Send(ServerDown{ServerId(1)});
  EXPECT_EQ(h.job(a).state, JobState::kQueued);
  EXPECT_TRUE(h.job(a).ran_on.empty());
  const std::vector<Action> acts = act([&](Actions& out) {
    out.Start(a, gpus({{0, 0}, {0, 1}, {2, 0}, {2, 1}}));
  });
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, ActionKind::kStart);
  EXPECT_FALSE(acts[0].relocates);
}

std::unique_ptr<TiresiasPolicy> Las(TiresiasOptions o = {}) {
  return std::make_unique<TiresiasPolicy>(o);
}

TEST(TiresiasTest, RegisteredByName) {
  auto p = MakePolicy("tiresias-las");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->name(), "tiresias-las");
}

// A long job passes the threshold (3,200 GPU-seconds by default) and goes to
// the lower queue; a new short job then preempts it, and it resumes later.
TEST(TiresiasTest, DemotedLongJobYieldsToNewJob) {
  auto owned = Las();
  TiresiasPolicy* p = owned.get();
  Harness h(std::move(owned), 1);  // 4 GPUs
  const JobId a = h.Submit(4);
  h.CompleteAll();
  ASSERT_EQ(h.job(a).state, JobState::kRunning);

  // Below the threshold a newcomer waits: same queue, later arrival.
  h.Advance(Duration::Seconds(700));  // 2,800 GPU-s
  const JobId b = h.Submit(4);
  EXPECT_EQ(CountKind(h.last(), ActionKind::kSuspend), 0);
  EXPECT_EQ(p->QueueOf(h.state(), a), 0);
  EXPECT_EQ(h.job(b).state, JobState::kQueued);

  h.Advance(Duration::Seconds(100));  // 3,200 GPU-s: demoted at the tick
  auto acts = h.Tick();
  EXPECT_DOUBLE_EQ(p->AttainedService(h.state(), a), 3200);
  EXPECT_EQ(p->QueueOf(h.state(), a), 1);
  ASSERT_EQ(CountKind(acts, ActionKind::kSuspend), 1);
  EXPECT_EQ(h.job(b).state, JobState::kQueued);  // a still holds the GPUs
  h.CompleteAll();
  EXPECT_EQ(h.job(a).state, JobState::kQueued);  // gave its GPUs back
  EXPECT_EQ(h.job(b).state, JobState::kRunning);
  ExpectExclusive(h);

  // Its service stopped counting at the suspension.
  h.Advance(Duration::Seconds(300));
  EXPECT_TRUE(h.Tick().empty());
  EXPECT_DOUBLE_EQ(p->AttainedService(h.state(), a), 3200);
  EXPECT_DOUBLE_EQ(p->AttainedService(h.state(), b), 1200);
  auto after = h.Send(JobFinished{b, true});
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].kind, ActionKind::kResume);
  EXPECT_EQ(after[0].gpus, h.job(a).gpus);
}

// Why a queued job waits under 2D-LAS: the queue it is in, its service,
// and the jobs that go before it and take the GPUs; once chosen, the GPUs
// the job preempted for it has yet to give back; with one queue, the
// order is priority and arrival only.
TEST(TiresiasReasonsTest, AJobSaysWhichQueueItIsInAndWhatGoesBeforeIt) {
  Harness h(Las(), 1);  // 4 GPUs
  const JobId a = h.Submit(4);
  h.CompleteAll();
  h.Advance(Duration::Seconds(1000));  // 4,000 GPU-s: queue 1
  const JobId b = h.Submit(4);         // preempts a
  ASSERT_EQ(h.job(a).in_flight, ActionKind::kSuspend);
  EXPECT_EQ(h.scheduler().ExplainQueue()->Why(b, 4),
            "its turn has come in queue 0 of 2 (0 first): it starts once the "
            "jobs preempted for it give back their GPUs (it needs 4, 0 are "
            "free)");
  h.CompleteAll();  // a requeued, b runs
  ASSERT_EQ(h.job(a).state, JobState::kQueued);
  ASSERT_EQ(h.job(b).state, JobState::kRunning);
  h.Advance(Duration::Seconds(600));
  const JobId c = h.Submit(2);  // b holds the 4 GPUs
  h.CompleteAll();
  const auto reasons = h.scheduler().ExplainQueue();
  EXPECT_EQ(reasons->Why(c, 2),
            "in queue 0 of 2 (0 first), with 0 GPU-seconds of service: 1 job "
            "goes before it (higher priority, a higher queue, or earlier in "
            "its own) and takes 4 of the 4 GPUs up; it needs 2");
  EXPECT_EQ(reasons->Why(a, 4),
            "in queue 1 of 2 (0 first), with 4000 GPU-seconds of service: 1 "
            "job goes before it (higher priority, a higher queue, or earlier "
            "in its own) and takes 4 of the 4 GPUs up; it needs 4; it goes to "
            "queue 0 once it has waited long enough (in 3000 s)");

  // One queue: priority, then arrival.
  TiresiasOptions one;
  one.queue_thresholds.clear();
  Harness f(Las(one), 1);
  f.Submit(2);
  f.Submit(2);
  const JobId x = f.Submit(4);
  f.CompleteAll();
  EXPECT_EQ(f.scheduler().ExplainQueue()->Why(x, 4),
            "with 0 GPU-seconds of service: 2 jobs go before it (higher "
            "priority, or earlier) and take 4 of the 4 GPUs up; it needs 4");
}

// Within a queue, first come first served; a job too large for what is left
// does not block a smaller one behind it.
TEST(TiresiasTest, FifoWithinQueue) {
  Harness h(Las(), 1);
  const JobId a = h.Submit(4);
  const JobId b = h.Submit(4);
  const JobId c = h.Submit(2);
  h.CompleteAll();
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  EXPECT_EQ(h.job(b).state, JobState::kQueued);
  EXPECT_EQ(h.job(c).state, JobState::kQueued);
  h.Advance(Duration::Seconds(60));
  h.Send(JobFinished{a, true});
  h.CompleteAll();
  EXPECT_EQ(h.job(b).state, JobState::kRunning);
  EXPECT_EQ(h.job(c).state, JobState::kQueued);

  Harness h2(Las(), 1);
  const JobId x = h2.Submit(2);
  const JobId y = h2.Submit(4);  // does not fit in the 2 left: skipped
  const JobId z = h2.Submit(2);
  h2.CompleteAll();
  EXPECT_EQ(h2.job(x).state, JobState::kRunning);
  EXPECT_EQ(h2.job(y).state, JobState::kQueued);
  EXPECT_EQ(h2.job(z).state, JobState::kRunning);
}

// Priority comes before attained service: a high-priority job is never
// preempted for a lower one.
TEST(TiresiasTest, PriorityFirst) {
  Harness h(Las(), 1);
  const JobId a = h.Submit(4, /*priority=*/1);
  h.CompleteAll();
  h.Advance(Duration::Seconds(10000));
  const JobId b = h.Submit(4);
  h.Tick();
  h.CompleteAll();
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  EXPECT_EQ(h.job(b).state, JobState::kQueued);
}

// A job left waiting for the starvation limit is promoted to the top queue
// and, being the earlier arrival there, takes its GPUs back.
TEST(TiresiasTest, StarvingJobIsPromoted) {
  TiresiasOptions o;
  o.queue_thresholds = {1000};
  o.starve_limit = Duration::Seconds(600);
  auto owned = Las(o);
  TiresiasPolicy* p = owned.get();
  Harness h(std::move(owned), 1);
  const JobId a = h.Submit(4);
  h.CompleteAll();
  h.Advance(Duration::Seconds(300));  // 1,200 GPU-s: queue 1
  const JobId b = h.Submit(1);        // queue 0: a must make room
  h.CompleteAll();
  EXPECT_EQ(h.job(a).state, JobState::kQueued);
  EXPECT_EQ(h.job(b).state, JobState::kRunning);

  h.Advance(Duration::Seconds(599));
  h.Tick();
  h.CompleteAll();
  EXPECT_EQ(p->Promotions(a), 0);
  EXPECT_EQ(h.job(a).state, JobState::kQueued);

  h.Advance(Duration::Seconds(1));
  h.Tick();
  EXPECT_EQ(p->Promotions(a), 1);
  EXPECT_EQ(p->QueueOf(h.state(), a), 0);
  EXPECT_DOUBLE_EQ(p->AttainedService(h.state(), a), 1200);  // total kept
  h.CompleteAll();
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  EXPECT_EQ(h.job(b).state, JobState::kQueued);
  ExpectExclusive(h);

  // Promoted, it is demoted again after another 1,000 GPU-s.
  h.Advance(Duration::Seconds(250));
  h.Tick();
  EXPECT_EQ(p->QueueOf(h.state(), a), 1);
  h.CompleteAll();
  EXPECT_EQ(h.job(b).state, JobState::kRunning);
}

// A preempted job chosen again before its suspension is done keeps its
// GPUs and resumes in place.
TEST(TiresiasTest, ResumesInPlaceWhenChosenAgainWhileSuspending) {
  Harness h(Las(), 1);
  const JobId a = h.Submit(4);
  h.CompleteAll();
  h.Advance(Duration::Seconds(900));
  const JobId b = h.Submit(4);
  ASSERT_EQ(CountKind(h.last(), ActionKind::kSuspend), 1);
  const auto gpus = h.job(a).gpus;
  h.Send(KillRequest{b, "test"});  // b leaves before a is suspended
  auto acts = h.CompleteAll();
  ASSERT_EQ(acts.size(), 1u);
  EXPECT_EQ(acts[0].kind, ActionKind::kResume);
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  EXPECT_EQ(h.job(a).gpus, gpus);
}

struct Trace {
  std::vector<std::tuple<ActionKind, int32_t, std::vector<GpuId>>> actions;
  int finished = 0;
  int64_t end_s = 0;
};

// Jobs of mixed sizes and lengths on 2 x 4 GPUs, a tick a minute; each job
// finishes once it has had its work. Checks exclusivity at every step.
Trace RunMix() {
  auto owned = Las();
  TiresiasPolicy* p = owned.get();
  Harness h(std::move(owned), 2);
  const int sizes[] = {1, 2, 4, 1, 8, 2, 1, 4, 2, 1, 4, 1};
  const double work[] = {500, 9000, 20000, 300,  40000, 2000,
                         100, 6000, 700,   8000, 3000,  50};
  constexpr int kJobs = 12;
  std::vector<JobId> ids;
  std::vector<bool> done(kJobs, false);
  Trace t;
  auto record = [&](const std::vector<Action>& acts) {
    for (const Action& a : acts)
      t.actions.emplace_back(a.kind, a.job.value, a.gpus);
  };
  for (int64_t s = 0; s < 100000 && t.finished < kJobs; s += 60) {
    if (ids.size() < kJobs && s % 300 == 0) {
      ids.push_back(h.Submit(sizes[ids.size()]));
      record(h.last());
    }
    record(h.Tick());
    record(h.CompleteAll());
    ExpectExclusive(h);
    for (int i = 0; i < static_cast<int>(ids.size()); ++i) {
      if (done[i] || h.job(ids[i]).state != JobState::kRunning) continue;
      if (p->AttainedService(h.state(), ids[i]) >= work[i]) {
        done[i] = true;
        ++t.finished;
        record(h.Send(JobFinished{ids[i], true}));
        record(h.CompleteAll());
        ExpectExclusive(h);
      }
    }
    h.Advance(Duration::Seconds(60));
    t.end_s = s;
  }
  return t;
}

TEST(TiresiasTest, ExclusiveLiveAndDeterministic) {
  const Trace t1 = RunMix();
  EXPECT_EQ(t1.finished, 12);
  int suspends = 0;
  for (const auto& a : t1.actions)
    suspends += std::get<0>(a) == ActionKind::kSuspend;
  EXPECT_GT(suspends, 0);  // it did preempt
  const Trace t2 = RunMix();
  EXPECT_EQ(t1.actions, t2.actions);
  EXPECT_EQ(t1.end_s, t2.end_s);
}

}  // namespace
}  // namespace gandiva::core
