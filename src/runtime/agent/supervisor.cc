#include "runtime/agent/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "client/progress_reader.h"
#include "runtime/exec_env.h"

namespace gandiva::runtime {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MicrosSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() -
                                                               t0)
      .count();
}

std::string Errno(int err) { return std::strerror(err); }

std::string JoinInts(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

// Letters, digits, '.', '_' and '-' are kept; anything else becomes '_'.
std::string SafeName(const std::string& name) {
  std::string s = name;
  for (char& c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return s.empty() ? std::string("agent") : s;
}

std::string JobIdText(int64_t job_id) {
  return "job " + std::to_string(job_id);
}

struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  char state = 0;  // as in /proc/<pid>/stat: R, S, D, T, t, Z, ...
};

// One process from /proc/<pid>/stat; nullopt if gone.
std::optional<ProcInfo> ProcStat(pid_t pid) {
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
  if (std::sscanf(close_paren + 1, " %c %d %d", &state, &ppid, &pgrp) != 3) {
    return std::nullopt;
  }
  return ProcInfo{pid, static_cast<pid_t>(ppid), static_cast<pid_t>(pgrp),
                  state};
}

bool IsStoppedState(char s) { return s == 'T' || s == 't'; }
bool IsDeadState(char s) { return s == 'Z' || s == 'X'; }

// Every process of group `pgid` (scans /proc).
std::vector<ProcInfo> GroupProcesses(pid_t pgid) {
  std::vector<ProcInfo> out;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == nullptr || *end != '\0') continue;
    auto st = ProcStat(static_cast<pid_t>(pid));
    if (st && st->pgrp == pgid) out.push_back(*st);
  }
  closedir(dir);
  return out;
}

// The members of a group that still run. A process in uninterruptible sleep
// whose child is stopped counts as stopped: a shell that vfork()ed (dash
// does) waits in state D until its child execs, and cannot take its own
// SIGSTOP while that child is stopped before exec; it runs nothing until
// SIGCONT either.
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

// "pid 12 (S), pid 13 (R)": the processes of the group not stopped.
std::string RunningInGroup(pid_t pgid) {
  std::string out;
  for (const ProcInfo& p : RunningMembers(GroupProcesses(pgid))) {
    if (!out.empty()) out += ", ";
    out += "pid " + std::to_string(p.pid) + " (" + p.state + ")";
  }
  return out;
}

}  // namespace

std::vector<pid_t> ProcessGroupMembers(pid_t pgid) {
  std::vector<pid_t> out;
  for (const ProcInfo& p : GroupProcesses(pgid)) {
    if (!IsDeadState(p.state)) out.push_back(p.pid);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool ProcessGroupStopped(pid_t pgid) {
  return RunningMembers(GroupProcesses(pgid)).empty();
}

struct Supervisor::JobRec {
  int64_t job_id = 0;
  pid_t pid = 0;  // child and process group id
  std::vector<int> gpus;
  std::string log_path;
  std::string page_path;
  std::optional<client::ProgressReader> reader;  // set before publication
  Clock::time_point started = Clock::now();
  std::thread waiter;
  std::mutex action_mu;  // serialises Suspend/Resume/Kill of this job
  std::atomic<bool> exited{false};
  // Guarded by Supervisor::mu_.
  RunState state = RunState::kRunning;
  int exit_code = 0;
  bool suspended_by_library = false;
  pid_t library_pid = 0;
};

Supervisor::Supervisor(SupervisorOptions options,
                       std::function<void(const ExitRecord&)> on_exit)
    : options_(std::move(options)), on_exit_(std::move(on_exit)) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus_.push_back(c);
    }
  }
}

Supervisor::~Supervisor() {
  KillAll();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, job] : jobs_) {
      if (job->waiter.joinable()) threads.push_back(std::move(job->waiter));
    }
    for (auto& t : old_waiters_) threads.push_back(std::move(t));
    old_waiters_.clear();
  }
  for (auto& t : threads) t.join();
}

std::string Supervisor::JobDir(int64_t job_id) const {
  return options_.work_dir + "/jobs/" + std::to_string(job_id);
}
std::string Supervisor::LogPath(int64_t job_id) const {
  return JobDir(job_id) + "/log";
}
std::string Supervisor::CheckpointDir(int64_t job_id) const {
  return JobDir(job_id) + "/checkpoint";
}
std::string Supervisor::PagePath(int64_t job_id) const {
  // The agent's pid keeps two agents of the same name on one machine (two
  // local clusters, parallel tests) off each other's pages.
  const std::string file = "gandiva-" + SafeName(options_.name) + "-" +
                           std::to_string(getpid()) + "-" +
                           std::to_string(job_id);
  if (!options_.page_dir.empty()) return options_.page_dir + "/" + file;
  struct stat st;
  if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) {
    return "/dev/shm/" + file;
  }
  return JobDir(job_id) + "/" + file;
}

std::shared_ptr<Supervisor::JobRec> Supervisor::Find(int64_t job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second;
}

std::vector<int> Supervisor::CpusFor(const std::vector<int>& gpus) const {
  std::vector<int> out;
  if (options_.cpus_per_gpu <= 0 || cpus_.empty()) return out;
  const size_t n = cpus_.size();
  for (int g : gpus) {
    for (int k = 0; k < options_.cpus_per_gpu; ++k) {
      const size_t i =
          (static_cast<size_t>(g) * static_cast<size_t>(options_.cpus_per_gpu) +
           static_cast<size_t>(k)) %
          n;
      out.push_back(cpus_[i]);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

core::StatusOr<StartResult> Supervisor::Start(const StartParams& params) {
  const auto t0 = Clock::now();
  const std::string what = JobIdText(params.job_id);
  if (params.job_id <= 0) {
    return core::InvalidArgument("job_id: must be positive, got " +
                                 std::to_string(params.job_id));
  }
  if (params.command.empty()) {
    return core::InvalidArgument("spec.command: empty (" + what + ")");
  }
  for (int g : params.gpus) {
    if (g < 0 || (options_.num_gpus > 0 && g >= options_.num_gpus)) {
      return core::InvalidArgument(
          "gpus: local GPU index " + std::to_string(g) + " out of range [0, " +
          std::to_string(options_.num_gpus) + ") (" + what + ")");
    }
  }
  {
    std::vector<int> sorted = params.gpus;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return core::InvalidArgument("gpus: a GPU is listed twice (" + what +
                                   ")");
    }
  }
  for (const auto& [k, v] : params.env) {
    if (k.empty() || k.find('=') != std::string::npos ||
        k.find('\0') != std::string::npos) {
      return core::InvalidArgument("spec.env: bad variable name '" + k + "' (" +
                                   what + ")");
    }
  }
  const std::string workdir =
      params.workdir.empty() ? JobDir(params.job_id) : params.workdir;
  if (!params.workdir.empty()) {
    struct stat st;
    if (stat(workdir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return core::InvalidArgument("spec.workdir: '" + workdir +
                                   "' does not exist or is not a directory (" +
                                   what + ")");
    }
  }

  std::unique_lock<std::mutex> lock(mu_);
  if (auto it = jobs_.find(params.job_id); it != jobs_.end()) {
    if (it->second->state != RunState::kExited) {
      return core::FailedPrecondition(what + " already runs here (pid " +
                                      std::to_string(it->second->pid) + ")");
    }
    // A new run of a job that ended here (e.g. a restart after a resize).
    if (it->second->waiter.joinable()) {
      old_waiters_.push_back(std::move(it->second->waiter));
    }
    jobs_.erase(it);
  }

  auto job = std::make_shared<JobRec>();
  job->job_id = params.job_id;
  job->gpus = params.gpus;
  job->log_path = LogPath(params.job_id);
  job->page_path = PagePath(params.job_id);
  const std::string checkpoint_dir = CheckpointDir(params.job_id);
  std::error_code ec;
  std::filesystem::create_directories(checkpoint_dir, ec);
  if (ec) {
    return core::IoError("creating " + checkpoint_dir + ": " + ec.message());
  }
  GANDIVA_RETURN_IF_ERROR(client::CreateProgressPage(job->page_path));
  auto reader = client::ProgressReader::Open(job->page_path);
  if (!reader.ok()) return reader.status();
  job->reader.emplace(std::move(*reader));

  // The environment: ours, less what gandiva sets, then the spec's, then
  // gandiva's own variables (which win).
  std::map<std::string, std::string> env = params.env;
  if (options_.virtual_gpus) {
    env["CUDA_VISIBLE_DEVICES"] = "";
    env["GANDIVA_VIRTUAL_GPUS"] = JoinInts(params.gpus);
  } else {
    env["CUDA_VISIBLE_DEVICES"] = JoinInts(params.gpus);
  }
  env["GANDIVA_JOB_ID"] = std::to_string(params.job_id);
  env["GANDIVA_PROGRESS_FILE"] = job->page_path;
  env["GANDIVA_CHECKPOINT_DIR"] = checkpoint_dir;
  if (!params.resume_from.empty()) {
    env["GANDIVA_RESUME_FROM"] = params.resume_from;
  }
  ExecEnv envp(env, {"CUDA_VISIBLE_DEVICES", "GANDIVA_VIRTUAL_GPUS",
                     "GANDIVA_JOB_ID", "GANDIVA_PROGRESS_FILE",
                     "GANDIVA_CHECKPOINT_DIR", "GANDIVA_RESUME_FROM"});
  std::string arg0 = "sh", arg1 = "-c", arg2 = params.command;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};

  const int log_fd = open(job->log_path.c_str(),
                          O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return core::IoError("opening log " + job->log_path + ": " + Errno(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawn_file_actions_addchdir_np(&fa, workdir.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group (setpgid(0, 0) in the child), never a new session:
  // a process in an orphaned process group ignores SIGTSTP.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP |
                                      POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);

  // CPU pinning: the child inherits the spawning thread's affinity.
  const std::vector<int> cpus =
      options_.virtual_gpus ? CpusFor(params.gpus) : std::vector<int>{};
  cpu_set_t saved;
  bool pinned = false;
  if (!cpus.empty() &&
      pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cpus) CPU_SET(c, &set);
    pinned = pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
  }
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, envp.envp());
  if (pinned) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(log_fd);
  if (rc != 0) {
    unlink(job->page_path.c_str());
    return core::IoError("starting " + what + " (/bin/sh -c in " + workdir +
                         "): " + Errno(rc));
  }
  job->pid = pid;
  job->waiter = std::thread([this, job] { Wait(job); });
  jobs_[params.job_id] = job;
  return StartResult{pid, MicrosSince(t0)};
}

void Supervisor::Wait(const std::shared_ptr<JobRec>& job) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(job->pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  int code = -1;  // unknown (someone else reaped it)
  if (r == job->pid) {
    if (WIFEXITED(status)) {
      code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      code = -WTERMSIG(status);
    }
  }
  // What the job left behind in its group (workers, background commands).
  kill(-job->pid, SIGKILL);
  const int64_t minibatches =
      static_cast<int64_t>(job->reader ? job->reader->minibatches() : 0);
  unlink(job->page_path.c_str());  // the mapping stays readable
  ExitRecord rec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job->state = RunState::kExited;
    job->exit_code = code;
    job->exited.store(true);
    rec.seq = next_exit_seq_++;
    rec.job_id = job->job_id;
    rec.exit_code = code;
    rec.minibatches = minibatches;
    exits_.push_back(rec);
  }
  exited_cv_.notify_all();
  if (on_exit_) on_exit_(rec);
}

bool Supervisor::PollUntil(const JobRec& job, Clock::time_point end,
                           const std::function<bool()>& pred) const {
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    if (pred()) return true;
    if (job.exited.load() || Clock::now() >= end) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2,
                                                std::chrono::milliseconds(5));
  }
}

core::StatusOr<SuspendResult> Supervisor::Suspend(int64_t job_id) {
  const auto t0 = Clock::now();
  const std::string what = JobIdText(job_id);
  auto job = Find(job_id);
  if (!job) return core::NotFound(what + " is not known to this agent");
  std::lock_guard<std::mutex> action(job->action_mu);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (job->state == RunState::kExited) {
      return core::FailedPrecondition(what + " has exited");
    }
    if (job->state == RunState::kSuspended) {
      return core::FailedPrecondition(what + " is already suspended");
    }
  }
  const auto end = t0 + options_.suspend_timeout;
  const pid_t pgid = job->pid;
  // A job that has just started may not have reached the library yet (an
  // interpreter importing its framework): give it a moment to, so that it
  // too stops at a mini-batch boundary rather than wherever it is.
  if (job->reader->state() == client::JobState::kNew) {
    const auto grace = job->started + options_.library_start_grace;
    PollUntil(*job, std::min(end, grace),
              [&] { return job->reader->state() != client::JobState::kNew; });
  }
  const client::ProgressSnapshot snap = job->reader->Read();
  bool library = snap.pid > 0 && snap.state != client::JobState::kNew &&
                 snap.state != client::JobState::kExited;
  const pid_t main_pid = snap.pid;
  if (library && kill(main_pid, SIGTSTP) != 0) library = false;
  bool at_boundary = false;
  if (library) {
    // The library stops itself at its next mini-batch boundary.
    const bool stopped = PollUntil(*job, end, [&] {
      return client::ProcessIsStopped(main_pid) || kill(main_pid, 0) != 0;
    });
    if (!stopped) {
      if (job->exited.load()) {
        return core::FailedPrecondition(what + " exited while suspending");
      }
      return core::Status(
          core::StatusCode::kUnavailable,
          what + " did not stop at a mini-batch boundary within " +
              std::to_string(options_.suspend_timeout.count()) +
              " ms (SIGTSTP sent to pid " + std::to_string(main_pid) + ")");
    }
    const client::ProgressSnapshot after = job->reader->Read();
    at_boundary = after.state == client::JobState::kSuspended &&
                  after.suspend_count > snap.suspend_count;
    // The rest of its group (data-loader workers, a parent shell).
    if (!ProcessGroupStopped(pgid)) kill(-pgid, SIGSTOP);
  } else {
    kill(-pgid, SIGSTOP);
  }
  const bool stopped =
      PollUntil(*job, end, [&] { return ProcessGroupStopped(pgid); });
  if (!stopped) {
    if (job->exited.load()) {
      return core::FailedPrecondition(what + " exited while suspending");
    }
    // SIGSTOP cannot be ignored; only a process in uninterruptible sleep
    // takes this long. Leave it to stop; the caller sees the error.
    return core::Status(core::StatusCode::kUnavailable,
                        what + " process group " + std::to_string(pgid) +
                            " did not stop within " +
                            std::to_string(options_.suspend_timeout.count()) +
                            " ms; still running: " + RunningInGroup(pgid));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (job->state == RunState::kExited) {
      return core::FailedPrecondition(what + " exited while suspending");
    }
    job->state = RunState::kSuspended;
    job->suspended_by_library = library;
    job->library_pid = library ? main_pid : 0;
  }
  return SuspendResult{MicrosSince(t0), at_boundary};
}

core::StatusOr<ResumeResult> Supervisor::Resume(int64_t job_id) {
  const std::string what = JobIdText(job_id);
  auto job = Find(job_id);
  if (!job) return core::NotFound(what + " is not known to this agent");
  std::lock_guard<std::mutex> action(job->action_mu);
  bool library = false;
  pid_t library_pid = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (job->state == RunState::kExited) {
      return core::FailedPrecondition(what + " has exited");
    }
    if (job->state != RunState::kSuspended) {
      return core::FailedPrecondition(what + " is not suspended");
    }
    library = job->suspended_by_library;
    library_pid = job->library_pid;
  }
  // Suspend() saw every process stopped, so SIGCONT cannot be lost.
  const auto t0 = Clock::now();
  const pid_t pgid = job->pid;
  kill(-pgid, SIGCONT);
  const auto end = t0 + options_.resume_timeout;
  bool running;
  if (library) {
    running = PollUntil(*job, end, [&] {
      const client::JobState s = job->reader->state();
      return !client::ProcessIsStopped(library_pid) &&
             s != client::JobState::kSuspended &&
             s != client::JobState::kSuspending &&
             s != client::JobState::kResuming;
    });
  } else {
    running =
        PollUntil(*job, end, [&] { return !client::ProcessIsStopped(pgid); });
  }
  const int64_t took = MicrosSince(t0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (job->state == RunState::kSuspended) job->state = RunState::kRunning;
  }
  if (!running && !job->exited.load()) {
    return core::Status(core::StatusCode::kUnavailable,
                        what +
                            " got SIGCONT but did not report running "
                            "within " +
                            std::to_string(options_.resume_timeout.count()) +
                            " ms");
  }
  return ResumeResult{took};
}

core::Status Supervisor::Kill(int64_t job_id) {
  auto job = Find(job_id);
  if (!job)
    return core::NotFound(JobIdText(job_id) + " is not known to this agent");
  std::lock_guard<std::mutex> action(job->action_mu);
  return KillLocked(*job);
}

core::Status Supervisor::KillLocked(JobRec& job) {
  if (job.exited.load()) return core::Status::Ok();
  const pid_t pgid = job.pid;
  kill(-pgid, SIGCONT);
  kill(-pgid, SIGTERM);
  std::unique_lock<std::mutex> lock(mu_);
  if (exited_cv_.wait_for(lock, options_.kill_grace,
                          [&] { return job.exited.load(); })) {
    return core::Status::Ok();
  }
  kill(-pgid, SIGKILL);
  if (exited_cv_.wait_for(lock, std::chrono::seconds(30),
                          [&] { return job.exited.load(); })) {
    return core::Status::Ok();
  }
  return core::Status(core::StatusCode::kUnavailable,
                      JobIdText(job.job_id) +
                          " did not exit 30 s after SIGKILL (pid " +
                          std::to_string(pgid) + ")");
}

void Supervisor::KillAll() {
  std::vector<std::shared_ptr<JobRec>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, job] : jobs_) {
      if (!job->exited.load()) live.push_back(job);
    }
  }
  std::vector<std::thread> killers;
  for (auto& job : live) {
    killers.emplace_back([this, job] {
      std::lock_guard<std::mutex> action(job->action_mu);
      (void)KillLocked(*job);
    });
  }
  for (auto& t : killers) t.join();
}

std::vector<JobView> Supervisor::Jobs(bool include_exited) const {
  std::vector<JobView> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, job] : jobs_) {
    if (!include_exited && job->state == RunState::kExited) continue;
    JobView v;
    v.job_id = job->job_id;
    v.pid = job->pid;
    v.state = job->state;
    v.gpus = job->gpus;
    v.log_path = job->log_path;
    v.exit_code = job->exit_code;
    if (job->reader) {
      const client::ProgressSnapshot s = job->reader->Read();
      v.minibatches = s.minibatches;
      v.minibatch_rate = s.rate_per_second.value_or(0.0);
      v.uses_library = s.pid > 0 && s.state != client::JobState::kNew;
      v.library_pid = s.pid;
    }
    out.push_back(std::move(v));
  }
  return out;
}

core::StatusOr<JobView> Supervisor::Job(int64_t job_id) const {
  for (JobView& v : Jobs(true)) {
    if (v.job_id == job_id) return std::move(v);
  }
  return core::NotFound(JobIdText(job_id) + " is not known to this agent");
}

bool Supervisor::WaitForExit(int64_t job_id,
                             std::chrono::milliseconds timeout) const {
  auto job = Find(job_id);
  if (!job) return false;
  std::unique_lock<std::mutex> lock(mu_);
  return exited_cv_.wait_for(lock, timeout, [&] { return job->exited.load(); });
}

std::vector<ExitRecord> Supervisor::PendingExits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return exits_;
}

void Supervisor::AckExits(uint64_t up_to_seq) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(exits_,
                [&](const ExitRecord& r) { return r.seq <= up_to_seq; });
}

}  // namespace gandiva::runtime
