#include "runtime/agent/criu.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/exec_env.h"

namespace gandiva::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Without it, dumps hang on some kernels (hardware breakpoints).
const std::map<std::string, std::string> kCriuEnv = {{"CRIU_FAULT", "130"}};
constexpr char kInfoFile[] = "gandiva-criu";
constexpr int kInheritedFd = 3;  // where a restore's log fd is passed

int64_t MicrosSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() -
                                                               t0)
      .count();
}

// File actions for a child: stdin /dev/null, stdout and stderr to `path`
// (opened with `flags`, created with mode 0644).
void StdioTo(posix_spawn_file_actions_t* fa, const std::string& path,
             int flags) {
  posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(fa, 1, path.c_str(), O_WRONLY | flags, 0644);
  posix_spawn_file_actions_adddup2(fa, 1, 2);
}

struct RunResult {
  bool started = false;
  bool timed_out = false;
  int exit_code = -1;  // -N: killed by signal N
  std::string output;  // stdout and stderr together
};

// Runs argv (argv[0] a full path) with `env` added to ours, its output into
// `out_path`, bounded by `timeout` (then its group is SIGKILLed). With
// pass_fd >= 0 the child gets that file as fd 3. Reaps only its child.
RunResult Run(const std::vector<std::string>& args,
              const std::map<std::string, std::string>& env,
              const std::string& out_path, std::chrono::milliseconds timeout,
              int pass_fd = -1) {
  RunResult r;
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (std::string& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  ExecEnv envp(env);
  // A descriptor above 3, so that dup2 onto 3 clears its close-on-exec.
  int passed = -1;
  if (pass_fd >= 0) {
    passed = fcntl(pass_fd, F_DUPFD_CLOEXEC, kInheritedFd + 1);
    if (passed < 0) {
      r.output = std::string("cannot pass the log to ") + args[0] + ": " +
                 std::strerror(errno);
      return r;
    }
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  StdioTo(&fa, out_path, O_CREAT | O_TRUNC);
  if (passed >= 0) posix_spawn_file_actions_adddup2(&fa, passed, kInheritedFd);
  // Nothing else of ours: a socket the child inherited would make criu's
  // own process, or the tree it restores, hold it.
  posix_spawn_file_actions_addclosefrom_np(
      &fa, passed >= 0 ? kInheritedFd + 1 : kInheritedFd);
  ChildSpawnAttr attr;
  pid_t pid = 0;
  const int rc =
      posix_spawn(&pid, argv[0], &fa, attr.get(), argv.data(), envp.envp());
  posix_spawn_file_actions_destroy(&fa);
  if (passed >= 0) close(passed);
  if (rc != 0) {
    r.output = std::string("cannot run ") + args[0] + ": " + std::strerror(rc);
    return r;
  }
  r.started = true;
  const auto end = Clock::now() + timeout;
  int status = 0;
  auto pause = std::chrono::microseconds(200);
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
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2,
                                                std::chrono::milliseconds(10));
  }
  ReapEndedInGroup(pid);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.exit_code = -WTERMSIG(status);
  std::ifstream in(out_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.output = ss.str();
  return r;
}

bool Succeeded(const RunResult& r) {
  return r.started && !r.timed_out && r.exit_code == 0;
}

// The first line that mentions an error (CRIU's first is the cause; its
// last says only "Dumping FAILED."), else the last non-empty line.
std::string ErrorLine(const std::string& text) {
  std::string last, error;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    last = line;
    if (error.empty() && (line.find("Error") != std::string::npos ||
                          line.find("error") != std::string::npos)) {
      // CRIU warns of this on every run; it is not why a step failed.
      if (line.find("RLIMIT_NOFILE") == std::string::npos) error = line;
    }
  }
  std::string s = error.empty() ? last : error;
  if (s.size() > 300) {
    s.resize(300);
    s += "...";
  }
  return s.empty() ? std::string("no output") : s;
}

std::string FileText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Why a criu step failed: its log's error line when it wrote one.
std::string Why(const RunResult& r, const std::string& log_path,
                std::chrono::milliseconds timeout) {
  if (!r.started) return r.output;
  if (r.timed_out) {
    return "timed out after " + std::to_string(timeout.count()) + " ms";
  }
  const std::string log = FileText(log_path);
  return "exit " + std::to_string(r.exit_code) + ": " +
         ErrorLine(log.empty() ? r.output : log);
}

std::string Readlink(const std::string& path) {
  char buf[PATH_MAX];
  const ssize_t n = readlink(path.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

void ProbeCriu(Capabilities* caps, std::chrono::milliseconds timeout) {
  caps->criu = false;
  caps->criu_path.clear();
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
  if (!Succeeded(v)) {
    caps->criu_detail = "criu --version failed (" + Why(v, out, timeout) + ")";
    std::filesystem::remove_all(dir);
    return;
  }
  if (version.rfind("Version: ", 0) == 0) version = "criu " + version.substr(9);
  // A throw-away child to dump and restore, the way jobs are: its own
  // process group, output to a log that the restore replaces.
  const std::string sleep_bin = FindOnPath("sleep");
  std::string arg0 = sleep_bin.empty() ? "/bin/sleep" : sleep_bin;
  std::string arg1 = "30";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  const std::string log = dir + "/log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  StdioTo(&fa, log, O_CREAT | O_APPEND);
  // Only stdio, as a job has (Supervisor::Start): an inherited connected
  // socket would fail the trial dump ("Connected TCP socket").
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  ChildSpawnAttr attr;
  pid_t child = 0;
  ExecEnv env({});
  const int rc =
      posix_spawn(&child, arg0.c_str(), &fa, attr.get(), argv, env.envp());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    caps->criu_detail =
        "cannot start a trial process: " + std::string(std::strerror(rc));
    std::filesystem::remove_all(dir);
    return;
  }
  const std::string ckpt = dir + "/checkpoint";
  auto d = CriuDump(criu, child, log, ckpt, timeout);
  kill(child, SIGKILL);  // a dump kills it; this is for a failed one
  waitpid(child, nullptr, 0);
  if (!d.ok()) {
    caps->criu_detail = version + ": trial dump failed (" +
                        std::string(d.status().message()) + ")";
    std::filesystem::remove_all(dir);
    return;
  }
  const int log_fd = open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  auto r = CriuRestore(criu, ckpt, log_fd, timeout, timeout);
  if (log_fd >= 0) close(log_fd);
  if (!r.ok()) {
    caps->criu_detail = version + ": trial restore failed (" +
                        std::string(r.status().message()) + ")";
    std::filesystem::remove_all(dir);
    return;
  }
  kill(r->pid, SIGKILL);
  waitpid(r->pid, nullptr, 0);  // restored as our child
  caps->criu = true;
  caps->criu_path = criu;
  caps->criu_detail = version;
  std::filesystem::remove_all(dir);
}

std::string CriuImagesDir(const std::string& checkpoint_dir) {
  return checkpoint_dir + "/criu";
}

bool HoldsCriuImages(const std::string& checkpoint_dir) {
  struct stat st;
  return stat((CriuImagesDir(checkpoint_dir) + "/" + kInfoFile).c_str(), &st) ==
             0 &&
         S_ISREG(st.st_mode);
}

core::StatusOr<CriuImageInfo> ReadCriuImageInfo(
    const std::string& checkpoint_dir) {
  const std::string path = CriuImagesDir(checkpoint_dir) + "/" + kInfoFile;
  std::ifstream in(path);
  if (!in) return core::NotFound("no CRIU dump in " + checkpoint_dir);
  CriuImageInfo info;
  for (std::string line; std::getline(in, line);) {
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;
    const std::string key = line.substr(0, sp), value = line.substr(sp + 1);
    if (key == "pid") {
      info.pid = static_cast<pid_t>(std::atol(value.c_str()));
    } else if (key == "cwd") {
      info.cwd = value;
    } else if (key == "log") {
      info.log_path = value;
    }
  }
  if (info.pid <= 0 || info.cwd.empty() || info.log_path.empty() ||
      info.cwd[0] != '/' || info.log_path[0] != '/') {
    return core::FailedPrecondition(path +
                                    ": needs pid, cwd and log (absolute)");
  }
  return info;
}

core::StatusOr<CriuDumpResult> CriuDump(const std::string& criu, pid_t pid,
                                        const std::string& log_path,
                                        const std::string& checkpoint_dir,
                                        std::chrono::milliseconds timeout) {
  const std::string images = CriuImagesDir(checkpoint_dir);
  const std::string cwd = Readlink("/proc/" + std::to_string(pid) + "/cwd");
  if (cwd.empty() || cwd[0] != '/') {
    return core::FailedPrecondition(
        "cannot read the working directory of pid " + std::to_string(pid));
  }
  if (cwd.find('\n') != std::string::npos ||
      log_path.find('\n') != std::string::npos || log_path.empty() ||
      log_path[0] != '/') {
    return core::FailedPrecondition(
        "its working directory or log path cannot be recorded");
  }
  std::error_code ec;
  std::filesystem::remove_all(images, ec);
  std::filesystem::create_directories(images, ec);
  if (ec) {
    return core::IoError("creating " + images + ": " + ec.message());
  }
  const auto t0 = Clock::now();
  const std::string out = images + "/dump.out";
  RunResult d = Run({criu, "dump", "-t", std::to_string(pid), "--images-dir",
                     images, "--shell-job", "-o", "dump.log"},
                    kCriuEnv, out, timeout);
  const int64_t dump_us = MicrosSince(t0);
  if (!Succeeded(d)) {
    const std::string why = Why(d, images + "/dump.log", timeout);
    std::filesystem::remove_all(images, ec);
    const std::string msg = "criu dump failed (" + why + ")";
    return d.timed_out ? core::Status(core::StatusCode::kUnavailable, msg)
                       : core::FailedPrecondition(msg);
  }
  unlink(out.c_str());
  {
    // Written last: its presence says the dump is complete.
    const std::string tmp = images + "/" + kInfoFile + ".tmp";
    std::ofstream f(tmp);
    f << "pid " << pid << "\ncwd " << cwd << "\nlog " << log_path << "\n";
    f.close();
    if (!f || rename(tmp.c_str(), (images + "/" + kInfoFile).c_str()) != 0) {
      std::filesystem::remove_all(images, ec);
      return core::IoError("writing " + tmp);
    }
  }
  return CriuDumpResult{dump_us};
}

core::StatusOr<CriuRestoreResult> CriuRestore(
    const std::string& criu, const std::string& checkpoint_dir, int log_fd,
    std::chrono::milliseconds timeout, std::chrono::milliseconds pid_wait) {
  auto info = ReadCriuImageInfo(checkpoint_dir);
  if (!info.ok()) return info.status();
  if (log_fd < 0) return core::InvalidArgument("log_fd: not open");
  const std::string images = CriuImagesDir(checkpoint_dir);
  std::error_code ec;
  // The working directory it had, at the same path (empty when created).
  std::filesystem::create_directories(info->cwd, ec);
  if (ec) {
    return core::FailedPrecondition("cannot create its working directory " +
                                    info->cwd + ": " + ec.message());
  }
  const std::string pidfile = images + "/restored.pid";
  const std::string out = images + "/restore.out";
  const std::string inherit =
      "fd[" + std::to_string(kInheritedFd) + "]:" + info->log_path.substr(1);
  const auto give_up = Clock::now() + pid_wait;
  CriuRestoreResult res;
  for (;; ++res.attempts) {
    unlink(pidfile.c_str());
    const auto t0 = Clock::now();
    RunResult r =
        Run({criu, "restore", "--images-dir", images, "--restore-detached",
             "--restore-sibling", "--shell-job", "--pidfile", pidfile,
             "--inherit-fd", inherit, "-o", "restore.log"},
            kCriuEnv, out, timeout, log_fd);
    res.restore_us = MicrosSince(t0);
    if (Succeeded(r)) break;
    const std::string log = FileText(images + "/restore.log");
    const bool pid_taken = log.find("Can't fork for") != std::string::npos &&
                           log.find("File exists") != std::string::npos;
    if (pid_taken && Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    std::string msg = "criu restore failed (" +
                      Why(r, images + "/restore.log", timeout) + ")";
    if (pid_taken) {
      msg += ": PID " + std::to_string(info->pid) +
             ", which the process had, is in use on this server";
    }
    return r.timed_out ? core::Status(core::StatusCode::kUnavailable, msg)
                       : core::FailedPrecondition(msg);
  }
  unlink(out.c_str());
  const std::string text = FileText(pidfile);
  res.pid = static_cast<pid_t>(std::atol(text.c_str()));
  if (res.pid <= 0) {
    return core::FailedPrecondition("criu restore wrote no pid to " + pidfile);
  }
  return res;
}

}  // namespace gandiva::runtime
