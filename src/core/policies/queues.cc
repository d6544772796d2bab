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
                               const std::vector<double>& quotas,
                               const std::vector<double>& weights,
                               double gpus) {
  const size_t n = demand.size();
  std::vector<double> share(n, 0.0);
  double guaranteed = 0;
  for (size_t q = 0; q < n; ++q) {
    share[q] = std::max(0.0, std::min(demand[q], quotas[q]));
    guaranteed += share[q];
  }
  if (guaranteed > gpus) {
    // Quotas over the cluster's size: each gets its part of it.
    for (double& s : share) s *= guaranteed > 0 ? gpus / guaranteed : 0;
    return share;
  }
  std::vector<size_t> weighted, unweighted;
  for (size_t q = 0; q < n; ++q) {
    if (demand[q] - share[q] <= kEps) continue;
    (weights[q] > 0 ? weighted : unweighted).push_back(q);
  }
  double left = Fill(weighted, demand, weights, share, gpus - guaranteed);
  const std::vector<double> equal(n, 1.0);
  (void)Fill(unweighted, demand, equal, share, left);
  return share;
}

std::vector<double> FairShares(const std::vector<double>& demand,
                               const std::vector<double>& quotas, double gpus) {
  return FairShares(demand, quotas, quotas, gpus);
}

std::vector<QueueConfig> FlatQueues(const std::map<std::string, int>& quotas) {
  std::vector<QueueConfig> out;
  for (const auto& [name, quota] : quotas) {
    out.push_back({.name = name, .quota = quota});
  }
  return out;
}

std::map<std::string, int> LeafQuotas(const std::vector<QueueConfig>& queues) {
  std::set<std::string> parents;
  for (const QueueConfig& q : queues) parents.insert(q.parent);
  std::map<std::string, int> out;
  for (const QueueConfig& q : queues) {
    if (!parents.count(q.name)) out[q.name] = q.quota;
  }
  return out;
}

Status CheckQueues(const std::vector<QueueConfig>& queues) {
  std::map<std::string, const QueueConfig*> by_name;
  for (const QueueConfig& q : queues) {
    const std::string where = "queue '" + q.name + "'";
    bool good = !q.name.empty() && q.name.size() <= 64;
    for (char c : q.name) {
      good =
          good && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                   (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.');
    }
    if (!good) {
      return InvalidArgument(where +
                             ": field 'name': must be 1 to 64 of A-Z a-z 0-9 "
                             ". _ -");
    }
    if (!by_name.emplace(q.name, &q).second) {
      return InvalidArgument(where + ": field 'name': named twice");
    }
    if (q.quota < 0) {
      return InvalidArgument(where + ": field 'quota': must be 0 or more");
    }
    if (!(q.weight < 0 || q.weight >= 0) || q.weight > 1e6) {
      return InvalidArgument(where + ": field 'weight': must be 0 to 1e6");
    }
    if (q.limit >= 0 && q.limit < q.quota) {
      return InvalidArgument(where +
                             ": field 'limit': " + std::to_string(q.limit) +
                             " is under its quota " + std::to_string(q.quota));
    }
  }
  std::map<std::string, int> children_quota;
  for (const QueueConfig& q : queues) {
    if (q.parent.empty()) continue;
    if (!by_name.count(q.parent)) {
      return InvalidArgument("queue '" + q.name +
                             "': field 'parent': no queue '" + q.parent + "'");
    }
    children_quota[q.parent] += q.quota;
    // Walk up: a cycle comes back to a queue seen on the way.
    std::set<std::string> seen{q.name};
    for (std::string up = q.parent; !up.empty(); up = by_name.at(up)->parent) {
      if (!seen.insert(up).second) {
        return InvalidArgument("queue '" + q.name +
                               "': field 'parent': makes a cycle through '" +
                               up + "'");
      }
    }
  }
  for (const auto& [name, sum] : children_quota) {
    const QueueConfig& p = *by_name.at(name);
    if (sum > p.quota) {
      return InvalidArgument("queue '" + name +
                             "': field 'quota': " + std::to_string(p.quota) +
                             " is under its children's quotas, " +
                             std::to_string(sum) + " together");
    }
  }
  return Status::Ok();
}

QueueQuotas::QueueQuotas(const std::vector<QueueConfig>& queues) {
  std::map<std::string, const QueueConfig*> all;
  for (const QueueConfig& q : queues) all.emplace(q.name, &q);
  const QueueConfig shared{.name = "", .quota = 0, .weight = 0};
  all.emplace("", &shared);
  for (const auto& [name, q] : all) {
    index_[name] = names_.size();
    names_.push_back(name);
    quotas_.push_back(std::max(0, q->quota));
    weights_.push_back(std::max(0.0, q->Weight()));
    limits_.push_back(q->limit);
    tree_ = tree_ || !q->parent.empty() || q->limit >= 0;
  }
  parents_.assign(names_.size(), -1);
  children_.resize(names_.size());
  for (const auto& [name, q] : all) {
    auto up = index_.find(q->parent);
    if (q->parent.empty() || up == index_.end() || q->parent == name) continue;
    parents_[index_.at(name)] = static_cast<int>(up->second);
  }
  // A cycle (CheckQueues refuses them) is broken by putting its queues at
  // the top.
  for (size_t q = 0; q < names_.size(); ++q) {
    std::set<size_t> seen{q};
    for (int up = parents_[q]; up >= 0;
         up = parents_[static_cast<size_t>(up)]) {
      if (!seen.insert(static_cast<size_t>(up)).second) {
        parents_[q] = -1;
        break;
      }
    }
  }
  for (size_t q = 0; q < names_.size(); ++q) {
    if (parents_[q] < 0) {
      top_.push_back(q);
    } else {
      children_[static_cast<size_t>(parents_[q])].push_back(q);
    }
  }
  std::vector<size_t> stack(top_.rbegin(), top_.rend());
  while (!stack.empty()) {
    const size_t q = stack.back();
    stack.pop_back();
    top_down_.push_back(q);
    for (auto it = children_[q].rbegin(); it != children_[q].rend(); ++it) {
      stack.push_back(*it);
    }
  }
}

size_t QueueQuotas::Of(const std::string& vc) const {
  auto it = index_.find(vc);
  return it != index_.end() && leaf(it->second) ? it->second : index_.at("");
}

std::optional<size_t> QueueQuotas::Find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

std::vector<double> QueueQuotas::Shares(const std::vector<double>& demand,
                                        double gpus) const {
  const size_t n = names_.size();
  if (!tree_)
    return FairShares(demand, {quotas_.begin(), quotas_.end()}, weights_, gpus);
  // Each queue's demand: its leaves', up to its limit, bottom up.
  std::vector<double> asked(n, 0.0);
  for (auto it = top_down_.rbegin(); it != top_down_.rend(); ++it) {
    const size_t q = *it;
    if (leaf(q)) asked[q] = std::max(0.0, demand[q]);
    if (limits_[q] >= 0) asked[q] = std::min<double>(asked[q], limits_[q]);
    if (parents_[q] >= 0) asked[static_cast<size_t>(parents_[q])] += asked[q];
  }
  std::vector<double> share(n, 0.0);
  auto split = [&](const std::vector<size_t>& group, double gpus_here) {
    std::vector<double> d, quota, weight;
    for (size_t q : group) {
      d.push_back(asked[q]);
      quota.push_back(quotas_[q]);
      weight.push_back(weights_[q]);
    }
    const std::vector<double> s = FairShares(d, quota, weight, gpus_here);
    for (size_t k = 0; k < group.size(); ++k) share[group[k]] = s[k];
  };
  split(top_, gpus);
  for (size_t q : top_down_) {
    if (!leaf(q)) split(children_[q], share[q]);
  }
  return share;
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
