#include "core/policies/tiresias.h"

#include <algorithm>
#include <cmath>
#include <functional>
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
  return BestFitGpus(cluster, need, /*gather=*/true);
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

Time TiresiasPolicy::NextLevelAt(const Job& job, const Account& a, int level,
                                 Time now) const {
  const auto& t = options_.queue_thresholds;
  if (level >= static_cast<int>(t.size())) return Time::Never();
  // Level is a function of the time that never decreases while the job
  // trains (each floating-point step is monotonic), so the first
  // microsecond past `now` where it exceeds `level` is found by search,
  // started at the estimate from the GPU-seconds still to attain.
  auto above = [&](int64_t us) {
    return Level(job, a, Time::FromMicros(us)) > level;
  };
  constexpr int64_t kFar = int64_t{1} << 62;
  const int64_t first = now.micros() + 1;
  if (first >= kFar || !above(kFar)) return Time::Never();
  const double to_go = (t[level] + a.offset - a.service) / job.spec.gpus * 1e6;
  int64_t guess = kFar;
  if (to_go < static_cast<double>(kFar - a.run_from.micros())) {
    guess =
        std::clamp(a.run_from.micros() + static_cast<int64_t>(std::ceil(to_go)),
                   first, kFar);
  }
  // Bracket the answer in (lo, hi] around the guess, galloping away from
  // it (it is off by a rounding or two, if at all), then halve.
  int64_t lo, hi;
  if (above(guess)) {
    hi = guess;
    for (int64_t step = 1;; step *= 2) {
      lo = std::max(first - 1, hi - step);
      if (lo == first - 1 || !above(lo)) break;
      hi = lo;
    }
  } else {
    lo = guess;
    for (int64_t step = 1;; step *= 2) {
      hi = std::min(kFar, lo + step);
      if (above(hi)) break;
      lo = hi;
    }
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (above(mid) ? hi : lo) = mid;
  }
  return Time::FromMicros(hi);
}

int TiresiasPolicy::SlotOf(JobId job) const {
  if (!job.valid() || static_cast<size_t>(job.value) >= slot_of_.size()) {
    return -1;
  }
  return slot_of_[job.value];
}

const TiresiasPolicy::Account* TiresiasPolicy::Find(JobId job) const {
  const int slot = SlotOf(job);
  return slot < 0 ? nullptr : &entries_[slot].account;
}

void TiresiasPolicy::Add(JobId job, const Account& account) {
  GANDIVA_CHECK(job.valid() && SlotOf(job) < 0);
  int slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<int>(entries_.size());
    entries_.emplace_back();
  }
  if (static_cast<size_t>(job.value) >= slot_of_.size()) {
    slot_of_.resize(static_cast<size_t>(job.value) + 1, -1);
  }
  slot_of_[job.value] = slot;
  entries_[slot] = Entry{};
  entries_[slot].id = job;
  entries_[slot].account = account;
  ++live_;
}

void TiresiasPolicy::Drop(int slot) {
  if (order_.contains(slot)) order_.Erase(slot);
  slot_of_[entries_[slot].id.value] = -1;
  entries_[slot] = Entry{};
  free_slots_.push_back(slot);
  --live_;
}

double TiresiasPolicy::AttainedService(const ClusterState& state,
                                       JobId job) const {
  const Account* a = Find(job);
  if (a == nullptr) return 0;
  return Attained(state.job(job), *a, state.now());
}

int TiresiasPolicy::QueueOf(const ClusterState& state, JobId job) const {
  const Account* a = Find(job);
  if (a == nullptr) return 0;
  return Level(state.job(job), *a, state.now());
}

int TiresiasPolicy::Promotions(JobId job) const {
  const Account* a = Find(job);
  return a == nullptr ? 0 : a->promotions;
}

void TiresiasPolicy::CloseInterval(const Job& job, Account& a, Time now) {
  if (a.run_from == Time::Never()) return;
  a.service = Attained(job, a, now);
  a.run_from = Time::Never();
  a.closed_at = now;
  a.waiting_from = now;
}

void TiresiasPolicy::SetTimer(Time& field, Time at, JobId job, TimerKind kind) {
  if (field == at) return;
  field = at;
  if (at == Time::Never()) return;
  timers_.push_back({at, job, kind});
  std::push_heap(timers_.begin(), timers_.end(), std::greater<>());
}

void TiresiasPolicy::Refresh(const ClusterState& state, int slot,
                             bool promoted) {
  const Time now = state.now();
  Entry& e = entries_[slot];
  if (!state.has_job(e.id) || IsTerminal(state.job(e.id).state)) {
    Drop(slot);
    return;
  }
  const Job& j = state.job(e.id);
  Account& a = e.account;
  const bool training = Training(j);
  if (training && a.run_from == Time::Never()) {
    // Its start or resume is done (or a suspension failed: it never
    // stopped, but the time before the request was counted already).
    a.run_from = a.closed_at == Time::Never()
                     ? j.run_since
                     : std::max(j.run_since, a.closed_at);
  } else if (!training && a.run_from != Time::Never()) {
    CloseInterval(j, a, now);  // e.g. its server was lost
  }
  const int level = Level(j, a, now);
  const TiresiasOrder::Key key{-j.spec.priority, promoted ? 0 : level,
                               j.submitted, j.id};
  TiresiasOrder::Marks m;
  m.gpus = j.spec.gpus;
  m.eligible = !j.held && !j.awaits_start_retry(now);
  m.running = j.state == JobState::kRunning && !j.busy() && !j.held;
  m.suspended = j.state == JobState::kSuspended && !j.busy();
  m.queued = j.state == JobState::kQueued && m.eligible;
  if (!order_.contains(slot)) {
    order_.Insert(slot, key, m);
  } else if (order_.key(slot) != key) {
    order_.Erase(slot);
    order_.Insert(slot, key, m);
  } else if (order_.marks(slot) != m) {
    order_.SetMarks(slot, m);
  }

  // A promoted job whose service still says a lower queue (a threshold
  // at or below 0) is in it again at the next pass.
  Time next_level = Time::Never();
  if (promoted && level != 0) {
    next_level = now;
  } else if (training) {
    next_level = NextLevelAt(j, a, level, now);
  }
  Time starves = Time::Never();
  if (level > 0 && Waiting(j) && !options_.starve_limit.is_infinite()) {
    const int64_t limit = options_.starve_limit.micros();
    starves = a.waiting_from.micros() > Time::Never().micros() - limit
                  ? Time::Never()
                  : a.waiting_from + options_.starve_limit;
  }
  const Time retry =
      j.awaits_start_retry(now) ? j.start_retry_at : Time::Never();
  SetTimer(e.next_level, next_level, e.id, TimerKind::kLevel);
  SetTimer(e.starves, starves, e.id, TimerKind::kStarve);
  SetTimer(e.retry, retry, e.id, TimerKind::kRetry);
}

void TiresiasPolicy::RefreshChanged(const ClusterState& state) {
  const auto changed = state.changed_jobs();
  for (; changed_seen_ < changed.size(); ++changed_seen_) {
    const int slot = SlotOf(changed[changed_seen_]);
    if (slot >= 0) Refresh(state, slot);
  }
}

void TiresiasPolicy::Rebuild(const ClusterState& state) {
  order_.Clear();
  timers_.clear();
  for (size_t id = 0; id < slot_of_.size(); ++id) {
    const int slot = slot_of_[id];
    if (slot < 0) continue;
    Entry& e = entries_[slot];
    e.next_level = e.starves = e.retry = Time::Never();
    Refresh(state, slot);
  }
  stale_ = false;
}

void TiresiasPolicy::RunTimers(const ClusterState& state) {
  const Time now = state.now();
  ++stamp_;
  due_.clear();
  while (!timers_.empty() && timers_.front().at <= now) {
    std::pop_heap(timers_.begin(), timers_.end(), std::greater<>());
    const Timer t = timers_.back();
    timers_.pop_back();
    const int slot = SlotOf(t.id);
    if (slot < 0) continue;
    Entry& e = entries_[slot];
    const Time set = t.kind == TimerKind::kLevel    ? e.next_level
                     : t.kind == TimerKind::kStarve ? e.starves
                                                    : e.retry;
    if (set != t.at || e.stamp == stamp_) continue;
    e.stamp = stamp_;
    due_.push_back(slot);
  }
  for (int slot : due_) {
    Refresh(state, slot);
    if (!order_.contains(slot)) continue;  // it ended
    Account& a = entries_[slot].account;
    const Job& j = state.job(entries_[slot].id);
    if (Level(j, a, now) > 0 && Waiting(j) &&
        !options_.starve_limit.is_infinite() &&
        now - a.waiting_from >= options_.starve_limit) {
      a.offset = Attained(j, a, now);
      a.waiting_from = now;
      ++a.promotions;
      Refresh(state, slot, /*promoted=*/true);
    }
  }
}

void TiresiasPolicy::decide(const ClusterState& state, const Event& event,
                            Actions& out) {
  changed_seen_ = 0;
  if (const auto* e = std::get_if<JobArrived>(&event.body)) {
    Account a;
    a.waiting_from = state.now();
    Add(e->id, a);
  }
  if (stale_) Rebuild(state);
  RefreshChanged(state);
  // A report changes nothing this policy reads.
  if (std::holds_alternative<ProfileReport>(event.body)) return;
  if (const auto* e = std::get_if<ActionFailed>(&event.body)) {
    // A failed resume leaves the job where it was: let it be placed anew
    // rather than retried on the same GPUs.
    const Job& j = state.job(e->job);
    if (j.state == JobState::kSuspended && !j.busy()) out.Requeue(j.id);
    RefreshChanged(state);
  }
  Plan(state, out);
  RefreshChanged(state);
}

void TiresiasPolicy::Plan(const ClusterState& state, Actions& out) {
  const Time now = state.now();
  const Cluster& cluster = state.cluster();
  RunTimers(state);

  // The desired set: every eligible job before the first left out, and
  // those behind it that fit in what is left, in order.
  const TiresiasOrder::Cut cut = order_.FirstLeftOut(cluster.up_gpus());
  ++stamp_;
  chosen_.clear();
  if (cut.first_out != TiresiasOrder::kNone) {
    int after = cut.first_out;
    for (int left = cut.left; left > 0;) {
      const int slot = order_.NextFitting(after, left);
      if (slot == TiresiasOrder::kNone) break;
      chosen_.push_back(slot);
      entries_[slot].stamp = stamp_;
      left -= order_.marks(slot).gpus;
      after = slot;
    }
  }
  auto desired = [&](int slot) {
    if (!order_.marks(slot).eligible) return false;
    return cut.first_out == TiresiasOrder::kNone ||
           order_.key(slot) < order_.key(cut.first_out) ||
           entries_[slot].stamp == stamp_;
  };

  // Preempt those outside it; give back the GPUs of the preempted.
  settle_.clear();
  requeued_.clear();
  order_.CollectToSettle(cut.first_out, settle_);
  for (int slot : settle_) {
    const JobId id = entries_[slot].id;
    const Job& j = state.job(id);
    if (j.busy()) continue;  // decided again when its mechanism is done
    if (j.state == JobState::kRunning && !desired(slot) && !j.held) {
      CloseInterval(j, entries_[slot].account, now);
      out.Suspend(id);
    } else if (j.state == JobState::kSuspended) {
      bool idle = desired(slot);
      for (GpuId g : j.gpus) idle = idle && cluster.gpu(g).active == 0;
      if (idle) {
        out.Run(id);  // chosen again before it gave its GPUs back
      } else {
        out.Requeue(id);
        if (desired(slot)) requeued_.push_back(slot);
      }
    }
  }

  // Place the chosen queued jobs in order, where GPUs are free: those
  // before the first left out, those chosen behind it, and those just
  // requeued that are chosen (rare: their GPUs were taken).
  const int before = cut.first_out;
  int next = order_.NextQueued(TiresiasOrder::kNone, before);
  size_t behind = 0, again = 0;
  auto next_chosen = [&]() -> int {
    for (;;) {
      if (next != TiresiasOrder::kNone) {
        const int slot = next;
        next = order_.NextQueued(slot, before);
        return slot;
      }
      if (behind == chosen_.size()) return TiresiasOrder::kNone;
      const int slot = chosen_[behind++];
      if (order_.marks(slot).queued) return slot;
    }
  };
  if (cluster.free_gpus() == 0) return;
  for (int slot = next_chosen(); cluster.free_gpus() > 0;) {
    while (again < requeued_.size() &&
           (slot == TiresiasOrder::kNone ||
            order_.key(requeued_[again]) < order_.key(slot))) {
      const Job& j = state.job(entries_[requeued_[again++]].id);
      if (auto gpus = PlaceAvoidingFailedStarts(
              cluster, j, [&] { return FindGpus(cluster, j.spec.gpus); })) {
        out.Start(j.id, std::move(*gpus));
      }
      if (cluster.free_gpus() == 0) return;
    }
    if (slot == TiresiasOrder::kNone) break;
    const Job& j = state.job(entries_[slot].id);
    if (j.state == JobState::kQueued) {
      if (auto gpus = PlaceAvoidingFailedStarts(
              cluster, j, [&] { return FindGpus(cluster, j.spec.gpus); })) {
        out.Start(j.id, std::move(*gpus));
      }
    }
    slot = next_chosen();
  }
}

std::shared_ptr<const QueueReasons> TiresiasPolicy::ExplainQueue(
    const ClusterState& state, const QueueReasons* /*previous*/) const {
  // Plan's order and desired set, as the next decision would take them
  // (a starving job counts as promoted).
  const Time now = state.now();
  using Key = std::tuple<int, int, Time, JobId>;
  std::vector<Key> order;
  order.reserve(static_cast<size_t>(live_));
  std::map<JobId, LasQueueReasons::Row> queued;
  for (size_t i = 0; i < slot_of_.size(); ++i) {
    if (slot_of_[i] < 0) continue;
    const JobId id = entries_[slot_of_[i]].id;
    const Account& a = entries_[slot_of_[i]].account;
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
  for (JobId id : jobs) {
    if (const int slot = SlotOf(id); slot >= 0) Drop(slot);
  }
}

void TiresiasPolicy::SaveState(SnapshotWriter& w) const {
  w.I64(live_);
  for (int32_t slot : slot_of_) {
    if (slot < 0) continue;
    const Entry& e = entries_[slot];
    const Account& a = e.account;
    w.Id(e.id);
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
  for (const auto& [job, a] : accounts) {
    if (!job.valid()) {
      r.Fail("job id " + std::to_string(job.value) + " is invalid");
      return;
    }
  }
  slot_of_.clear();
  entries_.clear();
  free_slots_.clear();
  live_ = 0;
  order_.Clear();
  timers_.clear();
  for (const auto& [job, a] : accounts) Add(job, a);
  // The order and the timers need the jobs: made at the next event.
  stale_ = true;
}

}  // namespace gandiva::core
