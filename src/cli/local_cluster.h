// The local cluster's record: what `gandiva up` started (a scheduler daemon
// and N agents as background processes) and where, kept in the state
// directory so that later commands find the daemon and `gandiva down` stops
// exactly those processes.
//
// State directory layout:
//   cluster          this record (text, one process per line; see below)
//   scheduler.addr   the daemon's HOST:PORT (gandiva-scheduler --address-file)
//   scheduler.db     the daemon's SQLite store (kept by `down`, removed by
//                    `down --purge`)
//   admin.cred       the admin's credential (mode 0600; the daemon's
//                    --credentials-dir is this directory), and
//   agent.cred       the agents'; kept by `down`, removed by `--purge`
//   logs/            scheduler.log, agent-<i>.log (stdout and stderr)
//   agents/agent-<i> each agent's --work-dir (job logs; checkpoints too
//                    when there is no /dev/shm ramdisk for them)
//   checkpoints/     while the cluster is down: the agents' checkpoints,
//                    moved off the ramdisk by `down`, back by `up`
//   shape            how many agents with how many GPUs (kept by `down`, so
//                    that `up` without flags starts the same servers again)
//
// Record format, one line per process:
//   scheduler <pid> <host:port>
//   agent <pid> <name>
// Shape format, one setting per line:
//   agents <n>
//   gpus-per-agent <n>
//   real-gpus <0|1>
// Lines starting with '#' are comments. Plain functions: thread-compatible.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace gandiva::cli {

struct ClusterProcess {
  std::string role;  // "scheduler" or "agent"
  pid_t pid = 0;
  std::string name;  // scheduler: its address; agent: its --name
};

struct ClusterRecord {
  std::vector<ClusterProcess> processes;
  const ClusterProcess* scheduler() const;
};

std::string ClusterRecordPath(const std::string& state_dir);
// nullopt when there is no record (never started, or stopped).
std::optional<ClusterRecord> ReadClusterRecord(const std::string& state_dir);
core::Status WriteClusterRecord(const std::string& state_dir,
                                const ClusterRecord& record);

// The servers a local cluster was set up with. The daemon's database
// keeps each server's GPUs (an agent cannot register again with other
// GPUs), so a later `up` starts the same agents unless told otherwise.
struct ClusterShape {
  int agents = 2;
  int gpus_per_agent = 2;
  bool real_gpus = false;
};

std::string ClusterShapePath(const std::string& state_dir);
// nullopt when there is none (a new state directory, or one from before
// shapes were kept); an error naming the file, line and field when it
// cannot be read.
core::StatusOr<std::optional<ClusterShape>> ReadClusterShape(
    const std::string& state_dir);
core::Status WriteClusterShape(const std::string& state_dir,
                               const ClusterShape& shape);

// True when `pid` is alive and runs the binary named `binary`
// (gandiva-scheduler or gandiva-agent): a recycled pid is never signalled.
bool ProcessRuns(pid_t pid, const std::string& binary);

// The binary a role runs: "gandiva-scheduler" or "gandiva-agent".
std::string BinaryOf(const ClusterProcess& p);

}  // namespace gandiva::cli
