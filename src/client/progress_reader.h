// The agent side of the job protocol: create a job's progress page, read its
// progress (mini-batch count, smoothed rate, state, request latency) and post
// requests (suspend, checkpoint-and-exit, resize). See src/client/README.md.
//
// Thread-safety: a ProgressReader is thread-compatible; its const methods may
// be called concurrently. Request() must not race with another Request() on
// the same page (one agent, one poster). The job writes its fields
// concurrently with any of these reads; each field read is atomic.
// Not async-signal-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "client/page_io.h"
#include "client/progress_page.h"
#include "core/status.h"

namespace gandiva::client {

enum class JobState : uint32_t {
  kNew = GANDIVA_STATE_NEW,
  kRunning = GANDIVA_STATE_RUNNING,
  kSuspending = GANDIVA_STATE_SUSPENDING,
  kSuspended = GANDIVA_STATE_SUSPENDED,
  kResuming = GANDIVA_STATE_RESUMING,
  kCheckpointing = GANDIVA_STATE_CHECKPOINTING,
  kExited = GANDIVA_STATE_EXITED,
  kWaiting = GANDIVA_STATE_WAITING,  // warm start, waiting for a checkpoint
};
std::string_view JobStateName(JobState state);

enum class RequestKind : uint32_t {
  kNone = GANDIVA_REQUEST_NONE,  // cancels an unserved request
  kSuspend = GANDIVA_REQUEST_SUSPEND,
  kCheckpointAndExit = GANDIVA_REQUEST_CHECKPOINT_EXIT,
  kResize = GANDIVA_REQUEST_RESIZE,  // arg: target world size
};
std::string_view RequestKindName(RequestKind kind);

// The rate window: the rate is computed over at most this many most recent
// mini-batch boundaries (kRateWindow - 1 intervals), never across a suspend.
inline constexpr int kRateWindow = GANDIVA_PAGE_RING;

// Creates (or truncates) the page file at `path` (mode 0600 unless told),
// sized and initialized (state kNew), for the agent to pass to a job in
// GANDIVA_PROGRESS_FILE before starting it.
core::Status CreateProgressPage(const std::string& path, mode_t mode = 0600);

// One read of a page. Times are CLOCK_MONOTONIC ns (0 = never).
struct ProgressSnapshot {
  uint32_t version_major = 0;
  uint32_t version_minor = 0;
  pid_t pid = 0;  // 0 until the job attached
  JobState state = JobState::kNew;
  uint64_t minibatches = 0;
  uint64_t last_boundary_ns = 0;
  std::optional<double> rate_per_second;  // needs >= 2 boundaries in window
  uint32_t rate_window = 0;               // boundaries the rate spans
  uint32_t request_seq = 0;               // last request posted (by the agent)
  uint32_t ack_seq = 0;                   // last request the job took
  uint32_t done_seq = 0;                  // last request the job finished
  RequestKind last_kind = RequestKind::kNone;
  int32_t last_result = 0;  // 0 ok, else a GANDIVA_E_* code
  uint64_t last_received_ns = 0;
  uint64_t last_effective_ns = 0;
  uint64_t served_count = 0;
  uint64_t suspend_count = 0;
  uint64_t resumed_ns = 0;
  int32_t exit_code = 0;
  uint32_t target_world_size = 0;
  uint64_t restore_begin_ns = 0;  // restore from a checkpoint began (0: none)
  uint64_t restore_end_ns = 0;    // ... and finished
  Metric metric;                  // the job's last reported one (page minor 2)

  // last_effective_ns - last_received_ns of the last finished request.
  std::optional<int64_t> last_request_latency_ns() const;
};

class ProgressReader {
 public:
  // Maps the page at `path` (created with CreateProgressPage). Fails with
  // kIo if it cannot be opened or mapped, kInvalidArgument if it is not a
  // page of a major version this code knows.
  static core::StatusOr<ProgressReader> Open(const std::string& path);

  ProgressReader(ProgressReader&& other) noexcept;
  ProgressReader& operator=(ProgressReader&& other) noexcept;
  ProgressReader(const ProgressReader&) = delete;
  ProgressReader& operator=(const ProgressReader&) = delete;
  ~ProgressReader();

  const std::string& path() const { return path_; }

  // Every field, each read atomically.
  ProgressSnapshot Read() const;

  pid_t pid() const;
  JobState state() const;
  uint64_t minibatches() const;
  // Mini-batches per second over the last kRateWindow boundaries since the
  // last resume; nullopt until there are two such boundaries.
  std::optional<double> MinibatchRate() const;
  // Request-to-effect latency of the last request the job finished, from a
  // signal or from Request(); nullopt if none.
  std::optional<int64_t> LastRequestLatencyNs() const;

  // Posts a request with the next sequence number and returns it. The job
  // serves it at its next mini-batch boundary (send SIGTSTP / SIGUSR1 too if
  // you like; see README.md). kInvalidArgument if arg > 2^24 - 1.
  core::StatusOr<uint32_t> Request(RequestKind kind, uint32_t arg = 0);
  // True once the job finished request `seq` (or a later one).
  bool IsDone(uint32_t seq) const;

 private:
  ProgressReader(std::string path, gandiva_progress_page* page, size_t length)
      : path_(std::move(path)), page_(page), length_(length) {}

  std::string path_;
  gandiva_progress_page* page_ = nullptr;
  size_t length_ = 0;
};

// True if /proc says `pid` is stopped (state T). An agent must see the job
// stopped before it sends SIGCONT to resume it: the job publishes
// kSuspended just before it stops itself. (A parent can use waitpid with
// WUNTRACED instead.)
bool ProcessIsStopped(pid_t pid);

}  // namespace gandiva::client
