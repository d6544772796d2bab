#include "core/policies/drf_reclaim.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/policies/placement.h"

namespace gandiva::core {
namespace {

int GpusOf(const Job& j) {
  return j.placed() ? static_cast<int>(j.gpus.size()) : j.spec.gpus;
}

// Holds its GPUs for its queue: running, or on its way to run; not being
// stopped.
bool Holding(const Job& j) {
  return (j.state == JobState::kRunning || j.state == JobState::kMigrating) &&
         j.in_flight != ActionKind::kSuspend;
}

// The lending order's key: GPUs held per GPU of quota; queues of quota 0
// after the others.
std::pair<int, double> LendKey(int held, int quota) {
  return quota > 0 ? std::pair(0, static_cast<double>(held) / quota)
                   : std::pair(1, static_cast<double>(held));
}

}  // namespace

DrfReclaimPolicy::DrfReclaimPolicy(DrfReclaimOptions options)
    : queues_(options.queues) {}

void DrfReclaimPolicy::LoadState(SnapshotReader& /*r*/) { live_.MarkStale(); }

void DrfReclaimPolicy::Forget(const ClusterState& /*state*/,
                              std::span<const JobId> jobs) {
  live_.Forget(jobs);
}

void DrfReclaimPolicy::decide(const ClusterState& state, const Event& event,
                              Actions& out) {
  live_.Keep(state, event);
  if (std::holds_alternative<ProfileReport>(event.body)) return;
  if (const auto* changed = std::get_if<QueuesChanged>(&event.body)) {
    queues_ = QueueQuotas(changed->queues);
  }
  const Cluster& cluster = state.cluster();
  // 1. Preempted jobs that have stopped (or failed to resume) give their
  // GPUs back.
  std::vector<JobId> stopped;
  for (const JobOrder& o : state.waiting()) stopped.push_back(o.id);
  for (JobId id : stopped) {
    const Job& j = state.job(id);
    if (!j.held && !j.busy() && j.state == JobState::kSuspended) {
      out.Requeue(id);
    }
  }
  if (state.queue().empty()) return;

  const size_t queues = queues_.size();
  const Time now = state.now();
  std::vector<int> held(queues, 0);
  int freeing = 0;
  for (JobId id : live_.jobs()) {
    const Job& j = state.job(id);
    if (j.in_flight == ActionKind::kSuspend) {
      freeing += GpusOf(j);
    } else if (Holding(j)) {
      held[queues_.Of(j.spec.vc)] += GpusOf(j);
    }
  }
  // Each queue's waiting jobs in its order (the queue's: priority, then
  // submission).
  std::vector<std::vector<JobId>> lines(queues);
  for (const JobOrder& o : state.queue()) {
    const Job& j = state.job(o.id);
    if (j.held || j.awaits_start_retry(now)) continue;
    lines[queues_.Of(j.spec.vc)].push_back(o.id);
  }
  // The free GPUs and those being freed claimed by owed jobs that wait.
  int claimed_free = 0;
  int claimed_freeing = 0;
  std::vector<std::vector<bool>> done(queues);
  auto start = [&](const Job& j) {
    if (cluster.free_gpus() - claimed_free < j.spec.gpus) return false;
    auto gpus = PlaceAvoidingFailedStarts(cluster, j, [&] {
      return BestFitGpus(cluster, j.spec.gpus, /*gather=*/true);
    });
    if (!gpus) return false;
    out.Start(j.id, std::move(*gpus));
    return true;
  };
  // Borrowers to preempt, by queue: running jobs, the latest started last
  // (taken from the back). Built when first needed.
  std::vector<std::vector<JobId>> borrowers;
  auto reclaim = [&](int short_by) {
    if (borrowers.empty()) {
      borrowers.resize(queues);
      for (JobId id : live_.jobs()) {
        const Job& j = state.job(id);
        const size_t v = queues_.Of(j.spec.vc);
        if (j.state == JobState::kRunning && !j.busy() && !j.held &&
            held[v] > queues_.quota(v)) {
          borrowers[v].push_back(id);
        }
      }
      for (auto& b : borrowers) {
        std::sort(b.begin(), b.end(), [&](JobId x, JobId y) {
          const Job& a = state.job(x);
          const Job& c = state.job(y);
          return std::pair(a.run_since, a.id) < std::pair(c.run_since, c.id);
        });
      }
    }
    // Choose, then act only if the choice covers what is short.
    std::vector<int> after = held;
    std::vector<size_t> taken(queues, 0);  // from the back of borrowers[v]
    std::vector<JobId> victims;
    while (short_by > 0) {
      int best = -1;
      std::pair<int, double> best_key;
      for (size_t v = 0; v < queues; ++v) {
        auto& b = borrowers[v];
        // Skip the jobs whose stop would take their queue below its quota.
        while (taken[v] < b.size() &&
               after[v] - GpusOf(state.job(b[b.size() - 1 - taken[v]])) <
                   queues_.quota(v)) {
          ++taken[v];
        }
        if (taken[v] == b.size() || after[v] <= queues_.quota(v)) continue;
        // Most over its quota first: the lending key, reversed.
        const std::pair<int, double> key = LendKey(after[v], queues_.quota(v));
        if (best < 0 || key > best_key) {
          best = static_cast<int>(v);
          best_key = key;
        }
      }
      if (best < 0) return false;
      const size_t v = static_cast<size_t>(best);
      const JobId id = borrowers[v][borrowers[v].size() - 1 - taken[v]];
      ++taken[v];
      const int d = GpusOf(state.job(id));
      after[v] -= d;
      short_by -= d;
      victims.push_back(id);
    }
    for (JobId id : victims) {
      out.Preempt(id);
      freeing += GpusOf(state.job(id));
      std::vector<JobId>& b = borrowers[queues_.Of(state.job(id).spec.vc)];
      b.erase(std::find(b.begin(), b.end(), id));
    }
    held = std::move(after);
    return true;
  };

  // 2. Quotas.
  for (size_t q = 0; q < queues; ++q) {
    done[q].assign(lines[q].size(), false);
    int owed = held[q];
    for (size_t k = 0; k < lines[q].size(); ++k) {
      const Job& j = state.job(lines[q][k]);
      const int d = j.spec.gpus;
      if (owed + d > queues_.quota(q)) continue;
      owed += d;
      done[q][k] = true;
      if (start(j)) {
        held[q] += d;
        continue;
      }
      const int free = cluster.free_gpus() - claimed_free;
      const int short_by = d - free - (freeing - claimed_freeing);
      if (short_by > 0 && !reclaim(short_by)) continue;
      claimed_free += free;
      claimed_freeing += d - free;
    }
  }
  // 3. Lending. What is free only shrinks, so a job that does not fit now
  // never will this decision: each queue's cursor only moves on.
  std::vector<size_t> next(queues, 0);
  while (cluster.free_gpus() - claimed_free > 0) {
    const int left = cluster.free_gpus() - claimed_free;
    int best = -1;
    std::pair<int, double> best_key;
    for (size_t q = 0; q < queues; ++q) {
      size_t& k = next[q];
      while (k < lines[q].size() &&
             (done[q][k] || state.job(lines[q][k]).spec.gpus > left)) {
        ++k;
      }
      if (k == lines[q].size()) continue;
      const std::pair<int, double> key = LendKey(held[q], queues_.quota(q));
      if (best < 0 || key < best_key) {
        best = static_cast<int>(q);
        best_key = key;
      }
    }
    if (best < 0) break;
    const size_t q = static_cast<size_t>(best);
    const Job& j = state.job(lines[q][next[q]]);
    done[q][next[q]] = true;
    if (start(j)) held[q] += j.spec.gpus;
  }
}

std::shared_ptr<const QueueReasons> DrfReclaimPolicy::ExplainQueue(
    const ClusterState& state, const QueueReasons* /*previous*/) const {
  auto reasons = std::make_shared<QueueWaitReasons>();
  reasons->gpus = OpenGpus::Of(state.cluster());
  if (state.queue().empty()) return reasons;
  std::vector<int> held(queues_.size(), 0);
  state.ForEachJob([&](const Job& j) {
    if (!IsTerminal(j.state) && Holding(j)) {
      held[queues_.Of(j.spec.vc)] += GpusOf(j);
    }
  });
  for (const JobOrder& o : state.queue()) {
    const Job& j = state.job(o.id);
    const size_t q = queues_.Of(j.spec.vc);
    const std::string holds = queues_.Describe(q) + " holds " +
                              std::to_string(held[q]) + " GPUs (quota " +
                              std::to_string(queues_.quota(q)) + ")";
    reasons->why.emplace(
        o.id, held[q] + j.spec.gpus <= queues_.quota(q)
                  ? holds +
                        "; within it, waiting for GPUs to free or for "
                        "borrowers to be preempted"
                  : holds +
                        "; waiting to borrow idle GPUs, lent first to "
                        "the queue holding the fewest per GPU of quota");
  }
  return reasons;
}

}  // namespace gandiva::core
