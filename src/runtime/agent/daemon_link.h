// DaemonLink: the agent's link to the gandiva-scheduler daemon. One
// reporter thread registers the agent (RegisterAgent: its name, address,
// GPUs, running jobs, held checkpoints, capabilities) and then sends a
// Report (the jobs' progress and every exit not yet acknowledged) every
// report interval and at once when woken (Wake: a job exited). Exits are
// acknowledged to the supervisor only once a Report carrying them
// succeeded, so none is lost while the daemon is down. A failed call is
// retried with backoff (100 ms doubling to max_backoff), registering again
// first; a daemon that does not know the agent (NOT_FOUND,
// FAILED_PRECONDITION) gets a registration at once. With several daemons
// (a leader and its standbys) it moves to the next when one cannot be
// reached. Part of the agent's implementation (AgentServer).
//
// Thread-safety: Wake, RegisterAgain and the accessors may be called from
// any thread. Start, Stop, Leave and FinalReport are the agent lifecycle's,
// in that order, from one thread; Leave and FinalReport only after Stop
// (the reporter thread's state is theirs then).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/agent/gpu_inventory.h"
#include "runtime/agent/supervisor.h"
#include "runtime/auth/control_token.h"
#include "runtime/auth/credentials.h"
#include "runtime/tls/tls.h"

namespace gandiva::runtime {

struct DaemonLinkOptions {
  std::string name;  // the agent's (RegisterAgent.name, Report.name)
  // The daemons, host:port each; empty: the link is off (Start does
  // nothing, Leave and FinalReport neither).
  std::vector<std::string> schedulers;
  std::optional<TlsConfig> tls;
  // What each call carries to prove it is an agent's (credentials.h).
  std::optional<Credential> credential;
  std::chrono::milliseconds rpc_timeout{2000};  // deadline of each call
  std::chrono::milliseconds report_interval{500};
  std::chrono::milliseconds max_backoff{5000};
  // Given each registration's control token (control_token.h); may be
  // null. Must outlive the link.
  ControlGate* gate = nullptr;
};

class DaemonLink {
 public:
  // `inventory` and `supervisor` must outlive this. `await_capabilities`
  // waits (bounded by its argument) until the capability probe finished;
  // the first registration waits up to 5 s for it. `log` takes the agent's
  // own messages.
  DaemonLink(DaemonLinkOptions options, const GpuInventory& inventory,
             Supervisor& supervisor,
             std::function<void(std::chrono::milliseconds)> await_capabilities,
             std::function<void(const std::string&)> log);
  // Stop.
  ~DaemonLink();
  DaemonLink(const DaemonLink&) = delete;
  DaemonLink& operator=(const DaemonLink&) = delete;

  // Connects to the first daemon and starts the reporter thread;
  // `address` is the agent's, as registered.
  void Start(const std::string& address);
  // Stops the reporter thread and joins it. Idempotent.
  void Stop();
  // A Report goes out now.
  void Wake();
  // Once registered: registers again (with what changed, e.g. the
  // capabilities found since), before the next report.
  void RegisterAgain();

  // Tells the daemon that this agent stops (within 2 s, if registered):
  // it cordons the server and waits longer for the agent to be back.
  // Returns the jobs spanning servers with a part here that the daemon
  // has save (LeaveReply.saving); empty when it could not be told.
  std::vector<int64_t> Leave();
  // One last try to hand over the exits kept (registering first if
  // needed), when there are any.
  void FinalReport();

  // Whether the last call to the daemon succeeded with this agent known.
  bool registered() const { return registered_.load(); }
  // How many RegisterAgent calls succeeded so far.
  int registrations() const { return registrations_.load(); }
  // The daemon's id for this server (from the last RegisterAgent); -1
  // before.
  int32_t server_id() const { return server_id_.load(); }

 private:
  std::unique_ptr<grpc::ClientContext> CallContext();
  grpc::Status Register();
  grpc::Status SendReport();
  // One round: register if needed, then report. True when it reached the
  // daemon with this agent known.
  bool ReportRound();
  // Past the placement lease without reaching a daemon: suspends every job
  // that runs here (the daemon resumes them once it hears from this agent
  // again: it sets right a process in another state than it has the job).
  void SuspendForLease(std::chrono::milliseconds unreached);
  // Connects to schedulers[sched_at_].
  void ConnectScheduler();
  void NoteFailure(const char* call, const grpc::Status& s);
  void ReporterLoop();

  const DaemonLinkOptions options_;
  const GpuInventory& inventory_;
  Supervisor& supervisor_;
  const std::function<void(std::chrono::milliseconds)> await_capabilities_;
  const std::function<void(const std::string&)> log_;
  std::string address_;  // set by Start
  // This process's, drawn at construction (RegisterAgentRequest.incarnation).
  std::string incarnation_;

  // The reporter thread's (and, after Stop, the lifecycle's): the daemon
  // it talks to, schedulers[sched_at_], and whether the last call failed.
  size_t sched_at_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<rpc::Scheduler::Stub> scheduler_;
  bool was_unreachable_ = false;
  // The placement lease (RegisterAgentReply.placement_lease_ms; 0 none),
  // when the last round that reached a daemon began, and whether the jobs
  // were suspended for it since.
  std::chrono::milliseconds lease_{0};
  std::chrono::steady_clock::time_point reached_;
  bool suspended_for_lease_ = false;

  std::atomic<bool> registered_{false};
  std::atomic<int> registrations_{0};
  std::atomic<int32_t> server_id_{-1};

  std::mutex mu_;
  std::condition_variable cv_;
  bool wake_ = false;      // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::thread reporter_;
};

}  // namespace gandiva::runtime
