// The gRPC Scheduler service's handlers (daemon_service.h).

#include "runtime/scheduler/daemon_service.h"

#include "config/agent_check.h"
#include "config/job_spec_check.h"
#include "runtime/scheduler/access.h"
#include "runtime/scheduler/daemon_impl.h"
#include "runtime/scheduler/identify.h"

namespace gandiva::runtime {
namespace {

// How long a log ticket lets a read begin: a `gandiva logs` asks for one
// just before it reads, and agents' clocks may be a little off the daemon's.
constexpr int64_t kLogTicketUs = 5 * 60 * int64_t{1'000'000};

grpc::Status Unavailable() {
  return {grpc::StatusCode::UNAVAILABLE, "the scheduler is shutting down"};
}

// " (alice)" naming who asked, or nothing on an open daemon.
std::string By(const Caller& c) {
  return c.open() ? std::string() : " (" + c.user + ")";
}

// The job as `c` may read it (access.h, rule spec).
void Withhold(const Caller& c, rpc::JobInfo* info) {
  if (MayReadSpec(c, info->spec().owner())) return;
  info->mutable_spec()->clear_command();
  info->mutable_spec()->clear_env();
  info->set_withheld(true);
}

// `spec` as submitted by `c` to a daemon of `queues`: with users, its
// owner is `c` (the spec's owner is ignored); its queue is the one it names
// or its owner's own (access.h, rule queue), and its priority within the
// queue's bounds.
core::Status Admit(const Caller& c,
                   const std::vector<core::QueueConfig>& queues,
                   rpc::JobSpec& spec) {
  if (!c.open()) spec.set_owner(c.user);
  auto queue = QueueOfSubmission(c, spec.owner(), spec.queue(), queues);
  if (!queue.ok()) return queue.status();
  spec.set_queue(*queue);
  return MayUsePriority(c, "submit", spec.queue(), spec.priority(), queues);
}

}  // namespace

core::StatusOr<Caller> SchedulerService::Who(const grpc::ServerContext& ctx,
                                             Rule rule,
                                             std::string_view action) const {
  auto c = Identify(d_.users, ctx);
  if (!c.ok()) return c;
  GANDIVA_RETURN_IF_ERROR(rule(*c, action));
  return c;
}

grpc::Status SchedulerService::RegisterAgent(
    grpc::ServerContext* ctx, const rpc::RegisterAgentRequest* req,
    rpc::RegisterAgentReply* rep) {
  auto who = Who(*ctx, MayActAsAgent, "register an agent");
  if (!who.ok()) return ToGrpc(who.status());
  if (std::string err = config::CheckAgentRegistration(*req); !err.empty()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, err};
  }
  if (core::Status s = MayUseAgentName(
          *who, "register as agent '" + req->name() + "'", req->name());
      !s.ok()) {
    return ToGrpc(s);
  }
  auto r = d_.Call<core::StatusOr<int32_t>>(
      [this, req] { return d_.RegisterAgent(*req); });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  rep->set_server_id(**r);
  rep->set_cluster_id(d_.cluster_id);
  rep->set_placement_lease_ms(PlacementLeaseMs(d_.opts));
  rep->set_control_token(AgentControlToken(d_.control_token, req->name()));
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Report(grpc::ServerContext* ctx,
                                      const rpc::AgentReport* req,
                                      rpc::AgentReportReply*) {
  auto who = Who(*ctx, MayActAsAgent, "report as an agent");
  if (!who.ok()) return ToGrpc(who.status());
  if (std::string err = config::CheckAgentReport(*req); !err.empty()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, err};
  }
  if (core::Status s = MayUseAgentName(
          *who, "report as agent '" + req->name() + "'", req->name());
      !s.ok()) {
    return ToGrpc(s);
  }
  auto r = d_.Call<grpc::Status>([this, req] { return d_.DoReport(*req); });
  return r ? *r : Unavailable();
}

grpc::Status SchedulerService::Leave(grpc::ServerContext* ctx,
                                     const rpc::LeaveRequest* req,
                                     rpc::LeaveReply* rep) {
  auto who = Who(*ctx, MayActAsAgent, "leave as an agent");
  if (!who.ok()) return ToGrpc(who.status());
  if (std::string err = config::CheckAgentLeave(*req); !err.empty()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, err};
  }
  if (core::Status s = MayUseAgentName(
          *who, "leave as agent '" + req->name() + "'", req->name());
      !s.ok()) {
    return ToGrpc(s);
  }
  auto r = d_.Call<core::StatusOr<rpc::LeaveReply>>(
      [this, req] { return d_.Leave(*req); });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  *rep = **r;
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Submit(grpc::ServerContext* ctx,
                                      const rpc::SubmitRequest* req,
                                      rpc::SubmitReply* rep) {
  auto who = Who(*ctx, MayActAsUser, "submit");
  if (!who.ok()) return ToGrpc(who.status());
  if (std::string err = config::CheckJobSpec(req->spec()); !err.empty()) {
    return {grpc::StatusCode::INVALID_ARGUMENT, err};
  }
  // d_.queues is set at the start, before any handler.
  rpc::JobSpec owned = req->spec();
  if (core::Status s = Admit(*who, *d_.Queues(), owned); !s.ok()) {
    return ToGrpc(s);
  }
  if (!owned.has_retries()) owned.set_retries(d_.opts.default_retries);
  const rpc::JobSpec* spec = &owned;
  auto r = d_.Call<core::StatusOr<std::vector<int64_t>>>([this, &spec] {
    return d_.Submit(std::span<const rpc::JobSpec* const>(&spec, 1));
  });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  rep->set_job_id((**r)[0]);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::SubmitJobs(grpc::ServerContext* ctx,
                                          const rpc::SubmitJobsRequest* req,
                                          rpc::SubmitJobsReply* rep) {
  auto who = Who(*ctx, MayActAsUser, "submit");
  if (!who.ok()) return ToGrpc(who.status());
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
    if (std::string err = config::CheckJobSpec(spec); !err.empty()) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "spec " + std::to_string(i + 1) + " of " + std::to_string(n) +
                  " (" + config::Shown(spec.name()) + "): " + err +
                  "; no job was submitted"};
    }
  }
  std::vector<rpc::JobSpec> owned(req->specs().begin(), req->specs().end());
  std::vector<const rpc::JobSpec*> specs(owned.size());
  for (size_t i = 0; i < owned.size(); ++i) {
    if (core::Status s = Admit(*who, *d_.Queues(), owned[i]); !s.ok()) {
      return ToGrpc(core::Status(s.code(), "spec " + std::to_string(i + 1) +
                                               " of " + std::to_string(n) +
                                               ": " + s.message() +
                                               "; no job was submitted"));
    }
    if (!owned[i].has_retries()) {
      owned[i].set_retries(d_.opts.default_retries);
    }
    specs[i] = &owned[i];
  }
  auto r = d_.Call<core::StatusOr<std::vector<int64_t>>>([this, &specs] {
    return d_.Submit(std::span<const rpc::JobSpec* const>(specs));
  });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  for (int64_t id : **r) rep->add_job_ids(id);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ActOnJob(const grpc::ServerContext& ctx,
                                        int64_t id, bool kill, bool hold,
                                        const std::string& reason) {
  auto who = Who(ctx, MayActAsUser,
                 kill   ? "kill"
                 : hold ? "suspend"
                        : "resume");
  if (!who.ok()) return ToGrpc(who.status());
  auto r = d_.Call<core::Status>([this, id, kill, hold, &reason, &who] {
    return d_.ActOnJobs(std::span<const int64_t>(&id, 1), kill, hold, reason,
                        *who)[0];
  });
  return r ? ToGrpc(*r) : Unavailable();
}

grpc::Status SchedulerService::Kill(grpc::ServerContext* ctx,
                                    const rpc::KillRequest* req, rpc::Empty*) {
  return ActOnJob(*ctx, req->job_id(), /*kill=*/true, false, req->reason());
}

grpc::Status SchedulerService::Suspend(grpc::ServerContext* ctx,
                                       const rpc::JobIdRequest* req,
                                       rpc::Empty*) {
  return ActOnJob(*ctx, req->job_id(), /*kill=*/false, /*hold=*/true, "");
}

grpc::Status SchedulerService::Resume(grpc::ServerContext* ctx,
                                      const rpc::JobIdRequest* req,
                                      rpc::Empty*) {
  return ActOnJob(*ctx, req->job_id(), /*kill=*/false, /*hold=*/false, "");
}

grpc::Status SchedulerService::ActOnJobs(const grpc::ServerContext& ctx,
                                         const rpc::JobsRequest& req,
                                         rpc::JobsReply* rep, bool kill,
                                         bool hold) {
  auto who = Who(ctx, MayActAsUser,
                 kill   ? "kill"
                 : hold ? "suspend"
                        : "resume");
  if (!who.ok()) return ToGrpc(who.status());
  if (req.job_ids_size() > kMaxJobsPerRequest) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "field 'job_ids': " + std::to_string(req.job_ids_size()) +
                " jobs, at most " + std::to_string(kMaxJobsPerRequest) +
                " a request"};
  }
  // Each job's outcome and note.
  using Outcomes =
      std::pair<std::vector<core::Status>, std::vector<std::string>>;
  auto r = d_.Call<Outcomes>([this, &req, kill, hold, &who] {
    Outcomes out;
    out.first = d_.ActOnJobs(
        std::span<const int64_t>(req.job_ids().data(),
                                 static_cast<size_t>(req.job_ids_size())),
        kill, hold, req.reason(), *who, &out.second);
    return out;
  });
  if (!r) return Unavailable();
  const auto& [statuses, notes] = *r;
  for (int i = 0; i < req.job_ids_size(); ++i) {
    const auto at = static_cast<size_t>(i);
    rpc::JobOutcome* o = rep->add_outcomes();
    o->set_job_id(req.job_ids(i));
    const grpc::Status g = ToGrpc(statuses[at]);
    o->set_code(static_cast<int32_t>(g.error_code()));
    o->set_error(g.error_message());
    if (at < notes.size()) o->set_note(notes[at]);
  }
  return grpc::Status::OK;
}

grpc::Status SchedulerService::KillJobs(grpc::ServerContext* ctx,
                                        const rpc::JobsRequest* req,
                                        rpc::JobsReply* rep) {
  return ActOnJobs(*ctx, *req, rep, /*kill=*/true, false);
}

grpc::Status SchedulerService::SuspendJobs(grpc::ServerContext* ctx,
                                           const rpc::JobsRequest* req,
                                           rpc::JobsReply* rep) {
  return ActOnJobs(*ctx, *req, rep, /*kill=*/false, /*hold=*/true);
}

grpc::Status SchedulerService::ResumeJobs(grpc::ServerContext* ctx,
                                          const rpc::JobsRequest* req,
                                          rpc::JobsReply* rep) {
  return ActOnJobs(*ctx, *req, rep, /*kill=*/false, /*hold=*/false);
}

grpc::Status SchedulerService::SetPriority(grpc::ServerContext* ctx,
                                           const rpc::SetPriorityRequest* req,
                                           rpc::SetPriorityReply* rep) {
  auto who = Who(*ctx, MayActAsUser, "reprioritise");
  if (!who.ok()) return ToGrpc(who.status());
  auto r = d_.Call<core::StatusOr<int32_t>>([this, req, &who] {
    return d_.SetPriority(req->job_id(), req->priority(), *who);
  });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  rep->set_was(**r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Mechanism(
    const grpc::ServerContext& ctx, const std::string& action,
    std::function<core::Status(const Caller&)> request) {
  auto who = Who(ctx, MayOperate, action);
  if (!who.ok()) return ToGrpc(who.status());
  auto r = d_.Call<core::Status>([&request, &who] { return request(*who); });
  return r ? ToGrpc(*r) : Unavailable();
}

grpc::Status SchedulerService::Migrate(grpc::ServerContext* ctx,
                                       const rpc::MigrateRequest* req,
                                       rpc::Empty*) {
  const std::string action = "migrate job " + std::to_string(req->job_id());
  return Mechanism(*ctx, action, [this, req](const Caller& who) {
    // Before the id is narrowed to a JobId: 2^32 + 1 is no job 1.
    GANDIVA_RETURN_IF_ERROR(d_.CheckLiveJob(req->job_id()));
    auto it = d_.agent_by_name.find(req->server());
    if (it == d_.agent_by_name.end()) {
      return core::NotFound("field 'server': no server named " +
                            config::Shown(req->server()));
    }
    core::MechanismRequest m;
    m.kind = core::MechanismRequest::Kind::kMigrate;
    m.job = JobId(static_cast<int32_t>(req->job_id()));
    m.server = ServerId(it->second);
    return d_.Mechanism(m, "migrate to " + req->server() + By(who));
  });
}

grpc::Status SchedulerService::Drain(grpc::ServerContext* ctx,
                                     const rpc::DrainRequest* req,
                                     rpc::DrainReply* rep) {
  auto who = Who(*ctx, MayOperate,
                 (req->undo()          ? "open server "
                  : req->cordon_only() ? "cordon server "
                                       : "drain server ") +
                     req->server());
  if (!who.ok()) return ToGrpc(who.status());
  auto r = d_.Call<core::StatusOr<rpc::DrainReply>>(
      [this, req, &who] { return d_.Drain(*req, *who); });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  *rep = std::move(**r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Pack(grpc::ServerContext* ctx,
                                    const rpc::PackRequest* req, rpc::Empty*) {
  const std::string action = "pack job " + std::to_string(req->job_id());
  return Mechanism(*ctx, action, [this, req](const Caller& who) {
    GANDIVA_RETURN_IF_ERROR(d_.CheckLiveJob(req->job_id()));
    GANDIVA_RETURN_IF_ERROR(d_.CheckLiveJob(req->with_job_id()));
    core::MechanismRequest m;
    m.kind = core::MechanismRequest::Kind::kPack;
    m.job = JobId(static_cast<int32_t>(req->job_id()));
    m.with = JobId(static_cast<int32_t>(req->with_job_id()));
    return d_.Mechanism(
        m, "pack with job " + std::to_string(req->with_job_id()) + By(who));
  });
}

grpc::Status SchedulerService::Unpack(grpc::ServerContext* ctx,
                                      const rpc::JobIdRequest* req,
                                      rpc::Empty*) {
  const std::string action = "unpack job " + std::to_string(req->job_id());
  return Mechanism(*ctx, action, [this, req](const Caller& who) {
    GANDIVA_RETURN_IF_ERROR(d_.CheckLiveJob(req->job_id()));
    core::MechanismRequest m;
    m.kind = core::MechanismRequest::Kind::kUnpack;
    m.job = JobId(static_cast<int32_t>(req->job_id()));
    return d_.Mechanism(m, "unpack" + By(who));
  });
}

grpc::Status SchedulerService::Resize(grpc::ServerContext* ctx,
                                      const rpc::ResizeRequest* req,
                                      rpc::Empty*) {
  const std::string action = "resize job " + std::to_string(req->job_id());
  return Mechanism(*ctx, action, [this, req](const Caller& who) {
    GANDIVA_RETURN_IF_ERROR(d_.CheckLiveJob(req->job_id()));
    core::MechanismRequest m;
    m.kind = core::MechanismRequest::Kind::kResize;
    m.job = JobId(static_cast<int32_t>(req->job_id()));
    m.gpus = req->gpus();
    return d_.Mechanism(
        m, "resize to " + std::to_string(req->gpus()) + " GPUs" + By(who));
  });
}

grpc::Status SchedulerService::ListJobs(grpc::ServerContext* ctx,
                                        const rpc::ListJobsRequest* req,
                                        rpc::ListJobsReply* rep) {
  auto who = Who(*ctx, MayActAsUser, "list jobs");
  if (!who.ok()) return ToGrpc(who.status());
  grpc::Status s = d_.ListJobs(req, rep);
  for (rpc::JobInfo& info : *rep->mutable_jobs()) Withhold(*who, &info);
  return s;
}

grpc::Status SchedulerService::GetJob(grpc::ServerContext* ctx,
                                      const rpc::JobIdRequest* req,
                                      rpc::JobInfo* rep) {
  auto who = Who(*ctx, MayActAsUser, "read a job");
  if (!who.ok()) return ToGrpc(who.status());
  grpc::Status s = d_.GetJob(req, rep);
  Withhold(*who, rep);
  return s;
}

grpc::Status SchedulerService::LogTicket(grpc::ServerContext* ctx,
                                         const rpc::LogTicketRequest* req,
                                         rpc::LogTicketReply* rep) {
  auto who = Who(*ctx, MayActAsUser, "read a job's log");
  if (!who.ok()) return ToGrpc(who.status());
  if (!req->server().empty()) {
    if (std::string err = config::CheckServerName(req->server());
        !err.empty()) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "field 'server': " + err};
    }
  }
  rpc::JobInfo job;
  rpc::JobIdRequest for_job;
  for_job.set_job_id(req->job_id());
  if (grpc::Status s = d_.GetJob(&for_job, &job); !s.ok()) return s;
  if (core::Status s = MayActOnJob(*who, "read the log of", req->job_id(),
                                   job.spec().owner());
      !s.ok()) {
    return ToGrpc(s);
  }
  const std::string& server =
      req->server().empty() ? job.server() : req->server();
  if (server.empty()) {
    return {grpc::StatusCode::FAILED_PRECONDITION,
            "job " + std::to_string(req->job_id()) +
                " runs on no server: name the server whose agent holds its "
                "log (server)"};
  }
  const int64_t expires_us = d_.Env().WallMicros() + kLogTicketUs;
  rep->set_ticket(MakeLogTicket(AgentControlToken(d_.control_token, server),
                                req->job_id(), expires_us));
  rep->set_expires_us(expires_us);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ListServers(grpc::ServerContext* ctx,
                                           const rpc::Empty*,
                                           rpc::ListServersReply* rep) {
  auto who = Who(*ctx, MayActAsUser, "list servers");
  if (!who.ok()) return ToGrpc(who.status());
  auto s = d_.Snap();
  for (const auto& server : s->servers) *rep->add_servers() = *server;
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ListQueues(grpc::ServerContext* ctx,
                                          const rpc::Empty*,
                                          rpc::ListQueuesReply* rep) {
  auto who = Who(*ctx, MayActAsUser, "list queues");
  if (!who.ok()) return ToGrpc(who.status());
  d_.ListQueues(rep);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ApplyQueues(grpc::ServerContext* ctx,
                                           const rpc::ApplyQueuesRequest* req,
                                           rpc::ApplyQueuesReply* rep) {
  auto who = Who(*ctx, MayOperate, "change the queues");
  if (!who.ok()) return ToGrpc(who.status());
  if (req->yaml().size() > kMaxQueuesFileBytes) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "field 'yaml': " + std::to_string(req->yaml().size()) +
                " bytes, more than a queues file may have (" +
                std::to_string(kMaxQueuesFileBytes) + ")"};
  }
  if (req->source().size() > kMaxQueuesSourceBytes) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "field 'source': " + std::to_string(req->source().size()) +
                " bytes, more than a file's name may have (" +
                std::to_string(kMaxQueuesSourceBytes) + ")"};
  }
  auto r = d_.Call<core::StatusOr<rpc::ApplyQueuesReply>>(
      [this, req, by = *who] { return d_.ApplyQueues(*req, by); });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  *rep = std::move(**r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::GetUsage(grpc::ServerContext* ctx,
                                        const rpc::UsageRequest* req,
                                        rpc::UsageReply* rep) {
  auto who = Who(*ctx, MayActAsUser, "read usage");
  if (!who.ok()) return ToGrpc(who.status());
  const double last_s = req->last_s();
  if (!(last_s >= 0) || last_s > 1e10) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "field 'last_s': must be a number of seconds from 0 (24 hours) "
            "up, not " +
                std::to_string(last_s)};
  }
  auto r =
      d_.Call<rpc::UsageReply>([this, last_s] { return d_.Usage(last_s); });
  if (!r) return Unavailable();
  *rep = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::AddUser(grpc::ServerContext* ctx,
                                       const rpc::AddUserRequest* req,
                                       rpc::AddUserReply* rep) {
  auto who = Who(*ctx, MayOperate, "add user " + req->name());
  if (!who.ok()) return ToGrpc(who.status());
  if (who->open()) {
    return {grpc::StatusCode::FAILED_PRECONDITION,
            "this daemon has no users (it is open: every caller acts as an "
            "admin); start it with --credentials-dir to have users"};
  }
  const std::string role_name = req->role().empty() ? "user" : req->role();
  const std::optional<Role> role = ParseRole(role_name);
  if (!role) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "field 'role': no role '" + role_name +
                "' (roles: user, admin, agent)"};
  }
  auto r = d_.Call<core::StatusOr<std::string>>([this, req, role] {
    return runtime::AddUser(d_.users, *d_.store, req->name(), *role, d_.Now());
  });
  if (!r) return Unavailable();
  if (!r->ok()) return ToGrpc(r->status());
  rep->set_token(**r);
  return grpc::Status::OK;
}

grpc::Status SchedulerService::ListUsers(grpc::ServerContext* ctx,
                                         const rpc::Empty*,
                                         rpc::ListUsersReply* rep) {
  auto who = Who(*ctx, MayOperate, "list users");
  if (!who.ok()) return ToGrpc(who.status());
  for (const UserRecord& u : d_.users.List()) {
    rpc::UserInfo* info = rep->add_users();
    info->set_name(u.name);
    info->set_role(std::string(RoleName(u.role)));
    info->set_created_us(u.created_us);
  }
  return grpc::Status::OK;
}

grpc::Status SchedulerService::RemoveUser(grpc::ServerContext* ctx,
                                          const rpc::UserRequest* req,
                                          rpc::Empty*) {
  auto who = Who(*ctx, MayOperate, "remove user " + req->name());
  if (!who.ok()) return ToGrpc(who.status());
  auto r = d_.Call<core::Status>([this, req] {
    return runtime::RemoveUser(d_.users, *d_.store, req->name());
  });
  return r ? ToGrpc(*r) : Unavailable();
}

grpc::Status SchedulerService::WhoAmI(grpc::ServerContext* ctx,
                                      const rpc::Empty*, rpc::UserInfo* rep) {
  auto who = Identify(d_.users, *ctx);
  if (!who.ok()) return ToGrpc(who.status());
  rep->set_name(who->user);
  rep->set_role(std::string(RoleName(who->role)));
  return grpc::Status::OK;
}

grpc::Status SchedulerService::Ping(grpc::ServerContext*, const rpc::Empty*,
                                    rpc::Empty*) {
  return grpc::Status::OK;
}

}  // namespace gandiva::runtime
