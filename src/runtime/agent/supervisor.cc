// The supervisor's core: construction, paths, the job table and what it
// shows (Jobs, WaitForExit), and the entry points of its parts: the exit
// journal (exit_journal.h) and the held checkpoints (held_checkpoints.h).
// Spawning and reaping: supervisor_spawn.cc; signals:
// supervisor_signals.cc; checkpoints: supervisor_checkpoint.cc.
#include "runtime/agent/supervisor.h"

#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <utility>

#include "runtime/agent/supervisor_files.h"
#include "runtime/agent/supervisor_impl.h"

namespace gandiva::runtime {
namespace {

using supervisor_internal::Clock;
using supervisor_internal::JobIdText;

// SupervisorOptions::job_shim resolved: a path to an executable, or "".
std::string ResolveShim(const std::string& option) {
  if (option == "none") return "";
  auto usable = [](const std::string& p) {
    return !p.empty() && access(p.c_str(), X_OK) == 0;
  };
  if (!option.empty()) return usable(option) ? option : "";
  std::error_code ec;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const std::string beside =
        (self.parent_path() / "gandiva-job-shim").string();
    if (usable(beside)) return beside;
  }
#ifdef GANDIVA_JOB_SHIM_BUILT
  if (usable(GANDIVA_JOB_SHIM_BUILT)) return GANDIVA_JOB_SHIM_BUILT;
#endif
  return "";
}

bool Overlaps(const std::vector<int>& a, const std::vector<int>& b) {
  for (int x : a) {
    if (std::find(b.begin(), b.end(), x) != b.end()) return true;
  }
  return false;
}

}  // namespace

bool IsNoteFile(std::string_view name) {
  return name.starts_with(GANDIVA_RESUME_READY_FILE) ||
         name.starts_with(GANDIVA_STREAM_OFFER_FILE) ||  // and STREAM_OK
         name.starts_with(GANDIVA_SAVED_FILE);
}

Supervisor::Supervisor(SupervisorOptions options,
                       std::function<void(const ExitRecord&)> on_exit)
    : options_(std::move(options)),
      on_exit_(std::move(on_exit)),
      ops_(options_.process_ops ? options_.process_ops : RealProcessOps()),
      exits_(options_.work_dir + "/unreported-exits",
             options_.work_dir + "/exits"),
      held_(options_.checkpoint_root.empty() ? options_.work_dir
                                             : options_.checkpoint_root),
      shim_(ResolveShim(options_.job_shim)) {
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
std::string Supervisor::CheckpointDir(int64_t job_id) const {
  return held_.CheckpointDir(job_id);
}
std::string Supervisor::IncomingDir(int64_t job_id) const {
  return held_.IncomingDir(job_id);
}

std::shared_ptr<Supervisor::JobRec> Supervisor::Find(int64_t job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second;
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

int Supervisor::ExitCodeOf(const JobRec& job) const {
  std::lock_guard<std::mutex> lock(mu_);
  return job.exit_code;
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
    v.has_checkpoint = held_.Contains(job->job_id);
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

// ------------------------------------------------------------ exits

std::vector<ExitRecord> Supervisor::PendingExits() const {
  return exits_.Pending();
}

void Supervisor::AckExits(uint64_t up_to_seq) { exits_.Ack(up_to_seq); }

size_t Supervisor::SaveUnreportedExits() { return exits_.SaveUnreported(); }

size_t Supervisor::RecoverUnreportedExits() {
  return exits_.RecoverUnreported();
}

// ------------------------------------------------- held checkpoints

std::string Supervisor::HeldCheckpoint(int64_t job_id) const {
  auto held = held_.Get(job_id);
  return held ? held->dir : std::string();
}

void Supervisor::HoldCheckpoint(int64_t job_id, const std::string& dir,
                                int64_t submitted_us) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string spec;  // the job's process's, unless the one held says
  if (auto job = jobs_.find(job_id); job != jobs_.end()) {
    spec = job->second->spec;
  }
  held_.HoldAgain(job_id, dir, submitted_us, spec);
}

bool Supervisor::DropCheckpoint(int64_t job_id) {
  bool had = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    had = held_.Forget(job_id);
  }
  held_.RemoveFiles(job_id);
  return had;
}

std::vector<int64_t> Supervisor::RecoverCheckpoints() {
  std::vector<int64_t> found;
  for (int64_t id : held_.JobsOnDisk()) {
    std::optional<HeldCheckpointTable::Held> held = held_.ReadRecord(id);
    if (!held) continue;
    int64_t bytes = 0;
    int files = 0;
    DirStats(held->dir, &bytes, &files);
    std::lock_guard<std::mutex> lock(mu_);
    if (files == 0) {
      // Its files are gone (a ramdisk emptied by a reboot, an operator):
      // nothing to resume from.
      held_.RemoveRecords(id);
      continue;
    }
    auto job = jobs_.find(id);
    if (job != jobs_.end() && !job->second->exited.load()) continue;
    held_.Adopt(id, std::move(*held));
    found.push_back(id);
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::vector<int64_t> Supervisor::HeldCheckpoints() const { return held_.Ids(); }

std::string Supervisor::HeldCheckpointCluster(int64_t job_id) const {
  auto held = held_.Get(job_id);
  return held ? held->cluster : std::string();
}

int64_t Supervisor::HeldCheckpointSubmitted(int64_t job_id) const {
  auto held = held_.Get(job_id);
  return held ? held->submitted_us : 0;
}

std::string Supervisor::HeldCheckpointSpec(int64_t job_id) const {
  auto held = held_.Get(job_id);
  return held ? held->spec : std::string();
}

std::string Supervisor::Cluster() const { return held_.cluster(); }

std::vector<int64_t> Supervisor::SetCluster(const std::string& cluster) {
  std::vector<int64_t> foreign;
  {
    std::lock_guard<std::mutex> lock(mu_);
    foreign = held_.SetCluster(cluster);
  }
  for (int64_t id : foreign) DropCheckpoint(id);
  return foreign;
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
