// GandivaPolicy: the paper's reactive mode (Algorithm 1) with time-slicing.
//
// Placement of a queued job asking for d GPUs, in this order:
//  1. a server of the same affinity (hosting d-GPU jobs) with d free GPUs,
//     least loaded (least demand) first;
//  2. else an empty server, which takes affinity d;
//  3. else any server with d free GPUs, fewest free first (fragmentation is
//     accepted; migration repairs it later), and, if `allow_split`, free GPUs
//     across servers;
//  4. else, with time-slicing on, a same-affinity server below `max_height`,
//     least loaded first, sharing its least loaded aligned block of d GPUs;
//     a job that has waited `starvation_timeout` may share any server;
//  5. else the job stays queued and is tried again when GPUs free up.
// Jobs larger than a server take whole servers in the same order.
// Servers that are down or cordoned (CordonRequest) are never chosen; the
// jobs on a cordoned server time-slice there as before but do not grow.
//
// Time-slicing: a job placed on GPUs that others hold waits there
// (suspended). At each Tick, waiting jobs are taken in order (higher
// priority first, then the longest waiting); each claims its GPUs and asks the
// jobs running on them to suspend if each has run at least half a quantum
// (with ticks every quantum, a slice lasts one quantum on average) and none
// has a higher priority. A job of higher priority than all the jobs on its
// GPUs takes them at once, without waiting for a tick. When GPUs fall idle
// the first waiting job (in the same order) whose GPUs are all idle and not
// claimed by another runs. A higher-priority job is never suspended for one
// of lower priority.
//
// Why a queued job waits (ExplainQueue): after the default rules' first
// (more GPUs than the open servers have), what Algorithm 1 finds for its
// size: no free GPUs (steps 1-3) and, with time-slicing, no server of its
// affinity below `max_height` to share (step 4: the servers hosting jobs
// of its size are at the height limit, or there are none), and whether it
// may share any server once it has waited `starvation_timeout`; with how
// many jobs of its size are ahead of it (they are placed first).
//
// Failed moves: a job whose migration (or grow) failed, not for good, is not
// migrated or grown by this policy again before Job::move_retry_at (30 s
// after the failure, doubling with each failure in a row, at most 30 min);
// meanwhile it may resume in place. One that cannot be checkpointed at all
// (`immovable`) is never moved again.
//
// Not thread-safe (see Policy).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/policy.h"

namespace gandiva::core {

struct GandivaOptions {
  // Time-slice length. Default 60 s (the paper's scheduling interval).
  Duration quantum = Duration::Seconds(60);
  // Share GPUs by suspend-resume when a job finds no free GPUs. Default on.
  bool time_slicing = true;
  // A server takes no more jobs once its height would exceed this: suspended
  // jobs keep their state in host memory, which is finite. 0 = no limit.
  // Default 4.
  int max_height = 4;
  // A queued job with no same-affinity server to share may share any server
  // once it has waited this long. Default 5 min; Infinite() disables it.
  Duration starvation_timeout = Duration::Seconds(300);
  // Place a job across servers when no single server has enough free GPUs
  // (step 3) rather than time-slice it. Default true.
  bool allow_split = true;
  // Move waiting jobs onto free GPUs (see above). Default true.
  bool migrate_to_idle = true;
  // Pack jobs on one GPU when profiling says it pays (see above). Default
  // false here; the `gandiva` policy turns it on.
  bool packing = false;
  // GPU memory in GiB that two packed jobs' measured memory must fit in,
  // on servers that do not say theirs (ServerSpec::gpu_memory_gb 0).
  // Default 16 (V100).
  double gpu_memory_gb = 16;
  // How long a new pack runs before it is judged, and how many rate reports
  // each of its jobs must have made while packed. Defaults 30 s and 1.
  Duration pack_settle = Duration::Seconds(30);
  int pack_reports = 1;
  // A job is packed, and a pack judged, only once each job has made this
  // many reports running alone (so its alone rate is past its warm-up).
  // Default 1: the simulator reports a situation once, after it settled.
  // The daemon, whose agents report every fraction of a second, asks for 5.
  // So an operator's pack of a job that never ran alone is not judged
  // (there is no alone rate to compare with): it stays until unpacked.
  int pack_min_alone_reports = 1;
  // Keep a pack whose normalised throughput exceeds this. Default 1.0:
  // it must beat time-slicing.
  double pack_keep_above = 1.0;
  // Grow elastic jobs onto idle GPUs, shrink them on demand (see above).
  // Default false here; the `gandiva` policy turns it on.
  bool grow_shrink = false;
  // How long GPUs must have been free, with nothing queued or waiting,
  // before elastic jobs grow. Default 5 min.
  Duration grow_idle_timeout = Duration::Seconds(300);
  // Migrate badly placed jobs when room frees up (see above). Default false
  // here; the `gandiva` policy turns it on.
  bool consolidate = false;
  // Empty fragmented servers while jobs queue (see above). Default false
  // here; the `gandiva` policy turns it on.
  bool defrag = false;
  int defrag_moves_per_tick = 2;
};

class GandivaPolicy final : public Policy {
 public:
  explicit GandivaPolicy(GandivaOptions options = {},
                         std::string name = "gandiva")
      : options_(options), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  void decide(const ClusterState& state, const Event& event,
              Actions& out) override;
  void SaveState(SnapshotWriter& w) const override;
  void LoadState(SnapshotReader& r) override;
  void Forget(const ClusterState& state, std::span<const JobId> jobs) override;
  std::shared_ptr<const QueueReasons> ExplainQueue(
      const ClusterState& state, const QueueReasons* previous) const override;

  const GandivaOptions& options() const { return options_; }

 private:
  void PlaceQueued(const ClusterState& state, Actions& out);
  void PullWaiting(const ClusterState& state, Actions& out);
  // Steps 1-3 of Algorithm 1: free GPUs for `d` GPUs, or nothing.
  std::optional<std::vector<GpuId>> FindFree(const Cluster& cluster, int d,
                                             bool allow_split) const;
  // Where Algorithm 1 puts a queued job: free GPUs, or GPUs to time-slice
  // (shared).
  struct Placement {
    std::vector<GpuId> gpus;
    bool shared = false;
  };
  std::optional<Placement> FindPlace(const ClusterState& state,
                                     const Job& job) const;
  // Algorithm 1 for one job (away from the servers its failed starts were
  // on, when it can); false when it stays queued.
  bool Place(const ClusterState& state, const Job& job, Actions& out);
  bool UnderCap(const Server& s, int more) const;
  // Runs waiting jobs whose GPUs (some of `gpus`) are idle.
  void FillIdle(const ClusterState& state, const std::vector<GpuId>& gpus,
                Actions& out);
  void Rotate(const ClusterState& state, Actions& out);
  // Suspends the jobs holding `job`'s GPUs when allowed; `tick` says whether
  // quantum expiry counts (else only priority does).
  void PreemptFor(const ClusterState& state, const Job& job, bool tick,
                  Actions& out);
  bool ClaimedByOther(const ClusterState& state, GpuId gpu, JobId job) const;
  void TryPack(const ClusterState& state, Actions& out);
  // The memory two jobs packed on `gpu` must fit in: its server's, or
  // options_.gpu_memory_gb where the server does not say.
  double PackMemoryGb(const Cluster& cluster, GpuId gpu) const;
  // Grow-shrink at an event; `tick` says whether growing may happen.
  void GrowShrink(const ClusterState& state, bool tick, Actions& out);
  void Consolidate(const ClusterState& state, Actions& out);
  void Defragment(const ClusterState& state, Actions& out);
  // Moves a job (running: suspend now, migrate later) to `gpus`, or to the
  // best free place when the suspend completes.
  void MoveJob(const ClusterState& state, const Job& job, Actions& out);
  // A placement as good as `d` GPUs allow, free now, off `avoid` (-1: none).
  std::optional<std::vector<GpuId>> GoodPlace(const Cluster& cluster, int d,
                                              int avoid_server,
                                              bool only_busy_servers) const;
  bool IsSplit(const Cluster& cluster, const std::vector<GpuId>& gpus) const;
  // Judges `job`'s pack once it has been measured; may unpack it.
  void JudgePack(const ClusterState& state, const Job& job, Actions& out);
  static std::pair<int32_t, int32_t> PairKey(JobId a, JobId b) {
    return a < b ? std::pair(a.value, b.value) : std::pair(b.value, a.value);
  }

  GandivaOptions options_;
  std::string name_;
  // claim_[gpu]: the waiting job that GPU is kept for, if any.
  std::vector<JobId> claim_;
  // Pairs of jobs found to interfere (never packed again) and to pack well.
  std::set<std::pair<int32_t, int32_t>> bad_pairs_;
  std::set<std::pair<int32_t, int32_t>> good_pairs_;
  // Jobs this policy packed (the joining side), until the pack ends.
  std::set<JobId> packed_;
  // Elastic jobs, and those running on more GPUs than they asked for.
  std::set<JobId> elastic_;
  std::set<JobId> grown_;
  // Since when GPUs have been free with nothing queued or waiting.
  Time idle_since_ = Time::Never();
  // Jobs placed worse than their size needs; jobs suspended to be moved.
  std::set<JobId> split_;
  std::set<JobId> moving_;
};

}  // namespace gandiva::core
