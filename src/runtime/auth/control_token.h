// Control tokens: what lets a call into an agent's Agent service act on
// jobs.
//
// The daemon makes the cluster's secret once with its store (meta key
// "agent_control_token", shared by an HA pair). Each agent's control token
// is derived from it and the agent's name (AgentControlToken), and given
// to that agent alone in its registration's reply
// (RegisterAgentReply.control_token), which only an agent's credential
// obtains. The daemon's calls to an agent carry that agent's token as the
// metadata "gandiva-control-token: TOKEN". An agent admits a job-control or
// transfer call only with its own token: a local user who reaches its
// port, or another agent, cannot start, stop or read a job through it.
//
// Tickets, signed by the daemon with an agent's token and checked by that
// agent with what it holds, without asking the daemon:
//  - a log ticket (Scheduler.LogTicket, for the job's owner or an admin):
//    "JOB.EXPIRES_US.MAC", MAC the HMAC-SHA256 of "tail-log:JOB:EXPIRES_US";
//    it reads job JOB's log there (TailLog);
//  - a fetch ticket (ReceiveCheckpointRequest.fetch_ticket, given to the
//    destination of a move): "JOB.EXPIRES_US.MAC.DEST", MAC that of
//    "fetch:JOB:EXPIRES_US:DEST"; sent as the metadata
//    "gandiva-fetch-ticket", it reads job JOB's checkpoint and log from the
//    source (ReadCheckpoint, OpenCheckpointTransfer, TailLog), and nothing
//    else.
//
// ControlGate is the agent's side: thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace gandiva::runtime {

inline constexpr char kControlTokenKey[] = "gandiva-control-token";
inline constexpr char kFetchTicketKey[] = "gandiva-fetch-ticket";

// Agent `name`'s control token, from the cluster's secret `master` ("":
// none, when `master` is "").
std::string AgentControlToken(const std::string& master,
                              const std::string& name);

// Adds `token` to every call made on a channel built with it (the daemon's
// channel to one agent); none when `token` is empty.
std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>
ControlTokenInterceptor(const std::string& token);

// Add `token` or `ticket` to a call's metadata (nothing when empty).
void AttachControlToken(const std::string& token, grpc::ClientContext* ctx);
void AttachFetchTicket(const std::string& ticket, grpc::ClientContext* ctx);

// A ticket to read job `job`'s log until `expires_us` (wall clock), from
// the agent whose control token is `token`.
std::string MakeLogTicket(const std::string& token, int64_t job,
                          int64_t expires_us);
// A ticket for agent `destination` to fetch job `job`'s checkpoint and log
// until `expires_us` from the agent whose control token is `token`.
std::string MakeFetchTicket(const std::string& token, int64_t job,
                            const std::string& destination, int64_t expires_us);

class ControlGate {
 public:
  // `has_daemon`: the agent registers with a daemon, which gives the
  // token; until it has, control calls are refused (UNAVAILABLE: the
  // daemon's own calls come after the registration). Without a daemon
  // (an agent serving alone, as in tests) every caller is admitted.
  explicit ControlGate(bool has_daemon);

  // How long a control call that comes before the first registration's
  // reply waits for it.
  static constexpr std::chrono::seconds kAwaitReply{10};

  // The token of a registration's reply. "" (a daemon from before the
  // token): every caller is admitted.
  void Set(const std::string& token);

  // OK when the call carries the token (or the gate is open); else
  // UNAUTHENTICATED naming `call` and why. Before the first registration
  // it waits up to kAwaitReply for its reply (the daemon's first calls
  // can overtake it: it sends them once it has registered the agent),
  // then refuses UNAVAILABLE.
  grpc::Status Admit(const grpc::ServerContext& ctx,
                     std::string_view call) const;
  // Whether Admit would admit it now (without waiting).
  bool Admits(const grpc::ServerContext& ctx) const;

  // A read of job `job`'s checkpoint (`call`): admitted as Admit does, or
  // with a fetch ticket for that job (MakeFetchTicket with this gate's
  // token) not expired now (the wall clock); else UNAUTHENTICATED saying
  // why. Over mutual TLS, a caller whose certificate is an agent's
  // (OU=agent) must be the ticket's destination (its CN): else
  // PERMISSION_DENIED naming both (CheckFetchCaller).
  grpc::Status AdmitFetch(const grpc::ServerContext& ctx, std::string_view call,
                          int64_t job) const;

  // A read of job `job`'s log (TailLog): admitted as AdmitFetch does, or
  // with `ticket` (MakeLogTicket with this gate's token) for that job, not
  // expired now; else UNAUTHENTICATED saying why.
  grpc::Status AdmitLogRead(const grpc::ServerContext& ctx, int64_t job,
                            const std::string& ticket) const;

 private:
  enum class State { kOpen, kAwaiting, kSet };
  grpc::Status Check(const grpc::ServerContext& ctx, std::string_view call,
                     bool wait) const;
  // A ticket of `kind` ("tail-log" or "fetch") checked against the token;
  // `tail`, if given, is set to the part the MAC covers after it (a fetch
  // ticket's destination), a view into `ticket`.
  grpc::Status CheckTicket(std::string_view call, std::string_view kind,
                           std::string_view ticket, int64_t job,
                           std::string_view* tail = nullptr) const;

  mutable std::mutex mu_;
  mutable std::condition_variable set_;  // the state leaves kAwaiting
  State state_;                          // guarded by mu_
  std::string token_;                    // guarded by mu_
};

}  // namespace gandiva::runtime
