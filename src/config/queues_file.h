// Queues (teams) from a YAML file, as `gandiva-scheduler --queues FILE`,
// `gandiva up --queues FILE` and `gandiva sim --queues FILE` take them:
//
//   queues:
//     - name: research        # an organisation
//       quota: 8              # GPUs guaranteed while its jobs ask for them
//       weight: 2             # its part of what is lent; default its quota
//       limit: 12             # the most GPUs it holds at once; default none
//       members: [alice]      # who may submit here and below; default anyone
//       queues:               # its teams: a tree, as deep as wanted
//         - name: vision
//           quota: 6
//           max_priority: 10  # the highest priority a user may give a job
//         - name: speech
//           quota: 2
//           members: [bob]
//
// Jobs go to the queues without children (leaves). The quotas of a queue's
// children add up to at most its own. Names (queues and members) are 1 to
// 64 of A-Z a-z 0-9 . _ - (members also @), each queue named once in the
// whole tree. Errors name the file, the queue (by its place, "queue 1.2",
// and its name) and the field.
#pragma once

#include <string>
#include <vector>

#include "core/policies/queues.h"
#include "core/status.h"

namespace gandiva::config {

// Parses the queues from `text`; `source` names it in errors. Parents come
// before their children, in the file's order.
core::StatusOr<std::vector<core::QueueConfig>> ParseQueues(
    const std::string& text, const std::string& source);
// Reads and parses the file at `path`.
core::StatusOr<std::vector<core::QueueConfig>> LoadQueuesFile(
    const std::string& path);

}  // namespace gandiva::config
