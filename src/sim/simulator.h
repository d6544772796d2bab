// Simulator: a discrete-event world that drives the scheduling core with a
// simulated clock and a performance model of jobs, replaying a Workload.
//
// The core decides; the simulator carries each action out, charging it the
// mechanism's cost (start, suspend, resume) from MechanismCosts, advances
// each job's progress at the rate the catalog gives for its model, GPU count
// and placement spread, reports completions back to the core, and measures.
// The same workload, options and seed give the same result, event for event.
//
// Not thread-safe; one Simulate call per thread (calls are independent).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/policy.h"
#include "core/status.h"
#include "core/time.h"
#include "sim/fairness.h"
#include "sim/workload/catalog.h"
#include "sim/workload/workload.h"

namespace gandiva::sim {

// What each mechanism costs in simulated time: no progress is made while it
// runs. Defaults from the paper (shared facts: suspend/resume is O(100 ms) to
// 1 s; a start loads the framework and the model).
struct MechanismCosts {
  // Launching a job: process start, framework import, model build and data
  // pipeline warm-up. Default 10 s (an estimate; charged alike to every
  // policy).
  // Also charged to a Restart of a job whose process was lost (a new
  // process, loading the checkpoint kept of it if any).
  core::Duration start = core::Duration::Seconds(10);
  // Suspending at a mini-batch boundary: wait for the boundary, copy GPU
  // state to host memory. Default 1 s (the top of the paper's 100 ms-1 s).
  core::Duration suspend = core::Duration::Seconds(1);
  // Resuming: copy state back to the GPU. Default 1 s.
  core::Duration resume = core::Duration::Seconds(1);
  // Migrating a suspended job: save its training state, move it, start the
  // job warm on the destination and load it. Default 2 s (the paper's
  // checkpoint-aware migration takes about 1-2 s; generic CRIU-based
  // migration 8-10 s). Also charged to a Resume or Pack that relocates the
  // job (core::Action::relocates: a policy that gives a suspended job's
  // GPUs back, like tiresias-las, resumes it from its checkpoint
  // elsewhere).
  core::Duration migrate = core::Duration::Seconds(2);
  // Resizing an elastic job (grow or shrink): checkpoint at a boundary and
  // restart warm at the new size. Default 5 s (an estimate: a save to a
  // ramdisk plus a warm start, less than a cold start).
  core::Duration resize = core::Duration::Seconds(5);
};

// What a tick hook sees of the running simulation and may do to it: the
// hook of a hyper-parameter-search driver that watches its jobs' progress
// and kills the worse ones. Job indexes are positions in the workload.
class SimControl {
 public:
  virtual ~SimControl() = default;
  virtual core::Time now() const = 0;
  virtual size_t num_jobs() const = 0;
  // Mini-batches done so far, and in all.
  virtual double done(size_t job) const = 0;
  virtual double total(size_t job) const = 0;
  // Whether the job has arrived, and whether it ended (finished or killed).
  virtual bool arrived(size_t job) const = 0;
  virtual bool ended(size_t job) const = 0;
  // Stops a job (a KillRequest to the scheduler) after the hook returns.
  virtual void Kill(size_t job, std::string reason) = 0;
  // Changes a job's priority (a PriorityRequest) after the hook returns.
  virtual void SetPriority(size_t job, int priority) = 0;
  // Why a job waits in the queue, as the runtime shows it: held, or
  // waiting out failed starts (core::OwnWaitReason), else as its policy
  // says (core::Scheduler::ExplainQueue); "" for a job not in the queue
  // (not arrived, placed, ended).
  virtual std::string WhyQueued(size_t job) = 0;
};

// A change to the cluster at a set time, fed to the core as the runtime
// feeds it. kDrain: a DrainRequest (the core cordons the server and moves
// its jobs off; `cordon_only`: it only cordons it). kServerDown: a
// ServerDown (the core requeues the jobs placed there; the simulator stops
// them and they start again where the policy places them, keeping the work
// they had done, as if checkpointed at the loss). kServerUp: a ServerUp of
// the server back (after a kServerDown; a drained one stays cordoned).
// kAgentRestart: the server's agent restarts, the server staying up: each
// job placed there with no mechanism under way loses its process, a
// ProcessLost (the core restarts a running one there at once and resumes a
// suspended one when its policy runs it again); with `keep_checkpoints`
// each keeps the work it had done (a checkpoint saved as the agent
// stopped), else it starts again from the beginning. A suspend under way
// there completes first; any other mechanism under way starts a new
// process and is left to complete.
struct ClusterEvent {
  enum class Kind : uint8_t { kDrain, kServerDown, kServerUp, kAgentRestart };
  Kind kind = Kind::kDrain;
  // The server's index: 0 .. servers - 1 (named "server-<index>").
  int server = 0;
  core::Time at = core::Time::Zero();
  bool cordon_only = false;       // kDrain only
  bool keep_checkpoints = false;  // kAgentRestart only
};

struct SimOptions {
  // The cluster: `servers` identical servers. Default 45 x 4 GPUs (the
  // paper's 180-GPU experiment).
  int servers = 45;
  core::ServerSpec server = {"", 4, 1, 1};
  // How often the core gets a Tick (time slices rotate at ticks). Default
  // 60 s, the paper's scheduling interval.
  core::Duration tick = core::Duration::Seconds(60);
  MechanismCosts costs;
  // A job has its first feedback once it has done this much work at its
  // isolated speed (or finished, if shorter). Default 60 s.
  core::Duration feedback_work = core::Duration::Seconds(60);
  // Jobs asking for more GPUs than the cluster has can never run: skip them
  // (counted in SimResult::jobs_skipped) when true, else refuse the run.
  // Default true.
  bool skip_oversized = true;
  // Stop (leaving jobs unfinished) if nothing can change any more: no job is
  // running or in a mechanism and this many ticks in a row caused no action.
  // Default 10,000 ticks.
  int64_t max_idle_ticks = 10000;
  // Drains, losses and returns of servers, in any order (at one time, in
  // the order given); those after the last job ended are not fed. A server
  // out of range or a time before zero refuses the run. Default none.
  std::vector<ClusterEvent> cluster_events;
  // Record the cluster's state every `timeline_every` (0 = never).
  core::Duration timeline_every = core::Duration();
  // Called about every `progress_every_events` events with the share of
  // jobs ended so far (0..1); may be empty.
  std::function<void(double)> progress;
  int64_t progress_every_events = 1 << 16;
  // Measurement: after a job's first start, a migration, and each change of
  // packing, the job reports its mini-batch rate this long later (as an agent
  // would once its window fills), with relative Gaussian noise of this
  // standard deviation. Defaults 20 s and 0.02.
  core::Duration profile_delay = core::Duration::Seconds(20);
  double profile_noise = 0.02;
  // Seeds the measurement noise. Default 1.
  uint64_t seed = 1;
  // Called with every event the scheduler handled and the actions it gave,
  // in order; may be empty. For recording a run (for example to replay it).
  std::function<void(const core::Event&, const std::vector<core::Action>&)>
      record;
  // Called at every tick, after the scheduler handled it; may be empty.
  std::function<void(SimControl&)> on_tick;
  // Snapshot check: after every `snapshot_every_events` events the core is
  // replaced by a new scheduler, with a policy from `snapshot_policy` (the
  // same policy and options as the one simulated), restored from the old
  // one's Snapshot; a snapshot that carries all of the state leaves the
  // result unchanged. 0: never. Default 0.
  int64_t snapshot_every_events = 0;
  std::function<std::unique_ptr<core::Policy>()> snapshot_policy;
  // Queues (teams) whose fair shares are measured (SimResult::fairness,
  // sim/fairness.h), a tree as core::QueueQuotas takes it. A job's queue is
  // the leaf its virtual cluster (TraceJob::vc) names; one of a VC that
  // names no leaf is in the queue named "" (of quota 0 unless named).
  // Empty: not measured.
  std::vector<core::QueueConfig> queues;
  // The fairness measures' window. Default 1 hour.
  core::Duration fairness_window = core::Duration::Seconds(3600);
  // Every job saves a checkpoint after each this much training since it
  // last (re)started; a job stopped at once (Actions::Preempt) goes back
  // to its last one, and the GPU time since is lost (lost_gpu_hours).
  // 0: no periodic checkpoints. Default 30 minutes.
  core::Duration checkpoint_interval = core::Duration::Seconds(1800);
};

struct JobResult {
  std::string name;
  int gpus = 0;
  ModelId model = kNoModel;
  core::Time submit;
  core::Time first_start = core::Time::Never();  // start requested
  core::Time finish = core::Time::Never();
  core::Time feedback = core::Time::Never();  // first feedback reached
  // Time after its first start when it was not training (suspended, or in a
  // mechanism).
  core::Duration not_running;
  int suspends = 0;
  bool finished = false;
  bool killed = false;  // by a KillRequest (e.g. a search driver)
};

// One sample of the cluster over time.
struct TimelineSample {
  core::Time time;
  int running_jobs = 0;
  int queued_jobs = 0;
  int suspended_jobs = 0;
  // Share of the up GPUs with a job training on them (packed jobs share
  // one, as the runtime's gpus_training counts them), averaged over the
  // interval since the previous sample (the first: at its instant); at
  // most 1.
  double gpus_training = 0;
  int cluster_height = 0;
};

struct SimResult {
  std::string policy;
  int64_t jobs = 0;          // jobs simulated (skipped ones excluded)
  int64_t jobs_skipped = 0;  // larger than the cluster
  int64_t jobs_finished = 0;
  int64_t jobs_killed = 0;
  double mean_jct_s = 0;
  double median_jct_s = 0;
  double p95_jct_s = 0;
  double makespan_s = 0;
  // GPU time spent training / (GPUs x makespan).
  double gpu_utilization = 0;
  // The modelled busy fraction of the GPUs over the run: each training job's
  // GPU utilisation (catalog), scaled by its progress rate relative to its
  // isolated rate, over its GPUs, / (GPUs x makespan); two packed jobs count
  // at most 1 per GPU together.
  double gpu_busy = 0;
  double mean_time_to_first_feedback_s = 0;
  double median_time_to_first_feedback_s = 0;
  double mean_queueing_s = 0;
  int64_t starts = 0;
  int64_t suspends = 0;
  int64_t resumes = 0;
  int64_t migrations = 0;
  int64_t packs = 0;
  int64_t unpacks = 0;
  int64_t pack_failures = 0;  // packs that did not fit in GPU memory
  int64_t grows = 0;
  int64_t shrinks = 0;
  // Jobs placed on a server when it was lost (requeued by the core), each
  // time it happened.
  int64_t jobs_lost = 0;
  // Processes lost to agent restarts (kAgentRestart), and restarts of them
  // the core carried out (a Restart action that completed; a suspended
  // job's next resume or start is counted as a resume or a start).
  int64_t processes_lost = 0;
  int64_t restarts = 0;
  // GPU time of training thrown away: what a job had trained since its
  // work was last kept, when it is lost (a process lost without a
  // checkpoint goes back to the beginning).
  double lost_gpu_hours = 0;
  // With SimOptions::queues: how fairly the queues shared the
  // cluster, and the mean wait before its first start of a job that came
  // within its queue's quota (its queue's arrived, unfinished jobs, itself
  // included, asking for no more GPUs than the quota): how long a queue
  // waits for the GPUs it is owed.
  std::optional<FairnessResult> fairness;
  double mean_reclaim_wait_s = 0;
  int64_t jobs_within_quota = 0;
  int64_t events = 0;  // events handled by the core
  int total_gpus = 0;
  double wall_s = 0;
  std::vector<JobResult> per_job;
  std::vector<TimelineSample> timeline;
};

core::StatusOr<SimResult> Simulate(const Workload& workload,
                                   const Catalog& catalog,
                                   std::unique_ptr<core::Policy> policy,
                                   const SimOptions& options);

// The result as JSON (the `gandiva sim --json` format): fixed key order,
// every field but `wall_s` a function of the inputs.
std::string ResultJson(const SimResult& result);
// One CSV row per job with a header line.
std::string PerJobCsv(const SimResult& result, const Catalog& catalog);
// A readable summary table.
std::string SummaryTable(const std::vector<SimResult>& results);

}  // namespace gandiva::sim
