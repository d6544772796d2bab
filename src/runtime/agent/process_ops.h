// ProcessOps: the process operations the supervisor uses to act on and look
// at its jobs' processes: sending signals (kill(2)), spawning (posix_spawn),
// and reading /proc (a process's stat, the pids listed). The supervisor makes
// every such call through the ProcessOps of its options
// (SupervisorOptions::process_ops; the real one, RealProcessOps, by default),
// so that a test can fail any of them: derive from ProcessOpsWrapper, which
// forwards to the real calls, and override the ones to fault. Waiting for and
// reaping children (waitid, waitpid) is not part of it: the supervisor
// calls those itself.
//
// The non-virtual helpers (GroupProcesses, GroupStopped, ...) are built on
// the virtual calls, so a fault in Stat or ListPids shows in them.
//
// Thread-safety: implementations must be thread-safe; the supervisor calls
// them from its callers' threads and its waiter threads at once.
#pragma once

#include <spawn.h>
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/agent/proc_stat.h"

namespace gandiva::runtime {

class ProcessOps {
 public:
  virtual ~ProcessOps() = default;

  // kill(2): `sig` to `pid` (negative: to process group -pid; sig 0: only
  // checks that it exists). 0 on success, else the errno.
  virtual int Kill(pid_t pid, int sig) = 0;
  // posix_spawn(3), with its arguments and result (0, or an error number).
  virtual int Spawn(pid_t* pid, const char* path,
                    const posix_spawn_file_actions_t* file_actions,
                    const posix_spawnattr_t* attr, char* const argv[],
                    char* const envp[]) = 0;
  // /proc/<pid>/stat (ReadProcStat); nullopt when the process is gone or
  // its stat cannot be read.
  virtual std::optional<ProcInfo> Stat(pid_t pid) = 0;
  // The pids /proc lists (ListProcPids); empty when /proc cannot be read.
  virtual std::vector<pid_t> ListPids() = 0;

  // Every process of group `pgid` (ListPids, then Stat of each).
  std::vector<ProcInfo> GroupProcesses(pid_t pgid);
  // The pids of group `pgid` that are not zombies, sorted.
  std::vector<pid_t> GroupMembers(pid_t pgid);
  // True when no member of group `pgid` still runs (RunningMembers); true
  // for an empty group, and so when /proc cannot be read.
  bool GroupStopped(pid_t pgid);
  // The members of group `pgid` that still run, as DescribeProcesses says.
  std::string RunningInGroup(pid_t pgid);
  // True when `pid` is stopped by a signal (state 'T'), as
  // client::ProcessIsStopped; false when it cannot be read.
  bool IsStopped(pid_t pid);
};

// The real calls. The same instance every time; never null.
std::shared_ptr<ProcessOps> RealProcessOps();

// Forwards every call to `target` (the real calls when null). Derive from it
// to fault some calls and keep the others real.
class ProcessOpsWrapper : public ProcessOps {
 public:
  explicit ProcessOpsWrapper(std::shared_ptr<ProcessOps> target = nullptr);

  int Kill(pid_t pid, int sig) override;
  int Spawn(pid_t* pid, const char* path,
            const posix_spawn_file_actions_t* file_actions,
            const posix_spawnattr_t* attr, char* const argv[],
            char* const envp[]) override;
  std::optional<ProcInfo> Stat(pid_t pid) override;
  std::vector<pid_t> ListPids() override;

 private:
  const std::shared_ptr<ProcessOps> target_;
};

// Processes whose process group is `pgid`, not zombies, sorted (scans /proc
// with the real calls).
std::vector<pid_t> ProcessGroupMembers(pid_t pgid);
// True when every process of group `pgid` is stopped (or a zombie), counting
// a process in uninterruptible sleep with a stopped child as stopped (a
// vfork() parent waiting for a child stopped before exec); true for an empty
// group. The real calls.
bool ProcessGroupStopped(pid_t pgid);

}  // namespace gandiva::runtime
