// AgentServer: the gandiva-agent node agent as a library, so that the binary,
// tests and the local-cluster launcher can run one in-process.
//
// It discovers the GPUs (GpuInventory: NVML or virtual), serves the gRPC
// `Agent` service (proto/gandiva.proto) over a Supervisor that runs the jobs,
// and keeps the daemon informed from one reporter thread: RegisterAgent at
// start (and again whenever the daemon was unreachable or answers that it
// does not know this agent), then Report every report interval and at once
// when a job exits. Exit records are kept until a Report carrying them
// succeeds, so none is lost while the daemon is down.
//
// Jobs are children of this process, reaped by waitpid(pid): a process that
// embeds an agent must not reap children it did not start (no waitpid(-1),
// no SIGCHLD set to SIG_IGN), or exits read as code -1.
//
// Thread-safety: all methods may be called from any thread; Shutdown is
// idempotent.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "runtime/agent/capabilities.h"
#include "runtime/tls/tls.h"

namespace gandiva::runtime {

class GpuInventory;
class Supervisor;

struct AgentOptions {
  // The daemon's Scheduler service, host:port; or several, comma-separated
  // (a leader and its standbys sharing etcd): the agent reports to one and
  // moves to the next when it cannot reach it. Empty: serve only, never
  // register (for tests of the Agent service alone).
  std::string scheduler_address;
  // Mutual TLS on the Agent service and on this agent's calls (tls.h); none
  // given: plain connections.
  TlsFiles tls;
  // Jobs run as their owner's Unix account (SupervisorOptions::run_as_owner):
  // the agent must run as root. `map_user`: "CLUSTER=ACCOUNT" each, for
  // owners whose account has another name. `allow_root_jobs`: an owner whose
  // account is root may run jobs (refused otherwise).
  bool run_as_owner = false;
  std::vector<std::string> map_user;
  bool allow_root_jobs = false;
  // gandiva-job-shim, the parent of each job's process that lets a
  // restarted agent take its jobs back (SupervisorOptions::job_shim): empty
  // finds it, "none" runs jobs without it.
  std::string job_shim;
  // A credential file (credentials.h) this agent's calls to the daemon
  // carry: a daemon with users admits only an agent's. Empty: none.
  std::string credentials;
  // Where the Agent service listens; port 0 picks a free port.
  // Default: this machine only, until told otherwise ("0.0.0.0:0").
  std::string listen_address = "127.0.0.1:0";
  // Host reported in RegisterAgent.address. Empty: the listen host, or this
  // machine's hostname when listening on all interfaces.
  std::string advertise_host;
  std::string name;  // unique per server; empty: the hostname
  // GPUs: virtual ones when NVML finds none (or when virtual_only).
  int virtual_gpus = 4;
  bool virtual_only = false;
  int sockets = 1;
  int switches_per_socket = 1;
  std::string nvml_library = "libnvidia-ml.so.1";
  // Job logs go under work_dir/jobs/<job_id>/. Empty:
  // /tmp/gandiva-agent-<name>.
  std::string work_dir;
  // Checkpoints (best on a ramdisk): checkpoint_root/jobs/<job_id>/checkpoint
  // (GANDIVA_CHECKPOINT_DIR) and .../incoming (a warm start's
  // GANDIVA_RESUME_FROM). Empty: /dev/shm/gandiva-<name> when /dev/shm
  // exists, else work_dir/checkpoints.
  std::string checkpoint_root;
  // CheckpointJob: request -> the job exited with its checkpoint saved.
  std::chrono::milliseconds checkpoint_timeout{60000};
  // Shutdown first has every job that can save its state without CRIU (it
  // uses the job-side library, or is restartable; not a part of a
  // multi-server job) save a checkpoint and exit, all at once, each within
  // this; the daemon is told (JobExit.checkpoint_kept) and the checkpoints
  // stay in checkpoint_root, so that the jobs go on from them when an agent
  // with this name and checkpoint root registers again. The rest are
  // killed. 0: kill every job without saving.
  std::chrono::milliseconds stop_checkpoint_timeout{20000};
  // Then also the other jobs (neither the library nor restartable) are
  // dumped by CRIU where it is usable here (`criu`), and restored from the
  // dump when the agent is back; false (--no-criu-at-stop): they are killed
  // and start again from the beginning.
  bool criu_at_stop = true;
  // ReceiveCheckpoint: the whole call (transfer, restore, first mini-batch).
  std::chrono::milliseconds receive_timeout{60000};
  // Suspend/CheckpointJob of a job this young that has not attached to its
  // page yet wait up to this for the library before treating it as a job
  // without it.
  std::chrono::milliseconds library_start_grace{10000};
  // Capabilities (CRIU trial, MPS) are probed in the background at start;
  // each CRIU step is bounded by this.
  std::chrono::milliseconds criu_probe_timeout{3000};
  // false (--no-criu): CRIU is neither tried nor used here, so a job without
  // the library that is not restartable cannot be moved from or to here.
  bool criu = true;
  // Checkpoints between agents over the bulk TCP channel (sendfile at the
  // source), else the ReadCheckpoint gRPC stream. false (--no-bulk-transfer):
  // this agent fetches over the stream and offers no bulk channel.
  // With TLS (`tls`) the bulk channel, plain TCP, is off unless
  // `bulk_plaintext`: checkpoints then go over the mutual-TLS stream.
  bool bulk_transfer = true;
  // With TLS, keep the bulk channel all the same (--bulk-plaintext): the
  // checkpoints' bytes cross the network unencrypted (a token sent over TLS
  // still admits only the destination), for a network trusted not to be
  // read, at the bulk channel's speed.
  bool bulk_plaintext = false;
  // A warm start whose process can take its checkpoint file from a socket
  // itself (the PyTorch integration of one process says so) gets the
  // source's bulk channel offered to it instead of the files
  // (GANDIVA_STREAM_OFFER_FILE): the bytes go straight into the model's and
  // optimizer's memory, with no file at the destination and no separate
  // load. false (--no-stream-to-job): the files are received here first.
  // Needs bulk_transfer.
  bool stream_to_job = true;
  // How long an offered bulk channel waits for its connection (at most; a
  // shorter deadline of the OpenCheckpointTransfer call wins).
  std::chrono::milliseconds bulk_accept_timeout{15000};
  // Parallel TCP streams this agent asks for when it fetches over the bulk
  // channel (--bulk-streams; 1: one connection; at most kBulkMaxStreams).
  // The source grants fewer for a small checkpoint. Two moved a 288 MiB
  // checkpoint between ramdisks over loopback about 20% faster than one;
  // four, no faster than two, with two cores (gandiva_bench_migration
  // --compare-streams 1,2,4).
  int bulk_streams = 2;
  // Progress pages: empty = /dev/shm when present, else work_dir.
  std::string page_dir;
  int cpus_per_gpu = 0;  // > 0: pin virtual-GPU jobs to CPUs
  std::chrono::milliseconds report_interval{500};
  // Each job's log here keeps at most this much of its output (checked
  // every report_interval; the oldest half is dropped, see log_cap.h); the
  // copy of what it printed on earlier servers is bounded alike. 0: no
  // bound. Default 1 GiB.
  int64_t max_log_bytes = int64_t{1} << 30;
  std::chrono::milliseconds kill_grace{10000};
  std::chrono::milliseconds suspend_timeout{30000};
  // Deadline of each call to the daemon; the retry backoff's ceiling.
  std::chrono::milliseconds rpc_timeout{2000};
  std::chrono::milliseconds max_backoff{5000};
  // Where the agent's own messages go. Empty: stderr, "gandiva-agent[name]:".
  std::function<void(std::string_view)> log;
};

class AgentServer {
 public:
  // Discovers GPUs, starts the gRPC service and the reporter thread. Returns
  // once the service listens (registration happens in the background).
  // Errors: a bad option (InvalidArgument, naming it), an address that
  // cannot be bound (Unavailable), a work dir that cannot be made (Io).
  static core::StatusOr<std::unique_ptr<AgentServer>> Start(
      AgentOptions options);

  // Shuts down if still running.
  ~AgentServer();
  AgentServer(const AgentServer&) = delete;
  AgentServer& operator=(const AgentServer&) = delete;

  const std::string& name() const;
  // The address reported to the daemon, "host:port" with the bound port.
  const std::string& address() const;
  int port() const;
  const GpuInventory& gpus() const;
  // The jobs (tests and embedders may inspect them; the daemon drives them
  // through the service).
  Supervisor& supervisor();

  // The capabilities found at start (criu_detail "not checked yet" until the
  // background probe finished).
  Capabilities capabilities() const;
  // Waits (bounded) until the capability probe finished; false on timeout.
  bool WaitForCapabilities(std::chrono::milliseconds timeout) const;

  // Whether the last call to the daemon succeeded with this agent known.
  bool registered() const;
  // How many RegisterAgent calls succeeded so far.
  int registrations() const;
  // The daemon's id for this server (from the last RegisterAgent).
  int32_t server_id() const;
  // Wakes the reporter: a Report goes out now.
  void ReportNow();

  // Stops serving and the reporter, has the jobs that can save a checkpoint
  // and exit (stop_checkpoint_timeout), kills the rest (SIGTERM, then
  // SIGKILL after the grace period), tries once to report their exits.
  void Shutdown();
  // Blocks until Shutdown (called from another thread).
  void Wait();

  struct Impl;

 private:
  explicit AgentServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "host:port" split at the last ':' (brackets of an IPv6 host kept).
// kInvalidArgument (naming `field`) when there is no valid port.
core::StatusOr<std::pair<std::string, int>> SplitHostPort(
    const std::string& address, std::string_view field);

}  // namespace gandiva::runtime
