// Supervisor::JobRec and the helpers the supervisor's files share
// (supervisor.cc, supervisor_spawn.cc, supervisor_signals.cc,
// supervisor_checkpoint.cc); not for use outside the supervisor.
#pragma once

#include <sys/mman.h>
#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/progress_page.h"
#include "client/progress_reader.h"
#include "runtime/agent/supervisor.h"

namespace gandiva::runtime {
namespace supervisor_internal {

using Clock = std::chrono::steady_clock;

inline int64_t MicrosSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() -
                                                               t0)
      .count();
}

inline std::string Errno(int err) { return std::strerror(err); }

inline uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

inline int64_t NsToUs(uint64_t later, uint64_t earlier) {
  return later > earlier ? static_cast<int64_t>((later - earlier) / 1000) : 0;
}

inline std::string JobIdText(int64_t job_id) {
  return "job " + std::to_string(job_id);
}

}  // namespace supervisor_internal

struct Supervisor::JobRec {
  int64_t job_id = 0;
  int64_t submitted_us = 0;  // StartParams::submitted_us
  std::string spec;          // StartParams::spec
  pid_t pid = 0;             // child and process group id
  // Started through the shim (SupervisorOptions::job_shim): the shim's pid
  // (our child, or not when taken back) and where it writes the job's exit
  // code; 0 and "" otherwise (pid is then our child).
  pid_t shim_pid = 0;
  unsigned long long shim_starttime = 0;  // from /proc/<pid>/stat
  std::string exit_file;
  bool taken_back = false;  // TakeBackLeftovers adopted it
  std::vector<int> gpus;
  std::string log_path;
  std::string page_path;
  std::optional<client::ProgressReader> reader;  // set before publication
  Clock::time_point started = Clock::now();
  uint64_t started_ns = 0;  // CLOCK_MONOTONIC, as the page's times
  // The page mapped read-only for what ProgressReader does not show
  // (state_changed_ns); null if that failed.
  const gandiva_progress_page* raw_page = nullptr;
  ~JobRec() {
    if (raw_page != nullptr) {
      munmap(const_cast<gandiva_progress_page*>(raw_page),
             GANDIVA_PAGE_FILE_SIZE);
    }
  }
  bool restartable = false;
  bool warm = false;
  // Restored by CRIU: it ran without the library before, so it is not
  // waited for to attach (library_start_grace).
  bool without_library = false;
  bool gang = false;  // one part of a multi-server job (StartParams.gang_env)
  std::thread waiter;
  std::mutex action_mu;  // serialises Suspend/Resume/Kill of this job
  std::atomic<bool> exited{false};
  // Set while Checkpoint() has asked the job to save and exit: its exit
  // leaves a checkpoint to keep.
  std::atomic<bool> checkpointing{false};
  // Set by Kill(): the daemon asked for its end (ExitRecord::killed).
  std::atomic<bool> kill_requested{false};
  // Killed as a failure elsewhere (Kill's keep_periodic): its periodic
  // checkpoint is kept.
  std::atomic<bool> kill_keeps_periodic{false};
  // Set by KillAll(agent_stopping): killed because the agent stops.
  std::atomic<bool> killed_for_stop{false};
  // Guarded by Supervisor::mu_.
  RunState state = RunState::kRunning;
  int exit_code = 0;
  bool suspended_by_library = false;
  pid_t library_pid = 0;
};

}  // namespace gandiva::runtime
