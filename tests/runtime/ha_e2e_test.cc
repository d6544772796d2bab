// A leader and a standby gandiva-scheduler sharing etcd, one agent that
// knows both, a training job: the leader is killed (SIGKILL), the standby
// takes over the running job without restarting it, and the CLI, given
// both addresses, finds the new leader.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

#include "runtime/scheduler/etcd_test_util.h"
#include "tests/runtime/harness.h"

namespace gandiva::e2e {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class HaE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gandiva-ha-e2e-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::string error;
    etcd_ = runtime::EtcdForTest::Start(&error);
    ASSERT_NE(etcd_, nullptr) << error;
    for (int i = 0; i < 2; ++i) {
      address_[i] = "127.0.0.1:" + std::to_string(runtime::FreeLoopbackPort());
    }
  }
  void TearDown() override {
    agent_.reset();
    for (auto& d : daemon_) d.reset();
    etcd_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }

  fs::path AddrFile(int i) const {
    return dir_ / ("scheduler-" + std::to_string(i) + ".addr");
  }
  fs::path Log(int i, int start) const {
    return dir_ / ("scheduler-" + std::to_string(i) + "-" +
                   std::to_string(start) + ".log");
  }
  void StartDaemon(int i, const std::string& lease_ttl_s = "2") {
    std::error_code ec;
    fs::remove(AddrFile(i), ec);
    ++starts_[i];
    daemon_[i] = Process::Start(
        {GANDIVA_SCHEDULER_BIN, "--listen", address_[i], "--address-file",
         AddrFile(i).string(), "--etcd", etcd_->endpoint(), "--etcd-prefix",
         "/e2e/", "--lease-ttl-s", lease_ttl_s, "--policy", "gandiva",
         "--quantum-s", "2", "--tick-ms", "200", "--profile-interval-s", "0.2"},
        Log(i, starts_[i]));
    ASSERT_NE(daemon_[i], nullptr);
  }
  bool Serving(int i) {
    std::ifstream f(AddrFile(i));
    std::string line;
    std::getline(f, line);
    return !line.empty();
  }
  std::unique_ptr<rpc::Scheduler::Stub> Stub(int i) {
    return rpc::Scheduler::NewStub(
        runtime::MakeChannel(address_[i], std::nullopt));
  }
  static rpc::JobInfo Job(rpc::Scheduler::Stub& stub, int64_t id) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    rpc::JobIdRequest req;
    req.set_job_id(id);
    rpc::JobInfo info;
    if (!stub.GetJob(&ctx, req, &info).ok()) return {};
    return info;
  }
  static int ServersUp(rpc::Scheduler::Stub& stub) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    rpc::ListServersReply reply;
    if (!stub.ListServers(&ctx, rpc::Empty(), &reply).ok()) return -1;
    int up = 0;
    for (const auto& s : reply.servers()) up += s.up() ? 1 : 0;
    return up;
  }
  // The gandiva CLI with --scheduler listing both daemons.
  int Cli(std::vector<std::string> args, std::string* out) {
    static int n = 0;
    const fs::path log = dir_ / ("cli-" + std::to_string(++n) + ".out");
    args.insert(args.begin(), GANDIVA_CLI);
    args.push_back("--scheduler");
    args.push_back(address_[0] + "," + address_[1]);
    auto p = Process::Start(args, log);
    if (p == nullptr || !p->Wait(120s)) return -1;
    *out = Slurp(log);
    return WIFEXITED(p->status()) ? WEXITSTATUS(p->status()) : -1;
  }
  std::string Logs() const {
    std::string out;
    for (int i = 0; i < 2; ++i) {
      for (int s = 1; s <= starts_[i]; ++s) {
        out += Log(i, s).filename().string() + ":\n" + TailOf(Log(i, s), 20);
      }
    }
    return out + "agent.log:\n" + TailOf(dir_ / "agent.log", 20);
  }

  fs::path dir_;
  std::unique_ptr<runtime::EtcdForTest> etcd_;
  std::string address_[2];
  int starts_[2] = {0, 0};
  std::unique_ptr<Process> daemon_[2];
  std::unique_ptr<Process> agent_;
};

TEST_F(HaE2eTest, AStandbyTakesOverRunningJobsWhenTheLeaderIsKilled) {
  if (!HaveTorch()) GTEST_SKIP() << GANDIVA_PYTHON << " has no torch";
  StartDaemon(0);
  ASSERT_TRUE(WaitUntil([&] { return Serving(0); }, 60s)) << Logs();
  StartDaemon(1);
  // It stands by, naming the leader, and does not serve.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Slurp(Log(1, 1)).find("standby: gandiva-scheduler pid " +
                                     std::to_string(daemon_[0]->pid())) !=
               std::string::npos;
      },
      30s))
      << Logs();
  EXPECT_FALSE(Serving(1));

  fs::create_directories(dir_ / "agent");
  agent_ = Process::Start(
      {GANDIVA_AGENT_BIN, "--scheduler", address_[0] + "," + address_[1],
       "--listen", "127.0.0.1:0", "--name", "agent-0", "--virtual-gpus", "2",
       "--virtual-only", "--work-dir", (dir_ / "agent").string(),
       "--checkpoint-dir", (dir_ / "agent" / "checkpoints").string(),
       "--report-interval-ms", "200"},
      dir_ / "agent.log");
  ASSERT_NE(agent_, nullptr);
  auto a = Stub(0);
  ASSERT_TRUE(WaitUntil([&] { return ServersUp(*a) == 1; }, 60s)) << Logs();

  // A job long enough to outlive the failover.
  const rpc::JobSpec spec = TrainSpecIn(dir_, "survivor", "cnn", 3000, 1, 20);
  int64_t id = 0;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    rpc::SubmitRequest req;
    *req.mutable_spec() = spec;
    rpc::SubmitReply rep;
    ASSERT_TRUE(a->Submit(&ctx, req, &rep).ok());
    id = rep.job_id();
  }
  ASSERT_TRUE(WaitUntil(
      [&] {
        const rpc::JobInfo j = Job(*a, id);
        return j.state() == rpc::RUNNING && j.progress().minibatches() >= 20;
      },
      120s))
      << Logs();
  const int64_t before = Job(*a, id).progress().minibatches();

  // The leader dies without a word.
  const auto t0 = Clock::now();
  daemon_[0]->Signal(SIGKILL);
  ASSERT_TRUE(daemon_[0]->Wait(10s));
  ASSERT_TRUE(WaitUntil([&] { return Serving(1); }, 60s)) << Logs();
  const double takeover_s =
      std::chrono::duration<double>(Clock::now() - t0).count();
  auto b = Stub(1);
  ASSERT_TRUE(WaitUntil([&] { return ServersUp(*b) == 1; }, 60s)) << Logs();
  const double agent_back_s =
      std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf(
      "failover: the standby served %.1f s after the leader's "
      "SIGKILL, with the agent back at %.1f s (lease TTL 2 s)\n",
      takeover_s, agent_back_s);
  // The job trains on in the same process: its progress goes on from
  // where it was, and it was started once.
  ASSERT_TRUE(WaitUntil(
      [&] {
        const rpc::JobInfo j = Job(*b, id);
        return j.state() == rpc::RUNNING &&
               j.progress().minibatches() > before + 20;
      },
      120s))
      << Logs();
  const rpc::JobInfo after = Job(*b, id);
  int starts = 0;
  for (const auto& h : after.history()) starts += h.action() == "start";
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(after.spec().name(), "survivor");

  // The CLI, given both addresses, reaches the new leader.
  std::string out;
  ASSERT_EQ(Cli({"ls"}, &out), 0) << out;
  EXPECT_NE(out.find("survivor"), std::string::npos) << out;
  const fs::path yaml = dir_ / "second.yaml";
  {
    std::ofstream f(yaml);
    f << "name: second\ncommand: " << GANDIVA_PYTHON << " "
      << GANDIVA_EXAMPLES_DIR << "/train_cnn.py --steps 30 --seed 2\n"
      << "gpus: 1\nworkdir: " << dir_.string()
      << "\nenv:\n  PYTHONPATH: " << GANDIVA_PYTHON_DIR
      << "\n  GANDIVA_CLIENT_LIB: " << GANDIVA_CLIENT_LIB
      << "\n  OMP_NUM_THREADS: \"1\"\n";
  }
  ASSERT_EQ(Cli({"submit", yaml.string()}, &out), 0) << out;
  EXPECT_EQ(std::stoll(out), id + 1) << out;  // ids go on from the leader's
  ASSERT_TRUE(
      WaitUntil([&] { return Job(*b, id + 1).state() == rpc::FINISHED; }, 180s))
      << Logs();

  // A clean stop resigns (the lease is revoked, not left to lapse): the
  // first daemon, started again as a standby, takes over and sees both
  // jobs.
  ASSERT_TRUE(Cli({"kill", std::to_string(id)}, &out) == 0) << out;
  StartDaemon(0);
  ASSERT_TRUE(WaitUntil(
      [&] { return Slurp(Log(0, 2)).find("standby:") != std::string::npos; },
      30s))
      << Logs();
  const auto t1 = Clock::now();
  daemon_[1]->Signal(SIGTERM);
  ASSERT_TRUE(daemon_[1]->Wait(30s)) << Logs();
  EXPECT_TRUE(WIFEXITED(daemon_[1]->status()) &&
              WEXITSTATUS(daemon_[1]->status()) == 0);
  ASSERT_TRUE(WaitUntil([&] { return Serving(0); }, 30s)) << Logs();
  std::printf("handover after a clean stop: %.1f s\n",
              std::chrono::duration<double>(Clock::now() - t1).count());
  a = Stub(0);
  EXPECT_EQ(Job(*a, id).state(), rpc::KILLED);
  EXPECT_EQ(Job(*a, id + 1).state(), rpc::FINISHED);
}

// etcd restarted four times (killed, then started again on its data after
// 0.5 to 3 s), as an upgrade or a crash of etcd would: the leader pauses
// while etcd is away and leads on when it is back (etcd keeps its lease), the
// standby stays a standby, the running job trains on in its process, and
// the CLI is answered, a submission included, soon after each restart.
TEST_F(HaE2eTest, BothDaemonsRideOutEtcdRestarts) {
  if (!HaveTorch()) GTEST_SKIP() << GANDIVA_PYTHON << " has no torch";
  StartDaemon(0, "5");  // the default TTL
  ASSERT_TRUE(WaitUntil([&] { return Serving(0); }, 60s)) << Logs();
  StartDaemon(1, "5");
  ASSERT_TRUE(WaitUntil(
      [&] { return Slurp(Log(1, 1)).find("standby: ") != std::string::npos; },
      30s))
      << Logs();
  fs::create_directories(dir_ / "agent");
  agent_ = Process::Start(
      {GANDIVA_AGENT_BIN, "--scheduler", address_[0] + "," + address_[1],
       "--listen", "127.0.0.1:0", "--name", "agent-0", "--virtual-gpus", "2",
       "--virtual-only", "--work-dir", (dir_ / "agent").string(),
       "--checkpoint-dir", (dir_ / "agent" / "checkpoints").string(),
       "--report-interval-ms", "200"},
      dir_ / "agent.log");
  ASSERT_NE(agent_, nullptr);
  auto a = Stub(0);
  ASSERT_TRUE(WaitUntil([&] { return ServersUp(*a) == 1; }, 60s)) << Logs();
  std::string out;
  const fs::path yaml = dir_ / "long.yaml";
  {
    std::ofstream f(yaml);
    f << "name: long\ncommand: " << GANDIVA_PYTHON << " "
      << GANDIVA_EXAMPLES_DIR
      << "/train_cnn.py --steps 100000 --seed 1 --min-step-ms 20\n"
      << "gpus: 1\nworkdir: " << dir_.string()
      << "\nenv:\n  PYTHONPATH: " << GANDIVA_PYTHON_DIR
      << "\n  GANDIVA_CLIENT_LIB: " << GANDIVA_CLIENT_LIB
      << "\n  OMP_NUM_THREADS: \"1\"\n";
  }
  ASSERT_EQ(Cli({"submit", yaml.string()}, &out), 0) << out;
  const int64_t id = std::stoll(out);
  ASSERT_TRUE(WaitUntil(
      [&] { return Job(*a, id).progress().minibatches() >= 20; }, 120s))
      << Logs();

  const fs::path quick = dir_ / "quick.yaml";
  { std::ofstream(quick) << "name: quick\ncommand: \"true\"\ngpus: 1\n"; }
  for (const auto outage : {500ms, 1000ms, 2000ms, 3000ms}) {
    const int64_t before = Job(*a, id).progress().minibatches();
    etcd_->Kill();
    std::this_thread::sleep_for(outage);
    const auto t0 = Clock::now();
    std::string error;
    ASSERT_TRUE(etcd_->Restart(&error)) << error;
    const double etcd_s =
        std::chrono::duration<double>(Clock::now() - t0).count();
    // A submission is logged in etcd: answered once the leader leads on.
    int status = -1;
    ASSERT_TRUE(WaitUntil(
        [&] {
          status = Cli({"submit", quick.string()}, &out);
          return status == 0;
        },
        60s, 200ms))
        << out << Logs();
    const double answered_s =
        std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf(
        "etcd down %.1f s, then started again (serving after %.1f s): a "
        "submission answered %.1f s after the start\n",
        std::chrono::duration<double>(outage).count(), etcd_s, answered_s);
    std::fflush(stdout);
    EXPECT_LT(answered_s, 10.0) << Logs();
    ASSERT_TRUE(WaitUntil(
        [&] { return Job(*a, id).progress().minibatches() > before + 10; },
        60s))
        << Logs();
    // A pause ends at the leader's next renewal, which may come after the
    // submission: its connection to etcd waits out its own backoff (1 s).
    EXPECT_TRUE(WaitUntil(
        [&] {
          const std::string log = Slurp(Log(0, 1));
          return CountLines(log, "paused: ") ==
                 CountLines(log, "the lease held: leading on");
        },
        10s))
        << Logs();
  }
  // Both alive, the leader still the first: no change of leader.
  EXPECT_TRUE(daemon_[0]->Alive()) << Logs();
  EXPECT_TRUE(daemon_[1]->Alive()) << Logs();
  EXPECT_TRUE(Serving(0));
  EXPECT_FALSE(Serving(1)) << Logs();
  // The longer outages paused it, and it led on each time.
  const std::string log = Slurp(Log(0, 1));
  EXPECT_EQ(log.find("lost the lead"), std::string::npos) << Logs();
  EXPECT_GE(CountLines(log, "paused: the etcd lease could not be renewed"), 1)
      << log;
  EXPECT_EQ(CountLines(log, "paused: "),
            CountLines(log, "the lease held: leading on"))
      << log;
  const rpc::JobInfo j = Job(*a, id);
  EXPECT_EQ(j.state(), rpc::RUNNING);
  int starts = 0;
  for (const auto& h : j.history()) starts += h.action() == "start";
  EXPECT_EQ(starts, 1);
}

// A leader whose lease lapsed (revoked here, as etcd does to the lease of a
// daemon cut off past its TTL) stops serving and stands by, alive; when the
// daemon that took over stops, it leads again and serves, in the same
// process.
TEST_F(HaE2eTest, ADaemonThatLostTheLeadStandsByAndLeadsAgain) {
  StartDaemon(0);
  ASSERT_TRUE(WaitUntil([&] { return Serving(0); }, 60s)) << Logs();
  StartDaemon(1);
  ASSERT_TRUE(WaitUntil(
      [&] { return Slurp(Log(1, 1)).find("standby: ") != std::string::npos; },
      30s))
      << Logs();
  etcdserverpb::RangeRequest r;
  r.set_key("/e2e/leader");
  auto held = etcd_->Client()->Range(r);
  ASSERT_TRUE(held.ok() && held->kvs_size() == 1);
  ASSERT_TRUE(etcd_->Client()->LeaseRevoke(held->kvs(0).lease()).ok());

  ASSERT_TRUE(WaitUntil([&] { return Serving(1); }, 30s)) << Logs();
  ASSERT_TRUE(WaitUntil(
      [&] {
        const std::string log = Slurp(Log(0, 1));
        return log.find("lost the lead") != std::string::npos &&
               CountLines(log, "campaigning to lead") == 2 &&
               log.find("standby: ", log.find("lost the lead")) !=
                   std::string::npos;
      },
      30s))
      << Logs();
  EXPECT_TRUE(daemon_[0]->Alive());

  daemon_[1]->Signal(SIGTERM);
  ASSERT_TRUE(daemon_[1]->Wait(30s)) << Logs();
  ASSERT_TRUE(WaitUntil(
      [&] { return CountLines(Slurp(Log(0, 1)), "serving on ") == 2; }, 30s))
      << Logs();
  std::string out;
  ASSERT_EQ(Cli({"ls"}, &out), 0) << out << Logs();
  EXPECT_TRUE(daemon_[0]->Alive());
}

}  // namespace
}  // namespace gandiva::e2e
