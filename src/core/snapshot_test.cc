// Scheduler::Snapshot and Restore: a restored core holds the same state and
// takes the same actions; bad bytes are refused and change nothing.
#include "core/snapshot.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/policies/registry.h"
#include "core/scheduler.h"
#include "core/test_util.h"

namespace gandiva::core {
namespace {

using testing::Harness;

std::unique_ptr<Policy> Make(const std::string& name) {
  auto p = MakePolicy(name);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? std::move(*p) : nullptr;
}

ServerSpec Spec() {
  ServerSpec s;
  s.gpus = 4;
  s.gpu_memory_gb = 16;
  return s;
}

// The running jobs with no mechanism under way, in id order.
std::vector<JobId> Running(const ClusterState& st) {
  std::vector<JobId> out;
  st.ForEachJob([&](const Job& j) {
    if (j.state == JobState::kRunning && !j.busy()) out.push_back(j.id);
  });
  return out;
}

// A busy history: running, packed, held, failed-to-move, killed and queued
// jobs, a server that went down and came back, rates measured.
void MakeHistory(Harness& h) {
  const JobId a = h.Submit(1);
  const JobId b = h.Submit(1);
  const JobId c = h.Submit(2, 0, /*elastic=*/true);
  const JobId d = h.Submit(4);
  const JobId e = h.Submit(4, /*priority=*/1);
  h.CompleteAll();
  for (int i = 0; i < 8; ++i) {
    h.Advance(Duration::Seconds(2));
    for (JobId j : {a, b, c, d, e}) {
      if (h.job(j).state == JobState::kRunning) {
        h.Send(ProfileReport{j, 10.0 + j.value, 100 * i, 3.5, 0.4});
      }
    }
  }
  // A migration that fails, not for good: the job is held back from moves.
  const int from = h.state().cluster().gpu(h.job(a).gpus[0]).server.value;
  bool moved = false;
  for (int to = 0; to < 4 && !moved; ++to) {
    if (to == from) continue;
    moved = h.TrySend(MechanismRequest{MechanismRequest::Kind::kMigrate, a,
                                       ServerId(to), JobId(), 0})
                .ok();
  }
  ASSERT_TRUE(moved);
  h.Fail(a);
  ASSERT_EQ(h.job(a).move_failures, 1);
  h.Send(HoldRequest{b, true});
  h.CompleteAll();
  h.Send(KillRequest{e, "test"});
  h.Send(ServerDown{ServerId(2)});
  h.Advance(Duration::Seconds(40));
  h.Tick();
  h.CompleteAll();
  h.Send(ServerUp{Spec(), ServerId(2)});
  h.Send(CordonRequest{ServerId(3), true});
  h.Submit(1);
  h.Submit(2);
  h.Send(PriorityRequest{d, 3});
  h.CompleteAll();
  h.Advance(Duration::Seconds(90));
  h.Tick();
}

// After MakeHistory (not part of it: older versions' test data hold its
// state): a server that cannot save images of processes, and a job the
// world learned is restartable.
void LearnCarriers(Harness& h) {
  ServerSpec no_images = Spec();
  no_images.process_images_unusable = "turned off";
  h.Send(ServerUp{no_images, ServerId(2)});
  h.Send(CarrierKnown{JobId(2), Carrier::kRestart});
  ASSERT_EQ(h.job(JobId(2)).spec.carrier, Carrier::kRestart);
}

// Two jobs time-slicing one GPU are packed, and the pack judged good: the
// policy remembers the pair.
void MakePackHistory(Harness& h) {
  const JobId x = h.Submit(1);
  const JobId y = h.Submit(1);
  h.CompleteAll();
  for (int round = 0; round < 40; ++round) {
    h.Advance(Duration::Seconds(15));
    h.Tick();
    h.CompleteAll();
    for (JobId j : {x, y}) {
      const Job& job = h.job(j);
      if (job.state == JobState::kRunning && !job.busy()) {
        h.Send(ProfileReport{j, job.packed_with.valid() ? 8.0 : 10.0,
                             100 * round, 2.0, 0.4});
      }
    }
    h.CompleteAll();
  }
  EXPECT_GT(h.job(x).packs + h.job(y).packs, 0);
}

// The state that decides what a core does next is the same in both.
void ExpectSameState(const ClusterState& a, const ClusterState& b) {
  EXPECT_EQ(a.now(), b.now());
  EXPECT_EQ(a.counters().events, b.counters().events);
  EXPECT_EQ(a.queue(), b.queue());
  EXPECT_EQ(a.waiting(), b.waiting());
  EXPECT_EQ(a.queue_by_size(), b.queue_by_size());
  EXPECT_EQ(a.placed_jobs(), b.placed_jobs());
  EXPECT_EQ(a.cluster().free_gpus(), b.cluster().free_gpus());
  EXPECT_EQ(a.cluster().up_gpus(), b.cluster().up_gpus());
  EXPECT_EQ(a.cluster().height(), b.cluster().height());
  for (const Server& s : a.cluster().servers()) {
    const Server& t = b.cluster().server(s.id);
    EXPECT_EQ(s.demand, t.demand);
    EXPECT_EQ(s.free_gpus, t.free_gpus);
    EXPECT_EQ(s.affinity, t.affinity);
    EXPECT_EQ(s.jobs, t.jobs);
    EXPECT_EQ(s.up, t.up);
    EXPECT_EQ(s.spec.process_images_unusable, t.spec.process_images_unusable);
  }
  ASSERT_EQ(a.job_id_limit(), b.job_id_limit());
  EXPECT_EQ(a.forgotten_jobs(), b.forgotten_jobs());
  for (int32_t i = 0; i < a.job_id_limit(); ++i) {
    const JobId id(i);
    ASSERT_EQ(a.has_job(id), b.has_job(id)) << i;
    EXPECT_EQ(a.forgotten(id), b.forgotten(id)) << i;
    if (!a.has_job(id)) continue;
    EXPECT_EQ(a.job(id).state, b.job(id).state);
    EXPECT_EQ(a.job(id).gpus, b.job(id).gpus);
    // Where a live job last ran (older versions did not say where an
    // ended one did).
    if (!IsTerminal(a.job(id).state)) {
      EXPECT_EQ(a.job(id).ran_on, b.job(id).ran_on) << i;
    }
    EXPECT_EQ(a.job(id).spec.carrier, b.job(id).spec.carrier);
    EXPECT_EQ(a.job(id).move_retry_at, b.job(id).move_retry_at);
    EXPECT_EQ(a.job(id).profile.rate_alone, b.job(id).profile.rate_alone);
    EXPECT_EQ(a.job(id).restarting_from_checkpoint,
              b.job(id).restarting_from_checkpoint);
    EXPECT_EQ(a.job(id).restarts, b.job(id).restarts);
  }
}

TEST(SnapshotTest, ARestoredSchedulerHoldsTheSameState) {
  for (const char* policy :
       {"gandiva", "fifo", "tiresias-las", "gandiva-fair", "packs"}) {
    SCOPED_TRACE(policy);
    const bool packs = std::string(policy) == "packs";
    if (packs) policy = "gandiva";
    ServerSpec one = Spec();
    one.gpus = 1;
    Harness h(Make(policy), packs ? 1 : 4, packs ? one : Spec());
    if (packs) {
      MakePackHistory(h);
    } else {
      MakeHistory(h);
      LearnCarriers(h);
    }
    const std::string bytes = h.scheduler().Snapshot();
    Scheduler restored(Make(policy));
    ASSERT_TRUE(restored.Restore(bytes).ok());
    // Every field read back is written again the same.
    EXPECT_EQ(restored.Snapshot(), bytes);
    ExpectSameState(h.state(), restored.state());
  }
}

bool SameAction(const Action& x, const Action& y) {
  return x.id == y.id && x.kind == y.kind && x.job == y.job &&
         x.gpus == y.gpus && x.peer == y.peer && x.launch == y.launch &&
         x.relocates == y.relocates && x.priority == y.priority &&
         x.reason == y.reason;
}

// The original and the restored core, fed the same events from here on,
// take the same actions and end in the same state.
// Feeds two cores the same events, a round at a time, and expects the same
// actions of both: each round a job arrives every other round, a tick, the
// running jobs' rates, now and then a job finishing or the queue's head
// killed, then the actions of the round done (one in five failed). The
// second core is looked up at each event: a test may replace it between
// rounds.
class Twins {
 public:
  Twins(Scheduler& first, std::function<Scheduler&()> second, Time now)
      : first_(first),
        second_(std::move(second)),
        now_(now),
        next_job_(first.state().job_id_limit()) {}

  void Round(int round) {
    now_ += Duration::Seconds(15);
    if (round % 2 == 0) {
      JobSpec s;
      s.gpus = round % 12 == 0 ? 2 : 1;
      s.elastic = round % 21 == 0;
      s.vc = round % 4 == 0 ? "a" : "b";
      s.owner = round % 3 == 0 ? "ann" : "bob";
      Both(JobArrived{JobId(next_job_++), s});
    }
    Both(Tick{});
    for (JobId id : Running(first_.state())) {
      Both(ProfileReport{id, 5.0 + (id.value * 7 + round) % 11, round * 50, 2.0,
                         0.5});
    }
    if (round % 3 == 1) {
      const std::vector<JobId> running = Running(first_.state());
      if (!running.empty()) Both(JobFinished{running.front(), true});
    }
    if (round % 7 == 2 && !first_.state().queue().empty()) {
      Both(KillRequest{first_.state().queue().begin()->id, "test"});
    }
    std::vector<Action> now_pending;
    now_pending.swap(pending_);
    for (size_t i = 0; i < now_pending.size(); ++i) {
      const Action& a = now_pending[i];
      if ((i + round) % 5 == 0) {
        Both(ActionFailed{a.id, a.job, Duration::Seconds(1), "test", false});
      } else {
        Both(ActionDone{a.id, a.job, Duration::Seconds(1)});
      }
    }
  }
  int actions() const { return actions_; }

 private:
  void Both(EventBody body) {
    std::vector<Action> x, y;
    const Status sx = first_.Handle(Event{now_, body}, x);
    const Status sy = second_().Handle(Event{now_, body}, y);
    ASSERT_EQ(sx.ok(), sy.ok()) << sx.ToString() << " / " << sy.ToString();
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_TRUE(SameAction(x[i], y[i])) << i;
      if (x[i].kind != ActionKind::kKill &&
          x[i].kind != ActionKind::kSetPriority) {
        pending_.push_back(x[i]);
      }
    }
    actions_ += static_cast<int>(x.size());
  }

  Scheduler& first_;
  std::function<Scheduler&()> second_;
  Time now_;
  int32_t next_job_;
  std::vector<Action> pending_;
  int actions_ = 0;
};

TEST(SnapshotTest, ARestoredSchedulerTakesTheSameActions) {
  for (const char* policy :
       {"gandiva", "fifo", "tiresias-las", "gandiva-fair"}) {
    SCOPED_TRACE(policy);
    Harness h(Make(policy), 4, Spec());
    MakeHistory(h);
    Scheduler& original = h.scheduler();
    Scheduler restored(Make(policy));
    ASSERT_TRUE(restored.Restore(original.Snapshot()).ok());
    Twins twins(
        original, [&]() -> Scheduler& { return restored; }, h.now());
    for (int round = 0; round < 60; ++round) twins.Round(round);
    EXPECT_GT(twins.actions(), 12);
    EXPECT_EQ(original.Snapshot(), restored.Snapshot());
  }
}

// A core that forgets its jobs as they end (and is restored now and then
// from its own snapshot, which holds the forgotten ids) takes the same
// actions as one that keeps them: forgetting changes no decision, and
// leaves no policy looking up a job that is gone.
TEST(SnapshotTest, ForgettingEndedJobsChangesNoDecision) {
  for (const char* policy : {"gandiva", "fifo", "fifo-vc", "tiresias-las"}) {
    SCOPED_TRACE(policy);
    auto make = [&] {
      if (std::string(policy) != "fifo-vc") return Make(policy);
      PolicyOptions o;
      o.fifo.vc_quotas = {{"a", 2}, {"b", 3}};  // they bind
      auto p = MakePolicy("fifo", o);
      EXPECT_TRUE(p.ok());
      return std::move(*p);
    };
    Harness h(make(), 4, Spec());
    MakeHistory(h);
    Scheduler& keeper = h.scheduler();
    auto forgetter = std::make_unique<Scheduler>(make());
    ASSERT_TRUE(forgetter->Restore(keeper.Snapshot()).ok());
    Twins twins(
        keeper, [&]() -> Scheduler& { return *forgetter; }, h.now());
    for (int round = 0; round < 80; ++round) {
      twins.Round(round);
      std::vector<JobId> ended;
      forgetter->state().ForEachJob([&](const Job& j) {
        if (IsTerminal(j.state)) ended.push_back(j.id);
      });
      const Status f = forgetter->Forget(ended);
      ASSERT_TRUE(f.ok()) << f.ToString();
      if (round % 10 == 9) {
        auto again = std::make_unique<Scheduler>(make());
        const Status r = again->Restore(forgetter->Snapshot());
        ASSERT_TRUE(r.ok()) << r.ToString();
        ExpectSameState(forgetter->state(), again->state());
        forgetter = std::move(again);
      }
    }
    EXPECT_GT(twins.actions(), 12);
    int ended = 0;
    for (int32_t i = 0; i < keeper.state().job_id_limit(); ++i) {
      const JobId id(i);
      if (!keeper.state().has_job(id)) continue;
      const Job& j = keeper.state().job(id);
      if (IsTerminal(j.state)) {
        ++ended;
        EXPECT_TRUE(forgetter->state().forgotten(id)) << i;
        EXPECT_FALSE(forgetter->state().has_job(id)) << i;
      } else {
        ASSERT_TRUE(forgetter->state().has_job(id)) << i;
        EXPECT_EQ(j.state, forgetter->state().job(id).state) << i;
        EXPECT_EQ(j.gpus, forgetter->state().job(id).gpus) << i;
      }
    }
    EXPECT_GT(ended, 10);
    EXPECT_EQ(forgetter->state().forgotten_jobs(), ended);
    EXPECT_EQ(keeper.state().queue(), forgetter->state().queue());
    EXPECT_EQ(keeper.state().waiting(), forgetter->state().waiting());
  }
}

// Only ended jobs are forgotten; a refused call changes nothing; a
// forgotten job's id is never used again, and events naming it are refused.
TEST(SnapshotTest, OnlyEndedJobsAreForgottenAndTheirIdsStayUsed) {
  Harness h(Make("gandiva"), 1, Spec());
  const JobId a = h.Submit(1);
  const JobId b = h.Submit(1);
  h.CompleteAll();
  h.Send(KillRequest{a, "test"});
  ASSERT_TRUE(IsTerminal(h.job(a).state));
  ASSERT_FALSE(IsTerminal(h.job(b).state));
  Scheduler& s = h.scheduler();

  const std::vector<JobId> both_ids = {a, b};
  Status st = s.Forget(both_ids);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("job 1"), std::string::npos) << st.message();
  EXPECT_TRUE(s.state().has_job(a));
  EXPECT_EQ(s.state().forgotten_jobs(), 0);
  const std::vector<JobId> unknown = {a, JobId(7)};
  EXPECT_EQ(s.Forget(unknown).code(), StatusCode::kNotFound);
  EXPECT_TRUE(s.state().has_job(a));

  const std::vector<JobId> just_a = {a, a};
  ASSERT_TRUE(s.Forget(just_a).ok());
  EXPECT_FALSE(s.state().has_job(a));
  EXPECT_TRUE(s.state().forgotten(a));
  EXPECT_FALSE(s.state().forgotten(b));
  EXPECT_EQ(s.state().forgotten_jobs(), 1);
  EXPECT_EQ(h.TrySend(JobArrived{a, JobSpec{}}).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(h.TrySend(JobFinished{a, true}).code(), StatusCode::kNotFound);
  EXPECT_EQ(h.TrySend(KillRequest{a, "again"}).code(), StatusCode::kNotFound);

  // Old snapshots (a slot per id) hold none forgotten; this one holds it.
  Scheduler restored(Make("gandiva"));
  ASSERT_TRUE(restored.Restore(s.Snapshot()).ok());
  ExpectSameState(s.state(), restored.state());
  EXPECT_TRUE(restored.state().forgotten(a));
}

// A job waiting to try its start again waits on in the restored core, and
// both start it at the same time.
TEST(SnapshotTest, AJobWaitingToStartAgainWaitsOnAfterARestore) {
  for (const char* policy : {"gandiva", "fifo", "tiresias-las"}) {
    SCOPED_TRACE(policy);
    Harness h(Make(policy), 1, Spec());
    const JobId a = h.Submit(1);
    h.Fail(a);
    ASSERT_EQ(h.state().start_retries().size(), 1u);
    Scheduler restored(Make(policy));
    ASSERT_TRUE(restored.Restore(h.scheduler().Snapshot()).ok());
    EXPECT_EQ(restored.state().start_retries(), h.state().start_retries());
    EXPECT_TRUE(restored.state().queue().empty());
    EXPECT_EQ(restored.state().job(a).start_retry_at, h.job(a).start_retry_at);
    for (const Duration d : {Duration::Seconds(5), Duration::Seconds(5)}) {
      h.Advance(d);
      std::vector<Action> mine;
      ASSERT_TRUE(restored.Handle(Event{h.now(), Tick{}}, mine).ok());
      const std::vector<Action> theirs = h.Tick();
      ASSERT_EQ(mine.size(), theirs.size());
      for (size_t i = 0; i < mine.size(); ++i) {
        EXPECT_EQ(mine[i].kind, theirs[i].kind);
        EXPECT_EQ(mine[i].gpus, theirs[i].gpus);
      }
    }
    EXPECT_EQ(h.job(a).state, JobState::kRunning);
    EXPECT_EQ(restored.Snapshot(), h.scheduler().Snapshot());
  }
}

// A restart from a checkpoint under way when the snapshot was taken: the
// restored scheduler knows a failure of it means a restart from the
// beginning, and counts restarts on.
TEST(SnapshotTest, ARestartUnderWayGoesOnAfterARestore) {
  Harness h(Make("fifo"), 1, Spec());
  const JobId a = h.Submit(1);
  h.CompleteAll();
  h.Send(ProcessLost{a, true});
  h.Complete(a);
  const auto restart = h.Send(ProcessLost{a, true});
  ASSERT_EQ(restart.size(), 1u);
  Scheduler restored(Make("fifo"));
  ASSERT_TRUE(restored.Restore(h.scheduler().Snapshot()).ok());
  ExpectSameState(h.state(), restored.state());
  EXPECT_TRUE(restored.state().job(a).restarting_from_checkpoint);
  EXPECT_EQ(restored.state().job(a).restarts, 1);
  std::vector<Action> mine;
  ASSERT_TRUE(
      restored
          .Handle(Event{h.now(), ActionFailed{restart[0].id, a, Duration(),
                                              "unreadable"}},
                  mine)
          .ok());
  const std::vector<Action> theirs = h.Fail(a);
  ASSERT_EQ(mine.size(), 1u);
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(mine[0].kind, ActionKind::kRestart);
  EXPECT_TRUE(mine[0].launch);
  EXPECT_EQ(theirs[0].launch, mine[0].launch);
  EXPECT_EQ(restored.Snapshot(), h.scheduler().Snapshot());
}

// Snapshots written by older versions (testdata/README.md) of the same
// history: a daemon whose database holds one must still start, in the
// same state (a live job's Job::ran_on, which version 5 did not save,
// included).
TEST(SnapshotTest, OlderVersionsAreRead) {
  // Versions 1 and 2 counted a failed migration as the job's too
  // (MakeHistory's first job has one).
  const std::pair<const char*, int> files[] = {
      {"snapshot_v1_gandiva.bin", 1}, {"snapshot_v2_gandiva.bin", 1},
      {"snapshot_v5_gandiva.bin", 0}, {"snapshot_v6_gandiva.bin", 0},
      {"snapshot_v7_gandiva.bin", 0}, {"snapshot_v8_gandiva.bin", 0}};
  for (const auto& [name, failed_migrations_counted] : files) {
    SCOPED_TRACE(name);
    std::ifstream f(std::string(GANDIVA_CORE_TESTDATA "/") + name,
                    std::ios::binary);
    ASSERT_TRUE(f) << "missing test data";
    f.seekg(0, std::ios::end);
    std::string bytes(static_cast<size_t>(f.tellg()), '\0');
    f.seekg(0);
    f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(f);
    Scheduler old(Make("gandiva"));
    const Status st = old.Restore(bytes);
    ASSERT_TRUE(st.ok()) << st.ToString();
    Harness h(Make("gandiva"), 4, Spec());
    MakeHistory(h);
    ExpectSameState(h.state(), old.state());
    // The jobs' mechanism counts.
    for (int32_t i = 0; i < h.state().job_id_limit(); ++i) {
      if (!h.state().has_job(JobId(i))) continue;
      const Job& now_i = h.state().job(JobId(i));
      const Job& then_i = old.state().job(JobId(i));
      EXPECT_EQ(now_i.suspends, then_i.suspends) << i;
      EXPECT_EQ(now_i.resumes, then_i.resumes) << i;
      EXPECT_EQ(now_i.packs, then_i.packs) << i;
      EXPECT_EQ(now_i.resizes, then_i.resizes) << i;
      EXPECT_EQ(now_i.migrations + (i == 0 ? failed_migrations_counted : 0),
                then_i.migrations)
          << i;
      EXPECT_EQ(now_i.start_retry_at, then_i.start_retry_at) << i;
      EXPECT_EQ(now_i.held, then_i.held) << i;
    }
    EXPECT_EQ(h.state().counters().migrations,
              old.state().counters().migrations);
  }
}

// The GPU-time used by queue and user is kept; a snapshot that holds none
// (an older version's, or a scheduler's that kept none) starts it afresh,
// the running jobs charged from the snapshot's time.
TEST(SnapshotTest, UsageIsKeptAcrossARestore) {
  SchedulerOptions keep;
  keep.keep_usage = Duration::Seconds(7 * 24 * 3600);
  Harness h(Make("fifo"), 1, Spec(), keep);
  h.Submit(2, 0, false, "vision");
  h.CompleteAll();
  h.Advance(Duration::Seconds(3600));
  h.Submit(1, 0, false, "nlp");
  h.CompleteAll();
  h.Advance(Duration::Seconds(1800));
  h.Send(Tick{});
  const Time now = h.now();
  ASSERT_NE(h.scheduler().usage(), nullptr);
  const auto used = h.scheduler().usage()->Used(Time::Zero(), now);
  EXPECT_DOUBLE_EQ((used.at({"vision", ""})), 2 * 1.5 * 3600);
  EXPECT_DOUBLE_EQ((used.at({"nlp", ""})), 1 * 0.5 * 3600);

  const std::string bytes = h.scheduler().Snapshot();
  Scheduler restored(Make("fifo"), keep);
  ASSERT_TRUE(restored.Restore(bytes).ok());
  EXPECT_EQ(restored.Snapshot(), bytes);
  EXPECT_EQ(restored.usage()->Used(Time::Zero(), now), used);

  // Into a scheduler that keeps none, and back.
  Scheduler none(Make("fifo"));
  ASSERT_TRUE(none.Restore(bytes).ok());
  EXPECT_EQ(none.usage(), nullptr);
  Scheduler afresh(Make("fifo"), keep);
  ASSERT_TRUE(afresh.Restore(none.Snapshot()).ok());
  const auto since =
      afresh.usage()->Used(Time::Zero(), now + Duration::Seconds(60));
  EXPECT_DOUBLE_EQ((since.at({"vision", ""})), 2 * 60.0);
  EXPECT_DOUBLE_EQ((since.at({"nlp", ""})), 60.0);
}

TEST(SnapshotTest, BadBytesAreRefusedAndChangeNothing) {
  Harness h(Make("gandiva"), 4, Spec());
  MakeHistory(h);
  const std::string bytes = h.scheduler().Snapshot();

  Harness other(Make("gandiva"), 2, Spec());
  other.Submit(2);
  other.CompleteAll();
  Scheduler& target = other.scheduler();
  const std::string before = target.Snapshot();

  // Every truncation, and bytes left over.
  for (size_t n = 0; n < bytes.size(); ++n) {
    const Status st = target.Restore(std::string_view(bytes).substr(0, n));
    ASSERT_FALSE(st.ok()) << n;
    ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  }
  Status st = target.Restore(bytes + "x");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("left over"), std::string::npos) << st.message();
  EXPECT_EQ(target.Snapshot(), before);

  // Not a snapshot; another version; another policy.
  st = target.Restore("hello");
  EXPECT_NE(st.message().find("not a scheduler snapshot"), std::string::npos)
      << st.message();
  SnapshotWriter w;
  w.Str("gandiva-core-snapshot");
  w.I32(99);
  st = target.Restore(w.bytes());
  EXPECT_NE(st.message().find("version 99"), std::string::npos) << st.message();
  Scheduler fifo(Make("fifo"));
  st = fifo.Restore(bytes);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("'gandiva'"), std::string::npos) << st.message();
  EXPECT_EQ(target.Snapshot(), before);

  // The good bytes are taken.
  ASSERT_TRUE(target.Restore(bytes).ok());
  EXPECT_EQ(target.Snapshot(), bytes);
}

TEST(SnapshotTest, ReaderFailsOnCountsLargerThanTheBytes) {
  SnapshotWriter w;
  w.I64(int64_t{1} << 40);  // a vector of 2^40 ids, then nothing
  SnapshotReader r(w.bytes());
  EXPECT_TRUE(r.Ids<JobId>().empty());
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.Finish("x").message().find("exceeds the bytes left"),
            std::string::npos);

  SnapshotWriter v;
  v.I64(int64_t{1} << 40);  // an id beyond int32
  SnapshotReader s(v.bytes());
  (void)s.Id<JobId>();
  EXPECT_FALSE(s.ok());

  SnapshotWriter u;
  u.U8(7);  // not a boolean
  SnapshotReader t(u.bytes());
  (void)t.Bool();
  EXPECT_FALSE(t.ok());
}

}  // namespace
}  // namespace gandiva::core
