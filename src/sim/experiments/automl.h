// The AutoML experiment's pieces: a seeded accuracy model of a
// hyper-parameter search's configurations, and a Hyperband-style successive
// halving driver that runs inside the simulator's tick hook (SimOptions::
// on_tick), ranks configurations at rungs from their measured accuracy and
// kills the worse half.
//
// Accuracy model. Configuration i has a final accuracy F_i (after all its
// mini-batches) and a learning-speed constant tau_i (a share of its
// training). Its true accuracy after a share p in [0, 1] of its training is
//   acc_i(p) = F_i (1 - exp(-p / tau_i)) / (1 - exp(-1 / tau_i)),
// rising from 0 to exactly F_i at p = 1. F_i = lo + (hi - lo) u^skew with u
// uniform, so only a few configurations exceed a high target; tau_i =
// tau_median x lognormal(0, tau_sigma), so a fast learner with a lower F can
// look better early. An evaluation at rung r reports acc_i(p) (1 + e) with e
// ~ N(0, noise) drawn from (seed, i, r) alone: the same configuration at the
// same rung measures the same under every policy, so the search makes the
// same choices whatever the scheduler and only its timing differs. A search
// space with no configuration above the target is redrawn (the next stream)
// so that every search can succeed, as the paper's did. Deterministic for a
// seed; immutable after construction: thread-safe to read.
//
// Driver. Rung r (r = 1, 2, ...) is at r x rung_minibatches mini-batches.
// When every configuration still alive has passed rung r (or finished), the
// driver ranks them by their rung-r measurement and kills the worse half
// (keeping ceil(n / 2), never fewer than keep_at_least, never the last one);
// the survivors go on to the next rung, and the last ones train to the end.
// A configuration running ahead of the others keeps training meanwhile (the
// driver can kill, not pause). Every tick it also checks each live
// configuration's progress against the share at which it reaches the target
// accuracy; the first time one does (interpolated between ticks) is the
// search's result, and then the driver stops the rest of the search. Not
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/time.h"
#include "sim/simulator.h"

namespace gandiva::sim::experiments {

struct AccuracyModelOptions {
  int configs = 128;
  double target = 0.90;  // the accuracy a search looks for
  // F = final_lo + (final_hi - final_lo) u^final_skew. Defaults 0.50, 0.93,
  // 2: about 3.5% of configurations exceed 0.90.
  double final_lo = 0.50;
  double final_hi = 0.93;
  double final_skew = 2.0;
  // tau = tau_median x exp(N(0, tau_sigma)). Defaults 0.25, 0.15.
  double tau_median = 0.25;
  double tau_sigma = 0.15;
  // Relative measurement noise (standard deviation). Default 0.02.
  double noise = 0.02;
};

struct ConfigAccuracy {
  double final_accuracy = 0;
  double tau = 0;
};

class AccuracyModel {
 public:
  AccuracyModel(const AccuracyModelOptions& options, uint64_t seed);

  int size() const { return static_cast<int>(configs_.size()); }
  const AccuracyModelOptions& options() const { return options_; }
  const ConfigAccuracy& config(int i) const { return configs_[i]; }
  // True accuracy of configuration i after share p of its training.
  double Accuracy(int i, double p) const;
  // What evaluating configuration i at rung r (at share p) reports.
  double Measured(int i, int rung, double p) const;
  // The share of its training after which configuration i reaches `target`;
  // nullopt if it never does (F_i < target).
  std::optional<double> ShareToReach(int i, double target) const;
  // Configurations whose final accuracy reaches `target`.
  int CountReaching(double target) const;
  // Index of the configuration with the highest final accuracy.
  int Best() const;

 private:
  AccuracyModelOptions options_;
  uint64_t seed_;
  std::vector<ConfigAccuracy> configs_;
};

// One rung's decision.
struct RungDecision {
  int rung = 0;  // 1-based
  core::Time time;
  int alive_before = 0;
  std::vector<int> killed;  // configuration indexes
};

struct SearchSpec {
  std::string name;
  // Workload positions of the configurations (configuration i is jobs[i]).
  std::vector<size_t> jobs;
  double rung_minibatches = 100;  // N: kill half every N mini-batches
  int keep_at_least = 1;          // stop halving at this many
  double target = 0.90;
  core::Time submit;  // when the search was submitted
  // Kill the remaining configurations once one reaches the target.
  bool stop_when_found = true;
  // Raise the survivors' priority to the rung number after each rung (the
  // paper's dynamic prioritisation), so background work never takes their
  // GPUs. Default false.
  bool boost_survivors = false;
};

class SuccessiveHalvingDriver {
 public:
  // `model` must outlive the driver and have one entry per spec.jobs.
  SuccessiveHalvingDriver(SearchSpec spec, const AccuracyModel* model);

  // The tick hook's body: measure, decide rungs, check the target.
  void OnTick(SimControl& control);

  const SearchSpec& spec() const { return spec_; }
  // When a configuration first reached the target, and which.
  std::optional<core::Time> found_at() const { return found_at_; }
  int found_config() const { return found_config_; }
  const std::vector<RungDecision>& rungs() const { return rungs_; }
  // Configurations not killed by the driver.
  int alive() const;
  std::vector<int> survivors() const;
  // Set once nothing is left to run (found, or every survivor ended).
  std::optional<core::Time> ended_at() const { return ended_at_; }
  // (time, configurations alive) at every tick after the submission.
  const std::vector<std::pair<core::Time, int>>& alive_over_time() const {
    return alive_over_time_;
  }

 private:
  struct Config {
    bool killed = false;
    int measured = 0;            // rungs measured so far
    std::vector<double> scores;  // scores[r - 1]: the rung-r measurement
    double last_done = 0;
    core::Time last_time;
    std::optional<double> share_to_reach;
  };

  SearchSpec spec_;
  const AccuracyModel* model_;
  std::vector<Config> configs_;
  int next_rung_ = 1;
  std::optional<core::Time> found_at_;
  int found_config_ = -1;
  std::optional<core::Time> ended_at_;
  std::vector<RungDecision> rungs_;
  std::vector<std::pair<core::Time, int>> alive_over_time_;
};

}  // namespace gandiva::sim::experiments
