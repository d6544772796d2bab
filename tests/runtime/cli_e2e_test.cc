// End-to-end tests of the `gandiva` cluster commands as a user runs them:
// spec refusals before any daemon is contacted, and a local cluster brought
// up, used and brought down with `gandiva up` / `ls` / `down`.
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "tests/runtime/harness.h"

namespace gandiva::e2e {
namespace {

using std::chrono::seconds;

struct CliRun {
  int status = -1;
  std::string out;  // stdout and stderr together
};

CliRun Gandiva(const std::string& args) {
  CliRun r;
  std::string cmd = GANDIVA_CLI;
  cmd.append(" ").append(args).append(" 2>&1");
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

class CliE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gandiva_cli_e2e_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::unsetenv("GANDIVA_SCHEDULER");
    ::unsetenv("GANDIVA_STATE_DIR");
  }
  void TearDown() override {
    std::error_code ec;
    if (fs::exists(dir_ / "state/cluster", ec)) {  // a test stopped midway
      Gandiva("down --purge --state-dir " + (dir_ / "state").string());
    }
    fs::remove_all(dir_, ec);
  }
  fs::path Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return dir_ / name;
  }
  fs::path dir_;
};

// Bad specs are refused with the file and the field, before the daemon is
// contacted (nothing listens at the --scheduler given).
TEST_F(CliE2eTest, SubmitRefusesBadSpecNamingTheField) {
  struct Case {
    const char* yaml;
    const char* expect;
  } cases[] = {
      {"command: x\ngpu: 2\n", "unknown field 'gpu'"},
      {"command: x\ngpus: 3\n", "field 'gpus'"},
      {"gpus: 1\n", "field 'command' is required"},
      {"command: x\nenv: [1]\n", "field 'env'"},
      {"command: x\nworkdir: /no/such/dir\n", "field 'workdir'"},
  };
  for (const Case& c : cases) {
    const fs::path spec = Write("job.yaml", c.yaml);
    const CliRun r =
        Gandiva("submit " + spec.string() + " --scheduler 127.0.0.1:1");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find(spec.string()), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("no scheduler"), std::string::npos)
        << "contacted the daemon before checking the spec: " << r.out;
  }
  // A good spec gets as far as the (absent) daemon, with a clear message.
  const fs::path good = Write("good.yaml", "command: 'true'\n");
  const CliRun r =
      Gandiva("submit " + good.string() + " --scheduler 127.0.0.1:1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("no scheduler at 127.0.0.1:1"), std::string::npos)
      << r.out;
  // Several files: one refused refuses them all.
  const fs::path bad = Write("bad.yaml", "command: x\n---\ngpus: 3\n");
  const CliRun both = Gandiva("submit " + good.string() + " " + bad.string() +
                              " --scheduler 127.0.0.1:1");
  EXPECT_EQ(both.status, 1);
  EXPECT_NE(both.out.find(bad.string() + ":3: field 'gpus'"), std::string::npos)
      << both.out;
  EXPECT_NE(both.out.find("no job was submitted"), std::string::npos)
      << both.out;
  EXPECT_EQ(both.out.find("no scheduler"), std::string::npos) << both.out;
  // Standard input ("-"): its specs in order, named "<stdin>" in errors,
  // the current directory their default workdir.
  const fs::path piped =
      Write("piped.yaml", "command: a\n---\nname: b\ncommand: b\n");
  const CliRun dry = Gandiva("submit - --dry-run < " + piped.string());
  EXPECT_EQ(dry.status, 0) << dry.out;
  EXPECT_NE(dry.out.find("name: job-1\ncommand: a\n"), std::string::npos)
      << dry.out;
  EXPECT_NE(dry.out.find("---\nname: b\ncommand: b\n"), std::string::npos)
      << dry.out;
  EXPECT_NE(dry.out.find("workdir: " + fs::current_path().string() + "\n"),
            std::string::npos)
      << dry.out;
  const CliRun piped_bad =
      Gandiva("submit - --scheduler 127.0.0.1:1 < " + bad.string());
  EXPECT_EQ(piped_bad.status, 1);
  EXPECT_NE(piped_bad.out.find("<stdin>:3: field 'gpus'"), std::string::npos)
      << piped_bad.out;
  const CliRun named = Gandiva("submit " + good.string() + " " + good.string() +
                               " --name x --dry-run");
  EXPECT_EQ(named.status, 1);
  EXPECT_NE(named.out.find("--name: names one job, and the specs given hold 2"),
            std::string::npos)
      << named.out;
}

// `gandiva up` starts a local cluster (idempotently), the job commands use
// it through the state directory alone, and `gandiva down` stops it
// (idempotently).
// A daemon that keeps one ended job: the others are archived. `ls --all`
// lists the one kept, `ls --archived` every job; `show` finds an archived
// job by id and by name, and a kill of it says it ended.
TEST(CliArchiveE2eTest, ArchivedJobsAreShownAndListedOnRequest) {
  TestCluster c(
      {.policy = "fifo",
       .agents = 0,
       .scheduler_args = {"--keep-ended-jobs", "1", "--snapshot-every", "1"}});
  std::string error;
  ASSERT_TRUE(c.StartScheduler(0, &error)) << error << c.Logs();
  std::vector<int64_t> ids;
  for (const char* name : {"alpha", "beta", "gamma"}) {
    rpc::JobSpec spec;
    spec.set_name(name);
    spec.set_command("sleep 100");
    spec.set_gpus(1);
    ids.push_back(c.Submit(spec, &error));
    ASSERT_NE(ids.back(), 0) << error;
  }
  std::string out;
  ASSERT_EQ(c.Cli({"kill", "alpha", "beta", "gamma"}, &out), 0) << out;
  // Forgotten at the compaction after the kills' pass.
  ASSERT_TRUE(WaitUntil(
      [&] {
        c.Cli({"ls", "--all", "-q"}, &out);
        return out == std::to_string(ids[2]) + "\n";
      },
      std::chrono::seconds(10)))
      << out << c.Logs();
  ASSERT_EQ(c.Cli({"ls", "--archived", "-q"}, &out), 0) << out;
  EXPECT_EQ(out, std::to_string(ids[0]) + "\n" + std::to_string(ids[1]) + "\n" +
                     std::to_string(ids[2]) + "\n");
  for (const std::string& job : {std::to_string(ids[0]), std::string("beta")}) {
    ASSERT_EQ(c.Cli({"show", job}, &out), 0) << out;
    EXPECT_NE(out.find("archived:     yes"), std::string::npos) << out;
    EXPECT_NE(out.find("killed"), std::string::npos) << out;
  }
  EXPECT_EQ(c.Cli({"kill", "alpha"}, &out), 1) << out;
  EXPECT_NE(out.find("already ended (archived)"), std::string::npos) << out;
  EXPECT_EQ(c.Cli({"show", "delta"}, &out), 1) << out;
  EXPECT_NE(out.find("no job named 'delta'"), std::string::npos) << out;
}

TEST_F(CliE2eTest, UpLsDown) {
  const std::string state = "--state-dir " + (dir_ / "state").string();
  {
    const CliRun r = Gandiva("ls " + state);
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.out.find("is the local cluster up? run `gandiva up`"),
              std::string::npos)
        << r.out;
  }
  CliRun up = Gandiva("up " + state +
                      " --agents 1 --gpus-per-agent 2 --quantum-s 2 "
                      "--share-half-life-s 900 --tick-ms 200");
  ASSERT_EQ(up.status, 0) << up.out;
  EXPECT_NE(up.out.find("local cluster up"), std::string::npos) << up.out;
  {
    // The example it suggests is there from where the user stands.
    const std::string key = " submit ";
    const size_t hint = up.out.find("submit a job:");
    ASSERT_NE(hint, std::string::npos) << up.out;
    const size_t at = up.out.find(key, hint);
    ASSERT_NE(at, std::string::npos) << up.out;
    const size_t from = at + key.size();
    const std::string example =
        up.out.substr(from, up.out.find('\n', from) - from);
    EXPECT_TRUE(fs::exists(example))
        << example << " from " << fs::current_path() << "\n"
        << up.out;
    EXPECT_EQ(fs::path(example).filename(), "cnn.yaml") << up.out;
  }
  {
    const CliRun again = Gandiva("up " + state);
    EXPECT_EQ(again.status, 0) << again.out;
    EXPECT_NE(again.out.find("already up"), std::string::npos) << again.out;
  }
  {
    const CliRun r = Gandiva("servers " + state);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("agent-0"), std::string::npos) << r.out;
    const CliRun j = Gandiva("servers --json " + state);
    EXPECT_EQ(j.status, 0) << j.out;
    EXPECT_EQ(j.out.rfind("{\"servers\":[", 0), 0u) << j.out;
    EXPECT_NE(j.out.find("\"name\":\"agent-0\""), std::string::npos) << j.out;
    EXPECT_NE(j.out.find("\"up\":true"), std::string::npos) << j.out;
  }

  // A job whose spec relies on the agents' environment (set by `up`) for
  // the Python package and the library.
  const bool torch = HaveTorch();
  const fs::path spec =
      Write("tiny.yaml",
            torch ? std::string("name: tiny\ncommand: ") + GANDIVA_PYTHON +
                        " " + GANDIVA_EXAMPLES_DIR +
                        "/train_cnn.py --steps 30 --log-every 10\n"
                        "total_minibatches: 30\nenv: {OMP_NUM_THREADS: 1}\n"
                  : "name: tiny\ncommand: echo done: 30 steps\n");
  const CliRun sub = Gandiva("submit " + spec.string() + " " + state);
  ASSERT_EQ(sub.status, 0) << sub.out;
  const std::string id = sub.out.substr(0, sub.out.find('\n'));
  ASSERT_FALSE(id.empty());
  {
    const CliRun r = Gandiva("ls --all " + state);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("tiny"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("PROGRESS"), std::string::npos) << r.out;
  }
  CliRun show;
  const bool finished = WaitUntil(
      [&] {
        show = Gandiva("show " + id + " " + state);
        return show.out.find("state:        finished") != std::string::npos ||
               show.out.find("state:        failed") != std::string::npos;
      },
      seconds(120), std::chrono::milliseconds(500));
  EXPECT_TRUE(finished) << show.out << "\nscheduler log:\n"
                        << TailOf(dir_ / "state/logs/scheduler.log")
                        << "agent log:\n"
                        << TailOf(dir_ / "state/logs/agent-0.log");
  EXPECT_NE(show.out.find("state:        finished"), std::string::npos)
      << show.out;
  EXPECT_NE(show.out.find("history:"), std::string::npos) << show.out;
  if (torch) {
    // Its loss, reported every 10 steps: the last, read at its exit.
    EXPECT_NE(show.out.find("metric:"), std::string::npos) << show.out;
    EXPECT_NE(show.out.find("(reported after mini-batch 29)"),
              std::string::npos)
        << show.out;
  }
  {
    const CliRun r = Gandiva("show --json " + id + " " + state);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("\"name\":\"tiny\""), std::string::npos) << r.out;
    if (torch) {
      EXPECT_NE(r.out.find("\"metricMinibatches\":\"29\""), std::string::npos)
          << r.out;
    }
    const CliRun l = Gandiva("ls --all --json " + state);
    EXPECT_EQ(l.status, 0) << l.out;
    EXPECT_EQ(l.out.rfind("{\"jobs\":[", 0), 0u) << l.out;
  }
  {
    const CliRun r = Gandiva("logs " + id + " " + state);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("done: 30 steps"), std::string::npos) << r.out;
  }
  {
    const CliRun r = Gandiva("show 999999 " + state);
    EXPECT_EQ(r.status, 1);
    EXPECT_NE(r.out.find("no job 999999"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("no job 999999 ("), std::string::npos)
        << "said twice: " << r.out;
  }
  for (const char* verb : {"kill", "suspend", "resume"}) {
    // Each job named in turn: both refusals are reported.
    const CliRun r = Gandiva(std::string(verb) + " 999998 999999 " + state);
    EXPECT_EQ(r.status, 1) << verb;
    EXPECT_NE(r.out.find("gandiva " + std::string(verb) + ": no job 999998"),
              std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("gandiva " + std::string(verb) + ": no job 999999"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("no job 999999 ("), std::string::npos)
        << "said twice: " << r.out;
  }
  // Several jobs at once, in the order of the files and their documents,
  // with consecutive ids.
  {
    const fs::path pair =
        Write("pair.yaml", "command: 'true'\n---\ncommand: 'true'\n");
    const fs::path third =
        Write("third.yaml", "name: third\ncommand: 'true'\n");
    const CliRun r =
        Gandiva("submit " + pair.string() + " " + third.string() + " " + state);
    ASSERT_EQ(r.status, 0) << r.out;
    const int64_t first = std::stoll(id) + 1;
    EXPECT_EQ(r.out, std::to_string(first) + "\n" + std::to_string(first + 1) +
                         "\n" + std::to_string(first + 2) + "\n");
    const CliRun l = Gandiva("ls --all --json " + state);
    for (const char* name : {"pair-1", "pair-2", "third"}) {
      EXPECT_NE(l.out.find(std::string("\"name\":\"") + name + "\""),
                std::string::npos)
          << name << ": " << l.out;
    }
    // Listed by state and name pattern, ids only (an end state lists
    // ended jobs without --all).
    CliRun q;
    EXPECT_TRUE(WaitUntil(
        [&] {
          q = Gandiva("ls -q --state finished --name 'pair-*' " + state);
          return q.out == std::to_string(first) + "\n" +
                              std::to_string(first + 1) + "\n";
        },
        seconds(60), std::chrono::milliseconds(200)))
        << q.out << Gandiva("ls --all " + state).out;
    const CliRun none = Gandiva("ls --owner nobody-here " + state);
    EXPECT_EQ(none.status, 0) << none.out;
    EXPECT_NE(none.out.find("(no jobs match)"), std::string::npos) << none.out;
    const CliRun bad = Gandiva("ls --state done " + state);
    EXPECT_EQ(bad.status, 1);
    EXPECT_NE(bad.out.find("--state: 'done' is not a job state"),
              std::string::npos)
        << bad.out;
  }

  // Drain the only server: nothing placed there, nowhere else to go;
  // `servers` shows it cordoned until undone.
  {
    const CliRun r = Gandiva("drain agent-0 " + state);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("server agent-0 is cordoned"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("no job is placed there"), std::string::npos) << r.out;
    const CliRun servers = Gandiva("servers " + state);
    EXPECT_NE(servers.out.find("cordoned"), std::string::npos) << servers.out;
    const CliRun bad = Gandiva("drain agent-9 " + state);
    EXPECT_EQ(bad.status, 1);
    EXPECT_NE(bad.out.find("no server named 'agent-9'"), std::string::npos)
        << bad.out;
    const CliRun undo = Gandiva("drain agent-0 --undo " + state);
    EXPECT_EQ(undo.status, 0) << undo.out;
    EXPECT_NE(undo.out.find("open again"), std::string::npos) << undo.out;
    EXPECT_EQ(Gandiva("servers " + state).out.find("cordoned"),
              std::string::npos);
  }

  // Jobs still running when the cluster goes down: `down` says they were
  // stopped mid-run and what becomes of each: one that uses the job-side
  // library saves a checkpoint and goes on from it at the next `up`; one
  // without is dumped by CRIU where it works here, and restored from the
  // dump at the next `up`, else it starts again from the beginning.
  const fs::path saver =
      Write("saver.yaml", std::string("name: saver\ncommand: exec ") +
                              GANDIVA_AGENT_TEST_JOB + " 1000000 20 --state\n");
  const CliRun saving = Gandiva("submit " + saver.string() + " " + state);
  ASSERT_EQ(saving.status, 0) << saving.out;
  const int64_t saver_job =
      std::stoll(saving.out.substr(saving.out.find_first_of("0123456789")));
  const fs::path sleeper =
      Write("sleeper.yaml", "name: sleeper\ncommand: sleep 600\n");
  const CliRun sleeping = Gandiva("submit " + sleeper.string() + " " + state);
  ASSERT_EQ(sleeping.status, 0) << sleeping.out;
  const std::string sleeper_id =
      sleeping.out.substr(sleeping.out.find_first_of("0123456789"));
  const int64_t sleeper_job = std::stoll(sleeper_id);
  bool running = false;
  for (int i = 0; i < 100 && !running; ++i) {
    const CliRun shown =
        Gandiva("show " + std::to_string(sleeper_job) + " " + state);
    // Started: its start is in the history (an action's line comes when
    // the agent has carried it out).
    const size_t history = shown.out.find("history:");
    running = shown.out.find("running on agent-0") != std::string::npos &&
              history != std::string::npos &&
              shown.out.find("start", history) != std::string::npos;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(running) << Gandiva("ls " + state).out;
  // The saver has passed a few mini-batches (its library is attached).
  auto trained = [&](int64_t job) {
    const CliRun shown = Gandiva("show " + std::to_string(job) + " " + state);
    const size_t at = shown.out.find("progress:");
    return at == std::string::npos ? 0 : std::atoll(shown.out.c_str() + at + 9);
  };
  bool going = false;
  for (int i = 0; i < 100 && !going; ++i) {
    going = trained(saver_job) >= 5;
    if (!going) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(going)
      << Gandiva("show " + std::to_string(saver_job) + " " + state).out;
  {
    // An operator's change of priority, by the job's name.
    const CliRun r = Gandiva("priority saver 2 " + state);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(
        r.out.find("job " + std::to_string(saver_job) + ": priority 2 (was 0)"),
        std::string::npos)
        << r.out;
    const CliRun shown =
        Gandiva("show " + std::to_string(saver_job) + " " + state);
    EXPECT_NE(shown.out.find("priority:     2 (submitted with 0)"),
              std::string::npos)
        << shown.out;
    const CliRun ended = Gandiva("priority " + id + " 1 " + state);
    EXPECT_EQ(ended.status, 1);
    EXPECT_NE(ended.out.find("already ended"), std::string::npos) << ended.out;
  }

  // Whether the agent found CRIU usable (it probes in the background).
  CliRun servers;
  ASSERT_TRUE(WaitUntil(
      [&] {
        servers = Gandiva("servers " + state);
        return servers.out.find("agent-0: CRIU yes") != std::string::npos ||
               (servers.out.find("agent-0: CRIU no (") != std::string::npos &&
                servers.out.find("agent-0: CRIU no ()") == std::string::npos);
      },
      seconds(30)))
      << servers.out;
  const bool criu = servers.out.find("agent-0: CRIU yes") != std::string::npos;

  const CliRun down = Gandiva("down " + state);
  EXPECT_EQ(down.status, 0) << down.out;
  EXPECT_NE(down.out.find("stopped"), std::string::npos) << down.out;
  if (criu) {
    EXPECT_NE(down.out.find("2 jobs stopped mid-run after saving a checkpoint "
                            "(jobs " +
                            std::to_string(saver_job) + ", " +
                            std::to_string(sleeper_job) +
                            "): at the next `gandiva up` they go on from them"),
              std::string::npos)
        << down.out;
  } else {
    EXPECT_NE(down.out.find("1 job stopped mid-run after saving a checkpoint "
                            "(job " +
                            std::to_string(saver_job) +
                            "): at the next `gandiva up` it goes on from it"),
              std::string::npos)
        << down.out;
    EXPECT_NE(down.out.find("1 job stopped mid-run without a checkpoint (job " +
                            std::to_string(sleeper_job) +
                            "): at the next `gandiva up` it is started again "
                            "from the beginning"),
              std::string::npos)
        << down.out;
  }
  // The checkpoint left the ramdisk for the state directory: it outlives
  // a reboot, and `up` puts it back.
  if (fs::is_directory("/dev/shm")) {
    EXPECT_NE(down.out.find("moved the agents' checkpoints ("),
              std::string::npos)
        << down.out;
    EXPECT_TRUE(fs::exists(dir_ / "state/checkpoints/agent-0/jobs" /
                           std::to_string(saver_job) / "held-checkpoint"))
        << down.out;
  }
  {
    const CliRun again = Gandiva("down " + state);
    EXPECT_EQ(again.status, 0) << again.out;
    EXPECT_NE(again.out.find("not running"), std::string::npos) << again.out;
  }
  {
    const CliRun r = Gandiva("ls " + state);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("run `gandiva up`"), std::string::npos) << r.out;
  }
  {
    // The half-life given at the first `up` is the database's: another
    // is refused, naming it.
    const CliRun other = Gandiva("up --share-half-life-s 1800 " + state);
    EXPECT_NE(other.status, 0) << other.out;
    EXPECT_NE(other.out.find("--share-half-life-s"), std::string::npos)
        << other.out;
    EXPECT_NE(other.out.find("900"), std::string::npos) << other.out;
  }
  // Up again: the saver goes on from its checkpoint.
  up = Gandiva("up " + state);
  ASSERT_EQ(up.status, 0) << up.out;
  bool resumed = false;
  CliRun shown;
  for (int i = 0; i < 200 && !resumed; ++i) {
    shown = Gandiva("show " + std::to_string(saver_job) + " " + state);
    resumed =
        shown.out.find("from the checkpoint kept there") != std::string::npos;
    if (!resumed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(resumed) << shown.out;
  EXPECT_FALSE(fs::exists(dir_ / "state/checkpoints")) << up.out;
  // The agent stopped while the daemon ran (`down` stops the agents
  // first): the daemon knew of the save, and of the restart.
  EXPECT_NE(shown.out.find("agent 'agent-0' stopped; the job saved a "
                           "checkpoint at mini-batch "),
            std::string::npos)
      << shown.out;
  EXPECT_NE(shown.out.find("from the checkpoint kept there (agent 'agent-0' "
                           "is back)"),
            std::string::npos)
      << shown.out;
  if (criu) {
    // The sleeper was dumped as the agent stopped and is restored.
    ASSERT_TRUE(WaitUntil(
        [&] {
          shown = Gandiva("show " + std::to_string(sleeper_job) + " " + state);
          return shown.out.find(
                     "from the checkpoint kept there (agent "
                     "'agent-0' is back)") != std::string::npos;
        },
        seconds(30)))
        << shown.out;
    EXPECT_NE(shown.out.find("agent 'agent-0' stopped; the job was dumped "
                             "by CRIU, kept there"),
              std::string::npos)
        << shown.out;
    EXPECT_NE(shown.out.find("state:        running"), std::string::npos)
        << shown.out;
  }
  ASSERT_EQ(Gandiva("down " + state).status, 0);
  const CliRun purge = Gandiva("down --purge " + state);
  EXPECT_EQ(purge.status, 0) << purge.out;
  EXPECT_FALSE(fs::exists(dir_ / "state")) << purge.out;
}

// A local cluster keeps its shape: `up` without flags starts the agents
// of the last `up` again, and refuses GPUs per agent other than those its
// servers have. `down` stops the agents while the scheduler still runs, so
// that a job spanning two servers saves its checkpoint through rank 0's
// agent; at the next `up` every part goes on from it, and the job finishes
// its samples exactly once.
TEST_F(CliE2eTest, DownSavesAJobSpanningServersAndUpGoesOnFromIt) {
  if (!HaveTorch()) GTEST_SKIP() << GANDIVA_PYTHON << " has no torch";
  constexpr int kSamples = 10000;
  const std::string state = "--state-dir " + (dir_ / "state").string();
  CliRun up = Gandiva("up " + state +
                      " --agents 2 --gpus-per-agent 1 --policy fifo "
                      "--tick-ms 200");
  ASSERT_EQ(up.status, 0) << up.out;
  EXPECT_NE(up.out.find("2 agents x 1 virtual GPU\n"), std::string::npos)
      << up.out;
  const fs::path spec = Write(
      "ddp.yaml", std::string("name: ddp\ncommand: ") + GANDIVA_PYTHON +
                      " -m gandiva.launch -- " + GANDIVA_EXAMPLES_DIR +
                      "/train_ddp.py --samples " + std::to_string(kSamples) +
                      " --min-step-ms 10 --log-every 200\ngpus: 2\n"
                      "elastic: true\nenv: {OMP_NUM_THREADS: 1}\n");
  const CliRun sub = Gandiva("submit " + spec.string() + " " + state);
  ASSERT_EQ(sub.status, 0) << sub.out;
  const std::string id = sub.out.substr(0, sub.out.find('\n'));
  auto progress = [&](const CliRun& shown) {
    const size_t at = shown.out.find("progress:");
    return at == std::string::npos ? 0 : std::atoll(shown.out.c_str() + at + 9);
  };
  CliRun shown;
  ASSERT_TRUE(WaitUntil(
      [&] {
        shown = Gandiva("show " + id + " " + state);
        return shown.out.find("running on 2 servers") != std::string::npos &&
               progress(shown) >= 50;
      },
      seconds(180), std::chrono::milliseconds(300)))
      << shown.out << TailOf(dir_ / "state/logs/scheduler.log");
  const int64_t before = progress(shown);

  const CliRun down = Gandiva("down " + state);
  EXPECT_EQ(down.status, 0) << down.out;
  EXPECT_NE(down.out.find("1 job stopped mid-run after saving a checkpoint "
                          "(job " +
                          id + ")"),
            std::string::npos)
      << down.out << TailOf(dir_ / "state/logs/scheduler.log")
      << TailOf(dir_ / "state/logs/agent-0.log")
      << TailOf(dir_ / "state/logs/agent-1.log");

  // Another number of GPUs per agent is refused before anything starts.
  {
    const CliRun r = Gandiva("up " + state + " --gpus-per-agent 2");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("--gpus-per-agent 2: the agents of the cluster in " +
                         (dir_ / "state").string() +
                         " have 1 GPU each, and a server's GPUs cannot "
                         "change"),
              std::string::npos)
        << r.out;
    EXPECT_FALSE(fs::exists(dir_ / "state/cluster")) << r.out;
  }
  up = Gandiva("up " + state);
  ASSERT_EQ(up.status, 0) << up.out;
  EXPECT_NE(up.out.find("2 agents x 1 virtual GPU\n"), std::string::npos)
      << up.out;
  ASSERT_TRUE(WaitUntil(
      [&] {
        shown = Gandiva("show " + id + " " + state);
        return shown.out.find("state:        finished") != std::string::npos ||
               shown.out.find("state:        failed") != std::string::npos;
      },
      seconds(300), std::chrono::milliseconds(500)))
      << shown.out << TailOf(dir_ / "state/logs/scheduler.log");
  EXPECT_NE(shown.out.find("state:        finished on 2 servers"),
            std::string::npos)
      << shown.out;
  const size_t history = shown.out.find("history:");
  ASSERT_NE(history, std::string::npos) << shown.out;
  EXPECT_NE(
      shown.out.find("the job, spanning servers, saved a checkpoint", history),
      std::string::npos)
      << shown.out;
  EXPECT_EQ(shown.out.find(" lost ", history), std::string::npos) << shown.out;
  const CliRun log = Gandiva("logs " + id + " " + state);
  EXPECT_EQ(CountLines(log.out,
                       "done samples=" + std::to_string(kSamples) + " steps="),
            1)
      << log.out;
  // It went on from the checkpoint: it did not start again at sample 0.
  EXPECT_EQ(CountLines(log.out, "resumed from "), 1) << log.out;
  std::printf(
      "[ down/up of a job spanning servers ] %lld mini-batches before "
      "`down`\n%s",
      static_cast<long long>(before), shown.out.substr(history).c_str());
  EXPECT_EQ(Gandiva("down --purge " + state).status, 0);
}

// A job migrated to another server saves its checkpoint there at `gandiva
// down`, as a job never moved does, and `up` goes on from it: it finishes
// having started from scratch once.
TEST_F(CliE2eTest, DownAfterAMigrationSavesTheJobAndUpGoesOnFromIt) {
  if (!HaveTorch()) GTEST_SKIP() << GANDIVA_PYTHON << " has no torch";
  constexpr int kSteps = 1500;
  const std::string state = "--state-dir " + (dir_ / "state").string();
  CliRun up = Gandiva("up " + state +
                      " --agents 2 --gpus-per-agent 1 --policy fifo "
                      "--tick-ms 200");
  ASSERT_EQ(up.status, 0) << up.out;
  const fs::path spec =
      Write("cnn.yaml", std::string("name: moved\ncommand: ") + GANDIVA_PYTHON +
                            " " + GANDIVA_EXAMPLES_DIR +
                            "/train_cnn.py --steps " + std::to_string(kSteps) +
                            " --min-step-ms 20 --log-every 100\ngpus: 1\n"
                            "env: {OMP_NUM_THREADS: 1}\n");
  const CliRun sub = Gandiva("submit " + spec.string() + " " + state);
  ASSERT_EQ(sub.status, 0) << sub.out;
  const std::string id = sub.out.substr(0, sub.out.find('\n'));
  auto progress = [&](const CliRun& shown) {
    const size_t at = shown.out.find("progress:");
    return at == std::string::npos ? 0 : std::atoll(shown.out.c_str() + at + 9);
  };
  auto server_of = [&](const CliRun& shown) {
    return shown.out.find("running on agent-0") != std::string::npos
               ? "agent-0"
               : "agent-1";
  };
  CliRun shown;
  ASSERT_TRUE(WaitUntil(
      [&] {
        shown = Gandiva("show " + id + " " + state);
        return shown.out.find("state:        running") != std::string::npos &&
               progress(shown) >= 50;
      },
      seconds(180), std::chrono::milliseconds(300)))
      << shown.out << TailOf(dir_ / "state/logs/scheduler.log");
  const std::string to =
      std::string(server_of(shown)) == "agent-0" ? "agent-1" : "agent-0";
  const CliRun moved = Gandiva("migrate " + id + " --to " + to + " " + state);
  ASSERT_EQ(moved.status, 0) << moved.out;
  // It trains on there.
  int64_t after_move = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        shown = Gandiva("show " + id + " " + state);
        after_move = progress(shown);
        return shown.out.find("running on " + to) != std::string::npos &&
               after_move >= 200;
      },
      seconds(180), std::chrono::milliseconds(300)))
      << shown.out;

  const CliRun down = Gandiva("down " + state);
  EXPECT_EQ(down.status, 0) << down.out;
  EXPECT_NE(down.out.find("1 job stopped mid-run after saving a checkpoint "
                          "(job " +
                          id + ")"),
            std::string::npos)
      << down.out << TailOf(dir_ / ("state/logs/" + to + ".log"));
  EXPECT_EQ(down.out.find("without a checkpoint"), std::string::npos)
      << down.out;

  up = Gandiva("up " + state);
  ASSERT_EQ(up.status, 0) << up.out;
  ASSERT_TRUE(WaitUntil(
      [&] {
        shown = Gandiva("show " + id + " " + state);
        return shown.out.find("state:        finished") != std::string::npos ||
               shown.out.find("state:        failed") != std::string::npos;
      },
      seconds(300), std::chrono::milliseconds(500)))
      << shown.out << TailOf(dir_ / "state/logs/scheduler.log");
  EXPECT_NE(shown.out.find("state:        finished"), std::string::npos)
      << shown.out;
  const CliRun log = Gandiva("logs " + id + " " + state);
  EXPECT_EQ(CountLines(log.out, "done: " + std::to_string(kSteps) + " steps"),
            1)
      << log.out;
  // Started from scratch once: the migration and the `up` each went on
  // from a checkpoint.
  EXPECT_EQ(
      CountLines(log.out, ": job ") - CountLines(log.out, "resumed from "), 1)
      << log.out;
  EXPECT_EQ(CountLines(log.out, "resumed from "), 2) << log.out;
  std::printf("[ down/up after a migration ] %lld mini-batches at `down`\n",
              static_cast<long long>(after_move));
  EXPECT_EQ(Gandiva("down --purge " + state).status, 0);
}

// A local cluster has users: each acts on their own jobs, an admin on any,
// and the owner is whoever's credential submitted; a user's credential
// registers no agent, and a second agent with a live one's name is refused.
TEST_F(CliE2eTest, UsersOfALocalClusterActOnlyOnTheirOwnJobs) {
  const fs::path state_dir = dir_ / "state";
  const std::string state = "--state-dir " + state_dir.string();
  const CliRun up =
      Gandiva("up " + state + " --agents 1 --gpus-per-agent 2 --tick-ms 200");
  ASSERT_EQ(up.status, 0) << up.out;
  const CliRun me = Gandiva("user whoami " + state);
  ASSERT_EQ(me.status, 0) << me.out;
  ASSERT_NE(me.out.find(" (admin)"), std::string::npos) << me.out;
  const std::string admin = me.out.substr(0, me.out.find(" (admin)"));
  for (const char* user : {"alice", "bob"}) {
    const CliRun add = Gandiva("user add " + std::string(user) + " --out " +
                               (dir_ / user).string() + ".cred " + state);
    ASSERT_EQ(add.status, 0) << add.out;
  }
  auto as = [&](const std::string& user, const std::string& args) {
    return Gandiva(args + " " + state + " --credentials " +
                   (dir_ / user).string() + ".cred");
  };
  const fs::path spec = Write("secret.yaml",
                              "name: secret\ncommand: sleep 300\nowner: "
                              "bob\nenv: {API_KEY: hunter2}\n");
  const CliRun sub = as("alice", "submit " + spec.string());
  ASSERT_EQ(sub.status, 0) << sub.out;
  const std::string id = sub.out.substr(0, sub.out.find('\n'));
  const CliRun shown = Gandiva("show " + id + " " + state);
  EXPECT_NE(shown.out.find("owner:        alice"), std::string::npos)
      << shown.out;
  EXPECT_NE(shown.out.find("API_KEY=hunter2"), std::string::npos);

  // Bob can do nothing to it, nor read its command and env.
  for (const std::string& act : {"kill " + id, "suspend " + id, "resume " + id,
                                 "priority " + id + " 9"}) {
    const CliRun r = as("bob", act);
    EXPECT_EQ(r.status, 1) << act << ": " << r.out;
    EXPECT_NE(r.out.find("bob may not"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("it is alice's"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(rule: owner)"), std::string::npos) << r.out;
  }
  const CliRun moved = as("bob", "migrate " + id + " --to agent-0");
  EXPECT_EQ(moved.status, 1) << moved.out;
  EXPECT_NE(moved.out.find("(rule: admin)"), std::string::npos) << moved.out;
  const CliRun peek = as("bob", "show " + id);
  EXPECT_EQ(peek.status, 0) << peek.out;
  EXPECT_NE(peek.out.find("withheld"), std::string::npos) << peek.out;
  EXPECT_EQ(peek.out.find("hunter2"), std::string::npos) << peek.out;
  EXPECT_EQ(peek.out.find("sleep 300"), std::string::npos) << peek.out;
  const CliRun peek_json = as("bob", "ls --json");
  EXPECT_EQ(peek_json.out.find("hunter2"), std::string::npos) << peek_json.out;
  EXPECT_EQ(
      as("bob", "user add carol --out " + (dir_ / "c.cred").string()).status,
      1);

  // The admin can; the history says who.
  ASSERT_EQ(Gandiva("suspend " + id + " " + state).status, 0);
  const CliRun after = as("alice", "show " + id);
  EXPECT_NE(after.out.find("suspended by " + admin), std::string::npos)
      << after.out;

  // A user's credential cannot register an agent; a second agent with the
  // live agent-0's name is refused, and agent-0 stays up where it was.
  const std::string scheduler = Slurp(state_dir / "scheduler.addr");
  auto agent = [&](const std::string& name, const std::string& cred) {
    return Process::Start(
        {GANDIVA_AGENT_BIN, "--scheduler",
         scheduler.substr(0, scheduler.find('\n')), "--name", name,
         "--virtual-gpus", "2", "--virtual-only", "--work-dir",
         (dir_ / ("work-" + name + cred)).string(), "--checkpoint-dir",
         (dir_ / ("ckpt-" + name + cred)).string(), "--credentials", cred},
        dir_ / (name + "-" + fs::path(cred).stem().string() + ".log"));
  };
  auto intruder = agent("intruder", (dir_ / "bob.cred").string());
  auto twin = agent("agent-0", (state_dir / "agent.cred").string());
  ASSERT_TRUE(intruder && twin);
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Slurp(intruder->log()).find("(rule: agent)") !=
                   std::string::npos &&
               Slurp(twin->log()).find("is live at") != std::string::npos;
      },
      seconds(20)))
      << TailOf(intruder->log()) << TailOf(twin->log());
  const CliRun servers = Gandiva("servers --json " + state);
  EXPECT_EQ(servers.out.find("intruder"), std::string::npos) << servers.out;
  EXPECT_NE(servers.out.find("\"up\":true"), std::string::npos) << servers.out;

  // Nor can bob (any local user) act on a job through agent-0's own port:
  // it takes job control only with the cluster's control token.
  const std::string key = "\"address\":\"";
  const size_t at = servers.out.find(key);
  ASSERT_NE(at, std::string::npos) << servers.out;
  const std::string agent_address = servers.out.substr(
      at + key.size(),
      servers.out.find('"', at + key.size()) - at - key.size());
  auto direct = rpc::Agent::NewStub(
      grpc::CreateChannel(agent_address, grpc::InsecureChannelCredentials()));
  {
    rpc::StartJobRequest start;
    start.set_job_id(999);
    start.mutable_spec()->set_command("id > /tmp/owned-by-a-local-user");
    start.mutable_spec()->set_gpus(1);
    start.add_gpus(0);
    rpc::StartJobReply reply;
    grpc::ClientContext ctx;
    const grpc::Status s = direct->StartJob(&ctx, start, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << s.error_message();
  }
  {
    rpc::JobRequest kill;
    kill.set_job_id(std::stoll(id));
    rpc::KillReply reply;
    grpc::ClientContext ctx;
    const grpc::Status s = direct->KillJob(&ctx, kill, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << s.error_message();
  }
  {
    rpc::AgentStatusReply status;
    grpc::ClientContext ctx;
    ASSERT_TRUE(direct->Status(&ctx, {}, &status).ok());
    EXPECT_EQ(status.DebugString().find("hunter2"), std::string::npos)
        << status.DebugString();
  }
  intruder->Stop();
  twin->Stop();
  const CliRun still = Gandiva("servers " + state);
  EXPECT_NE(still.out.find("agent-0"), std::string::npos) << still.out;

  // Bob cannot read her job's log; she can (the daemon's ticket).
  const CliRun bobs_read = as("bob", "logs " + id);
  EXPECT_EQ(bobs_read.status, 1) << bobs_read.out;
  EXPECT_NE(bobs_read.out.find("bob may not read the log of job " + id),
            std::string::npos)
      << bobs_read.out;
  const CliRun alices_read = as("alice", "logs " + id);
  EXPECT_EQ(alices_read.status, 0) << alices_read.out;

  // Alice ends her own job.
  EXPECT_EQ(as("alice", "kill " + id).status, 0);
  EXPECT_EQ(Gandiva("down " + state).status, 0);
}

// With an agent run as root with --run-as-owner, each job runs as its
// owner's Unix account, the owner being whoever's credential submitted it;
// an owner with no account, or root, does not run.
TEST_F(CliE2eTest, JobsRunAsTheirOwnersUnixAccounts) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (the agent switches users)";
  const passwd* nobody = ::getpwnam("nobody");
  if (nobody == nullptr) GTEST_SKIP() << "no account 'nobody'";
  const uid_t nobody_uid = nobody->pw_uid;  // getpwnam's buffer is reused
  ASSERT_EQ(::getpwnam("ghost"), nullptr) << "this test needs no account ghost";
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read |
                            fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  const fs::path state_dir = dir_ / "state";
  const std::string state = "--state-dir " + state_dir.string();
  const CliRun up =
      Gandiva("up " + state + " --agents 1 --gpus-per-agent 1 --tick-ms 200");
  ASSERT_EQ(up.status, 0) << up.out;
  for (const char* user : {"alice", "ghost"}) {
    const CliRun add = Gandiva("user add " + std::string(user) + " --out " +
                               (dir_ / user).string() + ".cred " + state);
    ASSERT_EQ(add.status, 0) << add.out;
  }
  auto as = [&](const std::string& user, const std::string& args) {
    return Gandiva(args + " " + state + " --credentials " +
                   (dir_ / user).string() + ".cred");
  };
  // Nothing new goes to the local agent (it runs jobs as itself); an agent
  // that runs them as their owners joins.
  const CliRun cordon = Gandiva("drain agent-0 --cordon-only " + state);
  ASSERT_EQ(cordon.status, 0) << cordon.out;
  const std::string scheduler = Slurp(state_dir / "scheduler.addr");
  auto owners =
      Process::Start({GANDIVA_AGENT_BIN, "--scheduler",
                      scheduler.substr(0, scheduler.find('\n')), "--name",
                      "owners", "--virtual-gpus", "1", "--virtual-only",
                      "--work-dir", (dir_ / "work-owners").string(),
                      "--checkpoint-dir", (dir_ / "ckpt-owners").string(),
                      "--credentials", (state_dir / "agent.cred").string(),
                      "--run-as-owner", "--map-user", "alice=nobody"},
                     dir_ / "owners.log");
  ASSERT_TRUE(owners);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Gandiva("servers " + state).out.find("owners") !=
               std::string::npos;
      },
      seconds(20)))
      << TailOf(owners->log());

  auto submit = [&](const std::string& user, const std::string& command) {
    const fs::path spec = Write(
        user + ".yaml", "name: " + user + "-job\ncommand: '" + command + "'\n");
    const CliRun sub = as(user, "submit " + spec.string());
    EXPECT_EQ(sub.status, 0) << sub.out;
    return sub.out.substr(0, sub.out.find('\n'));
  };
  auto shown_when = [&](const std::string& id, const std::string& text) {
    CliRun show;
    const bool seen = WaitUntil(
        [&] {
          show = Gandiva("show " + id + " " + state);
          return show.out.find(text) != std::string::npos;
        },
        seconds(60), std::chrono::milliseconds(300));
    return seen ? std::string() : show.out + TailOf(owners->log());
  };

  const std::string mine =
      submit("alice",
             "echo uid=$(id -u) user=$USER; touch "
             "\"$GANDIVA_CHECKPOINT_DIR/mine\" && echo wrote");
  EXPECT_EQ(shown_when(mine, "state:        finished"), "");
  const CliRun log = as("alice", "logs " + mine);
  EXPECT_NE(log.out.find("uid=" + std::to_string(nobody_uid) + " user=nobody"),
            std::string::npos)
      << log.out;
  EXPECT_NE(log.out.find("wrote"), std::string::npos) << log.out;

  // Ghost is a user of the cluster with no account on the agent's machine;
  // the cluster's admin runs gandiva as root, which this agent refuses.
  const std::string ghosts = submit("ghost", "true");
  EXPECT_EQ(shown_when(ghosts, "has no Unix account 'ghost'"), "");
  const fs::path root_spec =
      Write("root.yaml", "name: rooted\ncommand: true\n");
  const CliRun rooted = Gandiva("submit " + root_spec.string() + " " + state);
  ASSERT_EQ(rooted.status, 0) << rooted.out;
  EXPECT_EQ(shown_when(rooted.out.substr(0, rooted.out.find('\n')),
                       "only with --allow-root-jobs"),
            "");
  owners->Stop();
  EXPECT_EQ(Gandiva("down " + state).status, 0);
}

}  // namespace
}  // namespace gandiva::e2e
