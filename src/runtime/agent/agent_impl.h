// AgentServer::Impl: the Agent gRPC service and the agent's state, shared by
// agent_server.cc (start and shutdown) and agent_service.cc (the job
// control calls); not for use outside the agent. Its parts have their own
// state and contracts: JobLogs (job_logs.h), CheckpointTransfer
// (checkpoint_transfer.h), DaemonLink (daemon_link.h), and the Supervisor
// that runs the jobs.
//
// Thread-safety: the service's methods run on gRPC's threads, any number
// at once; what they share is the parts (thread-safe), the ActionCache
// (thread-safe) and shutting_down. The fields set by Start are not changed
// after it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/status.h"
#include "proto/gandiva.grpc.pb.h"
#include "runtime/agent/action_cache.h"
#include "runtime/agent/agent_server.h"
#include "runtime/agent/checkpoint_transfer.h"
#include "runtime/agent/daemon_link.h"
#include "runtime/agent/gpu_inventory.h"
#include "runtime/agent/job_logs.h"
#include "runtime/agent/supervisor.h"
#include "runtime/tls/tls.h"

namespace gandiva::runtime {

struct AgentServer::Impl final : public rpc::Agent::Service {
  // Set by AgentServer::Start, then only read.
  AgentOptions options;
  // Mutual TLS (--tls-*), if configured: the Agent service, the calls to
  // the daemon and to other agents.
  std::optional<TlsConfig> tls;
  std::string name;
  std::string address;
  int port = 0;
  std::unique_ptr<GpuInventory> inventory;
  std::unique_ptr<grpc::Server> server;

  ActionCache actions;
  // Set as Shutdown begins: new work is refused (RefuseWhileStopping), a
  // following TailLog ends, a bulk receive under way is aborted.
  std::atomic<bool> shutting_down{false};

  // Shutdown's progress, for Shutdown (once) and AgentServer::Wait.
  std::mutex life_mu;
  std::condition_variable life_cv;
  bool shut_down = false;      // guarded by life_mu: Shutdown began
  bool shutdown_done = false;  // guarded by life_mu: Shutdown finished

  // Capabilities, probed once in the background at start.
  mutable std::mutex caps_mu;
  mutable std::condition_variable caps_cv;
  bool caps_done = false;  // guarded by caps_mu
  std::thread caps_thread;

  // The parts, made by Start once the supervisor is. Declared before it:
  // its exit callback wakes the link.
  // Who may call the job-control and transfer calls (control_token.h).
  std::unique_ptr<ControlGate> gate;
  std::unique_ptr<JobLogs> logs;
  std::unique_ptr<CheckpointTransfer> transfer;
  std::unique_ptr<DaemonLink> link;
  // Declared last: destroyed first, while what its exit callback uses lives.
  std::unique_ptr<Supervisor> supervisor;

  // ----------------------------------------- lifecycle (agent_server.cc)

  // The agent's own messages: options.log, else stderr.
  void Log(const std::string& msg);
  // Waits (bounded) until the capability probe finished; false on timeout.
  bool WaitForCapabilities(std::chrono::milliseconds timeout) const;
  // Probes CRIU and MPS, hands them to the supervisor, and has the link
  // register again if it registered without them.
  void ProbeCapabilities();
  // AgentServer::Shutdown.
  void Shutdown();

  // ------------------------------------------ service (agent_service.cc)

  grpc::Status StartJob(grpc::ServerContext*, const rpc::StartJobRequest* req,
                        rpc::StartJobReply* reply) override;
  grpc::Status SuspendJob(grpc::ServerContext*, const rpc::JobRequest* req,
                          rpc::SuspendReply* reply) override;
  grpc::Status ResumeJob(grpc::ServerContext*, const rpc::JobRequest* req,
                         rpc::ResumeReply* reply) override;
  grpc::Status KillJob(grpc::ServerContext*, const rpc::JobRequest* req,
                       rpc::KillReply* reply) override;
  grpc::Status CheckpointJob(grpc::ServerContext*,
                             const rpc::CheckpointRequest* req,
                             rpc::CheckpointReply* reply) override;
  grpc::Status ReadCheckpoint(
      grpc::ServerContext* ctx, const rpc::ReadCheckpointRequest* req,
      grpc::ServerWriter<rpc::CheckpointChunk>* writer) override;
  grpc::Status OpenCheckpointTransfer(
      grpc::ServerContext* ctx, const rpc::OpenCheckpointTransferRequest* req,
      rpc::OpenCheckpointTransferReply* reply) override;
  grpc::Status ReceiveCheckpoint(grpc::ServerContext*,
                                 const rpc::ReceiveCheckpointRequest* req,
                                 rpc::ReceiveCheckpointReply* reply) override;
  grpc::Status Status(grpc::ServerContext*, const rpc::AgentStatusRequest*,
                      rpc::AgentStatusReply* reply) override;
  grpc::Status TailLog(grpc::ServerContext* ctx, const rpc::TailLogRequest* req,
                       grpc::ServerWriter<rpc::LogChunk>* writer) override;

  // While the agent stops it serves on, but only for the daemon to have
  // the jobs spanning servers with a part here save (`job`: a call about a
  // part of one is let through); it takes no new work.
  grpc::Status RefuseWhileStopping(const char* call, int64_t job = -1) const;
  // The launcher's variables for one part of a multi-server job; the lead
  // (node_rank 0) given no port gets a free one on this host.
  static core::StatusOr<std::map<std::string, std::string>> GangEnv(
      const rpc::StartJobRequest& req, int32_t* master_port);
  // A TCP port free on all interfaces now (the ranks bind it moments later).
  static core::StatusOr<int32_t> FreeTcpPort();
};

}  // namespace gandiva::runtime
