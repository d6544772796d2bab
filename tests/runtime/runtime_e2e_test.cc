// End-to-end tests of the runtime: the real gandiva-scheduler and
// gandiva-agent binaries on loopback running real PyTorch jobs (the
// examples/ scripts, on CPU with virtual GPUs).
//
// Deadlines here are failure guards sized for a loaded 2-core machine; no
// assertion depends on how fast anything ran.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/runtime/harness.h"

namespace gandiva::e2e {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::string Describe(const std::map<int64_t, rpc::JobInfo>& jobs) {
  std::string out;
  for (const auto& [id, j] : jobs) {
    out += "  job " + std::to_string(id) + " " + j.spec().name() + " " +
           rpc::JobState_Name(j.state()) + " on '" + j.server() + "' mb " +
           std::to_string(j.progress().minibatches()) + " exit " +
           std::to_string(j.exit_code()) + " suspends " +
           std::to_string(j.suspends()) + "\n";
    for (const auto& h : j.history()) {
      out += "      " + h.action() + (h.ok() ? " ok " : " FAILED ") +
             std::to_string(h.took_us()) + "us " + h.detail() + "\n";
    }
  }
  return out;
}

// Checks what every finished job must satisfy: it finished (exit 0) with
// exactly `steps` mini-batches, its log says so once, and it was started
// from scratch once (later starts, if any, resumed from a checkpoint).
void ExpectFinishedExactlyOnce(TestCluster& c, const rpc::JobInfo& j,
                               int steps) {
  SCOPED_TRACE("job " + std::to_string(j.id()) + " (" + j.spec().name() + ")");
  EXPECT_EQ(j.state(), rpc::FINISHED);
  EXPECT_EQ(j.exit_code(), 0);
  EXPECT_EQ(j.progress().minibatches(), steps);
  const std::string log = c.JobLog(j);
  const std::string done = "done: " + std::to_string(steps) + " steps";
  EXPECT_EQ(CountLines(log, done), 1) << "log:\n" << log;
  EXPECT_EQ(CountLines(log, "done: "), 1) << "log:\n" << log;
  // "cnn: job ..." is printed at every start; "resumed from" precedes it
  // when the start loaded a checkpoint.
  const int starts = CountLines(log, ": job ");
  const int resumed = CountLines(log, "resumed from ");
  EXPECT_EQ(starts - resumed, 1) << "started from scratch more than once:\n"
                                 << log;
}

// Submits `n` jobs training the CNN for `steps` mini-batches, named
// prefix-i with seed i; their ids (fewer on a failure, reported).
std::set<int64_t> SubmitCnn(TestCluster& c, const std::string& prefix, int n,
                            int steps, int step_ms) {
  std::set<int64_t> ids;
  for (int i = 0; i < n; ++i) {
    std::string error;
    const int64_t id = c.Submit(
        c.TrainSpec(prefix + "-" + std::to_string(i), "cnn", steps, i, step_ms),
        &error);
    if (id <= 0) {
      ADD_FAILURE() << error;
      break;
    }
    ids.insert(id);
  }
  return ids;
}

// Waits until every job of `ids` has ended; *jobs holds the last listing.
bool WaitAllEnded(TestCluster& c, const std::set<int64_t>& ids,
                  std::map<int64_t, rpc::JobInfo>* jobs) {
  return WaitUntil(
      [&] {
        bool ok = false;
        auto now = c.Jobs(&ok);
        if (!ok) return false;
        *jobs = now;
        for (int64_t id : ids) {
          if (!jobs->contains(id) || !IsEnded(jobs->at(id).state())) {
            return false;
          }
        }
        return true;
      },
      seconds(240), milliseconds(200));
}

class RuntimeE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveTorch()) GTEST_SKIP() << GANDIVA_PYTHON << " has no torch";
  }
};

// (a) Six one-GPU jobs on two agents of two virtual GPUs each, under the
// gandiva policy with a short quantum: the jobs time-slice (every job makes
// progress before any finishes), every suspend takes effect at a mini-batch
// boundary, and each job finishes with exactly the mini-batches it asked
// for.
TEST_F(RuntimeE2eTest, SixJobsTimeSliceOnFourGpus) {
  TestCluster c({.policy = "gandiva", .quantum_s = 2, .tick_ms = 200});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;

  constexpr int kSteps = 400;
  constexpr int kStepMs = 25;  // >= 10 s of training per job
  std::vector<int64_t> ids;
  for (int i = 0; i < 6; ++i) {
    const std::string model = i % 2 == 0 ? "cnn" : "lstm";
    const int64_t id = c.Submit(
        c.TrainSpec(model + "-" + std::to_string(i), model, kSteps, i, kStepMs),
        &error);
    ASSERT_GT(id, 0) << error;
    ids.push_back(id);
  }

  // Sample until all have ended: when each job was first seen with
  // progress, and when any job was first seen ended.
  std::map<int64_t, int> first_progress;  // job -> sample index
  int first_end = -1;
  int sample = 0;
  std::map<int64_t, rpc::JobInfo> jobs;
  const bool all_ended = WaitUntil(
      [&] {
        bool ok = false;
        auto now = c.Jobs(&ok);
        if (!ok) return false;
        jobs = now;
        ++sample;
        bool all = jobs.size() == ids.size();
        for (const auto& [id, j] : jobs) {
          if (j.progress().minibatches() > 0 && !first_progress.count(id)) {
            first_progress[id] = sample;
          }
          if (IsEnded(j.state())) {
            if (first_end < 0) first_end = sample;
          } else {
            all = false;
          }
        }
        return all;
      },
      seconds(240), milliseconds(100));
  ASSERT_TRUE(all_ended) << "jobs did not all end:\n"
                         << Describe(jobs) << c.Logs();

  // Time-slicing, not queueing: each job ran before the first one ended.
  for (int64_t id : ids) {
    ASSERT_TRUE(first_progress.count(id))
        << "job " << id << " never showed progress\n"
        << Describe(jobs);
    EXPECT_LT(first_progress[id], first_end)
        << "job " << id << " made no progress before a job ended (sample "
        << first_progress[id] << " vs " << first_end << ")\n"
        << Describe(jobs);
  }

  // Every suspend took effect at a mini-batch boundary; time-slicing
  // suspended some. The daemon records the agent's SuspendReply.at_boundary
  // in the suspend's history detail: "at boundary" / "not at boundary".
  for (int64_t id : ids) jobs[id] = c.Job(id);
  int suspends = 0;
  for (const auto& [id, j] : jobs) {
    for (const auto& h : j.history()) {
      if (h.action() != "suspend") continue;
      ++suspends;
      EXPECT_TRUE(h.ok()) << "job " << id << ": " << h.detail();
      EXPECT_NE(h.detail().find("at boundary"), std::string::npos)
          << "job " << id << ": suspend not recorded at a mini-batch "
          << "boundary: '" << h.detail() << "'\n"
          << Describe(jobs);
      EXPECT_EQ(h.detail().find("not at boundary"), std::string::npos)
          << "job " << id << ": " << h.detail();
    }
  }
  EXPECT_GE(suspends, 2) << Describe(jobs);

  for (int64_t id : ids) ExpectFinishedExactlyOnce(c, jobs[id], kSteps);
}

// `gandiva queues apply FILE` changes the queues of a running cluster: a
// dry run says what would change; applied, `gandiva queues` shows the new
// ones. A file that is no tree is refused by the CLI itself, naming the
// file, the queue and the field; one that would remove a queue holding a
// live job is refused by the daemon, naming the job.
TEST_F(RuntimeE2eTest, QueuesChangeWhileJobsRun) {
  const fs::path dir = fs::temp_directory_path() /
                       ("gandiva-queues-apply-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "start.yaml") << "queues:\n  - {name: a, quota: 1}\n"
                                    << "  - {name: b, quota: 1}\n";
  TestCluster c(
      {.policy = "gandiva-fair",
       .agents = 1,
       .gpus_per_agent = 2,
       .scheduler_args = {"--queues", (dir / "start.yaml").string()}});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  rpc::JobSpec spec;
  spec.set_name("sleeper");
  spec.set_command("sleep 600");
  spec.set_gpus(1);
  spec.set_owner("e2e");
  spec.set_queue("a");
  spec.set_workdir(c.dir().string());
  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;

  std::ofstream(dir / "more.yaml") << "queues:\n  - {name: a, quota: 2}\n"
                                   << "  - {name: b, quota: 0}\n"
                                   << "  - {name: c, quota: 0}\n";
  std::string out;
  ASSERT_EQ(
      c.Cli({"queues", "apply", (dir / "more.yaml").string(), "--dry-run"},
            &out),
      0)
      << out;
  EXPECT_NE(out.find("would change (--dry-run):\n  queue 'a': quota 1 -> "
                     "2\n  queue 'b': quota 1 -> 0\n  queue 'c' added "
                     "(quota 0)\n"),
            std::string::npos)
      << out;
  ASSERT_EQ(c.Cli({"queues", "--json"}, &out), 0) << out;
  EXPECT_EQ(out.find("\"c\""), std::string::npos) << "a dry run: " << out;
  ASSERT_EQ(c.Cli({"queues", "apply", (dir / "more.yaml").string()}, &out), 0)
      << out;
  EXPECT_NE(out.find("queues changed:"), std::string::npos) << out;
  ASSERT_EQ(c.Cli({"queues"}, &out), 0) << out;
  EXPECT_NE(out.find("\nc "), std::string::npos) << out;
  ASSERT_EQ(c.Cli({"queues", "apply", (dir / "more.yaml").string()}, &out), 0)
      << out;
  EXPECT_NE(out.find("nothing to change"), std::string::npos) << out;

  std::ofstream(dir / "bad.yaml") << "queues:\n  - {name: a, quota: 1}\n"
                                  << "  - {name: b, quota: lots}\n";
  EXPECT_EQ(c.Cli({"queues", "apply", (dir / "bad.yaml").string()}, &out), 1);
  EXPECT_NE(out.find((dir / "bad.yaml").string()), std::string::npos) << out;
  EXPECT_NE(out.find("field 'quota'"), std::string::npos) << out;
  std::ofstream(dir / "fewer.yaml") << "queues:\n  - {name: b, quota: 2}\n";
  EXPECT_EQ(c.Cli({"queues", "apply", (dir / "fewer.yaml").string()}, &out), 1);
  EXPECT_NE(out.find("queue 'a' holds live jobs (" + std::to_string(id) +
                     ") and would be removed"),
            std::string::npos)
      << out;
  ASSERT_EQ(c.Cli({"kill", std::to_string(id)}, &out), 0) << out;
  fs::remove_all(dir);
}

// Queues a and b with quotas of 2 GPUs each on 4 virtual GPUs, under
// gandiva-fair. b borrows all 4 while a is idle. a submits two jobs: two
// of b's are suspended at a mini-batch boundary, not killed (no b job's
// mini-batch count ever goes back), and a's run. When a's end, b's all run
// again, and every job finishes exactly once.
TEST_F(RuntimeE2eTest, AQueueOwedItsQuotaTakesItBackLosingNothing) {
  const fs::path queues =
      fs::temp_directory_path() /
      ("gandiva-queues-" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(queues) << "queues:\n  - {name: a, quota: 2}\n"
                        << "  - {name: b, quota: 2}\n";
  TestCluster c({.policy = "gandiva-fair",
                 .quantum_s = 2,
                 .tick_ms = 200,
                 .scheduler_args = {"--queues", queues.string()}});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  fs::remove(queues);

  constexpr int kStepsB = 800, kStepsA = 160, kStepMs = 25;
  auto submit = [&](const std::string& queue, int i, int steps) {
    rpc::JobSpec spec =
        c.TrainSpec(queue + "-" + std::to_string(i), "cnn", steps, i, kStepMs);
    spec.set_queue(queue);
    const int64_t id = c.Submit(spec, &error);
    EXPECT_GT(id, 0) << error;
    return id;
  };
  std::set<int64_t> b, a, all;
  for (int i = 0; i < 4; ++i) b.insert(submit("b", i, kStepsB));
  std::map<int64_t, rpc::JobInfo> jobs;
  std::map<int64_t, int64_t> most;  // the most mini-batches seen, by job
  std::vector<std::string> went_back;
  auto sample = [&] {
    bool ok = false;
    auto now = c.Jobs(&ok);
    if (!ok) return false;
    jobs = now;
    for (const auto& [id, j] : jobs) {
      const int64_t mb = j.progress().minibatches();
      if (mb < most[id]) {
        went_back.push_back("job " + std::to_string(id) + " from " +
                            std::to_string(most[id]) + " to " +
                            std::to_string(mb));
      }
      most[id] = std::max(most[id], mb);
    }
    return true;
  };
  auto running = [&](const std::set<int64_t>& ids) {
    int n = 0;
    for (int64_t id : ids) {
      n += jobs.contains(id) && jobs.at(id).state() == rpc::RUNNING &&
           jobs.at(id).progress().minibatches() > 0;
    }
    return n;
  };
  ASSERT_TRUE(WaitUntil([&] { return sample() && running(b) == 4; },
                        seconds(120), milliseconds(100)))
      << "b did not borrow all 4 GPUs:\n"
      << Describe(jobs) << c.Logs();

  const auto asked = std::chrono::steady_clock::now();
  for (int i = 0; i < 2; ++i) a.insert(submit("a", i, kStepsA));
  ASSERT_TRUE(WaitUntil([&] { return sample() && running(a) == 2; },
                        seconds(120), milliseconds(100)))
      << "a did not get its quota back:\n"
      << Describe(jobs) << c.Logs();
  std::printf(
      "a's jobs trained %.1f s after they were submitted (quantum "
      "2 s; their processes' start included)\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - asked)
          .count());
  EXPECT_LE(running(b), 2) << Describe(jobs);

  // a's end; then b's all run again.
  ASSERT_TRUE(WaitUntil(
      [&] {
        if (!sample()) return false;
        for (int64_t id : a) {
          if (!IsEnded(jobs.at(id).state())) return false;
        }
        return running(b) == 4;
      },
      seconds(240), milliseconds(100)))
      << "b's did not all run again once a's ended:\n"
      << Describe(jobs) << c.Logs();

  all = a;
  all.insert(b.begin(), b.end());
  ASSERT_TRUE(WaitUntil(
      [&] {
        if (!sample()) return false;
        for (int64_t id : all) {
          if (!IsEnded(jobs.at(id).state())) return false;
        }
        return true;
      },
      seconds(240), milliseconds(200)))
      << Describe(jobs) << c.Logs();
  EXPECT_TRUE(went_back.empty()) << went_back.front();
  for (int64_t id : all) jobs[id] = c.Job(id);
  int b_suspends = 0;
  for (int64_t id : all) {
    for (const auto& h : jobs[id].history()) {
      EXPECT_NE(h.action(), "kill") << "job " << id;
      if (h.action() != "suspend") continue;
      b_suspends += b.contains(id);
      EXPECT_TRUE(h.ok()) << "job " << id << ": " << h.detail();
      EXPECT_EQ(h.detail().find("not at boundary"), std::string::npos)
          << "job " << id << ": " << h.detail();
    }
  }
  EXPECT_GE(b_suspends, 2) << Describe(jobs);
  for (int64_t id : a) ExpectFinishedExactlyOnce(c, jobs[id], kStepsA);
  for (int64_t id : b) ExpectFinishedExactlyOnce(c, jobs[id], kStepsB);
}

// (b) SIGKILL the daemon in the middle of a workload and restart it on the
// same database and port: every job still finishes, exactly once, and none
// is lost or duplicated.
TEST_F(RuntimeE2eTest, SchedulerCrashLosesNoJob) {
  TestCluster c({.policy = "gandiva", .quantum_s = 2, .tick_ms = 200});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;

  constexpr int kSteps = 300;
  constexpr int kStepMs = 20;
  const std::set<int64_t> ids = SubmitCnn(c, "crash", 6, kSteps, kStepMs);
  ASSERT_EQ(ids.size(), 6u);

  // Mid-workload: some jobs train, none has ended yet.
  std::map<int64_t, rpc::JobInfo> jobs;
  const bool mid = WaitUntil(
      [&] {
        jobs = c.Jobs();
        int training = 0;
        for (const auto& [id, j] : jobs) {
          if (j.progress().minibatches() > 0) ++training;
        }
        return training >= 2;
      },
      seconds(120));
  ASSERT_TRUE(mid) << "no job got going:\n" << Describe(jobs) << c.Logs();

  const int port = std::stoi(c.address().substr(c.address().rfind(':') + 1));
  c.scheduler()->Signal(SIGKILL);
  ASSERT_TRUE(c.scheduler()->Wait(seconds(10)));
  std::this_thread::sleep_for(milliseconds(500));
  ASSERT_TRUE(c.StartScheduler(port, &error)) << error;

  ASSERT_TRUE(WaitAllEnded(c, ids, &jobs))
      << "jobs did not all end after the restart:\n"
      << Describe(jobs) << c.Logs();

  std::set<int64_t> seen;
  for (auto& [id, j] : jobs) {
    seen.insert(id);
    j = c.Job(id);
  }
  EXPECT_EQ(seen, ids) << "jobs lost or invented by the restart:\n"
                       << Describe(jobs);
  for (int64_t id : ids) {
    if (jobs.count(id)) ExpectFinishedExactlyOnce(c, jobs[id], kSteps);
  }
}

// (c) An agent restarted (SIGTERM, then started again as an operator
// upgrading it would) and then the whole cluster stopped and started again,
// the daemon first, then the agent: each time the jobs save a checkpoint as
// their agent stops and go on from it when it is back, so each finishes
// with exactly the mini-batches it asked for, having started from scratch
// once. A job without the library is dumped by CRIU at each stop where
// CRIU works here, and restored when the agent is back, else killed and
// started again: it finishes too, never failed by the stops.
TEST_F(RuntimeE2eTest, JobsGoOnFromWhereTheirAgentStopped) {
  TestCluster c({.agents = 1, .gpus_per_agent = 3});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  // Long enough to be running still at the second stop.
  constexpr int kSteps = 1200;
  constexpr int kStepMs = 20;
  const std::set<int64_t> ids = SubmitCnn(c, "stop", 2, kSteps, kStepMs);
  ASSERT_EQ(ids.size(), 2u);
  rpc::JobSpec plain_spec;
  plain_spec.set_name("plain");
  // It runs until the test releases it, after the second stop.
  const fs::path release = c.dir() / "release-plain";
  plain_spec.set_command("while [ ! -e '" + release.string() +
                         "' ]; do sleep 0.1; done");
  plain_spec.set_gpus(1);
  const int64_t plain = c.Submit(plain_spec, &error);
  ASSERT_GT(plain, 0) << error;
  // Every job trained at least `floor` mini-batches, none has ended.
  std::map<int64_t, rpc::JobInfo> jobs;
  auto all_past = [&](int64_t floor) {
    return WaitUntil(
        [&] {
          bool ok = false;
          auto now = c.Jobs(&ok);
          if (!ok) return false;
          jobs = now;
          for (int64_t id : ids) {
            auto it = jobs.find(id);
            if (it == jobs.end() ||
                it->second.progress().minibatches() < floor) {
              return false;
            }
          }
          return true;
        },
        seconds(180), milliseconds(200));
  };
  ASSERT_TRUE(all_past(50)) << Describe(jobs) << c.Logs();
  // Whether the agent found CRIU usable (it probes in the background).
  rpc::AgentCapabilities caps;
  ASSERT_TRUE(WaitUntil(
      [&] {
        rpc::ListServersReply servers;
        grpc::ClientContext ctx;
        if (!c.stub().ListServers(&ctx, rpc::Empty(), &servers).ok() ||
            servers.servers_size() != 1) {
          return false;
        }
        caps = servers.servers(0).capabilities();
        return !caps.criu_detail().empty() &&
               caps.criu_detail() != "not checked yet";
      },
      seconds(30)))
      << caps.DebugString();
  const bool criu = caps.criu();

  // 1. The agent alone restarts. It tells the daemon it stops: its server
  // is away (cordoned, waited for --agent-away-s) until it is back.
  ASSERT_TRUE(c.StopAgent("agent-0", &error)) << error;
  auto server = [&] {
    rpc::ListServersReply servers;
    grpc::ClientContext ctx;
    EXPECT_TRUE(c.stub().ListServers(&ctx, rpc::Empty(), &servers).ok());
    return servers.servers_size() == 1 ? servers.servers(0) : rpc::ServerInfo();
  };
  {
    rpc::ServerInfo s;
    EXPECT_TRUE(WaitUntil(
        [&] {
          s = server();
          return s.away_since_us() > 0;
        },
        seconds(10)))
        << s.DebugString() << c.Logs();
    EXPECT_TRUE(s.cordoned());
    EXPECT_FALSE(s.up());
    std::string out;
    ASSERT_EQ(c.Cli({"servers"}, &out), 0) << out;
    EXPECT_NE(out.find("away ("), std::string::npos) << out;
    EXPECT_NE(out.find(" s left)"), std::string::npos) << out;
  }
  ASSERT_TRUE(c.StartAgent("agent-0", &error)) << error;
  {
    const rpc::ServerInfo s = server();
    EXPECT_EQ(s.away_since_us(), 0);
    EXPECT_FALSE(s.cordoned());
  }
  std::map<int64_t, int64_t> saved_at;
  for (int64_t id : ids) {
    const rpc::JobInfo j = c.Job(id);
    EXPECT_FALSE(IsEnded(j.state())) << Describe(c, id);
    const auto stops = c.History(id, "stop");
    ASSERT_EQ(stops.size(), 1u) << Describe(c, id);
    EXPECT_TRUE(stops[0].ok());
    EXPECT_NE(stops[0].detail().find("saved a checkpoint at mini-batch"),
              std::string::npos)
        << stops[0].detail();
    saved_at[id] = j.progress().minibatches();
  }
  {
    const auto stops = c.History(plain, "stop");
    ASSERT_EQ(stops.size(), 1u) << Describe(c, plain);
    EXPECT_NE(stops[0].detail().find(criu ? "the job was dumped by CRIU"
                                          : "without a checkpoint"),
              std::string::npos)
        << stops[0].detail();
    EXPECT_FALSE(IsEnded(c.Job(plain).state())) << Describe(c, plain);
  }
  // Each goes on: past where it was saved, from its checkpoint.
  int64_t floor = 0;
  for (const auto& [id, n] : saved_at) floor = std::max(floor, n + 30);
  ASSERT_TRUE(all_past(floor)) << Describe(jobs) << c.Logs();
  for (int64_t id : ids) {
    // The line comes once the job trained past its checkpoint.
    std::vector<rpc::HistoryEntry> restarts;
    ASSERT_TRUE(WaitUntil(
        [&] {
          restarts = c.History(id, "restart");
          return !restarts.empty();
        },
        seconds(90)))
        << Describe(c, id);
    const std::string line = restarts.back().detail();
    EXPECT_NE(line.find("from the checkpoint kept there (agent 'agent-0' is "
                        "back); first mini-batch "),
              std::string::npos)
        << Describe(c, id);
    EXPECT_NE(line.find("training paused"), std::string::npos)
        << Describe(c, id);
    std::printf("[ agent restart ] job %lld: %s\n", static_cast<long long>(id),
                line.c_str());
  }

  // 2. The daemon stops, then the agent; both start again.
  const int port = std::stoi(c.address().substr(c.address().rfind(':') + 1));
  c.scheduler()->Stop();
  c.agent("agent-0")->Stop(seconds(40));
  ASSERT_TRUE(c.StartScheduler(port, &error)) << error;
  ASSERT_TRUE(c.RestartAgent("agent-0", &error)) << error;
  std::ofstream(release) << "go\n";

  std::set<int64_t> all = ids;
  all.insert(plain);
  ASSERT_TRUE(WaitAllEnded(c, all, &jobs)) << Describe(jobs) << c.Logs();
  for (int64_t id : ids) {
    const rpc::JobInfo j = c.Job(id);
    ExpectFinishedExactlyOnce(c, j, kSteps);
    // The second stop, seen by the daemon only as the job missing from
    // the agent that came back holding its checkpoint.
    const auto stops = c.History(id, "stop");
    ASSERT_EQ(stops.size(), 2u) << Describe(c, id);
    EXPECT_NE(stops[1].detail().find("holds a checkpoint of it"),
              std::string::npos)
        << stops[1].detail();
    EXPECT_TRUE(c.History(id, "lost").empty()) << Describe(c, id);
  }
  const rpc::JobInfo p = c.Job(plain);
  EXPECT_EQ(p.state(), rpc::FINISHED) << Describe(c, plain);
  EXPECT_EQ(p.exit_code(), 0);
  // Started three times: at first, and after each stop.
  EXPECT_EQ(c.History(plain, "restart").size(), 2u) << Describe(c, plain);
}

// An agent SIGKILLed (a crash, or the kernel's OOM killer) and started
// again takes its jobs back: their processes outlive it (each under its
// gandiva-job-shim), the new agent lists them at registration, and they
// train on, running or suspended, so that each finishes having started
// once: no mini-batch is trained twice and none is lost.
TEST_F(RuntimeE2eTest, AnAgentKilledAndRestartedTakesItsJobsBack) {
  TestCluster c({.agents = 1, .gpus_per_agent = 2});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  constexpr int kSteps = 600;
  constexpr int kStepMs = 20;
  // Three jobs on two GPUs: time-sliced, so that one is suspended at most
  // moments.
  const std::set<int64_t> ids = SubmitCnn(c, "taken", 3, kSteps, kStepMs);
  ASSERT_EQ(ids.size(), 3u);
  std::map<int64_t, rpc::JobInfo> jobs;
  ASSERT_TRUE(WaitUntil(
      [&] {
        bool ok = false;
        jobs = c.Jobs(&ok);
        if (!ok) return false;
        for (int64_t id : ids) {
          if (jobs[id].progress().minibatches() < 30) return false;
        }
        return true;
      },
      seconds(180), milliseconds(200)))
      << Describe(jobs) << c.Logs();

  Process* agent = c.agent("agent-0");
  ASSERT_NE(agent, nullptr);
  agent->Signal(SIGKILL);
  ASSERT_TRUE(agent->Wait(seconds(10)));
  // The jobs' processes outlive it.
  EXPECT_GE(ProcessesRunning("train_cnn.py"), 3);
  std::this_thread::sleep_for(milliseconds(500));
  ASSERT_TRUE(c.StartAgent("agent-0", &error)) << error;
  // (The daemon may still count the server up from before: the new agent's
  // start is read from its log.)
  std::string log;
  EXPECT_TRUE(WaitUntil(
      [&] {
        log = Slurp(c.agent("agent-0")->log());
        return CountLines(log, "took back the process an earlier run") == 3 &&
               CountLines(log, "registered with") == 1;
      },
      seconds(60)))
      << log;
  EXPECT_NE(log.find("(3 jobs running)"), std::string::npos) << log;

  ASSERT_TRUE(WaitAllEnded(c, ids, &jobs)) << Describe(jobs) << c.Logs();
  int64_t redone = 0;
  for (int64_t id : ids) {
    const rpc::JobInfo j = c.Job(id);
    ExpectFinishedExactlyOnce(c, j, kSteps);
    const std::string job_log = c.JobLog(j);
    // Started once, never from a checkpoint: nothing trained twice.
    EXPECT_EQ(CountLines(job_log, ": job "), 1) << job_log;
    redone += CountLines(job_log, ": job ") - 1;
    for (const auto& h : j.history()) {
      EXPECT_NE(h.action(), "restart") << "job " << id << ": " << h.detail();
      EXPECT_NE(h.action(), "lost") << "job " << id << ": " << h.detail();
    }
  }
  std::printf(
      "agent SIGKILLed and restarted: %zu jobs taken back, %lld "
      "starts over\n",
      ids.size(), static_cast<long long>(redone));
}

// A job's process SIGKILLed (the kernel's OOM killer, say) while the job
// has retries left: the job is queued again, waits out its backoff, starts
// again and finishes; its history holds the failed run and the retry.
TEST_F(RuntimeE2eTest, AJobWhoseProcessIsKilledRunsAgainWhileItHasRetries) {
  TestCluster c({.policy = "fifo",
                 .agents = 1,
                 .gpus_per_agent = 1,
                 .scheduler_args = {"--start-retry-s", "1"}});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  constexpr int kSteps = 400;
  rpc::JobSpec spec = c.TrainSpec("retried", "cnn", kSteps, 1, 20);
  spec.set_retries(1);
  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(WaitUntil(
      [&] { return c.Job(id).progress().minibatches() >= 50; }, seconds(120)))
      << Describe(c, id) << c.Logs();
  const std::vector<int> pids =
      PidsRunning("train_cnn.py --steps " + std::to_string(kSteps) + " ");
  ASSERT_EQ(pids.size(), 1u);
  const int64_t at = c.Job(id).progress().minibatches();
  ASSERT_EQ(::kill(pids[0], SIGKILL), 0);
  ASSERT_TRUE(WaitEnded(c, id, seconds(240))) << Describe(c, id) << c.Logs();

  const rpc::JobInfo j = c.Job(id);
  EXPECT_EQ(j.state(), rpc::FINISHED) << Describe(c, id);
  EXPECT_EQ(j.progress().minibatches(), kSteps);
  EXPECT_EQ(j.run_failures(), 1);
  const auto retries = c.History(id, "retry");
  ASSERT_EQ(retries.size(), 1u) << Describe(c, id);
  EXPECT_EQ(retries[0].detail(),
            "run 1 of 2 failed: it runs again in 1 s, from the beginning");
  const auto exits = c.History(id, "exit");
  ASSERT_EQ(exits.size(), 2u) << Describe(c, id);
  EXPECT_FALSE(exits[0].ok());
  EXPECT_TRUE(exits[1].ok());
  const auto starts = c.History(id, "start");
  ASSERT_EQ(starts.size(), 2u) << Describe(c, id);
  EXPECT_GE(starts[1].time_us() - exits[0].time_us(), 900'000)
      << "it waited out its backoff";
  const std::string log = c.JobLog(j);
  EXPECT_EQ(CountLines(log, ": job "), 2) << log;
  EXPECT_EQ(CountLines(log, "done: " + std::to_string(kSteps) + " steps"), 1)
      << log;
  std::printf(
      "a job's process SIGKILLed at mini-batch %lld ran again %.1f s after "
      "its exit, from the beginning: about %lld mini-batches trained "
      "again\n",
      static_cast<long long>(at),
      static_cast<double>(starts[1].time_us() - exits[0].time_us()) / 1e6,
      static_cast<long long>(at));
}

// A job that saves a checkpoint every 50 mini-batches (checkpoint_every)
// and whose process is SIGKILLed runs again from its last one, on its
// agent: it loses at most those 50, and ends with the parameters of a run
// never killed.
TEST_F(RuntimeE2eTest, AKilledJobGoesOnFromItsPeriodicCheckpoint) {
  TestCluster c({.policy = "fifo",
                 .agents = 1,
                 .gpus_per_agent = 1,
                 .scheduler_args = {"--start-retry-s", "1"}});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  constexpr int kSteps = 400;
  constexpr int kEvery = 50;
  constexpr int kSeed = 5;
  rpc::JobSpec spec = c.TrainSpec("periodic", "cnn", kSteps, kSeed, 20);
  spec.set_command(spec.command() + " --log-steps 1");
  spec.set_retries(1);
  spec.set_checkpoint_every_minibatches(kEvery);
  auto ref = StartReferenceRun(spec, kSteps, kSeed, c.dir() / "reference.log");
  ASSERT_NE(ref, nullptr);
  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(WaitUntil(
      [&] { return c.Job(id).progress().minibatches() >= 130; }, seconds(120)))
      << Describe(c, id) << c.Logs();
  const int pid = TrainingPid(kSteps, kSeed);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(WaitEnded(c, id, seconds(240))) << Describe(c, id) << c.Logs();

  const rpc::JobInfo j = c.Job(id);
  EXPECT_EQ(j.state(), rpc::FINISHED) << Describe(c, id);
  EXPECT_EQ(j.progress().minibatches(), kSteps);
  EXPECT_EQ(j.run_failures(), 1);
  const std::string log = c.JobLog(j);
  // The last step the killed run trained, and where the next went on.
  const size_t resumed_at = log.find("resumed from ");
  ASSERT_NE(resumed_at, std::string::npos) << log;
  const int killed_at = LastStepBefore(log, resumed_at);
  ASSERT_GE(killed_at, 0) << log;
  const size_t at_step = log.find(" at step ", resumed_at);
  ASSERT_NE(at_step, std::string::npos) << log;
  const int saved_at = std::atoi(log.c_str() + at_step + 9);
  EXPECT_EQ(saved_at % kEvery, 0) << log;
  EXPECT_GT(saved_at, 0) << log;
  EXPECT_LE(saved_at, killed_at);
  EXPECT_LE(killed_at - saved_at, kEvery) << "lost more than its interval";
  const auto retries = c.History(id, "retry");
  ASSERT_EQ(retries.size(), 1u) << Describe(c, id);
  EXPECT_EQ(retries[0].detail(),
            "run 1 of 2 failed: it runs again in 1 s, from its checkpoint at "
            "mini-batch " +
                std::to_string(saved_at));
  const auto exits = c.History(id, "exit");
  ASSERT_EQ(exits.size(), 2u) << Describe(c, id);
  // -9, or 137 from the shell that ran it.
  EXPECT_NE(
      exits[0].detail().find("; its last periodic checkpoint, at mini-batch " +
                             std::to_string(saved_at) + ", is kept on agent-0"),
      std::string::npos)
      << exits[0].detail();
  EXPECT_TRUE(exits[1].ok());
  EXPECT_EQ(CountLines(log, "resumed from "), 1) << log;
  EXPECT_EQ(CountLines(log, "done: " + std::to_string(kSteps) + " steps"), 1)
      << log;
  std::string shown;
  ASSERT_EQ(c.Cli({"show", std::to_string(id)}, &shown), 0) << shown;
  EXPECT_NE(shown.find("checkpoints:  every 50 mini-batches (periodic)"),
            std::string::npos)
      << shown;
  EXPECT_NE(shown.find("retries:      1 of 1 taken"), std::string::npos)
      << shown;
  ASSERT_TRUE(ref->Wait(seconds(120)));
  const std::string want = Fingerprint(Slurp(ref->log()));
  ASSERT_EQ(want.size(), 64u) << Slurp(ref->log());
  EXPECT_EQ(Fingerprint(log), want) << log;
  std::printf(
      "a job saving every %d mini-batches, its process SIGKILLed after "
      "mini-batch %d, went on from its checkpoint at %d: %d mini-batches "
      "trained again, same parameters as a run never killed\n",
      kEvery, killed_at, saved_at, killed_at - saved_at);
}

// Runs gandiva-scheduler with `args` (a backup or a restore) to its end;
// its exit status (-1: it did not end within a minute), its output in
// *out.
int RunScheduler(TestCluster& c, const std::vector<std::string>& args,
                 std::string* out) {
  std::vector<std::string> argv = {GANDIVA_SCHEDULER_BIN};
  argv.insert(argv.end(), args.begin(), args.end());
  const fs::path log = c.dir() / "backup.log";
  auto p = Process::Start(argv, log);
  if (p == nullptr || !p->Wait(seconds(60))) return -1;
  *out = Slurp(log);
  return WIFEXITED(p->status()) ? WEXITSTATUS(p->status()) : -1;
}

// An operator backs up the store of a daemon that serves (its SQLite file,
// with `gandiva-scheduler --backup-to`), and later restores it
// (`--restore-from`, refused while the daemon runs). The daemon comes back
// with the jobs of the backup; the one submitted after it is lost, and its
// id is not given again. An etcd store is refused, with what to use
// instead.
TEST(BackupE2eTest, AStoreBackedUpWhileTheDaemonServesIsRestored) {
  TestCluster c({.agents = 0});
  std::string error;
  ASSERT_TRUE(c.StartScheduler(0, &error)) << error;
  rpc::JobSpec spec;
  spec.set_command("true");
  spec.set_gpus(1);
  std::set<int64_t> before;
  for (const char* name : {"a", "b"}) {
    spec.set_name(name);
    before.insert(c.Submit(spec, &error));
  }
  ASSERT_EQ(before, (std::set<int64_t>{1, 2})) << error;

  const fs::path db = c.dir() / "scheduler.db";
  const fs::path backup = c.dir() / "backup.db";
  auto run = [&](const std::vector<std::string>& args, std::string* out) {
    return RunScheduler(c, args, out);
  };
  std::string out;
  ASSERT_EQ(run({"--db", db.string(), "--backup-to", backup.string()}, &out), 0)
      << out;
  EXPECT_NE(out.find("backed up '" + db.string() + "' to '" + backup.string() +
                     "': 2 jobs (ids up to 2)"),
            std::string::npos)
      << out;
  EXPECT_EQ(
      run({"--etcd", "127.0.0.1:1", "--backup-to", backup.string()}, &out), 1);
  EXPECT_NE(out.find("an etcd store is backed up with etcd's own `etcdctl "
                     "snapshot save`"),
            std::string::npos)
      << out;

  spec.set_name("after");
  const int64_t after = c.Submit(spec, &error);
  ASSERT_EQ(after, 3) << error;
  ASSERT_EQ(c.Jobs().size(), 3u);

  const std::vector<std::string> restore = {"--db", db.string(),
                                            "--restore-from", backup.string()};
  EXPECT_EQ(run(restore, &out), 1);
  EXPECT_NE(out.find("is in use by another gandiva-scheduler (pid " +
                     std::to_string(c.scheduler()->pid()) + "): stop it first"),
            std::string::npos)
      << out;
  const int port = std::stoi(c.address().substr(c.address().rfind(':') + 1));
  c.scheduler()->Stop();
  ASSERT_EQ(run(restore, &out), 0) << out;
  EXPECT_NE(out.find("restored '" + db.string() + "' from '" + backup.string() +
                     "': 2 jobs (ids up to 2)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("job 3, submitted after the backup, is lost; its id "
                     "is not given again"),
            std::string::npos)
      << out;
  ASSERT_TRUE(c.StartScheduler(port, &error)) << error;
  bool ok = false;
  const std::map<int64_t, rpc::JobInfo> jobs = c.Jobs(&ok);
  ASSERT_TRUE(ok);
  std::set<int64_t> ids;
  for (const auto& [id, j] : jobs) {
    ids.insert(id);
    EXPECT_EQ(j.state(), rpc::QUEUED) << id;
  }
  EXPECT_EQ(ids, before);
  EXPECT_EQ(jobs.at(2).spec().name(), "b");
  std::string shown;
  EXPECT_EQ(c.Cli({"show", "3"}, &shown), 1);
  EXPECT_NE(shown.find("job 3 is not in this store: it was submitted after "
                       "the backup the store was restored from"),
            std::string::npos)
      << shown;
  spec.set_name("next");
  EXPECT_EQ(c.Submit(spec, &error), 4) << error;
}

// A store restored onto a new machine (the database it replaced is gone
// with the old one): the daemon learns from its agent, whose process of a
// job submitted after the backup still runs, that the job's id was given,
// and adopts the job from the spec the agent kept with the process: it
// runs on, the same process, under its own id and name, and the id is not
// lost. The job the backup holds runs on too.
TEST(BackupE2eTest, AStoreRestoredOntoANewMachineAdoptsTheJobsItsAgentRuns) {
  TestCluster c({.policy = "fifo", .agents = 1});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  auto running = [&](int64_t id) {
    return WaitUntil([&] { return c.Job(id).state() == rpc::RUNNING; },
                     seconds(30));
  };
  auto run = [&](const std::vector<std::string>& args, std::string* out) {
    return RunScheduler(c, args, out);
  };
  rpc::JobSpec spec;
  spec.set_gpus(1);
  spec.set_name("kept");
  spec.set_command("exec sleep 7117");
  ASSERT_EQ(c.Submit(spec, &error), 1) << error;
  ASSERT_TRUE(running(1)) << Describe(c, 1);
  const fs::path db = c.dir() / "scheduler.db";
  const fs::path backup = c.dir() / "backup.db";
  std::string out;
  ASSERT_EQ(run({"--db", db.string(), "--backup-to", backup.string()}, &out), 0)
      << out;
  spec.set_name("late");
  spec.set_command("exec sleep 7119");
  ASSERT_EQ(c.Submit(spec, &error), 2) << error;
  ASSERT_TRUE(running(2)) << Describe(c, 2);
  ASSERT_TRUE(WaitUntil([] { return ProcessesRunning("sleep 7119") == 1; },
                        seconds(10)));
  const std::vector<int> late_pid = PidsRunning("sleep 7119");
  const int64_t late_submitted = c.Job(2).submitted_us();

  const int port = std::stoi(c.address().substr(c.address().rfind(':') + 1));
  c.scheduler()->Stop();
  for (const char* suffix : {"", "-wal", "-shm"}) {
    fs::remove(db.string() + suffix);
  }
  ASSERT_EQ(run({"--db", db.string(), "--restore-from", backup.string()}, &out),
            0)
      << out;
  EXPECT_NE(out.find("': 1 job (ids up to 1)"), std::string::npos) << out;
  EXPECT_EQ(out.find("lost"), std::string::npos) << out;  // not known yet
  ASSERT_TRUE(c.StartScheduler(port, &error)) << error;

  ASSERT_TRUE(running(2)) << Describe(c, 2) << c.Logs();
  const rpc::JobInfo late = c.Job(2);
  EXPECT_EQ(late.spec().name(), "late");
  EXPECT_EQ(late.submitted_us(), late_submitted);
  EXPECT_EQ(PidsRunning("sleep 7119"), late_pid);  // the same process
  EXPECT_EQ(ProcessesRunning("sleep 7117"), 1);
  EXPECT_EQ(c.Job(1).state(), rpc::RUNNING) << Describe(c, 1);
  std::string shown;
  EXPECT_EQ(c.Cli({"show", "2"}, &shown), 0) << shown;
  EXPECT_NE(shown.find("its process on agent-0 was kept, running"),
            std::string::npos)
      << shown;
  std::string listed;
  EXPECT_EQ(c.Cli({"ls", "--all"}, &listed), 0) << listed;
  EXPECT_EQ(listed.find("lost"), std::string::npos) << listed;
  EXPECT_NE(listed.find("late"), std::string::npos) << listed;
  spec.set_name("next");
  EXPECT_EQ(c.Submit(spec, &error), 3) << error;
}

// An agent paused (SIGSTOP: a machine that stalls, or a network that parts,
// for a while) past --agent-timeout-s is out of reach: the daemon cordons
// its server and keeps its job there, saying so. Let go within
// --agent-grace-s, the agent registers again and the job runs on in the
// same process: started once, never placed again.
TEST(AgentOutOfReachE2eTest, AJobOfAnAgentPausedForAWhileRunsOnInItsProcess) {
  TestCluster c(
      {.policy = "fifo",
       .agents = 1,
       .scheduler_args = {"--agent-timeout-s", "2", "--agent-grace-s", "120"}});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  rpc::JobSpec spec;
  spec.set_gpus(1);
  spec.set_name("stays");
  spec.set_command("exec sleep 7121");
  const int64_t id = c.Submit(spec, &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(WaitUntil([&] { return ProcessesRunning("sleep 7121") == 1; },
                        seconds(30)))
      << Describe(c, id);
  const std::vector<int> pid = PidsRunning("sleep 7121");
  auto server = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    rpc::ListServersReply reply;
    (void)c.stub().ListServers(&ctx, rpc::Empty(), &reply);
    return reply.servers_size() == 1 ? reply.servers(0) : rpc::ServerInfo();
  };
  Process* agent = c.agent("agent-0");
  ASSERT_NE(agent, nullptr);
  agent->Signal(SIGSTOP);
  const bool silent =
      WaitUntil([&] { return server().silent_since_us() > 0; }, seconds(30));
  std::string listed;
  const int listed_rc = c.Cli({"servers"}, &listed);
  std::string jobs;
  const int jobs_rc = c.Cli({"ls"}, &jobs);
  const rpc::JobInfo during = c.Job(id);
  agent->Signal(SIGCONT);
  ASSERT_TRUE(silent) << c.Logs();
  EXPECT_EQ(listed_rc, 0) << listed;
  EXPECT_NE(listed.find("out of reach ("), std::string::npos) << listed;
  // ls marks the job as shown from what was last heard.
  EXPECT_EQ(jobs_rc, 0) << jobs;
  EXPECT_NE(jobs.find("running?"), std::string::npos) << jobs;
  EXPECT_NE(jobs.find("(?: its agent is out of reach or away"),
            std::string::npos)
      << jobs;
  EXPECT_EQ(during.state(), rpc::RUNNING);
  EXPECT_NE(during.waiting_reason().find("agent 'agent-0' is out of reach"),
            std::string::npos)
      << during.waiting_reason();

  ASSERT_TRUE(WaitUntil([&] { return server().up(); }, seconds(30)))
      << c.Logs();
  EXPECT_FALSE(server().cordoned());
  EXPECT_EQ(PidsRunning("sleep 7121"), pid);  // the same process
  const rpc::JobInfo after = c.Job(id);
  EXPECT_EQ(after.state(), rpc::RUNNING);
  EXPECT_EQ(after.waiting_reason(), "");
  EXPECT_EQ(c.History(id, "start").size(), 1u) << Describe(c, id);
  EXPECT_TRUE(c.History(id, "requeue").empty()) << Describe(c, id);
  EXPECT_TRUE(c.History(id, "kill").empty()) << Describe(c, id);
  EXPECT_EQ(c.Cli({"ls"}, &jobs), 0) << jobs;
  EXPECT_EQ(jobs.find("running?"), std::string::npos) << jobs;
  EXPECT_EQ(jobs.find("(?:"), std::string::npos) << jobs;
}

// An agent that reaches no daemon (the daemon stalls here: SIGSTOP; a
// network that parts would do the same) suspends its jobs once its
// placement lease runs out (half of --agent-timeout-s + --agent-grace-s),
// well before the daemon may place them elsewhere: no second copy could
// train beside it. When the daemon is back it resumes the job in its
// process, which finishes having started once.
TEST(AgentLeaseE2eTest, AnAgentCutOffSuspendsItsJobsAndTheDaemonResumesThem) {
  if (!HaveTorch()) GTEST_SKIP() << GANDIVA_PYTHON << " has no torch";
  constexpr int kSteps = 1500;
  TestCluster c(
      {.policy = "fifo",
       .agents = 1,
       .gpus_per_agent = 1,
       .scheduler_args = {"--agent-timeout-s", "3", "--agent-grace-s", "17"}});
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  const int64_t id =
      c.Submit(c.TrainSpec("leased", "cnn", kSteps, 1, 20), &error);
  ASSERT_GT(id, 0) << error;
  ASSERT_TRUE(WaitUntil(
      [&] { return c.Job(id).progress().minibatches() >= 30; }, seconds(120)))
      << Describe(c, id) << c.Logs();
  const std::vector<int> pids = PidsRunning("train_cnn.py");
  ASSERT_EQ(pids.size(), 1u);
  auto state = [&] {
    std::ifstream f("/proc/" + std::to_string(pids[0]) + "/stat");
    std::string stat;
    std::getline(f, stat);
    const size_t at = stat.rfind(')');
    return at == std::string::npos || at + 2 >= stat.size() ? '?'
                                                            : stat[at + 2];
  };
  const fs::path agent_log = c.agent("agent-0")->log();

  const auto t0 = std::chrono::steady_clock::now();
  c.scheduler()->Signal(SIGSTOP);
  const bool suspended = WaitUntil(
      [&] {
        return Slurp(agent_log).find(
                   "past the placement lease (10000 ms): "
                   "suspended job " +
                   std::to_string(id)) != std::string::npos;
      },
      seconds(30));
  const double suspended_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  const char while_cut_off = state();
  c.scheduler()->Signal(SIGCONT);
  ASSERT_TRUE(suspended) << TailOf(agent_log);
  EXPECT_EQ(while_cut_off, 'T');
  // The daemon, hearing the job suspended where it has it running, resumes
  // it there.
  ASSERT_TRUE(WaitUntil([&] { return state() != 'T'; }, seconds(30)))
      << TailOf(agent_log) << c.Logs();
  std::printf(
      "placement lease 10 s: the job suspended %.1f s after the daemon "
      "stopped answering, and resumed when it answered again\n",
      suspended_s);
  std::fflush(stdout);
  EXPECT_NE(Slurp(agent_log).find("daemon reached again"), std::string::npos);

  rpc::JobInfo j;
  ASSERT_TRUE(WaitUntil(
      [&] {
        j = c.Job(id);
        return IsEnded(j.state());
      },
      seconds(180)))
      << Describe(c, id) << c.Logs();
  ExpectFinishedExactlyOnce(c, j, kSteps);
  EXPECT_EQ(CountLines(c.JobLog(j), ": job "), 1) << c.JobLog(j);
  EXPECT_EQ(c.History(id, "start").size(), 1u) << Describe(c, id);
  EXPECT_TRUE(c.History(id, "requeue").empty()) << Describe(c, id);
  EXPECT_TRUE(c.History(id, "restart").empty()) << Describe(c, id);
}

}  // namespace
}  // namespace gandiva::e2e
