// Conversions between the agent's own types (core::Status, the
// supervisor's JobView, Capabilities) and those of proto/gandiva.proto, for
// the Agent service and the daemon link. Part of the agent's
// implementation; not for use outside src/runtime/agent.
//
// Thread-safety: all functions are thread-safe (GpuInventory's sampling
// calls are).
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>

#include "client/page_io.h"
#include "core/status.h"
#include "proto/gandiva.grpc.pb.h"
#include "runtime/agent/capabilities.h"
#include "runtime/agent/gpu_inventory.h"
#include "runtime/agent/supervisor.h"

namespace gandiva::runtime {

// gRPC message size limit on the Agent service and agent-to-agent channels.
inline constexpr int kMaxMessageBytes = 64 << 20;

grpc::StatusCode ToGrpcCode(core::StatusCode code);
grpc::Status ToGrpc(const core::Status& s);

// A job's metric into an rpc::Progress or an rpc::JobExit (the same
// fields); nothing when it reported none.
template <typename Message>
void SetMetric(const client::Metric& m, Message* out) {
  if (m.reports == 0) return;
  out->set_metric(m.value);
  out->set_metric_minibatches(static_cast<int64_t>(m.minibatches));
  out->set_metric_reports(static_cast<int64_t>(m.reports));
}

// A process's state as the daemon is told it (one that exited and is not
// reaped yet: RUNNING).
rpc::JobState ToRpcState(RunState s);
// The job's progress; with real GPUs and the job running, their
// utilisation and the memory its processes hold on them.
rpc::Progress ToProgress(const JobView& v, const GpuInventory& inventory);
rpc::AgentJob ToAgentJob(const JobView& v, const GpuInventory& inventory);
rpc::AgentCapabilities ToCapabilities(const Capabilities& c);

}  // namespace gandiva::runtime
