#include "core/policies/tiresias.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "core/policies/placement.h"

namespace gandiva::core {

namespace {

// Free GPUs for `need`: best fit on one server, else across servers.
std::optional<std::vector<GpuId>> FindGpus(const Cluster& cluster, int need) {
  if (cluster.free_gpus() < need) return std::nullopt;
  std::optional<std::vector<GpuId>> gpus;
  cluster.ForEachWithFree(need, [&](const Server& s) {
    gpus = FreeGpusOn(cluster, s, need);
    return true;
  });
  if (!gpus) gpus = GatherFreeGpus(cluster, need);
  return gpus;
}

// Running, not starting, resuming, suspending or migrating.
bool Training(const Job& j) {
  return j.state == JobState::kRunning && !j.busy();
}

// Neither running nor on its way to run.
bool Waiting(const Job& j) {
  return j.state == JobState::kQueued || j.state == JobState::kSuspended ||
         (j.state == JobState::kRunning && j.in_flight == ActionKind::kSuspend);
}

// Why the queued jobs wait under 2D-LAS (TiresiasPolicy::ExplainQueue).
class LasQueueReasons final : public QueueReasons {
 public:
  struct Row {
    int level = 0;        // its queue, 0 the highest
    double service = 0;   // GPU-seconds attained
    bool chosen = false;  // in the desired set
    int before = 0;       // jobs of the desired set before it
    int taken = 0;        // GPUs they take
    Duration promoted_in = Duration::Infinite();  // to queue 0, if waiting
  };
  std::shared_ptr<const QueuedJobTable<Row>> rows;
  OpenGpus gpus;
  int up_gpus = 0;
  int queues = 1;

  std::string Why(JobId job, int need) const override {
    const Row* row = rows->Find(job);
    if (row == nullptr || need > gpus.total) {
      return DefaultWaitReason(need, -1, gpus);
    }
    const std::string queue = "queue " + std::to_string(row->level) + " of " +
                              std::to_string(queues) + " (0 first)";
    if (row->chosen) {
      if (need <= gpus.free) return "placed at the next scheduling pass";
      return "its turn has come" + (queues > 1 ? " in " + queue : "") +
             ": it starts once the jobs preempted for it give back their "
             "GPUs (it needs " +
             std::to_string(need) + ", " + std::to_string(gpus.free) +
             (gpus.free == 1 ? " is" : " are") + " free)";
    }
    const bool one = row->before == 1;
    std::string why =
        (queues > 1 ? "in " + queue + ", with " : "with ") +
        std::to_string(std::llround(row->service)) +
        " GPU-seconds of service: " + std::to_string(row->before) +
        (one ? " job goes" : " jobs go") + " before it (" +
        (queues > 1 ? "higher priority, a higher queue, or "
                      "earlier in its own"
                    : "higher priority, or earlier") +
        ") and take" + (one ? "s " : " ") + std::to_string(row->taken) +
        " of the " + std::to_string(up_gpus) + " GPUs up; it needs " +
        std::to_string(need);
    if (row->level > 0 && !row->promoted_in.is_infinite()) {
      why += "; it goes to queue 0 once it has waited long enough (in " +
             SecondsText(row->promoted_in) + ")";
    }
    return why;
  }
};

}  // namespace

TiresiasPolicy::TiresiasPolicy(TiresiasOptions options, std::string name)
    : options_(std::move(options)), name_(std::move(name)) {
  std::sort(options_.queue_thresholds.begin(), options_.queue_thresholds.end());
}

double TiresiasPolicy::Attained(const Job& job, const Account& a,
                                Time now) const {
  double s = a.service;
  if (a.run_from != Time::Never() && now > a.run_from) {
    s += job.spec.gpus * (now - a.run_from).seconds();
  }
  return s;
}

int TiresiasPolicy::Level(const Job& job, const Account& a, Time now) const {
  const double s = Attained(job, a, now) - a.offset;
  const auto& t = options_.queue_thresholds;
  return static_cast<int>(std::upper_bound(t.begin(), t.end(), s) - t.begin());
}

double TiresiasPolicy::AttainedService(const ClusterState& state,
                                       JobId job) const {
  auto it = accounts_.find(job);
  if (it == accounts_.end()) return 0;
  return Attained(state.job(job), it->second, state.now());
}

int TiresiasPolicy::QueueOf(const ClusterState& state, JobId job) const {
  auto it = accounts_.find(job);
  if (it == accounts_.end()) return 0;
  return Level(state.job(job), it->second, state.now());
}

int TiresiasPolicy::Promotions(JobId job) const {
  auto it = accounts_.find(job);
  return it == accounts_.end() ? 0 : it->second.promotions;
}

void TiresiasPolicy::CloseInterval(const Job& job, Account& a, Time now) {
  if (a.run_from == Time::Never()) return;
  a.service = Attained(job, a, now);
  a.run_from = Time::Never();
  a.closed_at = now;
  a.waiting_from = now;
}

void TiresiasPolicy::Reconcile(const ClusterState& state) {
  const Time now = state.now();
  for (auto it = accounts_.begin(); it != accounts_.end();) {
    const Job& j = state.job(it->first);
    Account& a = it->second;
    if (IsTerminal(j.state)) {
      it = accounts_.erase(it);
      continue;
    }
    if (Training(j) && a.run_from == Time::Never()) {
      // Its start or resume is done (or a suspension failed: it never
      // stopped, but the time before the request was counted already).
      a.run_from = a.closed_at == Time::Never()
                       ? j.run_since
                       : std::max(j.run_since, a.closed_at);
    } else if (!Training(j) && a.run_from != Time::Never()) {
      CloseInterval(j, a, now);  // e.g. its server was lost
    }
    ++it;
  }
}

void TiresiasPolicy::decide(const ClusterState& state, const Event& event,
                            Actions& out) {
  if (std::holds_alternative<ProfileReport>(event.body)) return;
  if (const auto* e = std::get_if<JobArrived>(&event.body)) {
    Account a;
    a.waiting_from = state.now();
    accounts_[e->id] = a;
  }
  Reconcile(state);
  if (const auto* e = std::get_if<ActionFailed>(&event.body)) {
    // A failed resume leaves the job where it was: let it be placed anew
    // rather than retried on the same GPUs.
    const Job& j = state.job(e->job);
    if (j.state == JobState::kSuspended && !j.busy()) out.Requeue(j.id);
  }
  Plan(state, out);
}

void TiresiasPolicy::Plan(const ClusterState& state, Actions& out) {
  const Time now = state.now();
  const Cluster& cluster = state.cluster();
  // (-priority, queue, arrival, id): the order jobs get GPUs in.
  using Key = std::tuple<int, int, Time, JobId>;
  std::vector<Key> order;
  order.reserve(accounts_.size());
  for (auto& [id, a] : accounts_) {
    const Job& j = state.job(id);
    int level = Level(j, a, now);
    if (level > 0 && Waiting(j) && !options_.starve_limit.is_infinite() &&
        now - a.waiting_from >= options_.starve_limit) {
      a.offset = Attained(j, a, now);
      a.waiting_from = now;
      ++a.promotions;
      level = 0;
    }
    order.emplace_back(-j.spec.priority, level, j.submitted, id);
  }
  std::sort(order.begin(), order.end());

  // The desired set.
  std::vector<bool> desired(order.size(), false);
  int left = cluster.up_gpus();
  for (size_t i = 0; i < order.size(); ++i) {
    const Job& j = state.job(std::get<3>(order[i]));
    // An operator's hold, or a start that failed and waits to be tried
    // again: not chosen.
    if (j.held || j.awaits_start_retry(now)) continue;
    const int need = j.spec.gpus;
    if (need <= left) {
      desired[i] = true;
      left -= need;
    }
  }

  // Preempt those outside it; give back the GPUs of the preempted.
  for (size_t i = 0; i < order.size(); ++i) {
    const JobId id = std::get<3>(order[i]);
    const Job& j = state.job(id);
    if (j.busy()) continue;  // decided again when its mechanism is done
    if (j.state == JobState::kRunning && !desired[i] && !j.held) {
      CloseInterval(j, accounts_.at(id), now);
      out.Suspend(id);
    } else if (j.state == JobState::kSuspended) {
      bool idle = desired[i];
      for (GpuId g : j.gpus) idle = idle && cluster.gpu(g).active == 0;
      if (idle) {
        out.Run(id);  // chosen again before it gave its GPUs back
      } else {
        out.Requeue(id);
      }
    }
  }

  // Place the chosen queued jobs in order, where GPUs are free.
  for (size_t i = 0; i < order.size() && cluster.free_gpus() > 0; ++i) {
    if (!desired[i]) continue;
    const Job& j = state.job(std::get<3>(order[i]));
    if (j.state != JobState::kQueued) continue;
    if (auto gpus = PlaceAvoidingFailedStarts(
            cluster, j, [&] { return FindGpus(cluster, j.spec.gpus); })) {
      out.Start(j.id, std::move(*gpus));
    }
  }
}

std::shared_ptr<const QueueReasons> TiresiasPolicy::ExplainQueue(
    const ClusterState& state, const QueueReasons* /*previous*/) const {
  // Plan's order and desired set, as the next decision would take them
  // (a starving job counts as promoted).
  const Time now = state.now();
  using Key = std::tuple<int, int, Time, JobId>;
  std::vector<Key> order;
  order.reserve(accounts_.size());
  std::map<JobId, LasQueueReasons::Row> queued;
  for (const auto& [id, a] : accounts_) {
    const Job& j = state.job(id);
    int level = Level(j, a, now);
    const bool waits = Waiting(j) && !options_.starve_limit.is_infinite();
    if (level > 0 && waits && now - a.waiting_from >= options_.starve_limit) {
      level = 0;
    }
    order.emplace_back(-j.spec.priority, level, j.submitted, id);
    if (j.state != JobState::kQueued) continue;
    LasQueueReasons::Row& row = queued[id];
    row.level = level;
    row.service = Attained(j, a, now);
    if (level > 0 && waits) {
      row.promoted_in = options_.starve_limit - (now - a.waiting_from);
    }
  }
  std::sort(order.begin(), order.end());
  const int up = state.cluster().up_gpus();
  int left = up, chosen = 0;
  for (const Key& k : order) {
    const Job& j = state.job(std::get<3>(k));
    if (j.held || j.awaits_start_retry(now)) continue;
    auto it = queued.find(j.id);
    if (it != queued.end()) {
      it->second.before = chosen;
      it->second.taken = up - left;
    }
    if (j.spec.gpus <= left) {
      left -= j.spec.gpus;
      ++chosen;
      if (it != queued.end()) it->second.chosen = true;
    }
  }
  auto r = std::make_shared<LasQueueReasons>();
  r->rows = QueuedJobTable<LasQueueReasons::Row>::Of(
      state, nullptr, [&](const Job& j) {
        auto it = queued.find(j.id);
        return it == queued.end() ? LasQueueReasons::Row{} : it->second;
      });
  r->gpus = OpenGpus::Of(state.cluster());
  r->up_gpus = up;
  r->queues = static_cast<int>(options_.queue_thresholds.size()) + 1;
  return r;
}

void TiresiasPolicy::Forget(const ClusterState& /*state*/,
                            std::span<const JobId> jobs) {
  for (JobId id : jobs) accounts_.erase(id);
}

void TiresiasPolicy::SaveState(SnapshotWriter& w) const {
  w.I64(static_cast<int64_t>(accounts_.size()));
  for (const auto& [job, a] : accounts_) {
    w.Id(job);
    w.F64(a.service);
    w.F64(a.offset);
    w.At(a.run_from);
    w.At(a.closed_at);
    w.At(a.waiting_from);
    w.I32(a.promotions);
  }
}

void TiresiasPolicy::LoadState(SnapshotReader& r) {
  std::map<JobId, Account> accounts;
  const int64_t n = r.Count(52);
  for (int64_t i = 0; i < n && r.ok(); ++i) {
    const JobId job = r.Id<JobId>();
    Account& a = accounts[job];
    a.service = r.F64();
    a.offset = r.F64();
    a.run_from = r.At();
    a.closed_at = r.At();
    a.waiting_from = r.At();
    a.promotions = r.I32();
  }
  if (!r.ok() || !r.at_end()) return;
  accounts_ = std::move(accounts);
}

}  // namespace gandiva::core
