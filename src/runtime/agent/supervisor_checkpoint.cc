// Checkpointing: a job saves its state and exits for a move or resize
// (through the library's page, SIGTERM for a restartable job, or a CRIU
// dump), saves before the agent stops (CheckpointForStop), and, at the
// destination, a warm start waits for its checkpoint (AwaitWarm,
// AwaitRestore) or a CRIU dump is restored (StartFromCriu).
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/agent/criu.h"
#include "runtime/agent/supervisor.h"
#include "runtime/agent/supervisor_files.h"
#include "runtime/agent/supervisor_impl.h"

namespace gandiva::runtime {
namespace {

using supervisor_internal::Clock;
using supervisor_internal::Errno;
using supervisor_internal::JobIdText;
using supervisor_internal::MicrosSince;
using supervisor_internal::MonotonicNs;
using supervisor_internal::NsToUs;

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

}  // namespace

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
  held_.Hold(job->job_id, dir, job->submitted_us, job->spec);
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
    ops_->Kill(-pgid, SIGCONT);
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
    held_.Hold(job->job_id, dir, job->submitted_us, job->spec);
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
  ops_->Kill(-pgid, SIGTERM);
  if (was_suspended) ops_->Kill(-pgid, SIGCONT);
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
  held_.Hold(job->job_id, dir, job->submitted_us, job->spec);
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
    held_.Hold(job_id, IncomingDir(job_id), job->submitted_us, job->spec);
  }
  return r;
}

std::vector<int64_t> Supervisor::CheckpointForStop(
    std::chrono::milliseconds timeout, std::vector<std::string>* failures,
    const std::vector<int64_t>& exiting, bool with_criu) {
  std::vector<int64_t> candidates;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, job] : jobs_) {
      // A warm start has nothing of its own to save until it has restored
      // its checkpoint (then it trains as any job, and is saved as one); a
      // gang's part cannot be saved without its other parts.
      const bool waits = job->warm && job->reader->Read().restore_end_ns == 0;
      if (job->exited.load() || waits || job->gang) continue;
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
      exits_.MarkCheckpointKept(id, r->method);
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
      for (pid_t p : ops_->GroupMembers(pid)) {
        sched_setaffinity(p, sizeof set, &set);
      }
    }
  }
  // A job dumped while suspended comes back stopped; a start runs it.
  ops_->Kill(-pid, SIGCONT);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = jobs_.find(params.job_id); it != jobs_.end()) {
    if (it->second->state != RunState::kExited) {
      // Started meanwhile by another call: this copy goes.
      ops_->Kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      unlink(job->page_path.c_str());
      return core::AlreadyExists(what + " already runs here (pid " +
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
  exits_.Supersede(params.job_id);
  return StartResult{pid, MicrosSince(t0)};
}

}  // namespace gandiva::runtime
