// One queue (team) as configured: what the queue-aware policies
// (QueueQuotas, core/policies/queues.h) and the daemon's admission read.
// Plain value.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace gandiva::core {

// One queue as configured.
struct QueueConfig {
  std::string name{};
  // The queue it is part of; "" at the top.
  std::string parent{};
  // GPUs guaranteed while its jobs ask for them. The quotas of a queue's
  // children add up to at most its own.
  int quota = 0;
  // Its part of the GPUs lent beyond the quotas, among its siblings still
  // short; below 0: its quota. Queues of weight 0 share what the weighted
  // ones leave, equally.
  double weight = -1;
  // The most GPUs its jobs (its children's, for a queue with children)
  // hold at once; below 0: no limit.
  int limit = -1;
  // Read by the daemon, not by the policies: the users who may submit to
  // it (and to the queues under it); empty: anyone, unless a queue above
  // names members.
  std::vector<std::string> members{};
  // Read by the daemon: the highest priority a user who is not an admin
  // may give a job of this queue (the lowest of those along its path).
  std::optional<int> max_priority{};

  double Weight() const { return weight < 0 ? quota : weight; }
  bool operator==(const QueueConfig&) const = default;
};

}  // namespace gandiva::core
