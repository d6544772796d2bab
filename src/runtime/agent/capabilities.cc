#include "runtime/agent/capabilities.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "runtime/exec_env.h"

namespace gandiva::runtime {
namespace {

using Clock = std::chrono::steady_clock;

struct RunResult {
  bool started = false;
  bool timed_out = false;
  int exit_code = -1;  // -N: killed by signal N
  std::string output;  // stdout and stderr together
};

// Runs argv (argv[0] a full path) with `env` added to ours, its output into
// `out_path`, bounded by `timeout` (then SIGKILLed). Reaps only its child.
RunResult Run(const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env,
              const std::string& out_path, std::chrono::milliseconds timeout) {
  RunResult r;
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (std::string& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  ExecEnv envp(env);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  ChildSpawnAttr attr;
  pid_t pid = 0;
  const int rc =
      posix_spawn(&pid, argv[0], &fa, attr.get(), argv.data(), envp.envp());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    r.output = std::string("cannot run ") + args[0] + ": " + std::strerror(rc);
    return r;
  }
  r.started = true;
  const auto end = Clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (Clock::now() >= end) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.exit_code = -WTERMSIG(status);
  std::ifstream in(out_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  return r;
}

// The last line that mentions an error, else the last non-empty line.
std::string ErrorLine(const std::string& text) {
  std::string last, error;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    last = line;
    if (line.find("Error") != std::string::npos ||
        line.find("error") != std::string::npos) {
      error = line;
    }
  }
  std::string s = error.empty() ? last : error;
  if (s.size() > 300) s = s.substr(0, 300) + "...";
  return s.empty() ? std::string("no output") : s;
}

std::string Describe(const RunResult& r, std::chrono::milliseconds timeout) {
  if (!r.started) return r.output;
  if (r.timed_out) {
    return "timed out after " + std::to_string(timeout.count()) + " ms";
  }
  return "exit " + std::to_string(r.exit_code) + ": " + ErrorLine(r.output);
}

std::string FileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string FindOnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::istringstream in(p);
  for (std::string dir; std::getline(in, dir, ':');) {
    if (dir.empty()) continue;
    const std::string full = dir + "/" + name;
    struct stat st;
    if (stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(full.c_str(), X_OK) == 0) {
      return full;
    }
  }
  return "";
}

void ProbeCriu(Capabilities* caps, std::chrono::milliseconds timeout) {
  caps->criu = false;
  const std::string criu = FindOnPath("criu");
  if (criu.empty()) {
    caps->criu_detail = "criu not found on PATH";
    return;
  }
  char tmpl[] = "/tmp/gandiva-criu-probe-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    caps->criu_detail = std::string("mkdtemp: ") + std::strerror(errno);
    return;
  }
  const std::string dir = tmpl;
  const std::string out = dir + "/out";
  RunResult v = Run({criu, "--version"}, {}, out, timeout);
  std::string version = ErrorLine(v.output);
  if (!v.started || v.timed_out || v.exit_code != 0) {
    caps->criu_detail = "criu --version failed (" + Describe(v, timeout) + ")";
    std::filesystem::remove_all(dir);
    return;
  }
  // A throw-away child to dump and restore.
  const std::string sleep_bin = FindOnPath("sleep");
  std::string arg0 = sleep_bin.empty() ? "/bin/sleep" : sleep_bin;
  std::string arg1 = "30";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  ChildSpawnAttr attr;
  pid_t child = 0;
  ExecEnv env({});
  const int rc =
      posix_spawn(&child, arg0.c_str(), nullptr, attr.get(), argv, env.envp());
  if (rc != 0) {
    caps->criu_detail =
        "cannot start a trial process: " + std::string(std::strerror(rc));
    std::filesystem::remove_all(dir);
    return;
  }
  const std::string images = dir + "/images";
  std::filesystem::create_directories(images);
  RunResult d = Run({criu, "dump", "-t", std::to_string(child), "--images-dir",
                     images, "--shell-job", "-o", "dump.log"},
                    {{"CRIU_FAULT", "130"}}, out, timeout);
  kill(child, SIGKILL);  // a dump kills it; this is for a failed one
  waitpid(child, nullptr, 0);
  // A failed step: its reason (the error line of its log when it wrote
  // one) goes into criu_detail. True if `step` failed.
  auto failed = [&](const RunResult& res, const std::string& step) {
    if (res.started && !res.timed_out && res.exit_code == 0) return false;
    std::string why = Describe(res, timeout);
    const std::string log = FileText(images + "/" + step + ".log");
    if (!log.empty())
      why = "exit " + std::to_string(res.exit_code) + ": " + ErrorLine(log);
    caps->criu_detail = version + ": trial " + step + " failed (" + why + ")";
    std::filesystem::remove_all(dir);
    return true;
  };
  if (failed(d, "dump")) return;
  RunResult r = Run({criu, "restore", "-d", "--images-dir", images,
                     "--shell-job", "-o", "restore.log"},
                    {}, out, timeout);
  kill(child, SIGKILL);  // the restored process has the same pid
  if (failed(r, "restore")) return;
  caps->criu = true;
  caps->criu_detail = version;
  std::filesystem::remove_all(dir);
}

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
