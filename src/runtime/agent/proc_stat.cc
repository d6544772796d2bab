#include "runtime/agent/proc_stat.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gandiva::runtime {

std::optional<ProcInfo> ReadProcStat(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  const char* close_paren = std::strrchr(buf, ')');
  if (close_paren == nullptr) return std::nullopt;
  char state = 0;
  int ppid = 0;
  int pgrp = 0;
  unsigned long long starttime = 0;
  // Fields 3-5, then 6-21 skipped, then 22 (starttime); see proc(5).
  if (std::sscanf(close_paren + 1,
                  " %c %d %d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                  "%*d %*d %*d %*d %llu",
                  &state, &ppid, &pgrp, &starttime) < 3) {
    return std::nullopt;
  }
  return ProcInfo{pid, static_cast<pid_t>(ppid), static_cast<pid_t>(pgrp),
                  state, starttime};
}

std::vector<pid_t> ListProcPids() {
  std::vector<pid_t> out;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == nullptr || *end != '\0') continue;
    out.push_back(static_cast<pid_t>(pid));
  }
  closedir(dir);
  return out;
}

std::vector<ProcInfo> RunningMembers(const std::vector<ProcInfo>& group) {
  std::vector<ProcInfo> out;
  for (const ProcInfo& p : group) {
    if (IsStoppedState(p.state) || IsDeadState(p.state)) continue;
    const bool vfork_parent =
        p.state == 'D' &&
        std::any_of(group.begin(), group.end(), [&](const ProcInfo& c) {
          return c.ppid == p.pid && IsStoppedState(c.state);
        });
    if (!vfork_parent) out.push_back(p);
  }
  return out;
}

std::string DescribeProcesses(const std::vector<ProcInfo>& processes) {
  std::string out;
  for (const ProcInfo& p : processes) {
    if (!out.empty()) out += ", ";
    out += "pid " + std::to_string(p.pid) + " (" + p.state + ")";
  }
  return out;
}

}  // namespace gandiva::runtime
