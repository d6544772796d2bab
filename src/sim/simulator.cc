#include "sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <queue>
#include <unordered_map>

#include "core/rng.h"
#include "core/scheduler.h"

namespace gandiva::sim {

using core::Action;
using core::ActionKind;
using core::Duration;
using core::JobId;
using core::Time;

namespace {

enum class EvKind : uint8_t {
  kFinish,
  kActionComplete,
  kTick,
  kSample,
  kProfile,
  kCluster,  // arg: the index of a SimOptions::cluster_events entry
};

struct Ev {
  int64_t t;
  uint64_t seq;
  EvKind kind;
  int32_t job;
  int64_t arg;  // kActionComplete: the action's id
};
struct Later {
  // Earliest first; at one instant a timeline sample comes before anything
  // else, so it sees the cluster as it was, not in the middle of the
  // rotation a tick at that instant starts.
  bool operator()(const Ev& x, const Ev& y) const {
    if (x.t != y.t) return x.t > y.t;
    const bool xs = x.kind == EvKind::kSample, ys = y.kind == EvKind::kSample;
    if (xs != ys) return ys;
    return x.seq > y.seq;
  }
};

// A job's progress in the simulated world.
struct SimJob {
  double total = 0;        // mini-batches to do
  double done = 0;         // mini-batches done
  double rate = 0;         // mini-batches per second now (0 when not training)
  double feedback_at = 0;  // mini-batches that make the first feedback
  int64_t last_us = 0;     // when done was last brought up to date
  // When it will finish at the current rate (-1: not training), and the
  // earliest finish event queued for it (-1: none). Keeping one event per job
  // in the heap, instead of one per rate change, keeps the heap small.
  int64_t finish_at = -1;
  int64_t queued_finish = -1;
  int64_t training_us = 0;      // time spent training
  int64_t training_gpu_us = 0;  // the same, times its GPUs then
  // training_gpu_us when its work was last kept (lost_gpu_hours), less
  // what was lost since to preemption.
  int64_t kept_gpu_us = 0;
  // Its last checkpoint (SimOptions::checkpoint_interval): the progress and
  // training_gpu_us then, and the training time since.
  double ckpt_done = 0;
  int64_t ckpt_gpu_us = 0;
  int64_t since_ckpt_us = 0;
  // Preempted: its next run launches a new process from the checkpoint.
  bool relaunch = false;
  int gpus_now() const { return static_cast<int>(training_on.size()); }
  std::vector<int32_t> training_on;  // GPUs while training (none when not)
  double busy_gpu_s = 0;             // modelled GPU-busy seconds (see gpu_busy)
  double iso_rate = 0;     // isolated rate at its size, ideal placement
  double utilization = 0;  // the catalog's GPU utilisation when alone
  ActionKind pending = ActionKind::kNone;
  int64_t pending_action = 0;
  bool pending_fails = false;  // the pending action will fail (no memory)
  // The job it was last packed with (-1: never): whose rate to recompute
  // when this one stops, even after the scheduler has dropped the link.
  int32_t partner = -1;
  bool ended = false;
};

class World final : public SimControl {
 public:
  World(const Workload& workload, const Catalog& catalog,
        std::unique_ptr<core::Policy> policy, const SimOptions& options)
      : workload_(workload),
        catalog_(catalog),
        options_(options),
        scheduler_(std::move(policy)) {}

  core::StatusOr<SimResult> Run();

  // SimControl, for the tick hook. Indexes are workload positions.
  core::Time now() const override { return Time::FromMicros(now_); }
  size_t num_jobs() const override { return workload_.jobs.size(); }
  double done(size_t i) const override {
    const int32_t j = sim_index_[i];
    if (j < 0) return 0;
    const SimJob& s = jobs_[j];
    return std::min(
        s.total, s.done + s.rate * static_cast<double>(now_ - s.last_us) / 1e6);
  }
  double total(size_t i) const override {
    const int32_t j = sim_index_[i];
    return j < 0 ? 0 : jobs_[j].total;
  }
  bool arrived(size_t i) const override {
    const int32_t j = sim_index_[i];
    return j >= 0 && static_cast<size_t>(j) < next_arrival_;
  }
  bool ended(size_t i) const override {
    const int32_t j = sim_index_[i];
    return j < 0 || jobs_[j].ended;
  }
  void Kill(size_t i, std::string reason) override {
    const int32_t j = sim_index_[i];
    if (j >= 0) kills_.emplace_back(j, std::move(reason));
  }
  void SetPriority(size_t i, int priority) override {
    const int32_t j = sim_index_[i];
    if (j >= 0) priorities_.emplace_back(j, priority);
  }
  std::string WhyQueued(size_t i) override {
    const int32_t j = sim_index_[i];
    const core::ClusterState& st = scheduler_.state();
    if (j < 0 || !st.has_job(JobId(j))) return "";
    const core::Job& job = st.job(JobId(j));
    if (job.state != core::JobState::kQueued) return "";
    std::string own = core::OwnWaitReason(job, st.cluster(), st.now());
    if (!own.empty()) return own;
    return scheduler_.ExplainQueue()->Why(job.id, job.spec.gpus);
  }

 private:
  void Push(int64_t t, EvKind kind, int32_t job, int64_t arg) {
    heap_.push(Ev{t, seq_++, kind, job, arg});
  }
  core::Status Send(core::EventBody body);
  // Checks SimOptions::cluster_events and queues them.
  core::Status ScheduleClusterEvents();
  // Feeds one to the core.
  core::Status ApplyClusterEvent(const ClusterEvent& ce);
  // Stops the jobs placed on a server about to be lost (the core requeues
  // them when it learns of the loss; nothing is sent to the world).
  void StopJobsOn(core::ServerId server);
  // kAgentRestart: the processes of the jobs placed there are lost.
  core::Status LoseProcessesOn(core::ServerId server, bool keep_checkpoints);
  // The jobs placed on a server, in id order.
  std::vector<int32_t> JobsOn(core::ServerId server) const;
  // Replaces the core by a new one restored from its snapshot.
  core::Status RestoreFromSnapshot();
  void Execute(const Action& a);
  // Brings a job's progress up to now.
  void Advance(int32_t j);
  void SetRate(int32_t j, double rate);
  double TrainingRate(int32_t j) const;
  // The job packed with j and training beside it now, or -1.
  int32_t ActivePartner(int32_t j) const;
  // Sets j's rate from its situation: training (placed, running, no
  // mechanism under way) or not.
  void RefreshRate(int32_t j);
  void RefreshPartnerOf(int32_t j);
  void Sample();
  // Adds gpus_training_ over [busy_since_, now_) to busy_gpu_us_.
  void AccrueBusy() {
    busy_gpu_us_ += static_cast<double>(gpus_training_) *
                    static_cast<double>(now_ - busy_since_);
    busy_since_ = now_;
  }
  // Fairness measures (SimOptions::queues): each job's queue.
  void SetUpQueues(int total_gpus);
  void QueueArrived(int32_t j);
  void QueueEnded(int32_t j);
  bool AllArrived() const { return next_arrival_ >= ids_.size(); }

  const Workload& workload_;
  const Catalog& catalog_;
  const SimOptions& options_;
  core::Scheduler scheduler_;

  std::vector<size_t> ids_;  // simulated jobs: indexes into workload_.jobs
  std::vector<int32_t> sim_index_;  // workload index -> simulated job, or -1
  std::vector<std::pair<int32_t, std::string>> kills_;  // from the hook
  std::vector<std::pair<int32_t, int>> priorities_;     // from the hook
  std::vector<SimJob> jobs_;
  std::vector<JobResult> results_;
  size_t next_arrival_ = 0;
  std::priority_queue<Ev, std::vector<Ev>, Later> heap_;
  uint64_t seq_ = 0;
  int64_t now_ = 0;
  int64_t ended_ = 0;
  // GPUs with a job training on them now (two packed jobs: one GPU), as
  // the runtime counts them; per GPU, how many train there.
  int64_t gpus_training_ = 0;
  std::vector<int32_t> trainers_on_gpu_;
  // Its integral over time (GPU-microseconds) up to busy_since_, and its
  // value at the last sample (taken at sampled_at_, -1 before the first).
  double busy_gpu_us_ = 0;
  int64_t busy_since_ = 0;
  double sampled_busy_gpu_us_ = 0;
  int64_t sampled_at_ = -1;
  int64_t busy_jobs_ = 0;  // jobs training or in a mechanism
  int64_t events_since_progress_ = 0;
  bool acted_ = false;  // the last core event caused an action
  std::vector<Action> actions_;
  std::vector<TimelineSample> timeline_;
  core::Rng noise_{core::Rng::Derive(options_.seed, 0x70f11e)};
  int64_t pack_failures_ = 0;
  int64_t events_since_snapshot_ = 0;
  int64_t cluster_events_left_ = 0;  // queued, not yet fed
  int64_t jobs_lost_ = 0;
  int64_t processes_lost_ = 0;
  int64_t restarts_ = 0;
  int64_t lost_gpu_us_ = 0;
  // With SimOptions::queues: each job's queue, each queue's quota
  // and the GPUs its arrived, unfinished jobs ask for; whether a job came
  // within its queue's quota.
  std::unique_ptr<FairnessMeter> fairness_;
  std::vector<int32_t> queue_of_;
  std::vector<double> queue_quota_, queue_demand_;
  std::vector<char> within_quota_;
};

void World::SetUpQueues(int total_gpus) {
  if (options_.queues.empty()) return;
  const core::QueueQuotas queues(options_.queues);
  for (size_t q = 0; q < queues.size(); ++q) {
    queue_quota_.push_back(queues.quota(q));
  }
  queue_demand_.assign(queues.size(), 0.0);
  queue_of_.resize(ids_.size());
  within_quota_.assign(ids_.size(), 0);
  for (size_t j = 0; j < ids_.size(); ++j) {
    queue_of_[j] = static_cast<int32_t>(queues.Of(workload_.jobs[ids_[j]].vc));
  }
  fairness_ =
      std::make_unique<FairnessMeter>(queues, static_cast<double>(total_gpus),
                                      options_.fairness_window.micros());
}

void World::QueueArrived(int32_t j) {
  if (!fairness_) return;
  const int32_t q = queue_of_[static_cast<size_t>(j)];
  const double gpus = workload_.jobs[ids_[static_cast<size_t>(j)]].gpus;
  double& demand = queue_demand_[static_cast<size_t>(q)];
  demand += gpus;
  within_quota_[static_cast<size_t>(j)] =
      demand <= queue_quota_[static_cast<size_t>(q)];
  fairness_->CountJob(q);
  fairness_->AddDemand(q, now_, gpus);
}

void World::QueueEnded(int32_t j) {
  if (!fairness_) return;
  const int32_t q = queue_of_[static_cast<size_t>(j)];
  const double gpus = workload_.jobs[ids_[static_cast<size_t>(j)]].gpus;
  queue_demand_[static_cast<size_t>(q)] -= gpus;
  fairness_->AddDemand(q, now_, -gpus);
}

core::Status World::ScheduleClusterEvents() {
  const std::vector<ClusterEvent>& events = options_.cluster_events;
  for (size_t i = 0; i < events.size(); ++i) {
    const ClusterEvent& ce = events[i];
    const std::string field = "cluster_events[" + std::to_string(i) + "]: ";
    if (ce.server < 0 || ce.server >= options_.servers) {
      return core::InvalidArgument(
          field + "field 'server': no server " + std::to_string(ce.server) +
          " (the cluster has " + std::to_string(options_.servers) + ")");
    }
    if (ce.at < Time::Zero()) {
      return core::InvalidArgument(
          field + "field 'at': " + std::to_string(ce.at.micros()) +
          "us is before the start");
    }
    Push(ce.at.micros(), EvKind::kCluster, -1, static_cast<int64_t>(i));
  }
  cluster_events_left_ = static_cast<int64_t>(events.size());
  return core::Status::Ok();
}

core::Status World::ApplyClusterEvent(const ClusterEvent& ce) {
  const core::ServerId id(ce.server);
  switch (ce.kind) {
    case ClusterEvent::Kind::kDrain:
      return Send(core::DrainRequest{id, ce.cordon_only});
    case ClusterEvent::Kind::kServerDown:
      StopJobsOn(id);
      return Send(core::ServerDown{id});
    case ClusterEvent::Kind::kServerUp:
      return Send(core::ServerUp{core::ServerSpec(), id});
    case ClusterEvent::Kind::kAgentRestart:
      return LoseProcessesOn(id, ce.keep_checkpoints);
  }
  return core::InvalidArgument("unknown cluster event");
}

std::vector<int32_t> World::JobsOn(core::ServerId server) const {
  const core::Cluster& cluster = scheduler_.state().cluster();
  std::vector<int32_t> on;
  for (core::GpuId g : cluster.GpusOf(server)) {
    for (JobId id : cluster.gpu(g).jobs) on.push_back(id.value);
  }
  std::sort(on.begin(), on.end());
  on.erase(std::unique(on.begin(), on.end()), on.end());
  return on;
}

core::Status World::LoseProcessesOn(core::ServerId server,
                                    bool keep_checkpoints) {
  for (int32_t j : JobsOn(server)) {
    SimJob& s = jobs_[j];
    if (s.ended) continue;
    if (s.pending == ActionKind::kSuspend || s.pending == ActionKind::kUnpack) {
      // The process stopped as it went: the suspend is done.
      const int64_t action = s.pending_action;
      s.pending = ActionKind::kNone;
      s.pending_action = 0;
      --busy_jobs_;
      GANDIVA_RETURN_IF_ERROR(
          Send(core::ActionDone{core::ActionId(action), JobId(j), Duration()}));
    }
    const core::Job& job = scheduler_.state().job(JobId(j));
    if (s.pending != ActionKind::kNone || job.busy() ||
        core::IsTerminal(job.state) || job.state == core::JobState::kQueued) {
      continue;
    }
    const bool running = job.state == core::JobState::kRunning;
    if (running) SetRate(j, 0);
    if (!keep_checkpoints) {
      Advance(j);
      s.done = 0;
      lost_gpu_us_ += s.training_gpu_us - s.kept_gpu_us;
      s.kept_gpu_us = s.training_gpu_us;
      s.ckpt_done = 0;
      s.ckpt_gpu_us = s.training_gpu_us;
      s.since_ckpt_us = 0;
    }
    ++processes_lost_;
    GANDIVA_RETURN_IF_ERROR(
        Send(core::ProcessLost{JobId(j), keep_checkpoints}));
    // Its partner, if packed, trains alone while it restarts.
    if (running) RefreshPartnerOf(j);
  }
  return core::Status::Ok();
}

void World::StopJobsOn(core::ServerId server) {
  for (int32_t j : JobsOn(server)) {
    SimJob& s = jobs_[j];
    if (s.ended) continue;
    // Training or in a mechanism: it counted as busy (as a kill).
    if (s.rate > 0 || s.pending != ActionKind::kNone) --busy_jobs_;
    SetRate(j, 0);
    // What was under way there never completes.
    s.pending = ActionKind::kNone;
    s.pending_action = 0;
    s.pending_fails = false;
    ++jobs_lost_;
  }
}

core::Status World::RestoreFromSnapshot() {
  if (!options_.snapshot_policy) {
    return core::InvalidArgument("snapshot_every_events needs snapshot_policy");
  }
  const std::string bytes = scheduler_.Snapshot();
  core::Scheduler fresh(options_.snapshot_policy());
  GANDIVA_RETURN_IF_ERROR(fresh.Restore(bytes));
  scheduler_ = std::move(fresh);
  return core::Status::Ok();
}

core::Status World::Send(core::EventBody body) {
  actions_.clear();
  core::Event event{Time::FromMicros(now_), std::move(body)};
  GANDIVA_RETURN_IF_ERROR(scheduler_.Handle(event, actions_));
  if (options_.snapshot_every_events > 0 &&
      ++events_since_snapshot_ >= options_.snapshot_every_events) {
    events_since_snapshot_ = 0;
    GANDIVA_RETURN_IF_ERROR(RestoreFromSnapshot());
  }
  if (options_.record) options_.record(event, actions_);
  acted_ = !actions_.empty();
  // Execute may not call Send (it only schedules), so iterating is safe.
  for (const Action& a : actions_) Execute(a);
  if (options_.progress &&
      ++events_since_progress_ >= options_.progress_every_events) {
    events_since_progress_ = 0;
    options_.progress(ids_.empty() ? 1.0
                                   : static_cast<double>(ended_) /
                                         static_cast<double>(ids_.size()));
  }
  return core::Status::Ok();
}

void World::Advance(int32_t j) {
  SimJob& s = jobs_[j];
  const int64_t dt = now_ - s.last_us;
  s.last_us = now_;
  if (s.rate <= 0 || dt <= 0) return;
  const double before = s.done;
  if (const int64_t every = options_.checkpoint_interval.micros(); every > 0) {
    const int64_t t = s.since_ckpt_us + dt;
    if (t >= every) {
      // The last checkpoint within this stretch, `into` it.
      const int64_t into = t / every * every - s.since_ckpt_us;
      s.ckpt_done =
          std::min(s.total, before + s.rate * static_cast<double>(into) / 1e6);
      s.ckpt_gpu_us = s.training_gpu_us + into * s.gpus_now();
    }
    s.since_ckpt_us = t % every;
  }
  s.done = std::min(s.total, s.done + s.rate * static_cast<double>(dt) / 1e6);
  s.training_us += dt;
  s.training_gpu_us += dt * s.gpus_now();
  if (fairness_ && s.gpus_now() > 0) {
    // A job packed with another has half of its GPUs.
    fairness_->AddReceived(queue_of_[static_cast<size_t>(j)], now_ - dt, now_,
                           s.gpus_now() * (ActivePartner(j) >= 0 ? 0.5 : 1.0));
  }
  // Busy share of its GPUs: utilisation scaled by its rate; two packed jobs
  // together keep a GPU at most fully busy (scaled down in proportion).
  double busy = s.utilization * std::min(1.0, s.rate / s.iso_rate);
  if (const int32_t p = ActivePartner(j); p >= 0) {
    const SimJob& ps = jobs_[p];
    const double both =
        busy + ps.utilization * std::min(1.0, ps.rate / ps.iso_rate);
    if (both > 1.0) busy /= both;
  }
  s.busy_gpu_s +=
      busy * static_cast<double>(s.gpus_now()) * static_cast<double>(dt) / 1e6;
  JobResult& r = results_[j];
  if (r.feedback == Time::Never() && s.done >= s.feedback_at) {
    const double need = std::max(0.0, s.feedback_at - before);
    r.feedback = Time::FromMicros(
        now_ - dt + static_cast<int64_t>(std::ceil(need / s.rate * 1e6)));
    if (r.feedback > Time::FromMicros(now_))
      r.feedback = Time::FromMicros(now_);
  }
}

double World::TrainingRate(int32_t j) const {
  const TraceJob& tj = workload_.jobs[ids_[j]];
  const core::Job& job = scheduler_.state().job(JobId(j));
  const core::Cluster& cluster = scheduler_.state().cluster();
  // Its size now: grow-shrink changes it, and with it the rate (sublinear
  // scaling from the catalog).
  const int g = static_cast<int>(job.gpus.size());
  const double iso = catalog_.IsolatedRate(tj.model, g);
  const core::Spread actual = cluster.SpreadOf(job.gpus);
  // Durations are measured at the ideal placement for the job's size, so
  // the penalty is relative to that.
  const core::ServerSpec& spec = options_.server;
  const int per_socket = spec.gpus / spec.sockets;
  const int per_switch = per_socket / spec.switches_per_socket;
  if (g > spec.gpus) {
    // The ideal spans servers already; only more servers than needed cost.
    std::vector<int32_t> servers;
    for (core::GpuId id : job.gpus) {
      servers.push_back(cluster.gpu(id).server.value);
    }
    std::sort(servers.begin(), servers.end());
    const auto distinct =
        std::unique(servers.begin(), servers.end()) - servers.begin();
    const int needed = (g + spec.gpus - 1) / spec.gpus;
    return distinct > needed
               ? iso * catalog_.SpreadFactor(tj.model, Spread::kCrossServer)
               : iso;
  }
  const core::Spread ideal = g <= per_switch   ? core::Spread::kSameSwitch
                             : g <= per_socket ? core::Spread::kAcrossSwitches
                                               : core::Spread::kAcrossSockets;
  double rate = iso;
  if (actual > ideal) {
    rate *= catalog_.SpreadFactor(tj.model, static_cast<Spread>(actual)) /
            catalog_.SpreadFactor(tj.model, static_cast<Spread>(ideal));
  }
  if (const int32_t p = ActivePartner(j); p >= 0) {
    // Gavel's co-location factors (or the catalog's model of them).
    rate *=
        catalog_.PackedRates(tj.model, workload_.jobs[ids_[p]].model).factor_a;
  }
  return rate;
}

int32_t World::ActivePartner(int32_t j) const {
  const core::Job& job = scheduler_.state().job(JobId(j));
  if (!job.packed_with.valid()) return -1;
  const int32_t p = job.packed_with.value;
  const core::Job& peer = scheduler_.state().job(job.packed_with);
  const SimJob& ps = jobs_[p];
  const bool training = peer.state == core::JobState::kRunning &&
                        ps.pending == ActionKind::kNone && !ps.ended;
  return training ? p : -1;
}

void World::RefreshRate(int32_t j) {
  const SimJob& s = jobs_[j];
  const core::Job& job = scheduler_.state().job(JobId(j));
  const bool training = !s.ended && s.pending == ActionKind::kNone &&
                        job.state == core::JobState::kRunning;
  SetRate(j, training ? TrainingRate(j) : 0);
}

void World::RefreshPartnerOf(int32_t j) {
  const core::Job& job = scheduler_.state().job(JobId(j));
  const int32_t p =
      job.packed_with.valid() ? job.packed_with.value : jobs_[j].partner;
  if (p >= 0 && !jobs_[p].ended) RefreshRate(p);
}

void World::SetRate(int32_t j, double rate) {
  Advance(j);
  SimJob& s = jobs_[j];
  AccrueBusy();
  for (const int32_t g : s.training_on) {
    if (--trainers_on_gpu_[static_cast<size_t>(g)] == 0) --gpus_training_;
  }
  s.training_on.clear();
  if (rate > 0) {
    for (const core::GpuId g : scheduler_.state().job(JobId(j)).gpus) {
      const auto at = static_cast<size_t>(g.value);
      if (at >= trainers_on_gpu_.size()) trainers_on_gpu_.resize(at + 1, 0);
      if (trainers_on_gpu_[at]++ == 0) ++gpus_training_;
      s.training_on.push_back(g.value);
    }
  }
  s.rate = rate;
  s.finish_at = -1;
  if (rate > 0) {
    const double left = std::max(0.0, s.total - s.done);
    s.finish_at = now_ + static_cast<int64_t>(std::ceil(left / rate * 1e6));
    if (s.queued_finish < 0 || s.finish_at < s.queued_finish) {
      s.queued_finish = s.finish_at;
      Push(s.finish_at, EvKind::kFinish, j, 0);
    }
  }
}

void World::Execute(const Action& a) {
  const int32_t j = a.job.value;
  SimJob& s = jobs_[j];
  Duration cost;
  switch (a.kind) {
    case ActionKind::kStart:
      cost = options_.costs.start;
      if (results_[j].first_start == Time::Never()) {
        results_[j].first_start = Time::FromMicros(now_);
      }
      ++busy_jobs_;
      break;
    case ActionKind::kResume:
      // Elsewhere than it last ran (a policy gave its GPUs back): carried
      // there as a migration is. Preempted: launched again.
      cost = s.relaunch    ? options_.costs.start
             : a.relocates ? options_.costs.migrate
                           : options_.costs.resume;
      s.relaunch = false;
      ++busy_jobs_;
      break;
    case ActionKind::kMigrate:
      cost = options_.costs.migrate;
      s.relaunch = false;
      if (s.rate > 0) {
        SetRate(j, 0);  // an operator's move of a running job
      } else {
        ++busy_jobs_;
      }
      break;
    case ActionKind::kPack: {
      cost = a.launch || s.relaunch ? options_.costs.start
             : a.relocates          ? options_.costs.migrate
                                    : options_.costs.resume;
      s.relaunch = false;
      if (a.launch && results_[j].first_start == Time::Never()) {
        results_[j].first_start = Time::FromMicros(now_);
      }
      const ModelId peer_model = workload_.jobs[ids_[a.peer.value]].model;
      s.pending_fails =
          catalog_.PackedRates(workload_.jobs[ids_[j]].model, peer_model)
              .source == PackSource::kInfeasible;
      ++busy_jobs_;
      break;
    }
    case ActionKind::kRestart:
      // Its process was lost: a new one is launched (loading the checkpoint
      // kept of it, if any). It counted as busy.
      cost = options_.costs.start;
      break;
    case ActionKind::kGrow:
    case ActionKind::kShrink:
      // Checkpoint at a boundary, restart at the new size.
      SetRate(j, 0);
      cost = options_.costs.resize;
      break;
    case ActionKind::kSuspend:
    case ActionKind::kUnpack:
      SetRate(j, 0);
      ++results_[j].suspends;
      cost = options_.costs.suspend;
      if (a.lossy) {
        // Killed: back to its last checkpoint, at once.
        const int64_t lost = s.training_gpu_us - s.ckpt_gpu_us;
        lost_gpu_us_ += lost;
        s.kept_gpu_us += lost;
        s.done = s.ckpt_done;
        s.ckpt_gpu_us = s.training_gpu_us;
        s.since_ckpt_us = 0;
        s.relaunch = true;
        cost = Duration();
      }
      s.pending = a.kind;  // before the partner's rate is recomputed
      RefreshPartnerOf(j);
      break;
    case ActionKind::kKill:
      if (s.ended) return;
      if (s.rate > 0 || s.pending != ActionKind::kNone) --busy_jobs_;
      SetRate(j, 0);
      s.pending = ActionKind::kNone;
      s.ended = true;
      ++ended_;
      QueueEnded(j);
      results_[j].killed = true;
      results_[j].finish = Time::FromMicros(now_);
      RefreshPartnerOf(j);
      return;
    default:
      return;  // SetPriority and others: nothing to simulate
  }
  s.pending = a.kind;
  s.pending_action = a.id.value;
  Push(now_ + cost.micros(), EvKind::kActionComplete, j, a.id.value);
}

void World::Sample() {
  const core::ClusterState& st = scheduler_.state();
  TimelineSample t;
  t.time = Time::FromMicros(now_);
  t.queued_jobs = static_cast<int>(st.queue().size());
  t.suspended_jobs = static_cast<int>(st.waiting().size());
  t.running_jobs = static_cast<int>(st.placed_jobs()) - t.suspended_jobs;
  // The mean over the interval since the last sample: an instant would
  // catch time-slicing's rotations (every job of a GPU stopped at once)
  // more or less often as its period beats with theirs.
  AccrueBusy();
  const double up = static_cast<double>(st.cluster().up_gpus());
  const double busy = sampled_at_ >= 0 && now_ > sampled_at_
                          ? (busy_gpu_us_ - sampled_busy_gpu_us_) /
                                static_cast<double>(now_ - sampled_at_)
                          : static_cast<double>(gpus_training_);
  sampled_busy_gpu_us_ = busy_gpu_us_;
  sampled_at_ = now_;
  t.gpus_training = up == 0 ? 0 : std::min(1.0, busy / up);
  t.cluster_height = st.cluster().height();
  timeline_.push_back(t);
}

core::StatusOr<SimResult> World::Run() {
  const auto wall_start = std::chrono::steady_clock::now();
  const int total_gpus = options_.servers * options_.server.gpus;
  if (options_.servers < 1) {
    return core::InvalidArgument("field 'servers': must be at least 1");
  }
  if (std::string err = core::ValidateServerSpec(options_.server);
      !err.empty()) {
    return core::InvalidArgument("server: " + err);
  }
  int64_t skipped = 0;
  for (size_t i = 0; i < workload_.jobs.size(); ++i) {
    const TraceJob& tj = workload_.jobs[i];
    if (tj.gpus > total_gpus) {
      if (!options_.skip_oversized) {
        return core::InvalidArgument(
            "job '" + tj.name + "' asks for " + std::to_string(tj.gpus) +
            " GPUs; the cluster has " + std::to_string(total_gpus));
      }
      ++skipped;
      continue;
    }
    if (tj.model < 0 || tj.model >= catalog_.size()) {
      return core::InvalidArgument("job '" + tj.name +
                                   "': field 'model': not in the catalog");
    }
    if (i > 0 && tj.submit < workload_.jobs[i - 1].submit) {
      return core::InvalidArgument("workload: jobs not sorted by submit time");
    }
    ids_.push_back(i);
  }
  sim_index_.assign(workload_.jobs.size(), -1);
  for (size_t j = 0; j < ids_.size(); ++j) {
    sim_index_[ids_[j]] = static_cast<int32_t>(j);
  }
  jobs_.resize(ids_.size());
  results_.resize(ids_.size());
  for (size_t j = 0; j < ids_.size(); ++j) {
    const TraceJob& tj = workload_.jobs[ids_[j]];
    SimJob& s = jobs_[j];
    const double iso = catalog_.IsolatedRate(tj.model, tj.gpus);
    s.total = std::max(1.0, tj.duration.seconds() * iso);
    s.iso_rate = iso;
    s.utilization = catalog_.model(tj.model).utilization;
    s.feedback_at = std::min(s.total, options_.feedback_work.seconds() * iso);
    JobResult& r = results_[j];
    r.name = tj.name;
    r.gpus = tj.gpus;
    r.model = tj.model;
    r.submit = tj.submit;
  }

  SetUpQueues(total_gpus);
  for (int i = 0; i < options_.servers; ++i) {
    core::ServerSpec spec = options_.server;
    spec.name = "server-" + std::to_string(i);
    // The catalog's GPU type says how much memory packing has to fit in.
    if (spec.gpu_memory_gb == 0) spec.gpu_memory_gb = catalog_.gpu_memory_gb();
    GANDIVA_RETURN_IF_ERROR(Send(core::ServerUp{spec, core::ServerId()}));
  }
  if (options_.tick > Duration())
    Push(options_.tick.micros(), EvKind::kTick, -1, 0);
  if (options_.timeline_every > Duration()) Push(0, EvKind::kSample, -1, 0);
  GANDIVA_RETURN_IF_ERROR(ScheduleClusterEvents());

  int64_t idle_ticks = 0;
  const auto all_done = [&] {
    return AllArrived() && ended_ == static_cast<int64_t>(ids_.size());
  };
  while (!all_done()) {
    const bool arrival_next =
        !AllArrived() &&
        (heap_.empty() ||
         workload_.jobs[ids_[next_arrival_]].submit.micros() <= heap_.top().t);
    if (arrival_next) {
      const int32_t j = static_cast<int32_t>(next_arrival_++);
      const TraceJob& tj = workload_.jobs[ids_[j]];
      now_ = std::max(now_, tj.submit.micros());
      jobs_[j].last_us = now_;
      core::JobSpec spec;
      spec.name = tj.name;
      spec.gpus = tj.gpus;
      spec.priority = tj.priority;
      spec.group = tj.group;
      spec.vc = tj.vc;
      spec.elastic = tj.elastic;
      spec.model = tj.model;
      spec.total_minibatches = static_cast<int64_t>(jobs_[j].total);
      GANDIVA_RETURN_IF_ERROR(Send(core::JobArrived{JobId(j), spec}));
      QueueArrived(j);
      continue;
    }
    if (heap_.empty()) break;
    const Ev ev = heap_.top();
    heap_.pop();
    now_ = std::max(now_, ev.t);
    switch (ev.kind) {
      case EvKind::kFinish: {
        SimJob& s = jobs_[ev.job];
        if (s.ended || ev.t != s.queued_finish) break;  // superseded
        s.queued_finish = -1;
        if (s.finish_at != ev.t) {
          // The rate changed since: wait for the current finish time.
          if (s.finish_at > ev.t) {
            s.queued_finish = s.finish_at;
            Push(s.finish_at, EvKind::kFinish, ev.job, 0);
          }
          break;
        }
        Advance(ev.job);
        s.done = s.total;
        SetRate(ev.job, 0);
        --busy_jobs_;
        s.ended = true;
        ++ended_;
        QueueEnded(ev.job);
        RefreshPartnerOf(ev.job);  // it trains on alone
        results_[ev.job].finish = Time::FromMicros(now_);
        results_[ev.job].finished = true;
        if (results_[ev.job].feedback == Time::Never()) {
          results_[ev.job].feedback = Time::FromMicros(now_);
        }
        GANDIVA_RETURN_IF_ERROR(Send(core::JobFinished{JobId(ev.job), true}));
        break;
      }
      case EvKind::kActionComplete: {
        SimJob& s = jobs_[ev.job];
        if (s.ended || s.pending_action != ev.arg) break;
        const ActionKind kind = s.pending;
        s.pending = ActionKind::kNone;
        if (s.pending_fails) {
          // A pack that does not fit in the GPU's memory: the job fails to
          // start there and stays suspended.
          s.pending_fails = false;
          --busy_jobs_;
          ++pack_failures_;
          GANDIVA_RETURN_IF_ERROR(
              Send(core::ActionFailed{core::ActionId(ev.arg), JobId(ev.job),
                                      Duration(), "out of GPU memory"}));
          break;
        }
        if (kind == ActionKind::kSuspend || kind == ActionKind::kUnpack) {
          --busy_jobs_;
        }
        GANDIVA_RETURN_IF_ERROR(Send(core::ActionDone{
            core::ActionId(ev.arg), JobId(ev.job), Duration()}));
        if (kind == ActionKind::kRestart) ++restarts_;
        if (kind == ActionKind::kStart || kind == ActionKind::kResume ||
            kind == ActionKind::kMigrate || kind == ActionKind::kPack ||
            kind == ActionKind::kGrow || kind == ActionKind::kShrink ||
            kind == ActionKind::kRestart) {
          RefreshRate(ev.job);
          RefreshPartnerOf(ev.job);
          // New information about the job's speed (a first run, a new
          // placement, a new partner) is measured and reported.
          if (kind != ActionKind::kResume && kind != ActionKind::kGrow &&
              kind != ActionKind::kShrink && kind != ActionKind::kRestart) {
            Push(now_ + options_.profile_delay.micros(), EvKind::kProfile,
                 ev.job, 0);
            const core::Job& job = scheduler_.state().job(JobId(ev.job));
            if (kind == ActionKind::kPack && job.packed_with.valid()) {
              jobs_[ev.job].partner = job.packed_with.value;
              jobs_[job.packed_with.value].partner = ev.job;
              Push(now_ + options_.profile_delay.micros(), EvKind::kProfile,
                   job.packed_with.value, 0);
            }
          }
        }
        break;
      }
      case EvKind::kTick: {
        GANDIVA_RETURN_IF_ERROR(Send(core::Tick{}));
        if (options_.on_tick) {
          const bool acted = acted_;
          options_.on_tick(*this);
          for (auto& [j, reason] : kills_) {
            if (!jobs_[j].ended && static_cast<size_t>(j) < next_arrival_) {
              GANDIVA_RETURN_IF_ERROR(
                  Send(core::KillRequest{JobId(j), std::move(reason)}));
            }
          }
          for (auto& [j, p] : priorities_) {
            if (!jobs_[j].ended && static_cast<size_t>(j) < next_arrival_) {
              GANDIVA_RETURN_IF_ERROR(Send(core::PriorityRequest{JobId(j), p}));
            }
          }
          acted_ = acted || !kills_.empty() || !priorities_.empty();
          kills_.clear();
          priorities_.clear();
        }
        if (AllArrived() && busy_jobs_ == 0 && !acted_ &&
            cluster_events_left_ == 0) {
          if (++idle_ticks >= options_.max_idle_ticks) break;
        } else {
          idle_ticks = 0;
        }
        if (!all_done())
          Push(now_ + options_.tick.micros(), EvKind::kTick, -1, 0);
        break;
      }
      case EvKind::kProfile: {
        const SimJob& s = jobs_[ev.job];
        if (s.ended || s.rate <= 0) break;
        Advance(ev.job);
        const ModelInfo& m = catalog_.model(workload_.jobs[ids_[ev.job]].model);
        const double measured =
            s.rate *
            std::max(0.0, 1.0 + options_.profile_noise * noise_.Normal());
        GANDIVA_RETURN_IF_ERROR(Send(core::ProfileReport{
            JobId(ev.job), measured, static_cast<int64_t>(s.done), m.memory_gb,
            m.utilization * std::min(1.0, s.rate / s.iso_rate)}));
        break;
      }
      case EvKind::kCluster:
        --cluster_events_left_;
        GANDIVA_RETURN_IF_ERROR(ApplyClusterEvent(
            options_.cluster_events[static_cast<size_t>(ev.arg)]));
        break;
      case EvKind::kSample:
        Sample();
        if (!all_done()) {
          Push(now_ + options_.timeline_every.micros(), EvKind::kSample, -1, 0);
        }
        break;
    }
    if (idle_ticks >= options_.max_idle_ticks) break;
  }
  if (options_.timeline_every > Duration()) Sample();

  // Measure.
  SimResult r;
  r.policy = std::string(scheduler_.policy().name());
  r.jobs = static_cast<int64_t>(ids_.size());
  r.jobs_skipped = skipped;
  r.total_gpus = total_gpus;
  std::vector<double> jct, ttff;
  double queueing = 0;
  int64_t end_us = 0;
  int64_t training_gpu_us = 0;
  double busy_gpu_s = 0;
  for (size_t j = 0; j < ids_.size(); ++j) {
    JobResult& jr = results_[j];
    const SimJob& s = jobs_[j];
    training_gpu_us += s.training_gpu_us;
    busy_gpu_s += s.busy_gpu_s;
    if (jr.killed) ++r.jobs_killed;
    if (jr.finished) {
      ++r.jobs_finished;
      jct.push_back((jr.finish - jr.submit).seconds());
      end_us = std::max(end_us, jr.finish.micros());
      jr.not_running =
          (jr.finish - jr.first_start) - Duration::Micros(s.training_us);
    }
    if (jr.feedback != Time::Never()) {
      ttff.push_back((jr.feedback - jr.submit).seconds());
    }
    if (jr.first_start != Time::Never()) {
      queueing += (jr.first_start - jr.submit).seconds();
    }
  }
  auto mean = [](const std::vector<double>& v) {
    return v.empty() ? 0.0
                     : std::accumulate(v.begin(), v.end(), 0.0) /
                           static_cast<double>(v.size());
  };
  auto quantile = [](std::vector<double> v, double q) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t k =
        static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
  };
  r.mean_jct_s = mean(jct);
  r.median_jct_s = quantile(jct, 0.5);
  r.p95_jct_s = quantile(jct, 0.95);
  r.mean_time_to_first_feedback_s = mean(ttff);
  r.median_time_to_first_feedback_s = quantile(ttff, 0.5);
  r.mean_queueing_s = r.jobs == 0 ? 0 : queueing / static_cast<double>(r.jobs);
  r.makespan_s = static_cast<double>(end_us) / 1e6;
  r.gpu_utilization =
      end_us == 0
          ? 0
          : static_cast<double>(training_gpu_us) /
                (static_cast<double>(total_gpus) * static_cast<double>(end_us));
  r.gpu_busy = end_us == 0 ? 0
                           : busy_gpu_s / (static_cast<double>(total_gpus) *
                                           static_cast<double>(end_us) / 1e6);
  const core::Counters& c = scheduler_.state().counters();
  r.starts = c.starts;
  r.suspends = c.suspends;
  r.resumes = c.resumes;
  r.migrations = c.migrations;
  r.packs = c.packs;
  r.unpacks = c.unpacks;
  r.pack_failures = pack_failures_;
  r.grows = c.grows;
  r.shrinks = c.shrinks;
  r.jobs_lost = jobs_lost_;
  r.processes_lost = processes_lost_;
  r.restarts = restarts_;
  r.lost_gpu_hours = static_cast<double>(lost_gpu_us_) / 3.6e9;
  if (fairness_) {
    r.fairness = fairness_->Finish(now_);
    double wait = 0;
    for (size_t j = 0; j < ids_.size(); ++j) {
      const JobResult& jr = results_[j];
      if (!within_quota_[j] || jr.first_start == Time::Never()) continue;
      wait += (jr.first_start - jr.submit).seconds();
      ++r.jobs_within_quota;
    }
    if (r.jobs_within_quota > 0) {
      r.mean_reclaim_wait_s = wait / static_cast<double>(r.jobs_within_quota);
    }
  }
  r.events = c.events;
  r.per_job = std::move(results_);
  r.timeline = std::move(timeline_);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                           wall_start)
                 .count();
  return r;
}

// `v` with `decimals` digits after the point.
std::string Fmt(int decimals, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

core::StatusOr<SimResult> Simulate(const Workload& workload,
                                   const Catalog& catalog,
                                   std::unique_ptr<core::Policy> policy,
                                   const SimOptions& options) {
  World world(workload, catalog, std::move(policy), options);
  return world.Run();
}

std::string ResultJson(const SimResult& r) {
  nlohmann::ordered_json j;
  j["policy"] = r.policy;
  j["jobs"] = r.jobs;
  j["jobs_skipped"] = r.jobs_skipped;
  j["jobs_finished"] = r.jobs_finished;
  j["jobs_killed"] = r.jobs_killed;
  j["total_gpus"] = r.total_gpus;
  j["mean_jct_s"] = r.mean_jct_s;
  j["median_jct_s"] = r.median_jct_s;
  j["p95_jct_s"] = r.p95_jct_s;
  j["makespan_s"] = r.makespan_s;
  j["gpu_utilization"] = r.gpu_utilization;
  j["gpu_busy"] = r.gpu_busy;
  j["mean_time_to_first_feedback_s"] = r.mean_time_to_first_feedback_s;
  j["median_time_to_first_feedback_s"] = r.median_time_to_first_feedback_s;
  j["mean_queueing_s"] = r.mean_queueing_s;
  j["starts"] = r.starts;
  j["suspends"] = r.suspends;
  j["resumes"] = r.resumes;
  j["migrations"] = r.migrations;
  j["packs"] = r.packs;
  j["unpacks"] = r.unpacks;
  j["pack_failures"] = r.pack_failures;
  j["grows"] = r.grows;
  j["shrinks"] = r.shrinks;
  j["jobs_lost"] = r.jobs_lost;
  if (r.processes_lost > 0 || r.restarts > 0) {
    j["processes_lost"] = r.processes_lost;
    j["restarts"] = r.restarts;
  }
  if (r.processes_lost > 0 || r.fairness || r.lost_gpu_hours > 0) {
    j["lost_gpu_hours"] = r.lost_gpu_hours;
  }
  if (r.fairness) {
    const FairnessResult& f = *r.fairness;
    j["jain_fairness"] = f.jain_fairness;
    j["share_windows_within_10pct"] = f.share_windows_within_10pct;
    if (f.finish_time_measured) {
      j["mean_finish_time_fairness"] = f.mean_finish_time_fairness;
      j["max_finish_time_fairness"] = f.max_finish_time_fairness;
      j["finish_time_fairness_above_1"] = f.finish_time_fairness_above_1;
      j["finish_time_fairness_jobs"] = f.finish_time_jobs;
    }
    j["mean_reclaim_wait_s"] = r.mean_reclaim_wait_s;
    j["jobs_within_quota"] = r.jobs_within_quota;
    nlohmann::ordered_json queues = nlohmann::ordered_json::array();
    for (const QueueFairness& q : f.queues) {
      nlohmann::ordered_json o;
      o["name"] = q.name;
      o["quota"] = q.quota;
      o["jobs"] = q.jobs;
      o["received_gpu_h"] = q.received_gpu_h;
      o["fair_gpu_h"] = q.fair_gpu_h;
      o["demand_gpu_h"] = q.demand_gpu_h;
      queues.push_back(std::move(o));
    }
    j["queues"] = std::move(queues);
  }
  j["events"] = r.events;
  j["wall_s"] = r.wall_s;
  return j.dump(2) + "\n";
}

std::string PerJobCsv(const SimResult& r, const Catalog& catalog) {
  std::string out =
      "name,gpus,model,submit_s,start_s,finish_s,jct_s,queueing_s,"
      "not_running_s,feedback_s,suspends\n";
  auto t = [](Time x) {
    return x == Time::Never() ? std::string() : Fmt(3, x.seconds());
  };
  for (const JobResult& j : r.per_job) {
    std::string name = j.name;
    if (name.find_first_of(",\"\n") != std::string::npos) {
      std::string q = "\"";
      for (char ch : name)
        q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
      name = q + "\"";
    }
    out += name + "," + std::to_string(j.gpus) + ",\"" +
           catalog.model(j.model).name + "\"," + t(j.submit) + "," +
           t(j.first_start) + "," + t(j.finish) + "," +
           (j.finished ? Fmt(3, (j.finish - j.submit).seconds()) : "") + "," +
           (j.first_start == Time::Never()
                ? ""
                : Fmt(3, (j.first_start - j.submit).seconds())) +
           "," + (j.finished ? Fmt(3, j.not_running.seconds()) : "") + "," +
           (j.feedback == Time::Never()
                ? ""
                : Fmt(3, (j.feedback - j.submit).seconds())) +
           "," + std::to_string(j.suspends) + "\n";
  }
  return out;
}

std::string SummaryTable(const std::vector<SimResult>& results) {
  struct Col {
    const char* head;
    std::function<std::string(const SimResult&)> cell;
  };
  auto dur = [](double s) {
    return core::FormatDuration(Duration::FromSeconds(s));
  };
  std::vector<Col> cols = {
      {"policy", [](const SimResult& r) { return r.policy; }},
      {"jobs", [](const SimResult& r) { return std::to_string(r.jobs); }},
      {"finished",
       [](const SimResult& r) { return std::to_string(r.jobs_finished); }},
      {"mean JCT", [&](const SimResult& r) { return dur(r.mean_jct_s); }},
      {"median JCT", [&](const SimResult& r) { return dur(r.median_jct_s); }},
      {"p95 JCT", [&](const SimResult& r) { return dur(r.p95_jct_s); }},
      {"makespan", [&](const SimResult& r) { return dur(r.makespan_s); }},
      {"GPU util",
       [](const SimResult& r) {
         return Fmt(1, 100 * r.gpu_utilization) + "%";
       }},
      {"1st feedback",
       [&](const SimResult& r) {
         return dur(r.mean_time_to_first_feedback_s);
       }},
      {"suspends",
       [](const SimResult& r) { return std::to_string(r.suspends); }},
  };
  if (std::any_of(results.begin(), results.end(),
                  [](const SimResult& r) { return r.fairness.has_value(); })) {
    cols.push_back({"Jain", [](const SimResult& r) {
                      return r.fairness ? Fmt(3, r.fairness->jain_fairness)
                                        : std::string("-");
                    }});
    cols.push_back(
        {"in 10%", [](const SimResult& r) {
           return r.fairness
                      ? Fmt(1, 100 * r.fairness->share_windows_within_10pct) +
                            "%"
                      : std::string("-");
         }});
    cols.push_back({"rho", [](const SimResult& r) {
                      return r.fairness && r.fairness->finish_time_measured
                                 ? Fmt(2, r.fairness->mean_finish_time_fairness)
                                 : std::string("-");
                    }});
    cols.push_back({"lost GPU-h", [](const SimResult& r) {
                      return Fmt(1, r.lost_gpu_hours);
                    }});
  }
  cols.push_back(
      {"wall", [](const SimResult& r) { return Fmt(2, r.wall_s) + "s"; }});
  std::vector<std::vector<std::string>> rows;
  std::vector<size_t> width(cols.size());
  for (size_t c = 0; c < cols.size(); ++c)
    width[c] = std::string(cols[c].head).size();
  for (const SimResult& r : results) {
    rows.emplace_back();
    for (size_t c = 0; c < cols.size(); ++c) {
      rows.back().push_back(cols[c].cell(r));
      width[c] = std::max(width[c], rows.back().back().size());
    }
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c) {
      std::string cell = cells[c];
      cell.insert(c == 0 ? cell.size() : 0, width[c] - cell.size(), ' ');
      out += (c ? "  " : "") + cell;
    }
    out += "\n";
  };
  std::vector<std::string> heads;
  for (const Col& c : cols) heads.push_back(c.head);
  line(heads);
  for (const auto& row : rows) line(row);
  return out;
}

}  // namespace gandiva::sim
