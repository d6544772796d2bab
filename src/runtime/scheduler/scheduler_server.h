// SchedulerServer: the gandiva-scheduler daemon as a library, so that the
// binary, tests and the local-cluster launcher can run one in-process.
//
// It serves the gRPC `Scheduler` service (proto/gandiva.proto), keeps its
// state in SQLite (store.h) and drives one core::Scheduler from one event
// loop thread: gRPC handlers, agent replies and the tick timer post work to
// the loop; only the loop calls core::Scheduler::Handle. Every event is
// appended to the event log before it is handled, so a restarted daemon
// replays the log and reconciles with what the agents report (README.md).
// Actions are carried out by a small executor pool calling the agents.
//
// Thread-safety: Start, address and Sync may be called from any thread;
// Shutdown is idempotent and may be called from any thread except the
// daemon's own.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "proto/gandiva.grpc.pb.h"
#include "runtime/scheduler/limits.h"
#include "runtime/scheduler/options.h"

namespace gandiva::runtime {

class SchedulerServer {
 public:
  // Opens (or recovers) the database, replays the event log, starts the
  // event loop, the executor and the gRPC service. Errors: a bad option
  // (InvalidArgument), policy options that differ from the stored ones
  // (FailedPrecondition), a database or event log that cannot be read (Io),
  // an address that cannot be bound (Unavailable).
  static core::StatusOr<std::unique_ptr<SchedulerServer>> Start(
      SchedulerOptions options);

  // Shuts down if still running.
  ~SchedulerServer();
  SchedulerServer(const SchedulerServer&) = delete;
  SchedulerServer& operator=(const SchedulerServer&) = delete;

  // The bound address, "host:port" (127.0.0.1 when listening on all
  // interfaces), usable by clients on this machine.
  const std::string& address() const;
  // The policy in use (as given, or as stored in the database).
  const std::string& policy() const;
  // The port of the Prometheus endpoint (--metrics-listen); 0 when off.
  int metrics_port() const;
  // The page the Prometheus endpoint serves, read in process (with or
  // without --metrics-listen).
  std::string MetricsText() const;

  // Blocks until the event loop has handled everything posted before the
  // call (and published its snapshot). For tests.
  void Sync();

  // The Scheduler service, for callers in this process (its methods take
  // a default ServerContext); the only way in when SchedulerOptions::listen
  // is empty. Valid while this object lives.
  rpc::Scheduler::Service& service();

  // For tests that move a fake DaemonEnv's clock: what the daemon has left
  // to do. The loop is idle when it waits with nothing posted, until its
  // timer at `next_timer_us` (the env's SteadyMicros); agent calls are
  // running, or ready and waiting for a worker (Dispatcher::Load);
  // `generation` changes whenever work is posted, the loop goes to wait,
  // or a call finishes.
  struct Activity {
    bool loop_idle = false;
    int64_t next_timer_us = 0;
    int tasks_running = 0;
    int tasks_ready = 0;
    uint64_t generation = 0;
  };
  Activity activity() const;

  // Stops serving: the gRPC service, the event loop, the executor. What was
  // committed stays in the database; actions under way at the agents are
  // reconciled at the next start.
  void Shutdown();
  // Blocks until Shutdown (from another thread or a signal handler thread).
  void Wait();

  struct Impl;

 private:
  explicit SchedulerServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gandiva::runtime
