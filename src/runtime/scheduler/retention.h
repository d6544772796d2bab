// Retention: which ended jobs the daemon forgets (--keep-ended-jobs,
// --keep-ended-for), decided from when they ended alone. Pure: the time is
// an argument. The daemon forgets them at its log's compactions
// (SchedulerServer::Impl::ForgetEndedJobs) and compacts early when a
// retention check finds enough of them (CheckRetention).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace gandiva::runtime {

struct Retention {
  // The ended jobs kept, those that ended last (0: all).
  int64_t keep_ended_jobs = 0;
  // Jobs that ended longer ago than this are forgotten however few
  // (0: no limit).
  double keep_ended_for_s = 0;

  // An ended job that may be forgotten: when it ended (wall clock, us), its
  // id.
  using Ended = std::pair<int64_t, int32_t>;

  bool Forgets() const { return keep_ended_jobs > 0 || keep_ended_for_s > 0; }

  // Of `ended` ended jobs, how many are beyond keep_ended_jobs.
  size_t BeyondKept(size_t ended) const {
    const auto keep = static_cast<size_t>(keep_ended_jobs);
    return keep > 0 && ended > keep ? ended - keep : 0;
  }

  // How many of `ended` ended longer than keep_ended_for_s before `now_us`.
  size_t PastAge(std::span<const Ended> ended, int64_t now_us) const {
    if (keep_ended_for_s <= 0) return 0;
    const int64_t cutoff =
        now_us - static_cast<int64_t>(keep_ended_for_s * 1e6);
    return static_cast<size_t>(
        std::count_if(ended.begin(), ended.end(),
                      [&](const Ended& e) { return e.first < cutoff; }));
  }

  // Whether a check between compactions compacts now (which forgets them):
  // some job is past its age, or the jobs beyond those kept are a tenth of
  // them at least (fewer wait for the next compaction).
  bool CompactsNow(std::span<const Ended> ended, int64_t now_us) const {
    const auto keep = static_cast<size_t>(keep_ended_jobs);
    return BeyondKept(ended.size()) >= std::max<size_t>(1, keep / 10) ||
           PastAge(ended, now_us) > 0;
  }

  // The ids to forget: beyond those kept, and past their age, those that
  // ended first, in no particular order.
  std::vector<int32_t> ToForget(std::vector<Ended> ended,
                                int64_t now_us) const {
    if (!Forgets()) return {};
    const auto forget = static_cast<std::ptrdiff_t>(
        std::max(BeyondKept(ended.size()), PastAge(ended, now_us)));
    if (forget == 0) return {};
    std::nth_element(ended.begin(), ended.begin() + forget - 1, ended.end());
    std::vector<int32_t> out;
    for (auto it = ended.begin(); it != ended.begin() + forget; ++it) {
      out.push_back(it->second);
    }
    return out;
  }
};

}  // namespace gandiva::runtime
