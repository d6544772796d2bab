// Calls to agents and what they cost, told in history lines
// (agent_calls.h).

#include "runtime/scheduler/agent_calls.h"

#include <cstdio>

namespace gandiva::runtime {

grpc::Status SuspendOrResume(rpc::Agent::StubInterface& stub,
                             grpc::ClientContext* ctx,
                             const rpc::JobRequest& req, bool suspend,
                             int64_t* took_us, bool* at_boundary) {
  if (suspend) {
    rpc::SuspendReply rep;
    grpc::Status s = stub.SuspendJob(ctx, req, &rep);
    *took_us = rep.took_us();
    if (at_boundary != nullptr) *at_boundary = rep.at_boundary();
    return s;
  }
  rpc::ResumeReply rep;
  grpc::Status s = stub.ResumeJob(ctx, req, &rep);
  *took_us = rep.took_us();
  return s;
}

std::string UnreachableLead(const std::vector<PartConn>& parts) {
  const std::string lead = HostOf(parts[0].address);
  if (!IsLoopback(lead)) return "";
  for (size_t i = 1; i < parts.size(); ++i) {
    if (!IsLoopback(HostOf(parts[i].address))) {
      return "the job spans servers and its rank 0 would be on " +
             parts[0].name +
             ", whose agent registered with the loopback "
             "address " +
             parts[0].address + ": the ranks on " + parts[i].name + " (" +
             parts[i].address +
             ") could not reach it; start that agent with --advertise-host";
    }
  }
  return "";
}

std::string Mb(int64_t bytes) {
  char b[32];
  if (bytes < 1'000'000) {
    std::snprintf(b, sizeof b, "%.1f kB", static_cast<double>(bytes) / 1e3);
  } else {
    std::snprintf(b, sizeof b, "%.1f MB", static_cast<double>(bytes) / 1e6);
  }
  return b;
}

}  // namespace gandiva::runtime
