// gandiva-scheduler: the scheduler daemon. Flags and defaults: README.md
// beside this file (and --help).
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <thread>

#include "runtime/scheduler/scheduler_server.h"
#include "runtime/tls/tls_flags.h"

namespace {

// Waits for SIGINT or SIGTERM (blocked in every thread) on a thread of its
// own, then shuts down.
void ShutdownOnSignal(gandiva::runtime::SchedulerServer* server) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  std::thread([server, set] {
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "gandiva-scheduler: signal %d, shutting down\n", sig);
    server->Shutdown();
  }).detach();
}

}  // namespace

int main(int argc, char** argv) {
  gandiva::runtime::SchedulerOptions o;
  CLI::App app{"gandiva-scheduler: the gandiva cluster scheduler daemon"};
  app.add_option("--listen", o.listen,
                 "HOST:PORT to serve on; port 0 picks one")
      ->capture_default_str();
  app.add_option("--address-file", o.address_file,
                 "write the bound HOST:PORT to this file");
  app.add_option("--db", o.db_path, "SQLite database (state, event log)")
      ->capture_default_str();
  app.add_flag("--durable-sync", o.durable_sync,
               "fsync every commit (survive power loss, not only crashes)");
  std::string policy;
  double quantum_s = 0;
  int max_height = 0;
  auto* policy_opt = app.add_option(
      "--policy", policy,
      "scheduling policy (default gandiva; a database keeps its own)");
  auto* quantum_opt = app.add_option(
      "--quantum-s", quantum_s, "time-slice length in seconds (default 60)");
  auto* height_opt =
      app.add_option("--max-height", max_height,
                     "most jobs time-sharing a GPU, 0 = no cap (default 4)");
  app.add_option("--tick-ms", o.tick_ms, "event-loop tick period")
      ->capture_default_str();
  app.add_option("--agent-timeout-s", o.agent_timeout_s,
                 "declare an agent down after this long without a report")
      ->capture_default_str();
  app.add_option("--agent-rpc-timeout-s", o.agent_rpc_timeout_s,
                 "deadline of each call to an agent")
      ->capture_default_str();
  app.add_option("--executor-threads", o.executor_threads,
                 "threads calling agents")
      ->capture_default_str();
  double pack_settle_s = 30;
  auto* settle_opt = app.add_option(
      "--pack-settle-s", pack_settle_s,
      "how long a new pack runs before it is judged (default 30)");
  double keep_above = 1;
  auto* keep_opt = app.add_option(
      "--pack-keep-above", keep_above,
      "keep a pack when its normalised throughput is above this (default 1)");
  app.add_option("--profile-interval-s", o.profile_interval_s,
                 "give the policy a job's measured rate at most this often "
                 "(0: every agent report)")
      ->capture_default_str();
  gandiva::runtime::AddTlsFlags(app, &o.tls);
  app.add_option("--metrics-listen", o.metrics_listen,
                 "serve Prometheus metrics at HOST:PORT (GET /metrics); "
                 "default none");
  app.add_option("--snapshot-every", o.snapshot_every_events,
                 "compact the event log into a snapshot every N events "
                 "(0: never)")
      ->capture_default_str();
  app.add_option("--probe-delay-s", o.probe_delay_s,
                 "measure a mechanism's effect on the rate this long after")
      ->capture_default_str();
  app.add_option("--warm-ready-timeout-s", o.warm_ready_timeout_s,
                 "a migration checkpoints the job once its warm-started "
                 "process waits for the checkpoint, or after this long")
      ->capture_default_str();
  app.add_flag("-v,--verbose", o.verbose, "log events and actions to stderr");
  CLI11_PARSE(app, argc, argv);
  if (policy_opt->count() > 0) o.policy = policy;
  if (quantum_opt->count() > 0) o.quantum_s = quantum_s;
  if (height_opt->count() > 0) o.max_height = max_height;
  if (settle_opt->count() > 0) o.pack_settle_s = pack_settle_s;
  if (keep_opt->count() > 0) o.pack_keep_above = keep_above;

  // Block the signals before any thread starts, so they reach sigwait only.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  auto server = gandiva::runtime::SchedulerServer::Start(o);
  if (!server.ok()) {
    std::fprintf(stderr, "gandiva-scheduler: %s\n",
                 server.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "gandiva-scheduler: serving on %s (policy %s, db %s)\n",
               (*server)->address().c_str(), (*server)->policy().c_str(),
               o.db_path.c_str());
  ShutdownOnSignal(server->get());
  (*server)->Wait();
  return 0;
}
