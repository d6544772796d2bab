#include "core/policies/tiresias.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <tuple>

#include "core/policies/placement.h"
#include "core/policies/registry.h"
#include "core/rng.h"
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

// 2D-LAS as a sort of every live job at each event, with every account
// walked: what TiresiasPolicy must decide alike, action for action.
class SortEveryJobLas final : public Policy {
 public:
  explicit SortEveryJobLas(TiresiasOptions o) : o_(std::move(o)) {
    std::sort(o_.queue_thresholds.begin(), o_.queue_thresholds.end());
  }
  std::string_view name() const override { return "tiresias-las"; }

  double Attained(const ClusterState& state, JobId id) const {
    auto it = accounts_.find(id);
    return it == accounts_.end()
               ? 0
               : Attained(state.job(id), it->second, state.now());
  }
  int Level(const ClusterState& state, JobId id) const {
    auto it = accounts_.find(id);
    return it == accounts_.end()
               ? 0
               : Level(state.job(id), it->second, state.now());
  }
  int Promotions(JobId id) const {
    auto it = accounts_.find(id);
    return it == accounts_.end() ? 0 : it->second.promotions;
  }

  void decide(const ClusterState& state, const Event& event,
              Actions& out) override {
    if (std::holds_alternative<ProfileReport>(event.body)) return;
    if (const auto* e = std::get_if<JobArrived>(&event.body)) {
      Account a;
      a.waiting_from = state.now();
      accounts_[e->id] = a;
    }
    const Time now = state.now();
    for (auto it = accounts_.begin(); it != accounts_.end();) {
      const Job& j = state.job(it->first);
      Account& a = it->second;
      if (IsTerminal(j.state)) {
        it = accounts_.erase(it);
        continue;
      }
      if (Training(j) && a.run_from == Time::Never()) {
        a.run_from = a.closed_at == Time::Never()
                         ? j.run_since
                         : std::max(j.run_since, a.closed_at);
      } else if (!Training(j) && a.run_from != Time::Never()) {
        Close(j, a, now);
      }
      ++it;
    }
    if (const auto* e = std::get_if<ActionFailed>(&event.body)) {
      const Job& j = state.job(e->job);
      if (j.state == JobState::kSuspended && !j.busy()) out.Requeue(j.id);
    }
    Plan(state, out);
  }

 private:
  struct Account {
    double service = 0;
    double offset = 0;
    Time run_from = Time::Never();
    Time closed_at = Time::Never();
    Time waiting_from = Time::Zero();
    int promotions = 0;
  };
  static bool Training(const Job& j) {
    return j.state == JobState::kRunning && !j.busy();
  }
  static bool Waiting(const Job& j) {
    return j.state == JobState::kQueued || j.state == JobState::kSuspended ||
           (j.state == JobState::kRunning &&
            j.in_flight == ActionKind::kSuspend);
  }
  double Attained(const Job& job, const Account& a, Time now) const {
    double s = a.service;
    if (a.run_from != Time::Never() && now > a.run_from) {
      s += job.spec.gpus * (now - a.run_from).seconds();
    }
    return s;
  }
  int Level(const Job& job, const Account& a, Time now) const {
    const double s = Attained(job, a, now) - a.offset;
    const auto& t = o_.queue_thresholds;
    return static_cast<int>(std::upper_bound(t.begin(), t.end(), s) -
                            t.begin());
  }
  void Close(const Job& job, Account& a, Time now) {
    if (a.run_from == Time::Never()) return;
    a.service = Attained(job, a, now);
    a.run_from = Time::Never();
    a.closed_at = now;
    a.waiting_from = now;
  }
  void Plan(const ClusterState& state, Actions& out) {
    const Time now = state.now();
    const Cluster& cluster = state.cluster();
    using Key = std::tuple<int, int, Time, JobId>;
    std::vector<Key> order;
    for (auto& [id, a] : accounts_) {
      const Job& j = state.job(id);
      int level = Level(j, a, now);
      if (level > 0 && Waiting(j) && !o_.starve_limit.is_infinite() &&
          now - a.waiting_from >= o_.starve_limit) {
        a.offset = Attained(j, a, now);
        a.waiting_from = now;
        ++a.promotions;
        level = 0;
      }
      order.emplace_back(-j.spec.priority, level, j.submitted, id);
    }
    std::sort(order.begin(), order.end());
    std::vector<bool> desired(order.size(), false);
    int left = cluster.up_gpus();
    for (size_t i = 0; i < order.size(); ++i) {
      const Job& j = state.job(std::get<3>(order[i]));
      if (j.held || j.awaits_start_retry(now)) continue;
      if (j.spec.gpus <= left) {
        desired[i] = true;
        left -= j.spec.gpus;
      }
    }
    for (size_t i = 0; i < order.size(); ++i) {
      const JobId id = std::get<3>(order[i]);
      const Job& j = state.job(id);
      if (j.busy()) continue;
      if (j.state == JobState::kRunning && !desired[i] && !j.held) {
        Close(j, accounts_.at(id), now);
        out.Suspend(id);
      } else if (j.state == JobState::kSuspended) {
        bool idle = desired[i];
        for (GpuId g : j.gpus) idle = idle && cluster.gpu(g).active == 0;
        if (idle) {
          out.Run(id);
        } else {
          out.Requeue(id);
        }
      }
    }
    for (size_t i = 0; i < order.size() && cluster.free_gpus() > 0; ++i) {
      if (!desired[i]) continue;
      const Job& j = state.job(std::get<3>(order[i]));
      if (j.state != JobState::kQueued) continue;
      auto find = [&]() -> std::optional<std::vector<GpuId>> {
        const int need = j.spec.gpus;
        if (cluster.free_gpus() < need) return std::nullopt;
        std::optional<std::vector<GpuId>> gpus;
        cluster.ForEachWithFree(need, [&](const Server& s) {
          gpus = FreeGpusOn(cluster, s, need);
          return true;
        });
        if (!gpus) gpus = GatherFreeGpus(cluster, need);
        return gpus;
      };
      if (auto gpus = PlaceAvoidingFailedStarts(cluster, j, find)) {
        out.Start(j.id, std::move(*gpus));
      }
    }
  }

  TiresiasOptions o_;
  std::map<JobId, Account> accounts_;
};

// One scheduler driven by events a test makes up, with the actions that
// await a report.
struct Driven {
  explicit Driven(std::unique_ptr<Policy> p) : scheduler(std::move(p)) {}
  // The actions an event caused, or why it was refused.
  std::vector<Action> Send(Time at, EventBody body, Status* status) {
    std::vector<Action> out;
    *status = scheduler.Handle(Event{at, std::move(body)}, out);
    for (const Action& a : out) {
      if (a.kind != ActionKind::kKill && a.kind != ActionKind::kSetPriority) {
        pending.push_back(a);
      }
    }
    return out;
  }
  Scheduler scheduler;
  std::vector<Action> pending;
};

using ActionRow =
    std::tuple<ActionKind, int32_t, std::vector<GpuId>, bool, int, int64_t>;
std::vector<ActionRow> Rows(const std::vector<Action>& acts) {
  std::vector<ActionRow> rows;
  for (const Action& a : acts) {
    rows.emplace_back(a.kind, a.job.value, a.gpus, a.relocates, a.priority,
                      a.id.value);
  }
  return rows;
}

// Random arrivals of jobs of 1 to 16 GPUs and two priorities, ends, kills,
// ticks, mechanisms done or failed (for good or not, so starts wait to be
// tried again), holds and releases, priority changes, reports, lost
// processes, drains, cordons, operators' migrations, servers lost and back,
// on 4 servers of 4 GPUs and 2 of 8; thresholds that demote
// within minutes, a short starvation limit. TiresiasPolicy, which looks only
// at the jobs each event changed and at its timers, takes the same actions
// as a sort of every job at every event, and measures the same service,
// queues and promotions. Halfway, it is restored from a snapshot into a
// new scheduler and goes on alike.
void ExpectSameAsSortingEveryJob(TiresiasOptions o, uint64_t seed) {
  Driven ref(std::make_unique<SortEveryJobLas>(o));
  auto las = std::make_unique<Driven>(std::make_unique<TiresiasPolicy>(o));
  auto* ref_policy =
      static_cast<const SortEveryJobLas*>(&ref.scheduler.policy());
  Rng rng(seed);
  Time now = Time::Zero();
  // Sends the event to both; an operator's request may be refused, alike.
  auto both = [&](EventBody body) {
    Status want_status, got_status;
    const auto want = ref.Send(now, body, &want_status);
    const auto got = las->Send(now, body, &got_status);
    EXPECT_EQ(got_status.ToString(), want_status.ToString());
    EXPECT_EQ(Rows(got), Rows(want)) << "at " << now.micros() << "us";
    return !::testing::Test::HasFailure();
  };
  for (int i = 0; i < 6; ++i) {
    ServerSpec spec;
    spec.name = "s" + std::to_string(i);
    spec.gpus = i < 4 ? 4 : 8;
    ASSERT_TRUE(both(ServerUp{spec, ServerId()}));
  }
  std::vector<bool> down(6, false);
  int32_t next_id = 0;
  constexpr int kSteps = 4000;
  for (int step = 0; step < kSteps; ++step) {
    if (step == kSteps / 2) {
      auto restored =
          std::make_unique<Driven>(std::make_unique<TiresiasPolicy>(o));
      ASSERT_TRUE(restored->scheduler.Restore(las->scheduler.Snapshot()).ok());
      restored->pending = las->pending;
      las = std::move(restored);
    }
    const ClusterState& st = ref.scheduler.state();
    std::vector<JobId> live;
    st.ForEachJob([&](const Job& j) {
      if (!IsTerminal(j.state)) live.push_back(j.id);
    });
    const JobId some = live.empty() ? JobId() : live[rng.Below(live.size())];
    const int what = static_cast<int>(rng.Below(100));
    bool ok = true;
    if (what < 14) {
      JobSpec spec;
      spec.gpus = 1 << rng.Below(5);
      spec.priority = rng.Bernoulli(0.1) ? 1 : 0;
      ok = both(JobArrived{JobId(next_id++), spec});
    } else if (what < 44 && !ref.pending.empty()) {
      const size_t k = rng.Below(ref.pending.size());
      const Action a = ref.pending[k];
      ref.pending.erase(ref.pending.begin() + static_cast<long>(k));
      las->pending.erase(las->pending.begin() + static_cast<long>(k));
      if (rng.Bernoulli(0.1)) {
        ok = both(
            ActionFailed{a.id, a.job, Duration(), "test", rng.Bernoulli(0.3)});
      } else {
        ok = both(ActionDone{a.id, a.job, Duration()});
      }
    } else if (what < 64) {
      now += Duration::Seconds(static_cast<int64_t>(rng.Below(120)));
      ok = both(Tick{});
    } else if (what < 72 && some.valid() &&
               st.job(some).state == JobState::kRunning) {
      ok = both(JobFinished{some, rng.Bernoulli(0.9)});
    } else if (what < 74 && some.valid()) {
      ok = both(KillRequest{some, "test"});
    } else if (what < 78 && some.valid()) {
      ok = both(HoldRequest{some, !st.job(some).held});
    } else if (what < 81 && some.valid()) {
      ok = both(PriorityRequest{some, static_cast<int>(rng.Below(3))});
    } else if (what < 86 && some.valid()) {
      ok = both(ProfileReport{some, 1.0, 10, 1.0, 0.5});
    } else if (what < 87 && some.valid()) {
      ok = both(ProcessLost{some, rng.Bernoulli(0.5)});
    } else if (what < 88) {
      const ServerId s(static_cast<int>(rng.Below(6)));
      if (rng.Bernoulli(0.5)) {
        ok = both(DrainRequest{s, rng.Bernoulli(0.2)});
      } else if (rng.Bernoulli(0.5)) {
        ok = both(CordonRequest{s, !st.cluster().server(s).cordoned});
      } else if (some.valid()) {
        MechanismRequest m;
        m.job = some;
        m.server = s;
        ok = both(m);
      }
    } else if (what < 90) {
      const int s = static_cast<int>(rng.Below(6));
      if (down[s]) {
        ok = both(ServerUp{ServerSpec{}, ServerId(s)});
      } else {
        // Reports of mechanisms on it that come later are stale.
        ok = both(ServerDown{ServerId(s)});
      }
      down[s] = !down[s];
    } else {
      now += Duration::Seconds(static_cast<int64_t>(rng.Below(900)));
      ok = both(Tick{});
    }
    ASSERT_TRUE(ok) << "step " << step;
    const auto* las_policy =
        static_cast<const TiresiasPolicy*>(&las->scheduler.policy());
    for (JobId id : live) {
      ASSERT_EQ(las_policy->AttainedService(las->scheduler.state(), id),
                ref_policy->Attained(st, id))
          << "job " << id.value << ", step " << step;
      ASSERT_EQ(las_policy->QueueOf(las->scheduler.state(), id),
                ref_policy->Level(st, id));
      ASSERT_EQ(las_policy->Promotions(id), ref_policy->Promotions(id));
    }
  }
}

TEST(TiresiasTest, TheSameActionsAsASortOfEveryJobAtEachEvent) {
  TiresiasOptions o;
  o.queue_thresholds = {600, 4000};
  o.starve_limit = Duration::Seconds(1800);
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE(seed);
    ExpectSameAsSortingEveryJob(o, seed);
  }
}

// Edge cases of the queues: one queue and no starvation; a threshold of 0,
// so that a job promoted for starving is in a lower queue again at the next
// pass; no thresholds reached within a run.
TEST(TiresiasTest, TheSameActionsAsASortOfEveryJobWithOtherQueues) {
  TiresiasOptions one;
  one.queue_thresholds.clear();
  one.starve_limit = Duration::Infinite();
  ExpectSameAsSortingEveryJob(one, 4);
  TiresiasOptions zero;
  zero.queue_thresholds = {0, 300};
  zero.starve_limit = Duration::Seconds(600);
  ExpectSameAsSortingEveryJob(zero, 5);
  TiresiasOptions far;
  far.queue_thresholds = {1e12};
  ExpectSameAsSortingEveryJob(far, 6);
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
