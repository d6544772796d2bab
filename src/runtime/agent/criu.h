// CRIU for the node agent: the trial that says whether CRIU works on this
// server, and the dump and restore of a job that has neither the job-side
// library nor checkpoints of its own (generic migration).
//
// A dump (`criu dump --shell-job` of the job's process tree) freezes the
// tree, writes its images and kills it; the images go into a directory of
// the job's checkpoint, with a small file `gandiva-criu` that says what the
// restore needs to recreate: the working directory and the log file the
// process had open for stdout/stderr. A restore (`criu restore
// --restore-detached --restore-sibling`) brings the tree back as a child of
// this process (so waitpid gives its exit status), with the PIDs it had,
// its stdout/stderr the log the caller opened (`--inherit-fd`), and its
// working directory created at the same path when it is missing (its
// contents do not move). Everything else the process uses must be at the
// same paths on both servers: its executable and libraries, files it holds
// open. CUDA state is not handled: without CRIU's CUDA plugin a process
// holding a GPU is expected to fail its dump (and then runs on).
// Every criu command runs with CRIU_FAULT=130 (no hardware breakpoints):
// without it dumps hang on some kernels.
//
// Thread-safety: all functions are thread-safe; they start and reap their
// own children only (waitpid on those pids).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/agent/capabilities.h"

namespace gandiva::runtime {

// CRIU: usable only if `criu` is on PATH and a trial dump of a `sleep 30`
// child and its restore (as the agent does them) succeed within `timeout`
// each. Sets criu, criu_detail and criu_path.
void ProbeCriu(Capabilities* caps, std::chrono::milliseconds timeout);

// What a dump records beside the images, for the restore.
struct CriuImageInfo {
  pid_t pid = 0;         // the dumped tree's root (and its process group)
  std::string cwd;       // its working directory
  std::string log_path;  // the file its stdout/stderr wrote to
};

struct CriuDumpResult {
  int64_t dump_us = 0;  // the criu dump command, start to end
};

// The directory a job's CRIU images go in, inside its checkpoint directory.
std::string CriuImagesDir(const std::string& checkpoint_dir);
// True when `checkpoint_dir` holds a complete CRIU dump (its gandiva-criu).
bool HoldsCriuImages(const std::string& checkpoint_dir);
core::StatusOr<CriuImageInfo> ReadCriuImageInfo(
    const std::string& checkpoint_dir);

// Dumps the process tree rooted at `pid` (a job's process group leader,
// stdout/stderr to `log_path`) into CriuImagesDir(checkpoint_dir), which is
// emptied first; the tree is killed once dumped. On failure the tree runs on
// as it was (CRIU thaws it), the partial images are removed, and the error
// (kFailedPrecondition) carries criu's error line; kUnavailable when criu
// did not finish within `timeout`.
core::StatusOr<CriuDumpResult> CriuDump(const std::string& criu, pid_t pid,
                                        const std::string& log_path,
                                        const std::string& checkpoint_dir,
                                        std::chrono::milliseconds timeout);

struct CriuRestoreResult {
  pid_t pid = 0;           // the restored root, a child of this process
  int64_t restore_us = 0;  // the successful criu restore command
  int attempts = 1;        // > 1: its PID was still taken at first
};

// Restores the tree dumped into `checkpoint_dir` as a child of this
// process, stdout/stderr on `log_fd` (open, append) instead of the log it
// had. When its PID is still taken (a zombie of the dumped run not yet
// reaped), tries again until `pid_wait` has passed. kFailedPrecondition with
// criu's error line (naming the PID when it is in use); kUnavailable when
// criu did not finish within `timeout`.
core::StatusOr<CriuRestoreResult> CriuRestore(
    const std::string& criu, const std::string& checkpoint_dir, int log_fd,
    std::chrono::milliseconds timeout, std::chrono::milliseconds pid_wait);

}  // namespace gandiva::runtime
