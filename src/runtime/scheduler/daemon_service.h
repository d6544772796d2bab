// SchedulerService: the daemon's gRPC Scheduler service, an adapter. Each
// handler checks the request's form, runs the request on the daemon's loop
// (SchedulerServer::Impl::Call) or reads what the loop published, and turns
// the outcome into a gRPC status and reply; it decides nothing. Served by
// the gRPC server, or called in process (SchedulerServer::service).
//
// Thread-safety: its handlers may be called from any thread at once.
#pragma once

#include "proto/gandiva.grpc.pb.h"
#include "runtime/scheduler/scheduler_server.h"
#include "runtime/scheduler/users.h"

namespace gandiva::runtime {

class SchedulerService final : public rpc::Scheduler::Service {
 public:
  explicit SchedulerService(SchedulerServer::Impl& daemon) : d_(daemon) {}

  // Agents.
  grpc::Status RegisterAgent(grpc::ServerContext*,
                             const rpc::RegisterAgentRequest* req,
                             rpc::RegisterAgentReply* rep) override;
  grpc::Status Report(grpc::ServerContext*, const rpc::AgentReport* req,
                      rpc::AgentReportReply*) override;
  grpc::Status Leave(grpc::ServerContext*, const rpc::LeaveRequest* req,
                     rpc::LeaveReply* rep) override;

  // Users' requests that change state, run on the loop.
  grpc::Status Submit(grpc::ServerContext*, const rpc::SubmitRequest* req,
                      rpc::SubmitReply* rep) override;
  grpc::Status SubmitJobs(grpc::ServerContext*,
                          const rpc::SubmitJobsRequest* req,
                          rpc::SubmitJobsReply* rep) override;
  grpc::Status Kill(grpc::ServerContext*, const rpc::KillRequest* req,
                    rpc::Empty*) override;
  grpc::Status Suspend(grpc::ServerContext*, const rpc::JobIdRequest* req,
                       rpc::Empty*) override;
  grpc::Status Resume(grpc::ServerContext*, const rpc::JobIdRequest* req,
                      rpc::Empty*) override;
  grpc::Status KillJobs(grpc::ServerContext*, const rpc::JobsRequest* req,
                        rpc::JobsReply* rep) override;
  grpc::Status SuspendJobs(grpc::ServerContext*, const rpc::JobsRequest* req,
                           rpc::JobsReply* rep) override;
  grpc::Status ResumeJobs(grpc::ServerContext*, const rpc::JobsRequest* req,
                          rpc::JobsReply* rep) override;
  grpc::Status SetPriority(grpc::ServerContext*,
                           const rpc::SetPriorityRequest* req,
                           rpc::SetPriorityReply* rep) override;
  grpc::Status Migrate(grpc::ServerContext*, const rpc::MigrateRequest* req,
                       rpc::Empty*) override;
  grpc::Status Drain(grpc::ServerContext*, const rpc::DrainRequest* req,
                     rpc::DrainReply* rep) override;
  grpc::Status Pack(grpc::ServerContext*, const rpc::PackRequest* req,
                    rpc::Empty*) override;
  grpc::Status Unpack(grpc::ServerContext*, const rpc::JobIdRequest* req,
                      rpc::Empty*) override;
  grpc::Status Resize(grpc::ServerContext*, const rpc::ResizeRequest* req,
                      rpc::Empty*) override;

  // Reads of what the loop published; they do not wait for it.
  grpc::Status ListJobs(grpc::ServerContext*, const rpc::ListJobsRequest* req,
                        rpc::ListJobsReply* rep) override;
  grpc::Status GetJob(grpc::ServerContext*, const rpc::JobIdRequest* req,
                      rpc::JobInfo* rep) override;
  // A ticket to read the job's log at its agents: its owner's or an
  // admin's (rule owner).
  grpc::Status LogTicket(grpc::ServerContext*, const rpc::LogTicketRequest* req,
                         rpc::LogTicketReply* rep) override;
  grpc::Status ListServers(grpc::ServerContext*, const rpc::Empty*,
                           rpc::ListServersReply* rep) override;
  grpc::Status ListQueues(grpc::ServerContext*, const rpc::Empty*,
                          rpc::ListQueuesReply* rep) override;
  grpc::Status ApplyQueues(grpc::ServerContext*,
                           const rpc::ApplyQueuesRequest* req,
                           rpc::ApplyQueuesReply* rep) override;
  grpc::Status GetUsage(grpc::ServerContext*, const rpc::UsageRequest* req,
                        rpc::UsageReply* rep) override;
  // Users (users.h): admins only, but WhoAmI.
  grpc::Status AddUser(grpc::ServerContext*, const rpc::AddUserRequest* req,
                       rpc::AddUserReply* rep) override;
  grpc::Status ListUsers(grpc::ServerContext*, const rpc::Empty*,
                         rpc::ListUsersReply* rep) override;
  grpc::Status RemoveUser(grpc::ServerContext*, const rpc::UserRequest* req,
                          rpc::Empty*) override;
  grpc::Status WhoAmI(grpc::ServerContext*, const rpc::Empty*,
                      rpc::UserInfo* rep) override;
  grpc::Status Ping(grpc::ServerContext*, const rpc::Empty*,
                    rpc::Empty*) override;

 private:
  // A rule of access.h.
  using Rule = core::Status (*)(const Caller&, std::string_view);
  // Who makes the call (identify.h), if `rule` lets them do `action`.
  core::StatusOr<Caller> Who(const grpc::ServerContext& ctx, Rule rule,
                             std::string_view action) const;

  // Kill, Suspend and Resume: one job's ActOnJobs.
  grpc::Status ActOnJob(const grpc::ServerContext& ctx, int64_t id, bool kill,
                        bool hold, const std::string& reason);
  // KillJobs, SuspendJobs and ResumeJobs.
  grpc::Status ActOnJobs(const grpc::ServerContext& ctx,
                         const rpc::JobsRequest& req, rpc::JobsReply* rep,
                         bool kill, bool hold);
  // A mechanism request (`action`, for admins), run on the loop.
  grpc::Status Mechanism(const grpc::ServerContext& ctx,
                         const std::string& action,
                         std::function<core::Status(const Caller&)> request);

  SchedulerServer::Impl& d_;
};

}  // namespace gandiva::runtime
