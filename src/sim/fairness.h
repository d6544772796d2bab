// FairnessMeter: how fairly a run shared the cluster among queues (teams).
// Pure: fed by the simulator with each queue's demand and the GPU time each
// queue received, it measures against each queue's fair share, window by
// window.
//
// The fair share, at each instant: every queue with demand (the GPUs its
// arrived, unfinished jobs ask for) first gets up to its quota; the GPUs
// left are lent to the queues still short, in proportion to their weights
// (by default their quotas), max-min (water-filling: none gets more than
// it asks; what one cannot use goes to the others); queues of weight 0
// share what is left after that equally. In a tree of queues this is done
// at the top, then within each queue's share among its children, none
// given more than its limit (core::QueueQuotas::Shares). A queue's fair
// share over a window is that share integrated over the window, in
// GPU-seconds.
//
// What a queue received: the GPU time its jobs trained (a job packed with
// another on its GPUs counts half of them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/policies/queues.h"

namespace gandiva::sim {

struct QueueFairness {
  std::string name;
  double quota = 0;  // GPUs
  int64_t jobs = 0;
  double received_gpu_h = 0;
  double fair_gpu_h = 0;  // over the windows in which it had demand
  double demand_gpu_h = 0;
};

struct FairnessResult {
  // Jain's index over queues of received / fair share, per window, averaged
  // over the windows in which two or more queues had demand (1 if none).
  double jain_fairness = 1;
  // Of the (queue, window) pairs with demand: the fraction in which the
  // queue received at least 90% of its fair share (1 if none).
  double share_windows_within_10pct = 1;
  int64_t windows_shared = 0;  // windows with two or more queues in demand
  int64_t queue_windows = 0;   // (queue, window) pairs with demand
  std::vector<QueueFairness> queues;
  // Themis' finish-time fairness (rho), once measured
  // (MeasureFinishTimeFairness): a job's JCT in the shared cluster over its
  // JCT with its queue's jobs alone on the queue's quota; over the jobs of
  // queues of quota above 0 that finished in both runs.
  bool finish_time_measured = false;
  int64_t finish_time_jobs = 0;
  double mean_finish_time_fairness = 0;
  double max_finish_time_fairness = 0;
  // The fraction of those jobs with rho above 1 (finished later than alone).
  double finish_time_fairness_above_1 = 0;
};

class FairnessMeter {
 public:
  // `quotas[q]`: queue q's quota in GPUs (0 or more); `gpus`: the
  // cluster's; `window_us`: the window's length (positive).
  FairnessMeter(std::vector<std::string> names, std::vector<double> quotas,
                double gpus, int64_t window_us);
  // Queue q is queues' q; shares are queues.Shares; only leaves are
  // reported, the shared queue "" only if it had jobs.
  FairnessMeter(const core::QueueQuotas& queues, double gpus,
                int64_t window_us);

  // From `t_us` on, queue q asks for `delta` GPUs more (less if negative).
  // Calls come in time order.
  void AddDemand(int q, int64_t t_us, double delta);
  // Queue q's jobs trained on `gpus` GPUs over [t0_us, t1_us) (any order).
  void AddReceived(int q, int64_t t0_us, int64_t t1_us, double gpus);
  void CountJob(int q) { ++jobs_[static_cast<size_t>(q)]; }

  // The measures up to `end_us`.
  FairnessResult Finish(int64_t end_us);

  // The fair share of each queue for these demands (exposed for tests).
  static std::vector<double> FairShares(const std::vector<double>& demand,
                                        const std::vector<double>& quotas,
                                        double gpus);

 private:
  // Adds the fair share of the demand now, held over [from_us, to_us).
  void Integrate(int64_t from_us, int64_t to_us);
  // Adds `amount` GPUs held over [t0, t1) to per-window sums `sums[q]`.
  void Spread(std::vector<std::vector<double>>& sums, int q, int64_t t0,
              int64_t t1, double amount);

  std::vector<std::string> names_;
  std::vector<double> quotas_;
  std::unique_ptr<core::QueueQuotas> tree_;
  double gpus_;
  int64_t window_us_;
  std::vector<int64_t> jobs_;
  std::vector<double> demand_;  // now
  int64_t demand_since_us_ = 0;
  // Per queue, per window: GPU-seconds.
  std::vector<std::vector<double>> fair_, received_, demanded_;
};

}  // namespace gandiva::sim
