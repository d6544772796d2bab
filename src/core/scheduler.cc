#include "core/scheduler.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <iterator>
#include <set>
#include <string>
#include <utility>

#include "core/policies/queues.h"

namespace gandiva::core {

namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

std::string JobRef(JobId id) { return "job " + std::to_string(id.value); }

// "12.5 GiB": one decimal.
std::string FormatGib(double gib) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", gib);
  return buf;
}

}  // namespace

const char* EventName(const EventBody& body) {
  static constexpr const char* kNames[] = {
      "JobArrived",    "JobFinished",     "ProfileReport", "ActionDone",
      "ActionFailed",  "ServerUp",        "ServerDown",    "Tick",
      "KillRequest",   "PriorityRequest", "HoldRequest",   "MechanismRequest",
      "CordonRequest", "JobFound",        "DrainRequest",  "CarrierKnown",
      "ProcessLost",   "QueuesChanged"};
  static_assert(std::size(kNames) == std::variant_size_v<EventBody>);
  return kNames[body.index()];
}

// ---------------------------------------------------------------- Actions

Job& Actions::CheckedJob(JobId id) {
  GANDIVA_CHECK_MSG(s_->state_.has_job(id), JobRef(id));
  return s_->state_.mutable_job(id);
}

void Actions::CheckGpus(JobId id, const std::vector<GpuId>& gpus, bool idle) {
  const Cluster& cluster = s_->state_.cluster_;
  for (GpuId g : gpus) {
    GANDIVA_CHECK_MSG(g.valid() && g.value < cluster.num_gpus(),
                      JobRef(id) + ": no GPU " + std::to_string(g.value));
    GANDIVA_CHECK_MSG(cluster.server(cluster.gpu(g).server).up,
                      JobRef(id) + ": GPU " + std::to_string(g.value) +
                          " is on a server that is down");
    GANDIVA_CHECK_MSG(!idle || cluster.gpu(g).active == 0,
                      JobRef(id) + ": GPU " + std::to_string(g.value) +
                          " is held by a running job");
  }
}

Action& Actions::Emit(Job& job, ActionKind kind, bool mechanism) {
  Action a;
  a.id = s_->NextActionId();
  a.kind = kind;
  a.job = job.id;
  if (mechanism) {
    job.in_flight = kind;
    job.in_flight_id = a.id;
  }
  out_->push_back(std::move(a));
  return out_->back();
}

void Actions::Start(JobId id, std::vector<GpuId> gpus) {
  Assign(id, std::move(gpus));
  Run(id);
}

void Actions::Assign(JobId id, std::vector<GpuId> gpus) {
  ClusterState& st = s_->state_;
  Job& job = CheckedJob(id);
  GANDIVA_CHECK_MSG(job.state == JobState::kQueued,
                    JobRef(id) + " is " + std::string(JobStateName(job.state)));
  GANDIVA_CHECK_MSG(static_cast<int>(gpus.size()) == job.spec.gpus,
                    JobRef(id) + ": wrong GPU count");
  CheckGpus(id, gpus, /*idle=*/false);
  st.Dequeue(job);
  st.cluster_.Place(id, job.spec.gpus, gpus);
  job.gpus = std::move(gpus);
  job.state = JobState::kSuspended;
  job.waiting_since = st.now_;
  ++st.placed_;
  s_->SetWaiting(job, true);
}

void Actions::Run(JobId id) {
  ClusterState& st = s_->state_;
  Job& job = CheckedJob(id);
  GANDIVA_CHECK_MSG(job.state == JobState::kSuspended && !job.busy(),
                    JobRef(id) + " cannot run: it is " +
                        std::string(JobStateName(job.state)));
  GANDIVA_CHECK_MSG(!job.held, JobRef(id) + " is held by an operator");
  CheckGpus(id, job.gpus, /*idle=*/true);
  s_->SetWaiting(job, false);
  st.cluster_.Activate(job.gpus);
  job.state = JobState::kRunning;
  if (!job.launched) {
    job.launched = true;
    job.profile.minibatches = 0;  // a run from the beginning
    if (job.first_started == Time::Never()) job.first_started = st.now_;
    ++st.counters_.starts;
    Emit(job, ActionKind::kStart, true).gpus = job.gpus;
  } else {
    ++job.resumes;
    ++st.counters_.resumes;
    Action& a = Emit(job, ActionKind::kResume, true);
    a.gpus = job.gpus;
    a.relocates = !st.cluster_.SameLayout(job.ran_on, job.gpus);
  }
}

void Actions::Migrate(JobId id, std::vector<GpuId> gpus) {
  ClusterState& st = s_->state_;
  Job& job = CheckedJob(id);
  const bool running = job.state == JobState::kRunning;
  GANDIVA_CHECK_MSG((job.state == JobState::kSuspended ||
                     (running && !job.packed_with.valid())) &&
                        !job.busy(),
                    JobRef(id) + " cannot migrate now");
  GANDIVA_CHECK_MSG(gpus.size() == job.gpus.size(),
                    JobRef(id) + ": wrong GPU count");
  if (running) st.cluster_.Deactivate(job.gpus);
  CheckGpus(id, gpus, /*idle=*/true);
  s_->SetWaiting(job, false);
  st.cluster_.Unplace(id, job.gpus);
  if (!job.launched) {
    job.gpus = std::move(gpus);
    st.cluster_.Place(id, job.spec.gpus, job.gpus);
    s_->SetWaiting(job, true);
    Run(id);
    return;
  }
  job.migrating_from = std::move(job.gpus);
  job.gpus = std::move(gpus);
  st.cluster_.Place(id, job.spec.gpus, job.gpus);
  st.cluster_.Activate(job.gpus);
  job.state = JobState::kMigrating;
  job.migrating_running = running;
  ++job.migrations;
  ++st.counters_.migrations;
  Action& a = Emit(job, ActionKind::kMigrate, true);
  a.gpus = job.gpus;
  a.relocates = true;
}

void Actions::Pack(JobId id, JobId with) {
  ClusterState& st = s_->state_;
  Job& job = CheckedJob(id);
  Job& peer = CheckedJob(with);
  GANDIVA_CHECK_MSG(
      job.state == JobState::kSuspended && !job.busy() && !job.held,
      JobRef(id) + " cannot be packed now");
  GANDIVA_CHECK_MSG(peer.state == JobState::kRunning && !peer.busy() &&
                        !peer.packed_with.valid(),
                    JobRef(with) + " cannot take a partner now");
  GANDIVA_CHECK_MSG(job.gpus == peer.gpus,
                    JobRef(id) + " is not placed on its partner's GPUs");
  for (GpuId g : job.gpus) GANDIVA_CHECK(st.cluster_.gpu(g).active == 1);
  s_->SetWaiting(job, false);
  st.cluster_.Activate(job.gpus);
  job.state = JobState::kRunning;
  job.packed_with = with;
  peer.packed_with = id;
  job.packed_since = peer.packed_since = st.now_;
  job.profile.packed_reports = peer.profile.packed_reports = 0;
  job.profile.rate_packed = peer.profile.rate_packed = 0;
  Action& a = Emit(job, ActionKind::kPack, true);
  a.gpus = job.gpus;
  a.peer = with;
  a.launch = !job.launched;
  a.relocates = job.launched && !st.cluster_.SameLayout(job.ran_on, job.gpus);
  if (!job.launched) {
    job.launched = true;
    job.profile.minibatches = 0;  // a run from the beginning
    if (job.first_started == Time::Never()) job.first_started = st.now_;
  }
  ++job.packs;
  ++st.counters_.packs;
}

void Actions::Unpack(JobId id) {
  Job& job = CheckedJob(id);
  GANDIVA_CHECK_MSG(
      job.state == JobState::kRunning && !job.busy() && job.packed_with.valid(),
      JobRef(id) + " is not packed");
  ++s_->state_.counters_.unpacks;
  Emit(job, ActionKind::kUnpack, true).peer = job.packed_with;
}

void Actions::Resize(JobId id, std::vector<GpuId> gpus) {
  ClusterState& st = s_->state_;
  Job& job = CheckedJob(id);
  GANDIVA_CHECK_MSG(job.state == JobState::kRunning && !job.busy() &&
                        !job.packed_with.valid() && job.spec.elastic,
                    JobRef(id) + " cannot be resized now");
  GANDIVA_CHECK_MSG(!gpus.empty() && std::has_single_bit(gpus.size()) &&
                        gpus.size() != job.gpus.size(),
                    JobRef(id) + ": bad new size");
  std::sort(gpus.begin(), gpus.end());
  std::vector<GpuId> old = job.gpus;
  std::sort(old.begin(), old.end());
  const bool grow = gpus.size() > old.size();
  if (grow) {
    GANDIVA_CHECK(
        std::includes(gpus.begin(), gpus.end(), old.begin(), old.end()));
    std::vector<GpuId> extra;
    std::set_difference(gpus.begin(), gpus.end(), old.begin(), old.end(),
                        std::back_inserter(extra));
    for (GpuId g : extra) {
      GANDIVA_CHECK_MSG(st.cluster_.gpu(g).jobs.empty(),
                        JobRef(id) + ": grows onto a GPU in use");
    }
    st.cluster_.Place(id, job.spec.gpus, extra, /*more=*/true);
    st.cluster_.Activate(extra);
    job.migrating_from = job.gpus;
    job.gpus = gpus;
    ++st.counters_.grows;
  } else {
    GANDIVA_CHECK(
        std::includes(old.begin(), old.end(), gpus.begin(), gpus.end()));
    job.shrinking_to = gpus;
    ++st.counters_.shrinks;
  }
  ++job.resizes;
  Action& a = Emit(job, grow ? ActionKind::kGrow : ActionKind::kShrink, true);
  a.gpus = std::move(gpus);
  a.relocates = true;
}

void Actions::Suspend(JobId id) {
  Job& job = CheckedJob(id);
  GANDIVA_CHECK_MSG(job.state == JobState::kRunning && !job.busy(),
                    JobRef(id) + " cannot be suspended now");
  ++job.suspends;
  ++s_->state_.counters_.suspends;
  Emit(job, ActionKind::kSuspend, true);
}

void Actions::Preempt(JobId id) {
  Job& job = CheckedJob(id);
  GANDIVA_CHECK_MSG(job.state == JobState::kRunning && !job.busy(),
                    JobRef(id) + " cannot be preempted now");
  ++job.suspends;
  ++s_->state_.counters_.suspends;
  Emit(job, ActionKind::kSuspend, true).lossy = true;
}

void Actions::Requeue(JobId id) {
  ClusterState& st = s_->state_;
  Job& job = CheckedJob(id);
  GANDIVA_CHECK_MSG(job.state == JobState::kSuspended && !job.busy(),
                    JobRef(id) + " cannot be requeued now");
  s_->Unplace(job);
  job.gpus.clear();
  job.state = JobState::kQueued;
  job.waiting_since = st.now_;
  s_->Queue(job);
}

void Actions::Kill(JobId id, std::string reason) {
  Job& job = CheckedJob(id);
  GANDIVA_CHECK_MSG(!IsTerminal(job.state), JobRef(id) + " already ended");
  s_->OnJobEnded(job, JobState::kKilled);
  ++s_->state_.counters_.kills;
  Emit(job, ActionKind::kKill, false).reason = std::move(reason);
}

void Actions::SetPriority(JobId id, int priority) {
  ClusterState& st = s_->state_;
  Job& job = CheckedJob(id);
  if (job.spec.priority == priority) return;
  const bool queued = st.Dequeue(job);
  const bool waiting = st.RemoveWaiting(job);
  job.spec.priority = priority;
  if (queued) s_->Queue(job);
  if (waiting) st.AddWaiting(job);
  Emit(job, ActionKind::kSetPriority, false).priority = priority;
}

// -------------------------------------------------------------- Scheduler

Scheduler::Scheduler(std::unique_ptr<Policy> policy, SchedulerOptions options)
    : policy_(std::move(policy)), options_(options) {
  GANDIVA_CHECK(policy_ != nullptr);
  if (options_.keep_usage > Duration()) usage_.emplace(options_.keep_usage);
}

Status Scheduler::Forget(std::span<const JobId> jobs) {
  for (JobId id : jobs) {
    if (!state_.has_job(id)) {
      return NotFound("cannot forget " + JobRef(id) + ": no such job");
    }
    if (!IsTerminal(state_.job(id).state)) {
      return FailedPrecondition(
          "cannot forget " + JobRef(id) + ": it is " +
          std::string(JobStateName(state_.job(id).state)));
    }
  }
  ++changes_;
  policy_->Forget(state_, jobs);
  for (JobId id : jobs) {
    if (state_.jobs_[id.value] == nullptr) continue;  // named twice
    state_.jobs_[id.value].reset();
    if (state_.forgotten_.size() <= static_cast<size_t>(id.value)) {
      state_.forgotten_.resize(static_cast<size_t>(id.value) + 1);
    }
    state_.forgotten_[id.value] = true;
    ++state_.forgotten_count_;
  }
  return Status::Ok();
}

std::shared_ptr<const QueueReasons> Scheduler::ExplainQueue() {
  if (explained_ == nullptr || explained_at_ != changes_) {
    explained_ = policy_->ExplainQueue(state_, explained_.get());
    explained_at_ = changes_;
  }
  return explained_;
}

Status Scheduler::Handle(const Event& event, std::vector<Action>& out) {
  state_.changed_.clear();
  const Status status = HandleEvent(event, out);
  if (usage_) {
    for (JobId id : state_.changed_) {
      if (state_.has_job(id)) usage_->Note(state_.job(id), state_.now_);
    }
  }
  if (track_changes_) {
    changed_.insert(changed_.end(), state_.changed_.begin(),
                    state_.changed_.end());
  }
  return status;
}

Status Scheduler::HandleEvent(const Event& event, std::vector<Action>& out) {
  if (event.time < state_.now_) {
    return InvalidArgument(
        "event time goes backwards: " + std::to_string(event.time.micros()) +
        "us < " + std::to_string(state_.now_.micros()) + "us");
  }
  last_drain_.clear();
  ++changes_;
  // A Restart from a checkpoint that fails is followed by one from the
  // beginning (seen before Apply clears the action under way).
  JobId restart_afresh;
  if (const auto* f = std::get_if<ActionFailed>(&event.body);
      f != nullptr && state_.has_job(f->job)) {
    const Job& j = state_.job(f->job);
    if (j.in_flight == ActionKind::kRestart && j.in_flight_id == f->action &&
        j.restarting_from_checkpoint) {
      restart_afresh = f->job;
    }
  }
  state_.now_ = event.time;
  GANDIVA_RETURN_IF_ERROR(Apply(event));
  ++state_.counters_.events;
  Actions actions(this, &out);
  if (const auto* kill = std::get_if<KillRequest>(&event.body)) {
    if (!IsTerminal(state_.job(kill->job).state)) {
      actions.Kill(kill->job, kill->reason);
    }
  } else if (const auto* pr = std::get_if<PriorityRequest>(&event.body)) {
    actions.SetPriority(pr->job, pr->priority);
  } else if (const auto* m = std::get_if<MechanismRequest>(&event.body)) {
    CarryOut(*m, actions);
  } else if (const auto* d = std::get_if<DrainRequest>(&event.body)) {
    Drain(*d, actions);
  } else if (const auto* l = std::get_if<ProcessLost>(&event.body)) {
    Job& j = state_.mutable_job(l->job);
    if (j.state == JobState::kRunning) Restart(j, l->checkpoint, actions);
  } else if (restart_afresh.valid()) {
    Restart(state_.mutable_job(restart_afresh), false, actions);
  }
  // A held job that is running with nothing under way is suspended now
  // (after the hold itself, or once its start or resume completes).
  JobId subject;
  if (const auto* h = std::get_if<HoldRequest>(&event.body)) subject = h->job;
  if (const auto* d = std::get_if<ActionDone>(&event.body)) subject = d->job;
  if (subject.valid()) {
    const Job& j = state_.job(subject);
    if (j.held && j.state == JobState::kRunning && !j.busy()) {
      actions.Suspend(subject);
    }
  }
  ReleaseStartRetries();
  policy_->decide(state_, event, actions);
  return Status::Ok();
}

Status Scheduler::Apply(const Event& event) {
  auto need_job = [&](JobId id) -> Status {
    if (!state_.has_job(id)) return NotFound("unknown " + JobRef(id));
    return Status::Ok();
  };
  return std::visit(
      Overloaded{
          [&](const JobArrived& e) -> Status {
            if (!e.id.valid()) return InvalidArgument("field 'id': invalid");
            if (state_.has_job(e.id) || state_.forgotten(e.id)) {
              return Status(StatusCode::kAlreadyExists,
                            JobRef(e.id) + " was already submitted");
            }
            if (std::string err = ValidateJobSpec(e.spec); !err.empty()) {
              return InvalidArgument(JobRef(e.id) + ": " + err);
            }
            if (e.submitted != Time::Never() && e.submitted > event.time) {
              return InvalidArgument(JobRef(e.id) +
                                     ": field 'submitted': after the event");
            }
            if (!e.placed_on.empty()) {
              GANDIVA_RETURN_IF_ERROR(
                  CheckAdoptable(e.id, e.spec.gpus, e.placed_on));
            }
            if (static_cast<size_t>(e.id.value) >= state_.jobs_.size()) {
              state_.jobs_.resize(static_cast<size_t>(e.id.value) + 1);
            }
            state_.jobs_[e.id.value] = std::make_unique<Job>();
            Job& job = *state_.jobs_[e.id.value];
            state_.changed_.push_back(e.id);
            job.id = e.id;
            job.spec = e.spec;
            job.submitted =
                e.submitted == Time::Never() ? event.time : e.submitted;
            job.waiting_since = event.time;
            if (e.placed_on.empty()) {
              state_.Enqueue(job);
            } else {
              Adopt(job, e.placed_on, e.suspended);
            }
            return Status::Ok();
          },
          [&](const JobFinished& e) -> Status {
            GANDIVA_RETURN_IF_ERROR(need_job(e.job));
            Job& job = state_.mutable_job(e.job);
            if (IsTerminal(job.state)) return Status::Ok();  // e.g. killed
            if (!e.success && !e.permanent && job.placed() &&
                job.run_failures < job.spec.retries) {
              RetryRun(job, e.checkpoint);
              return Status::Ok();
            }
            OnJobEnded(job,
                       e.success ? JobState::kFinished : JobState::kFailed);
            return Status::Ok();
          },
          [&](const ProfileReport& e) -> Status {
            GANDIVA_RETURN_IF_ERROR(need_job(e.job));
            Profile& p = state_.mutable_job(e.job).profile;
            const double w = p.reports == 0 ? 1.0 : options_.profile_smoothing;
            p.minibatch_rate =
                w * e.minibatch_rate + (1 - w) * p.minibatch_rate;
            p.last_rate = e.minibatch_rate;
            p.minibatches = e.minibatches;
            p.gpu_memory_gb = e.gpu_memory_gb;
            p.gpu_utilization = e.gpu_utilization;
            ++p.reports;
            p.updated = event.time;
            const Job& j = state_.job(e.job);
            // A report without a rate (the job has not passed two
            // boundaries since it started or resumed) says nothing of how
            // fast it runs alone or packed.
            if (j.state == JobState::kRunning && !j.busy() &&
                e.minibatch_rate > 0) {
              auto smooth = [&](double& rate, int& n) {
                const double wn = n == 0 ? 1.0 : options_.profile_smoothing;
                rate = wn * e.minibatch_rate + (1 - wn) * rate;
                ++n;
              };
              if (j.packed_with.valid()) {
                smooth(p.rate_packed, p.packed_reports);
              } else if (static_cast<int>(j.gpus.size()) == j.spec.gpus) {
                smooth(p.rate_alone, p.alone_reports);
              }
            }
            return Status::Ok();
          },
          [&](const ActionDone& e) -> Status {
            GANDIVA_RETURN_IF_ERROR(need_job(e.job));
            Job& job = state_.mutable_job(e.job);
            // A stale report (the job ended or moved on) changes nothing.
            if (job.busy() && job.in_flight_id == e.action) {
              OnActionDone(job, e);
            }
            return Status::Ok();
          },
          [&](const ActionFailed& e) -> Status {
            GANDIVA_RETURN_IF_ERROR(need_job(e.job));
            Job& job = state_.mutable_job(e.job);
            if (job.busy() && job.in_flight_id == e.action) {
              OnActionFailed(job, e);
            }
            return Status::Ok();
          },
          [&](const ServerUp& e) -> Status {
            if (e.id.valid()) {
              if (e.id.value >= state_.cluster_.num_servers()) {
                return NotFound("unknown server " + std::to_string(e.id.value));
              }
              state_.cluster_.SetUp(e.id, true);
              state_.cluster_.SetProcessImagesUnusable(
                  e.id, e.spec.process_images_unusable);
              return Status::Ok();
            }
            if (std::string err = ValidateServerSpec(e.spec); !err.empty()) {
              return InvalidArgument("server '" + e.spec.name + "': " + err);
            }
            state_.cluster_.AddServer(e.spec);
            return Status::Ok();
          },
          [&](const ServerDown& e) -> Status {
            if (!e.id.valid() || e.id.value >= state_.cluster_.num_servers()) {
              return NotFound("unknown server " + std::to_string(e.id.value));
            }
            // Collect first: requeueing changes the GPUs' job lists.
            std::vector<JobId> lost;
            for (GpuId g : state_.cluster_.GpusOf(e.id)) {
              for (JobId j : state_.cluster_.gpu(g).jobs) lost.push_back(j);
            }
            std::sort(lost.begin(), lost.end());
            lost.erase(std::unique(lost.begin(), lost.end()), lost.end());
            for (JobId j : lost) RequeueLost(state_.mutable_job(j));
            state_.cluster_.SetUp(e.id, false);
            return Status::Ok();
          },
          [&](const Tick&) -> Status { return Status::Ok(); },
          [&](const KillRequest& e) -> Status { return need_job(e.job); },
          [&](const PriorityRequest& e) -> Status { return need_job(e.job); },
          [&](const MechanismRequest& e) -> Status {
            std::vector<GpuId> gpus;
            return PlanMechanism(e, &gpus);
          },
          [&](const JobFound& e) -> Status {
            GANDIVA_RETURN_IF_ERROR(need_job(e.job));
            Job& job = state_.mutable_job(e.job);
            if (job.state != JobState::kQueued || job.held) {
              return FailedPrecondition(
                  JobRef(e.job) + " is " +
                  (job.held ? std::string("held")
                            : std::string(JobStateName(job.state))) +
                  ", not queued");
            }
            GANDIVA_RETURN_IF_ERROR(
                CheckAdoptable(e.job, job.spec.gpus, e.placed_on));
            state_.Dequeue(job);
            job.waiting_since = event.time;
            Adopt(job, e.placed_on, e.suspended);
            return Status::Ok();
          },
          [&](const CordonRequest& e) -> Status {
            if (!e.server.valid() ||
                e.server.value >= state_.cluster_.num_servers()) {
              return NotFound("unknown server " +
                              std::to_string(e.server.value));
            }
            state_.cluster_.SetCordoned(e.server, e.cordon);
            return Status::Ok();
          },
          [&](const QueuesChanged& e) -> Status {
            return CheckQueues(e.queues);
          },
          [&](const DrainRequest& e) -> Status {
            GANDIVA_RETURN_IF_ERROR(CheckDrain(e));
            state_.cluster_.SetCordoned(e.server, true);
            return Status::Ok();
          },
          [&](const CarrierKnown& e) -> Status {
            GANDIVA_RETURN_IF_ERROR(need_job(e.job));
            if (e.carrier > Carrier::kProcessImage) {
              return InvalidArgument(
                  "field 'carrier': " +
                  std::to_string(static_cast<int>(e.carrier)) +
                  " is not a carrier");
            }
            state_.mutable_job(e.job).spec.carrier = e.carrier;
            return Status::Ok();
          },
          [&](const ProcessLost& e) -> Status {
            GANDIVA_RETURN_IF_ERROR(need_job(e.job));
            Job& job = state_.mutable_job(e.job);
            if (IsTerminal(job.state) || job.state == JobState::kQueued) {
              return Status::Ok();
            }
            if (job.busy()) {
              return FailedPrecondition(
                  JobRef(e.job) + " has its " +
                  std::string(ActionKindName(job.in_flight)) +
                  " under way: that is settled before its process is lost");
            }
            // It has run nowhere since: a Resume relocates it from the
            // checkpoint; without one, it is started again.
            job.ran_on.clear();
            if (!e.checkpoint && job.state == JobState::kSuspended) {
              job.launched = false;
            }
            return Status::Ok();
          },
          [&](const HoldRequest& e) -> Status {
            GANDIVA_RETURN_IF_ERROR(need_job(e.job));
            Job& job = state_.mutable_job(e.job);
            if (IsTerminal(job.state)) {
              return FailedPrecondition(JobRef(e.job) + " already ended");
            }
            if (job.held == e.hold) return Status::Ok();
            if (e.hold) {
              if (job.state == JobState::kQueued) state_.Dequeue(job);
              if (job.state == JobState::kSuspended) SetWaiting(job, false);
              job.held = true;
            } else {
              job.held = false;
              if (job.state == JobState::kQueued) Queue(job);
              if (job.state == JobState::kSuspended && !job.busy()) {
                SetWaiting(job, true);
              }
            }
            return Status::Ok();
          },
      },
      event.body);
}

const char* MechanismKindName(MechanismRequest::Kind kind) {
  switch (kind) {
    case MechanismRequest::Kind::kMigrate:
      return "migrate";
    case MechanismRequest::Kind::kPack:
      return "pack";
    case MechanismRequest::Kind::kUnpack:
      return "unpack";
    case MechanismRequest::Kind::kResize:
      return "resize";
  }
  return "unknown";
}

Status Scheduler::PlanMechanism(const MechanismRequest& m,
                                std::vector<GpuId>* gpus) const {
  GANDIVA_RETURN_IF_ERROR(PlanGpus(m, gpus));
  return CheckCarried(m);
}

// Whether the job's work can be carried where the mechanism takes it
// (JobSpec::carrier). After the plan: its reasons come first.
Status Scheduler::CheckCarried(const MechanismRequest& m) const {
  using Kind = MechanismRequest::Kind;
  const Cluster& cluster = state_.cluster_;
  const Job& job = state_.job(m.job);
  bool moves = m.kind == Kind::kMigrate || m.kind == Kind::kResize;
  if (m.kind == Kind::kPack) moves = job.gpus != state_.job(m.with).gpus;
  const Carrier carrier = job.spec.carrier;
  if (!moves || !job.launched || job.gpus.empty() ||
      carrier == Carrier::kSelf) {
    return Status::Ok();
  }
  const std::string head = "cannot " + std::string(MechanismKindName(m.kind)) +
                           " " + JobRef(m.job) + ": ";
  if (cluster.SpreadOf(job.gpus) == Spread::kAcrossServers) {
    return FailedPrecondition(
        head +
        "it spans servers and does not use the gandiva job-side library (a "
        "multi-server job moves by restarting every part from the "
        "checkpoint its rank 0 saves)");
  }
  if (carrier == Carrier::kRestart) return Status::Ok();
  const std::string why = head +
                          "it does not use the gandiva job-side library, is "
                          "not declared restartable, and ";
  if (m.kind == Kind::kResize) {
    return FailedPrecondition(
        why + "CRIU can move a process but not change its world size");
  }
  // An image of its process is saved where it is and restored where it
  // goes: both must be able to.
  std::vector<ServerId> ends = {cluster.gpu(job.gpus[0]).server};
  if (m.kind == Kind::kMigrate) ends.push_back(m.server);
  if (m.kind == Kind::kPack) {
    ends.push_back(cluster.gpu(state_.job(m.with).gpus[0]).server);
  }
  for (ServerId s : ends) {
    const ServerSpec& spec = cluster.server(s).spec;
    if (!spec.process_images_unusable.empty()) {
      return FailedPrecondition(why + "CRIU is not usable on " + spec.name +
                                " (" + spec.process_images_unusable + ")");
    }
  }
  return Status::Ok();
}

Status Scheduler::PlanGpus(const MechanismRequest& m,
                           std::vector<GpuId>* gpus) const {
  using Kind = MechanismRequest::Kind;
  const Cluster& cluster = state_.cluster_;
  if (!state_.has_job(m.job)) return NotFound("unknown " + JobRef(m.job));
  const Job& job = state_.job(m.job);
  const std::string me = JobRef(m.job);
  auto refuse = [&](const std::string& why) {
    return FailedPrecondition("cannot " +
                              std::string(MechanismKindName(m.kind)) + " " +
                              me + ": " + why);
  };
  if (IsTerminal(job.state)) return refuse("it already ended");
  if (job.busy()) {
    return refuse("a " + std::string(ActionKindName(job.in_flight)) +
                  " is under way; try again when it is done");
  }
  const int have = static_cast<int>(job.gpus.size());
  switch (m.kind) {
    case Kind::kMigrate: {
      if (!job.placed()) return refuse("it is queued: nothing to move");
      if (job.packed_with.valid()) {
        return refuse("it is packed with " + JobRef(job.packed_with) +
                      "; unpack it first");
      }
      if (job.launched && job.immovable) {
        return refuse("it cannot be checkpointed: " + job.immovable_reason);
      }
      if (!m.server.valid() || m.server.value >= cluster.num_servers()) {
        return refuse("unknown server " + std::to_string(m.server.value));
      }
      const Server& s = cluster.server(m.server);
      if (!s.up) return refuse("server " + s.spec.name + " is down");
      if (s.cordoned) return refuse("server " + s.spec.name + " is cordoned");
      if (cluster.gpu(job.gpus[0]).server == m.server &&
          cluster.SpreadOf(job.gpus) != Spread::kAcrossServers) {
        return refuse("it is already on server " + s.spec.name);
      }
      if (job.spec.gpus > s.num_gpus()) {
        return refuse("it needs " + std::to_string(job.spec.gpus) +
                      " GPUs and server " + s.spec.name + " has " +
                      std::to_string(s.num_gpus()));
      }
      // GPUs no running job holds, emptiest first.
      std::vector<std::pair<size_t, GpuId>> idle;
      for (GpuId g : cluster.GpusOf(m.server)) {
        if (cluster.gpu(g).active == 0) {
          idle.emplace_back(cluster.gpu(g).jobs.size(), g);
        }
      }
      if (static_cast<int>(idle.size()) < have) {
        return refuse("no room: server " + s.spec.name + " has " +
                      std::to_string(idle.size()) +
                      " GPUs that no running job holds, and it needs " +
                      std::to_string(have));
      }
      std::stable_sort(idle.begin(), idle.end(),
                       [](auto& a, auto& b) { return a.first < b.first; });
      gpus->clear();
      for (int i = 0; i < have; ++i) gpus->push_back(idle[i].second);
      std::sort(gpus->begin(), gpus->end());
      return Status::Ok();
    }
    case Kind::kPack: {
      if (!state_.has_job(m.with)) return NotFound("unknown " + JobRef(m.with));
      const Job& peer = state_.job(m.with);
      const std::string them = JobRef(m.with);
      if (m.with == m.job) return refuse("a job cannot be packed with itself");
      if (peer.state != JobState::kRunning) {
        return refuse(them + " is not running");
      }
      if (peer.busy()) {
        return refuse(them + " has a " +
                      std::string(ActionKindName(peer.in_flight)) +
                      " under way");
      }
      if (peer.packed_with.valid()) {
        return refuse(them + " is already packed with " +
                      JobRef(peer.packed_with));
      }
      if (job.state == JobState::kRunning) {
        return refuse(
            "it is running; packing joins a waiting job to a "
            "running one (suspend it first)");
      }
      if (job.spec.gpus != static_cast<int>(peer.gpus.size())) {
        return refuse("it needs " + std::to_string(job.spec.gpus) +
                      " GPUs and " + them + " holds " +
                      std::to_string(peer.gpus.size()));
      }
      if (job.launched && job.immovable && job.gpus != peer.gpus) {
        return refuse("it would have to move and cannot be checkpointed: " +
                      job.immovable_reason);
      }
      for (GpuId g : peer.gpus) {
        if (cluster.gpu(g).active != 1) {
          return refuse("the GPUs of " + them + " are shared already");
        }
      }
      const Server& host = cluster.server(cluster.gpu(peer.gpus[0]).server);
      if (host.cordoned && job.gpus != peer.gpus) {
        return refuse(them + " runs on server " + host.spec.name +
                      ", which is cordoned");
      }
      // Both measured, on GPUs whose memory is known: they must fit.
      const double need =
          job.profile.gpu_memory_gb + peer.profile.gpu_memory_gb;
      if (host.spec.gpu_memory_gb > 0 && job.profile.gpu_memory_gb > 0 &&
          peer.profile.gpu_memory_gb > 0 && need > host.spec.gpu_memory_gb) {
        return refuse("together with " + them + " it uses " + FormatGib(need) +
                      " of GPU memory, more than the " +
                      FormatGib(host.spec.gpu_memory_gb) + " of " +
                      host.spec.name + "'s GPUs");
      }
      *gpus = peer.gpus;
      return Status::Ok();
    }
    case Kind::kUnpack:
      if (!job.packed_with.valid() || job.state != JobState::kRunning) {
        return refuse("it is not packed");
      }
      if (state_.job(job.packed_with).busy()) {
        return refuse(JobRef(job.packed_with) + " has a mechanism under way");
      }
      return Status::Ok();
    case Kind::kResize: {
      const int want = m.gpus;
      if (!job.spec.elastic) {
        return refuse("it is not elastic (submit it with elastic: true)");
      }
      if (want < 1 || !std::has_single_bit(static_cast<unsigned>(want))) {
        return refuse("field 'gpus': " + std::to_string(want) +
                      " is not a power of two >= 1");
      }
      if (job.state != JobState::kRunning) {
        return refuse("it is not running");
      }
      if (job.packed_with.valid()) {
        return refuse("it is packed with " + JobRef(job.packed_with) +
                      "; unpack it first");
      }
      if (want == have) {
        return refuse("it already has " + std::to_string(have) + " GPUs");
      }
      // The job's servers, those holding most of its GPUs first (ties:
      // in the order its GPUs name them).
      std::vector<std::pair<ServerId, std::vector<GpuId>>> own;
      for (GpuId g : job.gpus) {
        const ServerId s = cluster.gpu(g).server;
        auto it = std::find_if(own.begin(), own.end(),
                               [s](const auto& o) { return o.first == s; });
        if (it == own.end()) {
          own.push_back({s, {}});
          it = own.end() - 1;
        }
        it->second.push_back(g);
      }
      std::stable_sort(own.begin(), own.end(),
                       [](const auto& a, const auto& b) {
                         return a.second.size() > b.second.size();
                       });
      if (want < have) {
        // A shrink keeps the GPUs of the servers holding most of the job:
        // a job that spans servers may come to fit on one.
        gpus->clear();
        for (const auto& [s, gs] : own) {
          for (GpuId g : gs) {
            if (static_cast<int>(gpus->size()) < want) gpus->push_back(g);
          }
        }
        return Status::Ok();
      }
      const Server& s = cluster.server(own[0].first);
      if (s.cordoned) {
        return refuse("server " + s.spec.name +
                      " is cordoned: it can shrink, "
                      "not grow");
      }
      // A grow takes free GPUs on the job's own servers first, then on the
      // open servers with the most free GPUs: beyond what its servers hold
      // it comes to span servers (its parts restart together).
      *gpus = job.gpus;
      auto take_free = [&](ServerId sid) {
        for (GpuId g : cluster.GpusOf(sid)) {
          if (static_cast<int>(gpus->size()) == want) return;
          if (cluster.gpu(g).jobs.empty()) gpus->push_back(g);
        }
      };
      for (const auto& o : own) take_free(o.first);
      const int on_own = static_cast<int>(gpus->size());
      std::vector<ServerId> others;
      for (int i = 0; i < cluster.num_servers(); ++i) {
        const Server& o = cluster.server(ServerId(i));
        if (!o.up || o.cordoned) continue;
        if (std::any_of(own.begin(), own.end(), [&](const auto& w) {
              return w.first == ServerId(i);
            })) {
          continue;
        }
        others.push_back(ServerId(i));
      }
      std::stable_sort(
          others.begin(), others.end(), [&](ServerId a, ServerId b) {
            return cluster.server(a).free_gpus > cluster.server(b).free_gpus;
          });
      for (ServerId o : others) take_free(o);
      if (static_cast<int>(gpus->size()) < want) {
        const int here = on_own - have;
        const int there = static_cast<int>(gpus->size()) - on_own;
        return refuse("no room: it needs " + std::to_string(want - have) +
                      " more GPUs; " +
                      (own.size() == 1 ? "server " + s.spec.name + " has "
                                       : "its servers have ") +
                      std::to_string(here) + " free, the other servers " +
                      std::to_string(there));
      }
      return Status::Ok();
    }
  }
  return InvalidArgument("unknown mechanism");
}

void Scheduler::CarryOut(const MechanismRequest& m, Actions& actions) {
  std::vector<GpuId> gpus;
  GANDIVA_CHECK(PlanMechanism(m, &gpus).ok());  // Apply checked it
  Job& job = state_.mutable_job(m.job);
  switch (m.kind) {
    case MechanismRequest::Kind::kMigrate:
      if (job.held) {  // the operator wants it to run there
        job.held = false;
      }
      actions.Migrate(m.job, std::move(gpus));
      return;
    case MechanismRequest::Kind::kPack:
      if (job.held) job.held = false;
      if (job.state == JobState::kQueued) {
        actions.Assign(m.job, std::move(gpus));
      } else if (job.gpus != gpus) {
        actions.Requeue(m.job);
        actions.Assign(m.job, std::move(gpus));
      }
      actions.Pack(m.job, m.with);
      return;
    case MechanismRequest::Kind::kUnpack:
      actions.Unpack(m.job);
      return;
    case MechanismRequest::Kind::kResize:
      actions.Resize(m.job, std::move(gpus));
      return;
  }
}

Status Scheduler::CheckAdoptable(JobId id, int gpus,
                                 const std::vector<GpuId>& placed_on) const {
  return core::CheckAdoptable(state_.cluster_, id, gpus, placed_on);
}

Status CheckAdoptable(const Cluster& cluster, JobId id, int gpus,
                      const std::vector<GpuId>& placed_on) {
  const std::string what = JobRef(id) + ": field 'placed_on': ";
  if (static_cast<int>(placed_on.size()) != gpus) {
    return InvalidArgument(what + std::to_string(placed_on.size()) +
                           " GPUs for a job of " + std::to_string(gpus));
  }
  std::set<int32_t> seen;
  for (GpuId g : placed_on) {
    if (!g.valid() || g.value >= cluster.num_gpus()) {
      return InvalidArgument(what + "no GPU " + std::to_string(g.value));
    }
    if (!seen.insert(g.value).second) {
      return InvalidArgument(what + "GPU " + std::to_string(g.value) +
                             " named twice");
    }
    const Gpu& gpu = cluster.gpu(g);
    if (gpu.server != cluster.gpu(placed_on.front()).server) {
      return InvalidArgument(what + "the GPUs are on more than one server");
    }
    if (!cluster.server(gpu.server).up) {
      return Status(StatusCode::kFailedPrecondition,
                    what + "GPU " + std::to_string(g.value) +
                        " is on a server that is down");
    }
    if (!gpu.jobs.empty()) {
      return Status(StatusCode::kFailedPrecondition,
                    what + "GPU " + std::to_string(g.value) + " holds " +
                        JobRef(gpu.jobs.front()));
    }
  }
  return Status::Ok();
}

void Scheduler::Adopt(Job& job, const std::vector<GpuId>& gpus,
                      bool suspended) {
  state_.cluster_.Place(job.id, job.spec.gpus, gpus);
  job.gpus = gpus;
  job.ran_on = gpus;
  ++state_.placed_;
  job.launched = true;
  job.first_started = state_.now_;
  if (suspended) {
    job.state = JobState::kSuspended;
    SetWaiting(job, true);
  } else {
    state_.cluster_.Activate(job.gpus);
    job.state = JobState::kRunning;
    job.run_since = state_.now_;
  }
}

void Scheduler::SetWaiting(Job& job, bool waiting) {
  if (waiting && job.awaits_start_retry(state_.now_)) {
    // Waiting out a failed resume: ReleaseStartRetries adds it then.
    state_.start_retries_.insert({job.start_retry_at, job.id});
  } else if (waiting && !job.held) {
    state_.AddWaiting(job);
  } else {
    state_.RemoveWaiting(job);
  }
}

void Scheduler::Unlink(Job& job) {
  if (!job.packed_with.valid()) return;
  Job& peer = state_.mutable_job(job.packed_with);
  if (peer.packed_with == job.id) {
    peer.packed_with = JobId();
    peer.packed_since = Time::Never();
  }
  job.packed_with = JobId();
  job.packed_since = Time::Never();
}

void Scheduler::Unplace(Job& job) {
  Unlink(job);
  if (job.state == JobState::kRunning || job.state == JobState::kMigrating) {
    state_.cluster_.Deactivate(job.gpus);
  }
  if (job.state == JobState::kSuspended) SetWaiting(job, false);
  state_.cluster_.Unplace(job.id, job.gpus);
  --state_.placed_;
}

void Scheduler::OnJobEnded(Job& job, JobState end) {
  GANDIVA_CHECK(CanTransition(job.state, end));
  if (job.state == JobState::kQueued) {
    if (!job.held) state_.Dequeue(job);
  } else {
    Unplace(job);
  }
  job.state = end;
  job.in_flight = ActionKind::kNone;
  job.ended = state_.now_;
}

void Scheduler::Restart(Job& job, bool from_checkpoint, Actions& actions) {
  job.restarting_from_checkpoint = from_checkpoint;
  if (!from_checkpoint) job.profile.minibatches = 0;  // from the beginning
  Action& a = actions.Emit(job, ActionKind::kRestart, /*mechanism=*/true);
  a.gpus = job.gpus;
  a.relocates = from_checkpoint;
  a.launch = !from_checkpoint;
  a.reason = from_checkpoint
                 ? "its process was lost: it goes on from the checkpoint kept"
                 : "its process was lost with no checkpoint kept: it starts "
                   "again from the beginning";
}

void Scheduler::RequeueLost(Job& job) {
  Unplace(job);
  job.state = JobState::kQueued;
  job.in_flight = ActionKind::kNone;
  job.launched = false;
  job.ran_on.clear();  // its process is gone
  job.waiting_since = state_.now_;
  Queue(job);
}

Duration Scheduler::RetryDelay(int failures) const {
  Duration wait = options_.start_retry_delay;
  for (int i = 1; i < failures && wait < kMaxStartRetryDelay; ++i) {
    wait = wait * 2;
  }
  return std::min(wait, kMaxStartRetryDelay);
}

void Scheduler::RetryRun(Job& job, bool from_checkpoint) {
  ++job.run_failures;
  job.start_retry_at = state_.now_ + RetryDelay(job.run_failures);
  RequeueLost(job);
  // Run again, it resumes from the checkpoint, wherever it is placed.
  job.launched = from_checkpoint;
}

void Scheduler::Queue(Job& job) {
  if (job.held) return;
  if (job.start_retry_at > state_.now_) {
    state_.start_retries_.insert({job.start_retry_at, job.id});
  } else {
    state_.Enqueue(job);
  }
}

void Scheduler::ReleaseStartRetries() {
  auto& retries = state_.start_retries_;
  state_.start_retries_released_ = false;
  while (!retries.empty() && retries.begin()->first <= state_.now_) {
    const JobId id = retries.begin()->second;
    retries.erase(retries.begin());
    if (!state_.has_job(id)) continue;  // forgotten since
    Job& job = state_.mutable_job(id);
    if (job.held || job.awaits_start_retry(state_.now_)) continue;
    if (job.state == JobState::kQueued) {
      state_.Enqueue(job);
      state_.start_retries_released_ = true;
    } else if (job.state == JobState::kSuspended && !job.busy()) {
      state_.AddWaiting(job);  // its resume is due again
      state_.start_retries_released_ = true;
    }
  }
}

void Scheduler::OnActionDone(Job& job, const ActionDone&) {
  const ActionKind kind = job.in_flight;
  job.in_flight = ActionKind::kNone;
  if (kind == ActionKind::kMigrate || kind == ActionKind::kGrow ||
      kind == ActionKind::kShrink) {
    job.move_failures = 0;
    job.move_retry_at = Time::Zero();
  }
  switch (kind) {
    case ActionKind::kStart:
      job.start_failures = 0;
      job.start_retry_at = Time::Zero();
      job.start_failed_on.clear();
      job.run_since = state_.now_;
      break;
    case ActionKind::kResume:
    case ActionKind::kPack:
      // It runs again: the resumes (or start) that failed before are over.
      job.start_failures = 0;
      job.start_retry_at = Time::Zero();
      job.run_since = state_.now_;
      break;
    case ActionKind::kMigrate:
      job.start_failures = 0;  // as a resume's (a suspended job's move)
      job.start_retry_at = Time::Zero();
      job.state = JobState::kRunning;
      job.run_since = state_.now_;
      job.migrating_from.clear();
      job.migrating_running = false;
      break;
    case ActionKind::kRestart:
      job.run_since = state_.now_;
      job.launched = true;
      job.restarting_from_checkpoint = false;
      ++job.restarts;
      break;
    case ActionKind::kGrow:
      job.migrating_from.clear();
      job.run_since = state_.now_;
      break;
    case ActionKind::kShrink: {
      std::vector<GpuId> old = job.gpus;
      std::sort(old.begin(), old.end());
      std::vector<GpuId> removed;
      std::set_difference(old.begin(), old.end(), job.shrinking_to.begin(),
                          job.shrinking_to.end(), std::back_inserter(removed));
      state_.cluster_.Deactivate(removed);
      state_.cluster_.Unplace(job.id, removed, /*some=*/true);
      job.gpus = std::move(job.shrinking_to);
      job.shrinking_to.clear();
      job.run_since = state_.now_;
      break;
    }
    case ActionKind::kSuspend:
    case ActionKind::kUnpack:
      Unlink(job);
      state_.cluster_.Deactivate(job.gpus);
      job.state = JobState::kSuspended;
      job.waiting_since = state_.now_;
      SetWaiting(job, true);
      break;
    default:
      break;
  }
  switch (kind) {
    case ActionKind::kStart:
    case ActionKind::kResume:
    case ActionKind::kMigrate:
    case ActionKind::kPack:
    case ActionKind::kGrow:
    case ActionKind::kShrink:
    case ActionKind::kRestart:
      job.ran_on = job.gpus;  // it runs there now
      break;
    default:
      break;
  }
}

void Scheduler::OnActionFailed(Job& job, const ActionFailed& failed) {
  const ActionKind kind = job.in_flight;
  job.in_flight = ActionKind::kNone;
  ++state_.counters_.actions_failed;
  // The job's own counts are of what happened: this did not (the cluster's
  // counters are of actions taken, failed ones included).
  switch (kind) {
    case ActionKind::kSuspend:
      --job.suspends;
      break;
    case ActionKind::kResume:
      --job.resumes;
      break;
    case ActionKind::kMigrate:
      --job.migrations;
      break;
    case ActionKind::kPack:
      --job.packs;
      break;
    case ActionKind::kGrow:
    case ActionKind::kShrink:
      --job.resizes;
      break;
    default:
      break;
  }
  if (!failed.permanent &&
      (kind == ActionKind::kMigrate || kind == ActionKind::kGrow)) {
    // Backoff: 30 s, 60 s, ... at most 30 min before a policy moves it again
    // (a shrink the cluster needs is not held back).
    ++job.move_failures;
    Duration wait = Duration::Seconds(30);
    for (int i = 1; i < job.move_failures && wait < Duration::Seconds(1800);
         ++i) {
      wait = wait * 2;
    }
    job.move_retry_at = state_.now_ + std::min(wait, Duration::Seconds(1800));
  }
  switch (kind) {
    case ActionKind::kStart: {
      // A job that never ran has not started yet.
      if (job.run_since == Time::Never()) job.first_started = Time::Never();
      ++job.start_failures;
      for (GpuId g : job.gpus) {
        const ServerId server = state_.cluster_.gpu(g).server;
        auto& failed_on = job.start_failed_on;
        failed_on.erase(std::remove(failed_on.begin(), failed_on.end(), server),
                        failed_on.end());
        failed_on.push_back(server);  // the latest last
        if (static_cast<int>(failed_on.size()) > kMaxStartFailedServers) {
          failed_on.erase(failed_on.begin());
        }
      }
      if (options_.start_attempts > 0 &&
          job.start_failures >= options_.start_attempts) {
        OnJobEnded(job, JobState::kFailed);
        break;
      }
      job.start_retry_at = state_.now_ + RetryDelay(job.start_failures);
      RequeueLost(job);
      break;
    }
    case ActionKind::kResume:
      // Suspended where it was, out of the waiting jobs until its retry:
      // a resume that cannot be carried out now (its checkpoint not
      // fetched, its agent not answering) is not tried again at once.
      state_.cluster_.Deactivate(job.gpus);
      job.state = JobState::kSuspended;
      ++job.start_failures;
      job.start_retry_at = state_.now_ + RetryDelay(job.start_failures);
      SetWaiting(job, true);
      break;
    case ActionKind::kSuspend:
    case ActionKind::kUnpack:
      break;  // it keeps running
    case ActionKind::kShrink:
      job.shrinking_to.clear();
      break;  // it runs on at its size
    case ActionKind::kGrow: {
      // Back to the GPUs it had.
      std::vector<GpuId> old = job.migrating_from;
      std::sort(old.begin(), old.end());
      std::vector<GpuId> now = job.gpus;
      std::sort(now.begin(), now.end());
      std::vector<GpuId> extra;
      std::set_difference(now.begin(), now.end(), old.begin(), old.end(),
                          std::back_inserter(extra));
      state_.cluster_.Deactivate(extra);
      state_.cluster_.Unplace(job.id, extra, /*some=*/true);
      job.gpus = std::move(job.migrating_from);
      job.migrating_from.clear();
      break;
    }
    case ActionKind::kRestart:
      // From the checkpoint: Handle restarts it from the beginning. From
      // the beginning: nothing is left to try.
      if (job.restarting_from_checkpoint) {
        job.restarting_from_checkpoint = false;
      } else {
        OnJobEnded(job, JobState::kFailed);
      }
      break;
    case ActionKind::kPack:
      // It did not start (for example, the two do not fit in the GPU's
      // memory): suspended where it was.
      Unlink(job);
      state_.cluster_.Deactivate(job.gpus);
      job.state = JobState::kSuspended;
      SetWaiting(job, true);
      break;
    case ActionKind::kMigrate:
      // Back where it was, as it was (running or suspended).
      state_.cluster_.Deactivate(job.gpus);
      state_.cluster_.Unplace(job.id, job.gpus);
      job.gpus = std::move(job.migrating_from);
      job.migrating_from.clear();
      state_.cluster_.Place(job.id, job.spec.gpus, job.gpus);
      if (job.migrating_running) {
        state_.cluster_.Activate(job.gpus);
        job.state = JobState::kRunning;
      } else {
        job.state = JobState::kSuspended;
        SetWaiting(job, true);
      }
      job.migrating_running = false;
      if (failed.permanent) {
        job.immovable = true;
        job.immovable_reason = failed.reason;
      }
      break;
    default:
      break;
  }
}

}  // namespace gandiva::core
