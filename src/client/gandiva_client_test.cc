// The job-side library end to end: forked child processes play the training
// job (they call gandiva_init() and loop over gandiva_step()); the test plays
// the agent (creates the page, reads it with ProgressReader, signals the
// child). No timed assertions: waits are bounded (kWait) only as a guard.
#include "client/gandiva_client.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "client/progress_reader.h"
#include "gtest/gtest.h"

namespace gandiva::client {
namespace {

constexpr auto kWait = std::chrono::seconds(10);

// Events the child logs into shared memory, in order.
enum Event : uint32_t {
  kBegin = 1,  // mini-batch i starts
  kEnd = 2,    // mini-batch i done; gandiva_step() is called next
  kOffload = 3,
  kReload = 4,
  kSave = 5,
  kLoad = 6,
  kResumed = 7,     // gandiva_step() after batch i returned RESUMED
  kCheckpoint = 8,  // ... returned CHECKPOINT
  kError = 9,       // ... returned an error (index = -code)
};

struct Shared {
  std::atomic<int> at_hold{0};
  std::atomic<int> release{0};
  std::atomic<int> finish{0};
  std::atomic<uint32_t> n_events{0};
  std::atomic<uint64_t> events[1 << 16];
};

Shared* g_shared = nullptr;  // in the child, the same mapping

void Log(Event e, uint64_t index) {
  uint32_t n = g_shared->n_events.fetch_add(1);
  if (n < (1u << 16)) {
    g_shared->events[n].store((uint64_t{e} << 48) |
                              (index & 0xFFFFFFFFFFFFull));
  }
}

struct ChildConfig {
  uint64_t batches = 10;  // 0: until Shared::finish
  int64_t hold_at = -1;   // wait for Shared::release during this batch
  int batch_us = 0;       // simulated work per batch
  bool hooks = true;      // offload/reload hooks
  bool save_hook = false;
  bool load_hook = false;
  std::vector<std::pair<std::string, std::string>> env;
};

std::string g_checkpoint_path;  // where the child's save goes

int OffloadHook(void*) {
  Log(kOffload, gandiva_minibatches());
  return 0;
}
int ReloadHook(void*) {
  Log(kReload, gandiva_minibatches());
  return 0;
}
int SaveHook(const char* dir, void*) {
  Log(kSave, gandiva_minibatches());
  std::ofstream(std::string(dir) + "/state") << gandiva_minibatches();
  return 0;
}
int LoadHook(const char* dir, void*) {
  std::ifstream in(std::string(dir) + "/state");
  uint64_t count = 0;
  in >> count;
  Log(kLoad, count);
  gandiva_set_minibatches(count);
  return in ? 0 : 1;
}

// Simulated mini-batch work: sleeps `us` even when signals interrupt it.
void Work(int us) {
  timespec until{};
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_nsec += static_cast<long>(us) * 1000;
  until.tv_sec += until.tv_nsec / 1000000000;
  until.tv_nsec %= 1000000000;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) ==
         EINTR) {
  }
}

// The training job. Never returns.
[[noreturn]] void RunChild(const ChildConfig& cfg) {
  for (const auto& [k, v] : cfg.env) setenv(k.c_str(), v.c_str(), 1);
  gandiva_set_hooks(cfg.hooks ? OffloadHook : nullptr,
                    cfg.hooks ? ReloadHook : nullptr,
                    cfg.save_hook ? SaveHook : nullptr,
                    cfg.load_hook ? LoadHook : nullptr, nullptr);
  int rc = gandiva_init();
  if (rc < 0) _exit(100 - rc);  // 101..107: init failed with -rc
  if (cfg.load_hook && gandiva_restore() != 1) _exit(90);
  auto hold_deadline = std::chrono::steady_clock::now() + kWait;
  for (uint64_t i = 0;
       cfg.batches == 0 ? g_shared->finish.load() == 0 : i < cfg.batches; ++i) {
    if (i > 1000000) _exit(91);
    Log(kBegin, i);
    if (static_cast<int64_t>(i) == cfg.hold_at) {
      g_shared->at_hold.store(1);
      while (g_shared->release.load() == 0) {
        if (std::chrono::steady_clock::now() > hold_deadline) _exit(92);
        usleep(1000);
      }
    }
    if (cfg.batch_us > 0) Work(cfg.batch_us);
    Log(kEnd, i);
    rc = gandiva_step();
    if (rc == GANDIVA_STEP_RESUMED) Log(kResumed, i);
    if (rc < 0) Log(kError, static_cast<uint64_t>(-rc));
    if (rc == GANDIVA_STEP_CHECKPOINT) {
      Log(kCheckpoint, i);
      const char* dir = gandiva_checkpoint_dir();
      std::ofstream(std::string(dir) + "/state") << gandiva_minibatches();
      std::exit(gandiva_checkpoint_done(0));
    }
  }
  gandiva_shutdown();
  _exit(0);
}

template <typename Pred>
bool WaitFor(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + kWait;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Signals pending for `pid` (thread and process), from /proc.
uint64_t PendingSignals(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  uint64_t mask = 0;
  while (std::getline(in, line)) {
    if (line.rfind("SigPnd:", 0) == 0 || line.rfind("ShdPnd:", 0) == 0) {
      mask |= std::stoull(line.substr(7), nullptr, 16);
    }
  }
  return mask;
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gandiva_client_test_XXXXXX";
    dir_ = mkdtemp(tmpl);
    page_path_ = dir_ + "/progress";
    ckpt_dir_ = dir_ + "/ckpt";
    std::filesystem::create_directory(ckpt_dir_);
    void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem, MAP_FAILED);
    shared_ = new (mem) Shared();
    g_shared = shared_;
  }

  void TearDown() override {
    if (pid_ > 0) {  // a failed test left a child behind
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    munmap(shared_, sizeof(Shared));
    std::filesystem::remove_all(dir_);
  }

  // The environment an agent gives a job.
  std::vector<std::pair<std::string, std::string>> AgentEnv(
      bool checkpoint_dir = true) const {
    std::vector<std::pair<std::string, std::string>> env = {
        {"GANDIVA_JOB_ID", "job-1"}, {"GANDIVA_PROGRESS_FILE", page_path_}};
    if (checkpoint_dir) env.push_back({"GANDIVA_CHECKPOINT_DIR", ckpt_dir_});
    return env;
  }

  // Creates the page (like the agent) and starts the child in its own
  // process group; waits until it attached.
  void Start(ChildConfig cfg, bool create_page = true, bool wait = true) {
    if (create_page) {
      ASSERT_TRUE(CreateProgressPage(page_path_).ok());
      auto r = ProgressReader::Open(page_path_);
      ASSERT_TRUE(r.ok());
      reader_.emplace(std::move(r).value());
    }
    std::fflush(nullptr);
    pid_ = fork();
    ASSERT_GE(pid_, 0);
    if (pid_ == 0) {
      setpgid(0, 0);  // own group, same session: SIGTSTP is not orphaned
      RunChild(cfg);
    }
    setpgid(pid_, pid_);  // (either side may win the race; both are fine)
    if (wait) {
      // Attached: state left kNew (pid is stored before state).
      ASSERT_TRUE(WaitFor([&] { return reader_->state() != JobState::kNew; }));
      ASSERT_EQ(reader_->state(), JobState::kRunning);
      ASSERT_EQ(reader_->pid(), pid_);
    }
  }

  void WaitHold() {
    ASSERT_TRUE(WaitFor([&] { return shared_->at_hold.load() == 1; }));
  }

  // Waits until the child stopped (WUNTRACED).
  void WaitStopped() {
    int status = 0;
    ASSERT_TRUE(WaitFor(
        [&] { return waitpid(pid_, &status, WUNTRACED | WNOHANG) == pid_; }));
    ASSERT_TRUE(WIFSTOPPED(status)) << status;
    EXPECT_EQ(WSTOPSIG(status), SIGSTOP);
  }

  // Waits for the child to exit; returns its exit status (or -signal).
  int WaitExit() {
    int status = 0;
    bool done =
        WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; });
    EXPECT_TRUE(done) << "child did not exit";
    if (!done) return -1000;
    pid_ = 0;
    if (WIFSIGNALED(status)) return -WTERMSIG(status);
    return WEXITSTATUS(status);
  }

  // After kill(): waits until the signal was delivered (handler ran).
  void WaitDelivered(int signo) {
    uint64_t bit = uint64_t{1} << (signo - 1);
    ASSERT_TRUE(WaitFor([&] { return (PendingSignals(pid_) & bit) == 0; }));
  }

  std::vector<std::pair<Event, uint64_t>> Events() const {
    std::vector<std::pair<Event, uint64_t>> out;
    uint32_t n = std::min<uint32_t>(shared_->n_events.load(), 1u << 16);
    for (uint32_t i = 0; i < n; ++i) {
      uint64_t v = shared_->events[i].load();
      out.emplace_back(static_cast<Event>(v >> 48), v & 0xFFFFFFFFFFFFull);
    }
    return out;
  }

  size_t Count(Event e) const {
    size_t n = 0;
    for (const auto& ev : Events()) n += ev.first == e;
    return n;
  }

  std::string dir_, page_path_, ckpt_dir_;
  Shared* shared_ = nullptr;
  pid_t pid_ = 0;
  std::optional<ProgressReader> reader_;
};

TEST_F(ClientTest, SigtstpSuspendsAtTheNextBoundaryAndSigcontResumes) {
  constexpr uint64_t kBatches = 10;
  constexpr uint64_t kHold = 3;
  ChildConfig cfg;
  cfg.batches = kBatches;
  cfg.hold_at = kHold;
  cfg.env = AgentEnv();
  Start(cfg);
  WaitHold();  // the child is in the middle of batch 3
  ASSERT_EQ(kill(pid_, SIGTSTP), 0);
  WaitDelivered(SIGTSTP);
  // The handler only noted the request: the child is still mid-batch.
  EXPECT_EQ(reader_->state(), JobState::kRunning);
  EXPECT_EQ(reader_->minibatches(), kHold);
  shared_->release.store(1);

  WaitStopped();
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.state, JobState::kSuspended);
  EXPECT_EQ(s.minibatches, kHold + 1);  // batch 3 finished, then stopped
  EXPECT_EQ(s.suspend_count, 1u);
  EXPECT_EQ(s.served_count, 1u);
  EXPECT_EQ(s.last_kind, RequestKind::kSuspend);
  EXPECT_EQ(s.last_result, 0);
  EXPECT_EQ(s.done_seq, 0u);  // a signal, not a page request
  ASSERT_TRUE(s.last_request_latency_ns().has_value());
  EXPECT_GE(*s.last_request_latency_ns(), 0);
  EXPECT_TRUE(ProcessIsStopped(pid_));
  // Stopped exactly at the boundary after batch 3: the last events are the
  // end of batch 3 and the offload hook; batch 4 never began.
  auto ev = Events();
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[ev.size() - 2], std::make_pair(kEnd, kHold));
  EXPECT_EQ(ev.back(), std::make_pair(kOffload, kHold + 1));

  ASSERT_EQ(kill(pid_, SIGCONT), 0);
  EXPECT_EQ(WaitExit(), 0);
  s = reader_->Read();
  EXPECT_EQ(s.minibatches, kBatches);  // exact
  EXPECT_EQ(s.state, JobState::kExited);
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_EQ(s.suspend_count, 1u);
  EXPECT_GE(s.resumed_ns, s.last_effective_ns);
  ev = Events();
  std::vector<std::pair<Event, uint64_t>> expected;
  for (uint64_t i = 0; i < kBatches; ++i) {
    expected.emplace_back(kBegin, i);
    expected.emplace_back(kEnd, i);
    if (i == kHold) {
      expected.emplace_back(kOffload, kHold + 1);
      expected.emplace_back(kReload, kHold + 1);
      expected.emplace_back(kResumed, kHold);
    }
  }
  EXPECT_EQ(ev, expected);
}

TEST_F(ClientTest, PageRequestSuspendsAndDuplicateSignalsAreCoalesced) {
  ChildConfig cfg;
  cfg.batches = 0;  // until finish
  cfg.batch_us = 500;
  cfg.env = AgentEnv();
  Start(cfg);
  ASSERT_TRUE(WaitFor([&] { return reader_->minibatches() >= 3; }));
  auto seq = reader_->Request(RequestKind::kSuspend);
  ASSERT_TRUE(seq.ok());
  ASSERT_EQ(kill(pid_, SIGTSTP), 0);  // the same request, also by signal
  WaitStopped();
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.state, JobState::kSuspended);
  EXPECT_TRUE(reader_->IsDone(*seq));
  EXPECT_EQ(s.ack_seq, *seq);
  EXPECT_EQ(s.suspend_count, 1u);
  auto ev = Events();
  EXPECT_EQ(ev.back().first, kOffload);
  EXPECT_EQ(ev[ev.size() - 2].first, kEnd);
  const uint64_t stopped_at = s.minibatches;
  EXPECT_EQ(ev.back().second, stopped_at);

  // Another SIGTSTP while stopped stays pending and is delivered on SIGCONT:
  // it repeats the request being served and must not suspend again.
  ASSERT_EQ(kill(pid_, SIGTSTP), 0);
  ASSERT_EQ(kill(pid_, SIGCONT), 0);
  ASSERT_TRUE(
      WaitFor([&] { return reader_->minibatches() >= stopped_at + 5; }));
  shared_->finish.store(1);
  EXPECT_EQ(WaitExit(), 0);
  s = reader_->Read();
  EXPECT_EQ(s.suspend_count, 1u);
  EXPECT_EQ(Count(kResumed), 1u);
  EXPECT_EQ(Count(kOffload), 1u);
  EXPECT_EQ(s.minibatches, Count(kEnd));  // every batch counted once
}

TEST_F(ClientTest, MeasuresSuspendLatencyOfAFreeRunningJob) {
  ChildConfig cfg;
  cfg.batches = 0;
  cfg.batch_us = 2000;  // a 2 ms mini-batch
  cfg.env = AgentEnv();
  Start(cfg);
  ASSERT_TRUE(WaitFor([&] { return reader_->minibatches() >= 5; }));
  auto rate = reader_->MinibatchRate();
  ASSERT_TRUE(rate.has_value());
  EXPECT_GT(*rate, 0.0);
  uint64_t sent = gandiva_monotonic_ns();
  ASSERT_EQ(kill(pid_, SIGTSTP), 0);
  WaitStopped();
  uint64_t stopped = gandiva_monotonic_ns();
  ProgressSnapshot s = reader_->Read();
  ASSERT_EQ(s.state, JobState::kSuspended);
  ASSERT_TRUE(s.last_request_latency_ns().has_value());
  EXPECT_GE(s.last_received_ns, sent);
  EXPECT_LE(s.last_effective_ns, stopped);
  std::printf(
      "suspend latency (2 ms mini-batches): signal->suspended %.3f ms "
      "(job side), kill->waitpid stopped %.3f ms (agent side)\n",
      static_cast<double>(*s.last_request_latency_ns()) / 1e6,
      static_cast<double>(stopped - sent) / 1e6);
  uint64_t cont = gandiva_monotonic_ns();
  ASSERT_EQ(kill(pid_, SIGCONT), 0);
  ASSERT_TRUE(WaitFor([&] { return reader_->state() == JobState::kRunning; }));
  s = reader_->Read();
  EXPECT_GE(s.resumed_ns, cont);
  std::printf("resume latency: SIGCONT->running %.3f ms\n",
              static_cast<double>(s.resumed_ns - cont) / 1e6);
  // The rate window restarts after the resume.
  ASSERT_TRUE(
      WaitFor([&] { return reader_->minibatches() >= s.minibatches + 3; }));
  ASSERT_TRUE(reader_->MinibatchRate().has_value());
  EXPECT_LE(reader_->Read().rate_window,
            reader_->minibatches() - s.minibatches + 1);
  shared_->finish.store(1);
  EXPECT_EQ(WaitExit(), 0);
}

TEST_F(ClientTest, CheckpointAndExitRunsTheSaveHookAndExits75) {
  ChildConfig cfg;
  cfg.batches = 100;
  cfg.hold_at = 4;
  cfg.save_hook = true;
  cfg.env = AgentEnv();
  Start(cfg);
  WaitHold();
  auto seq = reader_->Request(RequestKind::kCheckpointAndExit);
  ASSERT_TRUE(seq.ok());
  ASSERT_EQ(kill(pid_, SIGUSR1), 0);
  shared_->release.store(1);
  EXPECT_EQ(WaitExit(), GANDIVA_EXIT_MIGRATE);
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.state, JobState::kExited);
  EXPECT_EQ(s.exit_code, GANDIVA_EXIT_MIGRATE);
  EXPECT_TRUE(reader_->IsDone(*seq));
  EXPECT_EQ(s.last_kind, RequestKind::kCheckpointAndExit);
  EXPECT_EQ(s.last_result, 0);
  EXPECT_EQ(s.minibatches, 5u);
  ASSERT_TRUE(s.last_request_latency_ns().has_value());
  std::ifstream in(ckpt_dir_ + "/state");
  uint64_t saved = 0;
  ASSERT_TRUE(in >> saved);
  EXPECT_EQ(saved, 5u);
  // Saved at the boundary after batch 4; gandiva_step() never returned.
  auto ev = Events();
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[ev.size() - 2], std::make_pair(kEnd, uint64_t{4}));
  EXPECT_EQ(ev.back(), std::make_pair(kSave, uint64_t{5}));
}

TEST_F(ClientTest, Sigusr1AloneMeansCheckpointAndExit) {
  ChildConfig cfg;
  cfg.batches = 100;
  cfg.hold_at = 2;
  cfg.save_hook = true;
  cfg.env = AgentEnv();
  Start(cfg);
  WaitHold();
  ASSERT_EQ(kill(pid_, SIGUSR1), 0);
  WaitDelivered(SIGUSR1);
  shared_->release.store(1);
  EXPECT_EQ(WaitExit(), GANDIVA_EXIT_MIGRATE);
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.exit_code, GANDIVA_EXIT_MIGRATE);
  EXPECT_EQ(s.done_seq, 0u);
  EXPECT_EQ(s.minibatches, 3u);
  EXPECT_EQ(Count(kSave), 1u);
}

TEST_F(ClientTest, ResizeSavesAndExits76WithTheTargetWorldSize) {
  ChildConfig cfg;
  cfg.batches = 100;
  cfg.hold_at = 1;
  cfg.save_hook = true;
  cfg.env = AgentEnv();
  Start(cfg);
  WaitHold();
  auto seq = reader_->Request(RequestKind::kResize, 4);
  ASSERT_TRUE(seq.ok());
  shared_->release.store(1);
  EXPECT_EQ(WaitExit(), GANDIVA_EXIT_RESIZE);
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.exit_code, GANDIVA_EXIT_RESIZE);
  EXPECT_EQ(s.last_kind, RequestKind::kResize);
  EXPECT_EQ(s.target_world_size, 4u);
  EXPECT_TRUE(reader_->IsDone(*seq));
  EXPECT_EQ(Count(kSave), 1u);
}

TEST_F(ClientTest, WithoutSaveHookStepReturnsCheckpointToTheCaller) {
  ChildConfig cfg;
  cfg.batches = 100;
  cfg.hold_at = 2;
  cfg.env = AgentEnv();
  Start(cfg);
  WaitHold();
  auto seq = reader_->Request(RequestKind::kCheckpointAndExit);
  ASSERT_TRUE(seq.ok());
  shared_->release.store(1);
  EXPECT_EQ(WaitExit(), GANDIVA_EXIT_MIGRATE);
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.exit_code, GANDIVA_EXIT_MIGRATE);
  EXPECT_EQ(s.state, JobState::kExited);
  EXPECT_TRUE(reader_->IsDone(*seq));
  auto ev = Events();
  EXPECT_EQ(ev.back(), std::make_pair(kCheckpoint, uint64_t{2}));
  EXPECT_TRUE(std::filesystem::exists(ckpt_dir_ + "/state"));
}

TEST_F(ClientTest, CheckpointWithoutDirectoryFailsAndTrainingGoesOn) {
  ChildConfig cfg;
  cfg.batches = 8;
  cfg.hold_at = 2;
  cfg.save_hook = true;
  cfg.env = AgentEnv(/*checkpoint_dir=*/false);
  Start(cfg);
  WaitHold();
  auto seq = reader_->Request(RequestKind::kCheckpointAndExit);
  ASSERT_TRUE(seq.ok());
  shared_->release.store(1);
  EXPECT_EQ(WaitExit(), 0);
  ProgressSnapshot s = reader_->Read();
  EXPECT_TRUE(reader_->IsDone(*seq));
  EXPECT_EQ(s.last_result, GANDIVA_E_NO_CHECKPOINT_DIR);
  EXPECT_EQ(s.minibatches, 8u);
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_EQ(Count(kSave), 0u);
  EXPECT_EQ(Count(kError), 1u);
}

TEST_F(ClientTest, CancelReplacesAnUnservedRequest) {
  ChildConfig cfg;
  cfg.batches = 6;
  cfg.hold_at = 2;
  cfg.env = AgentEnv();
  Start(cfg);
  WaitHold();
  ASSERT_TRUE(reader_->Request(RequestKind::kSuspend).ok());
  auto cancel = reader_->Request(RequestKind::kNone);
  ASSERT_TRUE(cancel.ok());
  shared_->release.store(1);
  EXPECT_EQ(WaitExit(), 0);
  ProgressSnapshot s = reader_->Read();
  EXPECT_TRUE(reader_->IsDone(*cancel));
  EXPECT_EQ(s.suspend_count, 0u);
  EXPECT_EQ(s.served_count, 0u);
  EXPECT_EQ(s.minibatches, 6u);
}

TEST_F(ClientTest, RequestPostedBeforeTheJobStartsIsServedOnce) {
  ASSERT_TRUE(CreateProgressPage(page_path_).ok());
  auto r = ProgressReader::Open(page_path_);
  ASSERT_TRUE(r.ok());
  reader_.emplace(std::move(r).value());
  auto seq = reader_->Request(RequestKind::kSuspend);
  ASSERT_TRUE(seq.ok());
  ChildConfig cfg;
  cfg.batches = 5;
  cfg.env = AgentEnv();
  Start(cfg, /*create_page=*/false, /*wait=*/false);
  WaitStopped();
  EXPECT_EQ(reader_->minibatches(), 1u);  // served at the first boundary
  ASSERT_EQ(kill(pid_, SIGCONT), 0);
  EXPECT_EQ(WaitExit(), 0);
  EXPECT_EQ(reader_->Read().suspend_count, 1u);

  // A new process attaching to the same page does not serve it again.
  shared_->n_events.store(0);
  Start(cfg, /*create_page=*/false, /*wait=*/false);
  EXPECT_EQ(WaitExit(), 0);
  EXPECT_EQ(reader_->Read().suspend_count, 1u);
  EXPECT_EQ(reader_->minibatches(), 5u);
}

TEST_F(ClientTest, RestoreCallsTheLoadHookWithResumeFrom) {
  std::ofstream(ckpt_dir_ + "/state") << 42;
  ChildConfig cfg;
  cfg.batches = 3;
  cfg.load_hook = true;
  cfg.env = AgentEnv();
  cfg.env.push_back({"GANDIVA_RESUME_FROM", ckpt_dir_});
  Start(cfg, true, /*wait=*/false);
  EXPECT_EQ(WaitExit(), 0);
  EXPECT_EQ(reader_->minibatches(), 45u);  // counting goes on from 42
  auto ev = Events();
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.front(), std::make_pair(kLoad, uint64_t{42}));
}

// A warm start: the process is up before its checkpoint; it waits in state
// WAITING until the agent creates the ready file, then loads.
TEST_F(ClientTest, WarmStartWaitsForTheReadyFileThenRestores) {
  std::ofstream(ckpt_dir_ + "/state") << 42;
  ChildConfig cfg;
  cfg.batches = 3;
  cfg.load_hook = true;
  cfg.env = AgentEnv();
  cfg.env.push_back({"GANDIVA_RESUME_FROM", ckpt_dir_});
  cfg.env.push_back({"GANDIVA_RESUME_WAIT", "1"});
  Start(cfg, true, /*wait=*/false);
  ASSERT_TRUE(WaitFor([&] { return reader_->state() == JobState::kWaiting; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.state, JobState::kWaiting);  // still waiting: no ready file
  EXPECT_EQ(s.pid, pid_);
  EXPECT_EQ(s.restore_begin_ns, 0u);
  EXPECT_EQ(Count(kLoad), 0u);
  uint64_t ready_ns = gandiva_monotonic_ns();
  std::ofstream(ckpt_dir_ + "/" GANDIVA_RESUME_READY_FILE) << "";
  EXPECT_EQ(WaitExit(), 0);
  s = reader_->Read();
  EXPECT_EQ(s.minibatches, 45u);
  EXPECT_GE(s.restore_begin_ns, ready_ns);
  EXPECT_GE(s.restore_end_ns, s.restore_begin_ns);
  std::printf("warm start: ready file -> restore begin %.3f ms\n",
              static_cast<double>(s.restore_begin_ns - ready_ns) / 1e6);
  auto ev = Events();
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.front(), std::make_pair(kLoad, uint64_t{42}));
}

TEST_F(ClientTest, ColdRestoreRecordsTheRestoreTimes) {
  std::ofstream(ckpt_dir_ + "/state") << 7;
  ChildConfig cfg;
  cfg.batches = 2;
  cfg.load_hook = true;
  cfg.env = AgentEnv();
  cfg.env.push_back({"GANDIVA_RESUME_FROM", ckpt_dir_});  // no wait
  Start(cfg, true, /*wait=*/false);
  EXPECT_EQ(WaitExit(), 0);
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.minibatches, 9u);
  EXPECT_GT(s.restore_begin_ns, 0u);
  EXPECT_GE(s.restore_end_ns, s.restore_begin_ns);
}

// Without a page (not run by an agent, or a data-parallel rank > 0) the
// warm start is only the wait; a timeout is GANDIVA_E_STATE.
TEST_F(ClientTest, RestoreBeginWaitsWhenInactiveAndTimesOut) {
  std::fflush(nullptr);
  pid_ = fork();
  ASSERT_GE(pid_, 0);
  if (pid_ == 0) {
    unsetenv("GANDIVA_PROGRESS_FILE");
    setenv("GANDIVA_RESUME_FROM", ckpt_dir_.c_str(), 1);
    setenv("GANDIVA_RESUME_WAIT", "1", 1);
    if (gandiva_restore_begin(0) != GANDIVA_E_STATE) _exit(10);  // no init
    if (gandiva_init() != GANDIVA_INACTIVE) _exit(11);
    if (gandiva_restore_begin(20) != GANDIVA_E_STATE) _exit(12);
    g_shared->at_hold.store(1);
    if (gandiva_restore_begin(10000) != 1) _exit(13);
    gandiva_restore_end();
    gandiva_restore_end();  // no-op
    gandiva_shutdown();
    // Without GANDIVA_RESUME_FROM there is nothing to wait for.
    unsetenv("GANDIVA_RESUME_FROM");
    if (gandiva_init() != GANDIVA_INACTIVE) _exit(14);
    if (gandiva_restore_begin(-1) != 0) _exit(15);
    _exit(0);
  }
  WaitHold();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::ofstream(ckpt_dir_ + "/" GANDIVA_RESUME_READY_FILE) << "";
  EXPECT_EQ(WaitExit(), 0);
}

// Suspended, then asked to checkpoint: the checkpoint is taken at the
// boundary where the job stopped, without training another mini-batch.
TEST_F(ClientTest, CheckpointRequestedWhileSuspendedSavesWhereItStopped) {
  constexpr uint64_t kHold = 3;
  ChildConfig cfg;
  cfg.batches = 100;
  cfg.hold_at = kHold;
  cfg.save_hook = true;
  cfg.env = AgentEnv();
  Start(cfg);
  WaitHold();
  ASSERT_TRUE(reader_->Request(RequestKind::kSuspend).ok());
  shared_->release.store(1);
  WaitStopped();
  EXPECT_EQ(reader_->state(), JobState::kSuspended);
  auto seq = reader_->Request(RequestKind::kResize, 2);
  ASSERT_TRUE(seq.ok());
  ASSERT_EQ(kill(pid_, SIGCONT), 0);
  EXPECT_EQ(WaitExit(), GANDIVA_EXIT_RESIZE);
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.exit_code, GANDIVA_EXIT_RESIZE);
  EXPECT_EQ(s.target_world_size, 2u);
  EXPECT_TRUE(reader_->IsDone(*seq));
  EXPECT_EQ(s.minibatches, kHold + 1);
  EXPECT_EQ(s.suspend_count, 1u);
  EXPECT_EQ(s.served_count, 2u);
  std::ifstream in(ckpt_dir_ + "/state");
  uint64_t saved = 0;
  ASSERT_TRUE(in >> saved);
  EXPECT_EQ(saved, kHold + 1);
  std::vector<std::pair<Event, uint64_t>> tail = {{kEnd, kHold},
                                                  {kOffload, kHold + 1},
                                                  {kReload, kHold + 1},
                                                  {kSave, kHold + 1}};
  auto ev = Events();
  ASSERT_GE(ev.size(), tail.size());
  EXPECT_EQ(std::vector(ev.end() - tail.size(), ev.end()), tail);
  EXPECT_EQ(Count(kBegin), kHold + 1);  // batch 4 never began
}

TEST_F(ClientTest, Sigusr1WhileStoppedCheckpointsAtTheSameBoundary) {
  constexpr uint64_t kHold = 2;
  ChildConfig cfg;
  cfg.batches = 100;
  cfg.hold_at = kHold;
  cfg.env = AgentEnv();  // no save hook: step() returns CHECKPOINT
  Start(cfg);
  WaitHold();
  ASSERT_EQ(kill(pid_, SIGTSTP), 0);
  WaitDelivered(SIGTSTP);
  shared_->release.store(1);
  WaitStopped();
  ASSERT_EQ(kill(pid_, SIGUSR1), 0);  // pending until continued
  ASSERT_EQ(kill(pid_, SIGCONT), 0);
  EXPECT_EQ(WaitExit(), GANDIVA_EXIT_MIGRATE);
  ProgressSnapshot s = reader_->Read();
  EXPECT_EQ(s.exit_code, GANDIVA_EXIT_MIGRATE);
  EXPECT_EQ(s.last_kind, RequestKind::kCheckpointAndExit);
  EXPECT_EQ(s.minibatches, kHold + 1);
  auto ev = Events();
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back(), std::make_pair(kCheckpoint, kHold));
  EXPECT_EQ(Count(kResumed), 0u);
  EXPECT_EQ(Count(kBegin), kHold + 1);
}

// A suspend requested while suspended is not a checkpoint: it stays for the
// next boundary, and training goes on in between.
TEST_F(ClientTest, SuspendRequestedWhileSuspendedWaitsForTheNextBoundary) {
  ChildConfig cfg;
  cfg.batches = 6;
  cfg.hold_at = 1;
  cfg.env = AgentEnv();
  Start(cfg);
  WaitHold();
  ASSERT_TRUE(reader_->Request(RequestKind::kSuspend).ok());
  shared_->release.store(1);
  WaitStopped();
  ASSERT_TRUE(reader_->Request(RequestKind::kSuspend).ok());
  ASSERT_EQ(kill(pid_, SIGCONT), 0);
  WaitStopped();
  EXPECT_EQ(reader_->minibatches(), 3u);  // one more batch, then stopped
  ASSERT_EQ(kill(pid_, SIGCONT), 0);
  EXPECT_EQ(WaitExit(), 0);
  EXPECT_EQ(reader_->Read().suspend_count, 2u);
}

TEST_F(ClientTest, WithoutTheEnvironmentTheLibraryIsANoOp) {
  ChildConfig cfg;
  cfg.batches = 0;
  cfg.hold_at = -1;
  std::fflush(nullptr);
  pid_ = fork();
  ASSERT_GE(pid_, 0);
  if (pid_ == 0) {
    unsetenv("GANDIVA_PROGRESS_FILE");
    unsetenv("GANDIVA_RESUME_FROM");
    if (gandiva_init() != GANDIVA_INACTIVE) _exit(10);
    if (gandiva_init() != GANDIVA_INACTIVE) _exit(11);  // idempotent
    if (gandiva_active() != 0) _exit(12);
    if (gandiva_restore() != 0) _exit(13);
    for (int i = 0; i < 7; ++i) {
      if (gandiva_step() != GANDIVA_STEP_CONTINUE) _exit(14);
    }
    if (gandiva_minibatches() != 7) _exit(15);
    if (gandiva_checkpoint_done(0) != GANDIVA_E_STATE) _exit(16);
    if (gandiva_report_metric(1.5) != GANDIVA_E_STATE) _exit(18);
    // No handler: SIGUSR1 keeps its default action (terminate).
    struct sigaction sa {};
    sigaction(SIGUSR1, nullptr, &sa);
    if (sa.sa_handler != SIG_DFL) _exit(17);
    gandiva_shutdown();
    _exit(0);
  }
  EXPECT_EQ(WaitExit(), 0);
  EXPECT_FALSE(std::filesystem::exists(page_path_));
}

// The job's metric reaches the page with the mini-batch count then; the
// last report wins, and the agent reads it after the job exited.
TEST_F(ClientTest, AReportedMetricIsOnThePageWithItsMinibatch) {
  ASSERT_EQ(gandiva_page_create(page_path_.c_str()), GANDIVA_OK);
  double value = -1;
  uint64_t at = 9, reports = 9;
  ASSERT_EQ(gandiva_page_read_metric(page_path_.c_str(), &value, &at, &reports),
            GANDIVA_OK);
  EXPECT_EQ(reports, 0u);  // none yet
  std::fflush(nullptr);
  pid_ = fork();
  ASSERT_GE(pid_, 0);
  if (pid_ == 0) {
    setenv("GANDIVA_PROGRESS_FILE", page_path_.c_str(), 1);
    unsetenv("GANDIVA_RESUME_FROM");
    if (gandiva_init() != GANDIVA_OK) _exit(10);
    for (int i = 0; i < 3; ++i) (void)gandiva_step();
    if (gandiva_report_metric(0.25) != GANDIVA_OK) _exit(11);
    (void)gandiva_step();
    if (gandiva_report_metric(-0.125) != GANDIVA_OK) _exit(12);
    gandiva_shutdown();
    _exit(0);
  }
  EXPECT_EQ(WaitExit(), 0);
  ASSERT_EQ(gandiva_page_read_metric(page_path_.c_str(), &value, &at, &reports),
            GANDIVA_OK);
  EXPECT_EQ(value, -0.125);
  EXPECT_EQ(at, 4u);
  EXPECT_EQ(reports, 2u);
  auto reader = ProgressReader::Open(page_path_);
  ASSERT_TRUE(reader.ok());
  const ProgressSnapshot snap = reader->Read();
  EXPECT_EQ(snap.metric.value, -0.125);
  EXPECT_EQ(snap.metric.minibatches, 4u);
  EXPECT_EQ(snap.metric.reports, 2u);
  EXPECT_EQ(gandiva_page_read_metric(nullptr, &value, &at, &reports),
            GANDIVA_E_INVALID);
}

TEST_F(ClientTest, InitReportsABadOrMissingPage) {
  ChildConfig cfg;
  cfg.batches = 1;
  cfg.env = AgentEnv();
  Start(cfg, /*create_page=*/false, /*wait=*/false);
  EXPECT_EQ(WaitExit(), 100 - GANDIVA_E_IO);
  std::ofstream(page_path_) << std::string(GANDIVA_PAGE_FILE_SIZE, 'x');
  Start(cfg, /*create_page=*/false, /*wait=*/false);
  EXPECT_EQ(WaitExit(), 100 - GANDIVA_E_BAD_PAGE);
}

TEST(ClientApi, StrerrorNamesEveryCode) {
  EXPECT_STREQ(gandiva_strerror(GANDIVA_OK), "GANDIVA_OK");
  EXPECT_STREQ(gandiva_strerror(GANDIVA_E_HOOK), "GANDIVA_E_HOOK");
  EXPECT_STREQ(gandiva_strerror(GANDIVA_E_NO_CHECKPOINT_DIR),
               "GANDIVA_E_NO_CHECKPOINT_DIR");
  EXPECT_STREQ(gandiva_strerror(12345), "GANDIVA_E_UNKNOWN");
}

}  // namespace
}  // namespace gandiva::client
