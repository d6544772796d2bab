// Taking back what an earlier agent on this work dir left running
// (TakeBackLeftovers): jobs started through gandiva-job-shim go on under
// this supervisor; jobs that ended meanwhile have their exits recorded from
// the shim's exit file; the rest is killed.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "runtime/agent/supervisor.h"
#include "runtime/agent/supervisor_files.h"
#include "runtime/agent/supervisor_impl.h"

namespace gandiva::runtime {
namespace {

// One process record (Supervisor::ProcessRecordPath), as read back.
struct Record {
  long long pid = 0, agent = 0;
  unsigned long long starttime = 0, agent_starttime = 0;
  std::string page;
  // Started through the shim: its line and the job's.
  long long shim = 0;
  unsigned long long shim_starttime = 0;
  std::string exit_file;
  bool has_job_line = false;
  std::vector<int> gpus;
  int64_t submitted_us = 0;
  bool restartable = false, warm = false, gang = false, without_library = false;
};

Record ReadRecord(const std::filesystem::path& path) {
  Record r;
  std::ifstream f(path);
  std::string line;
  if (std::getline(f, line)) {
    std::istringstream in(line);
    in >> r.pid >> r.starttime >> r.agent >> r.agent_starttime >> r.page;
  }
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "shim") {
      in >> r.shim >> r.shim_starttime >> r.exit_file;
      if (!in) r.shim = 0;
    } else if (key == "job") {
      std::string gpus;
      int restartable = 0, warm = 0, gang = 0, without_library = 0;
      in >> gpus >> r.submitted_us >> restartable >> warm >> gang >>
          without_library;
      if (!in) continue;
      std::istringstream g(gpus == "-" ? "" : gpus);
      for (std::string one; std::getline(g, one, ',');) {
        r.gpus.push_back(std::stoi(one));
      }
      r.restartable = restartable != 0;
      r.warm = warm != 0;
      r.gang = gang != 0;
      r.without_library = without_library != 0;
      r.has_job_line = true;
    }
  }
  return r;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream out;
  out << f.rdbuf();
  return out.str();
}

}  // namespace

Supervisor::TakenBack Supervisor::TakeBackLeftovers() {
  TakenBack out;
  std::error_code ec;
  const std::filesystem::path jobs = options_.work_dir + "/jobs";
  std::vector<std::pair<int64_t, std::filesystem::path>> records;
  for (const auto& dir : std::filesystem::directory_iterator(jobs, ec)) {
    const std::optional<int64_t> id =
        JobIdOfDirName(dir.path().filename().string());
    if (!id) continue;
    std::error_code ec2;
    for (const auto& f : std::filesystem::directory_iterator(dir.path(), ec2)) {
      const std::string name = f.path().filename().string();
      if (name.rfind("process.", 0) == 0 && f.path().extension() != ".tmp") {
        records.emplace_back(*id, f.path());
      }
    }
  }
  auto same_process = [this](long long pid, unsigned long long starttime) {
    if (pid <= 1) return false;
    const auto st = ops_->Stat(static_cast<pid_t>(pid));
    return st && !IsDeadState(st->state) && st->starttime == starttime;
  };
  std::vector<std::pair<long long, unsigned long long>> killed_procs;
  for (const auto& [id, path] : records) {
    const Record r = ReadRecord(path);
    // Another agent's on this work dir that still runs (this one included).
    if (same_process(r.agent, r.agent_starttime)) continue;
    const bool job_alive = same_process(r.pid, r.starttime);
    const bool shim_alive =
        r.shim > 0 && same_process(r.shim, r.shim_starttime);
    const std::string spec_file = JobDir(id) + "/spec." + std::to_string(r.pid);
    if (shim_alive && r.has_job_line) {
      if (Adopt(id, path.string()).ok()) {
        out.adopted.push_back(id);
        continue;
      }
    }
    if (r.shim > 0 && !shim_alive && !job_alive) {
      // Ended while no agent ran: the shim wrote how.
      std::ifstream f(r.exit_file);
      int code = 0;
      if (f >> code) {
        ExitRecord rec;
        rec.job_id = id;
        rec.exit_code = code;
        if (auto reader = client::ProgressReader::Open(r.page); reader.ok()) {
          rec.minibatches = static_cast<int64_t>(reader->minibatches());
          rec.metric = reader->Read().metric;
        }
        // As Ended: a failure keeps the periodic checkpoint it saved.
        if (const std::optional<int64_t> periodic = SettleCheckpoint(
                id, code != GANDIVA_EXIT_MIGRATE && code != GANDIVA_EXIT_RESIZE,
                code != 0 && !r.gang, r.submitted_us, ReadAll(spec_file))) {
          rec.minibatches = *periodic;
          rec.checkpoint_kept = true;
          rec.checkpoint_method = "periodic";
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          exits_.Add(rec);
        }
        out.ended.push_back(id);
      }
      std::filesystem::remove(path, ec);
      std::filesystem::remove(r.exit_file, ec);
      std::filesystem::remove(spec_file, ec);
      if (!r.page.empty()) unlink(r.page.c_str());
      continue;
    }
    std::filesystem::remove(path, ec);
    std::filesystem::remove(spec_file, ec);
    if (!job_alive) continue;
    // It cannot be taken back: killed, as KillLeftovers does.
    ops_->Kill(-static_cast<pid_t>(r.pid), SIGKILL);
    ops_->Kill(static_cast<pid_t>(r.pid), SIGKILL);
    if (!r.page.empty()) unlink(r.page.c_str());
    out.killed.push_back(id);
    killed_procs.emplace_back(r.pid, r.starttime);
  }
  for (int i = 0; i < 200 && !killed_procs.empty(); ++i) {
    bool alive = false;
    for (const auto& [pid, started] : killed_procs) {
      alive |= same_process(pid, started);
    }
    if (!alive) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return out;
}

core::Status Supervisor::Adopt(int64_t job_id, const std::string& path) {
  const Record r = ReadRecord(path);
  auto job = std::make_shared<JobRec>();
  job->job_id = job_id;
  job->pid = static_cast<pid_t>(r.pid);
  job->shim_pid = static_cast<pid_t>(r.shim);
  job->shim_starttime = r.shim_starttime;
  job->exit_file = r.exit_file;
  job->taken_back = true;
  job->gpus = r.gpus;
  job->submitted_us = r.submitted_us;
  job->spec = ReadAll(JobDir(job_id) + "/spec." + std::to_string(r.pid));
  job->restartable = r.restartable;
  job->warm = r.warm;
  job->gang = r.gang;
  job->without_library = r.without_library;
  job->log_path = LogPath(job_id);
  job->page_path = r.page;
  // Its start grace is long past.
  job->started = Clock::now() - options_.library_start_grace;
  // Its page: every action on a job reads it.
  auto reader = client::ProgressReader::Open(r.page);
  if (!reader.ok()) return reader.status();
  job->reader.emplace(std::move(*reader));
  if (const int fd = open(r.page.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    void* m =
        mmap(nullptr, GANDIVA_PAGE_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m != MAP_FAILED) {
      job->raw_page = static_cast<const gandiva_progress_page*>(m);
    }
  }
  // Suspended when every process of its group is stopped; by the library
  // when its page says so.
  const bool stopped =
      !ops_->GroupMembers(job->pid).empty() && ops_->GroupStopped(job->pid);
  if (stopped) {
    job->state = RunState::kSuspended;
    if (job->reader->state() == client::JobState::kSuspended) {
      job->suspended_by_library = true;
      job->library_pid = job->reader->pid();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (jobs_.contains(job_id)) {
    return core::AlreadyExists(supervisor_internal::JobIdText(job_id) +
                               " already runs here");
  }
  std::error_code ec;
  std::filesystem::remove(path, ec);
  WriteProcessRecord(*job);  // as this agent's now
  jobs_[job_id] = job;
  job->waiter = std::thread([this, job] { Wait(job); });
  return core::Status::Ok();
}

}  // namespace gandiva::runtime
