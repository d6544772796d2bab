// End-to-end tests of the mechanisms on real processes: the operator
// commands (`gandiva migrate|pack|unpack|resize`) against the real daemon and
// agents (separate processes, separate work and checkpoint directories)
// running the PyTorch examples on virtual GPUs.
//
// Deadlines are failure guards sized for a loaded 2-core machine; no
// assertion depends on how fast anything ran.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/tls/test_certs.h"
#include "tests/runtime/harness.h"

namespace gandiva::e2e {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class MechanismE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveTorch()) GTEST_SKIP() << GANDIVA_PYTHON << " has no torch";
  }
};

// A job migrated between two agents (the checkpoint saved at a mini-batch
// boundary, moved to a warm process at the other agent) continues at the
// next mini-batch and ends with exactly the parameters of a run that was
// never migrated. Either the warm process takes the checkpoint from the
// source's bulk channel itself (StraightIntoTheJob), or its agent receives
// the files first (FilesFirst: --no-stream-to-job), or, on a cluster with
// mutual TLS, over the agents' TLS gRPC stream (OverTls: the bulk channel
// is plain TCP, off under TLS).
class MigrationIdentityTest
    : public MechanismE2eTest,
      public ::testing::WithParamInterface<std::string> {};

INSTANTIATE_TEST_SUITE_P(Channels, MigrationIdentityTest,
                         ::testing::Values("StraightIntoTheJob", "FilesFirst",
                                           "OverTls"),
                         [](const auto& p) { return p.param; });

TEST_P(MigrationIdentityTest, MigratedJobMatchesARunNeverMigrated) {
  constexpr int kSteps = 300;
  constexpr int kSeed = 11;
  const bool stream = GetParam() == "StraightIntoTheJob";
  const bool tls = GetParam() == "OverTls";
  ClusterOptions o{.policy = "fifo", .agents = 2, .gpus_per_agent = 1};
  if (GetParam() == "FilesFirst") o.agent_args = {"--no-stream-to-job"};
  const fs::path certs = fs::temp_directory_path() /
                         ("gandiva_mig_certs_" + std::to_string(::getpid()));
  if (tls) {
    fs::create_directories(certs);
    o.tls = runtime::testing::MakeTestCertificates(certs, "cluster");
    ASSERT_FALSE(o.tls.ca.empty()) << "openssl could not make certificates";
  }
  TestCluster c(o);
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  const rpc::JobSpec spec = c.TrainSpec("cnn-moved", "cnn", kSteps, kSeed, 20);
  auto ref = StartReferenceRun(spec, kSteps, kSeed, c.dir() / "reference.log");
  ASSERT_NE(ref, nullptr);

  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const rpc::JobInfo j = c.Job(id);
        return j.progress().uses_library() && j.progress().minibatches() >= 40;
      },
      seconds(120)))
      << Describe(c, id) << c.Logs();
  const std::string from = c.Job(id).server();
  const std::string to = from == "agent-0" ? "agent-1" : "agent-0";
  std::string out;
  const int rc = c.Cli({"migrate", std::to_string(id), "--to", to}, &out);
  ASSERT_EQ(rc, 0) << out << Describe(c, id) << c.Logs();
  EXPECT_NE(out.find("migrate done"), std::string::npos) << out;
  EXPECT_EQ(c.Job(id).server(), to);

  ASSERT_TRUE(WaitEnded(c, id, seconds(240))) << Describe(c, id) << c.Logs();
  const rpc::JobInfo j = c.Job(id);
  EXPECT_EQ(j.state(), rpc::FINISHED) << Describe(c, id);
  EXPECT_EQ(j.progress().minibatches(), kSteps);
  const auto moves = c.History(id, "migrate");
  ASSERT_EQ(moves.size(), 1u) << Describe(c, id);
  EXPECT_TRUE(moves[0].ok());
  // " over tcp)" or, for a checkpoint large enough to go over parallel
  // streams, " over tcp x2)"; under TLS " over grpc)".
  for (const char* phase :
       {"save ", "transfer ", tls ? " over grpc" : " over tcp", "warm start ",
        "load ", "first mini-batch "}) {
    EXPECT_NE(moves[0].detail().find(phase), std::string::npos)
        << phase << " missing: " << moves[0].detail();
  }
  EXPECT_EQ(moves[0].detail().find("over tcp, straight into the job's "
                                   "memory") != std::string::npos,
            stream)
      << moves[0].detail();
  // The whole log, from the job's last server: the source's part (its
  // start) came along with the move.
  const std::string log = c.JobLog(j);
  EXPECT_EQ(CountLines(log, "cnn: job "), 2) << log;
  EXPECT_LT(log.find("cnn: job "), log.find("resumed from ")) << log;
  EXPECT_EQ(CountLines(log, "resumed from "), 1) << log;
  EXPECT_EQ(CountLines(log, "done: " + std::to_string(kSteps) + " steps"), 1)
      << log;

  ASSERT_TRUE(ref->Wait(seconds(240)));
  const std::string ref_log = Slurp(ref->log());
  const std::string want = Fingerprint(ref_log);
  ASSERT_EQ(want.size(), 64u) << ref_log;
  EXPECT_EQ(Fingerprint(log), want) << "job log:\n" << log;
  if (tls) fs::remove_all(certs);
}

// The steps at which the job's runs went on ("resumed from ... at step
// N" in its log), in order.
std::vector<int> ResumedAt(const std::string& log) {
  std::vector<int> at;
  for (size_t i = log.find("resumed from "); i != std::string::npos;
       i = log.find("resumed from ", i + 1)) {
    const size_t step = log.find(" at step ", i);
    if (step == std::string::npos) break;
    at.push_back(std::atoi(log.c_str() + step + 9));
  }
  return at;
}

// A job that saves periodic checkpoints, moved to another agent and
// SIGKILLed there before its first save there, goes on from the move's
// checkpoint on that agent (the library made it the job's periodic one as
// the job started there), not from the beginning; it ends with the
// parameters of a run never moved nor killed. Whether the checkpoint came
// straight into the job's memory or as files first.
class MovedPeriodicTest : public MechanismE2eTest,
                          public ::testing::WithParamInterface<std::string> {};

INSTANTIATE_TEST_SUITE_P(Channels, MovedPeriodicTest,
                         ::testing::Values("StraightIntoTheJob", "FilesFirst"),
                         [](const auto& p) { return p.param; });

TEST_P(MovedPeriodicTest, KilledBeforeItsFirstSaveThereItGoesOnFromTheMove) {
  constexpr int kSteps = 400;
  constexpr int kEvery = 300;
  constexpr int kSeed = 13;
  ClusterOptions o{.policy = "fifo",
                   .agents = 2,
                   .gpus_per_agent = 1,
                   .scheduler_args = {"--start-retry-s", "1"}};
  if (GetParam() == "FilesFirst") o.agent_args = {"--no-stream-to-job"};
  TestCluster c(o);
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  rpc::JobSpec spec = c.TrainSpec("moved-periodic", "cnn", kSteps, kSeed, 20);
  spec.set_command(spec.command() + " --log-steps 1");
  spec.set_retries(1);
  spec.set_checkpoint_every_minibatches(kEvery);
  auto ref = StartReferenceRun(spec, kSteps, kSeed, c.dir() / "reference.log");
  ASSERT_NE(ref, nullptr);
  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const rpc::JobInfo j = c.Job(id);
        return j.progress().uses_library() && j.progress().minibatches() >= 40;
      },
      seconds(120)))
      << Describe(c, id) << c.Logs();
  const std::string from = c.Job(id).server();
  const std::string to = from == "agent-0" ? "agent-1" : "agent-0";
  std::string out;
  ASSERT_EQ(c.Cli({"migrate", std::to_string(id), "--to", to}, &out), 0)
      << out << Describe(c, id) << c.Logs();
  // The move is done once the job trained its first mini-batch there: long
  // before its first periodic save there (mini-batch 300).
  const int pid = TrainingPid(kSteps, kSeed);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(WaitEnded(c, id, seconds(240))) << Describe(c, id) << c.Logs();

  const rpc::JobInfo j = c.Job(id);
  EXPECT_EQ(j.state(), rpc::FINISHED) << Describe(c, id);
  EXPECT_EQ(j.progress().minibatches(), kSteps);
  EXPECT_EQ(j.run_failures(), 1);
  // Its log: the source's part came along with the move, and the killed
  // run's part with the checkpoint, wherever the job ran again.
  const std::string log = c.JobLog(j);
  const std::vector<int> resumed = ResumedAt(log);
  ASSERT_EQ(resumed.size(), 2u) << log;
  // The last step the killed run trained.
  const int killed_at = LastStepBefore(
      log, log.find("resumed from ", log.find("resumed from ") + 1));
  ASSERT_GE(killed_at, 0) << log;
  EXPECT_GE(killed_at, resumed[0]) << log;
  EXPECT_LT(killed_at, kEvery) << "killed before its first save there";
  EXPECT_GE(resumed[0], 40) << log;
  EXPECT_LT(resumed[0], kEvery) << log;
  EXPECT_EQ(resumed[1], resumed[0]) << "went on from the move\n" << log;
  const auto retries = c.History(id, "retry");
  ASSERT_EQ(retries.size(), 1u) << Describe(c, id);
  EXPECT_EQ(retries[0].detail(),
            "run 1 of 2 failed: it runs again in 1 s, from its checkpoint at "
            "mini-batch " +
                std::to_string(resumed[0]));
  EXPECT_EQ(CountLines(log, "done: " + std::to_string(kSteps) + " steps"), 1)
      << log;
  ASSERT_TRUE(ref->Wait(seconds(240)));
  const std::string want = Fingerprint(Slurp(ref->log()));
  ASSERT_EQ(want.size(), 64u) << Slurp(ref->log());
  EXPECT_EQ(Fingerprint(log), want) << log;
  std::printf(
      "a job saving every %d mini-batches, moved at mini-batch %d (%s) and "
      "SIGKILLed there after mini-batch %d, went on from the move's "
      "checkpoint: %d mini-batches trained again\n",
      kEvery, resumed[0], GetParam().c_str(), killed_at,
      killed_at - resumed[0]);
}

// A job without the library that keeps its own checkpoints (restartable)
// is moved cold: SIGTERM at the source, its files sent to the other agent,
// started there from them.
TEST_F(MechanismE2eTest, RestartableJobMovesBetweenAgents) {
  TestCluster c({.policy = "fifo", .agents = 2, .gpus_per_agent = 1});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  rpc::JobSpec spec;
  spec.set_name("own-checkpoints");
  spec.set_command(
      "if [ -f \"$GANDIVA_RESUME_FROM/own\" ]; then "
      "echo \"resumed $(cat \"$GANDIVA_RESUME_FROM/own\")\"; fi; "
      "trap 'echo 42 > \"$GANDIVA_CHECKPOINT_DIR/own\"; exit 0' TERM; "
      "while :; do sleep 0.05; done");
  spec.set_gpus(1);
  spec.set_owner("e2e");
  spec.set_restartable(true);
  spec.set_workdir(c.dir().string());
  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(
      WaitUntil([&] { return c.Job(id).state() == rpc::RUNNING; }, seconds(60)))
      << Describe(c, id);
  const std::string from = c.Job(id).server();
  const std::string to = from == "agent-0" ? "agent-1" : "agent-0";
  std::string out;
  ASSERT_EQ(c.Cli({"migrate", std::to_string(id), "--to", to}, &out), 0)
      << out << Describe(c, id) << c.Logs();
  EXPECT_NE(out.find("restart, "), std::string::npos) << out;
  const rpc::JobInfo j = c.Job(id);
  EXPECT_EQ(j.state(), rpc::RUNNING) << Describe(c, id);
  EXPECT_EQ(j.server(), to);
  ASSERT_TRUE(WaitUntil(
      [&] { return CountLines(c.JobLog(c.Job(id)), "resumed 42") == 1; },
      seconds(30)))
      << c.JobLog(c.Job(id)) << Describe(c, id);
  ASSERT_EQ(c.Cli({"show", std::to_string(id)}, &out), 0) << out;
  EXPECT_NE(out.find("moves by:     restart from its own checkpoints"),
            std::string::npos)
      << out;
  EXPECT_EQ(c.Cli({"kill", std::to_string(id)}, &out), 0) << out;
}

// `gandiva drain` empties a server: its job moves to the other one, and the
// command waits for the move; with no other server open a job stays, and
// the command says why and exits 1.
TEST_F(MechanismE2eTest, DrainMovesJobsOffAServerAndWaitsForThem) {
  TestCluster c({.policy = "fifo", .agents = 2, .gpus_per_agent = 1});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  rpc::JobSpec spec;
  spec.set_name("drained");
  spec.set_command(
      "if [ -f \"$GANDIVA_RESUME_FROM/own\" ]; then "
      "echo \"resumed $(cat \"$GANDIVA_RESUME_FROM/own\")\"; fi; "
      "trap 'echo 7 > \"$GANDIVA_CHECKPOINT_DIR/own\"; exit 0' TERM; "
      "while :; do sleep 0.05; done");
  spec.set_gpus(1);
  spec.set_restartable(true);
  spec.set_workdir(c.dir().string());
  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(WaitUntil(
      [&] {
        return c.Job(id).state() == rpc::RUNNING &&
               !c.History(id, "start").empty();
      },
      seconds(60)))
      << Describe(c, id);
  const std::string from = c.Job(id).server();
  const std::string to = from == "agent-0" ? "agent-1" : "agent-0";
  std::string out;
  ASSERT_EQ(c.Cli({"drain", from}, &out), 0) << out << Describe(c, id);
  EXPECT_NE(out.find("job " + std::to_string(id) + ": migrating to " + to),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("migrate done"), std::string::npos) << out;
  EXPECT_NE(out.find(from + " is empty"), std::string::npos) << out;
  EXPECT_EQ(c.Job(id).server(), to);
  ASSERT_TRUE(WaitUntil(
      [&] { return CountLines(c.JobLog(c.Job(id)), "resumed 7") == 1; },
      seconds(30)))
      << c.JobLog(c.Job(id));
  // The other one too: nowhere open to go.
  EXPECT_EQ(c.Cli({"drain", to}, &out), 1) << out;
  EXPECT_NE(out.find("stays: no other server is up and open"),
            std::string::npos)
      << out;
  EXPECT_EQ(c.Job(id).server(), to);
  EXPECT_EQ(c.Cli({"drain", from, "--undo"}, &out), 0) << out;
  EXPECT_EQ(c.Cli({"drain", to, "--undo"}, &out), 0) << out;

  // A packed pair on `from`: the drain unpacks it, drains again, and moves
  // what fits on `to` (one GPU, free once `id` is killed).
  spec.set_name("packed-a");
  const int64_t p1 = c.Submit(spec, &error);
  spec.set_name("packed-b");
  const int64_t p2 = c.Submit(spec, &error);
  ASSERT_TRUE(p1 > 0 && p2 > 0) << error;
  ASSERT_TRUE(WaitUntil(
      [&] {
        return c.Job(p1).state() == rpc::RUNNING &&
               !c.History(p1, "start").empty();
      },
      seconds(60)))
      << Describe(c, p1);
  EXPECT_EQ(c.Job(p1).server(), from);
  EXPECT_EQ(c.Job(p2).state(), rpc::QUEUED);
  ASSERT_EQ(
      c.Cli({"pack", std::to_string(p2), "--with", std::to_string(p1)}, &out),
      0)
      << out;
  EXPECT_EQ(c.Cli({"kill", std::to_string(id)}, &out), 0) << out;
  EXPECT_EQ(c.Cli({"drain", from}, &out), 1) << out;
  EXPECT_NE(out.find("unpacking it; drain again to move them"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("draining " + from + " again"), std::string::npos) << out;
  EXPECT_NE(out.find("migrating to " + to), std::string::npos) << out;
  EXPECT_NE(out.find("1 of 2 jobs stay on " + from), std::string::npos) << out;
  int moved = 0;
  for (int64_t j : {p1, p2}) moved += c.Job(j).server() == to;
  EXPECT_EQ(moved, 1);
  for (int64_t j : {p1, p2}) {
    EXPECT_EQ(c.Cli({"kill", std::to_string(j)}, &out), 0) << out;
  }
}

// Requests that cannot be carried out are refused with the reason, and the
// job runs on where it was.
TEST_F(MechanismE2eTest, ImpossibleRequestsAreRefusedWithTheReason) {
  // Without CRIU (else it would move the plain job).
  TestCluster c({.policy = "fifo",
                 .agents = 2,
                 .gpus_per_agent = 1,
                 .agent_args = {"--no-criu"}});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  // A job without the library (and not restartable) cannot be moved.
  rpc::JobSpec plain;
  plain.set_name("plain");
  plain.set_command("sleep 600");
  plain.set_gpus(1);
  plain.set_owner("e2e");
  plain.set_workdir(c.dir().string());
  const int64_t id = c.Submit(plain, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const rpc::JobInfo j = c.Job(id);
        return j.state() == rpc::RUNNING && !j.history().empty();
      },
      seconds(60)))
      << Describe(c, id);
  // Past the agent's grace for the library to attach.
  std::this_thread::sleep_for(seconds(1));
  const std::string where = c.Job(id).server();
  const std::string other = where == "agent-0" ? "agent-1" : "agent-0";

  std::string out;
  EXPECT_EQ(c.Cli({"migrate", std::to_string(id), "--to", other}, &out), 1);
  EXPECT_NE(out.find("does not use the gandiva job-side library"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("CRIU is not usable on " + where +
                     " (turned off on this agent (--no-criu))"),
            std::string::npos)
      << out;

  EXPECT_EQ(c.Cli({"resize", std::to_string(id), "--gpus", "2"}, &out), 1);
  EXPECT_NE(out.find("not elastic"), std::string::npos) << out;

  EXPECT_EQ(c.Cli({"migrate", std::to_string(id), "--to", "nowhere"}, &out), 1);
  EXPECT_NE(out.find("no server named 'nowhere'"), std::string::npos) << out;

  EXPECT_EQ(c.Cli({"migrate", std::to_string(id), "--to", where}, &out), 1);
  EXPECT_NE(out.find("already on server"), std::string::npos) << out;

  EXPECT_EQ(c.Cli({"unpack", std::to_string(id)}, &out), 1);
  EXPECT_NE(out.find("not packed"), std::string::npos) << out;

  // `gandiva show` says so before anyone asks.
  ASSERT_EQ(c.Cli({"show", std::to_string(id)}, &out), 0) << out;
  EXPECT_NE(out.find("moves by:     cannot move: no library seen, not "
                     "restartable, and CRIU is not usable on " +
                     where + " (turned off on this agent (--no-criu))"),
            std::string::npos)
      << out;

  const rpc::JobInfo j = c.Job(id);
  EXPECT_EQ(j.state(), rpc::RUNNING) << Describe(c, id);
  EXPECT_EQ(j.server(), where);
  EXPECT_TRUE(c.History(id, "migrate").empty()) << Describe(c, id);

  // `gandiva servers` says why CRIU cannot be used here.
  ASSERT_EQ(c.Cli({"servers"}, &out), 0) << out;
  EXPECT_NE(out.find("CRIU no (turned off on this agent (--no-criu))"),
            std::string::npos)
      << out;
}

// A kill that comes while a migration waits for the job's new process (a
// warm start that would take ten minutes here) does not wait behind it: the
// wait is cancelled, the new process and the one at the source are killed,
// and the migration reports that it was cut short.
TEST_F(MechanismE2eTest, KillDuringAWarmStartEndsTheJobEverywhere) {
  TestCluster c({.policy = "fifo",
                 .agents = 2,
                 .gpus_per_agent = 1,
                 .scheduler_args = {"--warm-ready-timeout-s", "600"}});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  // Its processes are told from any other run's by the cluster's dir.
  const std::string tag =
      "slow_warm_job.py --warm-s 600 --tag " + c.dir().string();
  rpc::JobSpec spec =
      c.PythonSpec("slow-warm", std::string(GANDIVA_SOURCE_DIR) +
                                    "/tests/runtime/jobs/" + tag);
  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const rpc::JobInfo j = c.Job(id);
        return j.state() == rpc::RUNNING && j.progress().uses_library() &&
               j.progress().minibatches() > 0;
      },
      seconds(90)))
      << Describe(c, id) << c.Logs();
  const std::string from = c.Job(id).server();
  const std::string to = from == "agent-0" ? "agent-1" : "agent-0";
  int migrate_rc = -1;
  std::string migrate_out;
  std::thread migrate([&] {
    migrate_rc =
        c.Cli({"migrate", std::to_string(id), "--to", to}, &migrate_out);
  });
  // Joined however the test ends: a kill ends the call.
  struct Joiner {
    std::thread& t;
    TestCluster& c;
    int64_t id;
    ~Joiner() {
      if (!t.joinable()) return;
      std::string ignored;
      c.Cli({"kill", std::to_string(id)}, &ignored);
      t.join();
    }
  } joiner{migrate, c, id};
  // The new process is up (and sleeps in its warmup): two of the job's.
  ASSERT_TRUE(
      WaitUntil([&] { return ProcessesRunning(tag) == 2; }, seconds(60)))
      << Describe(c, id) << c.Logs();
  std::this_thread::sleep_for(seconds(1));
  std::string out;
  EXPECT_EQ(c.Cli({"kill", std::to_string(id)}, &out), 0) << out;
  // Failure guards far below the ten-minute warm wait.
  EXPECT_TRUE(WaitEnded(c, id, seconds(30))) << Describe(c, id);
  migrate.join();
  EXPECT_NE(migrate_rc, 0) << migrate_out;
  // The move's outcome may come just after the job's end.
  ASSERT_TRUE(
      WaitUntil([&] { return !c.History(id, "migrate").empty(); }, seconds(30)))
      << Describe(c, id) << c.Logs();
  const auto moves = c.History(id, "migrate");
  EXPECT_FALSE(moves.back().ok()) << Describe(c, id);
  EXPECT_NE(moves.back().detail().find("warm start"), std::string::npos)
      << Describe(c, id);
  // No process of the job is left on either server.
  EXPECT_TRUE(
      WaitUntil([&] { return ProcessesRunning(tag) == 0; }, seconds(30)))
      << ProcessesRunning(tag) << " left\n"
      << Describe(c, id) << c.Logs();
}

// A job with neither the library nor checkpoints of its own is moved by
// CRIU where it works on both servers: `gandiva migrate` dumps it at the
// source, sends the images, restores it at the destination, where it goes
// on counting from where it was (its memory came along), and `gandiva show`
// lists the dump and the restore with their costs.
TEST_F(MechanismE2eTest, PlainJobMovesByCriu) {
  TestCluster c({.policy = "fifo", .agents = 2, .gpus_per_agent = 1});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  std::string out;
  // Both agents' capabilities are in once `servers` lists them.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return c.Cli({"servers"}, &out) == 0 &&
               CountLines(out, ": CRIU ") == 2 &&
               out.find("not checked yet") == std::string::npos;
      },
      seconds(30)))
      << out;
  if (CountLines(out, ": CRIU yes") != 2) {
    GTEST_SKIP() << "CRIU is not usable here:\n" << out;
  }
  rpc::JobSpec spec;
  spec.set_name("plain-counter");
  spec.set_command(
      "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo \"count $i\"; "
      "sleep 0.02; done");
  spec.set_gpus(1);
  spec.set_owner("e2e");
  spec.set_workdir(c.dir().string());
  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const rpc::JobInfo j = c.Job(id);
        return j.state() == rpc::RUNNING &&
               CountLines(c.JobLog(j), "count ") >= 20;
      },
      seconds(60)))
      << Describe(c, id);
  const std::string from = c.Job(id).server();
  const std::string to = from == "agent-0" ? "agent-1" : "agent-0";
  ASSERT_EQ(c.Cli({"migrate", std::to_string(id), "--to", to}, &out), 0)
      << out << Describe(c, id) << c.Logs();
  EXPECT_NE(out.find("(criu, "), std::string::npos) << out;
  EXPECT_NE(out.find(", dump "), std::string::npos) << out;
  EXPECT_NE(out.find(", restore "), std::string::npos) << out;
  const rpc::JobInfo j = c.Job(id);
  EXPECT_EQ(j.state(), rpc::RUNNING) << Describe(c, id);
  EXPECT_EQ(j.server(), to);
  // The count goes on at the destination: 1, 2, 3, ... with no line twice
  // and none skipped (a restart would begin at 1 again).
  std::string log;
  ASSERT_TRUE(WaitUntil(
      [&] {
        log = c.JobLog(c.Job(id));
        return CountLines(log, "count ") >= 80;
      },
      seconds(60)))
      << log << Describe(c, id);
  int last = 0;
  bool in_order = true;
  for (size_t at = log.find("count "); at != std::string::npos;
       at = log.find("count ", at + 1)) {
    const int n = std::atoi(log.c_str() + at + 6);
    in_order = in_order && n == last + 1;
    last = n;
  }
  EXPECT_TRUE(in_order) << log;
  ASSERT_EQ(c.Cli({"show", std::to_string(id)}, &out), 0) << out;
  EXPECT_NE(out.find("(criu, "), std::string::npos) << out;
  EXPECT_NE(out.find("moves by:     CRIU (usable on " + to), std::string::npos)
      << out;
  std::printf("[ criu ] %s\n",
              c.History(id, "migrate").back().detail().c_str());
  EXPECT_EQ(c.Cli({"kill", std::to_string(id)}, &out), 0) << out;
}

}  // namespace
}  // namespace gandiva::e2e

namespace gandiva::e2e {
namespace {

// A spec running examples/train_ddp.py through the launcher (one rank per
// GPU of the job), elastic.
rpc::JobSpec DdpSpec(TestCluster& c, int samples) {
  rpc::JobSpec spec = c.PythonSpec(
      "ddp", "-m gandiva.launch -- " + std::string(GANDIVA_EXAMPLES_DIR) +
                 "/train_ddp.py --samples " + std::to_string(samples) +
                 " --min-step-ms 10 --log-every 200");
  spec.set_elastic(true);
  return spec;
}

// A two-process data-parallel job grows from 1 to 2 workers and shrinks
// back (checkpoint-restart at the new world size, `gandiva resize`), and
// finishes exactly the samples it was asked for.
TEST_F(MechanismE2eTest, DataParallelJobGrowsAndShrinksKeepingItsSamples) {
  constexpr int kSamples = 8000;
  TestCluster c({.policy = "fifo", .agents = 1, .gpus_per_agent = 2});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  const int64_t id = c.Submit(DdpSpec(c, kSamples), &error);
  ASSERT_GT(id, 0) << error;
  auto progressed = [&](int64_t at_least) {
    return WaitUntil(
        [&] {
          const rpc::JobInfo j = c.Job(id);
          return j.progress().uses_library() &&
                 j.progress().minibatches() >= at_least;
        },
        seconds(120));
  };
  ASSERT_TRUE(progressed(100)) << Describe(c, id) << c.Logs();

  std::string out;
  // Counted before the grow: right after it the restarted process may
  // report no mini-batch yet (it has not loaded its checkpoint).
  const int64_t before_grow = c.Job(id).progress().minibatches();
  ASSERT_EQ(c.Cli({"resize", std::to_string(id), "--gpus", "2"}, &out), 0)
      << out << Describe(c, id) << c.Logs();
  EXPECT_NE(out.find("grow done"), std::string::npos) << out;
  rpc::JobInfo j = c.Job(id);
  EXPECT_EQ(j.gpus_size(), 2);
  ASSERT_TRUE(WaitUntil(
      [&] {
        const rpc::JobInfo now = c.Job(id);
        return now.progress().world_size() == 2 &&
               now.progress().minibatches() >= before_grow + 100;
      },
      seconds(120)))
      << Describe(c, id) << c.Logs();

  ASSERT_EQ(c.Cli({"resize", std::to_string(id), "--gpus", "1"}, &out), 0)
      << out << Describe(c, id) << c.Logs();
  EXPECT_NE(out.find("shrink done"), std::string::npos) << out;
  EXPECT_EQ(c.Job(id).gpus_size(), 1);

  ASSERT_TRUE(WaitEnded(c, id, seconds(240))) << Describe(c, id) << c.Logs();
  j = c.Job(id);
  EXPECT_EQ(j.state(), rpc::FINISHED) << Describe(c, id);
  const std::string log = c.JobLog(j);
  EXPECT_EQ(CountLines(log, "done samples=" + std::to_string(kSamples) + " "),
            1)
      << log;
  EXPECT_EQ(CountLines(log, "resumed from "), 2) << log;
  // It ran at world size 2 in between.
  EXPECT_GE(CountLines(log, "world_size 2"), 1) << log;
  ASSERT_EQ(c.History(id, "grow").size(), 1u) << Describe(c, id);
  EXPECT_NE(c.History(id, "grow")[0].detail().find(", first mini-batch "),
            std::string::npos)
      << Describe(c, id);
  ASSERT_EQ(c.History(id, "shrink").size(), 1u) << Describe(c, id);
}

// Two jobs packed on one virtual GPU that train slower together than they
// would time-slicing (tests/runtime/jobs/contending_job.py: each step takes
// 3x as long while the other job is active on its GPU, so packed they make
// 2/3 of the progress of time-slicing): the scheduler measures it and
// unpacks them, and each still finishes exactly once.
TEST_F(MechanismE2eTest, PackSlowerThanTimeSlicingIsUndone) {
  constexpr int kSteps = 1500;
  TestCluster c(
      {.policy = "gandiva",
       .quantum_s = 3,
       .agents = 1,
       .gpus_per_agent = 1,
       .scheduler_args = {"--pack-settle-s", "3", "--probe-delay-s", "2"}});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  auto spec = [&](const std::string& name) {
    return c.PythonSpec(name, std::string(GANDIVA_SOURCE_DIR) +
                                  "/tests/runtime/jobs/contending_job.py "
                                  "--steps " +
                                  std::to_string(kSteps) + " --device " +
                                  (c.dir() / "gpu0").string());
  };
  const int64_t a = c.Submit(spec("a"), &error);
  ASSERT_GT(a, 0) << error;
  const int64_t b = c.Submit(spec("b"), &error);
  ASSERT_GT(b, 0) << error;
  // Both have run alone (time-slicing) long enough to be measured alone,
  // past their start (the daemon's policy judges a pack from 5 reports
  // alone each): one waits for its turn, the other runs. The policy may
  // pack them by itself as soon as they are measured.
  auto measured_alone = [&](int64_t waiting, int64_t running) {
    const rpc::JobInfo w = c.Job(waiting);
    const rpc::JobInfo r = c.Job(running);
    return w.state() == rpc::SUSPENDED && w.progress().minibatches() >= 150 &&
           r.state() == rpc::RUNNING && r.progress().minibatches() >= 150;
  };
  ASSERT_TRUE(WaitUntil(
      [&] {
        return measured_alone(a, b) || measured_alone(b, a) ||
               !c.History(a, "pack").empty() || !c.History(b, "pack").empty();
      },
      seconds(120), milliseconds(50)))
      << Describe(c, a) << Describe(c, b) << c.Logs();
  // Ask for the pack by hand, unless the policy packed them already.
  const bool a_waits = c.Job(a).state() == rpc::SUSPENDED;
  std::string out;
  const int rc = c.Cli({"pack", std::to_string(a_waits ? a : b), "--with",
                        std::to_string(a_waits ? b : a)},
                       &out);
  EXPECT_TRUE(rc == 0 || out.find("packed") != std::string::npos ||
              out.find("under way") != std::string::npos)
      << out;
  // Measured, then undone by the scheduler (nobody asked for an unpack).
  ASSERT_TRUE(WaitUntil(
      [&] {
        return !c.History(a, "unpack").empty() ||
               !c.History(b, "unpack").empty();
      },
      seconds(120)))
      << Describe(c, a) << Describe(c, b) << c.Logs();
  int packs = 0;
  for (int64_t id : {a, b}) {
    for (const auto& h : c.History(id, "pack")) packs += h.ok() ? 1 : 0;
  }
  EXPECT_GE(packs, 1) << Describe(c, a) << Describe(c, b);

  for (int64_t id : {a, b}) {
    ASSERT_TRUE(WaitEnded(c, id, seconds(300))) << Describe(c, id);
    const rpc::JobInfo j = c.Job(id);
    EXPECT_EQ(j.state(), rpc::FINISHED) << Describe(c, id);
    EXPECT_EQ(j.progress().minibatches(), kSteps) << Describe(c, id);
    const std::string log = c.JobLog(j);
    EXPECT_EQ(CountLines(log, "done: " + std::to_string(kSteps) + " steps"), 1)
        << log;
  }
  // What the pack did to the rates is in the history.
  int profiles = 0;
  for (int64_t id : {a, b}) {
    for (const auto& h : c.History(id, "profile")) {
      profiles += h.detail().find("after pack") != std::string::npos;
    }
  }
  EXPECT_GE(profiles, 1) << Describe(c, a) << Describe(c, b);
}

}  // namespace
}  // namespace gandiva::e2e
