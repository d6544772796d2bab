// The Agent service's calls (AgentServer::Impl): job control (start,
// suspend, resume, kill, checkpoint), status, and the calls served by the
// agent's parts (checkpoint transfers, logs), each refused while the agent
// stops where it takes no new work. Every job action is idempotent per
// action_id (ActionCache). Job control and transfers are admitted only
// with this agent's control token, a checkpoint's reads also with a fetch
// ticket (ControlGate, control_token.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "runtime/agent/agent_impl.h"
#include "runtime/agent/agent_rpc.h"

namespace gandiva::runtime {

grpc::Status AgentServer::Impl::StartJob(grpc::ServerContext* ctx,
                                         const rpc::StartJobRequest* req,
                                         rpc::StartJobReply* reply) {
  if (auto s = gate->Admit(*ctx, "StartJob"); !s.ok()) return s;
  if (auto s = RefuseWhileStopping("StartJob"); !s.ok()) return s;
  return actions.Run<rpc::StartJobReply>(
      {"StartJob", req->job_id()}, req->action_id(), reply,
      [&](rpc::StartJobReply* out) {
        StartParams p;
        p.job_id = req->job_id();
        p.command = req->spec().command();
        p.owner = req->spec().owner();
        p.workdir = req->spec().workdir();
        for (const auto& [k, v] : req->spec().env()) p.env[k] = v;
        p.gpus.assign(req->gpus().begin(), req->gpus().end());
        p.resume_from = req->resume_from();
        p.restartable = req->spec().restartable();
        p.checkpoint_every_minibatches =
            req->spec().checkpoint_every_minibatches();
        p.checkpoint_every_us = req->spec().checkpoint_every_us();
        p.warm = req->warm();
        p.resume_local = req->resume_local();
        p.submitted_us = req->submitted_us();
        if (!req->has_gang()) p.spec = req->spec().SerializeAsString();
        int32_t master_port = 0;
        if (req->has_gang()) {
          auto env = GangEnv(*req, &master_port);
          if (!env.ok()) return ToGrpc(env.status());
          p.gang_env = std::move(*env);
          p.without_library = req->gang().node_rank() > 0;
        }
        auto r = supervisor->Start(p);
        if (!r.ok()) {
          Log("StartJob " + std::to_string(p.job_id) +
              " failed: " + r.status().ToString());
          return ToGrpc(r.status());
        }
        out->set_pid(r->pid);
        out->set_took_us(r->took_us);
        out->set_master_port(master_port);
        Log("started job " + std::to_string(p.job_id) + " (pid " +
            std::to_string(r->pid) + ")" +
            (req->has_gang()
                 ? " part " + std::to_string(req->gang().node_rank()) + " of " +
                       std::to_string(req->gang().nodes()) +
                       ", ranks meet at " + p.gang_env["GANDIVA_MASTER_ADDR"] +
                       ":" + std::to_string(master_port)
                 : std::string()) +
            (p.warm           ? " warm, waiting for its checkpoint"
             : p.resume_local ? " from its checkpoint here"
                              : ""));
        if (p.warm && req->await_ready_ms() > 0) {
          auto w = supervisor->AwaitWarm(
              p.job_id, std::chrono::milliseconds(req->await_ready_ms()));
          if (!w.ok()) {
            Log("StartJob " + std::to_string(p.job_id) +
                " failed: " + w.status().ToString());
            return ToGrpc(w.status());
          }
          out->set_ready(w->ready);
          out->set_ready_us(w->ready_us);
        }
        return grpc::Status::OK;
      });
}

core::StatusOr<std::map<std::string, std::string>> AgentServer::Impl::GangEnv(
    const rpc::StartJobRequest& req, int32_t* master_port) {
  const rpc::Gang& g = req.gang();
  const int local = req.gpus_size();
  if (g.nodes() < 2 || g.node_rank() < 0 || g.node_rank() >= g.nodes()) {
    return core::InvalidArgument(
        "gang: node_rank " + std::to_string(g.node_rank()) + " of " +
        std::to_string(g.nodes()) + " parts (a gang has 2 or more)");
  }
  if (local < 1 || g.rank_offset() < 0 ||
      g.rank_offset() + local > g.world_size()) {
    return core::InvalidArgument(
        "gang: ranks " + std::to_string(g.rank_offset()) + ".." +
        std::to_string(g.rank_offset() + local - 1) + " outside world size " +
        std::to_string(g.world_size()));
  }
  if ((g.node_rank() == 0) != (g.rank_offset() == 0)) {
    return core::InvalidArgument(
        "gang: the lead (node_rank 0), and it alone, holds rank 0");
  }
  if (g.master_addr().empty()) {
    return core::InvalidArgument("gang.master_addr: empty");
  }
  *master_port = g.master_port();
  if (*master_port <= 0) {
    if (g.node_rank() != 0) {
      return core::InvalidArgument(
          "gang.master_port: only the lead may leave it to the agent");
    }
    auto port = FreeTcpPort();
    if (!port.ok()) return port.status();
    *master_port = *port;
  }
  return std::map<std::string, std::string>{
      {"GANDIVA_NNODES", std::to_string(g.nodes())},
      {"GANDIVA_NODE_RANK", std::to_string(g.node_rank())},
      {"GANDIVA_WORLD_SIZE", std::to_string(g.world_size())},
      {"GANDIVA_LOCAL_WORLD_SIZE", std::to_string(local)},
      {"GANDIVA_RANK_OFFSET", std::to_string(g.rank_offset())},
      {"GANDIVA_MASTER_ADDR", g.master_addr()},
      {"GANDIVA_MASTER_PORT", std::to_string(*master_port)}};
}

core::StatusOr<int32_t> AgentServer::Impl::FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return core::IoError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  const bool ok =
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  close(fd);
  if (!ok) {
    return core::IoError(std::string("picking a free port: ") +
                         std::strerror(err));
  }
  return static_cast<int32_t>(ntohs(addr.sin_port));
}

grpc::Status AgentServer::Impl::SuspendJob(grpc::ServerContext* ctx,
                                           const rpc::JobRequest* req,
                                           rpc::SuspendReply* reply) {
  if (auto s = gate->Admit(*ctx, "SuspendJob"); !s.ok()) return s;
  if (auto s = RefuseWhileStopping("SuspendJob", req->job_id()); !s.ok()) {
    return s;
  }
  return actions.Run<rpc::SuspendReply>(
      {"SuspendJob", req->job_id()}, req->action_id(), reply,
      [&](rpc::SuspendReply* out) {
        auto r = supervisor->Suspend(req->job_id());
        if (!r.ok()) return ToGrpc(r.status());
        out->set_took_us(r->took_us);
        out->set_at_boundary(r->at_boundary);
        return grpc::Status::OK;
      });
}

grpc::Status AgentServer::Impl::ResumeJob(grpc::ServerContext* ctx,
                                          const rpc::JobRequest* req,
                                          rpc::ResumeReply* reply) {
  if (auto s = gate->Admit(*ctx, "ResumeJob"); !s.ok()) return s;
  if (auto s = RefuseWhileStopping("ResumeJob", req->job_id()); !s.ok()) {
    return s;
  }
  return actions.Run<rpc::ResumeReply>(
      {"ResumeJob", req->job_id()}, req->action_id(), reply,
      [&](rpc::ResumeReply* out) {
        auto r = supervisor->Resume(req->job_id());
        if (!r.ok()) return ToGrpc(r.status());
        out->set_took_us(r->took_us);
        return grpc::Status::OK;
      });
}

grpc::Status AgentServer::Impl::KillJob(grpc::ServerContext* ctx,
                                        const rpc::JobRequest* req,
                                        rpc::KillReply* reply) {
  if (auto s = gate->Admit(*ctx, "KillJob"); !s.ok()) return s;
  return actions.Run<rpc::KillReply>(
      {"KillJob", req->job_id()}, req->action_id(), reply,
      [&](rpc::KillReply*) {
        core::Status s = supervisor->Kill(req->job_id(), req->keep_periodic());
        const bool had = !req->keep_checkpoint() && !req->keep_periodic() &&
                         supervisor->DropCheckpoint(req->job_id());
        if (s.code() == core::StatusCode::kNotFound && had) {
          return grpc::Status::OK;  // only its checkpoint was left here
        }
        return ToGrpc(s);
      });
}

grpc::Status AgentServer::Impl::CheckpointJob(grpc::ServerContext* ctx,
                                              const rpc::CheckpointRequest* req,
                                              rpc::CheckpointReply* reply) {
  if (auto s = gate->Admit(*ctx, "CheckpointJob"); !s.ok()) return s;
  // Stopping, the agent saves its own jobs (CheckpointForStop); the
  // daemon saves a multi-server job's through its lead's part.
  if (auto s = RefuseWhileStopping("CheckpointJob", req->job_id()); !s.ok()) {
    return s;
  }
  return actions.Run<rpc::CheckpointReply>(
      {"CheckpointJob", req->job_id()}, req->action_id(), reply,
      [&](rpc::CheckpointReply* out) {
        auto r = supervisor->Checkpoint(req->job_id(), req->resize_to(),
                                        req->reply_when_saved());
        if (!r.ok()) {
          Log("CheckpointJob " + std::to_string(req->job_id()) +
              " failed: " + r.status().ToString());
          return ToGrpc(r.status());
        }
        out->set_took_us(r->took_us);
        out->set_save_us(r->save_us);
        out->set_bytes(r->bytes);
        out->set_files(r->files);
        out->set_method(r->method);
        out->set_minibatches(r->minibatches);
        out->set_exiting(r->exiting);
        Log("checkpointed job " + std::to_string(req->job_id()) + " (" +
            r->method + ", " + std::to_string(r->files) + " files, " +
            std::to_string(r->bytes) + " bytes, " + std::to_string(r->took_us) +
            " us)");
        return grpc::Status::OK;
      });
}

grpc::Status AgentServer::Impl::ReadCheckpoint(
    grpc::ServerContext* ctx, const rpc::ReadCheckpointRequest* req,
    grpc::ServerWriter<rpc::CheckpointChunk>* writer) {
  if (auto s = gate->AdmitFetch(*ctx, "ReadCheckpoint", req->job_id());
      !s.ok()) {
    return s;
  }
  return transfer->Read(ctx, req, writer);
}

grpc::Status AgentServer::Impl::OpenCheckpointTransfer(
    grpc::ServerContext* ctx, const rpc::OpenCheckpointTransferRequest* req,
    rpc::OpenCheckpointTransferReply* reply) {
  if (auto s = gate->AdmitFetch(*ctx, "OpenCheckpointTransfer", req->job_id());
      !s.ok()) {
    return s;
  }
  if (auto s = RefuseWhileStopping("OpenCheckpointTransfer"); !s.ok()) {
    return s;
  }
  return transfer->Offer(ctx, req, reply);
}

grpc::Status AgentServer::Impl::TailLog(
    grpc::ServerContext* ctx, const rpc::TailLogRequest* req,
    grpc::ServerWriter<rpc::LogChunk>* writer) {
  return logs->Tail(ctx, req, writer);
}

grpc::Status AgentServer::Impl::ReceiveCheckpoint(
    grpc::ServerContext* ctx, const rpc::ReceiveCheckpointRequest* req,
    rpc::ReceiveCheckpointReply* reply) {
  if (auto s = gate->Admit(*ctx, "ReceiveCheckpoint"); !s.ok()) return s;
  if (auto s = RefuseWhileStopping("ReceiveCheckpoint"); !s.ok()) return s;
  return actions.Run<rpc::ReceiveCheckpointReply>(
      {"ReceiveCheckpoint", req->job_id()}, req->action_id(), reply,
      [&](rpc::ReceiveCheckpointReply* out) {
        grpc::Status s = transfer->Receive(*req, out);
        if (!s.ok()) {
          Log("ReceiveCheckpoint " + std::to_string(req->job_id()) +
              " failed: " + s.error_message());
        }
        return s;
      });
}

grpc::Status AgentServer::Impl::Status(grpc::ServerContext* ctx,
                                       const rpc::AgentStatusRequest*,
                                       rpc::AgentStatusReply* reply) {
  reply->set_server_name(name);
  // Without the control token: which jobs run, not their specs (their
  // commands and environments are their owners').
  const bool whole = gate->Admits(*ctx);
  for (const JobView& v : supervisor->Jobs()) {
    rpc::AgentJob* j = reply->add_jobs();
    *j = ToAgentJob(v, *inventory);
    if (!whole) j->clear_spec();
  }
  *reply->mutable_capabilities() = ToCapabilities(supervisor->capabilities());
  return grpc::Status::OK;
}

grpc::Status AgentServer::Impl::RefuseWhileStopping(const char* call,
                                                    int64_t job) const {
  if (!shutting_down.load()) return grpc::Status::OK;
  if (job >= 0) {
    auto v = supervisor->Job(job);
    if (v.ok() && v->gang) return grpc::Status::OK;
  }
  return {grpc::StatusCode::UNAVAILABLE,
          std::string(call) + ": agent '" + name + "' is stopping"};
}

}  // namespace gandiva::runtime
