// End-to-end tests of jobs whose GPUs span servers ("gangs"): one launcher
// part per agent (separate processes, separate work and checkpoint
// directories), the ranks meeting at the lead's agent over loopback (gloo),
// run, suspended and resumed as one job, resized into and out of spanning
// servers through the checkpoint rank 0 saves, and ended as a whole when
// one part fails.
//
// Deadlines are failure guards sized for a loaded 2-core machine; no
// assertion depends on how fast anything ran.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/runtime/harness.h"

namespace gandiva::e2e {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class GangE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveTorch()) GTEST_SKIP() << GANDIVA_PYTHON << " has no torch";
  }
};

rpc::JobSpec DdpOn(TestCluster& c, int gpus, int samples) {
  rpc::JobSpec spec = c.PythonSpec(
      "ddp", "-m gandiva.launch -- " + std::string(GANDIVA_EXAMPLES_DIR) +
                 "/train_ddp.py --samples " + std::to_string(samples) +
                 " --min-step-ms 10 --log-every 200");
  spec.set_gpus(gpus);
  spec.set_elastic(true);
  return spec;
}

// Waits until the job trains through the library on `parts` servers and
// passed `minibatches`.
bool TrainsOn(TestCluster& c, int64_t id, int parts, int64_t minibatches) {
  return WaitUntil(
      [&] {
        const rpc::JobInfo j = c.Job(id);
        const int n = j.parts_size() > 1 ? j.parts_size() : 1;
        return j.state() == rpc::RUNNING && n == parts &&
               j.progress().uses_library() &&
               j.progress().minibatches() >= minibatches;
      },
      seconds(180));
}

// Starts the cluster and a DdpOn job of `gpus` ranks; returns its id once
// it trains on `parts` servers past mini-batch `past` (0, after a test
// failure, when it does not).
int64_t StartTraining(TestCluster& c, int gpus, int samples, int parts,
                      int64_t past) {
  std::string error;
  if (!c.Start(&error)) {
    ADD_FAILURE() << error;
    return 0;
  }
  const int64_t id = c.Submit(DdpOn(c, gpus, samples), &error);
  if (id <= 0) {
    ADD_FAILURE() << error;
    return 0;
  }
  if (!TrainsOn(c, id, parts, past)) {
    ADD_FAILURE() << Describe(c, id) << c.Logs();
    return 0;
  }
  return id;
}

// Waits for the job to end; expects it FINISHED with its "done" line once
// (all its samples); returns its log.
std::string FinishedOnce(TestCluster& c, int64_t id, int samples) {
  EXPECT_TRUE(WaitEnded(c, id, seconds(300))) << Describe(c, id) << c.Logs();
  const rpc::JobInfo j = c.Job(id);
  EXPECT_EQ(j.state(), rpc::FINISHED) << Describe(c, id) << c.Logs();
  const std::string log = c.JobLog(j);
  EXPECT_EQ(
      CountLines(log, "done samples=" + std::to_string(samples) + " steps="), 1)
      << log;
  return log;
}

// A two-rank job on two one-GPU servers: the core places it across both,
// each agent runs one part, and it trains, suspends (no progress while
// suspended), resumes and finishes its samples exactly once.
TEST_F(GangE2eTest, DataParallelJobRunsAcrossTwoServers) {
  constexpr int kSamples = 6000;
  TestCluster c({.policy = "fifo", .agents = 2, .gpus_per_agent = 1});
  const int64_t id = StartTraining(c, 2, kSamples, 2, 100);
  ASSERT_GT(id, 0);
  rpc::JobInfo j = c.Job(id);
  EXPECT_NE(j.parts(0).server(), j.parts(1).server());

  std::string out;
  ASSERT_EQ(c.Cli({"ls"}, &out), 0) << out;
  EXPECT_NE(out.find(j.parts(0).server() + ":0+" + j.parts(1).server() + ":0"),
            std::string::npos)
      << out;
  ASSERT_EQ(c.Cli({"show", std::to_string(id)}, &out), 0) << out;
  EXPECT_NE(out.find("on 2 servers"), std::string::npos) << out;
  EXPECT_NE(out.find("; part 1 on " + j.parts(1).server() + " (--part 1)"),
            std::string::npos)
      << out;
  // Each part's log is on its own server: the other part's holds its
  // launcher's line, not rank 0's output.
  ASSERT_EQ(c.Cli({"logs", std::to_string(id), "--part", "1"}, &out), 0) << out;
  EXPECT_NE(out.find("gandiva.launch: part 1 of 2: ranks 1"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("ddp: world size"), std::string::npos) << out;
  ASSERT_EQ(c.Cli({"logs", std::to_string(id)}, &out), 0) << out;
  EXPECT_NE(out.find("ddp: world size 2"), std::string::npos) << out;
  EXPECT_NE(c.Cli({"logs", std::to_string(id), "--part", "2"}, &out), 0);
  EXPECT_NE(
      out.find("--part 2: job " + std::to_string(id) + " has parts 0 on " +
               j.parts(0).server() + ", 1 on " + j.parts(1).server()),
      std::string::npos)
      << out;

  ASSERT_EQ(c.Cli({"suspend", std::to_string(id)}, &out), 0)
      << out << Describe(c, id) << c.Logs();
  ASSERT_TRUE(WaitUntil([&] { return c.Job(id).state() == rpc::SUSPENDED; },
                        seconds(60)))
      << Describe(c, id);
  const auto suspends = c.History(id, "suspend");
  ASSERT_FALSE(suspends.empty()) << Describe(c, id);
  EXPECT_NE(suspends.back().detail().find("2 parts"), std::string::npos)
      << Describe(c, id);
  // Stopped: no mini-batch while suspended (once the reports of the
  // mini-batches before the stop, every 200 ms, have come in).
  std::this_thread::sleep_for(milliseconds(1000));
  const int64_t held = c.Job(id).progress().minibatches();
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_EQ(c.Job(id).progress().minibatches(), held) << Describe(c, id);

  ASSERT_EQ(c.Cli({"resume", std::to_string(id)}, &out), 0)
      << out << Describe(c, id) << c.Logs();
  ASSERT_TRUE(TrainsOn(c, id, 2, held + 50)) << Describe(c, id) << c.Logs();

  const std::string log = FinishedOnce(c, id, kSamples);
  EXPECT_EQ(CountLines(log, "world_size=2"), 1) << log;
}

// A two-rank elastic job on two one-GPU servers spans both; shrunk to one
// GPU it runs on one server (every part checkpointed by rank 0, one part
// restarted from it), grown back to two it spans both again (the
// checkpoint copied to the other agent); it finishes exactly its samples.
TEST_F(GangE2eTest, ResizeMovesAJobIntoAndOutOfSpanningServers) {
  constexpr int kSamples = 8000;
  TestCluster c({.policy = "fifo", .agents = 2, .gpus_per_agent = 1});
  const int64_t id = StartTraining(c, 2, kSamples, 2, 100);
  ASSERT_GT(id, 0);

  // Progress is counted before each resize: right after it the restarted
  // process may report no mini-batch yet (it has not loaded its
  // checkpoint).
  std::string out;
  int64_t before = c.Job(id).progress().minibatches();
  ASSERT_EQ(c.Cli({"resize", std::to_string(id), "--gpus", "1"}, &out), 0)
      << out << Describe(c, id) << c.Logs();
  EXPECT_NE(out.find("shrink done"), std::string::npos) << out;
  rpc::JobInfo j = c.Job(id);
  EXPECT_EQ(j.parts_size(), 0) << Describe(c, id);
  EXPECT_EQ(j.gpus_size(), 1) << Describe(c, id);
  EXPECT_NE(c.Cli({"logs", std::to_string(id), "--part", "1"}, &out), 0);
  EXPECT_NE(
      out.find("runs on one server (" + j.server() + "): it has part 0 only"),
      std::string::npos)
      << out;
  ASSERT_TRUE(TrainsOn(c, id, 1, before + 50)) << Describe(c, id) << c.Logs();

  before = c.Job(id).progress().minibatches();
  ASSERT_EQ(c.Cli({"resize", std::to_string(id), "--gpus", "2"}, &out), 0)
      << out << Describe(c, id) << c.Logs();
  EXPECT_NE(out.find("grow done"), std::string::npos) << out;
  j = c.Job(id);
  ASSERT_EQ(j.parts_size(), 2) << Describe(c, id);
  ASSERT_TRUE(TrainsOn(c, id, 2, before + 50)) << Describe(c, id) << c.Logs();
  const auto grows = c.History(id, "grow");
  ASSERT_EQ(grows.size(), 1u) << Describe(c, id);
  EXPECT_NE(grows[0].detail().find("transfer to 1 server"), std::string::npos)
      << Describe(c, id);
  // How long it trained nowhere: up to its first mini-batch after the
  // restart, which the daemon waited for.
  EXPECT_NE(grows[0].detail().find(", first mini-batch "), std::string::npos)
      << Describe(c, id);
  EXPECT_NE(grows[0].detail().find("; training paused "), std::string::npos)
      << Describe(c, id);

  const std::string log = FinishedOnce(c, id, kSamples);
  EXPECT_EQ(CountLines(log, "resumed from "), 2) << log;
  EXPECT_EQ(CountLines(log, "world_size=2"), 1) << log;
}

// Four parts on four one-GPU servers: shrunk to one GPU and grown back to
// four, the checkpoint goes to the three other servers at once, and the
// job finishes exactly its samples at world size 4.
TEST_F(GangE2eTest, AFourPartGangShrinksToOneServerAndGrowsBack) {
  constexpr int kSamples = 6000;
  TestCluster c({.policy = "fifo", .agents = 4, .gpus_per_agent = 1});
  const int64_t id = StartTraining(c, 4, kSamples, 4, 30);
  ASSERT_GT(id, 0);

  std::string out;
  const int64_t before = c.Job(id).progress().minibatches();
  ASSERT_EQ(c.Cli({"resize", std::to_string(id), "--gpus", "1"}, &out), 0)
      << out << Describe(c, id) << c.Logs();
  ASSERT_TRUE(TrainsOn(c, id, 1, before + 30)) << Describe(c, id) << c.Logs();
  ASSERT_EQ(c.Cli({"resize", std::to_string(id), "--gpus", "4"}, &out), 0)
      << out << Describe(c, id) << c.Logs();
  const auto grows = c.History(id, "grow");
  ASSERT_EQ(grows.size(), 1u) << Describe(c, id);
  EXPECT_NE(grows[0].detail().find("transfer to 3 servers at once"),
            std::string::npos)
      << Describe(c, id);
  ASSERT_EQ(c.Job(id).parts_size(), 4) << Describe(c, id);

  const std::string log = FinishedOnce(c, id, kSamples);
  EXPECT_EQ(CountLines(log, "world_size=4"), 1) << log;
}

// The daemon dies while a gang trains and comes back: both agents report
// their parts, the daemon recognises them as the job's (not strays), and
// the job finishes its samples exactly once.
TEST_F(GangE2eTest, SchedulerCrashKeepsAGangRunning) {
  constexpr int kSamples = 6000;
  TestCluster c({.policy = "fifo", .agents = 2, .gpus_per_agent = 1});
  const int64_t id = StartTraining(c, 2, kSamples, 2, 100);
  ASSERT_GT(id, 0);

  const int port = std::stoi(c.address().substr(c.address().rfind(':') + 1));
  c.scheduler()->Signal(SIGKILL);
  ASSERT_TRUE(c.scheduler()->Wait(seconds(10)));
  std::this_thread::sleep_for(milliseconds(500));
  std::string error;
  ASSERT_TRUE(c.StartScheduler(port, &error)) << error;
  const int64_t before = c.Job(id).progress().minibatches();
  ASSERT_TRUE(TrainsOn(c, id, 2, before + 50)) << Describe(c, id) << c.Logs();

  FinishedOnce(c, id, kSamples);
  EXPECT_TRUE(c.History(id, "kill").empty()) << Describe(c, id);
}

// The agent of a gang's other part dies: once its server is declared down
// the lead's part is stopped too (it cannot train alone) and the job waits
// for room again.
TEST_F(GangE2eTest, AServerOfTheGangGoingDownStopsItsOtherParts) {
  TestCluster c(
      {.policy = "fifo",
       .agents = 2,
       .gpus_per_agent = 1,
       .scheduler_args = {"--agent-timeout-s", "2", "--agent-grace-s", "1"}});
  const int64_t id = StartTraining(c, 2, 10'000'000, 2, 50);
  ASSERT_GT(id, 0);
  const std::string follower = c.Job(id).parts(1).server();
  Process* agent = c.agent(follower);
  ASSERT_NE(agent, nullptr) << follower;
  agent->Signal(SIGKILL);
  ASSERT_TRUE(agent->Wait(seconds(10)));

  ASSERT_TRUE(WaitUntil(
      [&] {
        const rpc::JobInfo j = c.Job(id);
        return j.state() != rpc::RUNNING && !c.History(id, "kill").empty();
      },
      seconds(60)))
      << Describe(c, id) << c.Logs();
  EXPECT_NE(c.History(id, "kill").back().detail().find("which is down"),
            std::string::npos)
      << Describe(c, id);
  // Every rank ends: the lead's killed by its agent, the follower's when
  // their peers are gone.
  EXPECT_TRUE(WaitUntil([&] { return ProcessesRunning("train_ddp.py") == 0; },
                        seconds(60)))
      << ProcessesRunning("train_ddp.py") << " processes left\n"
      << Describe(c, id);
}

// An agent of a two-server job stops (SIGTERM, to be upgraded say): the
// daemon has rank 0 save the job's checkpoint first, every part exits, and
// when the agent is back every part starts again from it; the job finishes
// its samples exactly once. Once for the other part's agent, once for the
// lead's.
TEST_F(GangE2eTest, AJobSpanningServersGoesOnWhenOneOfItsAgentsRestarts) {
  constexpr int kSamples = 10000;
  TestCluster c({.policy = "fifo", .agents = 2, .gpus_per_agent = 1});
  const int64_t id = StartTraining(c, 2, kSamples, 2, 50);
  ASSERT_GT(id, 0);
  std::string error;
  int64_t floor = 0;
  for (const int part : {1, 0}) {
    const std::string server = c.Job(id).parts(part).server();
    ASSERT_TRUE(c.RestartAgent(server, &error)) << error;
    const auto stops = c.History(id, "stop");
    ASSERT_EQ(stops.size(), part == 1 ? 1u : 2u) << Describe(c, id) << c.Logs();
    EXPECT_TRUE(stops.back().ok()) << Describe(c, id) << c.Logs();
    EXPECT_NE(stops.back().detail().find(
                  "agent '" + server +
                  "' stopped; the job, spanning servers, saved a checkpoint "
                  "at mini-batch "),
              std::string::npos)
        << Describe(c, id);
    std::vector<rpc::HistoryEntry> restarts;
    ASSERT_TRUE(WaitUntil(
        [&] {
          restarts = c.History(id, "restart");
          return restarts.size() == (part == 1 ? 1u : 2u);
        },
        seconds(60)))
        << Describe(c, id) << c.Logs();
    EXPECT_TRUE(restarts.back().ok()) << Describe(c, id);
    EXPECT_NE(restarts.back().detail().find("(agent '" + server + "' is back)"),
              std::string::npos)
        << Describe(c, id);
    std::printf("[ gang agent restart ] %s\n  %s\n",
                stops.back().detail().c_str(),
                restarts.back().detail().c_str());
    floor = std::max(floor, c.Job(id).progress().minibatches()) + 20;
    ASSERT_TRUE(TrainsOn(c, id, 2, floor)) << Describe(c, id) << c.Logs();
  }
  EXPECT_TRUE(c.History(id, "lost").empty()) << Describe(c, id);
  const std::string log = FinishedOnce(c, id, kSamples);
  EXPECT_EQ(CountLines(log, "world_size=2"), 1) << log;
}

// The agent of a part of a two-server job stops and never comes back: the
// job, saved as it stopped, goes back to the queue when that server is
// declared down and starts on the servers the core gives it next from the
// checkpoint rank 0's agent kept (sent to the new part's agent), not from
// the beginning: it finishes its samples once, having resumed once.
TEST_F(GangE2eTest,
       AJobSpanningServersGoesOnElsewhereWhenOneOfItsAgentsStaysAway) {
  constexpr int kSamples = 10000;
  TestCluster c(
      {.policy = "fifo",
       .agents = 3,
       .gpus_per_agent = 1,
       .scheduler_args = {"--agent-away-s", "1", "--agent-timeout-s", "2"}});
  const int64_t id = StartTraining(c, 2, kSamples, 2, 50);
  ASSERT_GT(id, 0);
  const std::string lead = c.Job(id).parts(0).server();
  const std::string gone = c.Job(id).parts(1).server();
  std::string error;
  ASSERT_TRUE(c.StopAgent(gone, &error)) << error;
  std::vector<rpc::HistoryEntry> starts;
  ASSERT_TRUE(WaitUntil(
      [&] {
        starts = c.History(id, "start");
        return starts.size() == 2;
      },
      seconds(120)))
      << Describe(c, id) << c.Logs();
  EXPECT_TRUE(starts[1].ok()) << Describe(c, id);
  EXPECT_NE(starts[1].detail().find("from gpus [0] on " + lead + " to "),
            std::string::npos)
      << Describe(c, id);
  EXPECT_EQ(starts[1].detail().find("from scratch"), std::string::npos)
      << Describe(c, id);
  const auto requeue = c.History(id, "requeue");
  ASSERT_EQ(requeue.size(), 1u) << Describe(c, id);
  EXPECT_NE(requeue[0].detail().find("server " + gone +
                                     ", which it waited for, is down: the "
                                     "job goes back to the queue and on from "
                                     "the checkpoint kept on " +
                                     lead),
            std::string::npos)
      << Describe(c, id);
  std::printf("[ gang part's agent gone ] %s\n  %s\n",
              requeue[0].detail().c_str(), starts[1].detail().c_str());
  const rpc::JobInfo j = c.Job(id);
  for (const auto& part : j.parts()) EXPECT_NE(part.server(), gone);
  const std::string log = FinishedOnce(c, id, kSamples);
  EXPECT_EQ(CountLines(log, "resumed from "), 1) << log;
  EXPECT_EQ(CountLines(log, "world_size=2"), 1) << log;
}

// One rank of a two-server job fails: the job ends FAILED and no process
// of it is left on either server.
TEST_F(GangE2eTest, APartThatFailsEndsTheJobEverywhere) {
  TestCluster c({.policy = "fifo", .agents = 2, .gpus_per_agent = 1});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  const std::string script =
      std::string(GANDIVA_SOURCE_DIR) + "/tests/runtime/jobs/rank_fails.py";
  rpc::JobSpec spec = c.PythonSpec(
      "fails", "-m gandiva.launch -- " + script + " --fail-after 100");
  spec.set_gpus(2);
  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(WaitEnded(c, id, seconds(120))) << Describe(c, id) << c.Logs();
  const rpc::JobInfo j = c.Job(id);
  EXPECT_EQ(j.state(), rpc::FAILED) << Describe(c, id);
  EXPECT_NE(j.exit_code(), 0) << Describe(c, id);
  EXPECT_TRUE(
      WaitUntil([&] { return ProcessesRunning(script) == 0; }, seconds(30)))
      << ProcessesRunning(script) << " processes left\n"
      << Describe(c, id);
}

// The pid of the process of `needle` whose environment holds `env` (such
// as "RANK=1"); -1 unless exactly one.
int PidWithEnv(const std::string& needle, const std::string& env) {
  int found = -1;
  int count = 0;
  for (int pid : PidsRunning(needle)) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/environ");
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string all = '\0' + ss.str();
    if (all.find('\0' + env + '\0') != std::string::npos) {
      found = pid;
      ++count;
    }
  }
  return count == 1 ? found : -1;
}

// A two-rank job saving periodic checkpoints, one of its ranks SIGKILLed
// (rank 1, on the other server; rank 0, at the lead): the run fails as a
// whole, its lead keeping its last periodic checkpoint (whether the lead
// failed first, of its own or of the lost peer, or was stopped for the
// other part's failure), and the retry goes on from it on both servers,
// not from the beginning; it finishes its samples once.
class GangPeriodicTest : public GangE2eTest,
                         public ::testing::WithParamInterface<int> {};

INSTANTIATE_TEST_SUITE_P(Ranks, GangPeriodicTest, ::testing::Values(1, 0),
                         [](const auto& p) {
                           return p.param == 0 ? std::string("Rank0AtTheLead")
                                               : std::string("Rank1Elsewhere");
                         });

TEST_P(GangPeriodicTest, AKilledRankGoesOnFromTheLastPeriodicSave) {
  constexpr int kSamples = 16 * 700;  // 700 mini-batches of 2 x 8
  constexpr int kEvery = 100;
  TestCluster c({.policy = "fifo",
                 .agents = 2,
                 .gpus_per_agent = 1,
                 .scheduler_args = {"--start-retry-s", "1"}});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  rpc::JobSpec spec = DdpOn(c, 2, kSamples);
  spec.set_retries(1);
  spec.set_checkpoint_every_minibatches(kEvery);
  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(TrainsOn(c, id, 2, 2 * kEvery + 30))
      << Describe(c, id) << c.Logs();
  const int64_t at_kill = c.Job(id).progress().minibatches();
  const std::string lead = c.Job(id).parts(0).server();
  const int rank =
      PidWithEnv("train_ddp.py --samples " + std::to_string(kSamples),
                 "RANK=" + std::to_string(GetParam()));
  ASSERT_GT(rank, 0) << Describe(c, id);
  ASSERT_EQ(::kill(rank, SIGKILL), 0);

  const std::string log = FinishedOnce(c, id, kSamples);
  const rpc::JobInfo j = c.Job(id);
  EXPECT_EQ(j.run_failures(), 1) << Describe(c, id);
  const auto retries = c.History(id, "retry");
  ASSERT_EQ(retries.size(), 1u) << Describe(c, id);
  const std::string& retry = retries[0].detail();
  const std::string from = "from its checkpoint at mini-batch ";
  const size_t at = retry.find(from);
  ASSERT_NE(at, std::string::npos) << Describe(c, id);
  const int64_t kept = std::stoll(retry.substr(at + from.size()));
  EXPECT_GE(kept, 2 * kEvery) << Describe(c, id);
  EXPECT_EQ(kept % kEvery, 0) << Describe(c, id);
  EXPECT_LE(kept, at_kill + kEvery) << Describe(c, id);
  // Its exit lines name the lead's agent keeping the checkpoint.
  bool named = false;
  for (const auto& e : c.History(id, "exit")) {
    named = named || e.detail().find(
                         "its last periodic checkpoint, at "
                         "mini-batch " +
                         std::to_string(kept) + ", is kept on " + lead) !=
                         std::string::npos;
  }
  EXPECT_TRUE(named) << Describe(c, id);
  // The second run resumed there, on both servers.
  EXPECT_EQ(CountLines(log, "steps=" + std::to_string(kept) +
                                " (saved at world size 2, now 2)"),
            1)
      << log;
  std::printf(
      "a 2-rank job saving every %d mini-batches, rank %d SIGKILLed at about "
      "mini-batch %lld, went on from mini-batch %lld\n",
      kEvery, GetParam(), static_cast<long long>(at_kill),
      static_cast<long long>(kept));
}

}  // namespace
}  // namespace gandiva::e2e
