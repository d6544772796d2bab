// The cluster's control token: what lets a call into an agent's Agent
// service act on jobs.
//
// The daemon makes it once with its store (meta key "agent_control_token",
// shared by an HA pair) and gives it to each agent in its registration's
// reply (RegisterAgentReply.control_token), which only an agent's
// credential obtains. The daemon's calls to agents carry it, and so do an
// agent's calls to another agent (a checkpoint's transfer), as the
// metadata "gandiva-control-token: TOKEN". An agent admits a job-control
// or transfer call only with the token it was last given; a local user who
// reaches its port cannot start, stop or read a job through it.
//
// A job's log is read with the token or with a ticket the daemon gives the
// job's owner or an admin (Scheduler.LogTicket): "JOB.EXPIRES_US.MAC", MAC
// the HMAC-SHA256 of "tail-log:JOB:EXPIRES_US" keyed by the token, so that
// an agent checks it with what it holds, without asking the daemon.
//
// ControlGate is the agent's side: thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace gandiva::runtime {

inline constexpr char kControlTokenKey[] = "gandiva-control-token";

// Adds `token` to a call's metadata (nothing when empty).
void AttachControlToken(const std::string& token, grpc::ClientContext* ctx);

// A ticket to read job `job`'s log until `expires_us` (wall clock),
// signed with `token`.
std::string MakeLogTicket(const std::string& token, int64_t job,
                          int64_t expires_us);

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

  // A read of job `job`'s log (TailLog): admitted as Admit does, or with
  // `ticket` (MakeLogTicket with this gate's token) for that job, not
  // expired at `now_us`; else UNAUTHENTICATED saying why.
  grpc::Status AdmitLogRead(const grpc::ServerContext& ctx, int64_t job,
                            const std::string& ticket, int64_t now_us) const;

  // Adds the token to a call this agent makes to another agent.
  void Attach(grpc::ClientContext* ctx) const;

 private:
  enum class State { kOpen, kAwaiting, kSet };
  grpc::Status Check(const grpc::ServerContext& ctx, std::string_view call,
                     bool wait) const;

  mutable std::mutex mu_;
  mutable std::condition_variable set_;  // the state leaves kAwaiting
  State state_;                          // guarded by mu_
  std::string token_;                    // guarded by mu_
};

}  // namespace gandiva::runtime
