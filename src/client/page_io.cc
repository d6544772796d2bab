#include "client/page_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>

namespace gandiva::client::internal {
namespace {

constexpr auto kAcquire = std::memory_order_acquire;
constexpr auto kRelaxed = std::memory_order_relaxed;

uint64_t LoadMagic(const gandiva_progress_page& page) {
  // The header is plain data written before the magic is published; the
  // magic itself is read and written through atomic_ref.
  return std::atomic_ref<const uint64_t>(page.magic).load(kAcquire);
}

int MapFd(int fd, PageMapping* out) {
  void* addr = mmap(nullptr, GANDIVA_PAGE_FILE_SIZE, PROT_READ | PROT_WRITE,
                    MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) return GANDIVA_E_IO;
  out->page = static_cast<gandiva_progress_page*>(addr);
  out->length = GANDIVA_PAGE_FILE_SIZE;
  return GANDIVA_OK;
}

}  // namespace

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

int CreatePage(const char* path, mode_t mode, PageMapping* out) {
  *out = PageMapping{};
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return GANDIVA_E_IO;
  if (ftruncate(fd, GANDIVA_PAGE_FILE_SIZE) != 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return GANDIVA_E_IO;
  }
  int rc = MapFd(fd, out);
  int saved = errno;
  close(fd);
  errno = saved;
  if (rc != GANDIVA_OK) return rc;
  // The file is all zeros; construct the page object in it.
  auto* page = new (out->page) gandiva_progress_page();
  page->version_major = GANDIVA_PAGE_VERSION_MAJOR;
  page->version_minor = GANDIVA_PAGE_VERSION_MINOR;
  page->page_size = sizeof(gandiva_progress_page);
  page->created_ns = MonotonicNs();
  page->state.store(GANDIVA_STATE_NEW, kRelaxed);
  std::atomic_ref<uint64_t>(page->magic)
      .store(GANDIVA_PAGE_MAGIC, std::memory_order_release);
  return GANDIVA_OK;
}

int OpenPage(const char* path, PageMapping* out) {
  *out = PageMapping{};
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return GANDIVA_E_IO;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return GANDIVA_E_IO;
  }
  if (st.st_size < static_cast<off_t>(GANDIVA_PAGE_FILE_SIZE)) {
    close(fd);
    return GANDIVA_E_BAD_PAGE;
  }
  int rc = MapFd(fd, out);
  int saved = errno;
  close(fd);
  errno = saved;
  if (rc != GANDIVA_OK) return rc;
  rc = ValidatePage(*out->page, out->length);
  if (rc != GANDIVA_OK) UnmapPage(out);
  return rc;
}

void UnmapPage(PageMapping* m) {
  if (m->page != nullptr) munmap(m->page, m->length);
  *m = PageMapping{};
}

int ValidatePage(const gandiva_progress_page& page, size_t length) {
  if (length < sizeof(gandiva_progress_page)) return GANDIVA_E_BAD_PAGE;
  if (LoadMagic(page) != GANDIVA_PAGE_MAGIC) return GANDIVA_E_BAD_PAGE;
  if (page.version_major != GANDIVA_PAGE_VERSION_MAJOR) {
    return GANDIVA_E_BAD_PAGE;
  }
  if (page.page_size < sizeof(gandiva_progress_page) ||
      page.page_size > length) {
    return GANDIVA_E_BAD_PAGE;
  }
  return GANDIVA_OK;
}

RateEstimate ComputeRate(const gandiva_progress_page& page) {
  constexpr uint64_t kRing = GANDIVA_PAGE_RING;
  RateEstimate best;
  // Retry a few times if the job passed boundaries while we read; the last
  // attempt is used as it is (its monotonicity check still holds).
  for (int attempt = 0; attempt < 4; ++attempt) {
    RateEstimate est;
    uint64_t c1 = page.minibatches.load(kAcquire);
    uint64_t since = page.rate_since.load(kAcquire);
    if (c1 == 0) return est;
    uint64_t hi = c1 - 1;
    uint64_t t_hi = page.boundary_ns[hi % kRing].load(kRelaxed);
    est.last_boundary_ns = t_hi;
    if (t_hi == 0 || hi < since) {
      best = est;
    } else {
      uint64_t lo = hi;
      uint64_t t_lo = t_hi;
      while (lo > since && hi - lo + 1 < kRing) {
        uint64_t t = page.boundary_ns[(lo - 1) % kRing].load(kRelaxed);
        if (t == 0 || t > t_lo) break;  // overwritten or never written
        t_lo = t;
        --lo;
      }
      est.window = static_cast<uint32_t>(hi - lo + 1);
      if (est.window >= 2 && t_hi > t_lo) {
        est.per_second = static_cast<double>(hi - lo) * 1e9 /
                         static_cast<double>(t_hi - t_lo);
      } else {
        est.window = 1;
      }
      best = est;
    }
    if (page.minibatches.load(kAcquire) == c1) break;
  }
  return best;
}

void ReadPageInfo(const gandiva_progress_page& page, gandiva_page_info* out) {
  *out = gandiva_page_info{};
  out->version_major = page.version_major;
  out->version_minor = page.version_minor;
  out->pid = page.pid.load(kAcquire);
  out->state = page.state.load(kAcquire);
  // served_count first: the last_* fields are stored before it is bumped.
  out->served_count = page.served_count.load(kAcquire);
  out->done_seq = page.done_seq.load(kAcquire);
  out->ack_seq = page.ack_seq.load(kAcquire);
  out->last_kind = page.last_kind.load(kAcquire);
  out->last_result = page.last_result.load(kAcquire);
  out->last_received_ns = page.last_received_ns.load(kAcquire);
  out->last_effective_ns = page.last_effective_ns.load(kAcquire);
  out->suspend_count = page.suspend_count.load(kAcquire);
  out->resumed_ns = page.resumed_ns.load(kAcquire);
  out->exit_code = page.exit_code.load(kAcquire);
  out->target_world_size = page.target_world_size.load(kAcquire);
  const bool minor1 = page.version_minor >= 1;
  out->restore_begin_ns = minor1 ? page.restore_begin_ns.load(kAcquire) : 0;
  out->restore_end_ns = minor1 ? page.restore_end_ns.load(kAcquire) : 0;
  out->request_seq = gandiva_request_seq(page.request.load(kAcquire));
  out->minibatches = page.minibatches.load(kAcquire);
  RateEstimate rate = ComputeRate(page);
  out->rate = rate.per_second;
  out->rate_window = rate.window;
  out->last_boundary_ns = rate.last_boundary_ns;
}

int64_t PostRequest(gandiva_progress_page* page, uint32_t kind, uint32_t arg) {
  if (kind > GANDIVA_REQUEST_RESIZE || arg > GANDIVA_REQUEST_ARG_MAX) {
    return GANDIVA_E_INVALID;
  }
  // The agent is the only writer of the word, so read-increment-store is
  // safe; the job only loads it.
  uint32_t seq = gandiva_request_seq(page->request.load(kRelaxed)) + 1;
  if (seq == 0) seq = 1;  // after 2^32 requests; 0 means "never"
  page->request_posted_ns.store(MonotonicNs(), kRelaxed);
  page->request.store(gandiva_request_pack(seq, kind, arg),
                      std::memory_order_release);
  return seq;
}

Metric ReadMetric(const gandiva_progress_page& page) {
  for (;;) {
    const uint64_t before = page.metric_seq.load(std::memory_order_acquire);
    Metric m;
    const uint64_t bits = page.metric_bits.load(std::memory_order_acquire);
    m.minibatches = page.metric_minibatches.load(std::memory_order_acquire);
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t after = page.metric_seq.load(std::memory_order_relaxed);
    if (before % 2 != 0 || before != after) continue;  // being written
    std::memcpy(&m.value, &bits, sizeof bits);
    m.reports = before / 2;
    return m;
  }
}

void WriteMetric(gandiva_progress_page* page, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  const uint64_t seq = page->metric_seq.load(std::memory_order_relaxed);
  page->metric_seq.store(seq + 1, std::memory_order_relaxed);  // odd
  std::atomic_thread_fence(std::memory_order_release);
  page->metric_bits.store(bits, std::memory_order_relaxed);
  page->metric_minibatches.store(
      page->minibatches.load(std::memory_order_relaxed),
      std::memory_order_relaxed);
  page->metric_seq.store(seq + 2, std::memory_order_release);  // even
}

}  // namespace gandiva::client::internal
