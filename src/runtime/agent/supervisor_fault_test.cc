// The supervisor with faults injected through its ProcessOps
// (process_ops.h): signals that fail, a spawn that fails, /proc that cannot
// be read. Each test says what the supervisor does then, against real
// /bin/sh children.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/agent/process_ops.h"
#include "runtime/agent/supervisor.h"
#include "runtime/agent/test_util.h"

namespace gandiva::runtime {
namespace {

using testing::TempDir;
using testing::UniqueName;
using testing::WaitUntil;
using namespace std::chrono_literals;

// Real calls, less the faults set: a signal number whose kill() fails with
// an errno, a spawn that fails, pids whose /proc/<pid>/stat cannot be read.
// Records every kill() asked for.
class FaultyOps : public ProcessOpsWrapper {
 public:
  struct Sent {
    pid_t pid;
    int sig;
  };

  void FailSignal(int sig, int err) {
    std::lock_guard<std::mutex> lock(mu_);
    failed_signal_ = sig;
    signal_errno_ = err;
  }
  void FailSpawn(int err) { spawn_errno_.store(err); }
  void FailStat(pid_t pid) {
    std::lock_guard<std::mutex> lock(mu_);
    unreadable_.push_back(pid);
  }
  std::vector<Sent> sent() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sent_;
  }
  bool WasSent(pid_t pid, int sig) const {
    for (const Sent& s : sent()) {
      if (s.pid == pid && s.sig == sig) return true;
    }
    return false;
  }

  int Kill(pid_t pid, int sig) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      sent_.push_back({pid, sig});
      if (sig == failed_signal_) return signal_errno_;
    }
    return ProcessOpsWrapper::Kill(pid, sig);
  }
  int Spawn(pid_t* pid, const char* path,
            const posix_spawn_file_actions_t* file_actions,
            const posix_spawnattr_t* attr, char* const argv[],
            char* const envp[]) override {
    if (const int err = spawn_errno_.load(); err != 0) return err;
    return ProcessOpsWrapper::Spawn(pid, path, file_actions, attr, argv, envp);
  }
  std::optional<ProcInfo> Stat(pid_t pid) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (pid_t p : unreadable_) {
        if (p == pid) return std::nullopt;
      }
    }
    return ProcessOpsWrapper::Stat(pid);
  }

 private:
  mutable std::mutex mu_;
  int failed_signal_ = -1;         // guarded by mu_
  int signal_errno_ = 0;           // guarded by mu_
  std::vector<pid_t> unreadable_;  // guarded by mu_
  std::vector<Sent> sent_;         // guarded by mu_
  std::atomic<int> spawn_errno_{0};
};

class SupervisorFaultTest : public ::testing::Test {
 protected:
  SupervisorOptions Options() {
    SupervisorOptions o;
    o.name = UniqueName("fault");
    o.work_dir = dir_.path();
    o.num_gpus = 4;
    o.kill_grace = 2s;
    o.library_start_grace = 1s;
    o.process_ops = ops_;
    return o;
  }
  StartParams Job(int64_t id, std::string command) {
    StartParams p;
    p.job_id = id;
    p.command = std::move(command);
    return p;
  }

  TempDir dir_;
  std::shared_ptr<FaultyOps> ops_ = std::make_shared<FaultyOps>();
};

// SIGSTOP cannot be delivered (EPERM): the suspend neither hangs nor claims
// success; it gives up after suspend_timeout, unavailable, naming the job
// and what still runs. The job is left running (Resume refuses it: it is
// not suspended), and a kill ends it as any other.
TEST_F(SupervisorFaultTest,
       ASigstopThatFailsLeavesTheJobRunningAndUnavailable) {
  SupervisorOptions o = Options();
  o.library_start_grace = 0ms;
  o.suspend_timeout = 300ms;
  Supervisor sup(o);
  ops_->FailSignal(SIGSTOP, EPERM);
  auto started = sup.Start(Job(1, "exec sleep 1000"));
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  const pid_t pid = started->pid;

  const auto t0 = std::chrono::steady_clock::now();
  auto s = sup.Suspend(1);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), core::StatusCode::kUnavailable);
  const std::string& why = s.status().message();
  EXPECT_NE(why.find("job 1 process group " + std::to_string(pid) +
                     " did not stop within 300 ms"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("still running: pid " + std::to_string(pid)),
            std::string::npos)
      << why;
  EXPECT_GE(took, 300ms);
  EXPECT_TRUE(ops_->WasSent(-pid, SIGSTOP));

  EXPECT_EQ(sup.Job(1)->state, RunState::kRunning);
  EXPECT_FALSE(ProcessGroupStopped(pid));
  EXPECT_EQ(sup.Resume(1).status().code(), core::StatusCode::kAlreadyExists);
  ASSERT_TRUE(sup.Kill(1).ok());
  ASSERT_TRUE(sup.WaitForExit(1, 10s));
  EXPECT_EQ(sup.Job(1)->exit_code, -SIGTERM);
}

// SIGTERM cannot be delivered: Kill goes on to SIGKILL after the grace
// period, and the job's exit is recorded as killed by it.
TEST_F(SupervisorFaultTest, ASigtermThatFailsIsFollowedBySigkillAfterTheGrace) {
  SupervisorOptions o = Options();
  o.kill_grace = 300ms;
  Supervisor sup(o);
  ops_->FailSignal(SIGTERM, EPERM);
  auto started = sup.Start(Job(1, "exec sleep 1000"));
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  const pid_t pid = started->pid;

  const auto t0 = std::chrono::steady_clock::now();
  core::Status killed = sup.Kill(1);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(killed.ok()) << killed.ToString();
  EXPECT_GE(took, 300ms);
  EXPECT_TRUE(ops_->WasSent(-pid, SIGTERM));
  EXPECT_TRUE(ops_->WasSent(-pid, SIGKILL));
  auto v = sup.Job(1);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->state, RunState::kExited);
  EXPECT_EQ(v->exit_code, -SIGKILL);
  ASSERT_EQ(sup.PendingExits().size(), 1u);
  EXPECT_TRUE(sup.PendingExits()[0].killed);
}

// The library's process cannot be sent SIGTSTP: the job is stopped with
// SIGSTOP of its group instead (not at a boundary), and resumes.
TEST_F(SupervisorFaultTest, ASigtstpThatFailsStopsTheGroupWithSigstopInstead) {
  Supervisor sup(Options());
  ops_->FailSignal(SIGTSTP, EPERM);
  auto started = sup.Start(
      Job(1, std::string("exec ") + GANDIVA_AGENT_TEST_JOB + " 100000"));
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  const pid_t pid = started->pid;
  ASSERT_TRUE(WaitUntil([&] {
    auto v = sup.Job(1);
    return v.ok() && v->uses_library && v->minibatches >= 2;
  }));

  auto s = sup.Suspend(1);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->at_boundary);
  EXPECT_TRUE(ops_->WasSent(pid, SIGTSTP));
  EXPECT_TRUE(ops_->WasSent(-pid, SIGSTOP));
  EXPECT_EQ(sup.Job(1)->state, RunState::kSuspended);
  EXPECT_TRUE(ProcessGroupStopped(pid));
  const uint64_t at = sup.Job(1)->minibatches;
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(sup.Job(1)->minibatches, at);  // stopped for real

  auto r = sup.Resume(1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(sup.Job(1)->state, RunState::kRunning);
  EXPECT_TRUE(WaitUntil([&] { return sup.Job(1)->minibatches > at; }));
  ASSERT_TRUE(sup.Kill(1).ok());
}

// The spawn fails: Start is an I/O error naming the job and the error, the
// job is not listed and its page is gone; a later start of it runs.
TEST_F(SupervisorFaultTest,
       AJobWhoseProcessCannotBeSpawnedIsAnIoErrorNamingIt) {
  Supervisor sup(Options());
  ops_->FailSpawn(EAGAIN);
  auto started = sup.Start(Job(4, "exit 0"));
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), core::StatusCode::kIo);
  EXPECT_NE(started.status().message().find("starting job 4"),
            std::string::npos)
      << started.status().ToString();
  EXPECT_NE(started.status().message().find(std::strerror(EAGAIN)),
            std::string::npos)
      << started.status().ToString();
  EXPECT_TRUE(sup.Jobs(true).empty());
  EXPECT_FALSE(std::filesystem::exists(sup.PagePath(4)));
  EXPECT_TRUE(sup.PendingExits().empty());

  ops_->FailSpawn(0);
  started = sup.Start(Job(4, "exit 5"));
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  ASSERT_TRUE(sup.WaitForExit(4, 10s));
  EXPECT_EQ(sup.Job(4)->exit_code, 5);
}

// A process an earlier agent left whose /proc/<pid>/stat cannot be read is
// not killed: the supervisor kills a pid only when /proc says it is still
// the process recorded (a pid may have been reused). Its record goes. The
// same record with /proc readable gets the process killed.
TEST_F(SupervisorFaultTest, ALeftoverWhoseProcCannotBeReadIsNotKilled) {
  const pid_t left = fork();
  ASSERT_GE(left, 0);
  if (left == 0) {
    setsid();
    execl("/bin/sleep", "sleep", "1000", nullptr);
    _exit(127);
  }
  std::optional<ProcInfo> st;
  ASSERT_TRUE(WaitUntil([&] {
    st = ReadProcStat(left);
    return st && st->pgrp == left;  // after its setsid()
  }));
  const std::string record =
      dir_.path() + "/jobs/9/process." + std::to_string(left);
  std::filesystem::create_directories(dir_.path() + "/jobs/9");
  auto write_record = [&] {
    // Its agent (pid 0) is gone.
    std::ofstream(record) << left << ' ' << st->starttime
                          << " 0 0 /nonexistent-page\n";
  };

  write_record();
  ops_->FailStat(left);
  {
    Supervisor sup(Options());
    EXPECT_TRUE(sup.KillLeftovers().empty());
  }
  EXPECT_FALSE(std::filesystem::exists(record));
  EXPECT_EQ(kill(left, 0), 0);
  EXPECT_EQ(waitpid(left, nullptr, WNOHANG), 0);  // still running

  write_record();
  SupervisorOptions real = Options();
  real.process_ops = nullptr;
  {
    Supervisor sup(real);
    EXPECT_EQ(sup.KillLeftovers(), std::vector<int64_t>{9});
  }
  int status = 0;
  EXPECT_EQ(waitpid(left, &status, 0), left);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

// /proc cannot be read at all: a job's exit is still recorded with its code
// (the group's leftovers are not seen, so not waited for), and a kill still
// ends a job.
TEST_F(SupervisorFaultTest, WithProcUnreadableExitsAreStillRecorded) {
  class NoProc : public ProcessOpsWrapper {
   public:
    std::optional<ProcInfo> Stat(pid_t) override {
      ++reads;
      return std::nullopt;
    }
    std::vector<pid_t> ListPids() override {
      ++reads;
      return {};
    }
    std::atomic<int> reads{0};
  };
  auto no_proc = std::make_shared<NoProc>();
  SupervisorOptions o = Options();
  o.process_ops = no_proc;
  Supervisor sup(o);
  ASSERT_TRUE(sup.Start(Job(1, "exit 3")).ok());
  ASSERT_TRUE(sup.Start(Job(2, "exec sleep 1000")).ok());
  ASSERT_TRUE(sup.WaitForExit(1, 10s));
  EXPECT_EQ(sup.Job(1)->exit_code, 3);
  ASSERT_TRUE(sup.Kill(2).ok());
  EXPECT_EQ(sup.Job(2)->exit_code, -SIGTERM);
  std::vector<ExitRecord> exits = sup.PendingExits();
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_EQ(exits[0].job_id, 1);
  EXPECT_EQ(exits[0].exit_code, 3);
  EXPECT_EQ(exits[1].job_id, 2);
  EXPECT_TRUE(exits[1].killed);
  EXPECT_GT(no_proc->reads.load(), 0);  // it was asked, and failed
}

}  // namespace
}  // namespace gandiva::runtime
