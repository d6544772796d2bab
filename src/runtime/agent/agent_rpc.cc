#include "runtime/agent/agent_rpc.h"

namespace gandiva::runtime {

grpc::StatusCode ToGrpcCode(core::StatusCode code) {
  switch (code) {
    case core::StatusCode::kOk:
      return grpc::StatusCode::OK;
    case core::StatusCode::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case core::StatusCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case core::StatusCode::kFailedPrecondition:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case core::StatusCode::kAlreadyExists:
      return grpc::StatusCode::ALREADY_EXISTS;
    case core::StatusCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case core::StatusCode::kUnauthenticated:
      return grpc::StatusCode::UNAUTHENTICATED;
    case core::StatusCode::kPermissionDenied:
      return grpc::StatusCode::PERMISSION_DENIED;
    case core::StatusCode::kInternal:
    case core::StatusCode::kIo:
      return grpc::StatusCode::INTERNAL;
  }
  return grpc::StatusCode::UNKNOWN;
}

grpc::Status ToGrpc(const core::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(ToGrpcCode(s.code()), s.message());
}

rpc::JobState ToRpcState(RunState s) {
  return s == RunState::kSuspended ? rpc::SUSPENDED : rpc::RUNNING;
}

rpc::Progress ToProgress(const JobView& v, const GpuInventory& inventory) {
  rpc::Progress p;
  p.set_minibatches(static_cast<int64_t>(v.minibatches));
  p.set_minibatch_rate(v.minibatch_rate);
  p.set_uses_library(v.uses_library);
  p.set_sharing(v.sharing);
  p.set_world_size(v.world_size);
  SetMetric(v.metric, &p);
  if (!inventory.is_virtual() && v.state == RunState::kRunning) {
    p.set_gpu_utilization(inventory.Utilization(v.gpus));
    p.set_gpu_memory_bytes(
        inventory.ProcessMemory(v.gpus, ProcessGroupMembers(v.pid)));
  }
  return p;
}

rpc::AgentJob ToAgentJob(const JobView& v, const GpuInventory& inventory) {
  rpc::AgentJob j;
  j.set_job_id(v.job_id);
  j.set_pid(v.pid);
  j.set_state(ToRpcState(v.state));
  for (int g : v.gpus) j.add_gpus(g);
  *j.mutable_progress() = ToProgress(v, inventory);
  j.set_has_checkpoint(v.has_checkpoint);
  j.set_submitted_us(v.submitted_us);
  if (!v.spec.empty() && !j.mutable_spec()->ParseFromString(v.spec)) {
    j.clear_spec();
  }
  return j;
}

rpc::AgentCapabilities ToCapabilities(const Capabilities& c) {
  // Within what the daemon takes (config::kMaxDetailBytes), cut at a
  // character's start: a tool's output can be long.
  auto clip = [](std::string s) {
    constexpr size_t kMax = 1024;
    if (s.size() <= kMax) return s;
    size_t n = kMax - 3;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
    s.resize(n);
    return s + "...";
  };
  rpc::AgentCapabilities out;
  out.set_criu(c.criu);
  out.set_criu_detail(clip(c.criu_detail));
  out.set_mps(c.mps);
  out.set_mps_detail(clip(c.mps_detail));
  return out;
}

}  // namespace gandiva::runtime
