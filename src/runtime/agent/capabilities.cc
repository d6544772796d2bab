#include "runtime/agent/capabilities.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/exec_env.h"

namespace gandiva::runtime {

void ProbeMps(Capabilities* caps) {
  caps->mps = false;
  const char* pipe_env = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  const char* log_env = std::getenv("CUDA_MPS_LOG_DIRECTORY");
  const std::string pipe_dir =
      pipe_env && *pipe_env ? pipe_env : "/tmp/nvidia-mps";
  const std::string log_dir =
      log_env && *log_env ? log_env : "/var/log/nvidia-mps";
  const std::string control = FindOnPath("nvidia-cuda-mps-control");
  if (control.empty()) {
    caps->mps_detail = "nvidia-cuda-mps-control not found on PATH";
    return;
  }
  struct stat st;
  const std::string pipe = pipe_dir + "/control";
  // A FIFO in older drivers, a UNIX socket in newer ones.
  if (stat(pipe.c_str(), &st) != 0 ||
      !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
    caps->mps_detail = control + " found, but no MPS control daemon: no pipe " +
                       pipe + " (start nvidia-cuda-mps-control -d)";
    return;
  }
  caps->mps = true;
  caps->mps_pipe_dir = pipe_dir;
  caps->mps_log_dir = log_dir;
  caps->mps_detail = "control daemon pipe " + pipe + " (" + control + ")";
}

}  // namespace gandiva::runtime
