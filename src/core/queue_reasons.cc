#include "core/queue_reasons.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/policy.h"

namespace gandiva::core {

OpenGpus OpenGpus::Of(const Cluster& cluster) {
  OpenGpus g;
  for (const Server& s : cluster.servers()) {
    if (!s.up || s.cordoned) continue;
    g.total += s.spec.gpus;
    g.free += s.free_gpus;
    g.most_free_on_one = std::max(g.most_free_on_one, s.free_gpus);
    g.largest_server = std::max(g.largest_server, s.spec.gpus);
  }
  return g;
}

std::string AheadText(int ahead, const std::string& queue) {
  if (ahead <= 0) return "";
  return "; " + std::to_string(ahead) + " job" +
         (ahead == 1 ? " is" : "s are") + " ahead of it " + queue;
}

std::string SecondsText(Duration d) {
  return std::to_string(std::llround(d.seconds())) + " s";
}

std::string StartFailedOn(const Job& j, const Cluster& cluster) {
  std::string names;
  for (ServerId s : j.start_failed_on) {
    if (!names.empty()) names += ", ";
    names += cluster.server(s).spec.name;
  }
  return names;
}

std::string OwnWaitReason(const Job& j, const Cluster& cluster, Time now) {
  if (j.state == JobState::kSuspended && !j.busy() && !j.held &&
      j.awaits_start_retry(now)) {
    return "its resume failed " + std::to_string(j.start_failures) +
           (j.start_failures == 1 ? " time" : " times") +
           " in a row: it waits before it is tried again";
  }
  if (j.state != JobState::kQueued) return "";
  if (j.held) return kHeldReason;
  if (!j.awaits_start_retry(now)) return "";
  if (j.start_failures == 0 && j.run_failures > 0) {
    return "its run failed (" + std::to_string(j.run_failures) + " of " +
           std::to_string(j.spec.retries) +
           " retries taken): it waits before it runs again, " +
           (j.launched ? std::string("from its checkpoint")
                       : std::string("from the beginning"));
  }
  const std::string where = StartFailedOn(j, cluster);
  return "its start failed " + std::to_string(j.start_failures) +
         (j.start_failures == 1 ? " time" : " times") + " in a row" +
         (where.empty() ? "" : " (on " + where + ")") +
         ": it waits before it is tried again" +
         (where.empty() ? "" : ", on another server if one has room");
}

std::string DefaultWaitReason(int need, int ahead, const OpenGpus& gpus,
                              const WaitRules& rules) {
  const std::string ahead_of_it = AheadText(ahead, rules.queue);
  if (need > gpus.total) {
    return "it needs " + std::to_string(need) +
           " GPUs and the open servers have " + std::to_string(gpus.total) +
           " in all: it waits for servers to join (or cordoned ones to "
           "open)";
  }
  if (need > gpus.free) {
    return "it needs " + std::to_string(need) + " GPUs, " +
           std::to_string(gpus.free) +
           (gpus.free == 1 ? " is free" : " are free") + ahead_of_it;
  }
  if (rules.keeps_to_one_server && need <= gpus.largest_server &&
      need > gpus.most_free_on_one) {
    return std::to_string(gpus.free) + " GPUs are free, but no server has " +
           std::to_string(need) +
           " free (a job that fits on one server waits for one)" + ahead_of_it;
  }
  return ahead_of_it.empty() ? "placed at the next scheduling pass"
                             : ahead_of_it.substr(2);
}

std::shared_ptr<const DefaultQueueReasons> DefaultQueueReasons::Make(
    const ClusterState& state, const QueueReasons* previous, WaitRules rules) {
  auto r = std::make_shared<DefaultQueueReasons>();
  const auto* before = dynamic_cast<const DefaultQueueReasons*>(previous);
  int32_t k = 0;
  r->ahead_ = QueuedJobTable<int32_t>::Of(
      state, before == nullptr ? nullptr : before->ahead_,
      [&k](const Job&) { return k++; });
  r->gpus_ = OpenGpus::Of(state.cluster());
  r->rules_ = std::move(rules);
  return r;
}

std::string DefaultQueueReasons::Why(JobId job, int gpus) const {
  const int32_t* ahead = ahead_->Find(job);
  return DefaultWaitReason(gpus, ahead == nullptr ? -1 : *ahead, gpus_, rules_);
}

std::shared_ptr<const QueueReasons> Policy::ExplainQueue(
    const ClusterState& state, const QueueReasons* previous) const {
  return DefaultQueueReasons::Make(state, previous);
}

}  // namespace gandiva::core
