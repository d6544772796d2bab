// Limits of the daemon's API that its clients check too.
#pragma once

namespace gandiva::runtime {

// The most jobs one SubmitJobs request may hold.
inline constexpr int kMaxJobsPerSubmit = 10000;

}  // namespace gandiva::runtime
