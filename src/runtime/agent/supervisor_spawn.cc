// Spawning and reaping: Start (the command as a child in a session of its
// own, with the gandiva environment), the job's process record and what an
// earlier agent left (KillLeftovers), and the waiter thread that reaps a
// job and records its exit.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <utility>

#include "runtime/agent/criu.h"
#include "runtime/agent/supervisor.h"
#include "runtime/agent/supervisor_files.h"
#include "runtime/agent/supervisor_impl.h"
#include "runtime/exec_env.h"

namespace gandiva::runtime {
namespace {

using supervisor_internal::Clock;
using supervisor_internal::Errno;
using supervisor_internal::JobIdText;
using supervisor_internal::MicrosSince;
using supervisor_internal::MonotonicNs;

// The code gandiva-job-shim wrote to `path`; nullopt when there is none.
std::optional<int> ReadExitFile(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream f(path);
  int code = 0;
  if (!(f >> code)) return std::nullopt;
  return code;
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

// The Unix account a job runs as.
struct Account {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name, home;
};

// The account of `owner` (SupervisorOptions::run_as_owner); nullopt when
// jobs run as this process's user.
core::StatusOr<std::optional<Account>> AccountOf(const SupervisorOptions& o,
                                                 const std::string& owner,
                                                 const std::string& what) {
  if (!o.run_as_owner) return std::optional<Account>();
  if (owner.empty()) {
    return core::FailedPrecondition(
        what +
        " has no owner to run as (this agent runs jobs as their "
        "owners: --run-as-owner)");
  }
  auto mapped = o.user_map.find(owner);
  const std::string name = mapped == o.user_map.end() ? owner : mapped->second;
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 ||
      found == nullptr) {
    return core::FailedPrecondition(
        what + ": its owner '" + owner + "' has no Unix account '" + name +
        "' on this server (map it with gandiva-agent --map-user " + owner +
        "=ACCOUNT)");
  }
  if (pw.pw_uid == 0 && !o.allow_root_jobs) {
    return core::FailedPrecondition(
        what + ": its owner '" + owner + "' runs as root ('" + name +
        "'), which this agent allows only with --allow-root-jobs");
  }
  return std::optional<Account>(
      Account{pw.pw_uid, pw.pw_gid, pw.pw_name, pw.pw_dir});
}

// setpriv (util-linux) switches to the account before the command runs.
const char* SetprivPath() {
  for (const char* p : {"/usr/bin/setpriv", "/bin/setpriv"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "/usr/bin/setpriv";
}

}  // namespace

std::string Supervisor::ProcessRecordPath(int64_t job_id, pid_t pid) const {
  return JobDir(job_id) + "/process." + std::to_string(pid);
}

void Supervisor::WriteProcessRecord(const JobRec& job) const {
  const auto st = ops_->Stat(job.pid);
  const auto self = ops_->Stat(getpid());
  std::string text =
      std::to_string(job.pid) + " " + std::to_string(st ? st->starttime : 0) +
      " " + std::to_string(getpid()) + " " +
      std::to_string(self ? self->starttime : 0) + " " + job.page_path + "\n";
  const std::string path = ProcessRecordPath(job.job_id, job.pid);
  if (job.shim_pid > 0) {
    text += "shim " + std::to_string(job.shim_pid) + " " +
            std::to_string(job.shim_starttime) + " " + job.exit_file + "\n";
    text +=
        "job " + (job.gpus.empty() ? std::string("-") : JoinInts(job.gpus)) +
        " " + std::to_string(job.submitted_us) + " " +
        (job.restartable ? "1" : "0") + " " + (job.warm ? "1" : "0") + " " +
        (job.gang ? "1" : "0") + " " + (job.without_library ? "1" : "0") + "\n";
    (void)WriteWhole(JobDir(job.job_id) + "/spec." + std::to_string(job.pid),
                     job.spec);
  }
  // Best effort: only a crash of this agent needs it.
  (void)WriteWhole(path, text);
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
  auto same_process = [this](long long pid, unsigned long long starttime) {
    if (pid <= 1) return false;
    const auto st = ops_->Stat(static_cast<pid_t>(pid));
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
    ops_->Kill(-static_cast<pid_t>(pid), SIGKILL);
    ops_->Kill(static_cast<pid_t>(pid), SIGKILL);
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

  auto account = AccountOf(options_, params.owner, what);
  if (!account.ok()) return account.status();

  std::unique_lock<std::mutex> lock(mu_);
  if (auto it = jobs_.find(params.job_id); it != jobs_.end()) {
    if (it->second->state != RunState::kExited) {
      return core::AlreadyExists(what + " already runs here (pid " +
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
    const std::optional<HeldCheckpointTable::Held> held =
        held_.Get(params.job_id);
    if (!held) {
      return core::FailedPrecondition(
          what + " has no checkpoint on this agent (resume_local)");
    }
    if (const int64_t saved_by = held->submitted_us;
        saved_by != 0 && params.submitted_us != 0 &&
        saved_by != params.submitted_us) {
      return core::FailedPrecondition(
          what +
          ": the checkpoint held here was saved by another job of that "
          "id (submitted at " +
          std::to_string(saved_by) + " us, this one at " +
          std::to_string(params.submitted_us) + " us)");
    }
    resume_from = held->dir;
    if (HoldsCriuImages(resume_from)) {
      lock.unlock();
      return StartFromCriu(params, resume_from, t0);
    }
  }
  if (params.warm) {
    // A checkpoint received here earlier moves aside for the new one.
    held_.MoveIncomingAside(params.job_id);
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
  env.erase("GANDIVA_CHECKPOINT_EVERY_MINIBATCHES");
  env.erase("GANDIVA_CHECKPOINT_EVERY_S");
  if (params.checkpoint_every_minibatches > 0) {
    env["GANDIVA_CHECKPOINT_EVERY_MINIBATCHES"] =
        std::to_string(params.checkpoint_every_minibatches);
  } else if (params.checkpoint_every_us > 0) {
    char s[32];
    std::snprintf(s, sizeof s, "%.6f",
                  static_cast<double>(params.checkpoint_every_us) / 1e6);
    env["GANDIVA_CHECKPOINT_EVERY_S"] = s;
  }
  // A note of a periodic checkpoint is this run's alone: one left by an
  // earlier run is dropped, unless this run goes on from that checkpoint.
  if (!params.resume_local || resume_from != checkpoint_dir) {
    unlink((checkpoint_dir + "/" GANDIVA_SAVED_FILE).c_str());
  }
  for (const char* name : kGangEnvNames) env.erase(name);
  for (const auto& [k, v] : params.gang_env) env[k] = v;
  if (caps_.mps && !options_.virtual_gpus) {
    // Every job on a real GPU is an MPS client, not only the second of a
    // pack: a job packed later shares its GPU through MPS only if the job
    // already there is a client too.
    env["CUDA_MPS_PIPE_DIRECTORY"] = caps_.mps_pipe_dir;
    env["CUDA_MPS_LOG_DIRECTORY"] = caps_.mps_log_dir;
  }
  // Run as the owner's account: the files it writes are handed to it, and
  // setpriv takes its ids before the command runs.
  std::vector<std::string> args = {"sh", "-c", params.command};
  const char* program = "/bin/sh";
  if (*account) {
    const Account& a = **account;
    for (const std::string& path :
         {JobDir(params.job_id), checkpoint_dir, job->page_path,
          params.warm ? incoming_dir : std::string()}) {
      if (!path.empty() && chown(path.c_str(), a.uid, a.gid) != 0) {
        unlink(job->page_path.c_str());
        return core::IoError("handing " + path + " to account " + a.name +
                             " (" + what + "): " + Errno(errno));
      }
    }
    // Its own, unless the spec sets them.
    env.emplace("HOME", a.home);
    env.emplace("USER", a.name);
    env.emplace("LOGNAME", a.name);
    args = {"setpriv",
            "--reuid=" + std::to_string(a.uid),
            "--regid=" + std::to_string(a.gid),
            "--init-groups",
            "--",
            "/bin/sh",
            "-c",
            params.command};
    program = SetprivPath();
  }
  ExecEnv envp(
      env,
      {"CUDA_VISIBLE_DEVICES", "GANDIVA_VIRTUAL_GPUS", "GANDIVA_JOB_ID",
       "GANDIVA_PROGRESS_FILE", "GANDIVA_CHECKPOINT_DIR", "GANDIVA_RESUME_FROM",
       "GANDIVA_RESUME_WAIT", "GANDIVA_WORLD_SIZE",
       "GANDIVA_CHECKPOINT_EVERY_MINIBATCHES", "GANDIVA_CHECKPOINT_EVERY_S",
       kGangEnvNames[0], kGangEnvNames[1], kGangEnvNames[2], kGangEnvNames[3],
       kGangEnvNames[4], kGangEnvNames[5]});
  // Through the shim: it runs the program and keeps its exit status
  // (job_shim.cc); fd 3 brings back the job's pid and any exec error.
  const std::string exit_file =
      shim_.empty()
          ? std::string()
          : JobDir(params.job_id) + "/exit." + std::to_string(MonotonicNs());
  if (!shim_.empty()) {
    args.insert(args.begin(), {"gandiva-job-shim", exit_file, program});
    program = shim_.c_str();
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // A warm start is the destination of a move: the job's whole log so far
  // comes from the source (EarlierLogPath), so what an earlier stay here
  // left is dropped, not repeated. The log here is one part's: a start as
  // another part of a job spanning servers than the one that wrote it (a
  // part where its lead ran before, the lead where a part did) begins it
  // afresh; the lead's lines went with the lead.
  const auto rank = params.gang_env.find("GANDIVA_NODE_RANK");
  const std::string part = rank == params.gang_env.end() ? "0" : rank->second;
  const std::string part_file = JobDir(params.job_id) + "/log.part";
  std::string wrote;
  {
    std::ifstream in(part_file);
    std::getline(in, wrote);
  }
  const bool other_part = wrote.empty() ? part != "0" : wrote != part;
  {
    std::ofstream out(part_file, std::ios::trunc);
    out << part << "\n";
  }
  const int log_fd = open(job->log_path.c_str(),
                          O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC |
                              (params.warm || other_part ? O_TRUNC : 0),
                          0644);
  if (log_fd < 0) {
    return core::IoError("opening log " + job->log_path + ": " + Errno(errno));
  }
  int pid_pipe[2] = {-1, -1};
  if (!shim_.empty() && pipe2(pid_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close(log_fd);
    return core::IoError("starting " + what + ": pipe: " + Errno(err));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
  if (pid_pipe[1] >= 0) posix_spawn_file_actions_adddup2(&fa, pid_pipe[1], 3);
  posix_spawn_file_actions_addclosefrom_np(&fa, pid_pipe[1] >= 0 ? 4 : 3);
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
      ops_->Spawn(&pid, program, &fa, attr.get(), argv.data(), envp.envp());
  if (pinned) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  posix_spawn_file_actions_destroy(&fa);
  close(log_fd);
  if (pid_pipe[1] >= 0) close(pid_pipe[1]);
  if (rc != 0) {
    if (pid_pipe[0] >= 0) close(pid_pipe[0]);
    unlink(job->page_path.c_str());
    return core::IoError("starting " + what + " (/bin/sh -c in " + workdir +
                         "): " + Errno(rc));
  }
  if (pid_pipe[0] >= 0) {
    // The shim's child pid, then its exec error if any, then end of file.
    int32_t words[2] = {0, 0};
    size_t got = 0;
    for (;;) {
      const ssize_t r = read(pid_pipe[0], reinterpret_cast<char*>(words) + got,
                             sizeof words - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
      if (got == sizeof words) break;
    }
    close(pid_pipe[0]);
    if (got < sizeof words[0] || words[0] <= 0 || got == sizeof words) {
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      unlink(exit_file.c_str());
      unlink(job->page_path.c_str());
      const int err = got == sizeof words ? words[1] : EIO;
      return core::IoError("starting " + what + " (/bin/sh -c in " + workdir +
                           "): " + Errno(err));
    }
    job->shim_pid = pid;
    if (const auto st = ops_->Stat(pid)) job->shim_starttime = st->starttime;
    job->exit_file = exit_file;
    pid = static_cast<pid_t>(words[0]);
  }
  job->pid = pid;
  WriteProcessRecord(*job);
  job->waiter = std::thread([this, job] { Wait(job); });
  jobs_[params.job_id] = job;
  exits_.Supersede(params.job_id);
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

void Supervisor::Wait(const std::shared_ptr<JobRec>& job) {
  if (job->shim_pid > 0) {
    Ended(job, WaitForShim(*job));
    return;
  }
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
  Ended(job, code);
}

int Supervisor::WaitForShim(const JobRec& job) {
  // The shim ends as its child, the job's process, did. Meanwhile what the
  // job's processes leave in its group when their parent ends is ours (a
  // child subreaper), reaped as it dies.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, job.shim_pid, 0));
  int code = -1;
  for (;;) {
    if (!job.taken_back) {
      int status = 0;
      const pid_t r = waitpid(job.shim_pid, &status, WNOHANG);
      if (r == job.shim_pid) {
        code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        break;
      }
      if (r < 0 && errno != EINTR) break;  // not ours after all
    } else if (const auto st = ops_->Stat(job.shim_pid);
               !st || IsDeadState(st->state) ||
               st->starttime != job.shim_starttime) {
      break;  // not ours to reap: init does
    }
    ReapEndedInGroup(job.pid);
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      poll(&p, 1, 200);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  if (pidfd >= 0) close(pidfd);
  // Its exit file says what the job's process did; the shim's own status
  // says the same, unless the shim itself was killed.
  if (std::optional<int> written = ReadExitFile(job.exit_file)) {
    code = *written;
  } else if (job.taken_back) {
    code = -SIGKILL;  // the shim was killed: so was the job, or it will be
  }
  // The exit file goes once the exit is in the journal (Ended).
  return code;
}

std::optional<int64_t> Supervisor::SettleCheckpoint(int64_t job_id,
                                                    bool left_by_itself,
                                                    bool failed,
                                                    int64_t submitted_us,
                                                    const std::string& spec) {
  if (!left_by_itself) return std::nullopt;
  const std::optional<int64_t> periodic =
      failed ? PeriodicCheckpointAt(CheckpointDir(job_id)) : std::nullopt;
  if (periodic) {
    std::lock_guard<std::mutex> lock(mu_);
    held_.Hold(job_id, CheckpointDir(job_id), submitted_us, spec);
  } else {
    DropCheckpoint(job_id);
  }
  return periodic;
}

void Supervisor::Ended(const std::shared_ptr<JobRec>& job, int code) {
  // What the job left behind in its group (workers, background commands),
  // gone before the exit is recorded (they may hold its GPUs): a SIGKILL
  // takes effect soon, not at once, so wait a little for it.
  // Those whose parent ended first are this process's children (a child
  // subreaper): reaped here, as they die, or their zombies would stay in
  // the group. The group is the job's alone (its own session).
  ops_->Kill(-job->pid, SIGKILL);
  // Done when none runs and no zombie there is ours to reap.
  auto settled = [&] {
    const pid_t self = getpid();
    for (const ProcInfo& p : ops_->GroupProcesses(job->pid)) {
      if (!IsDeadState(p.state) || p.ppid == self) return false;
    }
    return true;
  };
  for (int i = 0; i < 400; ++i) {
    ReapEndedInGroup(job->pid);
    if (settled()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::optional<int64_t> periodic = SettleCheckpoint(
      job->job_id,
      !job->checkpointing.load() && code != GANDIVA_EXIT_MIGRATE &&
          code != GANDIVA_EXIT_RESIZE,
      code != 0 &&
          (!job->kill_requested.load() || job->kill_keeps_periodic.load()) &&
          !job->killed_for_stop.load(),
      job->submitted_us, job->spec);
  const int64_t minibatches =
      periodic
          ? *periodic
          : static_cast<int64_t>(job->reader ? job->reader->minibatches() : 0);
  std::optional<client::ProgressSnapshot> last;
  if (job->reader) last = job->reader->Read();
  ExitRecord rec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job->state = RunState::kExited;
    job->exit_code = code;
    job->exited.store(true);
    rec.job_id = job->job_id;
    rec.exit_code = code;
    rec.minibatches = minibatches;
    rec.killed = job->kill_requested.load();
    // A job that finished by itself as it was killed keeps its success.
    rec.agent_stopping =
        job->killed_for_stop.load() && !rec.killed && code != 0;
    if (periodic) {
      rec.checkpoint_kept = true;
      rec.checkpoint_method = "periodic";
    }
    if (last) {
      rec.metric = last->metric;
    }
    rec = exits_.Add(rec);
  }
  // The exit is in the journal (and its file, WORK_DIR/exits): what an
  // agent killed until now would have told the next goes.
  unlink(job->page_path.c_str());  // the mapping stays readable
  unlink(ProcessRecordPath(job->job_id, job->pid).c_str());
  unlink((JobDir(job->job_id) + "/spec." + std::to_string(job->pid)).c_str());
  if (!job->exit_file.empty()) unlink(job->exit_file.c_str());
  exited_cv_.notify_all();
  if (on_exit_) on_exit_(rec);
}

}  // namespace gandiva::runtime
