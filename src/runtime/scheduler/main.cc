// gandiva-scheduler: the scheduler daemon. Flags and defaults: README.md
// beside this file (and --help).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "config/queues_file.h"
#include "core/job.h"
#include "runtime/scheduler/etcd_client.h"
#include "runtime/scheduler/leadership.h"
#include "runtime/scheduler/scheduler_server.h"
#include "runtime/scheduler/store.h"
#include "runtime/tls/tls_flags.h"

namespace {

std::mutex stop_mu;
std::function<void()> stop_fn;  // guarded by stop_mu
bool signalled = false;         // guarded by stop_mu

// Waits for SIGINT or SIGTERM (blocked in every thread) on a thread of its
// own, then stops what runs then (a campaign, or the daemon).
void StopOnSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  std::thread([set] {
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "gandiva-scheduler: signal %d, shutting down\n", sig);
    std::lock_guard lock(stop_mu);
    signalled = true;
    if (stop_fn) stop_fn();
  }).detach();
}

// What a signal stops from now on; run at once if one came already.
void OnStop(std::function<void()> f) {
  std::lock_guard lock(stop_mu);
  stop_fn = std::move(f);
  if (signalled && stop_fn) stop_fn();
}

// "1 job", "2 jobs".
std::string Count(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string Hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
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
  auto* db_opt =
      app.add_option("--db", o.db_path, "SQLite database (state, event log)")
          ->capture_default_str();
  std::string backup_to;
  app.add_option("--backup-to", backup_to,
                 "copy the --db store, as it is now, to this file and exit "
                 "(while a daemon uses it too); restoring: README.md")
      ->type_name("FILE");
  std::string restore_from;
  app.add_option("--restore-from", restore_from,
                 "replace the --db store with this backup (--backup-to) and "
                 "exit; refused while a daemon uses the store")
      ->type_name("FILE")
      ->excludes("--backup-to");
  std::string etcd;
  gandiva::runtime::Leadership::Options lead_opts;
  gandiva::runtime::TlsFiles etcd_tls;
  app.add_option("--etcd", etcd,
                 "HOST:PORT[,HOST:PORT...] of an etcd cluster holding the "
                 "state instead of --db; daemons sharing it elect a leader, "
                 "the others stand by");
  app.add_option("--etcd-prefix", lead_opts.prefix,
                 "the cluster's keys in etcd start with this")
      ->capture_default_str();
  app.add_option("--lease-ttl-s", lead_opts.ttl_s,
                 "a standby takes over this long after the leader dies")
      ->capture_default_str();
  app.add_option("--etcd-tls-ca", etcd_tls.ca,
                 "CA certificate of etcd's client connections (PEM)");
  app.add_option("--etcd-tls-cert", etcd_tls.cert,
                 "this daemon's client certificate for etcd (PEM)");
  app.add_option("--etcd-tls-key", etcd_tls.key, "and its private key (PEM)");
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
  double half_life_s = 0;
  auto* half_life_opt = app.add_option(
      "--share-half-life-s", half_life_s,
      "gandiva-fair: half-life in seconds of what a queue, or a user within "
      "it, is owed or owes (default 3600; a database keeps its own)");
  std::string queues_file;
  app.add_option("--queues", queues_file,
                 "YAML file of the queues (teams) and their GPU quotas that "
                 "jobs name (see the README; stored with the policy "
                 "options; other queues than the stored ones are applied "
                 "as `gandiva queues apply` would)");
  auto* height_opt =
      app.add_option("--max-height", max_height,
                     "most jobs time-sharing a GPU, 0 = no cap (default 4)");
  app.add_option("--credentials-dir", o.credentials_dir,
                 "Give the daemon users: every call must prove whose it is "
                 "(a token, or a client certificate with --tls-*). DIR holds "
                 "the admin's and the agents' credentials, admin.cred and "
                 "agent.cred, written (mode 0600) when missing. Without it "
                 "the daemon is open (every caller an admin) unless its "
                 "store holds users");
  app.add_option("--admin", o.admin_user,
                 "The admin's name when admin.cred is written (default: the "
                 "Unix user running the daemon)");
  app.add_option("--tick-ms", o.tick_ms, "event-loop tick period")
      ->capture_default_str();
  app.add_option("--agent-timeout-s", o.agent_timeout_s,
                 "an agent not heard of for this long is out of reach: its "
                 "server is cordoned, its jobs kept there")
      ->capture_default_str();
  app.add_option("--agent-grace-s", o.agent_grace_s,
                 "declare an agent out of reach down this much later, its "
                 "jobs placed again (0: at once)")
      ->capture_default_str();
  app.add_option("--agent-away-s", o.agent_away_s,
                 "wait this long for an agent that said it was stopping "
                 "(its jobs saved, its server cordoned) before declaring "
                 "it down")
      ->capture_default_str();
  app.add_option("--agent-rpc-timeout-s", o.agent_rpc_timeout_s,
                 "deadline of each call to an agent")
      ->capture_default_str();
  app.add_option("--executor-threads", o.executor_threads,
                 "the most threads calling agents at once")
      ->capture_default_str();
  double pack_settle_s = 30;
  auto* settle_opt = app.add_option(
      "--pack-settle-s", pack_settle_s,
      "how long a new pack runs before it is judged (default 30)");
  double keep_above = 1;
  auto* keep_opt = app.add_option(
      "--pack-keep-above", keep_above,
      "keep a pack when its normalised throughput is above this (default 1)");
  int start_attempts = 5;
  auto* attempts_opt = app.add_option(
      "--start-attempts", start_attempts,
      "fail a job when this many starts failed in a row, 0 = never "
      "(default 5)");
  double start_retry_s = 10;
  auto* retry_opt = app.add_option(
      "--start-retry-s", start_retry_s,
      "wait this long before starting a job again after its start (or a "
      "run it may retry) failed, doubling each time, at most 300 (default "
      "10)");
  app.add_option("--default-retries", o.default_retries,
                 "runs that may fail before a job does, for a job whose spec "
                 "sets no retries: (0-100)")
      ->check(CLI::Range(0, gandiva::core::kMaxRetries))
      ->capture_default_str();
  app.add_option("--profile-interval-s", o.profile_interval_s,
                 "give the policy a job's measured rate at most this often "
                 "(0: every agent report)")
      ->capture_default_str();
  app.add_option("--progress-write-interval-s", o.progress_write_interval_s,
                 "write to the database the rows of jobs whose progress "
                 "alone changed at most this often (0: after every pass of "
                 "the event loop)")
      ->capture_default_str();
  gandiva::runtime::AddTlsFlags(app, &o.tls);
  app.add_option("--metrics-listen", o.metrics_listen,
                 "serve Prometheus metrics at HOST:PORT (GET /metrics); "
                 "default none");
  app.add_option("--snapshot-every", o.snapshot_every_events,
                 "compact the event log into a snapshot every N events "
                 "(0: never)")
      ->capture_default_str();
  app.add_option("--keep-ended-jobs", o.keep_ended_jobs,
                 "forget the ended jobs beyond the N that ended last (at "
                 "compactions, and at --retention-check when they exceed "
                 "N by a tenth): archived in the store, where `gandiva "
                 "show` and `ls --archived` read them (0: keep all)")
      ->capture_default_str();
  // Durations: a number of seconds, or with a unit (90m, 12h, 30d, 2w).
  CLI::AsNumberWithUnit duration(
      std::map<std::string, double>{
          {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}, {"w", 604800}},
      CLI::AsNumberWithUnit::CASE_SENSITIVE, "UNIT");
  duration.description("");
  app.add_option("--keep-ended-for", o.keep_ended_for_s,
                 "forget ended jobs (as --keep-ended-jobs does) once this "
                 "long has passed since they ended, however few; seconds, "
                 "or with a unit: 90m, 12h, 30d, 2w (default 0: no limit)")
      ->transform(duration)
      ->type_name("DURATION");
  app.add_option("--keep-archived-for", o.keep_archived_for_s,
                 "delete an archived job's record and history from the "
                 "store this long after it ended; seconds, or with a unit "
                 "(default 0: kept for ever)")
      ->transform(duration)
      ->type_name("DURATION");
  app.add_option("--retention-check", o.retention_check_s,
                 "how often the limits of --keep-ended-jobs, "
                 "--keep-ended-for and --keep-archived-for are applied "
                 "between compactions; seconds, or with a unit")
      ->transform(duration)
      ->type_name("DURATION")
      ->capture_default_str();
  app.add_option("--probe-delay-s", o.probe_delay_s,
                 "measure a mechanism's effect on the rate this long after")
      ->capture_default_str();
  app.add_option("--warm-ready-timeout-s", o.warm_ready_timeout_s,
                 "a migration checkpoints the job once its warm-started "
                 "process waits for the checkpoint, or after this long")
      ->capture_default_str();
  app.add_flag("-v,--verbose", o.verbose, "log events and actions to stderr");
  // For tests (not listed): SchedulerOptions::verify_reused_job_info.
  app.add_flag("--verify-reused-job-info", o.verify_reused_job_info)->group("");
  CLI11_PARSE(app, argc, argv);
  if (policy_opt->count() > 0) o.policy = policy;
  if (quantum_opt->count() > 0) o.quantum_s = quantum_s;
  if (half_life_opt->count() > 0) o.share_half_life_s = half_life_s;
  if (height_opt->count() > 0) o.max_height = max_height;
  if (attempts_opt->count() > 0) o.start_attempts = start_attempts;
  if (retry_opt->count() > 0) o.start_retry_s = start_retry_s;
  if (settle_opt->count() > 0) o.pack_settle_s = pack_settle_s;
  if (keep_opt->count() > 0) o.pack_keep_above = keep_above;
  if (!queues_file.empty()) {
    auto queues = gandiva::config::LoadQueuesFile(queues_file);
    if (!queues.ok()) {
      std::fprintf(stderr, "gandiva-scheduler: --queues: %s\n",
                   queues.status().message().c_str());
      return 2;
    }
    o.queues = std::move(*queues);
  }

  // Block the signals before any thread starts, so they reach sigwait only.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  StopOnSignal();
  auto fail = [](const gandiva::core::Status& s) {
    std::fprintf(stderr, "gandiva-scheduler: %s\n", s.ToString().c_str());
    return 1;
  };

  if (o.listen.empty()) {
    // The library takes an empty address as "in this process only".
    return fail(
        gandiva::core::InvalidArgument("--listen: expected HOST:PORT, got ''"));
  }

  if (!backup_to.empty()) {
    if (!etcd.empty()) {
      return fail(gandiva::core::InvalidArgument(
          "--backup-to copies a --db store; an etcd store is backed up with "
          "etcd's own `etcdctl snapshot save`"));
    }
    auto b = gandiva::runtime::BackupDatabase(o.db_path, backup_to);
    if (!b.ok()) return fail(b.status());
    std::printf(
        "gandiva-scheduler: backed up '%s' to '%s': %s (ids up to %lld), "
        "%s in the log, %lld bytes\n",
        o.db_path.c_str(), backup_to.c_str(), Count(b->jobs, "job").c_str(),
        static_cast<long long>(b->last_job_id),
        Count(b->events, "event").c_str(), static_cast<long long>(b->bytes));
    return 0;
  }

  if (!restore_from.empty()) {
    if (!etcd.empty()) {
      return fail(gandiva::core::InvalidArgument(
          "--restore-from restores a --db store; an etcd store is restored "
          "with etcd's own `etcdctl snapshot restore`"));
    }
    auto r = gandiva::runtime::RestoreDatabase(o.db_path, restore_from);
    if (!r.ok()) return fail(r.status());
    std::printf(
        "gandiva-scheduler: restored '%s' from '%s': %s (ids up to %lld)\n",
        o.db_path.c_str(), restore_from.c_str(), Count(r->jobs, "job").c_str(),
        static_cast<long long>(r->last_job_id));
    if (r->lost_last > 0) {
      const std::string lost =
          r->lost_first == r->lost_last
              ? "job " + std::to_string(r->lost_first) +
                    ", submitted after "
                    "the backup, is lost; its id is"
              : "jobs " + std::to_string(r->lost_first) + "-" +
                    std::to_string(r->lost_last) +
                    ", submitted after the backup, are lost; their ids are";
      std::printf("gandiva-scheduler: %s not given again\n", lost.c_str());
    }
    return 0;
  }

  std::shared_ptr<gandiva::runtime::Leadership> lead;
  if (!etcd.empty()) {
    if (db_opt->count() > 0) {
      return fail(gandiva::core::InvalidArgument(
          "--db and --etcd: the state is in one of them, give one"));
    }
    auto tls = gandiva::runtime::LoadTls(etcd_tls, "--etcd-tls-");
    if (!tls.ok()) return fail(tls.status());
    auto client = gandiva::runtime::EtcdClient::Create(etcd, *tls);
    if (!client.ok()) return fail(client.status());
    lead_opts.identity = "gandiva-scheduler pid " + std::to_string(::getpid()) +
                         " on " + Hostname() + " (--listen " + o.listen + ")";
    auto l = gandiva::runtime::Leadership::Create(*client, lead_opts);
    if (!l.ok()) return fail(l.status());
    lead = *l;
    OnStop([lead] { lead->Cancel(); });
    lead->OnPause([](bool paused, const std::string& why) {
      std::fprintf(stderr, "gandiva-scheduler: %s%s\n",
                   paused ? "paused: " : "", why.c_str());
    });
  }

  // Without etcd: serve once. With it: campaign, lead until the lead is
  // lost, then stand by again, until a signal stops it.
  for (;;) {
    if (lead) {
      std::fprintf(stderr,
                   "gandiva-scheduler: campaigning to lead etcd prefix '%s' "
                   "at %s\n",
                   lead_opts.prefix.c_str(), etcd.c_str());
      const gandiva::core::Status won =
          lead->Campaign([](const std::string& note) {
            std::fprintf(stderr, "gandiva-scheduler: %s\n", note.c_str());
          });
      if (!won.ok()) return 0;  // stopped by a signal while standing by
      std::fprintf(stderr, "gandiva-scheduler: leading etcd prefix '%s'\n",
                   lead_opts.prefix.c_str());
      o.leadership = lead;
    }

    auto server = gandiva::runtime::SchedulerServer::Start(o);
    if (!server.ok()) {
      if (lead) lead->Resign();
      return fail(server.status());
    }
    std::fprintf(stderr, "gandiva-scheduler: serving on %s (policy %s, %s)\n",
                 (*server)->address().c_str(), (*server)->policy().c_str(),
                 lead ? ("etcd prefix '" + lead_opts.prefix + "'").c_str()
                      : ("db " + o.db_path).c_str());
    gandiva::runtime::SchedulerServer* raw = server->get();
    std::atomic<bool> stopping{false};
    OnStop([raw, &stopping, lead] {
      stopping = true;
      if (lead) lead->Cancel();
      raw->Shutdown();
    });
    std::atomic<bool> lost{false};
    if (lead) {
      lead->OnLost([raw, &lost](const std::string& why) {
        std::fprintf(stderr,
                     "gandiva-scheduler: lost the lead (%s); stopping "
                     "serving: a standby takes over, and this daemon stands "
                     "by\n",
                     why.c_str());
        lost = true;
        raw->Shutdown();
      });
    }
    (*server)->Wait();
    OnStop(lead ? std::function<void()>([lead] { lead->Cancel(); })
                : std::function<void()>());
    if (lead) {
      lead->OnLost(nullptr);
      // A clean stop hands over at once; after a lost lead there is nothing
      // to hand.
      if (!lost) lead->Resign();
    }
    server->reset();
    if (!lead || !lost || stopping) {
      if (lead) lead->StopRenewing();
      return 0;
    }
  }
}
