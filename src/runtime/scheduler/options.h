// SchedulerOptions: everything that configures the gandiva-scheduler daemon,
// with its default. A value (sharing `leadership`): thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/policies/queues.h"
#include "runtime/scheduler/daemon_env.h"
#include "runtime/scheduler/leadership.h"
#include "runtime/tls/tls.h"

namespace gandiva::runtime {

class Store;

struct SchedulerOptions {
  // Where the gRPC Scheduler service listens, "host:port". Port 0 picks a
  // free port; SchedulerServer::address() (and `address_file`) tell which.
  // Empty: on no socket, only to callers in this process
  // (SchedulerServer::service). Default "127.0.0.1:7070": this machine
  // only, until told to serve the network ("0.0.0.0:7070").
  std::string listen = "127.0.0.1:7070";
  // If non-empty, the bound address ("host:port", host 127.0.0.1 when
  // listening on all interfaces) is written to this file once the daemon
  // serves (atomically: written to a temporary file, then renamed).
  // Default empty.
  std::string address_file;
  // The SQLite database holding jobs, servers, history and the event log.
  // Created if missing; recovered from if present. Default "./gandiva.db".
  std::string db_path = "gandiva.db";
  // fsync every commit (SQLite synchronous=FULL): committed state survives
  // a power loss, not just a crash of the daemon. Default false (NORMAL).
  bool durable_sync = false;
  // Set: the state lives in etcd instead (etcd_store.h), under
  // leadership->prefix(), shared with standby daemons; `db_path` and
  // `durable_sync` are unused. This daemon must lead (Campaign returned
  // Ok). Whoever runs it stops it when the lead is lost (OnLost) and
  // resigns after a clean stop (gandiva-scheduler's main does both).
  std::shared_ptr<Leadership> leadership;
  // The clock and the channels to agents (daemon_env.h). Default (unset):
  // RealDaemonEnv().
  std::shared_ptr<DaemonEnv> env;
  // For tests: wraps the store the daemon opens (a FaultyStore,
  // faulty_store.h, that fails the writes a test chooses). Default none.
  std::function<std::unique_ptr<Store>(std::unique_ptr<Store>)> store_wrapper;

  // --- Policy. Stored in the database on first start. Unset: the stored
  // value (or the default for a new database). Set and different from the
  // stored value: Start() refuses (the event log can only be replayed into
  // the policy that wrote it; use a new --db to change policy).
  //
  // Policy name (see `gandiva policies`). Default "gandiva".
  std::optional<std::string> policy;
  // Time-slice length in seconds (gandiva policies). Default 60.
  std::optional<double> quantum_s;
  // gandiva-fair: how fast what a queue, or a user within it, is owed or
  // owes fades (its half-life), in seconds. Default 3600.
  std::optional<double> share_half_life_s;
  // The most jobs time-sharing a GPU (a server's height cap, gandiva
  // policies; 0 = no cap). Default 4.
  std::optional<int> max_height;
  // Queues (teams), a tree (config/queues_file.h; the gandiva-fair policy
  // shares the cluster by them). A job names its queue in its spec
  // (`queue`), a leaf; one naming none is in its owner's queue (the first
  // leaf that lists them as a member), else in the shared queue (quota 0).
  // Default none.
  std::optional<std::vector<core::QueueConfig>> queues;

  // Users (users.h, identify.h). With a directory, the daemon has users and
  // every request must prove whose it is; the directory holds the admin's
  // and the agents' credentials (admin.cred, agent.cred; written, mode
  // 0600, when missing). A store that holds users has them without it.
  // Default empty: open (every caller an admin) unless the store holds
  // users.
  std::string credentials_dir;
  // The admin's name when admin.cred is written. Default: the Unix user
  // running the daemon.
  std::string admin_user;

  // How often the event loop sends the core a Tick. Default 1000 ms.
  int tick_ms = 1000;
  // An agent that has not reported for this long is out of reach: its
  // server is cordoned and calls to it fail at once, its jobs kept placed
  // there. Default 30 s.
  double agent_timeout_s = 30;
  // An agent out of reach this much longer (agent_timeout_s + this since it
  // was last heard of) is declared down and its jobs go back to the queue;
  // back before then, its jobs go on as they were. 0: declared down at
  // agent_timeout_s. Default 90 s.
  double agent_grace_s = 90;
  // The placement lease each agent is given (RegisterAgentReply
  // .placement_lease_ms, PlacementLeaseMs): half of agent_timeout_s +
  // agent_grace_s, the time after which this daemon may place an unheard-of
  // agent's jobs elsewhere.
  // An agent that said it was stopping (Leave: its jobs saved a checkpoint
  // to go on from when it is back) is waited for this long from its stop,
  // its server cordoned, before it is declared down (and at least
  // agent_timeout_s since it, or this daemon's start, was last heard of).
  // Default 300 s.
  double agent_away_s = 300;
  // Deadline of each call to an agent (suspend waits for a mini-batch
  // boundary). Default 120 s.
  double agent_rpc_timeout_s = 120;
  // The most threads calling agents at once (started as needed). One job's
  // calls run in order, one at a time; a job never waits behind another's
  // while fewer calls than this are under way (dispatcher.h). Default 8.
  int executor_threads = 8;
  // How long a new pack runs before the policy judges it from the measured
  // rates (gandiva policy; stored with the policy options). Default 30 s.
  std::optional<double> pack_settle_s;
  // A pack is kept when the sum of its jobs' packed/alone rate ratios is
  // above this (gandiva policy; stored with the policy options). Default 1:
  // it must beat time-slicing.
  std::optional<double> pack_keep_above;
  // A job whose start fails waits this long before it is placed again
  // (doubling with each failure in a row, at most 5 min), and fails at its
  // `start_attempts`-th failure in a row (0: it is tried for ever); stored
  // with the policy options, as they decide what the event log replays
  // to. Defaults 5 attempts, 10 s.
  std::optional<int> start_attempts;
  std::optional<double> start_retry_s;
  // Runs that may fail before a job does (JobSpec.retries) for a job
  // submitted without it; set in its spec at submission. 0..100.
  int default_retries = 0;
  // The core (and its event log) gets a job's measured rate at most this
  // often; agents report more often (every 500 ms), which shows in `gandiva
  // ls` at once. Each report fed is one event logged and replayed after a
  // crash: at the agents' pace a cluster of 1,000 running jobs would log
  // 2,000 events a second. 0: every report. Default 2 s.
  double profile_interval_s = 2;
  // Compact the event log every this many events: snapshot the core and the
  // daemon's bookkeeping, and delete the events the snapshot includes, so a
  // recovery replays at most this many (and none after a clean stop, which
  // compacts too). 0: never (the log keeps every event). Default 50,000.
  int64_t snapshot_every_events = 50'000;
  // At each compaction, ended jobs beyond the this many that ended last are
  // forgotten: dropped from memory (the core's and the daemon's) and
  // archived in the store, where GetJob still finds them (ListJobs lists
  // them on request only). A job is forgotten only once nothing of it is
  // left on any agent. 0: keep every ended job. Default 10,000.
  int64_t keep_ended_jobs = 10'000;
  // Ended jobs that ended longer ago than this are forgotten too (however
  // few). 0: no limit of age. Needs snapshot_every_events > 0. Default 0.
  double keep_ended_for_s = 0;
  // An archived job's row and history are deleted from the store this long
  // after the job ended (Store::PruneArchive); GetJob no longer finds it.
  // 0: kept for ever. Default 0.
  double keep_archived_for_s = 0;
  // How often the loop checks the two limits above and --keep-ended-jobs:
  // a compaction is made then, rather than at the next --snapshot-every
  // events, when some ended job is past keep_ended_for_s or the ended jobs
  // exceed keep_ended_jobs by a tenth; archived jobs past
  // keep_archived_for_s are deleted, Store::PruneChunk() a pass of the
  // loop (SQLite 500, etcd 25). Default 60 s.
  double retention_check_s = 60;
  // Serve Prometheus metrics (GET /metrics) at this HOST:PORT (port 0:
  // any free one); empty: none. Default none.
  std::string metrics_listen;
  // Mutual TLS on the Scheduler service and the calls to agents (tls.h);
  // none given: plain connections.
  TlsFiles tls;
  // How long after a mechanism took effect its effect on the job's
  // mini-batch rate is measured for the job's history. Default 10 s.
  double probe_delay_s = 10;
  // A migration with a warm start checkpoints the job only once its new
  // process waits for the checkpoint (the job trains on meanwhile), or
  // after this long. Default 60 s.
  double warm_ready_timeout_s = 60;
  // Log each event and action to stderr. Default false.
  bool verbose = false;
  // Each publication of the jobs' and servers' state (after every request
  // and event) builds again only the JobInfo of jobs and the ServerInfo of
  // servers whose inputs changed, reusing the others'. false: every live
  // job's and every server's, as a check and a baseline for benchmarks.
  // Default true.
  bool reuse_unchanged_job_info = true;
  // A job row whose progress alone changed (mini-batches, rate, metric:
  // each agent report) is written at most this often, all such rows at
  // once; a change of anything else is written at the end of the loop's
  // pass, with the job's progress then. A crash loses at most this much
  // of the progress shown until the agents report again. 0: every pass.
  // Default 5 s.
  double progress_write_interval_s = 5;
  // The profile reports of a loop pass are logged together, in one append
  // to the event log, with the next event fed (Store::AppendEvents). false:
  // each in its own append, as a baseline for benchmarks. Default true.
  bool log_profile_reports_together = true;
  // Likewise the successful outcomes of actions (ActionDone): the agents'
  // replies handled in a loop pass are logged together, with the next
  // event fed, and handled then (a request in the same pass sees the core
  // as it was before them). false: each in its own append, as a baseline
  // for benchmarks. Default true.
  bool log_action_outcomes_together = true;
  // Tests: each reused JobInfo and ServerInfo is also built again and
  // compared, and a difference aborts the daemon. Default false.
  bool verify_reused_job_info = false;
};

// The placement lease agents are given (SchedulerOptions::agent_grace_s):
// half the time after which the daemon may place an unheard-of agent's
// jobs elsewhere, so that the agent has suspended them well before.
inline int64_t PlacementLeaseMs(const SchedulerOptions& o) {
  return static_cast<int64_t>((o.agent_timeout_s + o.agent_grace_s) * 500);
}

}  // namespace gandiva::runtime
