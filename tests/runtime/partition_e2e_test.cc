// A network partition, for real: the cluster (daemon, two agents, the CLI)
// runs in a network namespace of its own, all on loopback, and one agent is
// cut off by dropping its traffic with nftables rules on that loopback, then
// let back in. No packet leaves the namespace's loopback, and the host's own
// firewall is never touched: each test runs itself again under `unshare -n`
// and touches nftables only there (it checks that it is in another network
// namespace than the one it was started in first).
//
// The cut-off agent listens on 127.0.0.2 and reaches the daemon (listening on
// 0.0.0.0) at 127.0.0.2; the other agent, the CLI and the test use
// 127.0.0.1. Dropping every packet to or from 127.0.0.2 parts that agent
// from the daemon and from the other agent, and nothing else.
//
// Each test prints its figures: how long after the cut the agent suspended
// its job, how long the link was down, and how many mini-batches were done
// twice. The jobs print a wall-clock time for each mini-batch
// (train_cnn.py --log-steps 1): from those, no two copies of a job ever
// trained at the same time.
//
// The chaos test (ChaosE2eTest) runs in such a namespace too: seeded kills
// of the daemon, of agents and of jobs' processes, and cuts of one agent,
// while four jobs train; set GANDIVA_CHAOS_SEED to draw another sequence.
// Its long version (bench/chaos_bench.sh) adds a daemon pair on etcd and
// restarts of etcd.
//
// Deadlines are failure guards sized for a loaded 2-core machine.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/scheduler/etcd_test_util.h"
#include "tests/runtime/harness.h"

namespace gandiva::e2e {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

// Set in the namespace's run to the network namespace it was started from.
constexpr char kOuterNetns[] = "GANDIVA_E2E_OUTER_NETNS";
// The loopback address of the agent that is cut off.
constexpr char kCutHost[] = "127.0.0.2";
// The nftables table holding the rules of the cut.
constexpr char kTable[] = "gandiva_partition";

std::string NetnsOfThisProcess() {
  char buf[128];
  const ssize_t n = ::readlink("/proc/self/ns/net", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

std::string ExePath() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// The full path of `program` on $PATH or in the sbin directories (root's
// tools are there, and $PATH may leave them out); "" if there is none.
std::string Which(const std::string& program) {
  std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::istringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string p = dir + "/" + program;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// Runs a command (through sh); its output goes to `log`. True on exit 0.
bool Shell(const std::string& command, const fs::path& log) {
  const std::string cmd = command + " >>'" + log.string() + "' 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// True when a TCP connection to host:port opens within `timeout`.
bool Connects(const std::string& host, int port, milliseconds timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (!ok && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) == 1) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      ok = err == 0;
    }
  }
  ::close(fd);
  return ok;
}

int PortOf(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

// Drops every packet to or from `host` in this network namespace (an
// nftables table of its own on the output hook, which every loopback packet
// passes), until Restore. Restores in its destructor.
class Partition {
 public:
  Partition(fs::path dir, std::string host)
      : dir_(std::move(dir)), host_(std::move(host)) {}
  ~Partition() {
    if (cut_) Restore();
  }

  bool Cut() {
    const fs::path rules = dir_ / "partition.nft";
    std::ofstream(rules) << "table inet " << kTable << " {\n"
                         << "  chain out {\n"
                         << "    type filter hook output priority 0;\n"
                         << "    ip daddr " << host_ << " counter drop\n"
                         << "    ip saddr " << host_ << " counter drop\n"
                         << "  }\n"
                         << "}\n";
    cut_ = Shell(Which("nft") + " -f '" + rules.string() + "'", log());
    return cut_;
  }
  // The packets dropped so far (read before Restore).
  long Dropped() {
    const fs::path out = dir_ / "partition.counters";
    std::error_code ec;
    fs::remove(out, ec);
    if (!Shell(Which("nft") + " list table inet " + kTable, out)) return -1;
    std::istringstream in(Slurp(out));
    std::string word;
    long total = 0;
    while (in >> word) {
      if (word == "packets") {
        long n = 0;
        in >> n;
        total += n;
      }
    }
    return total;
  }
  bool Restore() {
    cut_ = !Shell(Which("nft") + " delete table inet " + kTable, log());
    return !cut_;
  }
  fs::path log() const { return dir_ / "nft.log"; }

 private:
  fs::path dir_;
  std::string host_;
  bool cut_ = false;
};

// A process's state letter from /proc ('T': stopped); '?' if it is gone.
char ProcState(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  const size_t at = stat.rfind(')');
  return at == std::string::npos || at + 2 >= stat.size() ? '?' : stat[at + 2];
}

// "step N at T" lines of train_cnn.py --log-steps: (N, T), in log order.
struct Step {
  int step;
  double at;  // wall-clock seconds since the epoch
};
std::vector<Step> Steps(const std::string& log) {
  std::vector<Step> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    int step = 0;
    double at = 0;
    if (std::sscanf(line.c_str(), "step %d at %lf", &step, &at) == 2) {
      out.push_back({step, at});
    }
  }
  return out;
}

double WallNow() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// One run of a job, from its log: the mini-batches its process trained
// (train_cnn.py --log-steps 1), in order.
struct JobRun {
  std::vector<Step> steps;
};
// A job's log cut into its runs: each begins at the example's ": job "
// line (a "resumed from" line comes just before it).
std::vector<JobRun> RunsOf(const std::string& log) {
  std::vector<JobRun> runs;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(": job ") != std::string::npos) runs.emplace_back();
    int step = 0;
    double at = 0;
    if (std::sscanf(line.c_str(), "step %d at %lf", &step, &at) == 2) {
      if (runs.empty()) runs.emplace_back();
      runs.back().steps.push_back({step, at});
    }
  }
  std::erase_if(runs, [](const JobRun& r) { return r.steps.empty(); });
  return runs;
}

// As in runtime_e2e_test.cc: finished (exit 0) with exactly `steps`
// mini-batches, its log says so once, and it started from scratch once.
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
  const int starts = CountLines(log, ": job ");
  const int resumed = CountLines(log, "resumed from ");
  EXPECT_EQ(starts - resumed, 1) << "started from scratch more than once:\n"
                                 << log;
}

class PartitionE2eTest : public ::testing::Test {
 protected:
  // Outside the namespace: runs this test again in a network namespace of
  // its own (its output passed on here) and takes its result, or skips.
  // Inside: checks that it is another namespace than the one it was started
  // in, and brings its loopback up.
  void SetUp() override {
    const char* outer = std::getenv(kOuterNetns);
    if (outer != nullptr) {
      const std::string here = NetnsOfThisProcess();
      ASSERT_FALSE(here.empty());
      ASSERT_NE(here, outer) << "not in a network namespace of its own: the "
                                "firewall rules would be the host's";
      ASSERT_EQ(std::system((Which("ip") + " link set lo up").c_str()), 0);
      in_namespace_ = true;
      return;
    }
    if (::geteuid() != 0) {
      GTEST_SKIP() << "needs root: it runs in a network namespace of its own "
                      "(unshare -n) with nftables rules there";
    }
    for (const char* tool : {"unshare", "nft", "ip"}) {
      if (Which(tool).empty()) {
        GTEST_SKIP() << "needs " << tool
                     << " (packages util-linux, nftables, iproute2)";
      }
    }
    if (!HaveTorch()) GTEST_SKIP() << GANDIVA_PYTHON << " has no torch";
    {
      // Root in a container may still be refused a namespace, or nftables
      // (no nf_tables in the kernel): tried in a namespace thrown away.
      const fs::path probe =
          fs::temp_directory_path() /
          ("gandiva_partition_probe_" + std::to_string(::getpid()));
      const bool can =
          Shell(Which("unshare") + " -n -- " + Which("sh") + " -c '" +
                    Which("ip") + " link set lo up && " + Which("nft") +
                    " add table inet " + kTable + "'",
                probe);
      const std::string why = Slurp(probe);
      std::error_code ec;
      fs::remove(probe, ec);
      if (!can) {
        GTEST_SKIP() << "cannot make a network namespace with nftables "
                        "rules here: "
                     << why;
      }
    }
    const std::string netns = NetnsOfThisProcess();
    const std::string exe = ExePath();
    ASSERT_FALSE(netns.empty());
    ASSERT_FALSE(exe.empty());
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string filter = std::string("--gtest_filter=") +
                               info->test_suite_name() + "." + info->name();
    const std::string unshare = Which("unshare");
    int out[2];
    ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // and its cluster with it
      if (::getppid() != parent) ::_exit(127);
      ::dup2(out[1], 1);
      ::dup2(out[1], 2);
      ::setenv(kOuterNetns, netns.c_str(), 1);
      ::execl(unshare.c_str(), "unshare", "-n", "--", exe.c_str(),
              filter.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    std::string text;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
      std::fwrite(buf, 1, static_cast<size_t>(n), stdout);
      std::fflush(stdout);
    }
    ::close(out[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ran_there_ = true;
    if (text.find("[  SKIPPED ]") != std::string::npos &&
        text.find("[  FAILED  ]") == std::string::npos) {
      GTEST_SKIP() << "skipped in its network namespace (above)";
    }
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "failed in its network namespace (above; status " << status << ")";
    ASSERT_NE(text.find("[  PASSED  ] 1 test"), std::string::npos)
        << "the run in its network namespace ran no test";
  }

  // True where the test body is to run: in the namespace.
  bool Here() const { return in_namespace_ && !ran_there_; }

  // A two-agent cluster of one virtual GPU each, agent-0 cut-able on
  // 127.0.0.2, with these daemon timeouts.
  static ClusterOptions Options(int timeout_s, int grace_s) {
    return {.policy = "fifo",
            .agents = 2,
            .gpus_per_agent = 1,
            .scheduler_args = {"--agent-timeout-s", std::to_string(timeout_s),
                               "--agent-grace-s", std::to_string(grace_s)},
            .scheduler_host = "0.0.0.0",
            .agent_hosts = {{"agent-0", kCutHost}}};
  }

  // Submits a CNN job that prints the time of each mini-batch, placed on
  // agent-0 (agent-1 is cordoned until it runs there with some progress);
  // starts a reference run of it outside gandiva, writing `reference`.
  int64_t SubmitOnAgent0(TestCluster& c, const std::string& name, int steps,
                         int seed, std::unique_ptr<Process>* reference) {
    std::string out;
    EXPECT_EQ(c.Cli({"drain", "agent-1", "--cordon-only"}, &out), 0) << out;
    rpc::JobSpec spec = c.TrainSpec(name, "cnn", steps, seed, 20);
    spec.set_command(spec.command() + " --log-steps 1");
    *reference = StartReferenceRun(spec, steps, seed,
                                   c.dir() / (name + ".reference.log"));
    EXPECT_NE(*reference, nullptr);
    std::string error;
    const int64_t id = c.Submit(spec, &error);
    EXPECT_GT(id, 0) << error;
    if (id <= 0) return 0;
    const bool running = WaitUntil(
        [&] {
          const rpc::JobInfo j = c.Job(id);
          return j.server() == "agent-0" && j.progress().uses_library() &&
                 j.progress().minibatches() >= 30;
        },
        seconds(120));
    EXPECT_TRUE(running) << Describe(c, id) << c.Logs();
    EXPECT_EQ(c.Cli({"drain", "agent-1", "--undo"}, &out), 0) << out;
    return running ? id : 0;
  }

  // Checks, by experiment, that the cut parts 127.0.0.2 from the daemon and
  // nothing else: a connection to the daemon's port opens at 127.0.0.1 and
  // not at 127.0.0.2.
  static void ExpectOnlyTheCutHostIsOff(TestCluster& c) {
    const int port = PortOf(c.address());
    EXPECT_TRUE(Connects("127.0.0.1", port, milliseconds(2000)));
    EXPECT_FALSE(Connects(kCutHost, port, milliseconds(1000)));
  }

  static std::string AgentLog(TestCluster& c, const std::string& name) {
    Process* p = c.agent(name);
    return p != nullptr ? Slurp(p->log()) : "";
  }

  bool in_namespace_ = false;
  bool ran_there_ = false;
};

// (a) A cut shorter than the daemon's --agent-timeout-s + --agent-grace-s.
// The agent cut off suspends its job when its placement lease (half that
// time) runs out; the daemon keeps the job placed there meanwhile and places
// no second copy; when the link is back the daemon resumes the job in the
// same process, which finishes having started once, with the parameters of
// a run that was never cut off. The other agent's job trains on all through
// the cut and the CLI keeps working: only the one agent was cut off.
TEST_F(PartitionE2eTest, ACutShorterThanTheGraceSuspendsAndResumesInPlace) {
  if (!Here()) return;
  constexpr int kSteps = 1500;
  constexpr int kControlSteps = 2400;
  constexpr int kTimeoutS = 3;
  constexpr int kGraceS = 27;
  constexpr int kLeaseMs = (kTimeoutS + kGraceS) * 500;
  TestCluster c(Options(kTimeoutS, kGraceS));
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  std::unique_ptr<Process> reference;
  const int64_t id = SubmitOnAgent0(c, "cut-off", kSteps, 3, &reference);
  ASSERT_GT(id, 0);
  const int64_t control =
      c.Submit(c.TrainSpec("control", "cnn", kControlSteps, 4, 20), &error);
  ASSERT_GT(control, 0) << error;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const rpc::JobInfo j = c.Job(control);
        return j.server() == "agent-1" && j.progress().minibatches() >= 10;
      },
      seconds(120)))
      << Describe(c, control) << c.Logs();
  // The job's process (not the reference run's: no --min-step-ms there).
  const std::string needle =
      "--steps " + std::to_string(kSteps) + " --seed 3 --min-step-ms";
  const std::vector<int> pids = PidsRunning(needle);
  ASSERT_EQ(pids.size(), 1u);
  const std::string lease_line = "past the placement lease (" +
                                 std::to_string(kLeaseMs) +
                                 " ms): suspended job " + std::to_string(id);

  Partition cut(c.dir(), kCutHost);
  const auto t0 = SteadyClock::now();
  const double cut_wall = WallNow();
  const int64_t control_at_cut = c.Job(control).progress().minibatches();
  ASSERT_TRUE(cut.Cut()) << Slurp(cut.log());
  ExpectOnlyTheCutHostIsOff(c);
  const bool suspended = WaitUntil(
      [&] {
        return AgentLog(c, "agent-0").find(lease_line) != std::string::npos;
      },
      milliseconds(kLeaseMs + 30000));
  const double suspended_s = SecondsSince(t0);
  // Out of reach, not down; the job kept there, not placed again.
  std::string servers;
  const int servers_rc = c.Cli({"servers"}, &servers);
  const bool stopped =
      WaitUntil([&] { return ProcState(pids[0]) == 'T'; }, seconds(10));
  std::this_thread::sleep_for(seconds(2));
  const rpc::JobInfo during = c.Job(id);
  const size_t copies_during = PidsRunning(needle).size();
  const int64_t control_at_restore = c.Job(control).progress().minibatches();
  const long dropped = cut.Dropped();
  const double restore_wall = WallNow();
  ASSERT_TRUE(cut.Restore()) << Slurp(cut.log());
  const auto t1 = SteadyClock::now();
  const double down_s = std::chrono::duration<double>(t1 - t0).count();
  ASSERT_TRUE(suspended) << TailOf(c.agent("agent-0")->log()) << c.Logs();
  EXPECT_TRUE(stopped) << ProcState(pids[0]);
  EXPECT_EQ(servers_rc, 0) << servers;
  EXPECT_NE(servers.find("out of reach ("), std::string::npos) << servers;
  EXPECT_EQ(during.server(), "agent-0") << Describe(c, id);
  EXPECT_EQ(during.state(), rpc::RUNNING) << Describe(c, id);
  EXPECT_EQ(copies_during, 1u) << "a second copy started during the cut";
  EXPECT_GT(control_at_restore, control_at_cut)
      << "the other agent's job did not train on while agent-0 was cut off";
  EXPECT_GT(dropped, 0);

  // Resumed in its process when the daemon hears from the agent again.
  const bool resumed =
      WaitUntil([&] { return ProcState(pids[0]) != 'T'; }, seconds(60));
  const double resumed_s = SecondsSince(t1);
  ASSERT_TRUE(resumed) << ProcState(pids[0])
                       << TailOf(c.agent("agent-0")->log()) << c.Logs();
  EXPECT_NE(AgentLog(c, "agent-0").find("daemon reached again"),
            std::string::npos);

  rpc::JobInfo j, k;
  ASSERT_TRUE(WaitUntil(
      [&] {
        j = c.Job(id);
        k = c.Job(control);
        return IsEnded(j.state()) && IsEnded(k.state());
      },
      seconds(240)))
      << Describe(c, id) << Describe(c, control) << c.Logs();
  ExpectFinishedExactlyOnce(c, j, kSteps);
  ExpectFinishedExactlyOnce(c, k, kControlSteps);
  EXPECT_EQ(c.History(id, "start").size(), 1u) << Describe(c, id);
  EXPECT_TRUE(c.History(id, "requeue").empty()) << Describe(c, id);
  EXPECT_TRUE(c.History(id, "restart").empty()) << Describe(c, id);
  EXPECT_TRUE(c.History(control, "requeue").empty()) << Describe(c, control);
  EXPECT_EQ(PidsRunning(needle).size(), 0u);

  // From the job's own log: every mini-batch trained once, in order, none
  // while the link was down after the suspension.
  const std::string log = c.JobLog(j);
  const std::vector<Step> steps = Steps(log);
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps)) << log;
  double last_before = 0, first_after = 0;
  int redone = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].step != static_cast<int>(i) + 1) ++redone;
    if (steps[i].at < restore_wall) last_before = steps[i].at;
    if (steps[i].at >= restore_wall && first_after == 0) {
      first_after = steps[i].at;
    }
  }
  EXPECT_EQ(redone, 0) << log;
  EXPECT_LT(last_before, cut_wall + suspended_s) << "trained after the agent "
                                                    "said it suspended the job";
  EXPECT_GT(first_after, restore_wall);
  ASSERT_NE(reference, nullptr);
  ASSERT_TRUE(reference->Wait(seconds(120)));
  const std::string want = Fingerprint(Slurp(reference->log()));
  EXPECT_FALSE(want.empty()) << Slurp(reference->log());
  EXPECT_EQ(Fingerprint(log), want) << log;

  std::printf(
      "partition (a), placement lease %d ms, daemon timeout %d s + grace "
      "%d s:\n"
      "  agent-0 cut off; it suspended its job %.1f s after the cut (the "
      "job's last mini-batch before: %.1f s after the cut)\n"
      "  link down %.1f s (%ld packets dropped); the job resumed %.1f s "
      "after the link was back, in the same process (first mini-batch %.1f "
      "s after)\n"
      "  training paused %.1f s; mini-batches redone: %d; agent-1's job "
      "trained %lld mini-batches during the cut\n",
      kLeaseMs, kTimeoutS, kGraceS, suspended_s, last_before - cut_wall, down_s,
      dropped, resumed_s, first_after - restore_wall, first_after - last_before,
      redone, static_cast<long long>(control_at_restore - control_at_cut));
  std::printf("%s", Describe(c, id).c_str());
  std::fflush(stdout);
}

// (b) A cut longer than --agent-timeout-s + --agent-grace-s, with the other
// agent free. The agent cut off suspends its job at its placement lease;
// the daemon, not hearing from it past timeout + grace, declares the server
// down and places the job on the other agent, from the beginning (its
// checkpoint would be on the agent cut off; it has none). The first copy
// stood still from its suspension on: from the two copies' own logs, the
// second one's first mini-batch came after the first one's last. When the
// link is back the agent lists the first copy, further on than the second:
// it saves a checkpoint, the second copy is stopped, and the job goes on
// from the first copy's last mini-batch on agent-1 (nothing of its progress
// lost, nothing trained twice), and finishes once, with exactly the
// parameters of a run never cut off.
TEST_F(PartitionE2eTest, ACutLongerThanTheGraceGoesOnFromTheCopyFurtherOn) {
  if (!Here()) return;
  constexpr int kSteps = 2000;
  constexpr int kBeforeCut = 500;  // the first copy's, before the cut
  constexpr int kTimeoutS = 2;
  constexpr int kGraceS = 10;
  constexpr int kLeaseMs = (kTimeoutS + kGraceS) * 500;
  TestCluster c(Options(kTimeoutS, kGraceS));
  std::string error;
  ASSERT_TRUE(c.Start(&error)) << error;
  std::unique_ptr<Process> reference;
  const int64_t id = SubmitOnAgent0(c, "moved", kSteps, 5, &reference);
  ASSERT_GT(id, 0);
  // The job's processes (not the reference run's: no --min-step-ms there).
  const std::string needle =
      "--steps " + std::to_string(kSteps) + " --seed 5 --min-step-ms";
  const std::vector<int> first_copy = PidsRunning(needle);
  ASSERT_EQ(first_copy.size(), 1u);
  const fs::path first_log =
      c.dir() / "agent-0" / "jobs" / std::to_string(id) / "log";
  ASSERT_TRUE(WaitUntil(
      [&] { return c.Job(id).progress().minibatches() >= kBeforeCut; },
      seconds(120)))
      << Describe(c, id);
  const std::string lease_line = "past the placement lease (" +
                                 std::to_string(kLeaseMs) +
                                 " ms): suspended job " + std::to_string(id);

  Partition cut(c.dir(), kCutHost);
  const auto t0 = SteadyClock::now();
  const double cut_wall = WallNow();
  ASSERT_TRUE(cut.Cut()) << Slurp(cut.log());
  ExpectOnlyTheCutHostIsOff(c);
  const bool suspended = WaitUntil(
      [&] {
        return AgentLog(c, "agent-0").find(lease_line) != std::string::npos;
      },
      milliseconds(kLeaseMs + 30000));
  const double suspended_s = SecondsSince(t0);
  EXPECT_TRUE(suspended) << TailOf(c.agent("agent-0")->log());
  // Placed again on agent-1 once the daemon declares agent-0 down; the new
  // copy trains a while (less than the first did) before the link is back.
  const bool placed = WaitUntil(
      [&] {
        const rpc::JobInfo j = c.Job(id);
        return j.server() == "agent-1" && j.state() == rpc::RUNNING;
      },
      seconds(kTimeoutS + kGraceS + 60));
  const double placed_s = SecondsSince(t0);
  const fs::path second_log =
      c.dir() / "agent-1" / "jobs" / std::to_string(id) / "log";
  const bool trains =
      placed && WaitUntil([&] { return Steps(Slurp(second_log)).size() >= 20; },
                          seconds(120));
  const char first_state = ProcState(first_copy[0]);
  const std::vector<Step> old_steps = Steps(Slurp(first_log));
  // The second copy's process, and its mini-batches so far (its log goes
  // when the job goes on from the first copy: a job's log follows its
  // checkpoint).
  std::vector<int> second_copy = PidsRunning(needle);
  std::erase(second_copy, first_copy[0]);
  const std::vector<Step> second_steps = Steps(Slurp(second_log));
  const long dropped = cut.Dropped();
  ASSERT_TRUE(cut.Restore()) << Slurp(cut.log());
  const auto t1 = SteadyClock::now();
  const double down_s = std::chrono::duration<double>(t1 - t0).count();
  ASSERT_TRUE(placed) << Describe(c, id) << c.Logs();
  ASSERT_TRUE(trains) << Describe(c, id) << c.Logs();
  EXPECT_EQ(first_state, 'T') << "the first copy is not stopped";
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(c.History(id, "requeue").size(), 1u) << Describe(c, id);
  ASSERT_FALSE(old_steps.empty());
  const int old_last_step = old_steps.back().step;
  EXPECT_GE(old_last_step, kBeforeCut);

  ASSERT_EQ(second_copy.size(), 1u);
  ASSERT_FALSE(second_steps.empty());

  // The agent back: the first copy saves and leaves, the second copy is
  // stopped, and the job goes on from the first's checkpoint on agent-1.
  // When the second copy ended, to 10 ms.
  double second_gone = 0;
  while (SecondsSince(t1) < 120) {
    if (kill(second_copy[0], 0) != 0 || ProcState(second_copy[0]) == 'Z') {
      second_gone = WallNow();
      break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_GT(second_gone, 0) << "the second copy was not stopped";
  const bool restarted = WaitUntil(
      [&] { return !c.History(id, "restart").empty(); }, seconds(120));
  const double restarted_s = SecondsSince(t1);
  EXPECT_TRUE(restarted) << Describe(c, id) << c.Logs();
  EXPECT_TRUE(WaitUntil(
      [&] {
        const std::vector<int> now = PidsRunning(needle);
        return std::find(now.begin(), now.end(), first_copy[0]) == now.end();
      },
      seconds(60)))
      << TailOf(c.agent("agent-0")->log()) << c.Logs();

  rpc::JobInfo j;
  ASSERT_TRUE(WaitUntil(
      [&] {
        j = c.Job(id);
        return IsEnded(j.state());
      },
      seconds(240)))
      << Describe(c, id) << c.Logs();
  ExpectFinishedExactlyOnce(c, j, kSteps);
  EXPECT_EQ(j.server(), "agent-1");
  EXPECT_EQ(c.History(id, "requeue").size(), 1u) << Describe(c, id);
  EXPECT_EQ(c.History(id, "start").size(), 2u) << Describe(c, id);
  EXPECT_EQ(c.History(id, "restart").size(), 1u) << Describe(c, id);
  const std::vector<rpc::HistoryEntry> reconciled = c.History(id, "reconcile");
  ASSERT_EQ(reconciled.size(), 1u) << Describe(c, id);
  EXPECT_NE(reconciled[0].detail().find("saved a checkpoint at mini-batch " +
                                        std::to_string(old_last_step) +
                                        ", further on than its run"),
            std::string::npos)
      << reconciled[0].detail();
  EXPECT_EQ(c.History(id, "kill").size(), 0u) << Describe(c, id);
  EXPECT_EQ(c.History(id, "exit").size(), 1u) << Describe(c, id);
  EXPECT_EQ(PidsRunning(needle).size(), 0u);

  // The copies' own logs. The first copy trained nothing after its
  // suspension, not even to save; the second copy (from the beginning)
  // trained only after the first stood still, and ended before the run from
  // the first copy's checkpoint began, at the mini-batch after the first
  // copy's last. The job's log is the first copy's, then that run's.
  const std::vector<Step> old_now = Steps(Slurp(first_log));
  ASSERT_FALSE(old_now.empty());
  EXPECT_EQ(old_now.back().step, old_last_step);
  const double old_last = old_now.back().at;
  const std::string job_text = c.JobLog(j);
  const std::vector<JobRun> runs = RunsOf(job_text);
  ASSERT_EQ(runs.size(), 2u) << job_text;
  EXPECT_EQ(runs[0].steps.back().step, old_last_step) << job_text;
  const std::vector<Step>& resumed = runs[1].steps;
  EXPECT_EQ(second_steps.front().step, 1);
  EXPECT_LT(old_last, second_steps.front().at)
      << "two copies trained at once: the first copy's last mini-batch came "
      << old_last - second_steps.front().at
      << " s after the second copy's first";
  EXPECT_LT(old_last, cut_wall + suspended_s)
      << "the first copy trained after its agent said it suspended it";
  EXPECT_LT(second_gone, resumed.front().at)
      << "the second copy ran after the run from the checkpoint began";
  EXPECT_EQ(resumed.front().step, old_last_step + 1) << job_text;
  EXPECT_EQ(resumed.back().step, kSteps);
  ASSERT_NE(reference, nullptr);
  ASSERT_TRUE(reference->Wait(seconds(120)));
  const std::string want = Fingerprint(Slurp(reference->log()));
  EXPECT_FALSE(want.empty()) << Slurp(reference->log());
  EXPECT_EQ(Fingerprint(job_text), want) << job_text;

  std::printf(
      "partition (b), placement lease %d ms, daemon timeout %d s + grace "
      "%d s:\n"
      "  agent-0 cut off at mini-batch %d; it suspended its job %.1f s after "
      "the cut (the first copy's last mini-batch, %d: %.1f s after the "
      "cut)\n"
      "  the daemon placed the job on agent-1 %.1f s after the cut, from the "
      "beginning\n"
      "  link down %.1f s (%ld packets dropped); %.1f s after it was back the "
      "job went on from the first copy's checkpoint (mini-batch %d)\n"
      "  mini-batches lost: %d; the second copy's discarded (%zu by the "
      "time the link was back); it ended %.2f s before the run from the "
      "checkpoint's first mini-batch\n",
      kLeaseMs, kTimeoutS, kGraceS, kBeforeCut, suspended_s, old_last_step,
      old_last - cut_wall, placed_s, down_s, dropped, restarted_s,
      old_last_step, resumed.front().step - 1 - old_last_step,
      second_steps.size(), resumed.front().at - second_gone);
  std::printf("%s", Describe(c, id).c_str());
  std::fflush(stdout);
}

// ---------------------------------------------------------------- chaos

// The job id in a process's environment (GANDIVA_JOB_ID); 0 if none.
int64_t JobOfProcess(int pid) {
  const std::string env = Slurp("/proc/" + std::to_string(pid) + "/environ");
  const std::string key = std::string("GANDIVA_JOB_ID=");
  size_t at = 0;
  while (at < env.size()) {
    const size_t end = env.find('\0', at);
    const std::string var =
        env.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (var.starts_with(key)) return std::atoll(var.c_str() + key.size());
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return 0;
}

// A chaos run: `jobs` jobs training on two agents while, in an order and
// at moments drawn from a seed (GANDIVA_CHAOS_SEED, default 1), `faults` of
// each kind are injected: the daemon SIGKILLed and restarted, an agent
// likewise, a job's process SIGKILLed, agent-0 cut off for 1-4 s (past its
// placement lease at times, never past the daemon's timeout and grace);
// with `etcd`, the daemon is a pair on etcd (the leader is the one killed,
// and started again to stand by) and etcd is restarted after 0.5-3 s down.
// Every job saves a checkpoint every 25 mini-batches and may fail 5 times.
// Then every job has finished exactly once, with the parameters of a run
// never disturbed; from the jobs' own logs no two copies of a job ever
// trained at once, a job went back only where its process was killed, and
// by at most 25 mini-batches (after another fault, a new run goes on where
// the last one stopped: from a checkpoint elsewhere); with etcd, the CLI
// answered within 10 s of each restart of etcd and both daemons are alive at
// the end. It prints the mini-batches redone per fault kind.
struct ChaosSetup {
  int jobs = 4;
  int steps = 1500;
  int gpus_per_agent = 2;
  int faults = 2;  // of each kind
  bool etcd = false;
  int end_s = 300;  // for every job to end, after the faults
};

int EnvInt(const char* name, int otherwise) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : otherwise;
}

class ChaosE2eTest : public PartitionE2eTest {
 protected:
  void RunChaos(const ChaosSetup& setup);
};

void ChaosE2eTest::RunChaos(const ChaosSetup& setup) {
  const unsigned seed = static_cast<unsigned>(EnvInt("GANDIVA_CHAOS_SEED", 1));
  const int kJobs = setup.jobs;
  const int kSteps = setup.steps;
  constexpr int kSeed = 9;
  constexpr int kEvery = 25;
  constexpr int kTimeoutS = 2;
  constexpr int kGraceS = 6;  // placement lease: 4 s
  std::string error;
  std::unique_ptr<runtime::EtcdForTest> etcd;
  if (setup.etcd) {
    etcd = runtime::EtcdForTest::Start(&error);
    ASSERT_NE(etcd, nullptr) << error;
  }
  ClusterOptions o = Options(kTimeoutS, kGraceS);
  o.gpus_per_agent = setup.gpus_per_agent;
  o.scheduler_args.push_back("--start-retry-s");
  o.scheduler_args.push_back("1");
  if (etcd) o.etcd_endpoint = etcd->endpoint();
  TestCluster c(o);
  ASSERT_TRUE(c.Start(&error)) << error;
  rpc::JobSpec spec = c.TrainSpec("chaos", "cnn", kSteps, kSeed, 20);
  spec.set_command(spec.command() + " --log-steps 1");
  spec.set_retries(5);
  spec.set_checkpoint_every_minibatches(kEvery);
  auto reference =
      StartReferenceRun(spec, kSteps, kSeed, c.dir() / "reference.log");
  ASSERT_NE(reference, nullptr);
  std::vector<int64_t> ids;
  for (int i = 0; i < kJobs; ++i) {
    spec.set_name("chaos-" + std::to_string(i));
    const int64_t id = c.Submit(spec, &error);
    ASSERT_GT(id, 0) << error;
    ids.push_back(id);
  }
  const auto progress = [&](int64_t id) {
    return c.Job(id).progress().minibatches();
  };
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (int64_t id : ids) {
          if (progress(id) < 10) return false;
        }
        return true;
      },
      seconds(180)))
      << c.Logs();

  enum Kind { kScheduler, kAgent, kJob, kCut, kEtcd, kKinds };
  const char* kNames[] = {"daemon SIGKILL", "agent SIGKILL",
                          "job process SIGKILL", "agent-0 cut off",
                          "etcd restart"};
  // `faults` of each kind, kind by kind, then shuffled from the seed.
  std::vector<Kind> plan;
  for (Kind k : {kScheduler, kAgent, kJob, kCut, kEtcd}) {
    if (k == kEtcd && !etcd) continue;
    plan.insert(plan.end(), static_cast<size_t>(setup.faults), k);
  }
  std::mt19937 rng(seed);
  std::shuffle(plan.begin(), plan.end(), rng);
  struct Fault {
    Kind kind;
    double at;        // wall clock, s
    int64_t job = 0;  // kJob: the job whose process was killed
    std::string detail;
  };
  std::vector<Fault> faults;
  const std::string needle = "--steps " + std::to_string(kSteps) + " --seed " +
                             std::to_string(kSeed) + " --min-step-ms";
  const int port = PortOf(c.address());
  std::vector<double> etcd_answers;  // s after each etcd restart; -1 none
  // A job that waits for a GPU (all are taken): what the CLI submits after
  // an etcd restart.
  const fs::path probe = c.dir() / "probe.yaml";
  std::ofstream(probe) << "name: probe\ncommand: \"true\"\ngpus: 1\n";
  for (Kind kind : plan) {
    std::this_thread::sleep_for(
        milliseconds(std::uniform_int_distribution<int>(1000, 3000)(rng)));
    Fault f{kind, WallNow()};
    switch (kind) {
      case kScheduler:
        if (etcd) {
          // The leader (the daemon that answers), started again to stand
          // by: the other takes over.
          (void)c.Jobs();
          (void)c.Jobs();
          const int i = c.scheduler() == c.daemon(0) ? 0 : 1;
          f.detail = "the leader, daemon " + std::to_string(i);
          c.daemon(i)->Signal(SIGKILL);
          ASSERT_TRUE(c.daemon(i)->Wait(seconds(10)));
          std::this_thread::sleep_for(milliseconds(300));
          ASSERT_TRUE(c.StartDaemon(i, /*lead=*/false, &error)) << error;
          break;
        }
        c.scheduler()->Signal(SIGKILL);
        ASSERT_TRUE(c.scheduler()->Wait(seconds(10)));
        std::this_thread::sleep_for(milliseconds(300));
        ASSERT_TRUE(c.StartScheduler(port, &error)) << error << c.Logs();
        break;
      case kEtcd: {
        // Down 0.5-3 s; then how long until the CLI's submission (which
        // the leader logs in etcd) is answered.
        const int ms = std::uniform_int_distribution<int>(500, 3000)(rng);
        etcd->Kill();
        std::this_thread::sleep_for(milliseconds(ms));
        ASSERT_TRUE(etcd->Restart(&error)) << error;
        const auto back = SteadyClock::now();
        std::string out;
        const int rc = c.Cli({"submit", probe.string()}, &out);
        const double answered_s = SecondsSince(back);
        etcd_answers.push_back(rc == 0 ? answered_s : -1);
        char text[96];
        std::snprintf(text, sizeof text,
                      "%d ms down; the CLI answered %.1f s after (exit %d)", ms,
                      answered_s, rc);
        f.detail = text;
        break;
      }
      case kAgent: {
        const std::string name =
            "agent-" +
            std::to_string(std::uniform_int_distribution<int>(0, 1)(rng));
        f.detail = name;
        c.agent(name)->Signal(SIGKILL);
        ASSERT_TRUE(c.agent(name)->Wait(seconds(10)));
        std::this_thread::sleep_for(milliseconds(300));
        ASSERT_TRUE(c.StartAgent(name, &error)) << error << c.Logs();
        break;
      }
      case kJob: {
        // A process of a job far from its end (one killed as it ends
        // would finish twice: once as it printed "done", once resumed).
        std::vector<std::pair<int, int64_t>> candidates;
        for (int pid : PidsRunning(needle)) {
          const int64_t id = JobOfProcess(pid);
          if (id > 0 && ProcState(pid) != 'T' && progress(id) < kSteps - 150) {
            candidates.emplace_back(pid, id);
          }
        }
        if (candidates.empty()) {
          f.detail = "no job far from its end to kill";
          break;
        }
        const auto [pid, id] = candidates[std::uniform_int_distribution<size_t>(
            0, candidates.size() - 1)(rng)];
        f.job = id;
        f.detail = "job " + std::to_string(id) + " at mini-batch ~" +
                   std::to_string(progress(id));
        ::kill(pid, SIGKILL);
        break;
      }
      case kCut: {
        const int ms = std::uniform_int_distribution<int>(1000, 4000)(rng);
        f.detail = std::to_string(ms) + " ms";
        Partition cut(c.dir(), kCutHost);
        ASSERT_TRUE(cut.Cut()) << Slurp(cut.log());
        std::this_thread::sleep_for(milliseconds(ms));
        ASSERT_TRUE(cut.Restore()) << Slurp(cut.log());
        break;
      }
      case kKinds:
        break;
    }
    faults.push_back(f);
    std::printf("chaos: %.1f s: %s %s\n", f.at - faults.front().at,
                kNames[kind], f.detail.c_str());
    std::fflush(stdout);
  }

  std::map<int64_t, rpc::JobInfo> ended;
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (int64_t id : ids) {
          ended[id] = c.Job(id);
          if (!IsEnded(ended[id].state())) return false;
        }
        return true;
      },
      seconds(setup.end_s)))
      << c.Logs();
  ASSERT_TRUE(reference->Wait(seconds(120)));
  const std::string want = Fingerprint(Slurp(reference->log()));
  ASSERT_EQ(want.size(), 64u) << Slurp(reference->log());

  int restarts[kKinds] = {};
  int redone[kKinds] = {};
  int injected[kKinds] = {};
  for (const Fault& f : faults) {
    if (f.kind != kJob || f.job > 0) ++injected[f.kind];
  }
  EXPECT_GE(injected[kJob], 1) << "no job's process was killed";
  int job_kills = 0;
  for (const Fault& f : faults) job_kills += f.job > 0 ? 1 : 0;
  int job_kill_runs = 0;
  for (int64_t id : ids) {
    const rpc::JobInfo& j = ended[id];
    SCOPED_TRACE("job " + std::to_string(id));
    EXPECT_EQ(j.state(), rpc::FINISHED) << Describe(c, id);
    EXPECT_EQ(j.progress().minibatches(), kSteps);
    // (Read again while an agent just restarted does not serve it yet.)
    std::string log;
    WaitUntil(
        [&] {
          log = c.JobLog(j);
          return log.find("done: ") != std::string::npos;
        },
        seconds(30), milliseconds(500));
    EXPECT_EQ(CountLines(log, "done: "), 1)
        << log << Describe(c, id) << "server " << j.server() << "\n"
        << TailOf(c.agent("agent-1")->log(), 60)
        << TailOf(c.agent("agent-0")->log(), 60);
    EXPECT_EQ(Fingerprint(log), want) << log;
    const std::vector<JobRun> runs = RunsOf(log);
    ASSERT_FALSE(runs.empty()) << log;
    int kills_of_this = 0;
    for (const Fault& f : faults) kills_of_this += f.job == id ? 1 : 0;
    int kill_runs_of_this = 0;
    // One copy at a time: every run's mini-batches come after the last
    // one's, each run trains its mini-batches in order, and the last run
    // ends at the last mini-batch.
    double last_at = 0;
    for (size_t r = 0; r < runs.size(); ++r) {
      const std::vector<Step>& st = runs[r].steps;
      EXPECT_GE(st.front().at, last_at)
          << "run " << r << " trained while an earlier copy did";
      for (size_t i = 1; i < st.size(); ++i) {
        EXPECT_EQ(st[i].step, st[i - 1].step + 1) << "run " << r;
      }
      last_at = st.back().at;
      if (r == 0) {
        EXPECT_EQ(st.front().step, 1);
        continue;
      }
      const int back = runs[r - 1].steps.back().step - (st.front().step - 1);
      EXPECT_GE(back, 0) << "run " << r << " skipped mini-batches";
      EXPECT_LE(back, kEvery) << "run " << r
                              << " went back past the last "
                                 "periodic checkpoint\n"
                              << Describe(c, id);
      // The fault behind it: a kill of this job's process between the two
      // runs, else the last fault before the new run.
      Kind cause = kKinds;
      for (const Fault& f : faults) {
        if (f.at > st.front().at) break;
        if (f.job == id && f.at >= runs[r - 1].steps.back().at - 1) {
          cause = kJob;
        } else if (cause != kJob && f.kind != kJob) {
          cause = f.kind;
        }
      }
      if (cause == kJob) {
        ++kill_runs_of_this;
      } else {
        // Not its process's kill: the job went on from a checkpoint
        // elsewhere (its server declared down while a daemon took over,
        // say), where the last run stopped, nothing trained twice.
        EXPECT_EQ(back, 0) << "run " << r << " went back after a "
                           << (cause == kKinds ? "no fault" : kNames[cause])
                           << ": only a killed process goes back\n"
                           << Describe(c, id);
      }
      if (cause != kKinds) {
        ++restarts[cause];
        redone[cause] += std::max(back, 0);
      }
    }
    EXPECT_EQ(kill_runs_of_this, kills_of_this)
        << "runs after a kill of its process, against those kills\n"
        << Describe(c, id);
    job_kill_runs += kill_runs_of_this;
    EXPECT_EQ(runs.back().steps.back().step, kSteps);
  }
  EXPECT_EQ(job_kill_runs, job_kills);
  EXPECT_EQ(PidsRunning(needle).size(), 0u);
  for (double s : etcd_answers) {
    EXPECT_GE(s, 0) << "the CLI did not answer after an etcd restart";
    EXPECT_LE(s, 10) << "the CLI answered more than 10 s after etcd was back";
  }
  if (etcd) {
    EXPECT_TRUE(c.daemon(0)->Alive()) << c.Logs();
    EXPECT_TRUE(c.daemon(1)->Alive()) << c.Logs();
  }

  std::printf(
      "chaos (seed %u): %d jobs of %d mini-batches, a checkpoint "
      "every %d, %s; faults injected, runs they caused, mini-batches "
      "redone:\n",
      seed, kJobs, kSteps, kEvery,
      etcd ? "a daemon pair on etcd" : "one daemon on SQLite");
  for (int k = 0; k < kKinds; ++k) {
    if (k == kEtcd && !etcd) continue;
    std::printf("  %-20s %d injected, %d runs again, %d redone\n", kNames[k],
                injected[k], restarts[k], redone[k]);
  }
  if (etcd) {
    std::printf("  both daemons alive at the end: %s\n",
                c.daemon(0)->Alive() && c.daemon(1)->Alive() ? "yes" : "NO");
  }
  std::printf(
      "  every job finished exactly once with the parameters of a "
      "run never disturbed: %s\n",
      ::testing::Test::HasFailure() ? "NO" : "yes");
  std::fflush(stdout);
}

// Bounded (the test suite): four jobs, two faults of each kind, one daemon
// on SQLite.
TEST_F(ChaosE2eTest, SeededKillsAndCutsLoseNothingAndTrainNothingTwice) {
  if (!Here()) return;
  RunChaos(ChaosSetup{});
}

// The long version, run from bench/chaos_bench.sh (GANDIVA_CHAOS_LONG=1;
// skipped otherwise): a daemon pair on etcd, etcd restarts among the
// faults, GANDIVA_CHAOS_JOBS jobs (default 6, on two agents of 3 GPUs) of
// GANDIVA_CHAOS_STEPS mini-batches (3,000) and GANDIVA_CHAOS_FAULTS of each
// kind (default 4).
TEST_F(ChaosE2eTest, LongWithADaemonPairOnEtcd) {
  if (std::getenv("GANDIVA_CHAOS_LONG") == nullptr) {
    GTEST_SKIP() << "the long chaos run: bench/chaos_bench.sh";
  }
  if (!Here()) return;
  ChaosSetup setup;
  setup.jobs = EnvInt("GANDIVA_CHAOS_JOBS", 6);
  setup.steps = EnvInt("GANDIVA_CHAOS_STEPS", 3000);
  setup.gpus_per_agent = (setup.jobs + 1) / 2;
  setup.faults = EnvInt("GANDIVA_CHAOS_FAULTS", 4);
  setup.etcd = true;
  setup.end_s = 900;
  RunChaos(setup);
}

}  // namespace
}  // namespace gandiva::e2e
