// Scheduler::Snapshot and Scheduler::Restore (see core/snapshot.h).
#include "core/snapshot.h"

#include <bit>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "core/scheduler.h"

namespace gandiva::core {

namespace {

constexpr std::string_view kMagic = "gandiva-core-snapshot";
// Bump when the layout changes; Restore reads this version and those
// listed in Restore (version 1: no Job::start_retry_at; 2: no
// Job::start_failed_on; 3: a slot per job id, none forgotten; 4: no
// JobSpec::carrier nor ServerSpec::process_images_unusable; 5: no
// Job::ran_on; 6: no Job::restarting_from_checkpoint nor Job::restarts;
// 7: no usage ledger; 8: no JobSpec::retries nor Job::run_failures),
// refuses others.
constexpr int32_t kVersion = 9;

void SaveSpec(SnapshotWriter& w, const JobSpec& s) {
  w.Str(s.name);
  w.I32(s.gpus);
  w.I32(s.priority);
  w.Str(s.owner);
  w.Str(s.group);
  w.Str(s.vc);
  w.Bool(s.elastic);
  w.I64(s.total_minibatches);
  w.I32(s.model);
  w.U8(static_cast<uint8_t>(s.carrier));
  w.I32(s.retries);
}

JobSpec LoadSpec(SnapshotReader& r, int32_t version) {
  JobSpec s;
  s.name = r.Str();
  s.gpus = r.I32();
  s.priority = r.I32();
  s.owner = r.Str();
  s.group = r.Str();
  s.vc = r.Str();
  s.elastic = r.Bool();
  s.total_minibatches = r.I64();
  s.model = r.I32();
  if (version >= 5) {
    const uint8_t c = r.U8();
    if (c > static_cast<uint8_t>(Carrier::kProcessImage)) {
      r.Fail("job '" + s.name + "': carrier " + std::to_string(c));
    } else {
      s.carrier = static_cast<Carrier>(c);
    }
  }
  if (version >= 9) s.retries = r.I32();
  return s;
}

void SaveProfile(SnapshotWriter& w, const Profile& p) {
  w.F64(p.minibatch_rate);
  w.F64(p.last_rate);
  w.F64(p.gpu_memory_gb);
  w.F64(p.gpu_utilization);
  w.I64(p.minibatches);
  w.I32(p.reports);
  w.At(p.updated);
  w.F64(p.rate_alone);
  w.I32(p.alone_reports);
  w.F64(p.rate_packed);
  w.I32(p.packed_reports);
}

Profile LoadProfile(SnapshotReader& r) {
  Profile p;
  p.minibatch_rate = r.F64();
  p.last_rate = r.F64();
  p.gpu_memory_gb = r.F64();
  p.gpu_utilization = r.F64();
  p.minibatches = r.I64();
  p.reports = r.I32();
  p.updated = r.At();
  p.rate_alone = r.F64();
  p.alone_reports = r.I32();
  p.rate_packed = r.F64();
  p.packed_reports = r.I32();
  return p;
}

void SaveJob(SnapshotWriter& w, const Job& j) {
  w.Id(j.id);
  SaveSpec(w, j.spec);
  w.U8(static_cast<uint8_t>(j.state));
  w.Ids(j.gpus);
  w.U8(static_cast<uint8_t>(j.in_flight));
  w.Id(j.in_flight_id);
  w.At(j.submitted);
  w.At(j.first_started);
  w.At(j.run_since);
  w.At(j.waiting_since);
  w.At(j.ended);
  w.Bool(j.held);
  w.Bool(j.launched);
  w.I32(j.suspends);
  w.I32(j.resumes);
  w.I32(j.migrations);
  w.I32(j.packs);
  w.Id(j.packed_with);
  w.At(j.packed_since);
  w.Ids(j.migrating_from);
  w.Ids(j.shrinking_to);
  w.I32(j.resizes);
  w.I32(j.start_failures);
  w.Bool(j.migrating_running);
  w.Bool(j.immovable);
  w.Str(j.immovable_reason);
  w.I32(j.move_failures);
  w.At(j.move_retry_at);
  w.At(j.start_retry_at);
  w.Ids(j.start_failed_on);
  w.Ids(j.ran_on);
  w.Bool(j.restarting_from_checkpoint);
  w.I32(j.restarts);
  w.I32(j.run_failures);
  SaveProfile(w, j.profile);
}

Job LoadJob(SnapshotReader& r, int32_t version) {
  Job j;
  j.id = r.Id<JobId>();
  j.spec = LoadSpec(r, version);
  const uint8_t state = r.U8();
  if (state > static_cast<uint8_t>(JobState::kKilled)) {
    r.Fail("a job's state is " + std::to_string(state));
  }
  j.state = static_cast<JobState>(state);
  j.gpus = r.Ids<GpuId>();
  const uint8_t in_flight = r.U8();
  if (in_flight > static_cast<uint8_t>(ActionKind::kRestart) ||
      (version < 7 &&
       in_flight > static_cast<uint8_t>(ActionKind::kSetPriority))) {
    r.Fail("a job's action under way is " + std::to_string(in_flight));
  }
  j.in_flight = static_cast<ActionKind>(in_flight);
  j.in_flight_id = r.Id<ActionId>();
  j.submitted = r.At();
  j.first_started = r.At();
  j.run_since = r.At();
  j.waiting_since = r.At();
  j.ended = r.At();
  j.held = r.Bool();
  j.launched = r.Bool();
  j.suspends = r.I32();
  j.resumes = r.I32();
  j.migrations = r.I32();
  j.packs = r.I32();
  j.packed_with = r.Id<JobId>();
  j.packed_since = r.At();
  j.migrating_from = r.Ids<GpuId>();
  j.shrinking_to = r.Ids<GpuId>();
  j.resizes = r.I32();
  j.start_failures = r.I32();
  j.migrating_running = r.Bool();
  j.immovable = r.Bool();
  j.immovable_reason = r.Str();
  j.move_failures = r.I32();
  j.move_retry_at = r.At();
  if (version >= 2) j.start_retry_at = r.At();
  if (version >= 3) j.start_failed_on = r.Ids<ServerId>();
  if (version >= 6) {
    j.ran_on = r.Ids<GpuId>();
  } else if (j.launched && j.placed()) {
    // Where it is placed, or was before a move under way. A job its
    // policy requeued is taken to have left its process nowhere known:
    // its next Resume relocates it.
    const bool moving =
        j.in_flight == ActionKind::kMigrate || j.in_flight == ActionKind::kGrow;
    j.ran_on = moving ? j.migrating_from : j.gpus;
  }
  if (version >= 7) {
    j.restarting_from_checkpoint = r.Bool();
    j.restarts = r.I32();
  }
  if (version >= 9) j.run_failures = r.I32();
  j.profile = LoadProfile(r);
  return j;
}

void SaveOrders(SnapshotWriter& w, const std::set<JobOrder>& s) {
  w.I64(static_cast<int64_t>(s.size()));
  for (const JobOrder& o : s) {
    w.I32(o.neg_priority);
    w.At(o.since);
    w.Id(o.id);
  }
}

std::set<JobOrder> LoadOrders(SnapshotReader& r) {
  std::set<JobOrder> s;
  const int64_t n = r.Count(20);
  for (int64_t i = 0; i < n && r.ok(); ++i) {
    JobOrder o;
    o.neg_priority = r.I32();
    o.since = r.At();
    o.id = r.Id<JobId>();
    s.insert(o);
  }
  return s;
}

}  // namespace

std::string Scheduler::Snapshot() const {
  SnapshotWriter w;
  w.Str(kMagic);
  w.I32(kVersion);
  w.Str(policy_->name());
  w.At(state_.now_);
  w.I64(next_action_);
  const Counters& c = state_.counters_;
  for (int64_t v :
       {c.starts, c.suspends, c.resumes, c.migrations, c.packs, c.unpacks,
        c.grows, c.shrinks, c.kills, c.actions_failed, c.events}) {
    w.I64(v);
  }
  w.I64(state_.placed_);
  state_.cluster_.Save(w);
  // The jobs held, and the forgotten ids as ranges [a, b].
  int64_t held = 0;
  state_.ForEachJob([&](const Job&) { ++held; });
  w.I64(held);
  state_.ForEachJob([&](const Job& j) { SaveJob(w, j); });
  std::vector<std::pair<int64_t, int64_t>> ranges;
  const auto& gone = state_.forgotten_;
  for (size_t i = 0; i < gone.size(); ++i) {
    if (!gone[i]) continue;
    const auto id = static_cast<int64_t>(i);
    if (!ranges.empty() && ranges.back().second == id - 1) {
      ranges.back().second = id;
    } else {
      ranges.emplace_back(id, id);
    }
  }
  w.I64(static_cast<int64_t>(ranges.size()));
  for (const auto& [a, b] : ranges) {
    w.I64(a);
    w.I64(b);
  }
  SaveOrders(w, state_.queue_);
  SaveOrders(w, state_.waiting_);
  SnapshotWriter p;
  policy_->SaveState(p);
  w.Str(p.bytes());
  w.Bool(usage_.has_value());
  if (usage_) usage_->Save(w);
  return w.Take();
}

Status Scheduler::Restore(std::string_view bytes) {
  SnapshotReader r(bytes);
  if (r.Str() != kMagic) {
    return InvalidArgument("snapshot: not a scheduler snapshot");
  }
  const int32_t version = r.I32();
  if (version < 1 || version > kVersion) {
    return InvalidArgument("snapshot: version " + std::to_string(version) +
                           ", this build reads versions 1 to " +
                           std::to_string(kVersion));
  }
  const std::string policy = r.Str();
  if (r.ok() && policy != policy_->name()) {
    return FailedPrecondition("snapshot: written by policy '" + policy +
                              "', this scheduler runs '" +
                              std::string(policy_->name()) + "'");
  }
  ClusterState st;
  st.now_ = r.At();
  const int64_t next_action = r.I64();
  Counters& c = st.counters_;
  for (int64_t* v :
       {&c.starts, &c.suspends, &c.resumes, &c.migrations, &c.packs, &c.unpacks,
        &c.grows, &c.shrinks, &c.kills, &c.actions_failed, &c.events}) {
    *v = r.I64();
  }
  st.placed_ = r.I64();
  st.cluster_ = Cluster::Load(r, version);
  if (version < 4) {
    // A slot per id: an unused one holds a job with an invalid id.
    const int64_t n = r.Count(100);
    st.jobs_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n && r.ok(); ++i) {
      Job j = LoadJob(r, version);
      if (j.id.valid() && j.id.value != i) {
        r.Fail("job slot " + std::to_string(i) + " holds job " +
               std::to_string(j.id.value));
      } else if (j.id.valid()) {
        st.jobs_[i] = std::make_unique<Job>(std::move(j));
      }
    }
  } else {
    const int64_t held = r.Count(100);
    for (int64_t i = 0; i < held && r.ok(); ++i) {
      Job j = LoadJob(r, version);
      if (!r.ok()) break;
      const auto at = static_cast<size_t>(j.id.value);
      if (!j.id.valid() || (at < st.jobs_.size() && st.jobs_[at] != nullptr)) {
        r.Fail("job " + std::to_string(j.id.value) + " is held twice");
        break;
      }
      if (st.jobs_.size() <= at) st.jobs_.resize(at + 1);
      st.jobs_[at] = std::make_unique<Job>(std::move(j));
    }
    const int64_t ranges = r.Count(16);
    for (int64_t i = 0; i < ranges && r.ok(); ++i) {
      const int64_t a = r.I64(), b = r.I64();
      if (a < 0 || b < a || b > std::numeric_limits<int32_t>::max()) {
        r.Fail("forgotten jobs " + std::to_string(a) + "-" + std::to_string(b));
        break;
      }
      if (st.forgotten_.size() <= static_cast<size_t>(b)) {
        st.forgotten_.resize(static_cast<size_t>(b) + 1);
      }
      for (int64_t id = a; id <= b; ++id) {
        if (st.has_job(JobId(static_cast<int32_t>(id))) || st.forgotten_[id]) {
          r.Fail("job " + std::to_string(id) + " is forgotten, and is not");
          break;
        }
        st.forgotten_[id] = true;
        ++st.forgotten_count_;
      }
    }
    if (st.jobs_.size() < st.forgotten_.size()) {
      st.jobs_.resize(st.forgotten_.size());
    }
  }
  st.queue_ = LoadOrders(r);
  st.waiting_ = LoadOrders(r);
  const std::string policy_state = r.Str();
  // The usage ledger: as saved, or (none saved) from now on.
  std::optional<UsageLedger> usage;
  if (usage_) usage.emplace(options_.keep_usage);
  if (version >= 8 && r.Bool()) {
    UsageLedger saved(options_.keep_usage);
    saved.Load(r);
    if (usage) usage = std::move(saved);
  } else if (usage) {
    st.ForEachJob([&](const Job& j) { usage->Note(j, st.now_); });
  }
  GANDIVA_RETURN_IF_ERROR(r.Finish("snapshot"));

  // Cross-checks: every id names a job or a GPU that exists, and the
  // cluster holds each placed job where the job says it is.
  const auto num_gpus = st.cluster_.num_gpus();
  auto bad = [](const std::string& why) {
    return InvalidArgument("snapshot: " + why);
  };
  for (const auto& jp : st.jobs_) {
    if (jp == nullptr) continue;
    const Job& j = *jp;
    if (!ValidateJobSpec(j.spec).empty()) {
      return bad("job " + std::to_string(j.id.value) + ": " +
                 ValidateJobSpec(j.spec));
    }
    for (const auto* list :
         {&j.gpus, &j.migrating_from, &j.shrinking_to, &j.ran_on}) {
      for (GpuId g : *list) {
        if (!g.valid() || g.value >= num_gpus) {
          return bad("job " + std::to_string(j.id.value) + " names GPU " +
                     std::to_string(g.value));
        }
      }
    }
    if (j.placed()) {
      for (GpuId g : j.gpus) {
        const auto& on = st.cluster_.gpu(g).jobs;
        if (std::find(on.begin(), on.end(), j.id) == on.end()) {
          return bad("job " + std::to_string(j.id.value) +
                     " is placed on GPU " + std::to_string(g.value) +
                     ", which does not hold it");
        }
      }
    }
  }
  for (const Gpu& g : st.cluster_.gpus()) {
    for (JobId id : g.jobs) {
      if (!st.has_job(id)) {
        return bad("GPU " + std::to_string(g.id.value) + " holds job " +
                   std::to_string(id.value) + ", which does not exist");
      }
    }
  }
  for (const auto* orders : {&st.queue_, &st.waiting_}) {
    for (const JobOrder& o : *orders) {
      if (!st.has_job(o.id)) {
        return bad("the queue holds job " + std::to_string(o.id.value) +
                   ", which does not exist");
      }
    }
  }
  for (const JobOrder& o : st.queue_) {
    const int gpus = st.jobs_[o.id.value]->spec.gpus;
    st.queue_by_size_[std::countr_zero(static_cast<unsigned>(gpus))].insert(o);
  }
  for (const JobOrder& o : st.waiting_) {
    const size_t gpus = st.jobs_[o.id.value]->gpus.size();
    st.waiting_by_size_[ClusterState::SizeClass(gpus)].insert(o);
  }
  // A queued job out of the queue waits to try its start again (Queue()).
  for (const auto& jp : st.jobs_) {
    if (jp == nullptr) continue;
    const Job& j = *jp;
    if (j.state == JobState::kQueued && !j.held &&
        !st.queue_.contains(ClusterState::QueueKey(j))) {
      if (j.start_retry_at <= st.now_) {
        return bad("job " + std::to_string(j.id.value) +
                   " is queued but neither in the queue nor waiting to "
                   "start again");
      }
      st.start_retries_.insert({j.start_retry_at, j.id});
    }
    // A suspended job out of the waiting jobs waits to try its resume
    // again (OnActionFailed); it is released at the next event if due.
    if (j.state == JobState::kSuspended && !j.held && !j.busy() &&
        j.start_retry_at != Time::Zero() &&
        !st.waiting_.contains(ClusterState::WaitKey(j))) {
      st.start_retries_.insert({j.start_retry_at, j.id});
    }
  }

  // The policy last: it changes itself only when its state is good.
  SnapshotReader pr(policy_state);
  policy_->LoadState(pr);
  GANDIVA_RETURN_IF_ERROR(pr.Finish("snapshot of policy '" + policy + "'"));
  st.queue_version_ = state_.queue_version_ + 1;
  state_ = std::move(st);
  usage_ = std::move(usage);
  if (track_changes_) {
    state_.ForEachJob([&](const Job& j) { changed_.push_back(j.id); });
  }
  next_action_ = next_action;
  last_drain_.clear();
  ++changes_;
  explained_ = nullptr;  // of another state, and policy state
  return Status::Ok();
}

}  // namespace gandiva::core
