// Helpers for the daemon's calls to agents, for the loop and the
// dispatcher's threads alike: the calls' action ids, their outcomes, and
// how history lines tell what they cost. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/scheduler/agent_outcome.h"
#include "runtime/scheduler/daemon_types.h"

namespace gandiva::runtime {

// Action ids for the agent calls of one piece of dispatcher work, drawn
// on the loop (SchedulerServer::Impl::TakeIds): agents answer a repeated
// id with the first call's result.
struct Ids {
  std::vector<int64_t> ids;
  size_t next = 0;
  int64_t operator()() {
    // Sized for the most calls the work makes; past that, ids beyond the
    // last one drawn (still above every id of an earlier daemon).
    if (next < ids.size()) return ids[next++];
    return ids.back() + static_cast<int64_t>(++next - ids.size());
  }
};

// A StartJob answered that a process of the job already runs there.
inline bool AlreadyRunsThere(const grpc::Status& s) {
  return OutcomeOf(s) == AgentOutcome::kAlreadySo;
}

// Suspends (or resumes) the job's process at an agent: the agent's time
// in *took_us and, for a suspend, in *at_boundary whether the job stopped
// at a mini-batch boundary (not: SIGSTOP wherever it was).
grpc::Status SuspendOrResume(rpc::Agent::StubInterface& stub,
                             grpc::ClientContext* ctx,
                             const rpc::JobRequest& req, bool suspend,
                             int64_t* took_us, bool* at_boundary = nullptr);

// "CALL: message (code N)", for a history line.
inline std::string RpcError(const char* call, const grpc::Status& s) {
  return std::string(call) + ": " + s.error_message() + " (code " +
         std::to_string(static_cast<int>(s.error_code())) + ")";
}

// Why an agent cannot checkpoint a job (CheckpointJob's FAILED_PRECONDITION
// or UNIMPLEMENTED), in its own words, less a leading "job N cannot be
// migrated: " (or resized) that the core's refusal says itself: the reason
// the job is immovable.
inline std::string CannotCheckpointWhy(const grpc::Status& s) {
  const std::string& m = s.error_message();
  if (m.rfind("job ", 0) == 0) {
    const size_t digits = m.find_first_not_of("0123456789", 4);
    const std::string cannot = " cannot be ";
    if (digits != std::string::npos && digits > 4 &&
        m.compare(digits, cannot.size(), cannot) == 0) {
      const size_t colon = m.find(": ", digits);
      if (colon != std::string::npos) return m.substr(colon + 2);
    }
  }
  return m;
}

// "gpus [0,1] on a + [0] on b": where a job's parts are.
inline std::string Placement(const std::vector<PartConn>& parts) {
  std::string s = "gpus ";
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) s += " + ";
    s += nlohmann::json(parts[i].part.local).dump() + " on " + parts[i].name;
  }
  return s;
}

// The host part of an agent's address ("host:port", "[v6]:port").
inline std::string HostOf(const std::string& address) {
  return address.substr(0, address.rfind(':'));
}
inline bool IsLoopback(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "localhost" || host == "[::1]" ||
         host == "::1";
}
// Why the other parts could not reach the ranks' meeting point at the
// lead ("" if they can, as far as the addresses say): a lead agent
// registered with a loopback address while a part's agent is elsewhere.
std::string UnreachableLead(const std::vector<PartConn>& parts);

// Durations, sizes and rates as history lines give them.
inline std::string Ms(int64_t us) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f ms", static_cast<double>(us) / 1e3);
  return b;
}
std::string Mb(int64_t bytes);
// " at 1.23 GB/s"; "" when `us` is not positive.
inline std::string Rate(int64_t bytes, int64_t us) {
  if (us <= 0) return "";
  char b[48];
  std::snprintf(b, sizeof b, " at %.2f GB/s",
                static_cast<double>(bytes) / static_cast<double>(us) / 1e3);
  return b;
}
inline std::string Seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g s", s);
  return b;
}

}  // namespace gandiva::runtime
