// FifoPolicy: the baseline Gandiva is compared against, like the YARN
// capacity scheduler: each job gets exclusive GPUs from start to finish, in
// strict arrival order (a job that does not fit blocks those behind it), with
// no preemption, no sharing and no migration. A job asking for more GPUs
// than the servers up have in all, which could not start however many
// ended, blocks no one: the jobs behind it go on, and it is first in line
// again once servers join.
//
// Placement of the job at the head: the server whose free GPUs fit it most
// tightly; else, when `relax_locality` (default), free GPUs across servers on
// as few servers as possible; else it waits.
//
// Virtual clusters (VCs): with `vc_quotas` set, each VC named there is its
// own FIFO queue (a job that does not fit blocks only the jobs of its VC
// behind it) and holds at most its quota of GPUs at once; see FifoOptions.
//
// Why a queued job waits (ExplainQueue): the default rules
// (DefaultWaitReason), save that with `relax_locality` a job is not kept
// waiting for one server with room; with VC quotas, a job whose VC would
// go past its quota says so (naming the VC, what it holds and its quota),
// and the jobs ahead of a job are those of its VC's queue.
//
// Not thread-safe (see Policy).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/policy.h"

namespace gandiva::core {

struct FifoOptions {
  // Place a job across servers when no single server has room (true), or
  // wait for one that has (false). Default true.
  bool relax_locality = true;
  // GPU quota of each virtual cluster (JobSpec::vc), in GPUs. Default empty:
  // one queue shared by all jobs, whatever their VC.
  //
  // Otherwise each VC named here is a FIFO queue of its own, and a job of it
  // starts only while the GPUs its VC's jobs hold plus the job's stay within
  // the quota (a job asking for more than its VC's quota runs only by
  // borrowing). Jobs of VCs not named here (the empty VC included) share one
  // more FIFO queue whose quota is what the named quotas leave of the
  // cluster's up GPUs (0 if they take it all: such jobs then run only by
  // borrowing). No VC has precedence: free GPUs go to the VCs' head jobs
  // in queue order (priority, then arrival).
  std::map<std::string, int> vc_quotas;
  // With vc_quotas: lets a VC at its quota use GPUs beyond it while they are
  // idle, that is when no VC's head job within its quota is waiting for GPUs.
  // Borrowers' heads go in arrival order. A borrowed GPU is kept until its
  // job ends (no preemption), counting towards the borrower's quota
  // meanwhile, so the owner may wait for it. Default false (YARN's capacity
  // scheduler with maximum capacity = capacity).
  bool allow_borrowing = false;
};

// Quotas for `cluster_gpus` GPUs in proportion to each VC's demand (for
// example the GPU-seconds its jobs ask for in a workload). `demand` lists
// (vc, amount) pairs; a VC listed more than once gets the sum, negative
// amounts count as 0. When the cluster has at least one GPU per VC, each VC
// first gets one GPU and the rest are split in proportion to demand; else
// all are split in proportion. Splitting rounds by largest remainder (ties:
// the VC whose name sorts first); with no demand at all, evenly. The quotas
// sum to `cluster_gpus` (at least 0) unless `demand` is empty.
std::map<std::string, int> ProportionalVcQuotas(
    const std::vector<std::pair<std::string, double>>& demand,
    int cluster_gpus);

class FifoPolicy final : public Policy {
 public:
  explicit FifoPolicy(FifoOptions options = {});
  std::string_view name() const override { return "fifo"; }
  void decide(const ClusterState& state, const Event& event,
              Actions& out) override;
  void SaveState(SnapshotWriter& w) const override;
  void LoadState(SnapshotReader& r) override;
  void Forget(const ClusterState& state, std::span<const JobId> jobs) override;
  std::shared_ptr<const QueueReasons> ExplainQueue(
      const ClusterState& state, const QueueReasons* previous) const override;

 private:
  // With vc_quotas, queues are numbered: the named VCs in name order, then
  // the shared rest.
  int QueueOf(const Job& job) const;
  int QuotaOf(const ClusterState& state, int queue) const;
  void DecideByVc(const ClusterState& state, Actions& out);
  // Runs the suspended jobs that may run again (released by an operator)
  // on their GPUs.
  void RunWaiting(const ClusterState& state, Actions& out);

  FifoOptions options_;
  // vc -> queue number, for the named VCs.
  std::map<std::string, int> index_;
  int named_total_ = 0;  // the sum of the named quotas
  // With vc_quotas: the jobs this policy started that may still hold GPUs,
  // with their queue, and the GPUs each queue's jobs hold.
  std::map<JobId, int> started_;
  std::vector<int> used_;
};

}  // namespace gandiva::core
