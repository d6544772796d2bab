// Limits of the daemon's API that its clients check too.
#pragma once

#include <cstddef>

namespace gandiva::runtime {

// The most jobs one SubmitJobs request may hold.
inline constexpr int kMaxJobsPerSubmit = 10000;
// The most jobs one KillJobs, SuspendJobs or ResumeJobs request may name.
inline constexpr int kMaxJobsPerRequest = 10000;

// A ListJobs page: jobs when max_jobs is 0, the most it may ask for, and
// the size its jobs stop before (a page holds at least one).
inline constexpr int kDefaultJobsPerPage = 1000;
inline constexpr int kMaxJobsPerPage = 10000;
inline constexpr size_t kMaxPageBytes = size_t{1} << 20;

// An ApplyQueues request: the most bytes of its queues file, and of the
// file's name.
inline constexpr size_t kMaxQueuesFileBytes = size_t{1} << 20;
inline constexpr size_t kMaxQueuesSourceBytes = 4096;

}  // namespace gandiva::runtime
