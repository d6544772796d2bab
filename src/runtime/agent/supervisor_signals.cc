// Signals: Suspend (SIGTSTP to the library's process at a mini-batch
// boundary, SIGSTOP of the group otherwise), Resume (SIGCONT) and Kill
// (SIGTERM, then SIGKILL after the grace period), each through ProcessOps.
#include <signal.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "runtime/agent/supervisor.h"
#include "runtime/agent/supervisor_impl.h"

namespace gandiva::runtime {

using supervisor_internal::Clock;
using supervisor_internal::JobIdText;
using supervisor_internal::MicrosSince;

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
      return core::AlreadyExists(what + " is already suspended");
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
  if (library && ops_->Kill(main_pid, SIGTSTP) != 0) library = false;
  bool at_boundary = false;
  if (library) {
    // The library stops itself at its next mini-batch boundary. A library
    // that detached just before the signal left SIGTSTP at its default,
    // which a process in its own session ignores: the group stop below
    // takes it then.
    const bool stopped = PollUntil(*job, end, [&] {
      return ops_->IsStopped(main_pid) || ops_->Kill(main_pid, 0) != 0 ||
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
    if (!ops_->GroupStopped(pgid)) ops_->Kill(-pgid, SIGSTOP);
  } else {
    ops_->Kill(-pgid, SIGSTOP);
  }
  const bool stopped =
      PollUntil(*job, end, [&] { return ops_->GroupStopped(pgid); });
  if (!stopped) {
    if (job->exited.load()) {
      return core::FailedPrecondition(what + " exited while suspending");
    }
    // SIGSTOP cannot be ignored; only a process in uninterruptible sleep
    // takes this long. Leave it to stop; the caller sees the error.
    return core::Status(
        core::StatusCode::kUnavailable,
        what + " process group " + std::to_string(pgid) +
            " did not stop within " +
            std::to_string(options_.suspend_timeout.count()) +
            " ms; still running: " + ops_->RunningInGroup(pgid));
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
      return core::AlreadyExists(what + " is not suspended");
    }
    library = job->suspended_by_library;
    library_pid = job->library_pid;
  }
  // Suspend() saw every process stopped, so SIGCONT cannot be lost.
  const auto t0 = Clock::now();
  const pid_t pgid = job->pid;
  ops_->Kill(-pgid, SIGCONT);
  const auto end = t0 + options_.resume_timeout;
  bool running;
  if (library) {
    running = PollUntil(*job, end, [&] {
      const client::JobState s = job->reader->state();
      return !ops_->IsStopped(library_pid) &&
             s != client::JobState::kSuspended &&
             s != client::JobState::kSuspending &&
             s != client::JobState::kResuming;
    });
  } else {
    running = PollUntil(*job, end, [&] { return !ops_->IsStopped(pgid); });
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

core::Status Supervisor::Kill(int64_t job_id, bool keep_periodic) {
  auto job = Find(job_id);
  if (!job)
    return core::NotFound(JobIdText(job_id) + " is not known to this agent");
  std::lock_guard<std::mutex> action(job->action_mu);
  if (!job->exited.load()) {
    if (keep_periodic) job->kill_keeps_periodic.store(true);
    job->kill_requested.store(true);
  }
  return KillLocked(*job);
}

core::Status Supervisor::KillLocked(JobRec& job) {
  if (job.exited.load()) return core::Status::Ok();
  const pid_t pgid = job.pid;
  ops_->Kill(-pgid, SIGCONT);
  ops_->Kill(-pgid, SIGTERM);
  std::unique_lock<std::mutex> lock(mu_);
  if (exited_cv_.wait_for(lock, options_.kill_grace,
                          [&] { return job.exited.load(); })) {
    return core::Status::Ok();
  }
  ops_->Kill(-pgid, SIGKILL);
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

}  // namespace gandiva::runtime
