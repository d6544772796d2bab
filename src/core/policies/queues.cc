#include "core/policies/queues.h"

#include <algorithm>
#include <utility>

namespace gandiva::core {
namespace {

constexpr double kEps = 1e-9;

// Lends `left` GPUs to the queues in `short_of` (indexes) by `weight`,
// max-min: none gets more than it still needs; what one cannot use goes to
// the others. Returns what is left over.
double Fill(std::vector<size_t> short_of, const std::vector<double>& demand,
            const std::vector<double>& weight, std::vector<double>& share,
            double left) {
  while (!short_of.empty() && left > kEps) {
    double total_weight = 0;
    for (size_t q : short_of) total_weight += weight[q];
    if (total_weight <= 0) break;
    const double unit = left / total_weight;
    std::vector<size_t> still;
    for (size_t q : short_of) {
      const double need = demand[q] - share[q];
      if (need <= unit * weight[q] + kEps) {
        share[q] += need;
        left -= need;
      } else {
        still.push_back(q);
      }
    }
    if (still.size() == short_of.size()) {
      // Nobody is satisfied at this level: each takes its part of all.
      for (size_t q : still) share[q] += unit * weight[q];
      return 0;
    }
    short_of = std::move(still);
  }
  return std::max(0.0, left);
}

}  // namespace

std::vector<double> FairShares(const std::vector<double>& demand,
                               const std::vector<double>& quotas, double gpus) {
  const size_t n = demand.size();
  std::vector<double> share(n, 0.0);
  double guaranteed = 0;
  for (size_t q = 0; q < n; ++q) {
    share[q] = std::max(0.0, std::min(demand[q], quotas[q]));
    guaranteed += share[q];
  }
  if (guaranteed > gpus) {
    // Quotas over the cluster's size: each gets its part of it.
    for (double& s : share) s *= gpus / guaranteed;
    return share;
  }
  std::vector<size_t> weighted, unweighted;
  for (size_t q = 0; q < n; ++q) {
    if (demand[q] - share[q] <= kEps) continue;
    (quotas[q] > 0 ? weighted : unweighted).push_back(q);
  }
  double left = Fill(weighted, demand, quotas, share, gpus - guaranteed);
  const std::vector<double> equal(n, 1.0);
  (void)Fill(unweighted, demand, equal, share, left);
  return share;
}

QueueQuotas::QueueQuotas(const std::map<std::string, int>& quotas) {
  std::map<std::string, int> all = quotas;
  all.emplace("", 0);
  for (const auto& [name, quota] : all) {
    index_[name] = names_.size();
    names_.push_back(name);
    quotas_.push_back(std::max(0, quota));
  }
}

size_t QueueQuotas::Of(const std::string& vc) const {
  auto it = index_.find(vc);
  return it != index_.end() ? it->second : index_.at("");
}

std::string QueueQuotas::Describe(size_t q) const {
  return names_[q].empty() ? "the shared queue" : "queue '" + names_[q] + "'";
}

std::string QueueWaitReasons::Why(JobId job, int need) const {
  auto it = why.find(job);
  if (it == why.end() || need > gpus.total) {
    return DefaultWaitReason(need, -1, gpus);
  }
  return it->second;
}

std::set<JobId> LiveJobs::Of(const ClusterState& state) {
  std::set<JobId> live;
  state.ForEachJob([&](const Job& j) {
    if (!IsTerminal(j.state)) live.insert(j.id);
  });
  return live;
}

void LiveJobs::Keep(const ClusterState& state, const Event& event) {
  if (stale_) {
    live_ = Of(state);
    stale_ = false;
    return;
  }
  if (const auto* a = std::get_if<JobArrived>(&event.body)) {
    live_.insert(a->id);
  }
  for (JobId id : state.changed_jobs()) {
    if (!state.has_job(id) || IsTerminal(state.job(id).state)) {
      live_.erase(id);
    } else {
      live_.insert(id);
    }
  }
}

void LiveJobs::Forget(std::span<const JobId> jobs) {
  for (JobId id : jobs) live_.erase(id);
}

}  // namespace gandiva::core
