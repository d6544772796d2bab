#include "core/policies/gandiva_fair.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <queue>
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
  w.I64(static_cast<int64_t>(credits_.users.size()));
  for (const auto& [key, u] : credits_.users) {
    w.I64(static_cast<int64_t>(key.first));
    w.Str(key.second);
    w.F64(u.credit);
    w.F64(u.share);
    w.F64(u.holds);
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
  // Users' credits: none in a snapshot from before they were kept.
  if (r.ok() && !r.at_end()) {
    const int64_t users = r.I64();
    for (int64_t i = 0; i < users && r.ok(); ++i) {
      const int64_t q = r.I64();
      std::string owner = r.Str();
      UserCredit u;
      u.credit = r.F64();
      u.share = r.F64();
      u.holds = r.F64();
      if (r.ok() && (q < 0 || q >= n)) {
        r.Fail("a user's credit names queue " + std::to_string(q) + " of " +
               std::to_string(n));
      }
      if (r.ok()) c.users[{static_cast<size_t>(q), std::move(owner)}] = u;
    }
  }
  if (!r.ok() || !r.at_end()) return;
  credits_ = std::move(c);
}

void GandivaFairPolicy::Forget(const ClusterState& /*state*/,
                               std::span<const JobId> jobs) {
  live_.Forget(jobs);
  for (JobId id : jobs) {
    if (auto it = parts_.find(id); it != parts_.end()) {
      Untally(it->second);
      parts_.erase(it);
    }
  }
}

void GandivaFairPolicy::Untally(const Part& part) {
  demand_[part.queue] -= part.demand;
  holds_[part.queue] -= part.holds;
  auto u = users_.find({part.queue, part.owner});
  if (u == users_.end()) return;
  u->second.first -= part.demand;
  u->second.second -= part.holds;
  if (u->second.first == 0 && u->second.second == 0) users_.erase(u);
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
  for (const auto& [key, u] : credits_.users) {
    if (const std::optional<size_t> now = next.Find(queues_.name(key.first))) {
      c.users[{*now, key.second}] = u;
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
  for (auto& [key, u] : c.users) {
    u.credit = u.credit * kept + (u.share - u.holds) * (1 - kept) / rate;
  }
  c.at = now;
}

void GandivaFairPolicy::Retally(const ClusterState& state, JobId id) {
  if (auto it = parts_.find(id); it != parts_.end()) {
    Untally(it->second);
    parts_.erase(it);
  }
  if (!state.has_job(id)) return;
  const Job& j = state.job(id);
  if (IsTerminal(j.state)) return;
  Part part{queues_.Of(j.spec.vc), j.spec.owner, j.held ? 0 : GpusOf(j),
            j.state == JobState::kRunning ? GpusOf(j) : 0};
  demand_[part.queue] += part.demand;
  holds_[part.queue] += part.holds;
  auto& user = users_[{part.queue, part.owner}];
  user.first += part.demand;
  user.second += part.holds;
  parts_.emplace(id, std::move(part));
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
  // Each leaf's share split among its users asking, max-min (none gets
  // more than they ask; what one cannot use goes to the others).
  for (auto it = credits_.users.begin(); it != credits_.users.end();) {
    UserCredit& u = it->second;
    u.share = 0;
    u.holds = 0;
    // A user owed or owing next to nothing, with no job: forgotten.
    if (!users_.contains(it->first) && std::abs(u.credit) < 1e-3) {
      it = credits_.users.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = users_.begin(); it != users_.end();) {
    const size_t q = it->first.first;
    auto end = it;
    std::vector<double> asks;
    while (end != users_.end() && end->first.first == q) {
      asks.push_back(end->second.first);
      ++end;
    }
    const std::vector<double> split =
        FairShares(asks, std::vector<double>(asks.size(), 0.0),
                   std::vector<double>(asks.size(), 1.0), credits_.share[q]);
    for (size_t k = 0; it != end; ++it, ++k) {
      UserCredit& u = credits_.users[it->first];
      u.share = split[k];
      u.holds = it->second.second;
    }
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
  // (-priority, tier, since, id): tier 0 runs in its slice, 1 takes turns,
  // 2 waits for a place among the turns; within a priority and tier the
  // queue's users then take turns by their claims (by_users).
  using Key = std::tuple<int, int, Time, int32_t>;
  using Entry = std::tuple<Key, JobId, int>;
  std::vector<std::vector<Entry>> lines(queues);
  // Jobs never run yet, by queue, in arrival order; and each queue's jobs
  // taking turns (run before, or holding GPUs).
  std::vector<std::vector<Entry>> fresh(queues);
  std::vector<int> turning(queues, 0);
  // The GPUs of each queue's jobs decided already (starting or moving), by
  // owner: dealt to their owners first.
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
      decided[q][j.spec.owner] += d;
      continue;
    }
    if (j.held || j.busy() || j.awaits_start_retry(now)) continue;
    const bool running = j.state == JobState::kRunning;
    const bool in_slice = running && now - j.run_since < options_.quantum;
    const Time since = in_slice ? j.run_since : running ? now : j.waiting_since;
    const Key key{-j.spec.priority, in_slice ? 0 : 1, since, id.value};
    if (!running && !j.launched) {
      fresh[q].emplace_back(key, id, d);
      continue;
    }
    ++turning[q];
    lines[q].emplace_back(key, id, d);
  }
  // Sorted; then, within a priority and tier, the queue's users take
  // turns: the one with the largest claim takes their next job, where a
  // user's claim is their share of the queue now + their credit / quantum
  // - the GPUs dealt to them so far (those decided already first); ties to
  // the job first in the line. So users of equal standing take turns job
  // by job, and one owed GPU time in the queue goes first.
  const double quantum_s = options_.quantum.seconds();
  auto by_users = [&](std::vector<Entry>& line, size_t q,
                      const std::map<std::string_view, int>& before) {
    std::sort(line.begin(), line.end());
    // One owner, and no other's job decided: nothing to reorder.
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
    std::map<std::string_view, double> claim;
    for (const auto& [key, id, d] : line) {
      const std::string& owner = state.job(id).spec.owner;
      if (claim.contains(owner)) continue;
      double c = 0;
      if (auto u = credits.users.find({q, owner}); u != credits.users.end()) {
        c = u->second.share + u->second.credit / quantum_s;
      }
      if (auto b = before.find(owner); b != before.end()) c -= b->second;
      claim.emplace(owner, c);
    }
    std::vector<Entry> out;
    out.reserve(line.size());
    for (size_t i = 0; i < line.size();) {
      size_t end = i;
      while (end < line.size() &&
             std::get<0>(std::get<0>(line[end])) ==
                 std::get<0>(std::get<0>(line[i])) &&
             std::get<1>(std::get<0>(line[end])) ==
                 std::get<1>(std::get<0>(line[i]))) {
        ++end;
      }
      // Each owner's jobs of the run, in order.
      std::map<std::string_view, std::vector<size_t>> mine;
      for (size_t k = i; k < end; ++k) {
        mine[state.job(std::get<1>(line[k])).spec.owner].push_back(k);
      }
      // (claim, -next index, owner): the largest on top.
      using Turn = std::tuple<double, std::ptrdiff_t, std::string_view>;
      std::priority_queue<Turn> turns;
      std::map<std::string_view, size_t> at;
      for (const auto& [owner, ks] : mine) {
        turns.emplace(claim[owner], -static_cast<std::ptrdiff_t>(ks[0]), owner);
        at[owner] = 0;
      }
      while (!turns.empty()) {
        const std::string_view owner = std::get<2>(turns.top());
        turns.pop();
        const std::vector<size_t>& ks = mine[owner];
        const size_t k = ks[at[owner]++];
        out.push_back(line[k]);
        double& c = claim[owner];
        c -= std::get<2>(line[k]);
        if (at[owner] < ks.size()) {
          turns.emplace(c, -static_cast<std::ptrdiff_t>(ks[at[owner]]), owner);
        }
      }
      i = end;
    }
    line = std::move(out);
  };
  for (size_t q = 0; q < queues; ++q) {
    by_users(fresh[q], q, decided[q]);
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
  for (size_t q = 0; q < queues; ++q) by_users(lines[q], q, decided[q]);
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
    users_.clear();
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
