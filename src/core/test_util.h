// Test helpers for the core: a scheduler driven by hand, with a fake world
// that completes actions when told to. For tests only.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/scheduler.h"

namespace gandiva::core::testing {

class Harness {
 public:
  Harness(std::unique_ptr<Policy> policy, int servers, ServerSpec spec = {},
          SchedulerOptions options = {})
      : scheduler_(std::move(policy), options) {
    for (int i = 0; i < servers; ++i) {
      spec.name = "s" + std::to_string(i);
      Send(ServerUp{spec, ServerId()});
    }
  }

  // Sends an event at the current time; returns the actions it caused and
  // remembers those that need a report.
  std::vector<Action> Send(EventBody body) {
    std::vector<Action> out;
    Status st = scheduler_.Handle(Event{now_, std::move(body)}, out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    for (const Action& a : out) {
      if (a.kind != ActionKind::kKill && a.kind != ActionKind::kSetPriority) {
        pending_.push_back(a);
      }
    }
    return out;
  }

  // Sends an event that may be refused; on success behaves like Send.
  Status TrySend(EventBody body) {
    std::vector<Action> out;
    Status st = scheduler_.Handle(Event{now_, std::move(body)}, out);
    for (const Action& a : out) {
      if (a.kind != ActionKind::kKill && a.kind != ActionKind::kSetPriority) {
        pending_.push_back(a);
      }
    }
    last_ = std::move(out);
    return st;
  }

  JobId Submit(int gpus, int priority = 0, bool elastic = false,
               std::string vc = "") {
    JobSpec spec;
    spec.gpus = gpus;
    spec.priority = priority;
    spec.elastic = elastic;
    spec.vc = std::move(vc);
    const JobId id(next_job_++);
    last_ = Send(JobArrived{id, spec});
    return id;
  }

  // Submits a job of `spec` as it is.
  JobId SubmitSpec(JobSpec spec) {
    const JobId id(next_job_++);
    last_ = Send(JobArrived{id, std::move(spec)});
    return id;
  }

  // Reports one pending action of `job` done; returns what it caused.
  std::vector<Action> Complete(JobId job) {
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (pending_[i].job != job) continue;
      Action a = pending_[i];
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      return Send(ActionDone{a.id, a.job, Duration()});
    }
    ADD_FAILURE() << "no pending action for job " << job.value;
    return {};
  }

  // Reports one pending action of `job` failed; returns what it caused.
  std::vector<Action> Fail(JobId job, bool permanent = false) {
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (pending_[i].job != job) continue;
      Action a = pending_[i];
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      return Send(ActionFailed{a.id, a.job, Duration(), "test", permanent});
    }
    ADD_FAILURE() << "no pending action for job " << job.value;
    return {};
  }

  // Reports every pending action done (in order), including those caused by
  // the reports, until none is pending. Returns all actions caused.
  std::vector<Action> CompleteAll() {
    std::vector<Action> caused;
    while (!pending_.empty()) {
      Action a = pending_.front();
      pending_.erase(pending_.begin());
      auto more = Send(ActionDone{a.id, a.job, Duration()});
      caused.insert(caused.end(), more.begin(), more.end());
    }
    return caused;
  }

  std::vector<Action> Tick() { return Send(core::Tick{}); }
  void Advance(Duration d) { now_ += d; }

  const ClusterState& state() const { return scheduler_.state(); }
  Scheduler& scheduler() { return scheduler_; }
  const Job& job(JobId id) const { return state().job(id); }
  const std::vector<Action>& last() const { return last_; }
  Time now() const { return now_; }

 private:
  Scheduler scheduler_;
  Time now_ = Time::Zero();
  int32_t next_job_ = 0;
  std::vector<Action> pending_;
  std::vector<Action> last_;
};

inline int CountKind(const std::vector<Action>& actions, ActionKind kind) {
  int n = 0;
  for (const Action& a : actions) n += a.kind == kind;
  return n;
}

inline std::vector<int> Locals(const Cluster& c, const std::vector<GpuId>& g) {
  std::vector<int> out;
  for (GpuId id : g) out.push_back(c.gpu(id).local);
  return out;
}

}  // namespace gandiva::core::testing
