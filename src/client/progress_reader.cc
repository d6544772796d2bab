#include "client/progress_reader.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "client/gandiva_client.h"
#include "client/page_io.h"

namespace gandiva::client {

using internal::PageMapping;

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kNew:
      return "new";
    case JobState::kRunning:
      return "running";
    case JobState::kSuspending:
      return "suspending";
    case JobState::kSuspended:
      return "suspended";
    case JobState::kResuming:
      return "resuming";
    case JobState::kCheckpointing:
      return "checkpointing";
    case JobState::kExited:
      return "exited";
    case JobState::kWaiting:
      return "waiting for checkpoint";
  }
  return "unknown";
}

std::string_view RequestKindName(RequestKind kind) {
  switch (kind) {
    case RequestKind::kNone:
      return "none";
    case RequestKind::kSuspend:
      return "suspend";
    case RequestKind::kCheckpointAndExit:
      return "checkpoint-and-exit";
    case RequestKind::kResize:
      return "resize";
  }
  return "unknown";
}

core::Status CreateProgressPage(const std::string& path, mode_t mode) {
  PageMapping m;
  int rc = internal::CreatePage(path.c_str(), mode, &m);
  if (rc != GANDIVA_OK) {
    return core::IoError("cannot create progress page " + path + ": " +
                         std::strerror(errno));
  }
  internal::UnmapPage(&m);
  return core::Status::Ok();
}

std::optional<int64_t> ProgressSnapshot::last_request_latency_ns() const {
  if (served_count == 0 || last_effective_ns < last_received_ns ||
      last_received_ns == 0) {
    return std::nullopt;
  }
  return static_cast<int64_t>(last_effective_ns - last_received_ns);
}

core::StatusOr<ProgressReader> ProgressReader::Open(const std::string& path) {
  PageMapping m;
  int rc = internal::OpenPage(path.c_str(), &m);
  if (rc == GANDIVA_E_IO) {
    return core::IoError("cannot map progress page " + path + ": " +
                         std::strerror(errno));
  }
  if (rc != GANDIVA_OK) {
    return core::InvalidArgument(
        "not a gandiva progress page of major version " +
        std::to_string(GANDIVA_PAGE_VERSION_MAJOR) + ": " + path);
  }
  return ProgressReader(path, m.page, m.length);
}

ProgressReader::ProgressReader(ProgressReader&& other) noexcept
    : path_(std::move(other.path_)),
      page_(std::exchange(other.page_, nullptr)),
      length_(std::exchange(other.length_, 0)) {}

ProgressReader& ProgressReader::operator=(ProgressReader&& other) noexcept {
  if (this != &other) {
    PageMapping old{page_, length_};
    internal::UnmapPage(&old);
    path_ = std::move(other.path_);
    page_ = std::exchange(other.page_, nullptr);
    length_ = std::exchange(other.length_, 0);
  }
  return *this;
}

ProgressReader::~ProgressReader() {
  PageMapping m{page_, length_};
  internal::UnmapPage(&m);
}

ProgressSnapshot ProgressReader::Read() const {
  gandiva_page_info info;
  internal::ReadPageInfo(*page_, &info);
  ProgressSnapshot s;
  s.version_major = info.version_major;
  s.version_minor = info.version_minor;
  s.pid = info.pid;
  s.state = static_cast<JobState>(info.state);
  s.minibatches = info.minibatches;
  s.last_boundary_ns = info.last_boundary_ns;
  if (info.rate_window >= 2) s.rate_per_second = info.rate;
  s.rate_window = info.rate_window;
  s.request_seq = info.request_seq;
  s.ack_seq = info.ack_seq;
  s.done_seq = info.done_seq;
  s.last_kind = static_cast<RequestKind>(info.last_kind);
  s.last_result = info.last_result;
  s.last_received_ns = info.last_received_ns;
  s.last_effective_ns = info.last_effective_ns;
  s.served_count = info.served_count;
  s.suspend_count = info.suspend_count;
  s.resumed_ns = info.resumed_ns;
  s.exit_code = info.exit_code;
  s.target_world_size = info.target_world_size;
  s.restore_begin_ns = info.restore_begin_ns;
  s.restore_end_ns = info.restore_end_ns;
  s.metric = internal::ReadMetric(*page_);
  return s;
}

pid_t ProgressReader::pid() const {
  return page_->pid.load(std::memory_order_acquire);
}

JobState ProgressReader::state() const {
  return static_cast<JobState>(page_->state.load(std::memory_order_acquire));
}

uint64_t ProgressReader::minibatches() const {
  return page_->minibatches.load(std::memory_order_acquire);
}

std::optional<double> ProgressReader::MinibatchRate() const {
  internal::RateEstimate r = internal::ComputeRate(*page_);
  if (r.window < 2) return std::nullopt;
  return r.per_second;
}

std::optional<int64_t> ProgressReader::LastRequestLatencyNs() const {
  return Read().last_request_latency_ns();
}

core::StatusOr<uint32_t> ProgressReader::Request(RequestKind kind,
                                                 uint32_t arg) {
  int64_t seq = internal::PostRequest(page_, static_cast<uint32_t>(kind), arg);
  if (seq <= 0) {
    return core::InvalidArgument("request " +
                                 std::string(RequestKindName(kind)) + ": arg " +
                                 std::to_string(arg) + " out of range");
  }
  return static_cast<uint32_t>(seq);
}

bool ProgressReader::IsDone(uint32_t seq) const {
  uint32_t done = page_->done_seq.load(std::memory_order_acquire);
  // Sequence numbers wrap at 2^32; compare in modular order.
  return static_cast<int32_t>(done - seq) >= 0;
}

bool ProcessIsStopped(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ...": comm may contain spaces or parentheses; the state
  // follows the last ')'.
  const char* close = std::strrchr(buf, ')');
  if (close == nullptr || close[1] != ' ') return false;
  char state = close[2];
  return state == 'T';
}

}  // namespace gandiva::client
