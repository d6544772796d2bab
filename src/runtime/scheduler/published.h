// What the daemon's loop publishes for readers that do not wait for it
// (ListJobs, GetJob, ListServers, the metrics, and the agent calls that
// need a job's spec or submission time), and the failure streaks of jobs'
// histories. The loop writes; readers on any thread read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>

#include "proto/gandiva.pb.h"
#include "runtime/scheduler/daemon_types.h"

namespace gandiva::runtime {

// The last snapshot; the jobs that ended for good, as last published; and
// every job's spec and submission time.
//
// A settled job is added (or updated) here before a snapshot without it is
// published, and its entry stays when it is looked up again (a snapshot's
// own entry wins), so a reader finds every job in one of the two. Settled
// jobs are kept out of the snapshot so that publishing costs the live jobs,
// not every job ever run; specs are kept out of the published infos so that
// publishing does not copy them.
//
// Thread-safety: every method may be called from any thread.
class Published {
 public:
  std::shared_ptr<const Snapshot> snapshot() const {
    std::lock_guard lock(snap_mu_);
    return snap_;
  }
  void Publish(std::shared_ptr<const Snapshot> s) {
    std::lock_guard lock(snap_mu_);
    snap_ = std::move(s);
  }

  void Settle(int64_t id, const rpc::JobInfo& info) {
    std::lock_guard lock(mu_);
    settled_[id] = info;
  }
  void AddSpec(int64_t id, const rpc::JobSpec& spec) {
    std::lock_guard lock(mu_);
    specs_[id] = std::make_shared<const rpc::JobSpec>(spec);
  }
  // When the job was submitted (wall clock, us), as the core has it: sent
  // with its starts and receives (StartJobRequest.submitted_us); with the
  // id, what tells it from another job of that id on an agent.
  void SetSubmitted(int32_t id, int64_t us) {
    std::lock_guard lock(mu_);
    submitted_[id] = us;
  }
  // 0: not known (the job has not arrived).
  int64_t SubmittedUs(int32_t id) const {
    std::lock_guard lock(mu_);
    auto it = submitted_.find(id);
    return it == submitted_.end() ? 0 : it->second;
  }
  // The daemon forgot these jobs (their rows archived).
  void Forget(std::span<const int32_t> ids) {
    std::lock_guard lock(mu_);
    for (int32_t id : ids) {
      settled_.erase(id);
      specs_.erase(id);
      submitted_.erase(id);
    }
  }

  // What readers see under one lock: the settled jobs and the specs.
  struct View {
    const std::map<int64_t, rpc::JobInfo>& settled;
    // Every job's spec, from its submission on; null when not known.
    const rpc::JobSpec* Spec(int64_t id) const {
      auto it = specs.find(id);
      return it == specs.end() ? nullptr : it->second.get();
    }
    const std::map<int64_t, std::shared_ptr<const rpc::JobSpec>>& specs;
  };
  // Calls f(View) with the lock held; returns what f returns.
  template <typename F>
  decltype(auto) Read(F&& f) const {
    std::lock_guard lock(mu_);
    return f(View{settled_, specs_});
  }

 private:
  mutable std::mutex snap_mu_;
  std::shared_ptr<const Snapshot> snap_ =
      std::make_shared<Snapshot>();  // guarded by snap_mu_
  mutable std::mutex mu_;
  std::map<int64_t, rpc::JobInfo> settled_;  // guarded by mu_
  std::map<int64_t, std::shared_ptr<const rpc::JobSpec>>
      specs_;                                       // guarded by mu_
  std::unordered_map<int32_t, int64_t> submitted_;  // guarded by mu_
};

// A job's failure just like its last history line (a policy asking each
// tick for a suspend an unreachable agent cannot do, say) is counted, not
// written; the next other line first writes how many there were.
//
// Thread-safety: every method may be called from any thread (the loop
// adds lines; GetJob reads a streak so far).
class FailureStreaks {
 public:
  // What to write for a new history line: the count of the streak it ends
  // (if that repeated), then the line itself; neither when the line
  // repeats the job's last failure (counted).
  struct Lines {
    std::optional<HistoryRow> ended;
    std::optional<HistoryRow> line;
  };
  Lines Add(HistoryRow line) {
    std::lock_guard lock(mu_);
    auto it = streaks_.find(line.job);
    if (it != streaks_.end() && !line.ok && it->second.action == line.action &&
        it->second.detail == line.detail) {
      ++it->second.repeats;
      it->second.last_us = line.time_us;
      return {};
    }
    Lines out;
    out.ended = EndLocked(line.job);
    if (!line.ok) {
      streaks_[line.job] =
          Streak{line.action, line.detail, line.time_us, line.time_us, 0};
    }
    out.line = std::move(line);
    return out;
  }
  // The count of the job's streak, if it repeated; the streak is over.
  std::optional<HistoryRow> End(int64_t job) {
    std::lock_guard lock(mu_);
    return EndLocked(job);
  }
  // Drops the job's streak without a line.
  void Forget(int64_t job) {
    std::lock_guard lock(mu_);
    streaks_.erase(job);
  }
  // The streak so far, as GetJob shows it, if it repeated.
  std::optional<rpc::HistoryEntry> SoFar(int64_t job) const {
    std::lock_guard lock(mu_);
    auto it = streaks_.find(job);
    if (it == streaks_.end() || it->second.repeats == 0) return std::nullopt;
    rpc::HistoryEntry e;
    e.set_time_us(it->second.last_us);
    e.set_action(it->second.action);
    e.set_ok(false);
    e.set_detail(Line(it->second) + " (so far)");
    return e;
  }

 private:
  struct Streak {
    std::string action, detail;
    int64_t first_us = 0, last_us = 0;
    int repeats = 0;
  };
  static std::string Line(const Streak& f) {
    char over[64];
    std::snprintf(over, sizeof over, "%.1f s",
                  static_cast<double>(f.last_us - f.first_us) / 1e6);
    return "failed the same way " + std::to_string(f.repeats) + " more time" +
           (f.repeats == 1 ? "" : "s") + " in a row, the last " + over +
           " after the first";
  }
  std::optional<HistoryRow> EndLocked(int64_t job) {
    auto it = streaks_.find(job);
    if (it == streaks_.end()) return std::nullopt;
    std::optional<HistoryRow> out;
    if (it->second.repeats > 0) {
      out = HistoryRow{job, it->second.last_us, it->second.action, false,
                       0,   Line(it->second)};
    }
    streaks_.erase(it);
    return out;
  }

  mutable std::mutex mu_;
  std::unordered_map<int64_t, Streak> streaks_;  // guarded by mu_
};

}  // namespace gandiva::runtime
