// The gRPC Scheduler service's handlers (daemon_service.h).

#include "runtime/scheduler/daemon_service.h"

#include "runtime/scheduler/daemon_impl.h"

namespace gandiva::runtime {
namespace {

grpc::Status Unavailable() {
  return {grpc::StatusCode::UNAVAILABLE, "the scheduler is shutting down"};
}

}  // namespace

grpc::Status SchedulerService::RegisterAgent(
    grpc::ServerContext*, const rpc::RegisterAgentRequest* req,
    rpc::RegisterAgentReply* rep) {
  auto r = d_.Call<core::StatusOr<int32_t>>(
      [this, req] { return d_.RegisterAgent(*req); });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  rep->set_server_id(**r);
  rep->set_cluster_id(d_.cluster_id);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Report(grpc::ServerContext*,
                                      const rpc::AgentReport* req,
                                      rpc::AgentReportReply*) {
  auto r = d_.Call<grpc::Status>([this, req] { return d_.DoReport(*req); });
  return r ? *r : Unavailable();
}

grpc::Status SchedulerService::Leave(grpc::ServerContext*,
                                     const rpc::LeaveRequest* req,
                                     rpc::LeaveReply* rep) {
  auto r = d_.Call<core::StatusOr<rpc::LeaveReply>>(
      [this, req] { return d_.Leave(*req); });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  *rep = **r;
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Submit(grpc::ServerContext*,
                                      const rpc::SubmitRequest* req,
                                      rpc::SubmitReply* rep) {
  if (std::string err = CheckSpec(req->spec()); !err.empty()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, err};
  }
  auto r = d_.Call<core::StatusOr<std::vector<int64_t>>>([this, req] {
    const rpc::JobSpec* spec = &req->spec();
    return d_.Submit(std::span<const rpc::JobSpec* const>(&spec, 1));
  });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  rep->set_job_id((**r)[0]);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::SubmitJobs(grpc::ServerContext*,
                                          const rpc::SubmitJobsRequest* req,
                                          rpc::SubmitJobsReply* rep) {
  const int n = req->specs_size();
  if (n == 0) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "field 'specs': is empty"};
  }
  if (n > kMaxJobsPerSubmit) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "field 'specs': at most " + std::to_string(kMaxJobsPerSubmit) +
                " jobs in one request, got " + std::to_string(n)};
  }
  for (int i = 0; i < n; ++i) {
    const rpc::JobSpec& spec = req->specs(i);
    if (std::string err = CheckSpec(spec); !err.empty()) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "spec " + std::to_string(i + 1) + " of " + std::to_string(n) +
                  " ('" + spec.name() + "'): " + err +
                  "; no job was submitted"};
    }
  }
  auto r = d_.Call<core::StatusOr<std::vector<int64_t>>>([this, req] {
    return d_.Submit(std::span<const rpc::JobSpec* const>(
        req->specs().data(), static_cast<size_t>(req->specs_size())));
  });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  for (int64_t id : **r) rep->add_job_ids(id);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ActOnJob(int64_t id, bool kill, bool hold,
                                        const std::string& reason) {
  auto r = d_.Call<core::Status>([this, id, kill, hold, &reason] {
    return d_.ActOnJobs(std::span<const int64_t>(&id, 1), kill, hold,
                        reason)[0];
  });
  return r ? ToGrpc(*r) : Unavailable();
}

grpc::Status SchedulerService::Kill(grpc::ServerContext*,
                                    const rpc::KillRequest* req, rpc::Empty*) {
  return ActOnJob(req->job_id(), /*kill=*/true, false, req->reason());
}

grpc::Status SchedulerService::Suspend(grpc::ServerContext*,
                                       const rpc::JobIdRequest* req,
                                       rpc::Empty*) {
  return ActOnJob(req->job_id(), /*kill=*/false, /*hold=*/true, "");
}

grpc::Status SchedulerService::Resume(grpc::ServerContext*,
                                      const rpc::JobIdRequest* req,
                                      rpc::Empty*) {
  return ActOnJob(req->job_id(), /*kill=*/false, /*hold=*/false, "");
}

grpc::Status SchedulerService::ActOnJobs(const rpc::JobsRequest& req,
                                         rpc::JobsReply* rep, bool kill,
                                         bool hold) {
  if (req.job_ids_size() > kMaxJobsPerRequest) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "field 'job_ids': " + std::to_string(req.job_ids_size()) +
                " jobs, at most " + std::to_string(kMaxJobsPerRequest) +
                " a request"};
  }
  auto r = d_.Call<std::vector<core::Status>>([this, &req, kill, hold] {
    return d_.ActOnJobs(
        std::span<const int64_t>(req.job_ids().data(),
                                 static_cast<size_t>(req.job_ids_size())),
        kill, hold, req.reason());
  });
  if (!r) return Unavailable();
  for (int i = 0; i < req.job_ids_size(); ++i) {
    rpc::JobOutcome* o = rep->add_outcomes();
    o->set_job_id(req.job_ids(i));
    const grpc::Status g = ToGrpc((*r)[static_cast<size_t>(i)]);
    o->set_code(static_cast<int32_t>(g.error_code()));
    o->set_error(g.error_message());
  }
  return grpc::Status::OK;
}

grpc::Status SchedulerService::KillJobs(grpc::ServerContext*,
                                        const rpc::JobsRequest* req,
                                        rpc::JobsReply* rep) {
  return ActOnJobs(*req, rep, /*kill=*/true, false);
}

grpc::Status SchedulerService::SuspendJobs(grpc::ServerContext*,
                                           const rpc::JobsRequest* req,
                                           rpc::JobsReply* rep) {
  return ActOnJobs(*req, rep, /*kill=*/false, /*hold=*/true);
}

grpc::Status SchedulerService::ResumeJobs(grpc::ServerContext*,
                                          const rpc::JobsRequest* req,
                                          rpc::JobsReply* rep) {
  return ActOnJobs(*req, rep, /*kill=*/false, /*hold=*/false);
}

grpc::Status SchedulerService::SetPriority(grpc::ServerContext*,
                                           const rpc::SetPriorityRequest* req,
                                           rpc::SetPriorityReply* rep) {
  auto r = d_.Call<core::StatusOr<int32_t>>(
      [this, req] { return d_.SetPriority(req->job_id(), req->priority()); });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  rep->set_was(**r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Mechanism(
    std::function<core::Status()> request) {
  auto r = d_.Call<core::Status>(std::move(request));
  return r ? ToGrpc(*r) : Unavailable();
}

grpc::Status SchedulerService::Migrate(grpc::ServerContext*,
                                       const rpc::MigrateRequest* req,
                                       rpc::Empty*) {
  return Mechanism([this, req] {
    auto it = d_.agent_by_name.find(req->server());
    if (it == d_.agent_by_name.end()) {
      return core::NotFound("field 'server': no server named '" +
                            req->server() + "'");
    }
    core::MechanismRequest m;
    m.kind = core::MechanismRequest::Kind::kMigrate;
    m.job = JobId(static_cast<int32_t>(req->job_id()));
    m.server = ServerId(it->second);
    return d_.Mechanism(m, "migrate to " + req->server());
  });
}

grpc::Status SchedulerService::Drain(grpc::ServerContext*,
                                     const rpc::DrainRequest* req,
                                     rpc::DrainReply* rep) {
  auto r = d_.Call<core::StatusOr<rpc::DrainReply>>(
      [this, req] { return d_.Drain(*req); });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  *rep = std::move(**r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Pack(grpc::ServerContext*,
                                    const rpc::PackRequest* req, rpc::Empty*) {
  return Mechanism([this, req] {
    GANDIVA_RETURN_IF_ERROR(d_.CheckLiveJob(req->with_job_id()));
    core::MechanismRequest m;
    m.kind = core::MechanismRequest::Kind::kPack;
    m.job = JobId(static_cast<int32_t>(req->job_id()));
    m.with = JobId(static_cast<int32_t>(req->with_job_id()));
    return d_.Mechanism(m,
                        "pack with job " + std::to_string(req->with_job_id()));
  });
}

grpc::Status SchedulerService::Unpack(grpc::ServerContext*,
                                      const rpc::JobIdRequest* req,
                                      rpc::Empty*) {
  return Mechanism([this, req] {
    core::MechanismRequest m;
    m.kind = core::MechanismRequest::Kind::kUnpack;
    m.job = JobId(static_cast<int32_t>(req->job_id()));
    return d_.Mechanism(m, "unpack");
  });
}

grpc::Status SchedulerService::Resize(grpc::ServerContext*,
                                      const rpc::ResizeRequest* req,
                                      rpc::Empty*) {
  return Mechanism([this, req] {
    core::MechanismRequest m;
    m.kind = core::MechanismRequest::Kind::kResize;
    m.job = JobId(static_cast<int32_t>(req->job_id()));
    m.gpus = req->gpus();
    return d_.Mechanism(m,
                        "resize to " + std::to_string(req->gpus()) + " GPUs");
  });
}

grpc::Status SchedulerService::ListJobs(grpc::ServerContext*,
                                        const rpc::ListJobsRequest* req,
                                        rpc::ListJobsReply* rep) {
  return d_.ListJobs(req, rep);
}

grpc::Status SchedulerService::GetJob(grpc::ServerContext*,
                                      const rpc::JobIdRequest* req,
                                      rpc::JobInfo* rep) {
  return d_.GetJob(req, rep);
}

grpc::Status SchedulerService::ListServers(grpc::ServerContext*,
                                           const rpc::Empty*,
                                           rpc::ListServersReply* rep) {
  auto s = d_.Snap();
  for (const auto& server : s->servers) *rep->add_servers() = *server;
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ListQueues(grpc::ServerContext*,
                                          const rpc::Empty*,
                                          rpc::ListQueuesReply* rep) {
  d_.ListQueues(rep);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Ping(grpc::ServerContext*, const rpc::Empty*,
                                    rpc::Empty*) {
  return grpc::Status::OK;
}

}  // namespace gandiva::runtime
