#include "core/policies/gandiva_fair.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "core/policies/placement.h"

namespace gandiva::core {
namespace {

// Free GPUs for `need`: best fit on one server, else across servers.
std::optional<std::vector<GpuId>> FindGpus(const Cluster& cluster, int need) {
  return BestFitGpus(cluster, need, /*gather=*/true);
}

// On its way to run, or running through a mechanism: its GPUs are taken.
bool Arriving(const Job& j) {
  return j.busy() && j.in_flight != ActionKind::kSuspend &&
         j.in_flight != ActionKind::kUnpack;
}

int GpusOf(const Job& j) {
  return j.placed() ? static_cast<int>(j.gpus.size()) : j.spec.gpus;
}

}  // namespace

GandivaFairPolicy::GandivaFairPolicy(GandivaFairOptions options)
    : options_(std::move(options)), queues_(options_.queues) {
  if (options_.quantum <= Duration::Seconds(0)) {
    options_.quantum = Duration::Seconds(60);
  }
  if (options_.half_life <= Duration::Seconds(0)) {
    options_.half_life = Duration::Seconds(3600);
  }
  const size_t n = queues_.size();
  credits_.credit.assign(n, 0.0);
  credits_.share.assign(n, 0.0);
  credits_.holds.assign(n, 0.0);
}

void GandivaFairPolicy::SaveState(SnapshotWriter& w) const {
  w.I64(static_cast<int64_t>(queues_.size()));
  w.At(credits_.at);
  for (size_t q = 0; q < queues_.size(); ++q) {
    w.F64(credits_.credit[q]);
    w.F64(credits_.share[q]);
    w.F64(credits_.holds[q]);
  }
}

void GandivaFairPolicy::LoadState(SnapshotReader& r) {
  live_.MarkStale();
  tally_stale_ = true;
  const int64_t n = r.I64();
  if (!r.ok()) return;
  if (n != static_cast<int64_t>(queues_.size())) {
    r.Fail("the snapshot has " + std::to_string(n) + " queues, the policy " +
           std::to_string(queues_.size()));
    return;
  }
  Credits c;
  c.at = r.At();
  for (int64_t q = 0; q < n && r.ok(); ++q) {
    c.credit.push_back(r.F64());
    c.share.push_back(r.F64());
    c.holds.push_back(r.F64());
  }
  if (!r.ok() || !r.at_end()) return;
  credits_ = std::move(c);
}

void GandivaFairPolicy::Forget(const ClusterState& /*state*/,
                               std::span<const JobId> jobs) {
  live_.Forget(jobs);
  for (JobId id : jobs) {
    if (auto it = parts_.find(id); it != parts_.end()) {
      demand_[it->second.queue] -= it->second.demand;
      holds_[it->second.queue] -= it->second.holds;
      parts_.erase(it);
    }
  }
}

void GandivaFairPolicy::TakeQueues(const std::vector<QueueConfig>& queues) {
  QueueQuotas next(queues);
  Credits c;
  c.at = credits_.at;
  c.credit.assign(next.size(), 0.0);
  c.share.assign(next.size(), 0.0);
  c.holds.assign(next.size(), 0.0);
  for (size_t q = 0; q < queues_.size(); ++q) {
    if (const std::optional<size_t> now = next.Find(queues_.name(q))) {
      c.credit[*now] = credits_.credit[q];
    }
  }
  options_.queues = queues;
  queues_ = std::move(next);
  credits_ = std::move(c);
  // Every job's queue may have changed.
  tally_stale_ = true;
}

void GandivaFairPolicy::Integrate(Credits& c, Time now) const {
  if (c.at == Time::Never() || now <= c.at) return;
  // dc/dt = share - holds - c ln2 / half_life, with share and holds as
  // they were at `at`, solved exactly over the step.
  const double dt = (now - c.at).seconds();
  const double rate = std::log(2.0) / options_.half_life.seconds();
  const double kept = std::exp(-rate * dt);
  for (size_t q = 0; q < c.credit.size(); ++q) {
    c.credit[q] =
        c.credit[q] * kept + (c.share[q] - c.holds[q]) * (1 - kept) / rate;
  }
  c.at = now;
}

void GandivaFairPolicy::Retally(const ClusterState& state, JobId id) {
  if (auto it = parts_.find(id); it != parts_.end()) {
    demand_[it->second.queue] -= it->second.demand;
    holds_[it->second.queue] -= it->second.holds;
    parts_.erase(it);
  }
  if (!state.has_job(id)) return;
  const Job& j = state.job(id);
  if (IsTerminal(j.state)) return;
  Part part{queues_.Of(j.spec.vc), j.held ? 0 : GpusOf(j),
            j.state == JobState::kRunning ? GpusOf(j) : 0};
  demand_[part.queue] += part.demand;
  holds_[part.queue] += part.holds;
  parts_.emplace(id, part);
}

void GandivaFairPolicy::Refresh(const ClusterState& state) {
  const size_t n = queues_.size();
  std::vector<double> demand(n);
  for (size_t q = 0; q < n; ++q) {
    demand[q] = demand_[q];
    credits_.holds[q] = holds_[q];
  }
  credits_.share = queues_.Shares(demand, state.cluster().up_gpus());
  // Only leaves hold jobs, and only theirs are owed or owe.
  for (size_t q = 0; q < n; ++q) {
    if (!queues_.leaf(q)) credits_.share[q] = 0;
  }
  credits_.at = state.now();
}

GandivaFairPolicy::Deal GandivaFairPolicy::DealGpus(
    const ClusterState& state, const std::set<JobId>& live,
    const Credits& credits) const {
  const Time now = state.now();
  const size_t queues = queues_.size();
  Deal deal;
  deal.taken.assign(queues, 0);
  int left = state.cluster().up_gpus();
  // Each queue's candidates in its order: (key, job, GPUs).
  // (-priority, tier, turn of its owner, since, id): tier 0 runs in its
  // slice, 1 takes turns, 2 waits for a place among the turns; the owner's
  // turn (0 for each owner's first job of the tier, 1 for the second, ...)
  // makes a queue's users take turns job by job.
  using Key = std::tuple<int, int, int, Time, int32_t>;
  std::vector<std::vector<std::tuple<Key, JobId, int>>> lines(queues);
  // Jobs never run yet, by queue, in arrival order; and each queue's jobs
  // taking turns (run before, or holding GPUs).
  std::vector<std::vector<std::tuple<Key, JobId, int>>> fresh(queues);
  std::vector<int> turning(queues, 0);
  // Each queue's jobs decided already (starting or moving), by owner: they
  // count as their owners' first turns.
  std::vector<std::map<std::string_view, int>> decided(queues);
  for (JobId id : live) {
    const Job& j = state.job(id);
    const size_t q = queues_.Of(j.spec.vc);
    const int d = GpusOf(j);
    if (Arriving(j) || j.state == JobState::kMigrating) {
      // Decided already: it holds its GPUs.
      deal.chosen.insert(id);
      deal.taken[q] += d;
      left -= d;
      ++decided[q][j.spec.owner];
      continue;
    }
    if (j.held || j.busy() || j.awaits_start_retry(now)) continue;
    const bool running = j.state == JobState::kRunning;
    const bool in_slice = running && now - j.run_since < options_.quantum;
    const Time since = in_slice ? j.run_since : running ? now : j.waiting_since;
    const Key key{-j.spec.priority, in_slice ? 0 : 1, 0, since, id.value};
    if (!running && !j.launched) {
      fresh[q].emplace_back(key, id, d);
      continue;
    }
    ++turning[q];
    lines[q].emplace_back(key, id, d);
  }
  // A queue's jobs take turns, at most rotation_per_gpu of them per GPU of
  // its fair share: the first fresh jobs join the turns while there is
  // room; the others wait after every job taking turns, in arrival order.
  // Sorted; then, within a priority and tier, each owner's jobs in their
  // order and the owners in turn.
  auto interleave = [&state](std::vector<std::tuple<Key, JobId, int>>& line,
                             const std::map<std::string_view, int>& before) {
    for (auto& entry : line) std::get<2>(std::get<0>(entry)) = 0;
    std::sort(line.begin(), line.end());
    // One owner, and no other's job starting: turns keep this order.
    const std::string* only = nullptr;
    bool one = true;
    for (const auto& [key, id, d] : line) {
      const std::string& owner = state.job(id).spec.owner;
      if (only == nullptr) {
        only = &owner;
      } else if (owner != *only) {
        one = false;
        break;
      }
    }
    if (one && (before.empty() || (before.size() == 1 && only != nullptr &&
                                   before.begin()->first == *only))) {
      return;
    }
    std::map<std::tuple<int, int, std::string_view>, int> turns;
    for (auto& [key, id, d] : line) {
      const std::string& owner = state.job(id).spec.owner;
      const auto b = before.find(owner);
      std::get<2>(key) = (b == before.end() ? 0 : b->second) +
                         turns[{std::get<0>(key), std::get<1>(key), owner}]++;
    }
    std::sort(line.begin(), line.end());
  };
  for (size_t q = 0; q < queues; ++q) {
    interleave(fresh[q], decided[q]);
    const double cap =
        options_.rotation_per_gpu > 0
            ? options_.rotation_per_gpu * std::max(1.0, credits.share[q])
            : std::numeric_limits<double>::infinity();
    for (auto& [key, id, d] : fresh[q]) {
      if (turning[q] < cap) {
        ++turning[q];
      } else {
        std::get<1>(key) = 2;
      }
      lines[q].emplace_back(key, id, d);
    }
  }
  for (size_t q = 0; q < queues; ++q) interleave(lines[q], decided[q]);
  std::vector<std::vector<bool>> taken(queues);
  // What each queue's limit still allows, and whether any limits it.
  std::vector<int> room(queues, std::numeric_limits<int>::max());
  for (size_t q = 0; q < queues; ++q) {
    if (queues_.limit(q) >= 0) room[q] = queues_.limit(q);
  }
  auto charge = [&](size_t q, int d) {
    for (int up = static_cast<int>(q); up >= 0;
         up = queues_.parent(static_cast<size_t>(up))) {
      int& r = room[static_cast<size_t>(up)];
      if (r != std::numeric_limits<int>::max()) r -= d;
    }
  };
  auto room_of = [&](size_t q) {
    int r = std::numeric_limits<int>::max();
    for (int up = static_cast<int>(q); up >= 0;
         up = queues_.parent(static_cast<size_t>(up))) {
      r = std::min(r, room[static_cast<size_t>(up)]);
    }
    return r;
  };
  if (queues_.tree()) {
    for (size_t q = 0; q < queues; ++q) charge(q, deal.taken[q]);
  }
  auto take = [&](size_t q, size_t k) {
    const auto& [key, id, d] = lines[q][k];
    taken[q][k] = true;
    deal.taken[q] += d;
    left -= d;
    if (queues_.tree()) charge(q, d);
    deal.chosen.insert(id);
    deal.order.push_back(id);
  };
  // Turn by turn, the largest claim takes its queue's next job that fits
  // in what is left and in its queue's limits. Both only shrink, so a job
  // that does not fit now never will: each queue's cursor only moves on.
  std::vector<double> claim(queues);
  for (size_t q = 0; q < queues; ++q) {
    taken[q].assign(lines[q].size(), false);
    claim[q] = credits.share[q] +
               credits.credit[q] / options_.quantum.seconds() - deal.taken[q];
  }
  std::vector<size_t> next(queues, 0);
  while (left > 0) {
    int best = -1;
    for (size_t q = 0; q < queues; ++q) {
      size_t& k = next[q];
      if (k == lines[q].size()) continue;
      const int fits = queues_.tree() ? std::min(left, room_of(q)) : left;
      while (k < lines[q].size() &&
             (taken[q][k] || std::get<2>(lines[q][k]) > fits)) {
        ++k;
      }
      if (k == lines[q].size()) continue;
      if (best < 0 || claim[q] > claim[static_cast<size_t>(best)]) {
        best = static_cast<int>(q);
      }
    }
    if (best < 0) break;
    const size_t q = static_cast<size_t>(best);
    claim[q] -= std::get<2>(lines[q][next[q]]);
    take(q, next[q]);
  }
  return deal;
}

void GandivaFairPolicy::decide(const ClusterState& state, const Event& event,
                               Actions& out) {
  live_.Keep(state, event);
  // A report changes nothing this policy reads.
  if (std::holds_alternative<ProfileReport>(event.body)) return;
  // The credits up to now, under the shares and holdings since the last
  // event; then those of now.
  Integrate(credits_, state.now());
  if (const auto* changed = std::get_if<QueuesChanged>(&event.body)) {
    TakeQueues(changed->queues);
  }
  if (tally_stale_) {
    tally_stale_ = false;
    parts_.clear();
    demand_.assign(queues_.size(), 0);
    holds_.assign(queues_.size(), 0);
    for (JobId id : live_.jobs()) Retally(state, id);
  } else {
    if (const auto* a = std::get_if<JobArrived>(&event.body)) {
      Retally(state, a->id);
    }
    for (JobId id : state.changed_jobs()) Retally(state, id);
  }
  Refresh(state);
  Act(state, event, out);
  // What the actions changed counts from now on.
  for (JobId id : state.changed_jobs()) Retally(state, id);
  Refresh(state);
}

void GandivaFairPolicy::Act(const ClusterState& state, const Event& event,
                            Actions& out) {
  const Cluster& cluster = state.cluster();
  // New queues are acted on at once, as at a tick.
  const bool tick = std::holds_alternative<Tick>(event.body) ||
                    std::holds_alternative<QueuesChanged>(event.body);
  if (const auto* e = std::get_if<ActionFailed>(&event.body)) {
    // A failed resume leaves the job where it was: let it be placed anew
    // rather than retried on the same GPUs.
    const Job& j = state.job(e->job);
    if (j.state == JobState::kSuspended && !j.busy() && !j.held) {
      out.Requeue(j.id);
    }
  }
  if (!tick && cluster.free_gpus() == 0 && state.waiting().empty()) return;
  const Deal deal = DealGpus(state, live_.jobs(), credits_);
  const Time now = state.now();

  if (tick) {
    // The GPUs each queue's running jobs hold now.
    std::vector<int> holds(queues_.size(), 0);
    for (JobId id : live_.jobs()) {
      const Job& j = state.job(id);
      if (j.state == JobState::kRunning) {
        holds[queues_.Of(j.spec.vc)] += GpusOf(j);
      }
    }
    // The highest priority of each queue's jobs dealt GPUs that wait.
    std::vector<int> wants(queues_.size(), std::numeric_limits<int>::min());
    for (JobId id : deal.order) {
      const Job& j = state.job(id);
      if (j.state == JobState::kRunning) continue;
      int& w = wants[queues_.Of(j.spec.vc)];
      w = std::max(w, j.spec.priority);
    }
    std::vector<JobId> ending;
    for (JobId id : live_.jobs()) {
      const Job& j = state.job(id);
      if (j.state != JobState::kRunning || j.busy() || j.held ||
          deal.chosen.count(id)) {
        continue;
      }
      // In its first half quantum it is kept, unless its queue holds more
      // than its fair share or a job of higher priority of its queue waits
      // for it.
      const size_t q = queues_.Of(j.spec.vc);
      const bool young = now - j.run_since < options_.quantum / 2;
      if (young && holds[q] <= credits_.share[q] + 1e-9 &&
          wants[q] <= j.spec.priority) {
        continue;
      }
      ending.push_back(id);
    }
    for (JobId id : ending) out.Suspend(id);
  }
  // Suspended jobs run again where they are, if chosen and their GPUs are
  // idle; else they give their GPUs back.
  std::vector<JobId> suspended;
  for (const JobOrder& o : state.waiting()) suspended.push_back(o.id);
  for (JobId id : suspended) {
    const Job& j = state.job(id);
    if (j.held || j.busy() || j.state != JobState::kSuspended) continue;
    bool idle = deal.chosen.count(id) > 0;
    for (GpuId g : j.gpus) idle = idle && cluster.gpu(g).active == 0;
    if (idle) {
      out.Run(id);
    } else {
      out.Requeue(id);
    }
  }
  // The chosen queued jobs start where GPUs are free, in the order dealt.
  for (JobId id : deal.order) {
    if (cluster.free_gpus() == 0) break;
    const Job& j = state.job(id);
    if (j.state != JobState::kQueued) continue;
    if (auto gpus = PlaceAvoidingFailedStarts(
            cluster, j, [&] { return FindGpus(cluster, j.spec.gpus); })) {
      out.Start(j.id, std::move(*gpus));
    }
  }
}

std::shared_ptr<const QueueReasons> GandivaFairPolicy::ExplainQueue(
    const ClusterState& state, const QueueReasons* /*previous*/) const {
  auto reasons = std::make_shared<QueueWaitReasons>();
  reasons->gpus = OpenGpus::Of(state.cluster());
  if (state.queue().empty()) return reasons;
  // The deal of the next decision: nothing changed since the last one
  // (but after LoadState, when the live set is not kept yet).
  const std::set<JobId> live =
      live_.stale() ? LiveJobs::Of(state) : live_.jobs();
  Credits credits = credits_;
  Integrate(credits, state.now());
  const Deal deal = DealGpus(state, live, credits);
  for (const JobOrder& o : state.queue()) {
    const Job& j = state.job(o.id);
    const size_t q = queues_.Of(j.spec.vc);
    const std::string queue = queues_.Describe(q);
    std::string why;
    if (deal.chosen.count(o.id)) {
      why =
          "dealt GPUs by its queue's share; waiting for jobs suspended for "
          "it to give theirs back";
    } else {
      char owed[96];
      std::snprintf(owed, sizeof owed,
                    "fair share %.1f, quota %d, %s %.2f GPU-hours",
                    credits.share[q], queues_.quota(q),
                    credits.credit[q] >= 0 ? "owed" : "owing",
                    std::abs(credits.credit[q]) / 3600);
      why = queue + " is dealt " + std::to_string(deal.taken[q]) +
            " GPUs now (" + owed +
            "); the rest go to the queues with larger claims and to the "
            "jobs before it in its queue's turn (a quantum each)";
    }
    reasons->why.emplace(o.id, std::move(why));
  }
  return reasons;
}

}  // namespace gandiva::core
