#include "sim/fairness.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/policies/queues.h"

namespace gandiva::sim {
namespace {

constexpr double kEps = 1e-9;

}  // namespace

FairnessMeter::FairnessMeter(std::vector<std::string> names,
                             std::vector<double> quotas, double gpus,
                             int64_t window_us)
    : names_(std::move(names)),
      quotas_(std::move(quotas)),
      gpus_(gpus),
      window_us_(std::max<int64_t>(1, window_us)),
      jobs_(quotas_.size(), 0),
      demand_(quotas_.size(), 0.0),
      fair_(quotas_.size()),
      received_(quotas_.size()),
      demanded_(quotas_.size()) {}

namespace {

std::vector<std::string> NamesOf(const core::QueueQuotas& queues) {
  std::vector<std::string> names;
  for (size_t q = 0; q < queues.size(); ++q) names.push_back(queues.name(q));
  return names;
}

std::vector<double> QuotasOf(const core::QueueQuotas& queues) {
  std::vector<double> quotas;
  for (size_t q = 0; q < queues.size(); ++q) quotas.push_back(queues.quota(q));
  return quotas;
}

}  // namespace

FairnessMeter::FairnessMeter(const core::QueueQuotas& queues, double gpus,
                             int64_t window_us)
    : FairnessMeter(NamesOf(queues), QuotasOf(queues), gpus, window_us) {
  tree_ = std::make_unique<core::QueueQuotas>(queues);
}

std::vector<double> FairnessMeter::FairShares(const std::vector<double>& demand,
                                              const std::vector<double>& quotas,
                                              double gpus) {
  return core::FairShares(demand, quotas, gpus);
}

void FairnessMeter::Spread(std::vector<std::vector<double>>& sums, int q,
                           int64_t t0, int64_t t1, double amount) {
  if (t1 <= t0 || amount == 0) return;
  std::vector<double>& row = sums[static_cast<size_t>(q)];
  for (int64_t w = t0 / window_us_; w * window_us_ < t1; ++w) {
    const int64_t from = std::max(t0, w * window_us_);
    const int64_t to = std::min(t1, (w + 1) * window_us_);
    if (static_cast<size_t>(w) >= row.size()) {
      row.resize(static_cast<size_t>(w) + 1, 0.0);
    }
    row[static_cast<size_t>(w)] +=
        amount * static_cast<double>(to - from) / 1e6;
  }
}

void FairnessMeter::Integrate(int64_t from_us, int64_t to_us) {
  if (to_us <= from_us) return;
  const std::vector<double> share = tree_ ? tree_->Shares(demand_, gpus_)
                                          : FairShares(demand_, quotas_, gpus_);
  for (size_t q = 0; q < demand_.size(); ++q) {
    if (demand_[q] <= kEps) continue;
    const int qi = static_cast<int>(q);
    Spread(fair_, qi, from_us, to_us, share[q]);
    Spread(demanded_, qi, from_us, to_us, demand_[q]);
  }
}

void FairnessMeter::AddDemand(int q, int64_t t_us, double delta) {
  if (t_us > demand_since_us_) {
    Integrate(demand_since_us_, t_us);
    demand_since_us_ = t_us;
  }
  double& d = demand_[static_cast<size_t>(q)];
  d += delta;
  if (d < kEps) d = 0;
}

void FairnessMeter::AddReceived(int q, int64_t t0_us, int64_t t1_us,
                                double gpus) {
  Spread(received_, q, t0_us, t1_us, gpus);
}

FairnessResult FairnessMeter::Finish(int64_t end_us) {
  if (end_us > demand_since_us_) {
    Integrate(demand_since_us_, end_us);
    demand_since_us_ = end_us;
  }
  FairnessResult r;
  size_t windows = 0;
  for (const auto& row : demanded_) windows = std::max(windows, row.size());
  auto at = [](const std::vector<double>& row, size_t w) {
    return w < row.size() ? row[w] : 0.0;
  };
  double jain_sum = 0;
  int64_t within = 0;
  for (size_t w = 0; w < windows; ++w) {
    double sum = 0, sum_sq = 0;
    int n = 0;
    for (size_t q = 0; q < quotas_.size(); ++q) {
      const double fair = at(fair_[q], w);
      if (at(demanded_[q], w) <= kEps || fair <= kEps) continue;
      const double got = at(received_[q], w);
      const double x = got / fair;
      sum += x;
      sum_sq += x * x;
      ++n;
      ++r.queue_windows;
      if (got * 10 >= fair * 9) ++within;  // at least 90%
    }
    if (n >= 2) {
      ++r.windows_shared;
      jain_sum += sum_sq > 0 ? sum * sum / (n * sum_sq) : 1.0;
    }
  }
  if (r.windows_shared > 0) {
    jain_sum /= static_cast<double>(r.windows_shared);
    r.jain_fairness = jain_sum;
  }
  if (r.queue_windows > 0) {
    r.share_windows_within_10pct =
        static_cast<double>(within) / static_cast<double>(r.queue_windows);
  }
  for (size_t q = 0; q < quotas_.size(); ++q) {
    if (tree_ && (!tree_->leaf(q) ||
                  (names_[q].empty() && jobs_[q] == 0 && quotas_[q] == 0))) {
      continue;
    }
    QueueFairness f;
    f.name = names_[q];
    f.quota = quotas_[q];
    f.jobs = jobs_[q];
    for (size_t w = 0; w < windows; ++w) {
      f.fair_gpu_h += at(fair_[q], w) / 3600;
      f.demand_gpu_h += at(demanded_[q], w) / 3600;
    }
    for (double s : received_[q]) f.received_gpu_h += s / 3600;
    r.queues.push_back(std::move(f));
  }
  return r;
}

}  // namespace gandiva::sim
