// gandiva-agent: the node agent. Runs jobs on this server's GPUs for the
// gandiva-scheduler daemon (see README.md in this directory).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "runtime/agent/agent_server.h"
#include "runtime/tls/tls_flags.h"

int main(int argc, char** argv) {
  gandiva::runtime::AgentOptions o;
  int report_interval_ms = 500;
  int kill_grace_ms = 10000;
  int suspend_timeout_ms = 30000;
  int checkpoint_timeout_ms = 60000;
  int stop_checkpoint_timeout_ms = 20000;
  CLI::App app{"gandiva-agent: the gandiva node agent (one per GPU server)"};
  app.add_option("--scheduler", o.scheduler_address,
                 "HOST:PORT of the gandiva-scheduler daemon; several, "
                 "comma-separated, for a leader and its standbys")
      ->required();
  gandiva::runtime::AddTlsFlags(app, &o.tls);
  app.add_option("--credentials", o.credentials,
                 "An agent's credential file for a daemon with users "
                 "(default: $GANDIVA_CREDENTIALS)")
      ->envname("GANDIVA_CREDENTIALS");
  app.add_flag("--run-as-owner", o.run_as_owner,
               "Run each job as its owner's Unix account (the agent must run "
               "as root; use with a scheduler that has users, which sets the "
               "owner from the submitter's credential)");
  app.add_option("--map-user", o.map_user,
                 "CLUSTER_USER=UNIX_ACCOUNT, for an owner whose account has "
                 "another name (repeatable; with --run-as-owner)");
  app.add_flag("--allow-root-jobs", o.allow_root_jobs,
               "With --run-as-owner: an owner whose account is root may run "
               "jobs (refused otherwise)");
  app.add_option("--job-shim", o.job_shim,
                 "gandiva-job-shim, the parent of each job's process, which "
                 "lets a restarted agent take its jobs back (default: the "
                 "one beside this program; none: without it, an agent's "
                 "death loses its jobs)");
  app.add_option("--listen", o.listen_address,
                 "HOST:PORT of this agent's service (port 0: pick a free one)")
      ->capture_default_str();
  app.add_option("--advertise-host", o.advertise_host,
                 "Host reported to the daemon (default: the listen host, or "
                 "the hostname when listening on all interfaces)");
  app.add_option("--name", o.name, "Unique server name (default: hostname)");
  app.add_option("--virtual-gpus", o.virtual_gpus,
                 "Virtual GPUs offered when NVML finds no GPU")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_flag("--virtual-only", o.virtual_only,
               "Offer virtual GPUs even when NVML finds real ones");
  app.add_option("--sockets", o.sockets, "CPU sockets (GPU topology)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--switches-per-socket", o.switches_per_socket,
                 "PCIe switches per socket (GPU topology)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--work-dir", o.work_dir,
                 "Job logs and checkpoints (DIR/jobs/<id>/); default "
                 "/tmp/gandiva-agent-<name>");
  app.add_option("--checkpoint-dir", o.checkpoint_root,
                 "Checkpoints (DIR/jobs/<id>/checkpoint and incoming); "
                 "default /dev/shm/gandiva-<name>, else WORK_DIR/checkpoints");
  app.add_option("--checkpoint-timeout-ms", checkpoint_timeout_ms,
                 "How long a job may take to save and exit (CheckpointJob), "
                 "and a warm start to receive and load (ReceiveCheckpoint)")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  app.add_option("--stop-checkpoint-timeout-ms", stop_checkpoint_timeout_ms,
                 "On SIGINT/SIGTERM, give each job that can save a checkpoint "
                 "(it uses the job-side library, or is restartable) this long "
                 "to save one and exit: it goes on from it when this agent "
                 "runs again (same --name and --checkpoint-dir). 0: kill "
                 "every job without saving")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600000));
  bool no_bulk_transfer = false;
  app.add_flag("--no-bulk-transfer", no_bulk_transfer,
               "Move checkpoints between agents over the gRPC stream only: "
               "fetch without, and offer no, bulk TCP channel");
  app.add_flag("--bulk-plaintext", o.bulk_plaintext,
               "With --tls-*, keep the bulk TCP channel (unencrypted, fast) "
               "for checkpoints instead of the TLS gRPC stream");
  bool no_stream_to_job = false;
  app.add_flag("--no-stream-to-job", no_stream_to_job,
               "Receive a warm start's checkpoint into files here even when "
               "the job could take it straight from the source's socket");
  bool no_criu = false;
  bool no_criu_at_stop = false;
  app.add_flag("--no-criu", no_criu,
               "Neither try nor use CRIU: a job without the job-side library "
               "that is not restartable cannot move from or to this server");
  app.add_flag("--no-criu-at-stop", no_criu_at_stop,
               "On SIGINT/SIGTERM, kill the jobs that can save a checkpoint "
               "only by CRIU instead of dumping them (they then start again "
               "from the beginning when this agent runs again)");
  app.add_option("--bulk-streams", o.bulk_streams,
                 "Parallel TCP streams asked for when fetching a checkpoint "
                 "over the bulk channel (1: one connection; the source grants "
                 "fewer for a small checkpoint)")
      ->capture_default_str()
      ->check(CLI::Range(1, 8));
  app.add_option("--page-dir", o.page_dir,
                 "Progress pages (default /dev/shm, else the work dir)");
  app.add_option("--report-interval-ms", report_interval_ms,
                 "Report to the daemon at least this often")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  app.add_option("--cpus-per-gpu", o.cpus_per_gpu,
                 "Pin virtual-GPU jobs to this many CPUs per GPU (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--kill-grace-ms", kill_grace_ms,
                 "SIGTERM -> SIGKILL grace period when killing a job")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600000));
  app.add_option("--suspend-timeout-ms", suspend_timeout_ms,
                 "How long a suspend may take before it fails")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  int64_t max_log_mb = o.max_log_bytes >> 20;
  app.add_option("--max-log-mb", max_log_mb,
                 "Keep at most this much of each job's output in its log "
                 "here, dropping the oldest (0: no bound)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--nvml", o.nvml_library, "NVML library to dlopen")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  o.bulk_transfer = !no_bulk_transfer;
  o.criu = !no_criu;
  o.criu_at_stop = !no_criu_at_stop;
  o.stream_to_job = !no_stream_to_job;
  o.report_interval = std::chrono::milliseconds(report_interval_ms);
  o.max_log_bytes = max_log_mb << 20;
  o.kill_grace = std::chrono::milliseconds(kill_grace_ms);
  o.suspend_timeout = std::chrono::milliseconds(suspend_timeout_ms);
  o.checkpoint_timeout = std::chrono::milliseconds(checkpoint_timeout_ms);
  o.stop_checkpoint_timeout =
      std::chrono::milliseconds(stop_checkpoint_timeout_ms);
  o.receive_timeout = std::chrono::milliseconds(checkpoint_timeout_ms);

  // SIGINT/SIGTERM are taken by sigwait below; every thread inherits the
  // mask (jobs get an empty one).
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto agent = gandiva::runtime::AgentServer::Start(o);
  if (!agent.ok()) {
    std::fprintf(stderr, "gandiva-agent: %s\n",
                 agent.status().ToString().c_str());
    return 2;
  }
  std::printf("gandiva-agent %s listening on %s\n", (*agent)->name().c_str(),
              (*agent)->address().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  (*agent)->Shutdown();
  return 0;
}
