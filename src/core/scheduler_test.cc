#include "core/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "core/policies/fifo.h"
#include "core/policies/registry.h"
#include "core/queue_reasons.h"
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

TEST(SchedulerTest, KillOfAQueuedJobFreesNothingAndEndsIt) {
  Harness h(std::make_unique<IdlePolicy>(), 1);
  const JobId a = h.Submit(1);
  h.Send(KillRequest{a, "user"});
  EXPECT_EQ(h.job(a).state, JobState::kKilled);
  EXPECT_TRUE(h.state().queue().empty());
}

// With TrackChangedJobs the scheduler notes every job an event may change:
// an arrival, the jobs the policy starts, a kill; not the jobs an event
// leaves alone; every job after a Restore. Off by default.
TEST(SchedulerTest, TracksTheJobsItChangesWhenAsked) {
  auto sorted_unique = [](std::vector<JobId> v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  };
  Harness h(std::make_unique<FifoPolicy>(), 1);  // 4 GPUs
  const JobId a = h.Submit(4);
  EXPECT_TRUE(h.scheduler().TakeChangedJobs().empty()) << "off by default";
  h.scheduler().TrackChangedJobs();
  const JobId b = h.Submit(1);  // queued behind a
  EXPECT_EQ(sorted_unique(h.scheduler().TakeChangedJobs()),
            std::vector<JobId>{b});
  h.Complete(a);  // a's start completes
  EXPECT_EQ(sorted_unique(h.scheduler().TakeChangedJobs()),
            std::vector<JobId>{a});
  h.Send(KillRequest{a, "user"});  // b starts on a's GPUs
  EXPECT_EQ(sorted_unique(h.scheduler().TakeChangedJobs()),
            (std::vector<JobId>{a, b}));
  h.Send(Tick{});
  EXPECT_TRUE(h.scheduler().TakeChangedJobs().empty());

  Scheduler restored(std::make_unique<FifoPolicy>());
  restored.TrackChangedJobs();
  ASSERT_TRUE(restored.Restore(h.scheduler().Snapshot()).ok());
  EXPECT_EQ(sorted_unique(restored.TakeChangedJobs()),
            (std::vector<JobId>{a, b}));
}

// A run that fails with retries left (JobSpec::retries) frees its GPUs and
// waits out of the queue, 10 s, then 20 s, before it starts again from the
// beginning; the run after the last retry fails the job. Each wait shows
// in the job's reason.
TEST(SchedulerTest, AFailedRunIsTriedAgainWhileItHasRetries) {
  Harness f(std::make_unique<FifoPolicy>(), 1);  // 4 GPUs
  JobSpec spec;
  spec.gpus = 4;
  spec.retries = 2;
  const JobId a = f.SubmitSpec(spec);
  f.CompleteAll();
  ASSERT_EQ(f.job(a).state, JobState::kRunning);
  const Time first_started = f.job(a).first_started;
  f.Send(ProfileReport{a, 10.0, 300, 2.0, 0.5});
  EXPECT_EQ(f.job(a).profile.minibatches, 300);

  auto out = f.Send(JobFinished{a, false});
  EXPECT_EQ(CountKind(out, ActionKind::kStart), 0) << "tried again at once";
  EXPECT_EQ(f.job(a).state, JobState::kQueued);
  EXPECT_EQ(f.job(a).run_failures, 1);
  EXPECT_FALSE(f.job(a).launched) << "no checkpoint: from the beginning";
  EXPECT_EQ(f.job(a).start_retry_at, f.now() + Duration::Seconds(10));
  EXPECT_EQ(f.state().cluster().free_gpus(), 4);
  EXPECT_NE(OwnWaitReason(f.job(a), f.state().cluster(), f.now())
                .find("its run failed (1 of 2 retries taken)"),
            std::string::npos);
  f.Advance(Duration::Seconds(9));
  EXPECT_EQ(CountKind(f.Tick(), ActionKind::kStart), 0);
  f.Advance(Duration::Seconds(1));
  out = f.Tick();
  ASSERT_EQ(CountKind(out, ActionKind::kStart), 1);
  EXPECT_EQ(f.job(a).profile.minibatches, 0) << "a run from the beginning";
  f.CompleteAll();
  EXPECT_EQ(f.job(a).state, JobState::kRunning);
  EXPECT_EQ(f.job(a).first_started, first_started);

  f.Send(JobFinished{a, false});
  EXPECT_EQ(f.job(a).run_failures, 2);
  EXPECT_EQ(f.job(a).start_retry_at, f.now() + Duration::Seconds(20));
  f.Advance(Duration::Seconds(20));
  ASSERT_EQ(CountKind(f.Tick(), ActionKind::kStart), 1);
  f.CompleteAll();
  f.Send(JobFinished{a, false});  // no retries left
  EXPECT_EQ(f.job(a).state, JobState::kFailed);
  EXPECT_EQ(f.state().cluster().free_gpus(), 4);
}

// A retried run that succeeds finishes the job; a permanent failure (the
// command cannot run) is never retried; a job without retries fails at
// its first failed run.
TEST(SchedulerTest, PermanentFailuresAndJobsWithoutRetriesFailAtOnce) {
  Harness f(std::make_unique<FifoPolicy>(), 1);
  JobSpec spec;
  spec.gpus = 1;
  spec.retries = 3;
  const JobId a = f.SubmitSpec(spec);
  const JobId b = f.SubmitSpec(spec);
  const JobId c = f.Submit(1);
  f.CompleteAll();
  f.Send(JobFinished{a, false, /*permanent=*/true});
  EXPECT_EQ(f.job(a).state, JobState::kFailed);
  EXPECT_EQ(f.job(a).run_failures, 0);
  f.Send(JobFinished{c, false});
  EXPECT_EQ(f.job(c).state, JobState::kFailed);
  f.Send(JobFinished{b, false});
  f.Advance(Duration::Seconds(10));
  ASSERT_EQ(CountKind(f.Tick(), ActionKind::kStart), 1);
  f.CompleteAll();
  f.Send(JobFinished{b, true});
  EXPECT_EQ(f.job(b).state, JobState::kFinished);
  EXPECT_EQ(f.job(b).run_failures, 1);
}

// A failed run whose checkpoint the world kept goes on from it: queued as
// launched and run nowhere, its next run is a Resume that relocates it.
// The retry count and the wait survive a snapshot.
TEST(SchedulerTest, AFailedRunWithACheckpointResumesFromIt) {
  Harness f(std::make_unique<FifoPolicy>(), 1);
  JobSpec spec;
  spec.gpus = 2;
  spec.retries = 1;
  const JobId a = f.SubmitSpec(spec);
  f.CompleteAll();
  f.Send(JobFinished{a, false, false, /*checkpoint=*/true});
  EXPECT_EQ(f.job(a).state, JobState::kQueued);
  EXPECT_TRUE(f.job(a).launched);
  EXPECT_TRUE(f.job(a).ran_on.empty());
  EXPECT_NE(OwnWaitReason(f.job(a), f.state().cluster(), f.now())
                .find("from its checkpoint"),
            std::string::npos);

  Scheduler restored(std::make_unique<FifoPolicy>());
  ASSERT_TRUE(restored.Restore(f.scheduler().Snapshot()).ok());
  EXPECT_EQ(restored.state().job(a).run_failures, 1);
  EXPECT_EQ(restored.state().job(a).spec.retries, 1);
  EXPECT_EQ(restored.state().job(a).start_retry_at, f.job(a).start_retry_at);
  EXPECT_EQ(restored.Snapshot(), f.scheduler().Snapshot());

  f.Advance(Duration::Seconds(10));
  const auto out = f.Tick();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, ActionKind::kResume);
  EXPECT_TRUE(out[0].relocates);
  f.CompleteAll();
  EXPECT_EQ(f.job(a).state, JobState::kRunning);
}

// The queue's version changes with the queue (an arrival, a start, a
// kill of a queued job) and only then; a Restore changes it too.
TEST(SchedulerTest, TheQueuesVersionChangesWithTheQueue) {
  Harness h(std::make_unique<FifoPolicy>(), 1);  // 4 GPUs
  const JobId a = h.Submit(4);                   // queued, then started at once
  uint64_t v = h.state().queue_version();
  const JobId b = h.Submit(1);  // waits behind a
  EXPECT_NE(h.state().queue_version(), v);
  v = h.state().queue_version();
  h.Complete(a);
  h.Send(Tick{});
  EXPECT_EQ(h.state().queue_version(), v) << "the queue did not change";
  h.Send(KillRequest{b, "user"});
  EXPECT_NE(h.state().queue_version(), v);
  v = h.state().queue_version();
  Scheduler restored(std::make_unique<FifoPolicy>());
  ASSERT_TRUE(restored.Restore(h.scheduler().Snapshot()).ok());
  EXPECT_NE(restored.state().queue_version(), 0u);
}

// A failed start puts the job back in line only after a wait, doubling
// with each failure in a row; a start that succeeds clears the count.
TEST(SchedulerTest, AFailedStartIsTriedAgainAfterAWaitThatDoubles) {
  Harness f(std::make_unique<FifoPolicy>(), 1);
  const JobId b = f.Submit(4);
  ASSERT_EQ(CountKind(f.last(), ActionKind::kStart), 1);
  auto again = f.Fail(b);
  EXPECT_EQ(CountKind(again, ActionKind::kStart), 0) << "tried again at once";
  EXPECT_EQ(f.job(b).state, JobState::kQueued);
  EXPECT_EQ(f.job(b).start_failures, 1);
  EXPECT_EQ(f.job(b).start_retry_at, f.now() + Duration::Seconds(10));
  EXPECT_EQ(f.job(b).first_started, Time::Never()) << "it never ran";
  EXPECT_TRUE(f.state().queue().empty());
  EXPECT_EQ(f.state().start_retries().size(), 1u);
  EXPECT_EQ(f.state().cluster().free_gpus(), 4);
  EXPECT_EQ(f.state().counters().actions_failed, 1);

  f.Advance(Duration::Seconds(9));
  EXPECT_EQ(CountKind(f.Tick(), ActionKind::kStart), 0);
  f.Advance(Duration::Seconds(1));
  EXPECT_EQ(CountKind(f.Tick(), ActionKind::kStart), 1);
  EXPECT_TRUE(f.state().start_retries().empty());
  f.Fail(b);
  EXPECT_EQ(f.job(b).start_failures, 2);
  EXPECT_EQ(f.job(b).start_retry_at, f.now() + Duration::Seconds(20));
  f.Advance(Duration::Seconds(19));
  EXPECT_EQ(CountKind(f.Tick(), ActionKind::kStart), 0);
  f.Advance(Duration::Seconds(1));
  EXPECT_EQ(CountKind(f.Tick(), ActionKind::kStart), 1);
  const Time started = f.now();
  f.CompleteAll();
  EXPECT_EQ(f.job(b).state, JobState::kRunning);
  EXPECT_EQ(f.job(b).first_started, started);
  EXPECT_EQ(f.job(b).start_failures, 0);
  EXPECT_EQ(f.job(b).start_retry_at, Time::Zero());

  auto killed = f.Send(KillRequest{b, "operator"});
  EXPECT_EQ(CountKind(killed, ActionKind::kKill), 1);
  EXPECT_EQ(f.state().cluster().free_gpus(), 4);
}

// A job's next start goes to a server other than those its failed starts
// were on when one has room, and to one of them only when nowhere else
// will do; a start that succeeds forgets them. Every policy.
TEST(SchedulerTest, AFailedStartIsTriedOnAnotherServerFirst) {
  for (const char* name :
       {"fifo", "gandiva", "gandiva-reactive", "tiresias-las"}) {
    SCOPED_TRACE(name);
    SchedulerOptions o;
    o.start_retry_delay = Duration::Seconds(1);
    auto policy = MakePolicy(name);
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    Harness h(std::move(*policy), 2, {}, o);
    auto server_of = [&](JobId j) {
      EXPECT_FALSE(h.job(j).gpus.empty());
      return h.job(j).gpus.empty()
                 ? ServerId()
                 : h.state().cluster().gpu(h.job(j).gpus[0]).server;
    };
    const JobId a = h.Submit(2);
    const ServerId first = server_of(a);
    h.Fail(a);
    EXPECT_EQ(h.job(a).start_failed_on, std::vector<ServerId>{first});

    h.Advance(Duration::Seconds(1));
    h.Tick();
    ASSERT_EQ(h.job(a).in_flight, ActionKind::kStart);
    const ServerId second = server_of(a);
    EXPECT_NE(second, first);
    h.Fail(a);
    EXPECT_EQ(h.job(a).start_failed_on, (std::vector<ServerId>{first, second}));

    // Both failed: one of them again, since there is nothing else.
    h.Advance(Duration::Seconds(2));
    h.Tick();
    ASSERT_EQ(h.job(a).in_flight, ActionKind::kStart);
    h.CompleteAll();
    EXPECT_EQ(h.job(a).state, JobState::kRunning);
    EXPECT_TRUE(h.job(a).start_failed_on.empty());
    EXPECT_EQ(h.job(a).start_failures, 0);
  }
}

// With the other servers full, a job goes back to the server its start
// failed on rather than wait.
TEST(SchedulerTest, AFailedStartGoesBackToItsServerWhenNoOtherHasRoom) {
  SchedulerOptions o;
  o.start_retry_delay = Duration::Seconds(1);
  Harness h(std::make_unique<FifoPolicy>(), 2, {}, o);
  const JobId b = h.Submit(4);  // fills a server
  h.CompleteAll();
  ASSERT_EQ(h.job(b).state, JobState::kRunning);
  const JobId a = h.Submit(1);
  const ServerId first = h.state().cluster().gpu(h.job(a).gpus[0]).server;
  ASSERT_NE(h.state().cluster().gpu(h.job(b).gpus[0]).server, first);
  h.Fail(a);
  h.Advance(Duration::Seconds(1));
  h.Tick();
  ASSERT_EQ(h.job(a).in_flight, ActionKind::kStart);
  EXPECT_EQ(h.state().cluster().gpu(h.job(a).gpus[0]).server, first);
}

// The servers remembered are the latest kMaxStartFailedServers, each once.
TEST(SchedulerTest, TheServersOfFailedStartsAreBounded) {
  SchedulerOptions o;
  o.start_attempts = 0;
  o.start_retry_delay = Duration::Seconds(1);
  const int servers = kMaxStartFailedServers + 3;
  Harness h(std::make_unique<FifoPolicy>(), servers, {}, o);
  const JobId a = h.Submit(1);
  std::vector<ServerId> order;
  for (int i = 0; i < servers + 2; ++i) {
    ASSERT_EQ(h.job(a).in_flight, ActionKind::kStart) << i;
    order.push_back(h.state().cluster().gpu(h.job(a).gpus[0]).server);
    h.Fail(a);
    h.Advance(h.job(a).start_retry_at - h.now());
    h.Tick();
  }
  // Each of the first kMaxStartFailedServers + 1 tries was on a new server
  // (the avoided ones are the latest 8; the 9th try's server was forgotten
  // by then, so tries wrap around).
  for (int i = 1; i <= kMaxStartFailedServers; ++i) {
    for (int k = 0; k < i; ++k) EXPECT_NE(order[i], order[k]) << i << " " << k;
  }
  const auto& failed_on = h.job(a).start_failed_on;
  EXPECT_EQ(static_cast<int>(failed_on.size()), kMaxStartFailedServers);
  EXPECT_EQ(failed_on.back(), order.back());
  std::vector<ServerId> sorted = failed_on;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
}

// The waits stop doubling at kMaxStartRetryDelay; with start_attempts 0 a
// job is tried for ever.
TEST(SchedulerTest, StartRetryWaitsAreCappedAndZeroAttemptsTriesForEver) {
  SchedulerOptions o;
  o.start_attempts = 0;
  Harness f(std::make_unique<FifoPolicy>(), 1, {}, o);
  const JobId b = f.Submit(1);
  for (int i = 0; i < 12; ++i) {
    f.Fail(b);
    const Duration wait = f.job(b).start_retry_at - f.now();
    EXPECT_LE(wait, kMaxStartRetryDelay);
    if (i >= 5) {
      EXPECT_EQ(wait, kMaxStartRetryDelay);
    }
    f.Advance(wait);
    ASSERT_EQ(CountKind(f.Tick(), ActionKind::kStart), 1) << i;
  }
  EXPECT_EQ(f.job(b).start_failures, 12);
  EXPECT_EQ(f.job(b).state, JobState::kRunning);
}

// The start_attempts-th failure in a row fails the job and frees its GPUs;
// a job behind it in FIFO order starts while it waits.
TEST(SchedulerTest, AJobWhoseStartsKeepFailingFailsAndDoesNotBlockTheQueue) {
  SchedulerOptions o;
  o.start_attempts = 3;
  o.start_retry_delay = Duration::Seconds(1);
  Harness f(std::make_unique<FifoPolicy>(), 1, {}, o);
  const JobId a = f.Submit(4);
  const JobId b = f.Submit(2);
  EXPECT_EQ(f.job(b).state, JobState::kQueued);  // behind a, no room
  auto after = f.Fail(a);
  ASSERT_EQ(CountKind(after, ActionKind::kStart), 1) << "b should start";
  EXPECT_EQ(after[0].job, b);
  f.Complete(b);
  for (int i = 2; i <= 3; ++i) {
    f.Advance(f.job(a).start_retry_at - f.now());
    f.Tick();
    if (f.job(a).state == JobState::kQueued) {
      // No room while b runs: a is in the queue, waiting like any job.
      EXPECT_EQ(f.state().queue().size(), 1u);
      f.Send(JobFinished{b, true});
    }
    ASSERT_EQ(f.job(a).state, JobState::kRunning) << i;
    f.Fail(a);
  }
  EXPECT_EQ(f.job(a).state, JobState::kFailed);
  EXPECT_EQ(f.job(a).ended, f.now());
  EXPECT_EQ(f.job(a).start_failures, 3);
  EXPECT_TRUE(f.state().queue().empty());
  EXPECT_TRUE(f.state().start_retries().empty());
  EXPECT_EQ(f.state().cluster().free_gpus(), 4);
  EXPECT_EQ(f.state().placed_jobs(), 0);
  f.Advance(Duration::Seconds(600));
  EXPECT_TRUE(f.Tick().empty());
}

// While a job waits to try its start again: a hold takes it out of line, a
// release puts it back to wait out the rest, a new priority keeps it
// waiting, and a kill ends it.
TEST(SchedulerTest, HoldPriorityAndKillOfAJobWaitingToStartAgain) {
  Harness f(std::make_unique<FifoPolicy>(), 1);
  const JobId a = f.Submit(1);
  f.Fail(a);
  ASSERT_EQ(f.state().start_retries().size(), 1u);
  f.Send(HoldRequest{a, true});
  EXPECT_TRUE(f.state().start_retries().empty());
  EXPECT_TRUE(f.state().queue().empty());
  f.Advance(Duration::Seconds(5));
  f.Send(HoldRequest{a, false});
  EXPECT_EQ(f.state().start_retries().size(), 1u) << "skipped its wait";
  EXPECT_TRUE(f.state().queue().empty());
  f.Send(PriorityRequest{a, 2});
  EXPECT_EQ(f.job(a).spec.priority, 2);
  EXPECT_EQ(f.state().start_retries().size(), 1u);
  EXPECT_TRUE(f.state().queue().empty());
  f.Advance(Duration::Seconds(5));
  EXPECT_EQ(CountKind(f.Tick(), ActionKind::kStart), 1);
  f.Fail(a);
  f.Send(HoldRequest{a, true});
  f.Advance(Duration::Seconds(60));
  EXPECT_TRUE(f.Tick().empty()) << "a held job started";
  // Its wait is over: released, it is in line, and placed at once.
  EXPECT_EQ(CountKind(f.Send(HoldRequest{a, false}), ActionKind::kStart), 1);
  EXPECT_EQ(f.job(a).state, JobState::kRunning);
  f.Fail(a);
  f.Send(KillRequest{a, "operator"});
  EXPECT_EQ(f.job(a).state, JobState::kKilled);
  EXPECT_TRUE(f.state().start_retries().empty());
  f.Advance(Duration::Seconds(600));
  EXPECT_TRUE(f.Tick().empty());
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

// A running job whose process is lost (its server up) runs again on its
// GPUs at once: from the checkpoint kept of it if there is one, and from
// the beginning if that fails or none was kept; a restart from the
// beginning that fails fails the job.
TEST(SchedulerTest, ARunningJobWhoseProcessIsLostRestartsWhereItRan) {
  Harness h(std::make_unique<FifoPolicy>(), 1);
  const JobId a = h.Submit(2);
  const JobId b = h.Submit(2);
  h.CompleteAll();
  const std::vector<GpuId> gpus = h.job(a).gpus;

  auto out = h.Send(ProcessLost{a, /*checkpoint=*/true});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, ActionKind::kRestart);
  EXPECT_EQ(out[0].gpus, gpus);
  EXPECT_TRUE(out[0].relocates);
  EXPECT_FALSE(out[0].launch);
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  EXPECT_TRUE(h.job(a).busy());
  EXPECT_TRUE(h.job(a).ran_on.empty());
  // Nothing else may be asked of it meanwhile; its server's other job is
  // untouched.
  EXPECT_EQ(h.job(b).state, JobState::kRunning);
  EXPECT_FALSE(h.job(b).busy());
  EXPECT_FALSE(h.TrySend(ProcessLost{a, true}).ok());
  EXPECT_TRUE(h.Complete(a).empty());
  EXPECT_EQ(h.job(a).restarts, 1);
  EXPECT_EQ(h.job(a).ran_on, gpus);
  EXPECT_EQ(h.job(a).run_since, h.now());
  EXPECT_FALSE(h.job(a).restarting_from_checkpoint);

  // The checkpoint cannot be read: from the beginning.
  h.Send(ProcessLost{a, true});
  out = h.Fail(a);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, ActionKind::kRestart);
  EXPECT_TRUE(out[0].launch);
  EXPECT_FALSE(out[0].relocates);
  EXPECT_EQ(out[0].gpus, gpus);
  h.Complete(a);
  EXPECT_EQ(h.job(a).restarts, 2);
  EXPECT_EQ(h.job(a).state, JobState::kRunning);

  // No checkpoint, and the start from the beginning fails: the job fails,
  // its GPUs free.
  out = h.Send(ProcessLost{b, false});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].launch);
  out = h.Fail(b);
  EXPECT_EQ(h.job(b).state, JobState::kFailed);
  EXPECT_EQ(h.job(b).restarts, 0);
  EXPECT_EQ(h.state().cluster().free_gpus(), 2);

  // Queued or ended: nothing happens; an unknown job is refused.
  const JobId c = h.Submit(4);
  EXPECT_EQ(h.job(c).state, JobState::kQueued);
  EXPECT_TRUE(h.TrySend(ProcessLost{c, false}).ok());
  EXPECT_TRUE(h.last().empty());
  EXPECT_TRUE(h.TrySend(ProcessLost{b, false}).ok());
  EXPECT_TRUE(h.last().empty());
  EXPECT_FALSE(h.TrySend(ProcessLost{JobId(99), false}).ok());
}

// A suspended job whose process is lost goes on when its policy runs it
// again: resumed from the checkpoint kept of it (the Resume relocates it,
// though on the GPUs it left), or started again without one.
TEST(SchedulerTest, ASuspendedJobWhoseProcessIsLostGoesOnWhenRunAgain) {
  for (const bool checkpoint : {true, false}) {
    SCOPED_TRACE(checkpoint ? "checkpoint" : "none");
    Harness h(MakePolicy("gandiva").value(), 1);
    const JobId a = h.Submit(4);
    h.CompleteAll();
    h.Send(HoldRequest{a, true});
    h.CompleteAll();
    ASSERT_EQ(h.job(a).state, JobState::kSuspended);
    const std::vector<GpuId> gpus = h.job(a).gpus;
    EXPECT_TRUE(h.Send(ProcessLost{a, checkpoint}).empty());
    EXPECT_EQ(h.job(a).state, JobState::kSuspended);
    EXPECT_EQ(h.job(a).launched, checkpoint);
    auto out = h.Send(HoldRequest{a, false});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].kind,
              checkpoint ? ActionKind::kResume : ActionKind::kStart);
    EXPECT_EQ(out[0].gpus, gpus);
    EXPECT_EQ(out[0].relocates, checkpoint);
    h.CompleteAll();
    EXPECT_EQ(h.job(a).state, JobState::kRunning);
    EXPECT_EQ(h.job(a).ran_on, gpus);
  }
}

// A resume that fails (its checkpoint not fetched, its agent not
// answering) is not tried again at once: the job waits suspended, out of
// the waiting jobs, 10 s, then 20 s, as a failed start does, and says so;
// the wait survives a snapshot, and a resume that succeeds ends it. It
// never fails the job. Every policy.
TEST(SchedulerTest, AFailedResumeWaitsBeforeItIsTriedAgain) {
  for (const char* name : {"fifo", "gandiva", "gandiva-reactive",
                           "tiresias-las", "gandiva-fair", "drf-reclaim"}) {
    SCOPED_TRACE(name);
    auto policy = MakePolicy(name);
    ASSERT_TRUE(policy.ok()) << policy.status().ToString();
    Harness h(std::move(*policy), 1);
    const JobId a = h.Submit(4);
    h.CompleteAll();
    h.Send(HoldRequest{a, true});
    h.CompleteAll();
    // Held: suspended where it ran (tiresias-las: queued, its GPUs given
    // back); its process lost, its next run is a relocating resume.
    ASSERT_TRUE(h.job(a).state == JobState::kSuspended ||
                h.job(a).state == JobState::kQueued);
    h.Send(ProcessLost{a, /*checkpoint=*/true});
    auto runs = [&](const std::vector<Action>& out) {
      return CountKind(out, ActionKind::kResume) +
             CountKind(out, ActionKind::kMigrate) +
             CountKind(out, ActionKind::kPack);
    };
    ASSERT_EQ(runs(h.Send(HoldRequest{a, false})), 1);
    int start_failures = 0;
    for (const int wait_s : {10, 20}) {
      SCOPED_TRACE(wait_s);
      auto out = h.Fail(a);
      EXPECT_EQ(runs(out), 0) << "tried again at once";
      for (int i = 0; i < 5; ++i) EXPECT_EQ(runs(h.Tick()), 0);
      ++start_failures;
      const Job& j = h.job(a);
      EXPECT_NE(j.state, JobState::kFailed);
      EXPECT_EQ(j.start_failures, start_failures);
      EXPECT_EQ(j.start_retry_at, h.now() + Duration::Seconds(wait_s));
      EXPECT_TRUE(j.awaits_start_retry(h.now()));
      if (j.state == JobState::kSuspended) {
        EXPECT_EQ(OwnWaitReason(j, h.state().cluster(), h.now()),
                  "its resume failed " + std::to_string(start_failures) +
                      (start_failures == 1 ? " time" : " times") +
                      " in a row: it waits before it is tried again");
      }
      // A scheduler restored from a snapshot waits as long.
      auto restored_policy = MakePolicy(name);
      Scheduler restored(std::move(*restored_policy));
      ASSERT_TRUE(restored.Restore(h.scheduler().Snapshot()).ok());
      EXPECT_EQ(restored.Snapshot(), h.scheduler().Snapshot());
      std::vector<Action> early;
      ASSERT_TRUE(restored
                      .Handle(Event{h.now() + Duration::Seconds(wait_s - 1),
                                    core::Tick{}},
                              early)
                      .ok());
      EXPECT_EQ(runs(early), 0);
      std::vector<Action> due;
      ASSERT_TRUE(
          restored
              .Handle(Event{h.now() + Duration::Seconds(wait_s), core::Tick{}},
                      due)
              .ok());
      EXPECT_EQ(runs(due), 1) << "the restored scheduler runs it when due";

      h.Advance(Duration::Seconds(wait_s - 1));
      EXPECT_EQ(runs(h.Tick()), 0);
      h.Advance(Duration::Seconds(1));
      EXPECT_EQ(runs(h.Tick()), 1);
    }
    h.CompleteAll();
    EXPECT_EQ(h.job(a).state, JobState::kRunning);
    EXPECT_EQ(h.job(a).start_failures, 0);
    EXPECT_EQ(h.job(a).start_retry_at, Time::Zero());
  }
}

// A job whose process is lost while an action of it is under way: the
// world settles that action first.
TEST(SchedulerTest, AProcessLostWhileAnActionIsUnderWayIsRefused) {
  Harness h(std::make_unique<FifoPolicy>(), 1);
  const JobId a = h.Submit(4);
  const Status st = h.TrySend(ProcessLost{a, true});
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("has its start under way"), std::string::npos)
      << st.ToString();
  EXPECT_TRUE(h.job(a).busy());
  EXPECT_EQ(h.job(a).in_flight, ActionKind::kStart);
  h.Complete(a);
  EXPECT_TRUE(h.TrySend(ProcessLost{a, true}).ok());
  EXPECT_EQ(CountKind(h.last(), ActionKind::kRestart), 1);
}

// A job the world finds already running (a runtime restored from an older
// backup) is adopted where it runs: placed and running, with no start.
TEST(SchedulerTest, AJobArrivingPlacedIsAdoptedWhereItRuns) {
  Harness h(std::make_unique<FifoPolicy>(), 2);
  JobSpec two;
  two.gpus = 2;
  h.Advance(Duration::Seconds(100));
  JobArrived adopted{JobId(7), two, {GpuId(5), GpuId(6)}, false};
  adopted.submitted = Time::FromMicros(30'000'000);
  const auto out = h.Send(adopted);
  EXPECT_EQ(CountKind(out, ActionKind::kStart), 0);
  const Job& j = h.job(JobId(7));
  EXPECT_EQ(j.state, JobState::kRunning);
  EXPECT_TRUE(j.launched);
  EXPECT_EQ(j.gpus, (std::vector<GpuId>{GpuId(5), GpuId(6)}));
  EXPECT_EQ(j.run_since, h.now());
  EXPECT_EQ(j.submitted, Time::FromMicros(30'000'000));
  EXPECT_EQ(h.state().cluster().gpu(GpuId(5)).active, 1);
  EXPECT_EQ(h.state().placed_jobs(), 1);
  EXPECT_EQ(h.state().counters().starts, 0);
  EXPECT_TRUE(h.state().queue().empty());

  // The others fill around it; a 4-GPU job waits for its server to empty.
  const JobId a = h.Submit(2);
  const JobId b = h.Submit(4);
  h.CompleteAll();
  EXPECT_EQ(h.job(a).state, JobState::kRunning);
  EXPECT_EQ(h.state().cluster().gpu(h.job(a).gpus[0]).server,
            h.state().cluster().gpu(GpuId(5)).server);
  EXPECT_EQ(h.job(b).state, JobState::kRunning);
  // Its end frees its GPUs like any job's.
  h.Send(JobFinished{JobId(7), true});
  EXPECT_EQ(h.job(JobId(7)).state, JobState::kFinished);
  EXPECT_EQ(h.state().cluster().gpu(GpuId(5)).active, 0);
  EXPECT_TRUE(h.state().cluster().gpu(GpuId(5)).jobs.empty());
}

TEST(SchedulerTest, AJobArrivingSuspendedIsAdoptedWaitingForATimeSlice) {
  Harness h(std::make_unique<IdlePolicy>(), 1);
  JobSpec one;
  const auto out = h.Send(JobArrived{JobId(0), one, {GpuId(2)}, true});
  EXPECT_TRUE(out.empty());
  const Job& j = h.job(JobId(0));
  EXPECT_EQ(j.state, JobState::kSuspended);
  EXPECT_TRUE(j.launched);
  EXPECT_EQ(h.state().cluster().gpu(GpuId(2)).active, 0);
  EXPECT_EQ(h.state().cluster().gpu(GpuId(2)).jobs,
            std::vector<JobId>{JobId(0)});
  ASSERT_EQ(h.state().waiting().size(), 1u);
  EXPECT_EQ(h.state().waiting().begin()->id, JobId(0));
}

TEST(SchedulerTest, AJobArrivingPlacedWhereItCannotBeIsRefusedAndNotKept) {
  Harness h(std::make_unique<FifoPolicy>(), 2);
  const JobId taken = h.Submit(1);
  h.CompleteAll();
  const GpuId busy = h.job(taken).gpus[0];
  h.Send(ServerDown{ServerId(1)});
  JobSpec one, two;
  two.gpus = 2;
  struct Case {
    JobSpec spec;
    std::vector<GpuId> gpus;
    std::string says;
  };
  const std::vector<Case> cases = {
      {one, {GpuId(1), GpuId(2)}, "2 GPUs for a job of 1"},
      {one, {GpuId(99)}, "no GPU 99"},
      {two, {GpuId(1), GpuId(1)}, "GPU 1 named twice"},
      {two, {GpuId(3), GpuId(4)}, "more than one server"},
      {one, {GpuId(5)}, "GPU 5 is on a server that is down"},
      {one, {busy}, "holds job " + std::to_string(taken.value)},
  };
  for (const Case& c : cases) {
    const Status st = h.TrySend(JobArrived{JobId(9), c.spec, c.gpus, false});
    EXPECT_FALSE(st.ok()) << c.says;
    EXPECT_NE(st.message().find("field 'placed_on'"), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.message();
    EXPECT_FALSE(h.state().has_job(JobId(9)));
  }
  EXPECT_EQ(h.state().placed_jobs(), 1);
  JobArrived later{JobId(9), one};
  later.submitted = h.now() + Duration::Seconds(1);
  const Status st = h.TrySend(later);
  EXPECT_NE(st.message().find("field 'submitted': after the event"),
            std::string::npos)
      << st.message();
  // The id is still free: the job arrives to the queue.
  h.Send(JobArrived{JobId(9), one});
  EXPECT_EQ(h.job(JobId(9)).submitted, h.now());
  EXPECT_TRUE(h.state().has_job(JobId(9)));
}

// A queued job the world finds running is adopted where it runs; one that
// is not queued, or held, or whose GPUs are taken, is refused and left as
// it was.
TEST(SchedulerTest, AQueuedJobFoundRunningIsAdoptedWhereItRuns) {
  Harness h(std::make_unique<IdlePolicy>(), 1);
  const JobId a = h.Submit(1);
  const JobId b = h.Submit(2);
  const JobId held = h.Submit(1);
  h.Send(HoldRequest{held, true});
  ASSERT_EQ(h.state().queue().size(), 2u);
  const auto out = h.Send(JobFound{b, {GpuId(2), GpuId(3)}, false});
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(h.job(b).state, JobState::kRunning);
  EXPECT_TRUE(h.job(b).launched);
  EXPECT_EQ(h.job(b).gpus, (std::vector<GpuId>{GpuId(2), GpuId(3)}));
  EXPECT_EQ(h.state().queue().size(), 1u);
  EXPECT_EQ(h.state().cluster().gpu(GpuId(3)).active, 1);

  Status st = h.TrySend(JobFound{b, {GpuId(0), GpuId(1)}, false});
  EXPECT_EQ(st.message(), "job 1 is running, not queued");
  st = h.TrySend(JobFound{held, {GpuId(0)}, false});
  EXPECT_EQ(st.message(), "job 2 is held, not queued");
  st = h.TrySend(JobFound{a, {GpuId(2)}, false});
  EXPECT_NE(st.message().find("field 'placed_on': GPU 2 holds job 1"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(h.job(a).state, JobState::kQueued);
  EXPECT_EQ(h.state().queue().size(), 1u);
  h.Send(JobFound{a, {GpuId(0)}, true});
  EXPECT_EQ(h.job(a).state, JobState::kSuspended);
  EXPECT_TRUE(h.state().queue().empty());
  ASSERT_EQ(h.state().waiting().size(), 1u);
  EXPECT_FALSE(h.TrySend(JobFound{JobId(9), {GpuId(1)}, false}).ok());
}

// The gandiva policy time-slices an adopted job with the others.
// waiting_by_size() is waiting() split by the GPUs each job holds, through
// time-slicing, grows and shrinks, holds, priority changes, ends and a
// snapshot's restore.
TEST(SchedulerTest, TheWaitingJobsBySizeAreTheWaitingJobs) {
  auto p = MakePolicy("gandiva");
  ASSERT_TRUE(p.ok());
  Harness h(std::move(*p), 4);
  std::mt19937 rng(3);
  auto pick = [&](int n) {
    return std::uniform_int_distribution<int>(0, n - 1)(rng);
  };
  auto check = [&](const ClusterState& st) {
    std::set<JobOrder> all;
    for (size_t k = 0; k < st.waiting_by_size().size(); ++k) {
      for (const JobOrder& o : st.waiting_by_size()[k]) {
        EXPECT_EQ(size_t{1} << k, st.job(o.id).gpus.size()) << o.id.value;
        all.insert(o);
      }
    }
    EXPECT_EQ(all, st.waiting());
  };
  std::vector<JobId> jobs;
  for (int step = 0; step < 400; ++step) {
    const int op = pick(8);
    if (op < 3) {
      jobs.push_back(h.Submit(1 << pick(3), pick(2), pick(2) == 0));
    } else if (op < 5) {
      h.CompleteAll();
    } else if (op == 5) {
      h.Advance(Duration::Seconds(61));
      h.Tick();
    } else if (!jobs.empty()) {
      const JobId id =
          jobs[static_cast<size_t>(pick(static_cast<int>(jobs.size())))];
      if (IsTerminal(h.job(id).state)) continue;
      const int what = pick(3);
      if (what == 0) h.Send(JobFinished{id, true});
      if (what == 1) h.Send(HoldRequest{id, !h.job(id).held});
      if (what == 2) h.Send(PriorityRequest{id, pick(3)});
    }
    check(h.state());
    if (::testing::Test::HasFailure()) return;
  }
  auto again = MakePolicy("gandiva");
  ASSERT_TRUE(again.ok());
  Scheduler restored(std::move(*again));
  ASSERT_TRUE(restored.Restore(h.scheduler().Snapshot()).ok());
  check(restored.state());
  EXPECT_FALSE(h.state().waiting().empty()) << "the test waits for nothing";
}

TEST(SchedulerTest, TheGandivaPolicyTimeSlicesAnAdoptedJob) {
  auto policy = MakePolicy("gandiva");
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  ServerSpec spec;
  spec.gpus = 1;
  Harness h(std::move(*policy), 1, spec);
  h.Send(JobArrived{JobId(5), JobSpec{}, {GpuId(0)}, false});
  h.Submit(1);
  h.CompleteAll();
  int suspends = 0;
  for (int i = 0; i < 20; ++i) {
    h.Advance(Duration::Seconds(60));
    const auto out = h.Tick();
    suspends += CountKind(out, ActionKind::kSuspend);
    h.CompleteAll();
  }
  EXPECT_GT(suspends, 0);
  EXPECT_GT(h.job(JobId(5)).suspends, 0);
  EXPECT_NE(h.job(JobId(0)).first_started, Time::Never());
}

}  // namespace
}  // namespace gandiva::core
