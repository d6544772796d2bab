// UsageLedger: GPU-time used, by queue and user, kept by the hour.
//
// A job is charged its GPUs for as long as it is running (its state is
// kRunning: a start or resume under way included, a packed job charged as if
// alone), to its queue (JobSpec::vc) and owner. The scheduler notes each job
// an event changed (Scheduler::usage); what a running job has used so far is
// charged when it is asked for, so a report always reaches the present.
//
// Hours are Time's: in the daemon, whose times are Unix time, they are the
// clock's hours (UTC). Hours older than `keep` are dropped. Plain value:
// thread-compatible.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <string>

#include "core/ids.h"
#include "core/job.h"
#include "core/snapshot.h"
#include "core/time.h"

namespace gandiva::core {

struct UsageKey {
  std::string queue;  // JobSpec::vc ("": the shared queue)
  std::string user;   // JobSpec::owner
  auto operator<=>(const UsageKey&) const = default;
};

class UsageLedger {
 public:
  static constexpr Duration kHour = Duration::Seconds(3600);

  explicit UsageLedger(Duration keep = Duration::Seconds(35 * 24 * 3600))
      : keep_(keep) {}

  // Takes `job` as it is at `now`: what it ran since it was last noted is
  // charged; from now on it is charged its GPUs if it runs.
  void Note(const Job& job, Time now);

  // GPU-seconds used from the start of `from`'s hour to `now`, by queue and
  // user (only those that used some), the running jobs' time to `now`
  // included.
  std::map<UsageKey, double> Used(Time from, Time now) const;

  // The start of `t`'s hour.
  static Time HourStart(Time t);
  // The first hour kept (Time::Never when none is).
  Time first_hour() const;
  size_t hours() const { return hours_.size(); }
  size_t running() const { return open_.size(); }

  void Save(SnapshotWriter& w) const;
  // Reads what Save wrote; on bad bytes the reader fails.
  void Load(SnapshotReader& r);

 private:
  struct Open {
    Time since;
    int gpus = 0;
    UsageKey key;
  };
  // Charges `gpus` GPUs for [from, to) to `key`, split over the hours.
  void Charge(const UsageKey& key, Time from, Time to, int gpus);
  static int64_t HourOf(Time t);

  Duration keep_;
  // Hour index (Time micros / kHour) -> GPU-seconds by key.
  std::map<int64_t, std::map<UsageKey, double>> hours_;
  std::map<JobId, Open> open_;  // running jobs, charged up to `since`
};

}  // namespace gandiva::core
