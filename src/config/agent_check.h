// The checks of what an agent sends the daemon (RegisterAgent, Report,
// Leave), run by the daemon on every such request before it acts on any
// of it, and by `gandiva-agent` on its own --name. Only an agent's
// credential makes these calls (access.h), so a refusal means a faulty or
// hostile agent: it is refused whole, INVALID_ARGUMENT naming the field,
// and nothing of it is applied.
//
// A registration is refused when:
//   name                 is not 1-253 of [A-Za-z0-9._-] (a hostname's)
//   address              is empty, over 1024 bytes, or holds a space or a
//                        control character
//   gpus                 are more than 4096; a GPU's `local` is outside
//                        0..count-1 or repeated; its uuid or name is over
//                        256 bytes or holds a control character; its
//                        memory is below 0
//   sockets,             are below 0 or above the GPU count (0: one)
//   switches_per_socket
//   incarnation,         are over 256 bytes or hold a control character
//   cluster_id
//   capabilities         a detail is over 4096 bytes
//   jobs                 are more than 100,000; a job's id is not 1 to
//                        2^31-1 or repeated; its state is not RUNNING or
//                        SUSPENDED; a GPU index is outside the server's or
//                        repeated; its pid or submitted_us is below 0; its
//                        progress's sharing is refused (below)
//   checkpoints          are more than 100,000; an id is not 1 to 2^31-1
//                        or repeated; checkpoint_clusters,
//                        checkpoint_submitted_us or checkpoint_specs is
//                        longer than checkpoints; a cluster is refused as
//                        cluster_id is; a submitted_us is below 0
// A report is refused when its name is refused (above), an exit's or a
// profile's job id is not 1 to 2^31-1, or a progress's sharing (which the
// agent writes) is over 64 bytes or holds a control character. The
// numbers a job's own process writes on its progress page (mini-batches,
// rate, utilization, metric) are not refused: the daemon takes one that
// is no number, or below 0, as unknown, so that no job can make its
// agent's reports refused. Pure: thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "proto/gandiva.pb.h"

namespace gandiva::config {

inline constexpr size_t kMaxServerNameBytes = 253;
inline constexpr size_t kMaxAddressBytes = 1024;
inline constexpr int kMaxGpusPerServer = 4096;
inline constexpr int kMaxListedJobs = 100'000;
inline constexpr size_t kMaxDetailBytes = 4096;

// A server's (an agent's) name; "" when valid, else why not.
std::string CheckServerName(std::string_view name);

// "" when the request passes, else "field 'F': why" (F a path such as
// "jobs[3].gpus[0]").
std::string CheckAgentRegistration(const rpc::RegisterAgentRequest& r);
std::string CheckAgentReport(const rpc::AgentReport& r);
std::string CheckAgentLeave(const rpc::LeaveRequest& r);

}  // namespace gandiva::config
