#include "sim/experiments/automl.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/rng.h"

namespace gandiva::sim::experiments {
namespace {

constexpr double kEps = 1e-9;

// Normalised rise of the accuracy curve: 0 at p = 0, 1 at p = 1.
double Rise(double p, double tau) {
  return (1 - std::exp(-p / tau)) / (1 - std::exp(-1 / tau));
}

// Halvings from `n` configurations down to `keep`.
int RungsNeeded(int n, int keep) {
  int rungs = 0;
  keep = std::max(1, keep);
  while (n > keep) {
    n = std::max(keep, (n + 1) / 2);
    ++rungs;
  }
  return rungs;
}

}  // namespace

AccuracyModel::AccuracyModel(const AccuracyModelOptions& options, uint64_t seed)
    : options_(options), seed_(seed) {
  const int n = std::max(0, options.configs);
  // Redraw the whole space (next stream) until one configuration reaches the
  // target; give up after 1,000 tries (then the target is unreachable).
  for (uint64_t stream = 0; stream < 1000; ++stream) {
    core::Rng rng = core::Rng::Derive(seed, stream);
    configs_.assign(static_cast<size_t>(n), {});
    bool reachable = false;
    for (ConfigAccuracy& c : configs_) {
      const double u = rng.Uniform();
      c.final_accuracy =
          options.final_lo + (options.final_hi - options.final_lo) *
                                 std::pow(u, options.final_skew);
      c.tau = options.tau_median * rng.LogNormal(0, options.tau_sigma);
      reachable = reachable || c.final_accuracy >= options.target;
    }
    if (reachable || n == 0) break;
  }
}

double AccuracyModel::Accuracy(int i, double p) const {
  const ConfigAccuracy& c = configs_[static_cast<size_t>(i)];
  p = std::clamp(p, 0.0, 1.0);
  return c.final_accuracy * Rise(p, c.tau);
}

double AccuracyModel::Measured(int i, int rung, double p) const {
  core::Rng rng = core::Rng::Derive(
      seed_ ^ 0x5DEECE66DULL,
      (static_cast<uint64_t>(i) << 24) | static_cast<uint64_t>(rung));
  return Accuracy(i, p) * (1 + options_.noise * rng.Normal());
}

std::optional<double> AccuracyModel::ShareToReach(int i, double target) const {
  const ConfigAccuracy& c = configs_[static_cast<size_t>(i)];
  if (c.final_accuracy < target) return std::nullopt;
  if (target <= 0) return 0.0;
  // Solve F (1 - e^{-p/tau}) / (1 - e^{-1/tau}) = target for p.
  const double norm = 1 - std::exp(-1 / c.tau);
  const double x = 1 - target / c.final_accuracy * norm;
  if (x <= 0) return 1.0;
  return std::clamp(-c.tau * std::log(x), 0.0, 1.0);
}

int AccuracyModel::CountReaching(double target) const {
  int n = 0;
  for (const ConfigAccuracy& c : configs_) n += c.final_accuracy >= target;
  return n;
}

int AccuracyModel::Best() const {
  int best = -1;
  for (int i = 0; i < size(); ++i) {
    if (best < 0 || configs_[static_cast<size_t>(i)].final_accuracy >
                        configs_[static_cast<size_t>(best)].final_accuracy) {
      best = i;
    }
  }
  return best;
}

SuccessiveHalvingDriver::SuccessiveHalvingDriver(SearchSpec spec,
                                                 const AccuracyModel* model)
    : spec_(std::move(spec)), model_(model), configs_(spec_.jobs.size()) {
  for (size_t i = 0; i < configs_.size(); ++i) {
    configs_[i].last_time = spec_.submit;
    configs_[i].share_to_reach =
        model_->ShareToReach(static_cast<int>(i), spec_.target);
  }
}

int SuccessiveHalvingDriver::alive() const {
  int n = 0;
  for (const Config& c : configs_) n += !c.killed;
  return n;
}

std::vector<int> SuccessiveHalvingDriver::survivors() const {
  std::vector<int> out;
  for (size_t i = 0; i < configs_.size(); ++i) {
    if (!configs_[i].killed) out.push_back(static_cast<int>(i));
  }
  return out;
}

void SuccessiveHalvingDriver::OnTick(SimControl& control) {
  const core::Time now = control.now();
  if (ended_at_ || now < spec_.submit) return;
  const int n = static_cast<int>(configs_.size());
  const int max_rungs = RungsNeeded(n, spec_.keep_at_least);

  // Measure rungs passed since the last tick and check the target.
  for (int i = 0; i < n; ++i) {
    Config& c = configs_[static_cast<size_t>(i)];
    const size_t job = spec_.jobs[static_cast<size_t>(i)];
    if (c.killed || !control.arrived(job)) continue;
    const double total = control.total(job);
    const double done = control.done(job);
    const bool finished = done >= total - kEps;
    if (control.ended(job) && !finished) {
      c.killed = true;  // stopped by someone else: out of the search
      continue;
    }
    while (c.measured < max_rungs) {
      const int r = c.measured + 1;
      const double at = r * spec_.rung_minibatches;
      if (done + kEps < at && !finished) break;
      c.scores.push_back(model_->Measured(i, r, std::min(1.0, at / total)));
      ++c.measured;
    }
    if (c.share_to_reach) {
      const double need = *c.share_to_reach * total;
      if (done + kEps >= need) {
        core::Time t = now;
        if (done > c.last_done && need > c.last_done) {
          const double f = (need - c.last_done) / (done - c.last_done);
          t = c.last_time +
              core::Duration::FromSeconds(f * (now - c.last_time).seconds());
        }
        t = std::max(t, spec_.submit);
        if (!found_at_ || t < *found_at_) {
          found_at_ = t;
          found_config_ = i;
        }
      }
    }
    c.last_done = done;
    c.last_time = now;
  }

  if (found_at_ && spec_.stop_when_found) {
    for (int i = 0; i < n; ++i) {
      const size_t job = spec_.jobs[static_cast<size_t>(i)];
      if (!configs_[static_cast<size_t>(i)].killed && !control.ended(job)) {
        control.Kill(job, spec_.name + ": target reached, search stopped");
      }
    }
    ended_at_ = now;
    alive_over_time_.emplace_back(now, 0);
    return;
  }

  // Rung decisions: while every live configuration has passed the next rung.
  while (next_rung_ <= max_rungs) {
    std::vector<int> live = survivors();
    if (static_cast<int>(live.size()) <= std::max(1, spec_.keep_at_least)) {
      break;
    }
    const bool ready = std::all_of(live.begin(), live.end(), [&](int i) {
      return configs_[static_cast<size_t>(i)].measured >= next_rung_;
    });
    if (!ready) break;
    const size_t r = static_cast<size_t>(next_rung_ - 1);
    std::stable_sort(live.begin(), live.end(), [&](int a, int b) {
      return configs_[static_cast<size_t>(a)].scores[r] >
             configs_[static_cast<size_t>(b)].scores[r];
    });
    const size_t keep = static_cast<size_t>(std::max(
        {1, spec_.keep_at_least, static_cast<int>((live.size() + 1) / 2)}));
    RungDecision d;
    d.rung = next_rung_;
    d.time = now;
    d.alive_before = static_cast<int>(live.size());
    for (size_t k = keep; k < live.size(); ++k) {
      const int i = live[k];
      configs_[static_cast<size_t>(i)].killed = true;
      d.killed.push_back(i);
      const size_t job = spec_.jobs[static_cast<size_t>(i)];
      if (!control.ended(job)) {
        control.Kill(job, spec_.name + ": rung " + std::to_string(next_rung_));
      }
    }
    std::sort(d.killed.begin(), d.killed.end());
    rungs_.push_back(std::move(d));
    if (spec_.boost_survivors) {
      // Dynamic prioritisation: the survivors of rung r run at priority r,
      // above the background jobs and the configurations cut earlier.
      for (size_t k = 0; k < keep && k < live.size(); ++k) {
        const size_t job = spec_.jobs[static_cast<size_t>(live[k])];
        if (!control.ended(job)) control.SetPriority(job, next_rung_);
      }
    }
    ++next_rung_;
  }

  // Over when every survivor has ended.
  bool all_ended = true;
  for (int i = 0; i < n; ++i) {
    if (!configs_[static_cast<size_t>(i)].killed &&
        !control.ended(spec_.jobs[static_cast<size_t>(i)])) {
      all_ended = false;
    }
  }
  if (all_ended && n > 0) ended_at_ = now;
  alive_over_time_.emplace_back(now, alive());
}

}  // namespace gandiva::sim::experiments
