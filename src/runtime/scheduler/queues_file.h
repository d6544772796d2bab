// The daemon's queues (teams) and their GPU quotas, from a YAML file
// (`gandiva-scheduler --queues FILE`):
//
//   queues:
//     - name: vision
//       quota: 8      # GPUs guaranteed; idle GPUs are lent beyond it
//     - name: speech
//       quota: 4
//
// A job names its queue with `queue:` in its spec; one without is in the
// shared queue (quota 0). Errors name the file, the queue and the field.
#pragma once

#include <map>
#include <string>

#include "core/status.h"

namespace gandiva::runtime {

// Parses the queues from `text`; `source` names it in errors.
core::StatusOr<std::map<std::string, int>> ParseQueues(
    const std::string& text, const std::string& source);
// Reads and parses the file at `path`.
core::StatusOr<std::map<std::string, int>> LoadQueuesFile(
    const std::string& path);

}  // namespace gandiva::runtime
