// AgentModel as the core is tested: state built by events, what an agent
// lists in, verdicts out. No daemon, socket, thread or clock.
#include "runtime/scheduler/agent_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/policies/fifo.h"
#include "core/test_util.h"
#include "runtime/scheduler/event_codec.h"

namespace gandiva::runtime {
namespace {

using core::testing::Harness;
using Process = AgentModel::Process;
using Checkpoint = AgentModel::Checkpoint;
using State = AgentModel::State;
using Exit = AgentModel::Exit;

constexpr char kCluster[] = "cluster-a";

// Two servers of two GPUs under fifo, the daemon's records of its jobs
// beside the core's, and the model over both.
class AgentModelTest : public ::testing::Test {
 protected:
  AgentModelTest()
      : h_(std::make_unique<core::FifoPolicy>(), 2,
           core::ServerSpec{"", 2, 1, 1, 0, ""}) {}

  AgentModel Model() const {
    return AgentModel(h_.state(), jobs_, published_, cluster_);
  }
  // Job `id` of `gpus` GPUs arrives, submitted at `submitted_us`; with
  // `start`, its start is done and its process recorded where it runs
  // (without: its start is under way, or it is queued).
  void Arrive(int32_t id, int64_t submitted_us, bool start = true,
              int gpus = 1) {
    core::JobSpec spec;
    spec.gpus = gpus;
    h_.Send(core::JobArrived{JobId(id), spec});
    jobs_[id];
    published_.SetSubmitted(id, submitted_us);
    if (!start) return;
    h_.CompleteAll();
    jobs_[id].proc = Proc::At(Model().Parts(h_.job(JobId(id)).gpus));
  }
  ServerId ServerOf(int32_t id) const { return jobs_.at(id).proc.server; }

  static rpc::AgentJob Listed(int64_t id, rpc::JobState state,
                              int64_t submitted_us = 0) {
    rpc::AgentJob j;
    j.set_job_id(id);
    j.set_state(state);
    j.set_submitted_us(submitted_us);
    return j;
  }
  // A registration listing checkpoints of `ids`, each of `cluster` and
  // submitted at `submitted_us` (0: not said).
  static rpc::RegisterAgentRequest Holding(std::vector<int64_t> ids,
                                           const std::string& cluster,
                                           int64_t submitted_us = 0) {
    rpc::RegisterAgentRequest r;
    r.set_cluster_id(kCluster);
    for (int64_t id : ids) {
      r.add_checkpoints(id);
      r.add_checkpoint_clusters(cluster);
      r.add_checkpoint_submitted_us(submitted_us);
    }
    return r;
  }

  Harness h_;
  std::map<int32_t, JobExtra> jobs_;
  Published published_;
  std::string cluster_ = kCluster;
};

TEST_F(AgentModelTest, AProcessWhereTheDaemonHasItIsOurs) {
  Arrive(1, 100);
  EXPECT_EQ(Model().JudgeProcess(ServerOf(1), Listed(1, rpc::RUNNING, 100)),
            Process::kOurs);
  // An agent that does not say when its job was submitted (older ones).
  EXPECT_EQ(Model().JudgeProcess(ServerOf(1), Listed(1, rpc::SUSPENDED)),
            Process::kOurs);
  // Listed by the other server's agent: not where the daemon has it.
  const ServerId other(1 - ServerOf(1).value);
  EXPECT_EQ(Model().JudgeProcess(other, Listed(1, rpc::RUNNING, 100)),
            Process::kStray);
}

TEST_F(AgentModelTest,
       AProcessTheDaemonLostTrackOfIsAdoptedWhereAndAsTheCoreHasIt) {
  Arrive(1, 100);
  const ServerId here = ServerOf(1);
  jobs_[1].proc = Proc{};  // a move that failed, replayed after a crash
  EXPECT_TRUE(Model().Adoptable(1, here, rpc::RUNNING));
  EXPECT_EQ(Model().JudgeProcess(here, Listed(1, rpc::RUNNING, 100)),
            Process::kAdopt);
  // Not in the state the core has it in, nor on another server.
  EXPECT_FALSE(Model().Adoptable(1, here, rpc::SUSPENDED));
  EXPECT_EQ(Model().JudgeProcess(here, Listed(1, rpc::SUSPENDED, 100)),
            Process::kStray);
  EXPECT_FALSE(Model().Adoptable(1, ServerId(1 - here.value), rpc::RUNNING));
  // Nor while an action of it is under way: its outcome decides.
  h_.Send(core::HoldRequest{JobId(1), true});
  ASSERT_TRUE(h_.job(JobId(1)).busy());
  EXPECT_FALSE(Model().Adoptable(1, here, rpc::RUNNING));
}

TEST_F(AgentModelTest,
       AnotherSubmissionsProcessIsAStrayUnlessThisJobsStartIsThere) {
  Arrive(1, 100);
  const ServerId here = ServerOf(1);
  EXPECT_TRUE(Model().OtherSubmission(1, 99));
  EXPECT_FALSE(Model().OtherSubmission(1, 100));
  EXPECT_FALSE(Model().OtherSubmission(1, 0));  // not said
  // This job's process is placed there (its start under way): the start
  // replaces the other one.
  EXPECT_EQ(Model().JudgeProcess(here, Listed(1, rpc::RUNNING, 99)),
            Process::kReplacedByStart);
  // Elsewhere, or once this job has none: a stray.
  EXPECT_EQ(Model().JudgeProcess(ServerId(1 - here.value),
                                 Listed(1, rpc::RUNNING, 99)),
            Process::kStray);
  jobs_[1].proc = Proc{};
  EXPECT_EQ(Model().JudgeProcess(here, Listed(1, rpc::RUNNING, 99)),
            Process::kStray);
}

// A copy of a job on a server alone, listed by an agent where the daemon
// does not have the job (cut off while the job was placed again), is saved
// to go on from when it is further on than the job: a queued job with
// nothing of it kept anywhere, or a run elsewhere that trained fewer
// mini-batches. Else it is a stray: behind, without the library, of
// another size or submission, a part of a gang (no spec listed), while an
// action is under way, or once the job ended.
TEST_F(AgentModelTest, ACopyFurtherOnThanTheJobIsSavedToGoOnFrom) {
  Arrive(1, 100, true, 2);
  Arrive(3, 300, true, 2);
  Arrive(2, 200, false);  // no room: queued
  ASSERT_EQ(h_.job(JobId(2)).state, JobState::kQueued);
  ASSERT_FALSE(h_.job(JobId(2)).busy());
  const ServerId one = ServerOf(1);
  const ServerId three = ServerOf(3);
  auto copy = [](int64_t id, int64_t submitted, int64_t minibatches, int gpus) {
    rpc::AgentJob j = Listed(id, rpc::SUSPENDED, submitted);
    j.mutable_spec()->set_gpus(gpus);  // listed for a job on a server alone
    for (int g = 0; g < gpus; ++g) j.add_gpus(g);
    j.mutable_progress()->set_minibatches(minibatches);
    j.mutable_progress()->set_uses_library(true);
    return j;
  };
  // Queued: any mini-batch is further on, unless something of it is kept.
  EXPECT_EQ(Model().JudgeProcess(one, copy(2, 200, 30, 1)),
            Process::kSaveStray);
  EXPECT_EQ(Model().JudgeProcess(one, copy(2, 200, 0, 1)), Process::kStray);
  jobs_[2].proc = Proc{three, {0}, false, true};
  EXPECT_EQ(Model().JudgeProcess(one, copy(2, 200, 30, 1)), Process::kStray);

  // Placed elsewhere: further on than its run there.
  jobs_[1].progress.set_minibatches(40);
  EXPECT_EQ(Model().JudgeProcess(three, copy(1, 100, 500, 2)),
            Process::kSaveStray);
  EXPECT_EQ(Model().JudgeProcess(three, copy(1, 0, 500, 2)),
            Process::kSaveStray);  // submission not said
  EXPECT_EQ(Model().JudgeProcess(three, copy(1, 100, 40, 2)), Process::kStray);
  EXPECT_EQ(Model().JudgeProcess(three, copy(1, 99, 500, 2)), Process::kStray);
  EXPECT_EQ(Model().JudgeProcess(three, copy(1, 100, 500, 1)), Process::kStray);
  rpc::AgentJob plain = copy(1, 100, 500, 2);
  plain.mutable_progress()->set_uses_library(false);
  EXPECT_EQ(Model().JudgeProcess(three, plain), Process::kStray);
  rpc::AgentJob part = copy(1, 100, 500, 2);
  part.clear_spec();
  EXPECT_EQ(Model().JudgeProcess(three, part), Process::kStray);
  // Where the daemon has it: its own.
  EXPECT_EQ(Model().JudgeProcess(one, copy(1, 100, 500, 2)), Process::kOurs);
  h_.Send(core::HoldRequest{JobId(1), true});
  ASSERT_TRUE(h_.job(JobId(1)).busy());
  EXPECT_EQ(Model().JudgeProcess(three, copy(1, 100, 500, 2)), Process::kStray);
  h_.Send(core::KillRequest{JobId(3), "test"});
  EXPECT_EQ(Model().JudgeProcess(one, copy(3, 300, 500, 2)), Process::kStray);
}

TEST_F(AgentModelTest, AProcessOfAJobThatEndedOrIsUnknownIsAStray) {
  Arrive(1, 100);
  const ServerId here = ServerOf(1);
  h_.Send(core::KillRequest{JobId(1), "test"});
  EXPECT_EQ(Model().JudgeProcess(here, Listed(1, rpc::RUNNING, 100)),
            Process::kStray);
  EXPECT_EQ(Model().JudgeProcess(here, Listed(7, rpc::RUNNING)),
            Process::kStray);
}

TEST_F(AgentModelTest, EachListedCheckpointIsJudged) {
  Arrive(1, 100);
  Arrive(2, 200, /*start=*/false, /*gpus=*/8);  // more than there are
  ASSERT_EQ(h_.job(JobId(2)).state, core::JobState::kQueued);
  const ServerId s(0);
  // Of a live job: held for it.
  EXPECT_EQ(Model().JudgeCheckpoint(s, Holding({1}, kCluster, 100), 0),
            Checkpoint::kHeld);
  // Saved in another cluster (its job 1 is another job).
  EXPECT_TRUE(Model().ForeignCheckpoint(Holding({1}, "cluster-b"), 0));
  EXPECT_EQ(Model().JudgeCheckpoint(s, Holding({1}, "cluster-b", 100), 0),
            Checkpoint::kForeign);
  // Said by no cluster (an older agent): taken as this one's.
  EXPECT_EQ(Model().JudgeCheckpoint(s, Holding({1}, ""), 0), Checkpoint::kHeld);
  // Not a job id.
  EXPECT_EQ(
      Model().JudgeCheckpoint(s, Holding({int64_t{1} << 40}, kCluster), 0),
      Checkpoint::kBadId);
  // Of another job of id 2 (queued, nothing of it anywhere): dropped.
  EXPECT_EQ(Model().JudgeCheckpoint(s, Holding({2}, kCluster, 150), 0),
            Checkpoint::kOtherSubmissionDropped);
  // Of another job of id 1, whose own process is on that server: ignored
  // (a drop would reach it too); on the other server, dropped.
  const ServerId here = ServerOf(1);
  EXPECT_EQ(Model().JudgeCheckpoint(here, Holding({1}, kCluster, 50), 0),
            Checkpoint::kOtherSubmissionIgnored);
  EXPECT_EQ(Model().JudgeCheckpoint(ServerId(1 - here.value),
                                    Holding({1}, kCluster, 50), 0),
            Checkpoint::kOtherSubmissionDropped);
  // Of a job that ended, or that this daemon never ran.
  h_.Send(core::KillRequest{JobId(1), "test"});
  EXPECT_EQ(Model().JudgeCheckpoint(s, Holding({1}, kCluster, 100), 0),
            Checkpoint::kEnded);
  EXPECT_EQ(Model().JudgeCheckpoint(s, Holding({9}, kCluster), 0),
            Checkpoint::kEnded);
}

TEST_F(AgentModelTest,
       TheListSettlesAnActionReplayedFromTheLogByTheProcesssState) {
  Arrive(1, 100, /*start=*/false);  // its start under way
  EXPECT_EQ(Model().SettleByList(1, rpc::RUNNING, /*sent=*/false),
            std::optional<bool>(true));
  // Sent by this daemon process: its reply settles it.
  EXPECT_EQ(Model().SettleByList(1, rpc::RUNNING, /*sent=*/true), std::nullopt);
  h_.CompleteAll();
  EXPECT_EQ(Model().SettleByList(1, rpc::RUNNING, false), std::nullopt);
  // An operator's hold: a suspend under way.
  h_.Send(core::HoldRequest{JobId(1), true});
  EXPECT_EQ(Model().SettleByList(1, rpc::SUSPENDED, false),
            std::optional<bool>(true));
  EXPECT_EQ(Model().SettleByList(1, rpc::RUNNING, false),
            std::optional<bool>(false));
  h_.CompleteAll();
  // Released: a resume under way.
  h_.Send(core::HoldRequest{JobId(1), false});
  ASSERT_EQ(h_.job(JobId(1)).in_flight, core::ActionKind::kResume);
  EXPECT_EQ(Model().SettleByList(1, rpc::RUNNING, false),
            std::optional<bool>(true));
  EXPECT_EQ(Model().SettleByList(1, rpc::SUSPENDED, false),
            std::optional<bool>(false));
}

TEST_F(AgentModelTest, AProcessInTheOtherStateInTwoReportsInARowIsSetRight) {
  Arrive(1, 100);
  StateMismatch m;
  // Agreeing, or not checkable: nothing.
  EXPECT_EQ(Model().CheckState(1, rpc::RUNNING, true, m), State::kAgrees);
  EXPECT_EQ(Model().CheckState(1, rpc::SUSPENDED, false, m), State::kAgrees);
  EXPECT_EQ(m.reports, 0);
  // Suspended while the core has it running: once, then set right.
  EXPECT_EQ(Model().CheckState(1, rpc::SUSPENDED, true, m), State::kDiffers);
  EXPECT_EQ(m.reports, 1);
  EXPECT_EQ(Model().CheckState(1, rpc::SUSPENDED, true, m), State::kSetRight);
  EXPECT_EQ(m.reports, 0);
  // A report that agrees between the two starts the count again.
  EXPECT_EQ(Model().CheckState(1, rpc::SUSPENDED, true, m), State::kDiffers);
  EXPECT_EQ(Model().CheckState(1, rpc::RUNNING, true, m), State::kAgrees);
  EXPECT_EQ(Model().CheckState(1, rpc::SUSPENDED, true, m), State::kDiffers);
  // So does a suspend and resume of the job between them.
  h_.Send(core::HoldRequest{JobId(1), true});
  h_.CompleteAll();
  h_.Send(core::HoldRequest{JobId(1), false});
  h_.CompleteAll();
  EXPECT_EQ(Model().CheckState(1, rpc::SUSPENDED, true, m), State::kDiffers);
  // Running while the core has it suspended.
  h_.Send(core::HoldRequest{JobId(1), true});
  EXPECT_EQ(Model().CheckState(1, rpc::RUNNING, true, m), State::kAgrees)
      << "an action under way is not checked";
  h_.CompleteAll();
  EXPECT_EQ(Model().CheckState(1, rpc::RUNNING, true, m), State::kDiffers);
  EXPECT_EQ(Model().CheckState(1, rpc::RUNNING, true, m), State::kSetRight);
}

// The state check's plan: what the agent is told, once the process was
// in the other state in two reports in a row, and only where it can be
// checked (its process there, not leaving, its agent not stopping).
TEST_F(AgentModelTest, AProcessInTheOtherStateIsToldToSetItRight) {
  Arrive(1, 100);
  const ServerId s = ServerOf(1);
  StateMismatch m;
  EXPECT_FALSE(Model().PlanStateCheck(s, "a0", 1, rpc::SUSPENDED, false, m));
  const std::optional<AgentModel::SetRight> set =
      Model().PlanStateCheck(s, "a0", 1, rpc::SUSPENDED, false, m);
  ASSERT_TRUE(set);
  EXPECT_FALSE(set->suspend);
  EXPECT_EQ(set->detail,
            "agent 'a0' has its process suspended while the scheduler has it "
            "running, in two reports: resumed it");
  for (bool away : {false, true}) {
    m = {};
    jobs_[1].proc.leaving = !away;
    EXPECT_FALSE(Model().PlanStateCheck(s, "a0", 1, rpc::SUSPENDED, away, m));
    EXPECT_FALSE(Model().PlanStateCheck(s, "a0", 1, rpc::SUSPENDED, away, m));
  }
  jobs_[1].proc.leaving = false;
  m = {};
  const ServerId other(1 - s.value);
  EXPECT_FALSE(
      Model().PlanStateCheck(other, "a1", 1, rpc::SUSPENDED, false, m));
  EXPECT_FALSE(
      Model().PlanStateCheck(other, "a1", 1, rpc::SUSPENDED, false, m));
}

TEST_F(AgentModelTest, AnAgentsUnknownIdsAndWhatItMayKeepAreOfThisClusterOnly) {
  Arrive(1, 100);
  Arrive(2, 200, /*start=*/false, /*gpus=*/8);  // more than there are
  ASSERT_EQ(h_.job(JobId(2)).state, core::JobState::kQueued);
  rpc::RegisterAgentRequest r;
  r.set_cluster_id(kCluster);
  *r.add_jobs() = Listed(1, rpc::RUNNING, 100);
  *r.add_jobs() = Listed(5, rpc::RUNNING, 500);
  EXPECT_TRUE(Model().OfThisCluster(r));
  EXPECT_EQ(Model().HighestUnknownId(r), 5);
  // A checkpoint of this cluster counts; one of another does not.
  r.add_checkpoints(8);
  r.add_checkpoint_clusters(kCluster);
  r.add_checkpoints(12);
  r.add_checkpoint_clusters("cluster-b");
  EXPECT_EQ(Model().HighestUnknownId(r), 8);
  // Listed without a spec: nothing it may keep.
  EXPECT_FALSE(Model().MayAdopt(r));
  r.mutable_jobs(1)->mutable_spec()->set_name("five");  // unknown to it
  EXPECT_TRUE(Model().MayAdopt(r));
  rpc::RegisterAgentRequest queued;
  queued.set_cluster_id(kCluster);
  *queued.add_jobs() = Listed(2, rpc::RUNNING, 200);
  queued.mutable_jobs(0)->mutable_spec()->set_name("two");
  EXPECT_TRUE(Model().MayAdopt(queued));  // the core has it queued
  *queued.mutable_jobs(0) = Listed(1, rpc::RUNNING, 100);
  queued.mutable_jobs(0)->mutable_spec()->set_name("one");
  EXPECT_FALSE(Model().MayAdopt(queued));  // running where the core has it
  // Another cluster's agent (or one before this store had an id).
  r.set_cluster_id("cluster-b");
  EXPECT_FALSE(Model().OfThisCluster(r));
  EXPECT_FALSE(Model().MayAdopt(r));
  EXPECT_EQ(Model().HighestUnknownId(r), 8);
  cluster_.clear();
  r.set_cluster_id("");
  EXPECT_FALSE(Model().OfThisCluster(r));
}

// A process of a job the core has queued (its start failed, say, and it
// waits to try again) is kept where it runs when nothing else of it is
// anywhere, it was submitted when this job was, and its GPUs are free.
TEST_F(AgentModelTest, AQueuedJobsProcessIsKeptWhereItRunsWhenItsGpusAreFree) {
  Arrive(1, 100, true, 2);
  Arrive(2, 200, true, 2);
  Arrive(3, 300, /*start=*/false);  // no room: queued
  const ServerId busy = ServerOf(1);
  const ServerId freed = ServerOf(2);
  h_.Send(core::KillRequest{JobId(2), "make room"});
  h_.Fail(JobId(3));  // its start there failed: queued, waiting to retry
  ASSERT_EQ(h_.job(JobId(3)).state, JobState::kQueued);
  ASSERT_FALSE(h_.job(JobId(3)).busy());
  rpc::RegisterAgentRequest r;
  r.set_cluster_id(kCluster);
  rpc::AgentJob listed = Listed(3, rpc::RUNNING, 300);
  listed.mutable_spec()->set_name("three");
  listed.add_gpus(1);
  const auto found = Model().QueuedJobFound(freed, r, listed);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->job, JobId(3));
  EXPECT_EQ(found->placed_on, Model().ClusterGpus(freed, {1}));
  EXPECT_FALSE(found->suspended);
  listed.set_state(rpc::SUSPENDED);
  EXPECT_TRUE(Model().QueuedJobFound(freed, r, listed)->suspended);
  // Not where its GPUs hold another job, nor on GPUs the job's size does
  // not match.
  EXPECT_FALSE(Model().QueuedJobFound(busy, r, listed).has_value());
  listed.add_gpus(0);
  EXPECT_FALSE(Model().QueuedJobFound(freed, r, listed).has_value());
  listed.clear_gpus();
  listed.add_gpus(1);
  // Another submission of this id, no spec, another cluster's agent.
  listed.set_submitted_us(301);
  EXPECT_FALSE(Model().QueuedJobFound(freed, r, listed).has_value());
  listed.set_submitted_us(300);
  rpc::AgentJob bare = listed;
  bare.clear_spec();
  EXPECT_FALSE(Model().QueuedJobFound(freed, r, bare).has_value());
  rpc::RegisterAgentRequest other = r;
  other.set_cluster_id("cluster-b");
  EXPECT_FALSE(Model().QueuedJobFound(freed, other, listed).has_value());
  // Something of it elsewhere (a kept checkpoint), or held: not kept.
  jobs_[3].proc = Proc{busy, {}, false, true};
  EXPECT_FALSE(Model().QueuedJobFound(freed, r, listed).has_value());
  jobs_[3].proc = Proc{};
  EXPECT_TRUE(Model().QueuedJobFound(freed, r, listed).has_value());
  h_.Send(core::HoldRequest{JobId(3), true});
  EXPECT_FALSE(Model().QueuedJobFound(freed, r, listed).has_value());
  // A running job is not the queue's.
  rpc::AgentJob running = Listed(1, rpc::RUNNING, 100);
  running.mutable_spec()->set_name("one");
  running.add_gpus(0);
  EXPECT_FALSE(Model().QueuedJobFound(busy, r, running).has_value());
}

// A job whose record the store lost (restored from an older backup), which
// an agent still runs or holds, is taken back when its id is a lost one and
// its spec and submission time are sound; its process is kept where its
// GPUs can take it.
TEST_F(AgentModelTest, AJobTheStoreLostIsTakenBackWhenItsSpecAndTimeAreSound) {
  using Verdict = AgentModel::LostJob::Verdict;
  Arrive(1, 100, true, 2);  // known, on one server's both GPUs
  const IdRanges lost = {{5, 9}};
  rpc::JobSpec spec;
  spec.set_name("six");
  spec.set_command("python3 train.py");
  spec.set_gpus(1);
  EXPECT_EQ(Model().JudgeLostJob(6, spec, 500, lost, 1000).verdict,
            Verdict::kAdopt);
  EXPECT_EQ(Model().JudgeLostJob(10, spec, 500, lost, 1000).verdict,
            Verdict::kNotLost)
      << "not a lost id";
  EXPECT_EQ(Model().JudgeLostJob(1, spec, 500, {{1, 9}}, 1000).verdict,
            Verdict::kNotLost)
      << "a job the store has";
  rpc::JobSpec bare = spec;
  bare.clear_command();
  EXPECT_EQ(Model().JudgeLostJob(6, bare, 500, lost, 1000).verdict,
            Verdict::kNotLost);
  rpc::JobSpec bad = spec;
  bad.set_gpus(3);
  AgentModel::LostJob r = Model().JudgeLostJob(6, bad, 500, lost, 1000);
  EXPECT_EQ(r.verdict, Verdict::kRefused);
  EXPECT_EQ(r.why,
            "its spec is refused (field 'gpus': must be a power of two, got "
            "3)");
  r = Model().JudgeLostJob(6, spec, 2000, lost, 1000);
  EXPECT_EQ(r.verdict, Verdict::kRefused);
  EXPECT_EQ(r.why, "its submission time (2000 us) is not before now");
  EXPECT_EQ(Model().JudgeLostJob(6, spec, 0, lost, 1000).verdict,
            Verdict::kRefused);

  // Where its process is kept: its GPUs, if free and this server's.
  const ServerId full = ServerOf(1);
  const ServerId free(1 - full.value);
  rpc::AgentJob listed = Listed(6, rpc::RUNNING, 500);
  listed.add_gpus(1);
  std::string why;
  EXPECT_EQ(Model().PlaceOfListed(free, listed, 1, &why),
            Model().ClusterGpus(free, {1}));
  EXPECT_EQ(why, "");
  EXPECT_TRUE(Model().PlaceOfListed(full, listed, 1, &why).empty());
  EXPECT_NE(why.find("holds job 1"), std::string::npos) << why;
  listed.set_gpus(0, 7);
  EXPECT_TRUE(Model().PlaceOfListed(free, listed, 1, &why).empty());
  EXPECT_EQ(why, "its GPUs are not this server's");
}

rpc::JobExit ExitOf(int64_t id, int code) {
  rpc::JobExit e;
  e.set_job_id(id);
  e.set_exit_code(code);
  return e;
}

// A reported exit ends the job only from the process where the daemon has
// it, and only when it is neither one the daemon caused nor its agent's
// stop.
TEST_F(AgentModelTest, AnExitEndsItsJobOnlyFromItsProcessAndOnlyItsOwn) {
  Arrive(1, 100);
  const ServerId here = ServerOf(1);
  const ServerId there(1 - here.value);
  EXPECT_EQ(Model().JudgeExit(here, ExitOf(1, 0)), Exit::kEnds);
  EXPECT_EQ(Model().JudgeExit(here, ExitOf(1, 3)), Exit::kEnds);
  EXPECT_EQ(Model().JudgeExit(there, ExitOf(1, 0)), Exit::kNotOurs);
  EXPECT_EQ(Model().JudgeExit(here, ExitOf(9, 0)), Exit::kNotOurs);
  rpc::JobExit e = ExitOf(1, 75);
  e.set_superseded(true);
  EXPECT_EQ(Model().JudgeExit(here, e), Exit::kSuperseded);
  // One the daemon killed itself, counted per server.
  jobs_[1].ignore_exits[here.value] = 1;
  EXPECT_EQ(Model().JudgeExit(here, ExitOf(1, 0)), Exit::kIgnored);
  jobs_[1].ignore_exits[here.value] = 0;
  EXPECT_EQ(Model().JudgeExit(here, ExitOf(1, 0)), Exit::kEnds);
  // Leaving for a move: its exits 75 and 76 and a stopped process are the
  // move's; another exit is the job's end.
  jobs_[1].proc.leaving = true;
  EXPECT_EQ(Model().JudgeExit(here, ExitOf(1, 75)), Exit::kLeftToMove);
  EXPECT_EQ(Model().JudgeExit(here, ExitOf(1, 76)), Exit::kLeftToMove);
  EXPECT_EQ(Model().JudgeExit(here, ExitOf(1, -9)), Exit::kLeftToMove);
  EXPECT_EQ(Model().JudgeExit(here, ExitOf(1, 1)), Exit::kEnds);
  jobs_[1].proc.leaving = false;
  EXPECT_EQ(Model().JudgeExit(here, ExitOf(1, 75)), Exit::kEnds);
  // Its agent stopped: saved, unsaved; killed while the job goes on.
  e = ExitOf(1, -15);
  e.set_checkpoint_kept(true);
  EXPECT_EQ(Model().JudgeExit(here, e), Exit::kStoppedSaved);
  e = ExitOf(1, -9);
  e.set_agent_stopped(true);
  EXPECT_EQ(Model().JudgeExit(here, e), Exit::kStoppedUnsaved);
  e = ExitOf(1, -9);
  e.set_killed(true);
  EXPECT_EQ(Model().JudgeExit(here, e), Exit::kKilledGoesOn);
  // Failed, its periodic checkpoint kept.
  rpc::JobExit periodic = ExitOf(1, -9);
  periodic.set_checkpoint_kept(true);
  periodic.set_checkpoint_method("periodic");
  EXPECT_EQ(Model().JudgeExit(here, periodic), Exit::kFailedSaved);
  EXPECT_EQ(Model().JudgeExit(there, periodic), Exit::kNotOurs);
  // After the job's end: noted, not its end again; a checkpoint kept for
  // it is passed by.
  h_.Send(core::JobFinished{JobId(1), true});
  EXPECT_EQ(Model().JudgeExit(here, ExitOf(1, 0)), Exit::kAfterEnd);
  EXPECT_EQ(Model().JudgeExit(here, e), Exit::kAfterEnd);
  EXPECT_EQ(Model().JudgeExit(here, periodic), Exit::kAfterEnd);
  e = ExitOf(1, -15);
  e.set_checkpoint_kept(true);
  EXPECT_EQ(Model().JudgeExit(here, e), Exit::kNotOurs);
}

// A part of a job spanning servers other than its lead ends the job only
// when it fails; the lead's exit is the job's.
TEST_F(AgentModelTest, APartsExitEndsItsJobOnlyInFailure) {
  Arrive(2, 100);
  const ServerId lead = ServerOf(2);
  const ServerId other(1 - lead.value);
  jobs_[2].proc.followers.push_back(Part{other, {0}});
  EXPECT_EQ(Model().JudgeExit(other, ExitOf(2, 1)), Exit::kPartFailed);
  EXPECT_EQ(Model().JudgeExit(other, ExitOf(2, 0)), Exit::kPartPassed);
  rpc::JobExit e = ExitOf(2, -9);
  e.set_killed(true);
  EXPECT_EQ(Model().JudgeExit(other, e), Exit::kPartPassed);
  e = ExitOf(2, -9);
  e.set_agent_stopped(true);
  EXPECT_EQ(Model().JudgeExit(other, e), Exit::kPartPassed);
  // A gang's saved stop is not a single process's: its lead's exit.
  e = ExitOf(2, 0);
  e.set_checkpoint_kept(true);
  EXPECT_EQ(Model().JudgeExit(lead, e), Exit::kEnds);
  EXPECT_EQ(Model().JudgeExit(lead, ExitOf(2, 1)), Exit::kEnds);
  h_.Send(core::JobFinished{JobId(2), false});
  EXPECT_EQ(Model().JudgeExit(other, ExitOf(2, 1)), Exit::kPartPassed);
}

// An exit's plan: the job's record after it, its history line, whether it
// ends the job, and what of the job is then stopped.
TEST_F(AgentModelTest, AnExitsPlanSaysTheRecordTheLineTheEndAndWhatStops) {
  Arrive(1, 100);
  const ServerId here = ServerOf(1);
  jobs_[1].progress.set_minibatches(40);
  // Passed by: nothing changes.
  rpc::JobExit e = ExitOf(1, 75);
  e.set_superseded(true);
  AgentModel::ExitPlan plan = Model().PlanExit(here, "a0", e, 500);
  EXPECT_EQ(plan.verdict, Exit::kSuperseded);
  EXPECT_FALSE(plan.record || plan.line || plan.finishes || plan.stop);
  // One the daemon killed: counted off.
  jobs_[1].ignore_exits[here.value] = 2;
  plan = Model().PlanExit(here, "a0", ExitOf(1, 0), 500);
  ASSERT_TRUE(plan.record);
  EXPECT_EQ(plan.record->ignore_exits.at(here.value), 1);
  EXPECT_FALSE(plan.line || plan.finishes);
  jobs_[1].ignore_exits.clear();
  // Saved as its agent stopped: no process, its checkpoint there, the
  // mini-batch it goes on from; not its end.
  e = ExitOf(1, -15);
  e.set_checkpoint_kept(true);
  e.set_minibatches(64);
  plan = Model().PlanExit(here, "a0", e, 500);
  ASSERT_TRUE(plan.record && plan.line);
  EXPECT_FALSE(plan.record->proc.exists);
  EXPECT_TRUE(plan.record->proc.checkpoint);
  EXPECT_EQ(plan.record->kept_at, 64);
  EXPECT_EQ(plan.record->stopped_us, 500);
  EXPECT_EQ(plan.record->progress.minibatches(), 64);
  EXPECT_EQ(plan.line->what, "stop");
  EXPECT_NE(plan.line->detail.find("agent 'a0' stopped; the job saved a "
                                   "checkpoint at mini-batch 64"),
            std::string::npos);
  EXPECT_FALSE(plan.finishes || plan.stop);
  e.set_checkpoint_method("criu");
  EXPECT_EQ(Model().PlanExit(here, "a0", e, 500).record->kept_at, -1);
  // Killed unsaved as its agent stopped: it stays placed.
  e = ExitOf(1, -9);
  e.set_agent_stopped(true);
  plan = Model().PlanExit(here, "a0", e, 500);
  ASSERT_TRUE(plan.record && plan.line);
  EXPECT_TRUE(plan.record->proc.exists);
  EXPECT_FALSE(plan.finishes);
  // Its end: no process, its code, the line, JobFinished passed or failed.
  plan = Model().PlanExit(here, "a0", ExitOf(1, 3), 500);
  ASSERT_TRUE(plan.record && plan.line && plan.finishes);
  EXPECT_FALSE(plan.record->proc.exists);
  EXPECT_EQ(plan.record->exit_code, 3);
  EXPECT_EQ(plan.line->what, "exit");
  EXPECT_FALSE(plan.line->ok);
  EXPECT_EQ(plan.line->detail, "exit code 3");
  EXPECT_FALSE(*plan.finishes);
  EXPECT_FALSE(plan.stop);  // one process, gone
  EXPECT_TRUE(*Model().PlanExit(here, "a0", ExitOf(1, 0), 500).finishes);
  EXPECT_FALSE(plan.checkpoint);
  // Failed, its periodic checkpoint kept there: no process, the checkpoint
  // and the mini-batch it was saved at; a failure that has a checkpoint.
  e = ExitOf(1, -9);
  e.set_checkpoint_kept(true);
  e.set_checkpoint_method("periodic");
  e.set_minibatches(150);
  plan = Model().PlanExit(here, "a0", e, 600);
  ASSERT_TRUE(plan.record && plan.line && plan.finishes);
  EXPECT_FALSE(plan.record->proc.exists);
  EXPECT_TRUE(plan.record->proc.checkpoint);
  EXPECT_EQ(plan.record->proc.server, here);
  EXPECT_EQ(plan.record->kept_at, 150);
  EXPECT_EQ(plan.record->exit_code, -9);
  EXPECT_EQ(plan.record->progress.minibatches(), 150);
  EXPECT_FALSE(*plan.finishes);
  EXPECT_TRUE(plan.checkpoint);
  EXPECT_FALSE(plan.permanent || plan.stop);
  EXPECT_EQ(plan.line->what, "exit");
  EXPECT_FALSE(plan.line->ok);
  EXPECT_EQ(plan.line->detail,
            "exit code -9; its last periodic checkpoint, at mini-batch 150, "
            "is kept on a0");
  e.set_minibatches(0);
  EXPECT_EQ(Model().PlanExit(here, "a0", e, 600).record->kept_at, -1);
  // After the job's end: noted, not ended again.
  h_.Send(core::JobFinished{JobId(1), true});
  plan = Model().PlanExit(here, "a0", ExitOf(1, 0), 500);
  ASSERT_TRUE(plan.record);
  EXPECT_EQ(plan.record->exit_code, 0);
  EXPECT_FALSE(plan.line || plan.finishes || plan.stop);
  // A periodic checkpoint kept after the end: dropped there.
  plan = Model().PlanExit(here, "a0", e, 500);
  ASSERT_TRUE(plan.stop);
  EXPECT_EQ(plan.stop->server, here);
  EXPECT_TRUE(plan.stop->checkpoint);
  EXPECT_FALSE(plan.stop->exists);
}

// A job spanning servers: a part's failure ends it and stops every part;
// the lead's end stops the other parts.
TEST_F(AgentModelTest, AGangsEndStopsItsOtherParts) {
  Arrive(2, 100);
  const ServerId lead = ServerOf(2);
  const ServerId other(1 - lead.value);
  jobs_[2].proc.followers.push_back(Part{other, {0}});
  AgentModel::ExitPlan plan = Model().PlanExit(other, "a1", ExitOf(2, 1), 7);
  EXPECT_EQ(plan.verdict, Exit::kPartFailed);
  ASSERT_TRUE(plan.finishes && plan.stop && plan.line);
  EXPECT_FALSE(*plan.finishes);
  EXPECT_EQ(plan.stop->server, lead);
  EXPECT_EQ(plan.line->detail,
            "exit code 1 of its part on a1; its other parts are stopped");
  plan = Model().PlanExit(lead, "a0", ExitOf(2, 0), 7);
  ASSERT_TRUE(plan.finishes && plan.stop);
  EXPECT_TRUE(*plan.finishes);
  EXPECT_FALSE(plan.stop->server.valid());  // the lead's own is gone
  ASSERT_EQ(plan.stop->followers.size(), 1u);
  EXPECT_EQ(plan.stop->followers[0].server, other);
}

// A job spanning servers that saves periodic checkpoints: a part's
// failure stops its lead keeping its last one, and the run ends at the
// lead's exit, going on from that checkpoint (kept on the lead's server)
// if one was saved; later parts' exits are passed by.
TEST_F(AgentModelTest, AGangSavingPeriodicallyEndsItsRunAtItsLeadsExit) {
  Arrive(2, 100);
  const ServerId lead = ServerOf(2);
  const ServerId other(1 - lead.value);
  jobs_[2].proc.followers.push_back(Part{other, {0}});
  jobs_[2].spec.set_checkpoint_every_minibatches(100);
  AgentModel::ExitPlan plan = Model().PlanExit(other, "a1", ExitOf(2, 1), 7);
  EXPECT_EQ(plan.verdict, Exit::kPartFailed);
  EXPECT_FALSE(plan.finishes) << "the lead's exit ends the run";
  ASSERT_TRUE(plan.stop && plan.line && plan.record);
  EXPECT_EQ(plan.stop->server, lead);
  EXPECT_TRUE(plan.stop_keeps_periodic);
  EXPECT_EQ(plan.line->detail,
            "exit code 1 of its part on a1; its other parts are stopped, its "
            "lead keeping its last periodic checkpoint");
  EXPECT_EQ(plan.record->part_failed, 1);
  EXPECT_TRUE(plan.record->proc.exists);
  const JobExtra before = jobs_[2];
  jobs_[2] = *plan.record;
  // Another part failing meanwhile, or one killed: passed by.
  EXPECT_EQ(Model().JudgeExit(other, ExitOf(2, 1)), Exit::kPartPassed);

  // The lead, killed, kept its checkpoint: the run failed with the part's
  // code, the checkpoint on the lead's server for the next.
  rpc::JobExit kept = ExitOf(2, -15);
  kept.set_killed(true);
  kept.set_checkpoint_kept(true);
  kept.set_checkpoint_method("periodic");
  kept.set_minibatches(300);
  plan = Model().PlanExit(lead, "a0", kept, 9);
  EXPECT_EQ(plan.verdict, Exit::kFailedSaved);
  ASSERT_TRUE(plan.finishes && plan.record && plan.line && plan.stop);
  EXPECT_FALSE(*plan.finishes);
  EXPECT_TRUE(plan.checkpoint);
  EXPECT_EQ(plan.record->exit_code, 1);
  EXPECT_FALSE(plan.record->part_failed);
  EXPECT_EQ(plan.record->kept_at, 300);
  EXPECT_EQ(plan.record->proc.server, lead);
  EXPECT_TRUE(plan.record->proc.checkpoint);
  EXPECT_FALSE(plan.record->proc.exists);
  EXPECT_FALSE(plan.record->proc.gang()) << "the checkpoint is the lead's";
  EXPECT_FALSE(plan.stop->server.valid());
  ASSERT_EQ(plan.stop->followers.size(), 1u);
  EXPECT_EQ(plan.line->detail,
            "its lead stopped after its part failed (exit code 1); its last "
            "periodic checkpoint, at mini-batch 300, is kept on a0");

  // Killed before any save: the run failed with the part's code.
  rpc::JobExit unsaved = ExitOf(2, -15);
  unsaved.set_killed(true);
  EXPECT_EQ(Model().JudgeExit(lead, unsaved), Exit::kEnds);
  plan = Model().PlanExit(lead, "a0", unsaved, 9);
  ASSERT_TRUE(plan.finishes && plan.record && plan.line);
  EXPECT_FALSE(*plan.finishes);
  EXPECT_FALSE(plan.checkpoint);
  EXPECT_EQ(plan.record->exit_code, 1);
  EXPECT_FALSE(plan.record->part_failed);
  EXPECT_FALSE(plan.record->proc.exists);
  EXPECT_EQ(plan.line->detail,
            "its lead stopped after its part failed (exit code 1), no "
            "periodic checkpoint saved yet (exit code -15)");

  // The lead failing first, by itself, with its checkpoint: the run's end,
  // its other parts stopped.
  jobs_[2] = before;
  rpc::JobExit own = ExitOf(2, 1);
  own.set_checkpoint_kept(true);
  own.set_checkpoint_method("periodic");
  own.set_minibatches(200);
  plan = Model().PlanExit(lead, "a0", own, 9);
  EXPECT_EQ(plan.verdict, Exit::kFailedSaved);
  ASSERT_TRUE(plan.stop && plan.record && plan.line);
  EXPECT_FALSE(plan.stop->server.valid());
  ASSERT_EQ(plan.stop->followers.size(), 1u);
  EXPECT_EQ(plan.stop->followers[0].server, other);
  EXPECT_EQ(plan.record->exit_code, 1);
  EXPECT_EQ(plan.line->detail,
            "exit code 1; its last periodic checkpoint, at mini-batch 200, is "
            "kept on a0");
  jobs_[2] = *plan.record;
  EXPECT_EQ(Model().JudgeExit(other, ExitOf(2, 1)), Exit::kNotOurs);
}

// A profile's plan: the job's progress (its last metric and count stand
// until the new process reports its own), the core told of the library,
// and the report fed on a grid of the interval.
TEST_F(AgentModelTest, AProfilesPlanFeedsTheCoreOnAGridOfTheInterval) {
  Arrive(1, 100);
  const ServerId here = ServerOf(1);
  const ServerId there(1 - here.value);
  jobs_[1].progress.set_minibatches(40);
  jobs_[1].progress.set_metric(0.5);
  jobs_[1].progress.set_metric_reports(2);
  rpc::JobProfile p;
  p.set_job_id(1);
  p.mutable_progress()->set_minibatch_rate(3.0);
  p.mutable_progress()->set_uses_library(true);
  EXPECT_FALSE(Model().PlanProfile(there, p, 1'000'000, 0));
  std::optional<AgentModel::ProfilePlan> plan =
      Model().PlanProfile(here, p, 1'000'000, 0);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->progress.minibatches(), 40);
  EXPECT_EQ(plan->progress.metric(), 0.5);
  EXPECT_DOUBLE_EQ(plan->progress.minibatch_rate(), 3.0);
  EXPECT_FALSE(plan->carrier);  // as the core has it
  ASSERT_TRUE(plan->report);
  EXPECT_EQ(plan->report->minibatches, 40);
  EXPECT_DOUBLE_EQ(plan->report->minibatch_rate, 3.0);
  // A process without the library: the core is told.
  p.mutable_progress()->set_uses_library(false);
  EXPECT_EQ(Model().PlanProfile(here, p, 1'000'000, 0)->carrier,
            core::Carrier::kProcessImage);
  // Every 10 s: the first report is fed and the next is due on the grid,
  // whenever within it the reports come.
  plan = Model().PlanProfile(here, p, 1'000'000, 10'000'000);
  ASSERT_TRUE(plan && plan->report);
  EXPECT_EQ(plan->profile_due_us, 11'000'000);
  jobs_[1].profile_due_us = 11'000'000;
  plan = Model().PlanProfile(here, p, 10'900'000, 10'000'000);
  ASSERT_TRUE(plan);
  EXPECT_FALSE(plan->report);
  EXPECT_EQ(plan->profile_due_us, 11'000'000);
  plan = Model().PlanProfile(here, p, 33'000'000, 10'000'000);
  ASSERT_TRUE(plan && plan->report);
  EXPECT_EQ(plan->profile_due_us, 41'000'000);
  // What is no number, or below 0, is unknown: 0 (the event log takes
  // finite numbers only); a utilization is at most 1.
  for (const double bad : {std::nan(""), HUGE_VAL, -2.0}) {
    p.mutable_progress()->set_minibatch_rate(bad);
    p.mutable_progress()->set_gpu_utilization(bad);
    plan = Model().PlanProfile(here, p, 50'000'000, 0);
    ASSERT_TRUE(plan && plan->report);
    EXPECT_EQ(plan->report->minibatch_rate, 0.0) << bad;
    EXPECT_EQ(plan->report->gpu_utilization, 0.0) << bad;
    EXPECT_EQ(plan->progress.minibatch_rate(), 0.0) << bad;
    EXPECT_TRUE(DecodeEvent(EncodeEvent(*plan->report)).ok()) << bad;
  }
  p.mutable_progress()->set_gpu_utilization(1.5);
  EXPECT_EQ(
      Model().PlanProfile(here, p, 50'000'000, 0)->report->gpu_utilization,
      1.0);
  // Ended: passed by.
  h_.Send(core::JobFinished{JobId(1), true});
  EXPECT_FALSE(Model().PlanProfile(here, p, 50'000'000, 0));
}

// At its first report after registering, the jobs its agent did not list
// are lost unless the report shows them running or they ended or left.
TEST_F(AgentModelTest, JobsNotListedAreLostAtTheFirstReportUnlessRunning) {
  Arrive(1, 100);
  Arrive(2, 100);
  Arrive(3, 100);
  const ServerId s = ServerOf(1);
  for (int32_t id : {2, 3}) jobs_[id].proc.server = s;
  jobs_[3].proc.exists = false;  // left since
  rpc::AgentReport r;
  r.add_profiles()->set_job_id(2);
  EXPECT_EQ(Model().LostAtFirstReport(s, {1, 2, 3, 9}, r),
            std::vector<int32_t>{1});
  h_.Send(core::JobFinished{JobId(1), true});
  EXPECT_TRUE(Model().LostAtFirstReport(s, {1, 2, 3}, r).empty());
}

// What is done about each process a registration lists: one the daemon
// lost track of is kept where the core places it; a stray of a job the
// daemon knows is stopped, its exit ignored and the reason in its history;
// one of a job it does not know is stopped alone.
TEST_F(AgentModelTest, EachListedProcessGetsItsStep) {
  Arrive(1, 100);
  const ServerId here = ServerOf(1);
  const ServerId there(1 - here.value);
  AgentModel::ListedProcess p =
      Model().PlanListedProcess(here, "a0", Listed(1, rpc::RUNNING, 100));
  EXPECT_EQ(p.verdict, Process::kOurs);
  EXPECT_FALSE(p.step.proc || p.step.line || p.step.stop || p.step.event);
  jobs_[1].proc = Proc{};
  p = Model().PlanListedProcess(here, "a0", Listed(1, rpc::RUNNING, 100));
  EXPECT_EQ(p.verdict, Process::kAdopt);
  ASSERT_TRUE(p.step.proc && p.step.line);
  EXPECT_TRUE(p.step.proc->exists);
  EXPECT_EQ(p.step.proc->server, here);
  EXPECT_EQ(p.step.proc->local, std::vector<int32_t>{0});
  EXPECT_FALSE(p.step.stop);
  p = Model().PlanListedProcess(there, "a1", Listed(1, rpc::RUNNING, 99));
  EXPECT_EQ(p.verdict, Process::kStray);
  ASSERT_TRUE(p.step.stop && p.step.line);
  EXPECT_EQ(p.step.stop->server, there);
  EXPECT_TRUE(p.step.ignore_exit);
  EXPECT_NE(p.step.line->detail.find("stray process on a1 (of another job"),
            std::string::npos);
  p = Model().PlanListedProcess(there, "a1", Listed(7, rpc::RUNNING));
  ASSERT_TRUE(p.step.stop);
  EXPECT_FALSE(p.step.ignore_exit || p.step.line);
}

// A listed checkpoint: held for a live job, dropped (with a line in the
// log) for one that ended, ignored with a line for one of another cluster.
TEST_F(AgentModelTest, EachListedCheckpointGetsItsStep) {
  Arrive(1, 100);
  Arrive(2, 100);
  h_.Send(core::JobFinished{JobId(2), true});
  const ServerId s = ServerOf(1);
  rpc::RegisterAgentRequest r = Holding({1, 2}, kCluster);
  AgentModel::ListedCheckpoint c = Model().PlanListedCheckpoint(s, "a0", r, 0);
  EXPECT_EQ(c.verdict, Checkpoint::kHeld);
  EXPECT_TRUE(c.step.log.empty());
  EXPECT_FALSE(c.step.stop);
  c = Model().PlanListedCheckpoint(s, "a0", r, 1);
  EXPECT_EQ(c.verdict, Checkpoint::kEnded);
  ASSERT_TRUE(c.step.stop);
  EXPECT_EQ(c.step.stop->server, s);
  EXPECT_TRUE(c.step.stop->checkpoint);
  EXPECT_FALSE(c.step.stop->exists);
  EXPECT_EQ(c.step.log,
            "job 2: dropping the checkpoint agent 'a0' keeps (the job has "
            "ended)");
  r = Holding({1}, "cluster-b");
  c = Model().PlanListedCheckpoint(s, "a0", r, 0);
  EXPECT_EQ(c.verdict, Checkpoint::kForeign);
  EXPECT_FALSE(c.step.stop);
  EXPECT_NE(c.step.log.find("saved in another cluster (cluster-b)"),
            std::string::npos);
}

// A job the daemon has a process of on the registering agent's server:
// missing when not listed (unless a start this daemon sent may not have
// got there yet), its action under way settled by the state listed.
TEST_F(AgentModelTest, AListingSettlesAnActionOrFindsAProcessMissing) {
  Arrive(1, 100);
  const ServerId s = ServerOf(1);
  using Kind = AgentModel::Listing::Kind;
  EXPECT_EQ(Model().PlanListing(s, 1, std::nullopt, false).kind,
            Kind::kMissing);
  EXPECT_EQ(Model().PlanListing(s, 1, rpc::RUNNING, false).kind, Kind::kPassed);
  EXPECT_EQ(
      Model().PlanListing(ServerId(1 - s.value), 1, std::nullopt, false).kind,
      Kind::kPassed);
  // A suspend under way, replayed from the log: settled by the state.
  h_.Send(core::HoldRequest{JobId(1), true});
  const core::ActionId suspend = h_.job(JobId(1)).in_flight_id;
  AgentModel::Listing l = Model().PlanListing(s, 1, rpc::SUSPENDED, false);
  ASSERT_EQ(l.kind, Kind::kSettled);
  ASSERT_TRUE(l.step.event && l.step.line);
  ASSERT_TRUE(std::holds_alternative<core::ActionDone>(*l.step.event));
  EXPECT_EQ(std::get<core::ActionDone>(*l.step.event).action, suspend);
  EXPECT_EQ(l.step.line->what, "suspend");
  EXPECT_EQ(l.step.line->detail, "reconciled: agent reports it SUSPENDED");
  l = Model().PlanListing(s, 1, rpc::RUNNING, false);
  ASSERT_EQ(l.kind, Kind::kSettled);
  EXPECT_TRUE(std::holds_alternative<core::ActionFailed>(*l.step.event));
  EXPECT_FALSE(l.step.line->ok);
  // One this daemon sent: its reply settles it.
  EXPECT_EQ(Model().PlanListing(s, 1, rpc::SUSPENDED, true).kind,
            Kind::kPassed);
  // Not listed, a suspend of its own under way: missing all the same.
  EXPECT_EQ(Model().PlanListing(s, 1, std::nullopt, true).kind, Kind::kMissing);
  // A start this daemon sent may not have got there when the agent listed.
  Arrive(2, 100, false);
  jobs_[2].proc = Proc::At(Model().Parts(h_.job(JobId(2)).gpus));
  const ServerId s2 = jobs_[2].proc.server;
  EXPECT_EQ(Model().PlanListing(s2, 2, std::nullopt, true).kind, Kind::kPassed);
  EXPECT_EQ(Model().PlanListing(s2, 2, std::nullopt, false).kind,
            Kind::kMissing);
}

// A job whose agent kept its checkpoint as it stopped, as the agent is
// back: with the checkpoint, a running job restarts from it once none of
// its agents is away; without it, its process is lost unsaved.
TEST_F(AgentModelTest, AJobWaitingForItsAgentGoesOnFromWhatTheAgentKept) {
  Arrive(1, 100);
  const ServerId s = ServerOf(1);
  jobs_[1].proc = jobs_[1].proc.CheckpointOnly();
  EXPECT_FALSE(Model().PlanBackWithoutProcess(ServerId(1 - s.value), "a1", 1,
                                              true, false));
  EXPECT_FALSE(Model().PlanBackWithoutProcess(s, "a0", 1, true, true));
  std::optional<AgentModel::Step> step =
      Model().PlanBackWithoutProcess(s, "a0", 1, true, false);
  ASSERT_TRUE(step && step->event && step->proc);
  ASSERT_TRUE(std::holds_alternative<core::ProcessLost>(*step->event));
  EXPECT_TRUE(std::get<core::ProcessLost>(*step->event).checkpoint);
  EXPECT_TRUE(step->proc->checkpoint);
  EXPECT_FALSE(step->line);
  step = Model().PlanBackWithoutProcess(s, "a0", 1, false, false);
  ASSERT_TRUE(step && step->event && step->proc && step->line);
  EXPECT_FALSE(std::get<core::ProcessLost>(*step->event).checkpoint);
  EXPECT_FALSE(step->proc->checkpoint);
  EXPECT_EQ(step->line->what, "lost");
  EXPECT_EQ(step->restart_why, "agent 'a0' is back");
  // An action under way: its outcome decides; the checkpoint is gone.
  h_.Send(core::HoldRequest{JobId(1), true});
  step = Model().PlanBackWithoutProcess(s, "a0", 1, false, false);
  ASSERT_TRUE(step && step->proc && step->line);
  EXPECT_FALSE(step->event);
  EXPECT_FALSE(Model().PlanBackWithoutProcess(s, "a0", 1, true, false));
}

// The core's restart from a checkpoint that waited for its agent fails
// when the agent is back without it; otherwise it is sent.
TEST_F(AgentModelTest, ARestartFromACheckpointTheAgentNoLongerHoldsFails) {
  Arrive(1, 100);
  const ServerId s = ServerOf(1);
  jobs_[1].proc = jobs_[1].proc.CheckpointOnly();
  core::Action restart;
  restart.id = core::ActionId(77);
  restart.job = JobId(1);
  restart.kind = ActionKind::kRestart;
  restart.relocates = true;
  EXPECT_FALSE(Model().PlanWaitingRestart(s, "a0", restart, true));
  std::optional<AgentModel::Step> fail =
      Model().PlanWaitingRestart(s, "a0", restart, false);
  ASSERT_TRUE(fail && fail->event && fail->proc);
  EXPECT_FALSE(fail->proc->checkpoint);
  ASSERT_TRUE(std::holds_alternative<core::ActionFailed>(*fail->event));
  EXPECT_EQ(std::get<core::ActionFailed>(*fail->event).action, restart.id);
  restart.relocates = false;  // from the beginning
  EXPECT_FALSE(Model().PlanWaitingRestart(s, "a0", restart, false));
}

// A process found gone: a job with no action under way is lost to the
// core (from the checkpoint its agent listed, if any); an action under
// way goes on, or is settled, by its kind.
TEST_F(AgentModelTest, ALostProcessGoesToTheCoreOrToItsActionUnderWay) {
  Arrive(1, 100);
  const ServerId s = ServerOf(1);
  using Then = AgentModel::LostProcess::Then;
  AgentModel::LostProcess lost = Model().PlanLost(s, "a0", 1, false, nullptr);
  ASSERT_TRUE(lost.step.proc && lost.step.line && lost.step.event);
  EXPECT_FALSE(lost.step.proc->exists);
  EXPECT_FALSE(lost.step.proc->checkpoint);
  EXPECT_EQ(lost.step.line->what, "lost");
  EXPECT_FALSE(std::get<core::ProcessLost>(*lost.step.event).checkpoint);
  EXPECT_EQ(lost.then, Then::kNothing);
  EXPECT_FALSE(lost.step.stop);
  lost = Model().PlanLost(s, "a0", 1, true, nullptr);
  EXPECT_TRUE(lost.step.proc->checkpoint);
  EXPECT_EQ(lost.step.line->what, "stop");
  EXPECT_TRUE(std::get<core::ProcessLost>(*lost.step.event).checkpoint);
  EXPECT_EQ(lost.step.restart_why, "agent 'a0' kept it");
  // A suspend under way: done, there is nothing left to suspend.
  h_.Send(core::HoldRequest{JobId(1), true});
  PendingAction p;
  p.action.kind = ActionKind::kSuspend;
  p.sent = true;
  lost = Model().PlanLost(s, "a0", 1, false, &p);
  ASSERT_TRUE(lost.step.event);
  EXPECT_TRUE(std::holds_alternative<core::ActionDone>(*lost.step.event));
  EXPECT_EQ(lost.then, Then::kNothing);
  // A resume under way: from the checkpoint listed, or afresh.
  h_.CompleteAll();
  h_.Send(core::HoldRequest{JobId(1), false});
  ASSERT_EQ(h_.job(JobId(1)).in_flight, ActionKind::kResume);
  p.action.kind = ActionKind::kResume;
  lost = Model().PlanLost(s, "a0", 1, true, &p);
  EXPECT_FALSE(lost.step.event);
  EXPECT_EQ(lost.then, Then::kMoveFromCheckpoint);
  EXPECT_EQ(Model().PlanLost(s, "a0", 1, false, &p).then, Then::kStartAfresh);
  p.relocate = true;  // a move already
  EXPECT_EQ(Model().PlanLost(s, "a0", 1, true, &p).then, Then::kStartAfresh);
  // Without the daemon's record of it: it fails.
  lost = Model().PlanLost(s, "a0", 1, true, nullptr);
  ASSERT_TRUE(lost.step.event);
  EXPECT_TRUE(std::holds_alternative<core::ActionFailed>(*lost.step.event));
}

// A job spanning servers whose part is lost: every part is stopped, and it
// starts afresh as a whole (a checkpoint listed is not the whole job's).
TEST_F(AgentModelTest, ALostPartStopsEveryPart) {
  Arrive(2, 100);
  const ServerId lead = ServerOf(2);
  const ServerId other(1 - lead.value);
  jobs_[2].proc.followers.push_back(Part{other, {0}});
  AgentModel::LostProcess lost =
      Model().PlanLost(other, "a1", 2, true, nullptr);
  ASSERT_TRUE(lost.step.stop && lost.step.event);
  EXPECT_EQ(lost.step.stop->server, lead);
  EXPECT_EQ(lost.step.stop->followers.size(), 1u);
  EXPECT_FALSE(std::get<core::ProcessLost>(*lost.step.event).checkpoint);
}

// The lost jobs a registration lists: each refused with a line for the
// log, or adopted; its process kept where its GPUs can take it, else
// stopped and the job queued; a checkpoint's job queued to go on from it.
TEST_F(AgentModelTest, EachLostJobAListingHoldsIsRefusedOrAdopted) {
  Arrive(1, 100, true, 2);  // on one server's both GPUs
  const ServerId full = ServerOf(1);
  const ServerId free(1 - full.value);
  const IdRanges lost = {{5, 9}};
  rpc::JobSpec spec;
  spec.set_name("lost");
  spec.set_command("python3 train.py");
  spec.set_gpus(1);
  rpc::RegisterAgentRequest r;
  r.set_cluster_id(kCluster);
  auto listed = [&](int64_t id, int64_t submitted_us, int gpu) {
    rpc::AgentJob j = Listed(id, rpc::SUSPENDED, submitted_us);
    *j.mutable_spec() = spec;
    j.add_gpus(gpu);
    j.mutable_progress()->set_minibatches(id * 10);
    return j;
  };
  using Plan = AgentModel::LostJobPlan;
  auto plan = [&](const rpc::AgentJob& j) {
    return Model().PlanLostProcess(free, "a1", r, j, lost, 1000);
  };
  Plan p = plan(listed(5, 2000, 1));
  ASSERT_EQ(p.index(), 1u);
  EXPECT_EQ(std::get<1>(p),
            "agent 'a1' holds job 5, which this store lost, but its "
            "submission time (2000 us) is not before now: not adopted");
  p = plan(listed(6, 500, 1));
  ASSERT_EQ(p.index(), 2u);
  const auto& kept = std::get<AgentModel::Adoption>(p);
  EXPECT_EQ(kept.arrival.id, JobId(6));
  EXPECT_EQ(kept.arrival.placed_on, Model().ClusterGpus(free, {1}));
  EXPECT_TRUE(kept.arrival.suspended);
  EXPECT_EQ(kept.arrival.submitted.micros(), 500);
  EXPECT_TRUE(kept.proc.exists);
  EXPECT_EQ(kept.proc.server, free);
  EXPECT_FALSE(kept.stop_listed);
  ASSERT_TRUE(kept.progress);
  EXPECT_EQ(kept.progress->minibatches(), 60);
  EXPECT_EQ(kept.log,
            "agent 'a1' runs job 6, which this store lost: adopted, its "
            "process kept");
  // On GPUs not this server's: stopped, and queued.
  p = plan(listed(7, 500, 7));
  ASSERT_EQ(p.index(), 2u);
  const auto& queued = std::get<AgentModel::Adoption>(p);
  EXPECT_TRUE(queued.stop_listed);
  EXPECT_FALSE(queued.proc.exists);
  EXPECT_TRUE(queued.arrival.placed_on.empty());
  EXPECT_NE(queued.line.detail.find("it starts again from the beginning"),
            std::string::npos);
  // A known job, or another cluster's agent: not a lost one.
  EXPECT_EQ(plan(listed(1, 100, 0)).index(), 0u);
  r.add_checkpoints(8);
  r.add_checkpoint_clusters(kCluster);
  r.add_checkpoint_submitted_us(600);
  *r.add_checkpoint_specs() = spec;
  p = Model().PlanLostCheckpoint(free, "a1", r, 0, lost, 1000);
  ASSERT_EQ(p.index(), 2u);
  const auto& from = std::get<AgentModel::Adoption>(p);
  EXPECT_EQ(from.arrival.id, JobId(8));
  EXPECT_TRUE(from.proc.checkpoint);
  EXPECT_EQ(from.proc.server, free);
  EXPECT_FALSE(from.progress);
  r.set_cluster_id("cluster-b");
  EXPECT_EQ(plan(listed(6, 500, 1)).index(), 0u);
  EXPECT_EQ(Model().PlanLostCheckpoint(free, "a1", r, 0, lost, 1000).index(),
            0u);
}

// A checkpoint a registering agent holds of a queued job whose rank 0 last
// ran there is where its next start goes on from; not one of a job placed
// elsewhere, running, or with a process or checkpoint known already.
TEST_F(AgentModelTest, ACheckpointKeptWhereAQueuedJobLastRanIsTaken) {
  Arrive(1, 100);
  const ServerId s = ServerOf(1);
  const rpc::RegisterAgentRequest r = Holding({1}, kCluster);
  EXPECT_FALSE(Model().PlanKeptCheckpoint(s, "a0", r, 0)) << "running";
  // Requeued with its server down, nowhere else to go; its last placement
  // kept by the core.
  h_.Send(core::CordonRequest{ServerId(1 - s.value), true});
  h_.Send(core::ServerDown{s});
  ASSERT_EQ(h_.job(JobId(1)).state, JobState::kQueued);
  jobs_[1].proc = Proc{};
  const std::optional<AgentModel::Step> step =
      Model().PlanKeptCheckpoint(s, "a0", r, 0);
  ASSERT_TRUE(step && step->proc && step->line);
  EXPECT_TRUE(step->proc->checkpoint);
  EXPECT_FALSE(step->proc->exists);
  EXPECT_EQ(step->proc->server, s);
  EXPECT_FALSE(step->event || step->stop);
  EXPECT_FALSE(Model().PlanKeptCheckpoint(ServerId(1 - s.value), "a1", r, 0));
  EXPECT_FALSE(
      Model().PlanKeptCheckpoint(s, "a0", Holding({1}, "cluster-b"), 0));
  jobs_[1].proc = Proc{s, {}, false, true};
  EXPECT_FALSE(Model().PlanKeptCheckpoint(s, "a0", r, 0)) << "known";
}

// An agent back from out of reach: each job it runs that was kept there
// says so, with how long.
TEST_F(AgentModelTest, JobsKeptThroughASilenceSaySo) {
  Arrive(1, 100);
  Arrive(2, 100);
  const ServerId s = ServerOf(1);
  jobs_[2].proc.server = s;
  h_.Send(core::KillRequest{JobId(2), "gone"});
  rpc::RegisterAgentRequest r;
  *r.add_jobs() = Listed(1, rpc::RUNNING, 100);
  *r.add_jobs() = Listed(2, rpc::RUNNING, 100);
  *r.add_jobs() = Listed(9, rpc::RUNNING, 100);
  const auto lines = Model().PlanKeptThroughSilence(s, "a0", r, 12.5, 5);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].first, 1);
  EXPECT_EQ(lines[0].second.detail,
            "agent 'a0' was out of reach for 12.5 s (not heard of for 17.5 "
            "s); the job was kept there and goes on");
}

// A registering agent's server: its spec from the request (the smallest
// GPU's memory; process images unusable without CRIU), told to the core
// when new or down, and held closed while it comes up only when it lists
// a process the daemon may keep and no operator cordoned it.
TEST_F(AgentModelTest, ARegisteringAgentsServerIsPlannedFromItsRequest) {
  rpc::RegisterAgentRequest r;
  r.set_name("a9");
  r.set_address("127.0.0.1:1");
  r.set_cluster_id(kCluster);
  for (uint64_t gib : {16, 8}) r.add_gpus()->set_memory_bytes(gib << 30);
  r.mutable_capabilities()->set_criu_detail("criu: not found");
  auto coming = Model().PlanServer(ServerId(2), -1, r);
  ASSERT_TRUE(coming.ok()) << coming.status().ToString();
  EXPECT_EQ(coming->spec.gpus, 2);
  EXPECT_DOUBLE_EQ(coming->spec.gpu_memory_gb, 8);
  EXPECT_EQ(coming->spec.process_images_unusable, "criu: not found");
  EXPECT_TRUE(coming->up);  // new
  EXPECT_FALSE(coming->hold_closed);
  // A known server that is up: nothing to tell the core.
  coming = Model().PlanServer(ServerId(0), 2, r);
  ASSERT_TRUE(coming.ok());
  EXPECT_FALSE(coming->up);
  // Down, listing a process of a queued job it may keep: held closed.
  h_.Send(core::ServerDown{ServerId(0)});
  rpc::AgentJob* j = r.add_jobs();
  *j = Listed(42, rpc::RUNNING, 100);  // a job the daemon has no record of
  j->mutable_spec()->set_command("python3 train.py");
  coming = Model().PlanServer(ServerId(0), 2, r);
  ASSERT_TRUE(coming.ok());
  EXPECT_TRUE(coming->up);
  EXPECT_TRUE(coming->hold_closed);
  h_.Send(core::CordonRequest{ServerId(0), true});  // an operator's
  EXPECT_FALSE(Model().PlanServer(ServerId(0), 2, r)->hold_closed);
  // Refused, naming the field or saying why.
  auto bad = Model().PlanServer(ServerId(0), 4, r);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("registered before with 4 GPUs, now 2"),
            std::string::npos);
  r.clear_address();
  bad = Model().PlanServer(ServerId(0), 2, r);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "field 'address': empty");
}

}  // namespace
}  // namespace gandiva::runtime
