// The job side of the gandiva protocol: implements client/gandiva_client.h.
//
// All mutable library state is process-global. The training thread owns it;
// the signal handlers touch only the lock-free atomics g_sig_*.
#include "client/gandiva_client.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "client/page_io.h"

namespace {

using gandiva::client::internal::MonotonicNs;
using gandiva::client::internal::PageMapping;

constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr auto kRelease = std::memory_order_release;
constexpr auto kAcquire = std::memory_order_acquire;

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<bool>::is_always_lock_free,
              "signal handlers need lock-free atomics");

// Written by the signal handlers: CLOCK_MONOTONIC time the first not yet
// served signal of its kind arrived, 0 if none.
std::atomic<uint64_t> g_sig_suspend_ns{0};
std::atomic<uint64_t> g_sig_checkpoint_ns{0};
// True while a suspend is being served: a SIGTSTP arriving then (a duplicate
// of the request being served, or one queued while stopped) is dropped.
std::atomic<bool> g_serving_suspend{false};

struct Hooks {
  gandiva_hook_fn offload = nullptr;
  gandiva_hook_fn reload = nullptr;
  gandiva_checkpoint_fn save = nullptr;
  gandiva_checkpoint_fn load = nullptr;
  void* user_data = nullptr;
};

struct PendingExit {
  int status = 0;  // GANDIVA_EXIT_*; 0 = none pending
  bool from_word = false;
  uint32_t seq = 0;
};

struct EnvString {
  bool set = false;
  std::string value;
  const char* get() const { return set ? value.c_str() : nullptr; }
};

struct State {
  bool initialized = false;
  int init_result = GANDIVA_INACTIVE;
  pid_t owner_pid = 0;  // the process that attached (not forked children)
  PageMapping map;
  EnvString job_id, checkpoint_dir, resume_from;
  bool resume_wait = false;    // GANDIVA_RESUME_WAIT=1: warm start
  bool restore_begun = false;  // gandiva_restore_begin() returned 1
  Hooks hooks;
  std::atomic<uint64_t> count{0};
  uint32_t seen_seq = 0;
  PendingExit pending;
  bool exit_published = false;
  uint32_t target_world_size = 0;
  bool handlers_installed = false;
  struct sigaction old_tstp {};
  struct sigaction old_usr1 {};
  bool atexit_registered = false;
};

State& G() {
  static State state;
  return state;
}

// The page, if attached and this is the process that attached.
gandiva_progress_page* Page() {
  State& g = G();
  if (g.map.page == nullptr || getpid() != g.owner_pid) return nullptr;
  return g.map.page;
}

extern "C" void OnSigtstp(int /*signo*/) {
  int saved = errno;
  if (!g_serving_suspend.load(kRelaxed)) {
    uint64_t expected = 0;
    g_sig_suspend_ns.compare_exchange_strong(expected, MonotonicNs());
  }
  errno = saved;
}

extern "C" void OnSigusr1(int /*signo*/) {
  int saved = errno;
  uint64_t expected = 0;
  g_sig_checkpoint_ns.compare_exchange_strong(expected, MonotonicNs());
  errno = saved;
}

void ReadEnv(const char* name, EnvString* out) {
  const char* v = std::getenv(name);
  out->set = v != nullptr && v[0] != '\0';
  out->value = out->set ? v : "";
}

void SetState(gandiva_progress_page* page, uint32_t state) {
  page->state_changed_ns.store(MonotonicNs(), kRelaxed);
  page->state.store(state, kRelease);
}

// Starts serving a request: what, since when.
void PublishTaken(gandiva_progress_page* page, uint32_t kind,
                  uint64_t received_ns, uint32_t state) {
  page->last_kind.store(kind, kRelaxed);
  page->last_received_ns.store(received_ns, kRelaxed);
  page->last_effective_ns.store(0, kRelaxed);
  SetState(page, state);
}

// Ends serving a request: result, time, and (stored last) done_seq and
// served_count, so an agent that sees them sees everything before them.
void PublishDone(gandiva_progress_page* page, int result, bool from_word,
                 uint32_t seq) {
  page->last_result.store(result, kRelaxed);
  page->last_effective_ns.store(MonotonicNs(), kRelease);
  if (from_word) page->done_seq.store(seq, kRelease);
  page->served_count.fetch_add(1, kRelease);
}

void PublishExit(gandiva_progress_page* page, int status, bool from_word,
                 uint32_t seq) {
  State& g = G();
  page->exit_code.store(status, kRelaxed);
  SetState(page, GANDIVA_STATE_EXITED);
  PublishDone(page, GANDIVA_OK, from_word, seq);
  g.exit_published = true;
}

void PublishFailure(gandiva_progress_page* page, int error, bool from_word,
                    uint32_t seq) {
  SetState(page, GANDIVA_STATE_RUNNING);
  PublishDone(page, error, from_word, seq);
}

int ServeSuspend(gandiva_progress_page* page, uint64_t received_ns,
                 bool from_word, uint32_t seq) {
  State& g = G();
  g_serving_suspend.store(true, kRelaxed);
  g_sig_suspend_ns.store(0, kRelaxed);
  PublishTaken(page, GANDIVA_REQUEST_SUSPEND, received_ns,
               GANDIVA_STATE_SUSPENDING);
  int offload = g.hooks.offload ? g.hooks.offload(g.hooks.user_data) : 0;
  page->suspend_count.fetch_add(1, kRelaxed);
  SetState(page, GANDIVA_STATE_SUSPENDED);
  PublishDone(page, offload == 0 ? GANDIVA_OK : GANDIVA_E_HOOK, from_word, seq);
  // Stop here until the agent sends SIGCONT. The agent must see the process
  // stopped (waitpid WUNTRACED or /proc) before it continues it.
  raise(SIGSTOP);
  SetState(page, GANDIVA_STATE_RESUMING);
  int reload = g.hooks.reload ? g.hooks.reload(g.hooks.user_data) : 0;
  // The interval that ends at the next boundary includes the stop.
  page->rate_since.store(g.count.load(kRelaxed), kRelease);
  page->resumed_ns.store(MonotonicNs(), kRelease);
  SetState(page, GANDIVA_STATE_RUNNING);
  g_sig_suspend_ns.store(0, kRelaxed);
  g_serving_suspend.store(false, kRelaxed);
  return reload == 0 ? GANDIVA_STEP_RESUMED : GANDIVA_E_HOOK;
}

int ServeExit(gandiva_progress_page* page, uint32_t kind, uint32_t arg,
              uint64_t received_ns, bool from_word, uint32_t seq) {
  State& g = G();
  int status = GANDIVA_EXIT_MIGRATE;
  if (kind == GANDIVA_REQUEST_RESIZE) {
    status = GANDIVA_EXIT_RESIZE;
    g.target_world_size = arg;
    page->target_world_size.store(arg, kRelaxed);
  }
  PublishTaken(page, kind, received_ns, GANDIVA_STATE_CHECKPOINTING);
  if (!g.checkpoint_dir.set) {
    PublishFailure(page, GANDIVA_E_NO_CHECKPOINT_DIR, from_word, seq);
    return GANDIVA_E_NO_CHECKPOINT_DIR;
  }
  if (g.hooks.save == nullptr) {
    g.pending = PendingExit{status, from_word, seq};
    return GANDIVA_STEP_CHECKPOINT;
  }
  if (g.hooks.save(g.checkpoint_dir.value.c_str(), g.hooks.user_data) != 0) {
    PublishFailure(page, GANDIVA_E_HOOK, from_word, seq);
    return GANDIVA_E_HOOK;
  }
  PublishExit(page, status, from_word, seq);
  std::exit(status);
}

// After a suspend was served and the job continued: a checkpoint-and-exit or
// resize that arrived meanwhile (in the request word or by SIGUSR1) is served
// now, at the boundary where the job stopped. Returns true and sets *rc if
// one was served; a newer request of another kind stays for the next step.
bool ServeExitAfterResume(gandiva_progress_page* page, int* rc) {
  State& g = G();
  uint64_t word = page->request.load(kAcquire);
  uint32_t seq = gandiva_request_seq(word);
  uint32_t kind = gandiva_request_kind_of(word);
  bool word_exit =
      seq != g.seen_seq && (kind == GANDIVA_REQUEST_CHECKPOINT_EXIT ||
                            kind == GANDIVA_REQUEST_RESIZE);
  uint64_t sig_checkpoint = g_sig_checkpoint_ns.exchange(0, kRelaxed);
  if (!word_exit && sig_checkpoint == 0) return false;
  uint64_t received = sig_checkpoint != 0 ? sig_checkpoint : MonotonicNs();
  if (word_exit) {
    g.seen_seq = seq;
    page->ack_seq.store(seq, kRelease);
  } else {
    kind = GANDIVA_REQUEST_CHECKPOINT_EXIT;
  }
  *rc = ServeExit(page, kind, gandiva_request_arg(word), received, word_exit,
                  seq);
  return true;
}

void RestoreHandlers() {
  State& g = G();
  if (!g.handlers_installed) return;
  sigaction(SIGTSTP, &g.old_tstp, nullptr);
  sigaction(SIGUSR1, &g.old_usr1, nullptr);
  g.handlers_installed = false;
}

int InstallHandlers() {
  State& g = G();
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = OnSigtstp;
  if (sigaction(SIGTSTP, &sa, &g.old_tstp) != 0) return GANDIVA_E_SIGNAL;
  sa.sa_handler = OnSigusr1;
  if (sigaction(SIGUSR1, &sa, &g.old_usr1) != 0) {
    sigaction(SIGTSTP, &g.old_tstp, nullptr);
    return GANDIVA_E_SIGNAL;
  }
  g.handlers_installed = true;
  return GANDIVA_OK;
}

extern "C" void ShutdownAtExit() { gandiva_shutdown(); }

}  // namespace

extern "C" {

int gandiva_init(void) {
  State& g = G();
  if (g.initialized) return g.init_result;
  g.initialized = true;
  ReadEnv("GANDIVA_JOB_ID", &g.job_id);
  ReadEnv("GANDIVA_CHECKPOINT_DIR", &g.checkpoint_dir);
  ReadEnv("GANDIVA_RESUME_FROM", &g.resume_from);
  EnvString resume_wait;
  ReadEnv("GANDIVA_RESUME_WAIT", &resume_wait);
  g.resume_wait = resume_wait.set && resume_wait.value == "1";
  g.restore_begun = false;
  EnvString page_path;
  ReadEnv("GANDIVA_PROGRESS_FILE", &page_path);
  if (!page_path.set) return g.init_result = GANDIVA_INACTIVE;

  int rc = gandiva::client::internal::OpenPage(page_path.value.c_str(), &g.map);
  if (rc != GANDIVA_OK) return g.init_result = rc;
  rc = InstallHandlers();
  if (rc != GANDIVA_OK) {
    gandiva::client::internal::UnmapPage(&g.map);
    return g.init_result = rc;
  }
  g.owner_pid = getpid();
  g.exit_published = false;
  g.pending = PendingExit{};
  g_sig_suspend_ns.store(0, kRelaxed);
  g_sig_checkpoint_ns.store(0, kRelaxed);
  gandiva_progress_page* page = g.map.page;
  // Requests already taken by an earlier process on this page stay served.
  g.seen_seq = page->ack_seq.load(kAcquire);
  uint64_t count = g.count.load(kRelaxed);
  page->exit_code.store(-1, kRelaxed);
  page->pid.store(g.owner_pid, kRelaxed);
  page->minibatches.store(count, kRelaxed);
  page->rate_since.store(count, kRelaxed);
  page->restore_begin_ns.store(0, kRelaxed);
  page->restore_end_ns.store(0, kRelaxed);
  page->attached_ns.store(MonotonicNs(), kRelaxed);
  SetState(page, GANDIVA_STATE_RUNNING);
  if (!g.atexit_registered) {
    g.atexit_registered = std::atexit(ShutdownAtExit) == 0;
  }
  return g.init_result = GANDIVA_OK;
}

void gandiva_set_hooks(gandiva_hook_fn offload, gandiva_hook_fn reload,
                       gandiva_checkpoint_fn save, gandiva_checkpoint_fn load,
                       void* user_data) {
  G().hooks = Hooks{offload, reload, save, load, user_data};
}

int gandiva_restore_begin(int timeout_ms) {
  State& g = G();
  if (!g.initialized) return GANDIVA_E_STATE;
  if (!g.resume_from.set) return 0;
  gandiva_progress_page* page = Page();
  if (g.resume_wait) {
    std::string ready = g.resume_from.value + "/" GANDIVA_RESUME_READY_FILE;
    if (page != nullptr) SetState(page, GANDIVA_STATE_WAITING);
    uint64_t deadline =
        timeout_ms < 0
            ? 0
            : MonotonicNs() + static_cast<uint64_t>(timeout_ms) * 1000000ull;
    while (access(ready.c_str(), F_OK) != 0) {
      if (timeout_ms >= 0 && MonotonicNs() >= deadline) {
        if (page != nullptr) SetState(page, GANDIVA_STATE_RUNNING);
        return GANDIVA_E_STATE;
      }
      timespec ts{0, 2000000};  // 2 ms
      nanosleep(&ts, nullptr);
    }
  }
  g.restore_begun = true;
  if (page != nullptr) {
    page->restore_end_ns.store(0, kRelaxed);
    page->restore_begin_ns.store(MonotonicNs(), kRelease);
    SetState(page, GANDIVA_STATE_RESUMING);
  }
  return 1;
}

void gandiva_restore_end(void) {
  State& g = G();
  if (!g.restore_begun) return;
  g.restore_begun = false;
  if (gandiva_progress_page* page = Page()) {
    page->restore_end_ns.store(MonotonicNs(), kRelease);
    page->rate_since.store(g.count.load(kRelaxed), kRelease);
    SetState(page, GANDIVA_STATE_RUNNING);
  }
}

int gandiva_restore(void) {
  State& g = G();
  if (!g.initialized) return GANDIVA_E_STATE;
  if (!g.resume_from.set) return 0;
  if (g.hooks.load == nullptr) return GANDIVA_E_STATE;
  int rc = gandiva_restore_begin(-1);
  if (rc != 1) return rc;
  int load = g.hooks.load(g.resume_from.value.c_str(), g.hooks.user_data);
  gandiva_restore_end();
  return load == 0 ? 1 : GANDIVA_E_HOOK;
}

int gandiva_step(void) { return gandiva_step_flags(0); }

int gandiva_step_flags(unsigned flags) {
  State& g = G();
  uint64_t now = MonotonicNs();
  uint64_t j = g.count.load(kRelaxed);
  g.count.store(j + 1, kRelaxed);
  gandiva_progress_page* page = Page();
  if (page == nullptr) return GANDIVA_STEP_CONTINUE;
  page->boundary_ns[j % GANDIVA_PAGE_RING].store(now, kRelaxed);
  page->minibatches.store(j + 1, kRelease);
  if (g.pending.status != 0) return GANDIVA_STEP_CHECKPOINT;
  if (g.exit_published || (flags & GANDIVA_STEP_COUNT_ONLY) != 0) {
    return GANDIVA_STEP_CONTINUE;
  }

  // Gather what is pending: the request word and the signal flags.
  uint64_t word = page->request.load(kAcquire);
  uint32_t seq = gandiva_request_seq(word);
  bool from_word = seq != g.seen_seq;
  uint32_t word_kind = from_word ? gandiva_request_kind_of(word)
                                 : static_cast<uint32_t>(GANDIVA_REQUEST_NONE);
  if (from_word) {
    g.seen_seq = seq;
    page->ack_seq.store(seq, kRelease);
  }
  uint64_t sig_checkpoint = g_sig_checkpoint_ns.exchange(0, kRelaxed);
  uint64_t sig_suspend = g_sig_suspend_ns.load(kRelaxed);

  // Checkpoint-and-exit and resize win over suspend: the job leaves anyway.
  if (word_kind == GANDIVA_REQUEST_RESIZE ||
      word_kind == GANDIVA_REQUEST_CHECKPOINT_EXIT || sig_checkpoint != 0) {
    uint32_t kind =
        word_kind == GANDIVA_REQUEST_RESIZE
            ? static_cast<uint32_t>(GANDIVA_REQUEST_RESIZE)
            : static_cast<uint32_t>(GANDIVA_REQUEST_CHECKPOINT_EXIT);
    uint64_t received = sig_checkpoint != 0 ? sig_checkpoint : now;
    g_sig_suspend_ns.store(0, kRelaxed);
    return ServeExit(page, kind, gandiva_request_arg(word), received, from_word,
                     seq);
  }
  if (word_kind == GANDIVA_REQUEST_SUSPEND || sig_suspend != 0) {
    int rc = ServeSuspend(page, sig_suspend != 0 ? sig_suspend : now, from_word,
                          seq);
    // Asked to checkpoint while suspended: save here, where the job stopped,
    // instead of training one more mini-batch first.
    int exit_rc = 0;
    if (ServeExitAfterResume(page, &exit_rc)) return exit_rc;
    return rc;
  }
  if (from_word) {
    // A NONE request cancels an unserved one; nothing to do but finish it.
    page->done_seq.store(seq, kRelease);
  }
  return GANDIVA_STEP_CONTINUE;
}

int gandiva_checkpoint_done(int result) {
  State& g = G();
  gandiva_progress_page* page = Page();
  if (g.pending.status == 0 || page == nullptr) return GANDIVA_E_STATE;
  PendingExit p = g.pending;
  g.pending = PendingExit{};
  if (result != 0) {
    PublishFailure(page, GANDIVA_E_HOOK, p.from_word, p.seq);
    return 0;
  }
  PublishExit(page, p.status, p.from_word, p.seq);
  return p.status;
}

uint64_t gandiva_minibatches(void) { return G().count.load(kRelaxed); }

void gandiva_set_minibatches(uint64_t count) {
  State& g = G();
  g.count.store(count, kRelaxed);
  if (gandiva_progress_page* page = Page()) {
    page->minibatches.store(count, kRelease);
    page->rate_since.store(count, kRelease);
  }
}

int gandiva_report_metric(double value) {
  gandiva_progress_page* page = Page();
  if (page == nullptr) return GANDIVA_E_STATE;
  gandiva::client::internal::WriteMetric(page, value);
  return GANDIVA_OK;
}

int gandiva_active(void) { return Page() != nullptr ? 1 : 0; }
const char* gandiva_job_id(void) { return G().job_id.get(); }
const char* gandiva_checkpoint_dir(void) { return G().checkpoint_dir.get(); }
const char* gandiva_resume_from(void) { return G().resume_from.get(); }
uint32_t gandiva_target_world_size(void) { return G().target_world_size; }

void gandiva_shutdown(void) {
  State& g = G();
  if (g.map.page != nullptr && getpid() == g.owner_pid) {
    gandiva_progress_page* page = g.map.page;
    if (!g.exit_published) {
      page->exit_code.store(0, kRelaxed);
      SetState(page, GANDIVA_STATE_EXITED);
      g.exit_published = true;
    }
    RestoreHandlers();
    gandiva::client::internal::UnmapPage(&g.map);
  }
  // A forked child keeps its parent's mapping; it just forgets it.
  g.map = PageMapping{};
  g.initialized = false;
  g.init_result = GANDIVA_INACTIVE;
  g.pending = PendingExit{};
  g.job_id = EnvString{};
  g.checkpoint_dir = EnvString{};
  g.resume_from = EnvString{};
  g.resume_wait = false;
  g.restore_begun = false;
}

const char* gandiva_strerror(int code) {
  switch (code) {
    case GANDIVA_OK:
      return "GANDIVA_OK";
    case GANDIVA_INACTIVE:
      return "GANDIVA_INACTIVE";
    case GANDIVA_E_IO:
      return "GANDIVA_E_IO";
    case GANDIVA_E_BAD_PAGE:
      return "GANDIVA_E_BAD_PAGE";
    case GANDIVA_E_SIGNAL:
      return "GANDIVA_E_SIGNAL";
    case GANDIVA_E_HOOK:
      return "GANDIVA_E_HOOK";
    case GANDIVA_E_NO_CHECKPOINT_DIR:
      return "GANDIVA_E_NO_CHECKPOINT_DIR";
    case GANDIVA_E_STATE:
      return "GANDIVA_E_STATE";
    case GANDIVA_E_INVALID:
      return "GANDIVA_E_INVALID";
    default:
      return "GANDIVA_E_UNKNOWN";
  }
}

int gandiva_page_create(const char* path) {
  if (path == nullptr) return GANDIVA_E_INVALID;
  PageMapping m;
  int rc = gandiva::client::internal::CreatePage(path, 0600, &m);
  gandiva::client::internal::UnmapPage(&m);
  return rc;
}

int gandiva_page_read(const char* path, gandiva_page_info* out) {
  if (path == nullptr || out == nullptr) return GANDIVA_E_INVALID;
  PageMapping m;
  int rc = gandiva::client::internal::OpenPage(path, &m);
  if (rc != GANDIVA_OK) return rc;
  gandiva::client::internal::ReadPageInfo(*m.page, out);
  gandiva::client::internal::UnmapPage(&m);
  return GANDIVA_OK;
}

int gandiva_page_read_metric(const char* path, double* value,
                             uint64_t* minibatches, uint64_t* reports) {
  if (path == nullptr || value == nullptr || minibatches == nullptr ||
      reports == nullptr) {
    return GANDIVA_E_INVALID;
  }
  PageMapping m;
  int rc = gandiva::client::internal::OpenPage(path, &m);
  if (rc != GANDIVA_OK) return rc;
  const auto metric = gandiva::client::internal::ReadMetric(*m.page);
  gandiva::client::internal::UnmapPage(&m);
  *value = metric.value;
  *minibatches = metric.minibatches;
  *reports = metric.reports;
  return GANDIVA_OK;
}

int64_t gandiva_page_request(const char* path, uint32_t kind, uint32_t arg) {
  if (path == nullptr) return GANDIVA_E_INVALID;
  PageMapping m;
  int rc = gandiva::client::internal::OpenPage(path, &m);
  if (rc != GANDIVA_OK) return rc;
  int64_t seq = gandiva::client::internal::PostRequest(m.page, kind, arg);
  gandiva::client::internal::UnmapPage(&m);
  return seq;
}

uint64_t gandiva_monotonic_ns(void) { return MonotonicNs(); }

}  // extern "C"
