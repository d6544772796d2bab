#include "runtime/agent/process_ops.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace gandiva::runtime {
namespace {

class RealOps final : public ProcessOps {
 public:
  int Kill(pid_t pid, int sig) override {
    return kill(pid, sig) == 0 ? 0 : errno;
  }
  int Spawn(pid_t* pid, const char* path,
            const posix_spawn_file_actions_t* file_actions,
            const posix_spawnattr_t* attr, char* const argv[],
            char* const envp[]) override {
    return posix_spawn(pid, path, file_actions, attr, argv, envp);
  }
  std::optional<ProcInfo> Stat(pid_t pid) override { return ReadProcStat(pid); }
  std::vector<pid_t> ListPids() override { return ListProcPids(); }
};

}  // namespace

std::vector<ProcInfo> ProcessOps::GroupProcesses(pid_t pgid) {
  std::vector<ProcInfo> out;
  for (pid_t pid : ListPids()) {
    auto st = Stat(pid);
    if (st && st->pgrp == pgid) out.push_back(*st);
  }
  return out;
}

std::vector<pid_t> ProcessOps::GroupMembers(pid_t pgid) {
  std::vector<pid_t> out;
  for (const ProcInfo& p : GroupProcesses(pgid)) {
    if (!IsDeadState(p.state)) out.push_back(p.pid);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool ProcessOps::GroupStopped(pid_t pgid) {
  return RunningMembers(GroupProcesses(pgid)).empty();
}

std::string ProcessOps::RunningInGroup(pid_t pgid) {
  return DescribeProcesses(RunningMembers(GroupProcesses(pgid)));
}

bool ProcessOps::IsStopped(pid_t pid) {
  const std::optional<ProcInfo> st = Stat(pid);
  return st && st->state == 'T';
}

std::shared_ptr<ProcessOps> RealProcessOps() {
  static const std::shared_ptr<ProcessOps> real = std::make_shared<RealOps>();
  return real;
}

ProcessOpsWrapper::ProcessOpsWrapper(std::shared_ptr<ProcessOps> target)
    : target_(target ? std::move(target) : RealProcessOps()) {}

int ProcessOpsWrapper::Kill(pid_t pid, int sig) {
  return target_->Kill(pid, sig);
}

int ProcessOpsWrapper::Spawn(pid_t* pid, const char* path,
                             const posix_spawn_file_actions_t* file_actions,
                             const posix_spawnattr_t* attr, char* const argv[],
                             char* const envp[]) {
  return target_->Spawn(pid, path, file_actions, attr, argv, envp);
}

std::optional<ProcInfo> ProcessOpsWrapper::Stat(pid_t pid) {
  return target_->Stat(pid);
}

std::vector<pid_t> ProcessOpsWrapper::ListPids() { return target_->ListPids(); }

std::vector<pid_t> ProcessGroupMembers(pid_t pgid) {
  return RealProcessOps()->GroupMembers(pgid);
}

bool ProcessGroupStopped(pid_t pgid) {
  return RealProcessOps()->GroupStopped(pgid);
}

}  // namespace gandiva::runtime
