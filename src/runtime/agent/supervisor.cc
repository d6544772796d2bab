#include "runtime/agent/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

#include "client/progress_page.h"
#include "client/progress_reader.h"
#include "runtime/agent/criu.h"
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

uint64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

int64_t NsToUs(uint64_t later, uint64_t earlier) {
  return later > earlier ? static_cast<int64_t>((later - earlier) / 1000) : 0;
}

// Regular files under `dir` (recursively), less the warm start's own.
void DirStats(const std::string& dir, int64_t* bytes, int* files) {
  *bytes = 0;
  *files = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    if (IsWarmStartFile(it->path().filename().string())) continue;
    *bytes += static_cast<int64_t>(it->file_size(ec));
    ++*files;
  }
}

std::string PageErrorName(int32_t code) {
  switch (code) {
    case -1:
      return "GANDIVA_E_IO";
    case -4:
      return "GANDIVA_E_HOOK (the save hook failed)";
    case -5:
      return "GANDIVA_E_NO_CHECKPOINT_DIR";
    case -6:
      return "GANDIVA_E_STATE";
    default:
      return "error " + std::to_string(code);
  }
}

bool Overlaps(const std::vector<int>& a, const std::vector<int>& b) {
  for (int x : a) {
    if (std::find(b.begin(), b.end(), x) != b.end()) return true;
  }
  return false;
}

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

// A job's directory name ("<id>") as its id; nullopt for any other name.
std::optional<int64_t> JobIdOfDirName(const std::string& name) {
  char* end = nullptr;
  const long long id = std::strtoll(name.c_str(), &end, 10);
  if (name.empty() || end == nullptr || *end != '\0') return std::nullopt;
  return id;
}

// Writes `text` to `path` whole or not at all (a temporary file renamed
// over it). False when that failed.
bool WriteWhole(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    f.flush();
    if (!f) {
      unlink(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

std::string JobIdText(int64_t job_id) {
  return "job " + std::to_string(job_id);
}

struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  char state = 0;  // as in /proc/<pid>/stat: R, S, D, T, t, Z, ...
  // Clock ticks after boot when it started: with the pid, names one
  // process (pids are reused).
  unsigned long long starttime = 0;
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

bool IsWarmStartFile(std::string_view name) {
  return name.starts_with(GANDIVA_RESUME_READY_FILE) ||
         name.starts_with(GANDIVA_STREAM_OFFER_FILE);  // and STREAM_OK
}

bool ProcessGroupStopped(pid_t pgid) {
  return RunningMembers(GroupProcesses(pgid)).empty();
}

struct Supervisor::JobRec {
  int64_t job_id = 0;
  int64_t submitted_us = 0;  // StartParams::submitted_us
  std::string spec;          // StartParams::spec
  pid_t pid = 0;             // child and process group id
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
  // Set by KillAll(agent_stopping): killed because the agent stops.
  std::atomic<bool> killed_for_stop{false};
  // Guarded by Supervisor::mu_.
  RunState state = RunState::kRunning;
  int exit_code = 0;
  bool suspended_by_library = false;
  pid_t library_pid = 0;
};

Supervisor::Supervisor(SupervisorOptions options,
                       std::function<void(const ExitRecord&)> on_exit)
    : options_(std::move(options)), on_exit_(std::move(on_exit)) {
  if (options_.reap_orphans) prctl(PR_SET_CHILD_SUBREAPER, 1);
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
std::string Supervisor::EarlierLogPath(int64_t job_id) const {
  return JobDir(job_id) + "/log.earlier";
}
const std::string& Supervisor::CheckpointRoot() const {
  return options_.checkpoint_root.empty() ? options_.work_dir
                                          : options_.checkpoint_root;
}
std::string Supervisor::CheckpointDir(int64_t job_id) const {
  return CheckpointRoot() + "/jobs/" + std::to_string(job_id) + "/checkpoint";
}
std::string Supervisor::IncomingDir(int64_t job_id) const {
  return CheckpointRoot() + "/jobs/" + std::to_string(job_id) + "/incoming";
}
std::string Supervisor::HeldRecordPath(int64_t job_id) const {
  return CheckpointRoot() + "/jobs/" + std::to_string(job_id) +
         "/held-checkpoint";
}
std::string Supervisor::HeldSpecPath(int64_t job_id) const {
  return CheckpointRoot() + "/jobs/" + std::to_string(job_id) + "/held-spec";
}
std::string Supervisor::ProcessRecordPath(int64_t job_id, pid_t pid) const {
  return JobDir(job_id) + "/process." + std::to_string(pid);
}

void Supervisor::WriteProcessRecord(const JobRec& job) const {
  const auto st = ProcStat(job.pid);
  const auto self = ProcStat(getpid());
  // Best effort: only a crash of this agent needs it.
  (void)WriteWhole(ProcessRecordPath(job.job_id, job.pid),
                   std::to_string(job.pid) + " " +
                       std::to_string(st ? st->starttime : 0) + " " +
                       std::to_string(getpid()) + " " +
                       std::to_string(self ? self->starttime : 0) + " " +
                       job.page_path + "\n");
}

std::vector<int64_t> Supervisor::KillLeftovers() {
  std::vector<int64_t> killed;
  std::vector<std::pair<long long, unsigned long long>> killed_procs;
  std::error_code ec;
  const std::filesystem::path jobs = options_.work_dir + "/jobs";
  std::vector<std::pair<int64_t, std::filesystem::path>> records;
  for (const auto& dir : std::filesystem::directory_iterator(jobs, ec)) {
    const std::optional<int64_t> id =
        JobIdOfDirName(dir.path().filename().string());
    if (!id) continue;
    std::error_code ec2;
    for (const auto& f : std::filesystem::directory_iterator(dir.path(), ec2)) {
      if (f.path().filename().string().rfind("process.", 0) == 0) {
        records.emplace_back(*id, f.path());
      }
    }
  }
  // Whether `pid` still names the process that started at `starttime`.
  auto same_process = [](long long pid, unsigned long long starttime) {
    if (pid <= 1) return false;
    const auto st = ProcStat(static_cast<pid_t>(pid));
    return st && !IsDeadState(st->state) && st->starttime == starttime;
  };
  for (const auto& [id, path] : records) {
    long long pid = 0, agent = 0;
    unsigned long long starttime = 0, agent_starttime = 0;
    std::string page;
    {
      std::ifstream f(path);
      f >> pid >> starttime >> agent >> agent_starttime >> page;
    }
    // Another agent's on this work dir that still runs (this one included):
    // its jobs are not leftovers.
    if (same_process(agent, agent_starttime)) continue;
    std::filesystem::remove(path, ec);
    // Gone, or the pid names another process now.
    if (path.extension() == ".tmp" || !same_process(pid, starttime)) continue;
    // The job led its own group (session); a restored one may not.
    kill(-static_cast<pid_t>(pid), SIGKILL);
    kill(static_cast<pid_t>(pid), SIGKILL);
    if (!page.empty()) unlink(page.c_str());
    killed.push_back(id);
    killed_procs.emplace_back(pid, starttime);
  }
  // Wait a little for them to go (another process reaps them).
  for (int i = 0; i < 200 && !killed_procs.empty(); ++i) {
    bool alive = false;
    for (const auto& [pid, started] : killed_procs) {
      alive |= same_process(pid, started);
    }
    if (!alive) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return killed;
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
  if (params.warm && !params.resume_from.empty()) {
    return core::InvalidArgument(
        "resume_from: must be empty for a warm start (" + what + ")");
  }
  if (params.warm && params.resume_local) {
    return core::InvalidArgument(
        "resume_local: a warm start takes its checkpoint from "
        "ReceiveCheckpoint (" +
        what + ")");
  }
  if (params.resume_local && !params.resume_from.empty()) {
    return core::InvalidArgument(
        "resume_from: must be empty with "
        "resume_local (" +
        what + ")");
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

  std::string resume_from = params.resume_from;
  const std::string checkpoint_dir = CheckpointDir(params.job_id);
  const std::string incoming_dir = IncomingDir(params.job_id);
  std::error_code ec;
  if (params.resume_local) {
    auto held = held_.find(params.job_id);
    if (held == held_.end()) {
      return core::FailedPrecondition(
          what + " has no checkpoint on this agent (resume_local)");
    }
    if (const int64_t saved_by = held->second.submitted_us;
        saved_by != 0 && params.submitted_us != 0 &&
        saved_by != params.submitted_us) {
      return core::FailedPrecondition(
          what +
          ": the checkpoint held here was saved by another job of that "
          "id (submitted at " +
          std::to_string(saved_by) + " us, this one at " +
          std::to_string(params.submitted_us) + " us)");
    }
    resume_from = held->second.dir;
    if (HoldsCriuImages(resume_from)) {
      lock.unlock();
      return StartFromCriu(params, resume_from, t0);
    }
  }
  if (params.warm) {
    // A checkpoint received here earlier moves aside for the new one.
    if (auto held = held_.find(params.job_id);
        held != held_.end() && held->second.dir == incoming_dir) {
      std::filesystem::remove_all(checkpoint_dir, ec);
      std::filesystem::create_directories(
          std::filesystem::path(checkpoint_dir).parent_path(), ec);
      std::filesystem::rename(incoming_dir, checkpoint_dir, ec);
      held->second.dir = checkpoint_dir;
    }
    std::filesystem::remove_all(incoming_dir, ec);
    std::filesystem::create_directories(incoming_dir, ec);
    if (ec) {
      return core::IoError("creating " + incoming_dir + ": " + ec.message());
    }
    resume_from = incoming_dir;
  }

  auto made = NewJobRec(params);
  if (!made.ok()) return made.status();
  std::shared_ptr<JobRec> job = std::move(*made);

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
  env["GANDIVA_WORLD_SIZE"] = std::to_string(params.gpus.size());
  if (!resume_from.empty()) env["GANDIVA_RESUME_FROM"] = resume_from;
  if (params.warm) env["GANDIVA_RESUME_WAIT"] = "1";
  for (const char* name : kGangEnvNames) env.erase(name);
  for (const auto& [k, v] : params.gang_env) env[k] = v;
  if (caps_.mps && !options_.virtual_gpus) {
    // Every job on a real GPU is an MPS client, not only the second of a
    // pack: a job packed later shares its GPU through MPS only if the job
    // already there is a client too.
    env["CUDA_MPS_PIPE_DIRECTORY"] = caps_.mps_pipe_dir;
    env["CUDA_MPS_LOG_DIRECTORY"] = caps_.mps_log_dir;
  }
  ExecEnv envp(
      env, {"CUDA_VISIBLE_DEVICES", "GANDIVA_VIRTUAL_GPUS", "GANDIVA_JOB_ID",
            "GANDIVA_PROGRESS_FILE", "GANDIVA_CHECKPOINT_DIR",
            "GANDIVA_RESUME_FROM", "GANDIVA_RESUME_WAIT", "GANDIVA_WORLD_SIZE",
            kGangEnvNames[0], kGangEnvNames[1], kGangEnvNames[2],
            kGangEnvNames[3], kGangEnvNames[4], kGangEnvNames[5]});
  std::string arg0 = "sh", arg1 = "-c", arg2 = params.command;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};

  // A warm start is the destination of a move: the job's whole log so far
  // comes from the source (EarlierLogPath), so what an earlier stay here
  // left is dropped, not repeated.
  const int log_fd = open(
      job->log_path.c_str(),
      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (params.warm ? O_TRUNC : 0),
      0644);
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
  const ChildSpawnAttr attr;

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
  job->started = Clock::now();
  job->started_ns = MonotonicNs();
  const int rc =
      posix_spawn(&pid, "/bin/sh", &fa, attr.get(), argv, envp.envp());
  if (pinned) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  posix_spawn_file_actions_destroy(&fa);
  close(log_fd);
  if (rc != 0) {
    unlink(job->page_path.c_str());
    return core::IoError("starting " + what + " (/bin/sh -c in " + workdir +
                         "): " + Errno(rc));
  }
  job->pid = pid;
  WriteProcessRecord(*job);
  job->waiter = std::thread([this, job] { Wait(job); });
  jobs_[params.job_id] = job;
  SupersedeExits(params.job_id);
  return StartResult{pid, MicrosSince(t0)};
}

core::StatusOr<std::shared_ptr<Supervisor::JobRec>> Supervisor::NewJobRec(
    const StartParams& params) const {
  auto job = std::make_shared<JobRec>();
  job->job_id = params.job_id;
  job->submitted_us = params.submitted_us;
  job->spec = params.spec;
  job->gpus = params.gpus;
  job->log_path = LogPath(params.job_id);
  job->page_path = PagePath(params.job_id);
  job->restartable = params.restartable;
  job->warm = params.warm;
  job->without_library = params.without_library;
  job->gang = !params.gang_env.empty();
  std::error_code ec;
  std::filesystem::create_directories(JobDir(params.job_id), ec);
  if (ec) {
    return core::IoError("creating " + JobDir(params.job_id) + ": " +
                         ec.message());
  }
  const std::string checkpoint_dir = CheckpointDir(params.job_id);
  std::filesystem::create_directories(checkpoint_dir, ec);
  if (ec) {
    return core::IoError("creating " + checkpoint_dir + ": " + ec.message());
  }
  GANDIVA_RETURN_IF_ERROR(client::CreateProgressPage(job->page_path));
  auto reader = client::ProgressReader::Open(job->page_path);
  if (!reader.ok()) return reader.status();
  job->reader.emplace(std::move(*reader));
  if (const int fd = open(job->page_path.c_str(), O_RDONLY | O_CLOEXEC);
      fd >= 0) {
    void* m =
        mmap(nullptr, GANDIVA_PAGE_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m != MAP_FAILED) {
      job->raw_page = static_cast<const gandiva_progress_page*>(m);
    }
  }
  return job;
}

core::StatusOr<StartResult> Supervisor::StartFromCriu(
    const StartParams& params, const std::string& checkpoint,
    Clock::time_point t0) {
  const std::string what = JobIdText(params.job_id);
  const Capabilities caps = capabilities();
  if (!caps.criu) {
    return core::FailedPrecondition(
        what +
        " was checkpointed by CRIU, which is not usable on this "
        "server (" +
        caps.criu_detail + ")");
  }
  auto made = NewJobRec(params);
  if (!made.ok()) return made.status();
  std::shared_ptr<JobRec> job = std::move(*made);
  const int log_fd = open(job->log_path.c_str(),
                          O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    unlink(job->page_path.c_str());
    return core::IoError("opening log " + job->log_path + ": " + Errno(errno));
  }
  job->started = Clock::now();
  job->started_ns = MonotonicNs();
  // Its PID may still be held by what the dumped run left (a zombie of its
  // group not reaped yet); the waiter gives those 2 s.
  auto restored =
      CriuRestore(caps.criu_path, checkpoint, log_fd,
                  options_.checkpoint_timeout, std::chrono::milliseconds(3000));
  close(log_fd);
  if (!restored.ok()) {
    unlink(job->page_path.c_str());
    return core::Status(restored.status().code(),
                        what + " could not be restored: " +
                            std::string(restored.status().message()));
  }
  const pid_t pid = restored->pid;  // also its process group, as before
  // Pinned as a job started on these GPUs would be (the restored process
  // keeps the environment it had).
  if (options_.virtual_gpus) {
    const std::vector<int> cpus = CpusFor(params.gpus);
    if (!cpus.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : cpus) CPU_SET(c, &set);
      for (pid_t p : ProcessGroupMembers(pid)) {
        sched_setaffinity(p, sizeof set, &set);
      }
    }
  }
  // A job dumped while suspended comes back stopped; a start runs it.
  kill(-pid, SIGCONT);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = jobs_.find(params.job_id); it != jobs_.end()) {
    if (it->second->state != RunState::kExited) {
      // Started meanwhile by another call: this copy goes.
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      unlink(job->page_path.c_str());
      return core::FailedPrecondition(what + " already runs here (pid " +
                                      std::to_string(it->second->pid) + ")");
    }
    if (it->second->waiter.joinable()) {
      old_waiters_.push_back(std::move(it->second->waiter));
    }
    jobs_.erase(it);
  }
  job->pid = pid;
  job->without_library = true;
  WriteProcessRecord(*job);
  job->waiter = std::thread([this, job] { Wait(job); });
  jobs_[params.job_id] = job;
  SupersedeExits(params.job_id);
  return StartResult{pid, MicrosSince(t0)};
}

void Supervisor::Wait(const std::shared_ptr<JobRec>& job) {
  // Any child of the job's group: the job's process, or one of its own that
  // outlived its parent and so became ours (a child subreaper), reaped as
  // it dies so that no zombie holds a PID while the job runs on.
  int code = -1;  // unknown (someone else reaped it)
  for (;;) {
    siginfo_t info{};
    if (waitid(P_PGID, static_cast<id_t>(job->pid), &info, WEXITED) != 0) {
      if (errno == EINTR) continue;
      // ECHILD: no child in that group. A process restored from images of
      // one that did not lead its group is not in it: wait for it alone.
      int status = 0;
      pid_t r;
      do {
        r = waitpid(job->pid, &status, 0);
      } while (r < 0 && errno == EINTR);
      if (r == job->pid) {
        code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
      break;
    }
    if (info.si_pid != job->pid) continue;
    code = info.si_code == CLD_EXITED ? info.si_status : -info.si_status;
    break;
  }
  // What the job left behind in its group (workers, background commands),
  // gone before the exit is recorded (they may hold its GPUs): a SIGKILL
  // takes effect soon, not at once, so wait a little for it.
  // Those whose parent ended first are this process's children (a child
  // subreaper): reaped here, as they die, or their zombies would stay in
  // the group. The group is the job's alone (its own session).
  kill(-job->pid, SIGKILL);
  // Done when none runs and no zombie there is ours to reap.
  auto settled = [&] {
    const pid_t self = getpid();
    for (const ProcInfo& p : GroupProcesses(job->pid)) {
      if (!IsDeadState(p.state) || p.ppid == self) return false;
    }
    return true;
  };
  for (int i = 0; i < 400; ++i) {
    ReapEndedInGroup(job->pid);
    if (settled()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // A job that ended by itself (not to be moved or resized) leaves no
  // checkpoint to keep on the ramdisk.
  if (!job->checkpointing.load() && code != GANDIVA_EXIT_MIGRATE &&
      code != GANDIVA_EXIT_RESIZE) {
    DropCheckpoint(job->job_id);
  }
  const int64_t minibatches =
      static_cast<int64_t>(job->reader ? job->reader->minibatches() : 0);
  std::optional<client::ProgressSnapshot> last;
  if (job->reader) last = job->reader->Read();
  unlink(job->page_path.c_str());  // the mapping stays readable
  unlink(ProcessRecordPath(job->job_id, job->pid).c_str());
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
    rec.killed = job->kill_requested.load();
    // A job that finished by itself as it was killed keeps its success.
    rec.agent_stopping =
        job->killed_for_stop.load() && !rec.killed && code != 0;
    if (last) {
      rec.metric = last->metric;
    }
    exits_.push_back(rec);
  }
  exited_cv_.notify_all();
  if (on_exit_) on_exit_(rec);
}

void Supervisor::SupersedeExits(int64_t job_id) {
  for (ExitRecord& e : exits_) {
    if (e.job_id == job_id) e.superseded = true;
  }
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
  auto job = Find(job_id);
  if (!job) {
    return core::NotFound(JobIdText(job_id) + " is not known to this agent");
  }
  std::lock_guard<std::mutex> action(job->action_mu);
  return SuspendLocked(job, t0);
}

core::StatusOr<SuspendResult> Supervisor::SuspendLocked(
    const std::shared_ptr<JobRec>& job, Clock::time_point t0) {
  const std::string what = JobIdText(job->job_id);
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
  if (!job->without_library && job->reader->state() == client::JobState::kNew) {
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
    // The library stops itself at its next mini-batch boundary. A library
    // that detached just before the signal left SIGTSTP at its default,
    // which a process in its own session ignores: the group stop below
    // takes it then.
    const bool stopped = PollUntil(*job, end, [&] {
      return client::ProcessIsStopped(main_pid) || kill(main_pid, 0) != 0 ||
             job->reader->state() == client::JobState::kExited;
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
  if (!job->exited.load()) job->kill_requested.store(true);
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

void Supervisor::KillAll(bool agent_stopping) {
  std::vector<std::shared_ptr<JobRec>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, job] : jobs_) {
      if (!job->exited.load()) live.push_back(job);
    }
  }
  std::vector<std::thread> killers;
  for (auto& job : live) {
    killers.emplace_back([this, job, agent_stopping] {
      std::lock_guard<std::mutex> action(job->action_mu);
      if (agent_stopping) job->killed_for_stop.store(true);
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
    v.world_size = static_cast<int>(job->gpus.size());
    v.warm = job->warm;
    v.gang = job->gang;
    v.has_checkpoint = held_.contains(job->job_id);
    v.submitted_us = job->submitted_us;
    v.spec = job->spec;
    if (job->state == RunState::kRunning) {
      const bool shared =
          std::any_of(jobs_.begin(), jobs_.end(), [&](const auto& kv) {
            return kv.second != job && kv.second->state == RunState::kRunning &&
                   Overlaps(kv.second->gpus, job->gpus);
          });
      if (shared) v.sharing = caps_.mps ? "mps" : "time-shared";
    }
    if (job->reader) {
      const client::ProgressSnapshot s = job->reader->Read();
      v.minibatches = s.minibatches;
      v.minibatch_rate = s.rate_per_second.value_or(0.0);
      v.uses_library = s.pid > 0 && s.state != client::JobState::kNew;
      v.library_pid = s.pid;
      v.metric = s.metric;
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

namespace {

// One exit per line: job exit_code minibatches metric_value
// metric_minibatches metric_reports.
std::string UnreportedExitsPath(const std::string& work_dir) {
  return work_dir + "/unreported-exits";
}

}  // namespace

size_t Supervisor::SaveUnreportedExits() {
  std::ostringstream text;
  text.precision(17);
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const ExitRecord& e : exits_) {
      if (e.superseded || e.killed || e.checkpoint_kept || e.agent_stopping) {
        continue;
      }
      text << e.job_id << ' ' << e.exit_code << ' ' << e.minibatches << ' '
           << e.metric.value << ' ' << e.metric.minibatches << ' '
           << e.metric.reports << '\n';
      ++n;
    }
  }
  if (n > 0 &&
      !WriteWhole(UnreportedExitsPath(options_.work_dir), text.str())) {
    return 0;
  }
  return n;
}

size_t Supervisor::RecoverUnreportedExits() {
  const std::string path = UnreportedExitsPath(options_.work_dir);
  std::ifstream f(path);
  if (!f) return 0;
  size_t n = 0;
  std::string line;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (std::getline(f, line)) {
      std::istringstream in(line);
      ExitRecord e;
      if (!(in >> e.job_id >> e.exit_code >> e.minibatches >> e.metric.value >>
            e.metric.minibatches >> e.metric.reports) ||
          e.job_id <= 0) {
        continue;
      }
      e.seq = next_exit_seq_++;
      exits_.push_back(e);
      ++n;
    }
  }
  f.close();
  unlink(path.c_str());
  return n;
}

// ---------------------------------------------------------- checkpoints

core::StatusOr<CheckpointResult> Supervisor::Checkpoint(int64_t job_id,
                                                        int resize_to,
                                                        bool reply_when_saved) {
  return CheckpointWithin(job_id, resize_to, reply_when_saved,
                          options_.checkpoint_timeout, /*allow_criu=*/true);
}

core::StatusOr<CheckpointResult> Supervisor::CheckpointWithin(
    int64_t job_id, int resize_to, bool reply_when_saved,
    std::chrono::milliseconds timeout, bool allow_criu) {
  const auto t0 = Clock::now();
  const std::string what = JobIdText(job_id);
  if (resize_to < 0 || resize_to > static_cast<int>(GANDIVA_REQUEST_ARG_MAX)) {
    return core::InvalidArgument("resize_to: out of range, got " +
                                 std::to_string(resize_to));
  }
  auto job = Find(job_id);
  if (!job) return core::NotFound(what + " is not known to this agent");
  std::lock_guard<std::mutex> action(job->action_mu);
  bool was_suspended = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (job->state == RunState::kExited) {
      return core::FailedPrecondition(what + " has exited");
    }
    was_suspended = job->state == RunState::kSuspended;
  }
  job->checkpointing.store(true);
  // A job that has just started may not have reached the library yet.
  if (!was_suspended && !job->without_library &&
      job->reader->state() == client::JobState::kNew) {
    PollUntil(
        *job,
        std::min(t0 + timeout, job->started + options_.library_start_grace),
        [&] { return job->reader->state() != client::JobState::kNew; });
  }
  const client::ProgressSnapshot snap = job->reader->Read();
  const bool library = snap.pid > 0 && snap.state != client::JobState::kNew &&
                       snap.state != client::JobState::kExited;
  if (library || job->restartable) {
    auto r = library ? CheckpointLibrary(job, resize_to, was_suspended,
                                         reply_when_saved && resize_to == 0,
                                         timeout, t0)
                     : CheckpointRestart(job, was_suspended, timeout, t0);
    // A job that trains on (its save failed) keeps no checkpoint.
    if (!r.ok() && !job->exited.load()) job->checkpointing.store(false);
    return r;
  }
  const Capabilities caps = capabilities();
  if (!allow_criu) {
    job->checkpointing.store(false);
    return core::FailedPrecondition(
        what +
        " cannot save its state: it does not use the gandiva job-side "
        "library and is not declared restartable");
  }
  if (caps.criu && resize_to == 0) {
    auto r = CheckpointCriu(job, caps.criu_path, was_suspended, timeout, t0);
    if (!r.ok() && !job->exited.load()) job->checkpointing.store(false);
    return r;
  }
  job->checkpointing.store(false);
  if (caps.criu) {
    return core::FailedPrecondition(
        what +
        " cannot be resized: it does not use the gandiva job-side library "
        "(CRIU can move it, not change its world size)");
  }
  return core::FailedPrecondition(
      what +
      " cannot be migrated: it does not use the gandiva job-side library, is "
      "not declared restartable, and CRIU is not usable on this server (" +
      caps.criu_detail + ")");
}

core::StatusOr<CheckpointResult> Supervisor::CheckpointCriu(
    const std::shared_ptr<JobRec>& job, const std::string& criu,
    bool was_suspended, std::chrono::milliseconds timeout,
    Clock::time_point t0) {
  const std::string what = JobIdText(job->job_id);
  const std::string dir = CheckpointDir(job->job_id);
  // A suspended job is dumped stopped and comes back stopped (then
  // continued by the start that restores it).
  auto dumped = CriuDump(criu, job->pid, job->log_path, dir, timeout);
  if (!dumped.ok()) {
    return core::Status(
        dumped.status().code(),
        what +
            " was not checkpointed: " + std::string(dumped.status().message()) +
            "; the job was left " + (was_suspended ? "suspended" : "running"));
  }
  CheckpointResult r;
  r.save_us = dumped->dump_us;
  r.method = "criu";
  r.minibatches = static_cast<int64_t>(job->reader->minibatches());
  // The dump killed the tree: its exit is recorded by the waiter.
  std::unique_lock<std::mutex> lock(mu_);
  if (exited_cv_.wait_for(lock, std::chrono::seconds(10),
                          [&] { return job->exited.load(); })) {
    r.exit_code = job->exit_code;
  } else {
    r.exit_code = -SIGKILL;
    r.exiting = true;
  }
  HoldLocked(job->job_id, dir, job->submitted_us, job->spec);
  lock.unlock();
  DirStats(dir, &r.bytes, &r.files);
  r.took_us = MicrosSince(t0);
  return r;
}

core::StatusOr<CheckpointResult> Supervisor::CheckpointLibrary(
    const std::shared_ptr<JobRec>& job, int resize_to, bool was_suspended,
    bool reply_when_saved, std::chrono::milliseconds timeout,
    Clock::time_point t0) {
  const std::string what = JobIdText(job->job_id);
  const auto end = t0 + timeout;
  const client::RequestKind kind =
      resize_to > 0 ? client::RequestKind::kResize
                    : client::RequestKind::kCheckpointAndExit;
  const int expected =
      resize_to > 0 ? GANDIVA_EXIT_RESIZE : GANDIVA_EXIT_MIGRATE;
  auto seq = job->reader->Request(kind, static_cast<uint32_t>(resize_to));
  if (!seq.ok()) return seq.status();
  const pid_t pgid = job->pid;
  if (was_suspended) {
    // The library serves the request right after it is continued, at the
    // boundary where it stopped.
    kill(-pgid, SIGCONT);
    std::lock_guard<std::mutex> lock(mu_);
    if (job->state == RunState::kSuspended) job->state = RunState::kRunning;
  }
  client::ProgressSnapshot s;
  bool saved = false;  // reply_when_saved: complete, the job leaving
  const bool ended = PollUntil(*job, end, [&] {
    s = job->reader->Read();
    if (s.done_seq < *seq || s.state == client::JobState::kCheckpointing) {
      return false;
    }
    saved = reply_when_saved && s.last_result == 0 &&
            s.state == client::JobState::kExited && s.exit_code == expected;
    return saved || s.last_result != 0;
  });
  const bool failed = ended && !saved;
  if (job->exited.load() || saved) {
    int code = expected;
    bool exiting = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (job->exited.load()) {
        code = job->exit_code;
        exiting = false;
      }
    }
    const std::string dir = CheckpointDir(job->job_id);
    CheckpointResult r;
    DirStats(dir, &r.bytes, &r.files);
    if (code != expected) {
      return core::FailedPrecondition(
          what + " exited with code " + std::to_string(code) +
          " while checkpointing (expected " + std::to_string(expected) + ")");
    }
    if (r.files == 0) {
      return core::FailedPrecondition(what + " exited with code " +
                                      std::to_string(code) +
                                      " but left no checkpoint in " + dir);
    }
    const client::ProgressSnapshot after = job->reader->Read();
    r.took_us = MicrosSince(t0);
    r.save_us = after.last_effective_ns > after.last_received_ns &&
                        after.last_received_ns > 0
                    ? NsToUs(after.last_effective_ns, after.last_received_ns)
                    : 0;
    r.method = "library";
    r.minibatches = static_cast<int64_t>(after.minibatches);
    r.exit_code = code;
    r.exiting = exiting;
    std::lock_guard<std::mutex> lock(mu_);
    HoldLocked(job->job_id, dir, job->submitted_us, job->spec);
    return r;
  }
  // Failed or timed out: cancel the request and put the job back.
  (void)job->reader->Request(client::RequestKind::kNone);
  std::string reason =
      failed ? "its save failed (" + PageErrorName(s.last_result) + ")"
             : "it did not save and exit within " +
                   std::to_string(timeout.count()) + " ms (page state " +
                   std::string(client::JobStateName(s.state)) + ")";
  if (was_suspended) {
    auto again = SuspendLocked(job, Clock::now());
    if (!again.ok()) {
      reason += "; suspending it again failed: " + again.status().message();
    }
  }
  return core::FailedPrecondition(what + " was not checkpointed: " + reason +
                                  "; the request was cancelled and the job "
                                  "left " +
                                  (was_suspended ? "suspended" : "running"));
}

core::StatusOr<CheckpointResult> Supervisor::CheckpointRestart(
    const std::shared_ptr<JobRec>& job, bool was_suspended,
    std::chrono::milliseconds timeout, Clock::time_point t0) {
  const std::string what = JobIdText(job->job_id);
  const pid_t pgid = job->pid;
  kill(-pgid, SIGTERM);
  if (was_suspended) kill(-pgid, SIGCONT);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (job->state == RunState::kSuspended) job->state = RunState::kRunning;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!exited_cv_.wait_for(lock, timeout, [&] { return job->exited.load(); })) {
    return core::Status(core::StatusCode::kUnavailable,
                        what + " (restartable) did not exit within " +
                            std::to_string(timeout.count()) + " ms of SIGTERM");
  }
  CheckpointResult r;
  r.exit_code = job->exit_code;
  lock.unlock();
  const std::string dir = CheckpointDir(job->job_id);
  DirStats(dir, &r.bytes, &r.files);
  r.took_us = MicrosSince(t0);
  r.method = "restart";
  r.minibatches = static_cast<int64_t>(job->reader->minibatches());
  lock.lock();
  HoldLocked(job->job_id, dir, job->submitted_us, job->spec);
  return r;
}

core::StatusOr<WarmReady> Supervisor::AwaitWarm(
    int64_t job_id, std::chrono::milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  const std::string what = JobIdText(job_id);
  auto job = Find(job_id);
  if (!job) return core::NotFound(what + " is not known to this agent");
  if (!job->warm) {
    return core::FailedPrecondition(what + " was not started warm here");
  }
  WarmReady r;
  client::ProgressSnapshot s;
  // The process builds its model, then waits for the checkpoint.
  r.ready = PollUntil(*job, end, [&] {
    s = job->reader->Read();
    return s.state == client::JobState::kWaiting || s.restore_begin_ns != 0;
  });
  if (!r.ready && job->exited.load()) {
    return core::FailedPrecondition(what + " exited (code " +
                                    std::to_string(ExitCodeOf(*job)) +
                                    ") before waiting for its checkpoint");
  }
  if (r.ready && s.state == client::JobState::kWaiting) {
    const uint64_t since =
        job->raw_page != nullptr
            ? job->raw_page->state_changed_ns.load(std::memory_order_acquire)
            : MonotonicNs();
    r.ready_us = NsToUs(since, job->started_ns);
  }
  return r;
}

int Supervisor::ExitCodeOf(const JobRec& job) const {
  std::lock_guard<std::mutex> lock(mu_);
  return job.exit_code;
}

core::StatusOr<RestoreResult> Supervisor::AwaitRestore(
    int64_t job_id, bool await_first_minibatch,
    std::chrono::milliseconds timeout,
    const std::function<core::Status()>& make_ready, bool hold) {
  const auto end = Clock::now() + timeout;
  const std::string what = JobIdText(job_id);
  auto late = [&](const std::string& what_for) {
    return core::Status(core::StatusCode::kUnavailable,
                        what + " did not " + what_for + " within " +
                            std::to_string(timeout.count()) + " ms");
  };
  auto warm = AwaitWarm(job_id, timeout);
  if (!warm.ok()) return warm.status();
  if (!warm->ready) return late("wait for its checkpoint (page state WAITING)");
  auto job = Find(job_id);
  if (!job) return core::NotFound(what + " is not known to this agent");
  auto gone = [&](const std::string& when) {
    return core::FailedPrecondition(what + " exited (code " +
                                    std::to_string(ExitCodeOf(*job)) + ") " +
                                    when);
  };
  RestoreResult r;
  r.warm_us = warm->ready_us;
  client::ProgressSnapshot s;
  GANDIVA_RETURN_IF_ERROR(make_ready());
  const bool restored = PollUntil(*job, end, [&] {
    s = job->reader->Read();
    return s.restore_end_ns != 0;
  });
  if (!restored) {
    if (job->exited.load()) return gone("while restoring its checkpoint");
    return late("restore its checkpoint");
  }
  r.load_us = NsToUs(s.restore_end_ns, s.restore_begin_ns);
  r.restore_begin_ns = s.restore_begin_ns;
  r.restore_end_ns = s.restore_end_ns;
  const uint64_t restore_end = s.restore_end_ns;
  if (await_first_minibatch) {
    const uint64_t at_end = s.minibatches;
    const bool stepped = PollUntil(*job, end, [&] {
      s = job->reader->Read();
      return s.last_boundary_ns > restore_end || s.minibatches > at_end;
    });
    if (!stepped && !(job->exited.load() && s.minibatches > at_end)) {
      if (job->exited.load()) {
        return gone("before its first mini-batch after the restore");
      }
      return late("train a mini-batch after its restore");
    }
    r.first_minibatch_us = NsToUs(s.last_boundary_ns, restore_end);
  }
  if (hold) {
    std::lock_guard<std::mutex> lock(mu_);
    HoldLocked(job_id, IncomingDir(job_id), job->submitted_us, job->spec);
  }
  return r;
}

std::string Supervisor::HeldCheckpoint(int64_t job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(job_id);
  return it == held_.end() ? std::string() : it->second.dir;
}

void Supervisor::HoldCheckpoint(int64_t job_id, const std::string& dir,
                                int64_t submitted_us) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string spec;
  if (auto it = held_.find(job_id); it != held_.end()) {
    if (submitted_us == 0) submitted_us = it->second.submitted_us;
    spec = it->second.spec;
  }
  if (auto job = jobs_.find(job_id); spec.empty() && job != jobs_.end()) {
    spec = job->second->spec;
  }
  HoldLocked(job_id, dir, submitted_us, spec);
}

bool Supervisor::DropCheckpoint(int64_t job_id) {
  bool had = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    had = held_.erase(job_id) > 0;
    unlink(HeldRecordPath(job_id).c_str());
    unlink(HeldSpecPath(job_id).c_str());
  }
  // The checkpoint and incoming directories; their parent too when that
  // leaves it empty (it also holds the job's log when checkpoints live in
  // the work dir).
  std::error_code ec;
  std::filesystem::remove_all(CheckpointDir(job_id), ec);
  std::filesystem::remove_all(IncomingDir(job_id), ec);
  std::filesystem::remove(
      std::filesystem::path(CheckpointDir(job_id)).parent_path(), ec);
  return had;
}

void Supervisor::HoldLocked(int64_t job_id, const std::string& dir,
                            int64_t submitted_us, const std::string& spec) {
  held_[job_id] = Held{dir, cluster_, submitted_us, spec};
  if (spec.empty()) {
    unlink(HeldSpecPath(job_id).c_str());
  } else {
    (void)WriteWhole(HeldSpecPath(job_id), spec);
  }
  // On disk too, for the next agent on this checkpoint root
  // (RecoverCheckpoints).
  (void)WriteWhole(
      HeldRecordPath(job_id),
      dir + "\n" + cluster_ + "\n" + std::to_string(submitted_us) + "\n");
}

std::vector<int64_t> Supervisor::RecoverCheckpoints() {
  std::vector<int64_t> found;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(CheckpointRoot() + "/jobs", ec)) {
    const std::optional<int64_t> parsed =
        JobIdOfDirName(entry.path().filename().string());
    if (!parsed || *parsed <= 0) continue;
    const int64_t id = *parsed;
    const std::string record = HeldRecordPath(id);
    std::ifstream f(record);
    std::string dir, cluster, submitted;
    if (!f || !std::getline(f, dir)) continue;
    (void)std::getline(f, cluster);    // none in a record from before it
    (void)std::getline(f, submitted);  // nor this
    int64_t submitted_us = 0;
    if (!submitted.empty()) {
      char* end = nullptr;
      submitted_us = std::strtoll(submitted.c_str(), &end, 10);
      if (end == nullptr || *end != '\0') submitted_us = 0;  // unknown
    }
    int64_t bytes = 0;
    int files = 0;
    DirStats(dir, &bytes, &files);
    std::lock_guard<std::mutex> lock(mu_);
    if (files == 0) {
      // Its files are gone (a ramdisk emptied by a reboot, an operator):
      // nothing to resume from.
      unlink(record.c_str());
      unlink(HeldSpecPath(id).c_str());
      continue;
    }
    auto job = jobs_.find(id);
    if (job != jobs_.end() && !job->second->exited.load()) continue;
    std::string spec;
    if (std::ifstream sf(HeldSpecPath(id), std::ios::binary); sf) {
      std::ostringstream read;
      read << sf.rdbuf();
      spec = read.str();
    }
    held_.emplace(id, Held{dir, cluster, submitted_us, std::move(spec)});
    found.push_back(id);
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::vector<int64_t> Supervisor::HeldCheckpoints() const {
  std::vector<int64_t> ids;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, held] : held_) ids.push_back(id);
  return ids;
}

std::string Supervisor::HeldCheckpointCluster(int64_t job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(job_id);
  return it == held_.end() ? std::string() : it->second.cluster;
}

int64_t Supervisor::HeldCheckpointSubmitted(int64_t job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(job_id);
  return it == held_.end() ? 0 : it->second.submitted_us;
}

std::string Supervisor::HeldCheckpointSpec(int64_t job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(job_id);
  return it == held_.end() ? std::string() : it->second.spec;
}

std::string Supervisor::Cluster() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cluster_;
}

std::vector<int64_t> Supervisor::SetCluster(const std::string& cluster) {
  std::vector<int64_t> foreign;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cluster_ = cluster;
    for (const auto& [id, held] : held_) {
      if (!held.cluster.empty() && held.cluster != cluster) {
        foreign.push_back(id);
      }
    }
  }
  for (int64_t id : foreign) DropCheckpoint(id);
  return foreign;
}

std::vector<int64_t> Supervisor::CheckpointForStop(
    std::chrono::milliseconds timeout, std::vector<std::string>* failures,
    const std::vector<int64_t>& exiting, bool with_criu) {
  std::vector<int64_t> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, job] : jobs_) {
      // A warm start has nothing of its own to save yet; a gang's part
      // cannot be saved without its other parts.
      if (job->exited.load() || job->warm || job->gang) continue;
      candidates.push_back(id);
    }
  }
  std::mutex out_mu;
  std::vector<int64_t> saved;
  std::vector<std::thread> savers;
  savers.reserve(candidates.size() + exiting.size());
  for (int64_t id : candidates) {
    savers.emplace_back([&, id] {
      auto r = CheckpointWithin(id, 0, false, timeout, with_criu);
      std::lock_guard<std::mutex> out(out_mu);
      if (!r.ok()) {
        if (failures != nullptr) failures->push_back(r.status().message());
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto e = exits_.rbegin(); e != exits_.rend(); ++e) {
          if (e->job_id == id) {
            e->checkpoint_kept = true;
            e->checkpoint_method = r->method;
            break;
          }
        }
      }
      saved.push_back(id);
    });
  }
  for (int64_t id : exiting) {
    savers.emplace_back(
        [this, id, timeout] { (void)WaitForExit(id, timeout); });
  }
  for (auto& t : savers) t.join();
  std::sort(saved.begin(), saved.end());
  return saved;
}

void Supervisor::SetCapabilities(const Capabilities& caps) {
  std::lock_guard<std::mutex> lock(mu_);
  caps_ = caps;
}

Capabilities Supervisor::capabilities() const {
  std::lock_guard<std::mutex> lock(mu_);
  return caps_;
}

}  // namespace gandiva::runtime
