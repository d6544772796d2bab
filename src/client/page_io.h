// Internal: mapping, creating, validating and reading the progress page.
// Shared by the job-side shared library (gandiva_client) and the agent-side
// static library (gandiva_client_agent); not installed, not a public API.
//
// Thread-safety: the functions are thread-safe as far as the page protocol
// allows (one agent posts requests; one job thread writes job fields).
// Async-signal-safety: only MonotonicNs() is async-signal-safe.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "client/gandiva_client.h"
#include "client/progress_page.h"

namespace gandiva::client {

// A job's last reported metric (gandiva_report_metric, page minor 2) and
// the mini-batch count then; reports = 0: none yet.
struct Metric {
  double value = 0;
  uint64_t minibatches = 0;
  uint64_t reports = 0;
};

}  // namespace gandiva::client

namespace gandiva::client::internal {

// CLOCK_MONOTONIC in nanoseconds.
uint64_t MonotonicNs();

struct PageMapping {
  gandiva_progress_page* page = nullptr;
  size_t length = 0;
};

// Creates (or truncates) `path` with `mode`, sizes it to
// GANDIVA_PAGE_FILE_SIZE, writes an empty page (state NEW; magic last) and
// maps it. Returns GANDIVA_OK or GANDIVA_E_IO (errno tells why).
int CreatePage(const char* path, mode_t mode, PageMapping* out);

// Maps an existing page read-write and validates it. Returns GANDIVA_OK,
// GANDIVA_E_IO (errno tells why) or GANDIVA_E_BAD_PAGE.
int OpenPage(const char* path, PageMapping* out);

// Unmaps (no-op on an empty mapping) and clears `m`.
void UnmapPage(PageMapping* m);

// GANDIVA_OK if `length` bytes at `page` hold a page this code can use: magic,
// major version, and a page_size no smaller than ours. Else
// GANDIVA_E_BAD_PAGE.
int ValidatePage(const gandiva_progress_page& page, size_t length);

// The mini-batch rate over the last boundaries of the ring: up to
// GANDIVA_PAGE_RING boundaries (GANDIVA_PAGE_RING - 1 intervals), none before
// `rate_since`, and only timestamps that are consistent (a slot overwritten
// while it was read ends the window). `window` = boundaries used (0 or 1:
// no rate yet).
struct RateEstimate {
  double per_second = 0.0;
  uint32_t window = 0;
  uint64_t last_boundary_ns = 0;
};
RateEstimate ComputeRate(const gandiva_progress_page& page);

// Fills *out from the page, each field read atomically (acquire).
void ReadPageInfo(const gandiva_progress_page& page, gandiva_page_info* out);

// The job's last reported metric, read consistently (metric_seq,
// progress_page.h).
Metric ReadMetric(const gandiva_progress_page& page);
// The job's side: publishes `value` with the page's mini-batch count.
void WriteMetric(gandiva_progress_page* page, double value);

// Posts a request with the next sequence number; returns it (> 0), or
// GANDIVA_E_INVALID for an unknown kind or an arg above
// GANDIVA_REQUEST_ARG_MAX. Only one agent may post to a page.
int64_t PostRequest(gandiva_progress_page* page, uint32_t kind, uint32_t arg);

}  // namespace gandiva::client::internal
