// Reading processes from /proc for the supervisor: one process's
// /proc/<pid>/stat (state, parent, process group, start time), the pids
// /proc lists, and what a process group's states say (stopped, still
// running). The supervisor reads /proc through ProcessOps
// (process_ops.h), whose real implementation calls these.
//
// Thread-safety: all functions are thread-safe (they keep no state).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace gandiva::runtime {

// One process as /proc/<pid>/stat shows it.
struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  char state = 0;  // as in /proc/<pid>/stat: R, S, D, T, t, Z, ...
  // Clock ticks after boot when it started: with the pid, names one
  // process (pids are reused).
  unsigned long long starttime = 0;
};

// One process from /proc/<pid>/stat; nullopt if gone (or unreadable).
std::optional<ProcInfo> ReadProcStat(pid_t pid);
// Every pid /proc lists, in its order; empty when /proc cannot be read.
std::vector<pid_t> ListProcPids();

// Stopped by a signal ('T') or by tracing ('t').
inline bool IsStoppedState(char s) { return s == 'T' || s == 't'; }
// A zombie ('Z') or dead ('X').
inline bool IsDeadState(char s) { return s == 'Z' || s == 'X'; }

// The members of a group that still run. A process in uninterruptible sleep
// whose child is stopped counts as stopped: a shell that vfork()ed (dash
// does) waits in state D until its child execs, and cannot take its own
// SIGSTOP while that child is stopped before exec; it runs nothing until
// SIGCONT either.
std::vector<ProcInfo> RunningMembers(const std::vector<ProcInfo>& group);
// "pid 12 (S), pid 13 (R)": the processes given, with their states.
std::string DescribeProcesses(const std::vector<ProcInfo>& processes);

}  // namespace gandiva::runtime
