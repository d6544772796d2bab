// What this server can do beyond the basics, found once when the agent
// starts: whether CRIU can checkpoint and restore a process here (a trial
// dump and restore of a throw-away child: ProbeCriu in criu.h), and whether
// an NVIDIA MPS control daemon is reachable (so that jobs packed on one GPU
// can share it under MPS). Sent to the daemon in RegisterAgent and Status.
//
// Thread-safety: the probes are thread-safe (no shared state).
#pragma once

#include <chrono>
#include <string>

namespace gandiva::runtime {

struct Capabilities {
  bool criu = false;
  std::string criu_detail = "not checked yet";  // why not, or the version
  std::string criu_path;  // when criu: the binary the agent runs
  bool mps = false;
  std::string mps_detail = "not checked yet";
  // When mps: the environment packed jobs get.
  std::string mps_pipe_dir;
  std::string mps_log_dir;
};

// MPS: usable if `nvidia-cuda-mps-control` is on PATH and the pipe directory
// ($CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps) has a `control` pipe
// (a FIFO or, in newer drivers, a socket).
// Sets mps, mps_detail, mps_pipe_dir and mps_log_dir
// ($CUDA_MPS_LOG_DIRECTORY, else /var/log/nvidia-mps).
void ProbeMps(Capabilities* caps);

}  // namespace gandiva::runtime
