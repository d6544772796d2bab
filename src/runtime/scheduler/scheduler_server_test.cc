// The daemon in-process (and, for crash recovery, as a child process)
// against fake agents: small in-process Agent services that succeed, fail
// StartJob, or answer slowly. No timed assertions: every wait polls for a
// condition with a generous limit.
#include "runtime/scheduler/scheduler_server.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/scheduler/daemon_test_world.h"
#include "runtime/scheduler/etcd_test_util.h"
#include "runtime/scheduler/event_codec.h"
#include "runtime/scheduler/faulty_store.h"
#include "runtime/scheduler/leadership.h"
#include "runtime/scheduler/store.h"

namespace gandiva::runtime {
namespace {

namespace fs = std::filesystem;

// kFailReceive: checkpoints (a process that exits, its files kept) but
// cannot receive one (the transfer fails).
enum class Mode { kOk, kFailStart, kSlow, kFailReceive };

// The job's history has an entry for `action` (that succeeded, or failed,
// when `ok` is given).
bool HasEntry(const rpc::JobInfo& info, const std::string& action,
              std::optional<bool> ok = std::nullopt) {
  return std::any_of(info.history().begin(), info.history().end(),
                     [&](const rpc::HistoryEntry& h) {
                       return h.action() == action &&
                              (!ok.has_value() || h.ok() == *ok);
                     });
}

// A fake node agent: keeps a table of "processes" and answers like one.
// In the fake world (TestWorld) it is served in process, else on loopback.
class FakeAgent final : public rpc::Agent::Service {
 public:
  FakeAgent(std::string name, int gpus, Mode mode)
      : name_(std::move(name)), gpus_(gpus), mode_(mode) {
    if (TestWorld::Fake() != nullptr) {
      endpoint_ =
          std::make_shared<AgentEndpoint>(this, InProcess::Get().NewAddress());
      InProcess::Get().Add(endpoint_);
      address_ = endpoint_->address();
      return;
    }
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~FakeAgent() override {
    // No call may wait in it for ever.
    SetHold(hold_, false);
    SetHold(hold_suspends_, false);
    SetHold(hold_checkpoints_, false);
    if (endpoint_ != nullptr) {
      InProcess::Get().Remove(address_);
      endpoint_->Close();
      return;
    }
    server_->Shutdown();
  }

  struct Proc {
    rpc::JobState state;
    std::vector<int32_t> gpus;
    int64_t submitted_us = 0;  // StartJobRequest.submitted_us
    // StartJobRequest.spec, listed at registration (AgentJob.spec), as a
    // real agent does for a job on its server alone.
    std::optional<rpc::JobSpec> spec{};
  };

  grpc::Status StartJob(grpc::ServerContext*, const rpc::StartJobRequest* r,
                        rpc::StartJobReply* rep) override {
    {
      std::lock_guard lock(mu_);
      ++starts_begun_[r->job_id()];
    }
    if (mode_ == Mode::kSlow) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
    if (r->resume_local()) {
      WaitWhileHeld(held_, hold_);  // HoldResumeLocal()
    } else {
      WaitWhileHeld(starts_held_, hold_starts_);  // HoldStarts()
    }
    std::lock_guard lock(mu_);
    ++start_calls_[r->job_id()];
    if (mode_ == Mode::kFailStart || fail_starts_) {
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, "no GPUs today"};
    }
    if (r->resume_local() && resume_local_error_ != grpc::StatusCode::OK) {
      return {resume_local_error_, "cannot resume from the checkpoint here"};
    }
    if (auto it = procs_.find(r->job_id());
        it != procs_.end() && it->second.submitted_us != 0 &&
        r->submitted_us() != 0 &&
        it->second.submitted_us != r->submitted_us()) {
      // Another job of that id (as an agent refuses it).
      return {grpc::StatusCode::ALREADY_EXISTS,
              "job " + std::to_string(r->job_id()) + " already runs here"};
    }
    if (procs_.count(r->job_id())) ++duplicate_starts_;
    if (r->resume_local()) ++resume_local_starts_[r->job_id()];
    procs_[r->job_id()] = Proc{
        rpc::RUNNING, std::vector<int32_t>(r->gpus().begin(), r->gpus().end()),
        r->submitted_us(),
        r->has_gang() ? std::nullopt : std::optional<rpc::JobSpec>(r->spec())};
    start_gpus_[r->job_id()] = procs_[r->job_id()].gpus;
    ever_ran_.insert(r->job_id());
    rep->set_pid(1000 + r->job_id());
    rep->set_took_us(1);
    // A gang's lead says where its ranks meet (a port, never bound here).
    if (r->has_gang() && r->gang().node_rank() == 0) {
      rep->set_master_port(29500);
    }
    return grpc::Status::OK;
  }
  grpc::Status SuspendJob(grpc::ServerContext*, const rpc::JobRequest* r,
                          rpc::SuspendReply* rep) override {
    WaitWhileHeld(suspends_held_, hold_suspends_);  // HoldSuspends()
    std::lock_guard lock(mu_);
    ++suspend_calls_;
    if (fail_suspends_) {
      return {grpc::StatusCode::UNAVAILABLE, "the agent is going away"};
    }
    auto it = procs_.find(r->job_id());
    if (it == procs_.end()) return {grpc::StatusCode::NOT_FOUND, "no such job"};
    it->second.state = rpc::SUSPENDED;
    ++suspends_;
    rep->set_took_us(2);
    return grpc::Status::OK;
  }
  grpc::Status ResumeJob(grpc::ServerContext*, const rpc::JobRequest* r,
                         rpc::ResumeReply* rep) override {
    std::lock_guard lock(mu_);
    auto it = procs_.find(r->job_id());
    if (it == procs_.end()) return {grpc::StatusCode::NOT_FOUND, "no such job"};
    it->second.state = rpc::RUNNING;
    ++resumes_;
    rep->set_took_us(3);
    return grpc::Status::OK;
  }
  grpc::Status CheckpointJob(grpc::ServerContext*,
                             const rpc::CheckpointRequest* r,
                             rpc::CheckpointReply* rep) override {
    WaitWhileHeld(checkpoints_held_, hold_checkpoints_);  // HoldCheckpoints()
    std::lock_guard lock(mu_);
    if (fail_checkpoints_) {
      // The job could not save (its process stays as it was).
      return {grpc::StatusCode::UNAVAILABLE, "the save failed"};
    }
    if (procs_.erase(r->job_id()) == 0) {
      // One whose process ended, keeping its checkpoint here (as an
      // agent answers).
      if (kept_.contains(r->job_id())) {
        return {grpc::StatusCode::FAILED_PRECONDITION,
                "job " + std::to_string(r->job_id()) + " has exited"};
      }
      return {grpc::StatusCode::NOT_FOUND, "no such job"};
    }
    rep->set_method("restart");
    rep->set_bytes(100);
    rep->set_took_us(5);
    // Saved at the mini-batch its progress last said.
    if (auto it = progress_.find(r->job_id()); it != progress_.end()) {
      rep->set_minibatches(it->second.minibatches());
    }
    return grpc::Status::OK;
  }
  grpc::Status ReceiveCheckpoint(grpc::ServerContext*,
                                 const rpc::ReceiveCheckpointRequest* r,
                                 rpc::ReceiveCheckpointReply* rep) override {
    {
      std::lock_guard lock(mu_);
      received_from_[r->job_id()].push_back(r->source_address());
    }
    if (mode_ == Mode::kFailReceive) {
      return {grpc::StatusCode::UNAVAILABLE, "the source went away"};
    }
    {
      std::lock_guard lock(mu_);
      if (receive_finds_nothing_) {
        return {grpc::StatusCode::NOT_FOUND, "no checkpoint of job " +
                                                 std::to_string(r->job_id()) +
                                                 " on the source"};
      }
    }
    rep->set_bytes(100);
    return grpc::Status::OK;
  }
  // The jobs it runs, with the progress SetProgress gave them.
  grpc::Status Status(grpc::ServerContext*, const rpc::AgentStatusRequest*,
                      rpc::AgentStatusReply* rep) override {
    std::lock_guard lock(mu_);
    rep->set_server_name(name_);
    for (const auto& [id, p] : procs_) {
      rpc::AgentJob* j = rep->add_jobs();
      j->set_job_id(id);
      j->set_state(p.state);
      if (auto it = progress_.find(id); it != progress_.end()) {
        *j->mutable_progress() = it->second;
      }
    }
    return grpc::Status::OK;
  }
  grpc::Status KillJob(grpc::ServerContext*, const rpc::JobRequest* r,
                       rpc::KillReply*) override {
    std::lock_guard lock(mu_);
    procs_.erase(r->job_id());
    if (!r->keep_checkpoint()) kept_.erase(r->job_id());
    ++kills_[r->job_id()];
    return grpc::Status::OK;
  }

  // Registers with the scheduler at `addr`, listing the jobs it runs.
  grpc::Status Register(const std::string& addr) {
    std::lock_guard lock(mu_);
    sched_addr_ = addr;
    stub_ = SchedulerStubFor(addr);
    return RegisterLocked();
  }
  // Registers with this address instead of its own (one the daemon may not
  // reach), from the next registration on.
  void AdvertiseAs(const std::string& address) {
    std::lock_guard lock(mu_);
    advertised_ = address;
  }
  // ReceiveCheckpoint answers NOT_FOUND: the source holds no checkpoint of
  // the job (as an agent does when the source lost it).
  void ReceiveFindsNothing(bool nothing) {
    std::lock_guard lock(mu_);
    receive_finds_nothing_ = nothing;
  }
  // CheckpointJob fails (UNAVAILABLE) and leaves the process running.
  void FailCheckpoints(bool fail) {
    std::lock_guard lock(mu_);
    fail_checkpoints_ = fail;
  }
  // SuspendJob fails (UNAVAILABLE) and the process runs on.
  void FailSuspends(bool fail) {
    std::lock_guard lock(mu_);
    fail_suspends_ = fail;
  }
  int suspend_calls() {
    std::lock_guard lock(mu_);
    return suspend_calls_;
  }
  // StartJob fails as in kFailStart.
  void FailStarts(bool fail) {
    std::lock_guard lock(mu_);
    fail_starts_ = fail;
  }
  // The job's process ended: kept until a report gets through.
  void Exit(int64_t job, int code) {
    std::lock_guard lock(mu_);
    procs_.erase(job);
    rpc::JobExit e;
    e.set_job_id(job);
    e.set_exit_code(code);
    outbox_.push_back(e);
  }
  // Queues the exit of an earlier process of a job that runs here again (a
  // move within this server whose exit report comes late).
  void SupersededExit(int64_t job, int code) { MarkedExit(job, code, true); }
  // An exit of a process killed at a daemon's request (JobExit.killed),
  // with the process still listed.
  void KilledExit(int64_t job, int code) { MarkedExit(job, code, false, true); }
  void MarkedExit(int64_t job, int code, bool superseded, bool killed = false) {
    std::lock_guard lock(mu_);
    rpc::JobExit e;
    e.set_job_id(job);
    e.set_exit_code(code);
    e.set_superseded(superseded);
    e.set_killed(killed);
    outbox_.push_back(e);
  }
  // The agent stops, the job saving its checkpoint at mini-batch
  // `minibatches` first: the exit says so (JobExit.checkpoint_kept) and the
  // checkpoint is kept, listed at the next registration.
  void StopSaving(int64_t job, int64_t minibatches) {
    std::lock_guard lock(mu_);
    procs_.erase(job);
    kept_.insert(job);
    rpc::JobExit e;
    e.set_job_id(job);
    e.set_exit_code(75);
    e.set_minibatches(minibatches);
    e.set_checkpoint_kept(true);
    outbox_.push_back(e);
  }
  // The job's process failed with `code` after saving a periodic
  // checkpoint at mini-batch `minibatches`, which the agent keeps
  // (JobExit.checkpoint_kept, method "periodic").
  void FailKeepingPeriodic(int64_t job, int code, int64_t minibatches) {
    std::lock_guard lock(mu_);
    procs_.erase(job);
    kept_.insert(job);
    rpc::JobExit e;
    e.set_job_id(job);
    e.set_exit_code(code);
    e.set_minibatches(minibatches);
    e.set_checkpoint_kept(true);
    e.set_checkpoint_method("periodic");
    outbox_.push_back(e);
  }
  // Tells the daemon this agent stops (Leave); *reply: how long it waits,
  // and the jobs spanning servers it has save.
  grpc::Status Leave(rpc::LeaveReply* reply = nullptr) {
    std::lock_guard lock(mu_);
    rpc::LeaveRequest r;
    r.set_name(name_);
    rpc::LeaveReply rep;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    grpc::Status s = stub_->Leave(&ctx, r, &rep);
    if (reply != nullptr) *reply = rep;
    return s;
  }
  // StartJob(resume_local) fails with `code` (OK: succeeds again).
  void FailResumeLocal(grpc::StatusCode code) {
    std::lock_guard lock(mu_);
    resume_local_error_ = code;
  }
  // Lists a checkpoint of the job at the next registrations, saved in
  // `cluster` ("": not said, as an agent from before cluster ids) by the
  // job submitted at `submitted_us` (0: not said).
  void Keep(int64_t job, const std::string& cluster = "",
            int64_t submitted_us = 0) {
    std::lock_guard lock(mu_);
    kept_.insert(job);
    kept_cluster_[job] = cluster;
    kept_submitted_[job] = submitted_us;
  }
  // The same, listed with the spec of the job that saved it.
  void KeepWithSpec(int64_t job, const std::string& cluster,
                    int64_t submitted_us, const rpc::JobSpec& spec) {
    Keep(job, cluster, submitted_us);
    std::lock_guard lock(mu_);
    kept_spec_[job] = spec;
  }
  // The cluster id of the last registration's reply.
  std::string cluster_id() {
    std::lock_guard lock(mu_);
    return cluster_id_;
  }
  // The kept checkpoints are gone (a ramdisk emptied).
  void ForgetCheckpoints() {
    std::lock_guard lock(mu_);
    kept_.clear();
  }
  std::set<int64_t> kept() {
    std::lock_guard lock(mu_);
    return kept_;
  }
  // The agent stops, killing the job unsaved (JobExit.agent_stopped).
  void StopKilling(int64_t job) {
    std::lock_guard lock(mu_);
    procs_.erase(job);
    rpc::JobExit e;
    e.set_job_id(job);
    e.set_exit_code(-15);
    e.set_agent_stopped(true);
    outbox_.push_back(e);
  }
  // A process of `job` the next registrations list, though no daemon
  // started it here since the fake began (one a daemon whose store was
  // restored from a backup does not know of).
  void Plant(int64_t job, int64_t submitted_us = 0,
             rpc::JobState state = rpc::RUNNING) {
    std::lock_guard lock(mu_);
    procs_[job] = Proc{state, {0}, submitted_us};
  }
  // The same, listed with the spec it was started with, on local GPUs
  // `gpus` (a process a real agent started for a job on its server alone).
  void PlantWithSpec(int64_t job, const rpc::JobSpec& spec,
                     int64_t submitted_us, std::vector<int32_t> gpus,
                     rpc::JobState state = rpc::RUNNING) {
    std::lock_guard lock(mu_);
    procs_[job] = Proc{state, std::move(gpus), submitted_us, spec};
  }
  // Forgets a job without an exit (as if the node lost it).
  void Lose(int64_t job) {
    std::lock_guard lock(mu_);
    procs_.erase(job);
  }
  // The memory its GPUs register with (default 0: virtual, unknown).
  void SetGpuMemory(std::vector<int64_t> bytes) {
    std::lock_guard lock(mu_);
    gpu_memory_ = std::move(bytes);
  }
  // What the next reports say of the job's progress (none until set).
  void SetProgress(int64_t job, int64_t minibatches, double rate,
                   double gpu_utilization = 0, int64_t gpu_memory_bytes = 0) {
    std::lock_guard lock(mu_);
    rpc::Progress& p = progress_[job];
    p.set_minibatches(minibatches);
    p.set_minibatch_rate(rate);
    p.set_gpu_utilization(gpu_utilization);
    p.set_gpu_memory_bytes(gpu_memory_bytes);
    p.set_uses_library(true);
  }
  // The job's reported metric (as its progress page gives it).
  void SetMetric(int64_t job, double metric, int64_t at_minibatch) {
    std::lock_guard lock(mu_);
    rpc::Progress& p = progress_[job];
    p.set_metric(metric);
    p.set_metric_minibatches(at_minibatch);
    p.set_metric_reports(p.metric_reports() + 1);
  }
  // Reports nothing more of the job's progress (its process is gone).
  void ForgetProgress(int64_t job) {
    std::lock_guard lock(mu_);
    progress_.erase(job);
  }
  // Sends a report (exits kept so far); re-registers when told to, as a
  // real agent does.
  grpc::Status Report(
      std::chrono::seconds deadline = std::chrono::seconds(10)) {
    std::lock_guard lock(mu_);
    rpc::AgentReport r;
    r.set_name(name_);
    for (const auto& e : outbox_) *r.add_exits() = e;
    for (const auto& [id, p] : progress_) {
      rpc::JobProfile* jp = r.add_profiles();
      jp->set_job_id(id);
      *jp->mutable_progress() = p;
      // Its process's state, as an agent reports it.
      if (auto it = procs_.find(id); it != procs_.end()) {
        jp->set_state(it->second.state);
      }
    }
    rpc::AgentReportReply rep;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    grpc::Status s = stub_->Report(&ctx, r, &rep);
    if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      grpc::Status reg = RegisterLocked();
      if (!reg.ok()) return reg;
      grpc::ClientContext ctx2;
      s = stub_->Report(&ctx2, r, &rep);
    }
    if (s.ok()) {
      for (const auto& e : outbox_) ++reported_exits_[e.job_id()];
      outbox_.clear();
    }
    return s;
  }
  // Ends every running job with `code` and reports.
  void FinishRunning(int code = 0) {
    std::vector<int64_t> running;
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, p] : procs_) {
        if (p.state == rpc::RUNNING) running.push_back(id);
      }
    }
    for (int64_t id : running) Exit(id, code);
    (void)Report();
  }

  std::map<int64_t, Proc> procs() {
    std::lock_guard lock(mu_);
    return procs_;
  }
  // StartJob calls that arrived (start_calls: that got past kSlow's wait).
  int starts_begun(int64_t job) {
    std::lock_guard lock(mu_);
    return starts_begun_[job];
  }
  int start_calls(int64_t job) {
    std::lock_guard lock(mu_);
    return start_calls_[job];
  }
  std::vector<int32_t> start_gpus(int64_t job) {
    std::lock_guard lock(mu_);
    return start_gpus_[job];
  }
  int suspends() {
    std::lock_guard lock(mu_);
    return suspends_;
  }
  int resumes() {
    std::lock_guard lock(mu_);
    return resumes_;
  }
  int registrations() {
    std::lock_guard lock(mu_);
    return registrations_;
  }
  int kills(int64_t job) {
    std::lock_guard lock(mu_);
    return kills_[job];
  }
  int duplicate_starts() {
    std::lock_guard lock(mu_);
    return duplicate_starts_;
  }
  int resume_local_starts(int64_t job) {
    std::lock_guard lock(mu_);
    return resume_local_starts_[job];
  }
  // The source addresses of the checkpoints it was asked to receive.
  std::vector<std::string> received_from(int64_t job) {
    std::lock_guard lock(mu_);
    return received_from_[job];
  }
  const std::string& address() const { return address_; }
  // While on, a StartJob(resume_local) waits (ResumeLocalHeld() counts
  // them) until it is turned off.
  void HoldResumeLocal(bool on) { SetHold(hold_, on); }
  // While on, any other StartJob waits until it is turned off.
  void HoldStarts(bool on) { SetHold(hold_starts_, on); }
  // Sets the state of the job's process behind the daemon's back.
  void SetProcState(int64_t job, rpc::JobState state) {
    std::lock_guard lock(mu_);
    procs_.at(job).state = state;
  }
  // While on, a SuspendJob waits (SuspendsHeld() counts them) until it is
  // turned off.
  void HoldSuspends(bool on) { SetHold(hold_suspends_, on); }
  int SuspendsHeld() { return HeldCount(suspends_held_); }
  // While on, a CheckpointJob waits (CheckpointsHeld() counts them) until
  // it is turned off.
  void HoldCheckpoints(bool on) { SetHold(hold_checkpoints_, on); }
  int CheckpointsHeld() { return HeldCount(checkpoints_held_); }
  int ResumeLocalHeld() { return HeldCount(held_); }
  const std::string& name() const { return name_; }
  std::set<int64_t> ever_ran() {
    std::lock_guard lock(mu_);
    return ever_ran_;
  }
  std::map<int64_t, int> reported_exits() {
    std::lock_guard lock(mu_);
    return reported_exits_;
  }

 private:
  // A call held by Hold*(): counted in `count`, it waits while `hold`.
  void WaitWhileHeld(int& count, const bool& hold) {
    std::unique_lock lock(hold_mu_);
    ++count;
    hold_cv_.wait(lock, [&] { return !hold; });
  }
  void SetHold(bool& hold, bool on) {
    {
      std::lock_guard lock(hold_mu_);
      hold = on;
    }
    hold_cv_.notify_all();
  }
  int HeldCount(const int& count) {
    std::lock_guard lock(hold_mu_);
    return count;
  }

  grpc::Status RegisterLocked() {
    rpc::RegisterAgentRequest r;
    r.set_name(name_);
    r.set_address(advertised_.empty() ? address_ : advertised_);
    r.set_sockets(1);
    r.set_switches_per_socket(1);
    for (int i = 0; i < gpus_; ++i) {
      rpc::Gpu* g = r.add_gpus();
      g->set_local(i);
      g->set_uuid("virtual-" + std::to_string(i));
      g->set_name("virtual");
      if (static_cast<size_t>(i) < gpu_memory_.size()) {
        g->set_memory_bytes(gpu_memory_[i]);
      }
    }
    for (const auto& [id, p] : procs_) {
      rpc::AgentJob* j = r.add_jobs();
      j->set_job_id(id);
      j->set_state(p.state);
      for (int32_t g : p.gpus) j->add_gpus(g);
      j->set_submitted_us(p.submitted_us);
      if (p.spec) *j->mutable_spec() = *p.spec;
      if (auto it = progress_.find(id); it != progress_.end()) {
        *j->mutable_progress() = it->second;
      }
    }
    for (int64_t id : kept_) {
      r.add_checkpoints(id);
      r.add_checkpoint_clusters(kept_cluster_[id]);
      r.add_checkpoint_submitted_us(kept_submitted_[id]);
      *r.add_checkpoint_specs() = kept_spec_[id];
    }
    r.set_cluster_id(cluster_id_);
    rpc::RegisterAgentReply rep;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    grpc::Status s = stub_->RegisterAgent(&ctx, r, &rep);
    if (s.ok()) {
      cluster_id_ = rep.cluster_id();
      ++registrations_;
    }
    return s;
  }

  std::string name_;
  int gpus_;
  Mode mode_;
  std::unique_ptr<grpc::Server> server_;     // on loopback, or
  std::shared_ptr<AgentEndpoint> endpoint_;  // in process
  std::string address_;
  std::mutex mu_;
  std::mutex hold_mu_;
  std::condition_variable hold_cv_;
  bool hold_ = false;              // guarded by hold_mu_
  int held_ = 0;                   // guarded by hold_mu_
  bool hold_checkpoints_ = false;  // guarded by hold_mu_
  int checkpoints_held_ = 0;       // guarded by hold_mu_
  bool hold_starts_ = false;       // guarded by hold_mu_
  int starts_held_ = 0;            // guarded by hold_mu_
  bool hold_suspends_ = false;     // guarded by hold_mu_
  int suspends_held_ = 0;          // guarded by hold_mu_
  std::string sched_addr_;
  std::unique_ptr<rpc::Scheduler::StubInterface> stub_;
  std::map<int64_t, Proc> procs_;
  std::set<int64_t> kept_;  // checkpoints held
  std::map<int64_t, std::string>
      kept_cluster_;                           // the cluster each was saved in
  std::map<int64_t, int64_t> kept_submitted_;  // when its job was submitted
  std::map<int64_t, rpc::JobSpec> kept_spec_;  // its job's spec (none: empty)
  std::string cluster_id_;
  std::map<int64_t, rpc::Progress> progress_;
  std::vector<int64_t> gpu_memory_;
  std::vector<rpc::JobExit> outbox_;
  std::map<int64_t, int> start_calls_;
  std::map<int64_t, int> starts_begun_;
  std::map<int64_t, std::vector<int32_t>> start_gpus_;
  std::map<int64_t, int> kills_;
  int registrations_ = 0;  // that succeeded
  std::map<int64_t, int> resume_local_starts_;
  std::map<int64_t, std::vector<std::string>> received_from_;
  std::map<int64_t, int> reported_exits_;
  bool fail_checkpoints_ = false;       // guarded by mu_
  bool receive_finds_nothing_ = false;  // guarded by mu_
  bool fail_starts_ = false;            // guarded by mu_
  grpc::StatusCode resume_local_error_ = grpc::StatusCode::OK;  // mu_
  bool fail_suspends_ = false;  // guarded by mu_
  int suspend_calls_ = 0;       // guarded by mu_
  std::string advertised_;      // guarded by mu_
  std::set<int64_t> ever_ran_;
  int suspends_ = 0;
  int resumes_ = 0;
  int duplicate_starts_ = 0;
};

// A CLI-like client.
class Client {
 public:
  explicit Client(const std::string& addr) : stub_(SchedulerStubFor(addr)) {}
  grpc::Status Submit(const rpc::JobSpec& spec, int64_t* id = nullptr) {
    rpc::SubmitRequest r;
    *r.mutable_spec() = spec;
    rpc::SubmitReply rep;
    grpc::ClientContext ctx;
    grpc::Status s = stub_->Submit(&ctx, r, &rep);
    if (id != nullptr) *id = rep.job_id();
    return s;
  }
  grpc::Status SubmitJobs(const std::vector<rpc::JobSpec>& specs,
                          std::vector<int64_t>* ids = nullptr) {
    rpc::SubmitJobsRequest r;
    for (const rpc::JobSpec& spec : specs) *r.add_specs() = spec;
    rpc::SubmitJobsReply rep;
    grpc::ClientContext ctx;
    grpc::Status s = stub_->SubmitJobs(&ctx, r, &rep);
    if (ids != nullptr) ids->assign(rep.job_ids().begin(), rep.job_ids().end());
    return s;
  }
  int64_t MustSubmit(int gpus, const std::string& name = "job",
                     bool restartable = false) {
    rpc::JobSpec spec;
    spec.set_name(name);
    spec.set_command("python3 train.py");
    spec.set_gpus(gpus);
    spec.set_restartable(restartable);
    int64_t id = -1;
    grpc::Status s = Submit(spec, &id);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return id;
  }
  grpc::Status SetPriority(int64_t id, int32_t priority,
                           int32_t* was = nullptr) {
    rpc::SetPriorityRequest r;
    r.set_job_id(id);
    r.set_priority(priority);
    rpc::SetPriorityReply rep;
    grpc::ClientContext ctx;
    grpc::Status s = stub_->SetPriority(&ctx, r, &rep);
    if (was != nullptr) *was = rep.was();
    return s;
  }
  rpc::JobInfo Get(int64_t id, grpc::Status* status = nullptr) {
    rpc::JobIdRequest r;
    r.set_job_id(id);
    rpc::JobInfo info;
    grpc::ClientContext ctx;
    grpc::Status s = stub_->GetJob(&ctx, r, &info);
    if (status != nullptr) *status = s;
    return info;
  }
  rpc::JobState State(int64_t id) { return Get(id).state(); }
  std::vector<rpc::JobInfo> List(bool all = true) {
    rpc::ListJobsRequest r;
    r.set_all(all);
    rpc::ListJobsReply rep;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->ListJobs(&ctx, r, &rep).ok());
    return {rep.jobs().begin(), rep.jobs().end()};
  }
  // KillJobs, SuspendJobs or ResumeJobs ("kill", "suspend", "resume") of
  // `ids`: each job's outcome as (code, error), and its note in `notes`
  // if given.
  grpc::Status Act(const std::string& what, const std::vector<int64_t>& ids,
                   std::vector<std::pair<int, std::string>>* outcomes,
                   std::vector<std::string>* notes = nullptr) {
    rpc::JobsRequest r;
    for (int64_t id : ids) r.add_job_ids(id);
    r.set_reason("test");
    rpc::JobsReply rep;
    grpc::ClientContext ctx;
    const grpc::Status s = what == "kill" ? stub_->KillJobs(&ctx, r, &rep)
                           : what == "suspend"
                               ? stub_->SuspendJobs(&ctx, r, &rep)
                               : stub_->ResumeJobs(&ctx, r, &rep);
    outcomes->clear();
    if (notes != nullptr) notes->clear();
    for (const rpc::JobOutcome& o : rep.outcomes()) {
      EXPECT_EQ(o.job_id(), ids[outcomes->size()]);
      outcomes->emplace_back(o.code(), o.error());
      if (notes != nullptr) notes->push_back(o.note());
    }
    return s;
  }
  grpc::Status ListPage(const rpc::ListJobsRequest& r,
                        rpc::ListJobsReply* rep) {
    grpc::ClientContext ctx;
    return stub_->ListJobs(&ctx, r, rep);
  }
  rpc::ListQueuesReply Queues() {
    rpc::ListQueuesReply rep;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->ListQueues(&ctx, rpc::Empty(), &rep).ok());
    return rep;
  }
  rpc::UsageReply Usage(double last_s = 0) {
    rpc::UsageRequest req;
    req.set_last_s(last_s);
    rpc::UsageReply rep;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->GetUsage(&ctx, req, &rep).ok());
    return rep;
  }
  rpc::ListServersReply Servers() {
    rpc::ListServersReply rep;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->ListServers(&ctx, rpc::Empty(), &rep).ok());
    return rep;
  }
  grpc::Status Kill(int64_t id) {
    rpc::KillRequest r;
    r.set_job_id(id);
    r.set_reason("test");
    rpc::Empty e;
    grpc::ClientContext ctx;
    return stub_->Kill(&ctx, r, &e);
  }
  grpc::Status ApplyQueues(const std::string& yaml, bool dry_run,
                           rpc::ApplyQueuesReply* rep) {
    rpc::ApplyQueuesRequest r;
    r.set_yaml(yaml);
    r.set_source("teams.yaml");
    r.set_dry_run(dry_run);
    grpc::ClientContext ctx;
    return stub_->ApplyQueues(&ctx, r, rep);
  }
  grpc::Status Migrate(int64_t id, const std::string& server) {
    rpc::MigrateRequest r;
    r.set_job_id(id);
    r.set_server(server);
    rpc::Empty e;
    grpc::ClientContext ctx;
    return stub_->Migrate(&ctx, r, &e);
  }
  grpc::Status Resize(int64_t id, int gpus) {
    rpc::ResizeRequest r;
    r.set_job_id(id);
    r.set_gpus(gpus);
    rpc::Empty e;
    grpc::ClientContext ctx;
    return stub_->Resize(&ctx, r, &e);
  }
  grpc::Status Pack(int64_t id, int64_t with) {
    rpc::PackRequest r;
    r.set_job_id(id);
    r.set_with_job_id(with);
    rpc::Empty e;
    grpc::ClientContext ctx;
    return stub_->Pack(&ctx, r, &e);
  }
  grpc::Status Unpack(int64_t id) {
    rpc::JobIdRequest r;
    r.set_job_id(id);
    rpc::Empty e;
    grpc::ClientContext ctx;
    return stub_->Unpack(&ctx, r, &e);
  }
  grpc::Status Drain(const std::string& server, rpc::DrainReply* reply,
                     bool cordon_only = false, bool undo = false) {
    rpc::DrainRequest r;
    r.set_server(server);
    r.set_cordon_only(cordon_only);
    r.set_undo(undo);
    grpc::ClientContext ctx;
    return stub_->Drain(&ctx, r, reply);
  }
  grpc::Status Suspend(int64_t id) {
    rpc::JobIdRequest r;
    r.set_job_id(id);
    rpc::Empty e;
    grpc::ClientContext ctx;
    return stub_->Suspend(&ctx, r, &e);
  }
  grpc::Status Resume(int64_t id) {
    rpc::JobIdRequest r;
    r.set_job_id(id);
    rpc::Empty e;
    grpc::ClientContext ctx;
    return stub_->Resume(&ctx, r, &e);
  }
  grpc::Status Ping() {
    rpc::Empty e;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(1));
    return stub_->Ping(&ctx, e, &e);
  }

 private:
  std::unique_ptr<rpc::Scheduler::StubInterface> stub_;
};

// The job's process on `agent` exits 0 and the agent reports it: the job
// ends FINISHED.
::testing::AssertionResult FinishesOn(Client& cl, FakeAgent& agent, int64_t j) {
  agent.Exit(j, 0);
  if (!agent.Report().ok()) {
    return ::testing::AssertionFailure() << "the exit's report failed";
  }
  if (!WaitFor([&] { return cl.State(j) == rpc::FINISHED; })) {
    return ::testing::AssertionFailure() << cl.Get(j).DebugString();
  }
  return ::testing::AssertionSuccess();
}

int64_t StartSpanningJob(Client& cl, FakeAgent& a, FakeAgent& b,
                         bool elastic = false);

// The history lines of a job with this action (below).
std::vector<rpc::HistoryEntry> HistoryOf(Client& cl, int64_t job,
                                         const std::string& action);

// GET `path` from 127.0.0.1:port over HTTP/1.0; the whole response.
std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    if (::write(fd, req.data(), req.size()) ==
        static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, n);
    }
  }
  ::close(fd);
  return out;
}

// The daemon in this process. In the fake world (the default) it serves no
// socket and its clock moves only as the test waits (WaitFor, Pass); a
// fixture that runs the daemon's binary, or a test that needs sockets,
// uses the real world (RealWorld).
class DaemonTest : public ::testing::Test {
 protected:
  // The world is set before the fixture's members are made (a derived
  // fixture's agents are in it).
  DaemonTest() {
    world_.env = std::make_shared<FakeDaemonEnv>();
    world_.daemon = [this] { return server_.get(); };
    TestWorld::Current() = &world_;
  }
  ~DaemonTest() override { TestWorld::Current() = nullptr; }
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("gandiva-daemon-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }
  // Moves this test to the real world: before it makes agents or a daemon
  // (a derived fixture: in its constructor).
  void UseRealWorld() { world_.env.reset(); }
  SchedulerOptions Options() {
    SchedulerOptions o;
    o.listen = world_.env ? "" : "127.0.0.1:0";
    o.env = world_.env;
    o.db_path = (dir_ / "gandiva.db").string();
    o.tick_ms = 50;
    o.agent_timeout_s = 600;
    o.agent_rpc_timeout_s = 10;
    o.start_retry_s = 0.2;
    // Every info a publication reuses is checked against one built anew.
    o.verify_reused_job_info = true;
    return o;
  }
  // Job `j`, running on `agent`: the agent stops with the job saved there,
  // and back, cannot be reached for the restart from that checkpoint
  // (StartJob fails UNAVAILABLE), which then waits for it. Call it in
  // ASSERT_NO_FATAL_FAILURE.
  void RestartWaitsForItsAgent(Client& cl, FakeAgent& agent, int64_t j) {
    agent.StopSaving(j, 40);
    ASSERT_TRUE(agent.Report().ok());
    agent.FailResumeLocal(grpc::StatusCode::UNAVAILABLE);
    ASSERT_TRUE(agent.Register(server_.address()).ok());
    ASSERT_TRUE(WaitFor([&] { return !HistoryOf(cl, j, "restart").empty(); }));
  }

  Client& StartDaemon(SchedulerOptions o) {
    // In the fake world the metrics page is read in process (Metrics).
    if (world_.env) o.metrics_listen.clear();
    auto s = SchedulerServer::Start(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    server_.Set(s.ok() ? std::move(*s) : nullptr);
    client_ = std::make_unique<Client>(server_.address());
    return *client_;
  }
  // A daemon with the test options and the fifo policy, and `agent` (then
  // `other`, if given) registered with it: its client.
  Client& StartFifoDaemonWith(FakeAgent& agent, FakeAgent* other = nullptr) {
    SchedulerOptions o = Options();
    o.policy = "fifo";
    Client& c = StartDaemon(o);
    EXPECT_TRUE(agent.Register(server_.address()).ok());
    if (other != nullptr) {
      EXPECT_TRUE(other->Register(server_.address()).ok());
    }
    return c;
  }
  // A daemon with `o` and the fifo policy, agents `a` and `b` of one GPU
  // each registered in that order, and a two-GPU job (elastic if asked)
  // running on both, rank 0 on b (StartSpanningJob): the job's id; -1,
  // with a test failure, if it does not run. The daemon's client is
  // *client_.
  int64_t StartDaemonAndSpanningJob(SchedulerOptions o, FakeAgent& a,
                                    FakeAgent& b, bool elastic = false) {
    o.policy = "fifo";
    Client& cl = StartDaemon(std::move(o));
    if (!a.Register(server_.address()).ok() ||
        !b.Register(server_.address()).ok()) {
      ADD_FAILURE() << "RegisterAgent";
      return -1;
    }
    return StartSpanningJob(cl, a, b, elastic);
  }
  // Starts a daemon, registers `a` with it, runs job 1 (one GPU) there and
  // stops the daemon. When job 1 was submitted; 0, with a test failure, if
  // it did not start.
  int64_t RunOneJobAndStop(const SchedulerOptions& o, FakeAgent& a) {
    Client& cl = StartDaemon(o);
    if (!a.Register(server_.address()).ok() || cl.MustSubmit(1) != 1 ||
        !WaitFor([&] { return HasEntry(cl.Get(1), "start", true); })) {
      ADD_FAILURE() << cl.Get(1).DebugString();
      return 0;
    }
    const int64_t submitted = cl.Get(1).submitted_us();
    server_.reset();
    return submitted;
  }
  // A gang (rank 0 on b) requeued with its checkpoint kept on b (a left),
  // then the daemon restarted (replaying its log, which does not say where
  // the checkpoint is kept); b not registered again yet. The job's id.
  int64_t RequeueGangKeepingItsCheckpointAndRestart(SchedulerOptions& o,
                                                    FakeAgent& a,
                                                    FakeAgent& b) {
    o.agent_timeout_s = 1.5;
    o.agent_away_s = 0.2;
    o.snapshot_every_events = 0;  // the restart replays every event
    const int64_t j = StartDaemonAndSpanningJob(o, a, b);
    if (j <= 0) return j;
    Client& cl = *client_;
    if (!a.Leave().ok() ||
        !WaitFor([&] { return !HistoryOf(cl, j, "stop").empty(); })) {
      ADD_FAILURE() << "a did not leave";
      return -1;
    }
    b.Keep(j);
    if (!WaitFor(
            [&] {
              (void)b.Report();
              return HistoryOf(cl, j, "requeue").size() == 1;
            },
            20)) {
      ADD_FAILURE() << cl.Get(j).DebugString();
      return -1;
    }
    EXPECT_EQ(cl.State(j), rpc::QUEUED);
    server_.reset();
    StartDaemon(o);
    return j;
  }
  fs::path dir_;
  // The daemon's Prometheus page: in process in the fake world, else over
  // HTTP from --metrics-listen.
  std::string Metrics() {
    if (world_.env) return server_->MetricsText();
    return HttpGet(server_->metrics_port(), "/metrics");
  }
  TestWorld world_;
  DaemonHolder server_;
  std::unique_ptr<Client> client_;
};

// Table-driven over agent behaviours (in the style of kubernetes'
// default_binder_test).
TEST_F(DaemonTest, ActionsReachAgents) {
  struct Case {
    const char* name;
    Mode mode;
    int exit_code;
    bool starts;
  };
  const Case cases[] = {
      {"succeeds", Mode::kOk, 0, true},
      {"slow", Mode::kSlow, 3, true},
      {"fails_start", Mode::kFailStart, 0, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TearDown();
    SetUp();
    Client& cl = StartDaemon(Options());
    FakeAgent agent(std::string("node-") + c.name, 4, c.mode);
    ASSERT_TRUE(agent.Register(server_.address()).ok());
    const int64_t big = cl.MustSubmit(2, "big");
    const int64_t small = cl.MustSubmit(1, "small");
    EXPECT_EQ(big, 1);
    EXPECT_EQ(small, 2);
    if (!c.starts) {
      // Start fails, the job goes back to the queue and is tried again.
      ASSERT_TRUE(WaitFor([&] { return agent.start_calls(big) >= 2; }));
      bool saw_failure = false;
      const rpc::JobInfo info = cl.Get(big);
      for (const auto& h : info.history()) {
        if (h.action() == "start" && !h.ok()) {
          saw_failure = true;
          EXPECT_NE(h.detail().find("no GPUs today"), std::string::npos);
        }
      }
      EXPECT_TRUE(saw_failure);
      ASSERT_TRUE(cl.Kill(big).ok());
      ASSERT_TRUE(cl.Kill(small).ok());
      EXPECT_EQ(cl.State(big), rpc::KILLED);
      EXPECT_TRUE(agent.procs().empty());
      continue;
    }
    // RUNNING in the daemon as soon as the start is under way; wait for the
    // (maybe slow) agent to have both.
    ASSERT_TRUE(WaitFor([&] {
      return cl.State(big) == rpc::RUNNING && cl.State(small) == rpc::RUNNING &&
             agent.procs().size() == 2;
    }));
    // The agent got the GPUs the daemon shows, distinct ones.
    const rpc::JobInfo bi = cl.Get(big);
    const rpc::JobInfo si = cl.Get(small);
    EXPECT_EQ(agent.start_gpus(big),
              std::vector<int32_t>(bi.gpus().begin(), bi.gpus().end()));
    EXPECT_EQ(agent.start_gpus(small),
              std::vector<int32_t>(si.gpus().begin(), si.gpus().end()));
    ASSERT_EQ(bi.gpus_size(), 2);
    ASSERT_EQ(si.gpus_size(), 1);
    std::set<int32_t> all{bi.gpus(0), bi.gpus(1), si.gpus(0)};
    EXPECT_EQ(all.size(), 3u);
    for (int32_t g : all) EXPECT_TRUE(g >= 0 && g < 4);
    EXPECT_EQ(bi.server(), std::string("node-") + c.name);

    const rpc::ListServersReply servers = cl.Servers();
    ASSERT_EQ(servers.servers_size(), 1);
    EXPECT_TRUE(servers.servers(0).up());
    EXPECT_EQ(servers.servers(0).free_gpus(), 1);
    EXPECT_EQ(servers.servers(0).gpu_jobs_size(), 4);

    agent.FinishRunning(c.exit_code);
    const rpc::JobState want = c.exit_code == 0 ? rpc::FINISHED : rpc::FAILED;
    ASSERT_TRUE(WaitFor(
        [&] { return cl.State(big) == want && cl.State(small) == want; }));
    const rpc::JobInfo done = cl.Get(big);
    EXPECT_EQ(done.exit_code(), c.exit_code);
    EXPECT_GT(done.ended_us(), 0);
    std::vector<std::string> actions;
    for (const auto& h : done.history()) actions.push_back(h.action());
    // The start's reply and the exit report race; both are recorded.
    std::sort(actions.begin(), actions.end());
    EXPECT_EQ(actions, (std::vector<std::string>{"exit", "start"}));
    EXPECT_EQ(cl.List(/*all=*/false).size(), 0u);
    EXPECT_EQ(cl.List(/*all=*/true).size(), 2u);
  }
}

// A policy asking each tick for a suspend the agent keeps failing: the
// job's history has the failure once and how often it repeated (so far,
// then for good once something else happens), not a line per tick.
TEST_F(DaemonTest, AFailureRepeatedEachTickIsOneHistoryLineWithACount) {
  SchedulerOptions o = Options();
  o.policy = "gandiva";
  o.quantum_s = 0.2;
  Client& cl = StartDaemon(o);
  FakeAgent agent("node", 1, Mode::kOk);
  agent.FailSuspends(true);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t a = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return agent.procs().count(a) == 1; }));
  const int64_t b = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return agent.suspend_calls() >= 5; }));
  auto suspend_lines = [&] {
    std::vector<rpc::HistoryEntry> out;
    const rpc::JobInfo info = cl.Get(a);
    for (const auto& h : info.history()) {
      if (h.action() == "suspend") out.push_back(h);
    }
    return out;
  };
  std::vector<rpc::HistoryEntry> lines = suspend_lines();
  ASSERT_EQ(lines.size(), 2u) << cl.Get(a).DebugString();
  EXPECT_FALSE(lines[0].ok());
  EXPECT_NE(lines[0].detail().find("the agent is going away"),
            std::string::npos)
      << lines[0].detail();
  EXPECT_NE(lines[1].detail().find("failed the same way"), std::string::npos)
      << lines[1].detail();
  EXPECT_NE(lines[1].detail().find("(so far)"), std::string::npos)
      << lines[1].detail();

  agent.FailSuspends(false);
  ASSERT_TRUE(WaitFor([&] { return agent.suspends() >= 1; }));
  ASSERT_TRUE(WaitFor([&] { return suspend_lines().size() == 3; }))
      << cl.Get(a).DebugString();
  lines = suspend_lines();
  const int calls_failed = agent.suspend_calls() - agent.suspends();
  EXPECT_FALSE(lines[1].ok());
  EXPECT_NE(lines[1].detail().find("failed the same way " +
                                   std::to_string(calls_failed - 1) +
                                   " more times in a row"),
            std::string::npos)
      << lines[1].detail() << " (failed calls: " << calls_failed << ")";
  EXPECT_EQ(lines[1].detail().find("so far"), std::string::npos);
  EXPECT_TRUE(lines[2].ok());
  EXPECT_GE(lines[1].time_us(), lines[0].time_us());
  (void)b;
}

TEST_F(DaemonTest, TimeSlicingStartsSuspendsAndResumesEveryJob) {
  SchedulerOptions o = Options();
  o.policy = "gandiva";
  o.quantum_s = 0.2;
  Client& cl = StartDaemon(o);
  FakeAgent agent("node", 1, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  std::vector<int64_t> jobs;
  for (int i = 0; i < 3; ++i) jobs.push_back(cl.MustSubmit(1));
  // More jobs than GPUs: those waiting say they wait for their turn.
  ASSERT_TRUE(WaitFor([&] {
    for (const rpc::JobInfo& j : cl.List(/*all=*/false)) {
      if (j.waiting_reason().rfind("time-sliced: it waits for its", 0) == 0) {
        return true;
      }
    }
    return false;
  }));
  // All get turns.
  ASSERT_TRUE(WaitFor([&] {
    return agent.ever_ran().size() == 3 && agent.suspends() >= 3 &&
           agent.resumes() >= 1;
  }));
  EXPECT_EQ(agent.duplicate_starts(), 0);
  const rpc::ListServersReply servers = cl.Servers();
  ASSERT_EQ(servers.servers_size(), 1);
  EXPECT_EQ(servers.servers(0).height(), 3);
  ASSERT_EQ(servers.servers(0).gpu_jobs_size(), 1);
  EXPECT_LE(servers.servers(0).gpu_jobs(0).running_size(), 1);
  // Never two running at once on the one GPU.
  int running = 0;
  for (const auto& [id, p] : agent.procs()) running += p.state == rpc::RUNNING;
  EXPECT_LE(running, 1);
  ASSERT_TRUE(WaitFor([&] {
    agent.FinishRunning();
    for (int64_t j : jobs) {
      if (cl.State(j) != rpc::FINISHED) return false;
    }
    return true;
  }));
  for (int64_t j : jobs) EXPECT_EQ(agent.reported_exits()[j], 1);
}

TEST_F(DaemonTest, InvalidSpecsAreRefusedAndNotStored) {
  Client& cl = StartDaemon(Options());
  struct Case {
    std::function<void(rpc::JobSpec&)> edit;
    const char* field;
  };
  const Case cases[] = {
      {[](rpc::JobSpec& s) { s.set_gpus(3); }, "gpus"},
      {[](rpc::JobSpec& s) { s.set_gpus(0); }, "gpus"},
      {[](rpc::JobSpec& s) { s.set_command(""); }, "command"},
      {[](rpc::JobSpec& s) { s.set_workdir("relative/dir"); }, "workdir"},
      {[](rpc::JobSpec& s) { s.set_total_minibatches(-1); },
       "total_minibatches"},
      // What only the command line checked before (config::CheckJobSpec).
      {[](rpc::JobSpec& s) { s.set_name("a b"); }, "name"},
      {[](rpc::JobSpec& s) { s.set_command(std::string(200'000, 'x')); },
       "command"},
      {[](rpc::JobSpec& s) { s.set_command(std::string("a\0b", 3)); },
       "command"},
      {[](rpc::JobSpec& s) { s.set_owner("al\nice"); }, "owner"},
      {[](rpc::JobSpec& s) { s.set_queue(std::string(300, 'q')); }, "queue"},
      {[](rpc::JobSpec& s) { (*s.mutable_env())["BAD-NAME"] = "x"; }, "env"},
      {[](rpc::JobSpec& s) {
         (*s.mutable_env())["A"] = std::string("x\0y", 3);
       },
       "env"},
  };
  for (const Case& c : cases) {
    rpc::JobSpec spec;
    spec.set_name("bad");
    spec.set_command("true");
    spec.set_gpus(1);
    c.edit(spec);
    grpc::Status s = cl.Submit(spec);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_NE(s.error_message().find(std::string("'") + c.field + "'"),
              std::string::npos)
        << s.error_message();
  }
  server_->Sync();
  EXPECT_TRUE(cl.List(true).empty());
  // A valid one gets the first id: nothing was stored before.
  EXPECT_EQ(cl.MustSubmit(1), 1);
}

// An operator raises a queued job's priority: it goes ahead of the jobs
// queued before it, its info and history say so, and a restarted daemon
// keeps it. Unknown and ended jobs are refused.
TEST_F(DaemonTest, APriorityRaisedByAnOperatorPutsTheJobAheadInTheQueue) {
  FakeAgent agent("node", 1, Mode::kOk);
  Client& cl = StartFifoDaemonWith(agent);
  const int64_t a = cl.MustSubmit(1, "a");
  ASSERT_TRUE(WaitFor([&] { return agent.start_calls(a) == 1; }));
  const int64_t b = cl.MustSubmit(1, "b");
  const int64_t c = cl.MustSubmit(1, "c");
  int32_t was = -1;
  grpc::Status s = cl.SetPriority(c, 5, &was);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(was, 0);
  const rpc::JobInfo info = cl.Get(c);
  EXPECT_EQ(info.priority(), 5);
  EXPECT_EQ(info.spec().priority(), 0);  // as submitted
  ASSERT_TRUE(HasEntry(info, "priority", true)) << info.DebugString();
  EXPECT_NE(info.history(info.history_size() - 1)
                .detail()
                .find("priority 0 -> 5, set by an operator"),
            std::string::npos)
      << info.DebugString();
  EXPECT_EQ(cl.SetPriority(999, 1).error_code(), grpc::StatusCode::NOT_FOUND);

  agent.Exit(a, 0);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return agent.start_calls(c) == 1; }))
      << cl.Get(c).DebugString();
  EXPECT_EQ(agent.start_calls(b), 0);
  EXPECT_EQ(cl.State(b), rpc::QUEUED);
  s = cl.SetPriority(a, 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << s.error_message();

  server_.reset();
  Client& again = StartDaemon(Options());  // the database keeps fifo
  EXPECT_EQ(again.Get(c).priority(), 5);
  EXPECT_EQ(again.Get(b).priority(), 0);
}

// Under the gandiva policy a job waiting for its turn on a GPU whose
// priority an operator raises above the running job's runs at once: the
// running job is suspended for it, long before its time slice ends.
TEST_F(DaemonTest, ARaisedPriorityPreemptsALowerPriorityJobUnderGandiva) {
  SchedulerOptions o = Options();
  o.policy = "gandiva";
  o.quantum_s = 600;  // no turn comes by the time slice
  Client& cl = StartDaemon(o);
  FakeAgent agent("node", 1, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t a = cl.MustSubmit(1, "a");
  ASSERT_TRUE(WaitFor([&] { return agent.start_calls(a) == 1; }));
  const int64_t b = cl.MustSubmit(1, "b");
  ASSERT_TRUE(WaitFor([&] {
    return cl.Get(b).waiting_reason().rfind("time-sliced", 0) == 0;
  })) << cl.Get(b).DebugString();
  EXPECT_EQ(agent.start_calls(b), 0);
  ASSERT_TRUE(cl.SetPriority(b, 1).ok());
  ASSERT_TRUE(WaitFor([&] { return agent.start_calls(b) == 1; }))
      << cl.Get(b).DebugString();
  EXPECT_TRUE(WaitFor([&] {
    return cl.State(a) == rpc::SUSPENDED && cl.State(b) == rpc::RUNNING;
  })) << cl.Get(a).DebugString();
  EXPECT_EQ(agent.suspends(), 1);
}

TEST_F(DaemonTest, OperatorSuspendResumeKill) {
  Client& cl = StartDaemon(Options());
  FakeAgent agent("node", 2, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  EXPECT_EQ(cl.Suspend(42).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(cl.Kill(42).error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::Status st;
  cl.Get(42, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::RUNNING; }));
  EXPECT_EQ(cl.Resume(j).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(cl.Suspend(j).ok());
  ASSERT_TRUE(WaitFor([&] {
    return cl.State(j) == rpc::SUSPENDED &&
           agent.procs()[j].state == rpc::SUSPENDED;
  }));
  ASSERT_TRUE(cl.Resume(j).ok());
  ASSERT_TRUE(WaitFor([&] {
    return cl.State(j) == rpc::RUNNING &&
           agent.procs()[j].state == rpc::RUNNING;
  }));
  ASSERT_TRUE(cl.Kill(j).ok());
  EXPECT_EQ(cl.State(j), rpc::KILLED);
  ASSERT_TRUE(WaitFor([&] { return agent.kills(j) == 1; }));
  EXPECT_EQ(cl.Kill(j).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(cl.Suspend(j).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // The agent's late exit report for the killed job changes nothing.
  agent.Exit(j, -9);
  ASSERT_TRUE(agent.Report().ok());
  EXPECT_EQ(cl.State(j), rpc::KILLED);
}

// Agents report every 500 ms; the core (and the event log replayed after a
// crash) gets a job's rate at most every --profile-interval-s (0: every
// report), while the job's progress as shown (`gandiva ls`) follows every
// report. Returns how many ProfileReports were logged for 10 reports.
class ProfileIntervalTest : public DaemonTest {
 protected:
  int LoggedOfTenReports(double interval_s) {
    SchedulerOptions o = Options();
    o.policy = "fifo";
    o.profile_interval_s = interval_s;
    Client& cl = StartDaemon(o);
    FakeAgent agent("node", 1, Mode::kOk);
    EXPECT_TRUE(agent.Register(server_.address()).ok());
    const int64_t j = cl.MustSubmit(1);
    EXPECT_TRUE(WaitFor([&] { return cl.State(j) == rpc::RUNNING; }));
    for (int i = 1; i <= 10; ++i) {
      agent.SetProgress(j, 10 * i, 5.0);
      EXPECT_TRUE(agent.Report().ok());
    }
    EXPECT_TRUE(
        WaitFor([&] { return cl.Get(j).progress().minibatches() == 100; }));
    auto store = Store::Open(o.db_path, false);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    int n = 0;
    if (store.ok()) {
      EXPECT_TRUE((*store)
                      ->ForEachEvent([&](const EventRow& e) {
                        if (e.kind == "ProfileReport") ++n;
                        return core::Status::Ok();
                      })
                      .ok());
    }
    return n;
  }
};

TEST_F(ProfileIntervalTest, OnlyTheFirstReportWithinTheIntervalIsLogged) {
  EXPECT_EQ(LoggedOfTenReports(600), 1);
}

TEST_F(ProfileIntervalTest, WithNoIntervalEveryReportIsLogged) {
  EXPECT_EQ(LoggedOfTenReports(0), 10);
}

// A server's GPU memory, for packing, is the smallest its agent registers;
// unknown (0) when any GPU's is (virtual GPUs).
TEST_F(DaemonTest, AServersGpuMemoryIsItsSmallestGpus) {
  SchedulerOptions o = Options();
  StartDaemon(o);
  constexpr int64_t kGib = int64_t{1} << 30;
  FakeAgent big("big", 2, Mode::kOk);
  big.SetGpuMemory({80 * kGib, 40 * kGib});
  FakeAgent mixed("mixed", 2, Mode::kOk);
  mixed.SetGpuMemory({16 * kGib});  // the second GPU's is unknown
  ASSERT_TRUE(big.Register(server_.address()).ok());
  ASSERT_TRUE(mixed.Register(server_.address()).ok());
  auto store = Store::Open(o.db_path, false);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::map<std::string, double> memory;
  ASSERT_TRUE((*store)
                  ->ForEachEvent([&](const EventRow& e) {
                    if (e.kind != "ServerUp") return core::Status::Ok();
                    auto body = DecodeEvent(e.json);
                    if (!body.ok()) return body.status();
                    const auto& up = std::get<core::ServerUp>(*body);
                    memory[up.spec.name] = up.spec.gpu_memory_gb;
                    return core::Status::Ok();
                  })
                  .ok());
  EXPECT_EQ(memory["big"], 40.0);
  EXPECT_EQ(memory["mixed"], 0.0);
  EXPECT_EQ(memory.size(), 2u);
}

TEST(DaemonOptionsTest, NegativeValuesAreRefusedNamingTheFlag) {
  const std::vector<
      std::pair<const char*, std::function<void(SchedulerOptions&)>>>
      cases = {
          {"--profile-interval-s",
           [](SchedulerOptions& o) { o.profile_interval_s = -1; }},
          {"--progress-write-interval-s",
           [](SchedulerOptions& o) { o.progress_write_interval_s = -1; }},
          {"--snapshot-every",
           [](SchedulerOptions& o) { o.snapshot_every_events = -1; }},
          {"--keep-ended-jobs",
           [](SchedulerOptions& o) { o.keep_ended_jobs = -1; }},
          {"--keep-ended-for",
           [](SchedulerOptions& o) { o.keep_ended_for_s = -1; }},
          {"--keep-archived-for",
           [](SchedulerOptions& o) { o.keep_archived_for_s = -1; }},
          {"--retention-check",
           [](SchedulerOptions& o) { o.retention_check_s = 0; }},
          {"--agent-timeout-s",
           [](SchedulerOptions& o) { o.agent_timeout_s = 0; }},
          {"--agent-grace-s",
           [](SchedulerOptions& o) { o.agent_grace_s = -1; }},
          {"--agent-grace-s",
           [](SchedulerOptions& o) {
             o.agent_grace_s = std::numeric_limits<double>::quiet_NaN();
           }},
          // Jobs are forgotten at compactions.
          {"--snapshot-every 0 turns off",
           [](SchedulerOptions& o) {
             o.keep_ended_for_s = 60;
             o.snapshot_every_events = 0;
           }},
      };
  for (const auto& [flag, set] : cases) {
    SCOPED_TRACE(flag);
    SchedulerOptions o;
    o.listen = "127.0.0.1:0";
    o.db_path = "/nonexistent/never-opened.db";
    set(o);
    auto s = SchedulerServer::Start(o);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find(flag), std::string::npos)
        << s.status().message();
  }
}

// A job's row whose progress alone changed is written with the others' at
// most every --progress-write-interval-s (here 10 minutes: not before the
// clean stop); a change of its state is written at once, with its progress
// then.
TEST_F(DaemonTest, AJobsProgressAloneIsWrittenAtMostEveryInterval) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.progress_write_interval_s = 600;
  Client& cl = StartDaemon(o);
  FakeAgent agent("node", 2, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t a = cl.MustSubmit(1);
  const int64_t b = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] {
    return cl.State(a) == rpc::RUNNING && cl.State(b) == rpc::RUNNING;
  }));
  auto stored = [&](int64_t id) -> JobRow {
    auto store = Store::Open(o.db_path, false);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    if (!store.ok()) return {};
    auto rows = (*store)->LoadJobs();
    EXPECT_TRUE(rows.ok());
    for (const JobRow& r : *rows) {
      if (r.id == id) return r;
    }
    ADD_FAILURE() << "no row for job " << id;
    return {};
  };
  // The first report says they use the library: more than progress.
  for (const int64_t j : {a, b}) agent.SetProgress(j, 10, 1.0);
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  EXPECT_EQ(stored(a).minibatches, 10);
  EXPECT_TRUE(stored(a).uses_library);

  for (const int64_t j : {a, b}) agent.SetProgress(j, 40, 2.0);
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  EXPECT_EQ(cl.Get(a).progress().minibatches(), 40);  // shown at once
  EXPECT_EQ(stored(a).minibatches, 10);
  EXPECT_EQ(stored(b).minibatches, 10);

  agent.SetProgress(a, 50, 2.0);
  agent.Exit(a, 0);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return cl.State(a) == rpc::FINISHED; }));
  server_->Sync();
  EXPECT_EQ(stored(a).state, rpc::FINISHED);
  EXPECT_EQ(stored(a).minibatches, 40);  // its last report before the exit
  EXPECT_EQ(stored(b).minibatches, 10);

  server_->Shutdown();
  EXPECT_EQ(stored(b).minibatches, 40);
  EXPECT_EQ(stored(b).minibatch_rate, 2.0);
}

// The exit of a process the agent has since replaced by a new one of the
// same job (a resize within the server left with 76, its report late) does
// not end the job; the new process's own exit does.
TEST_F(DaemonTest, ASupersededExitDoesNotEndTheJob) {
  FakeAgent agent("node", 1, Mode::kOk);
  Client& cl = StartFifoDaemonWith(agent);
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::RUNNING; }));
  agent.SupersededExit(j, 76);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_EQ(agent.reported_exits()[j], 1);
  Pass(std::chrono::milliseconds(200));
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  ASSERT_TRUE(FinishesOn(cl, agent, j));
}

// A process killed at a daemon's request (to replace it) whose exit to
// ignore was counted by a daemon that died since: the flag alone keeps it
// from ending the job.
TEST_F(DaemonTest, AnExitMarkedKilledDoesNotEndARunningJob) {
  FakeAgent agent("node", 1, Mode::kOk);
  Client& cl = StartFifoDaemonWith(agent);
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::RUNNING; }));
  agent.KilledExit(j, -15);
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  ASSERT_TRUE(FinishesOn(cl, agent, j));
}

// The history lines of a job with this action.
std::vector<rpc::HistoryEntry> HistoryOf(Client& cl, int64_t job,
                                         const std::string& action) {
  std::vector<rpc::HistoryEntry> out;
  const rpc::JobInfo info = cl.Get(job);
  for (const auto& h : info.history()) {
    if (h.action() == action) out.push_back(h);
  }
  return out;
}

// A fifo daemon with one fake agent, "node" of two GPUs, registered: for
// what an agent's stop and return do to its jobs.
class AgentStopTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    SchedulerOptions o = Options();
    o.policy = "fifo";
    cl_ = &StartDaemon(o);
    ASSERT_TRUE(agent_.Register(server_.address()).ok());
  }
  // Submits a one-GPU job and waits until the agent has started it and
  // the daemon has its reply (the start is no longer under way: a test
  // whose agent stops and registers again without reporting relies on it).
  int64_t Started(const std::string& name = "job") {
    const int64_t j = cl_->MustSubmit(1, name);
    EXPECT_TRUE(WaitFor([&] { return agent_.start_calls(j) == 1; }));
    EXPECT_TRUE(
        WaitFor([&] { return HistoryOf(*cl_, j, "start").size() == 1; }));
    return j;
  }
  FakeAgent agent_{"node", 2, Mode::kOk};
  Client* cl_ = nullptr;
};

// An agent that stops with the job's checkpoint saved (JobExit
// .checkpoint_kept): the job stays placed there, without a process, and
// restarts from the checkpoint when the agent registers again listing it.
TEST_F(AgentStopTest,
       AJobSavedAsItsAgentStoppedGoesOnFromItWhenTheAgentIsBack) {
  Client& cl = *cl_;
  FakeAgent& agent = agent_;
  const int64_t j = Started();
  agent.StopSaving(j, 40);
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  const auto stops = HistoryOf(cl, j, "stop");
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_TRUE(stops[0].ok());
  EXPECT_NE(stops[0].detail().find("agent 'node' stopped; the job saved a "
                                   "checkpoint at mini-batch 40"),
            std::string::npos)
      << stops[0].detail();
  EXPECT_EQ(cl.Get(j).progress().minibatches(), 40);
  EXPECT_EQ(cl.Get(j).waiting_reason(),
            "agent 'node' stopped: the job goes on from the checkpoint kept "
            "there when the agent is back (after 690 s without it the server "
            "is declared down and the job placed again, from the beginning)");
  EXPECT_EQ(agent.start_calls(j), 1);

  ASSERT_TRUE(agent.Register(server_.address()).ok());  // back
  ASSERT_TRUE(WaitFor([&] { return agent.resume_local_starts(j) == 1; }));
  // It trains past the checkpoint: the restart's line says when, and how
  // long training paused.
  agent.SetProgress(j, 41, 5.0);
  ASSERT_TRUE(WaitFor([&] { return !HistoryOf(cl, j, "restart").empty(); }));
  const std::string restart = HistoryOf(cl, j, "restart")[0].detail();
  EXPECT_NE(restart.find("from the checkpoint kept there (agent 'node' is "
                         "back); first mini-batch "),
            std::string::npos)
      << restart;
  EXPECT_NE(restart.find(" after the start; training paused "),
            std::string::npos)
      << restart;
  EXPECT_TRUE(HistoryOf(cl, j, "lost").empty());
  EXPECT_EQ(cl.Get(j).waiting_reason(), "");
  ASSERT_TRUE(FinishesOn(cl, agent, j));
  EXPECT_EQ(agent.start_calls(j), 2);
  EXPECT_EQ(agent.kills(j), 0);
}

// A suspended job saved as its agent stopped stays suspended when the
// agent is back, and resumes from its checkpoint.
TEST_F(AgentStopTest, ASuspendedJobSavedAsItsAgentStoppedResumesFromIt) {
  Client& cl = *cl_;
  FakeAgent& agent = agent_;
  const int64_t j = Started();
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::RUNNING; }));
  ASSERT_TRUE(cl.Suspend(j).ok());
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::SUSPENDED; }));
  agent.StopSaving(j, 12);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  server_->Sync();
  EXPECT_EQ(cl.State(j), rpc::SUSPENDED);
  EXPECT_EQ(agent.start_calls(j), 1);
  ASSERT_TRUE(cl.Resume(j).ok());
  ASSERT_TRUE(WaitFor([&] { return agent.resume_local_starts(j) == 1; }));
  EXPECT_TRUE(WaitFor([&] { return cl.State(j) == rpc::RUNNING; }));
  EXPECT_EQ(agent.start_calls(j), 2);
}

// A suspended job whose process its agent lost, with no checkpoint kept:
// the core knows (ProcessLost); with nothing of its run left it shows as
// queued, and when it runs again it starts from the beginning, a start
// rather than a resume.
TEST_F(AgentStopTest, ASuspendedJobWhoseProcessWasLostStartsAgainAsNew) {
  Client& cl = *cl_;
  FakeAgent& agent = agent_;
  const int64_t j = Started();
  ASSERT_TRUE(cl.Suspend(j).ok());
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::SUSPENDED; }));
  agent.Lose(j);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return !HistoryOf(cl, j, "lost").empty(); }));
  EXPECT_EQ(cl.State(j), rpc::QUEUED);
  EXPECT_EQ(agent.start_calls(j), 1);
  ASSERT_TRUE(cl.Resume(j).ok());
  ASSERT_TRUE(WaitFor([&] { return agent.start_calls(j) == 2; }));
  EXPECT_TRUE(WaitFor([&] { return cl.State(j) == rpc::RUNNING; }));
  EXPECT_TRUE(WaitFor([&] { return HistoryOf(cl, j, "start").size() == 2; }))
      << cl.Get(j).DebugString();
  EXPECT_TRUE(HistoryOf(cl, j, "resume").empty()) << cl.Get(j).DebugString();
  EXPECT_EQ(agent.resume_local_starts(j), 0);
  ASSERT_TRUE(FinishesOn(cl, agent, j));
}

// A job its stopping agent killed unsaved (JobExit.agent_stopped) does not
// end: it stays placed there and starts again when the agent is back.
TEST_F(AgentStopTest,
       AJobKilledAsItsAgentStoppedStartsAgainWhenTheAgentIsBack) {
  Client& cl = *cl_;
  FakeAgent& agent = agent_;
  const int64_t j = Started();
  agent.StopKilling(j);
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  const auto stops = HistoryOf(cl, j, "stop");
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_NE(stops[0].detail().find("agent 'node' stopped and killed its "
                                   "process (exit -15) without a checkpoint"),
            std::string::npos)
      << stops[0].detail();
  EXPECT_TRUE(HistoryOf(cl, j, "exit").empty());

  ASSERT_TRUE(agent.Register(server_.address()).ok());  // back
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return agent.start_calls(j) == 2; }));
  EXPECT_EQ(agent.resume_local_starts(j), 0);
  ASSERT_TRUE(FinishesOn(cl, agent, j));
}

// Back without the checkpoint (its ramdisk was emptied): the job starts
// again from the beginning.
TEST_F(AgentStopTest, AnAgentBackWithoutTheSavedCheckpointStartsTheJobAfresh) {
  Client& cl = *cl_;
  FakeAgent& agent = agent_;
  const int64_t j = Started();
  agent.StopSaving(j, 40);
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  agent.ForgetCheckpoints();
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor([&] { return agent.start_calls(j) == 2; }));
  EXPECT_EQ(agent.resume_local_starts(j), 0);
  const auto lost = HistoryOf(cl, j, "lost");
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_NE(lost[0].detail().find("is back without the checkpoint it kept"),
            std::string::npos)
      << lost[0].detail();
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
}

// The agent back cannot start the job from the checkpoint it kept (it
// refuses: unreadable, gone): the job starts again from the beginning
// there rather than fail. One it cannot reach waits for it instead, with
// its checkpoint, and goes on from it at the agent's next registration.
TEST_F(AgentStopTest, ARestartFromAKeptCheckpointThatFailsDoesNotFailTheJob) {
  Client& cl = *cl_;
  FakeAgent& agent = agent_;
  const int64_t j = Started();
  ASSERT_NO_FATAL_FAILURE(RestartWaitsForItsAgent(cl, agent, j));
  {
    const auto r = HistoryOf(cl, j, "restart")[0];
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.detail().find("it waits for the agent, with its checkpoint"),
              std::string::npos)
        << r.detail();
  }
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  EXPECT_EQ(agent.start_calls(j), 2);  // the first start, the failed one
  agent.FailResumeLocal(grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  // The restart's outcome is recorded once the agent's reply is in, after
  // the agent counted the call.
  ASSERT_TRUE(WaitFor([&] {
    return agent.start_calls(j) == 4 && HistoryOf(cl, j, "restart").size() == 3;
  })) << cl.Get(j).DebugString();
  const auto restarts = HistoryOf(cl, j, "restart");
  ASSERT_EQ(restarts.size(), 3u) << cl.Get(j).DebugString();
  EXPECT_NE(restarts[1].detail().find("it starts again from the beginning"),
            std::string::npos)
      << restarts[1].detail();
  EXPECT_TRUE(restarts[2].ok()) << restarts[2].detail();
  EXPECT_NE(restarts[2].detail().find("relaunched"), std::string::npos)
      << restarts[2].detail();
  EXPECT_EQ(agent.resume_local_starts(j), 0);
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  ASSERT_TRUE(FinishesOn(cl, agent, j));
}

// A registered agent's StartJob that did not get through (the call failed
// on the way) is tried again at a report from it a while on: the job goes
// on from its checkpoint without waiting for another registration.
TEST_F(AgentStopTest, ARestartThatDidNotReachARegisteredAgentIsTriedAgain) {
  Client& cl = *cl_;
  FakeAgent& agent = agent_;
  const int64_t j = Started();
  ASSERT_NO_FATAL_FAILURE(RestartWaitsForItsAgent(cl, agent, j));
  EXPECT_NE(HistoryOf(cl, j, "restart")[0].detail().find(
                "(tried again when the agent registers, or reports 5 s on)"),
            std::string::npos);
  agent.FailResumeLocal(grpc::StatusCode::OK);
  ASSERT_TRUE(agent.Report().ok());  // too soon: not tried again yet
  server_->Sync();
  EXPECT_EQ(agent.start_calls(j), 2);
  Pass(std::chrono::milliseconds(5100));
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return agent.resume_local_starts(j) == 1; }));
  agent.SetProgress(j, 41, 5.0);  // it trains past the checkpoint
  ASSERT_TRUE(WaitFor([&] { return HistoryOf(cl, j, "restart").size() == 2; }))
      << cl.Get(j).DebugString();
  EXPECT_EQ(agent.start_calls(j), 3);
  const auto restart = HistoryOf(cl, j, "restart")[1];
  EXPECT_TRUE(restart.ok()) << restart.detail();
  EXPECT_NE(restart.detail().find("from the checkpoint kept there"),
            std::string::npos)
      << restart.detail();
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  ASSERT_TRUE(FinishesOn(cl, agent, j));
}

// A lost process is the core's to restart (ProcessLost, then its Restart
// action): without a checkpoint it starts from the beginning, and when
// that start fails too the job fails, which the core decides.
TEST_F(AgentStopTest, AJobWhoseRestartFromTheBeginningFailsFails) {
  Client& cl = *cl_;
  FakeAgent& agent = agent_;
  const int64_t j = Started();
  agent.Lose(j);
  agent.FailStarts(true);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::FAILED; }))
      << cl.Get(j).DebugString();
  EXPECT_EQ(agent.start_calls(j), 2);
  const auto restarts = HistoryOf(cl, j, "restart");
  ASSERT_EQ(restarts.size(), 1u) << cl.Get(j).DebugString();
  EXPECT_FALSE(restarts[0].ok());
  EXPECT_NE(restarts[0].detail().find("relaunched a lost process: StartJob"),
            std::string::npos)
      << restarts[0].detail();
  EXPECT_NE(restarts[0].detail().find("; the job failed"), std::string::npos)
      << restarts[0].detail();
}

// A restart from a kept checkpoint waiting for its agent (out of reach)
// is in the daemon's log: a daemon restarted meanwhile sends it when the
// agent is back, from that checkpoint.
TEST_F(AgentStopTest, ARestartWaitingForItsAgentOutlivesADaemonRestart) {
  const int64_t j = Started();
  ASSERT_NO_FATAL_FAILURE(RestartWaitsForItsAgent(*cl_, agent_, j));
  EXPECT_EQ(agent_.resume_local_starts(j), 0);

  server_.reset();
  SchedulerOptions o = Options();
  o.policy = "fifo";
  Client& cl = StartDaemon(o);
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  agent_.FailResumeLocal(grpc::StatusCode::OK);
  ASSERT_TRUE(agent_.Register(server_.address()).ok());
  ASSERT_TRUE(agent_.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return agent_.resume_local_starts(j) == 1; }))
      << cl.Get(j).DebugString();
  ASSERT_TRUE(WaitFor([&] {
    const auto r = HistoryOf(cl, j, "restart");
    return !r.empty() && r.back().ok();
  })) << cl.Get(j).DebugString();
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  ASSERT_TRUE(FinishesOn(cl, agent_, j));
}

// The daemon missed the stop (it was down first, as in `gandiva down`):
// the agent registers without the job but with its checkpoint, and the job
// goes on from it; the checkpoints of jobs that have ended are dropped.
TEST_F(AgentStopTest, AMissingJobWhoseCheckpointTheAgentHoldsGoesOnFromIt) {
  Client& cl = *cl_;
  FakeAgent& agent = agent_;
  const int64_t ended = Started("ended");
  const int64_t j = Started();
  agent.Exit(ended, 0);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return cl.State(ended) == rpc::FINISHED; }));

  agent.Lose(j);
  agent.Keep(j);
  agent.Keep(ended);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  ASSERT_TRUE(agent.Report().ok());  // the first report decides the missing
  ASSERT_TRUE(WaitFor([&] { return agent.resume_local_starts(j) == 1; }));
  const auto stops = HistoryOf(cl, j, "stop");
  ASSERT_EQ(stops.size(), 1u);
  EXPECT_NE(stops[0].detail().find("no longer runs it but holds a checkpoint "
                                   "of it"),
            std::string::npos)
      << stops[0].detail();
  EXPECT_TRUE(HistoryOf(cl, j, "lost").empty());
  EXPECT_EQ(agent.start_calls(j), 2);
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  ASSERT_TRUE(WaitFor([&] { return agent.kills(ended) == 1; }));
  EXPECT_EQ(agent.kept(), std::set<int64_t>{j});
}

// An agent that says it stops (Leave) has its server cordoned, so that
// nothing new is placed on GPUs no agent serves, and is waited for
// --agent-away-s; calls to it fail at once with the reason. Back, its
// server is opened again and its jobs go on from their checkpoints.
TEST_F(AgentStopTest, AnAgentThatLeavesIsCordonedUntilItIsBack) {
  Client& cl = *cl_;
  FakeAgent& agent = agent_;
  const int64_t j = Started();
  rpc::LeaveReply left;
  ASSERT_TRUE(agent.Leave(&left).ok());
  EXPECT_EQ(left.away_s(), 300);  // the default --agent-away-s
  EXPECT_EQ(left.saving_size(), 0);
  agent.StopSaving(j, 40);
  ASSERT_TRUE(agent.Report().ok());  // its last report is still taken
  server_->Sync();
  {
    const rpc::ServerInfo s = cl.Servers().servers(0);
    EXPECT_FALSE(s.up());  // no agent serves it
    EXPECT_TRUE(s.cordoned());
    EXPECT_GT(s.away_since_us(), 0);
    EXPECT_EQ(s.away_until_us() - s.away_since_us(), 300'000'000);
  }
  const std::string reason = cl.Get(j).waiting_reason();
  EXPECT_NE(reason.find("agent 'node' stopped: the job goes on from the "
                        "checkpoint kept there when the agent is back (if it "
                        "is not back within "),
            std::string::npos)
      << reason;
  // Nothing new is placed there meanwhile; an operator's suspend of the
  // job finds no process to stop, a resume is refused with the reason.
  const int64_t other = cl.MustSubmit(1, "other");
  server_->Sync();
  EXPECT_EQ(cl.State(other), rpc::QUEUED);
  ASSERT_TRUE(cl.Suspend(j).ok());
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::SUSPENDED; }));
  ASSERT_TRUE(cl.Resume(j).ok());
  ASSERT_TRUE(WaitFor([&] {
    for (const auto& h : HistoryOf(cl, j, "resume")) {
      if (!h.ok() && h.detail().find("agent 'node' is away: it stopped ") !=
                         std::string::npos) {
        return true;
      }
    }
    return false;
  })) << cl.Get(j).DebugString();
  EXPECT_EQ(agent.start_calls(j), 1);

  ASSERT_TRUE(agent.Register(server_.address()).ok());  // back
  server_->Sync();
  {
    const rpc::ServerInfo s = cl.Servers().servers(0);
    EXPECT_TRUE(s.up());
    EXPECT_FALSE(s.cordoned());
    EXPECT_EQ(s.away_since_us(), 0);
  }
  EXPECT_TRUE(WaitFor([&] { return agent.start_calls(other) == 1; }));
  EXPECT_TRUE(WaitFor([&] { return agent.resume_local_starts(j) == 1; }))
      << cl.Get(j).DebugString();
}

// A server an operator cordoned stays cordoned when its agent leaves and
// comes back; one the operator opens while its agent is away stays open.
TEST_F(AgentStopTest, AnOperatorsCordonOutlastsAnAgentsLeave) {
  Client& cl = *cl_;
  FakeAgent& agent = agent_;
  rpc::DrainReply drained;
  ASSERT_TRUE(cl.Drain("node", &drained, /*cordon_only=*/true).ok());
  ASSERT_TRUE(agent.Leave().ok());
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  server_->Sync();
  EXPECT_TRUE(cl.Servers().servers(0).cordoned());

  ASSERT_TRUE(cl.Drain("node", &drained, false, /*undo=*/true).ok());
  ASSERT_TRUE(agent.Leave().ok());
  server_->Sync();
  EXPECT_TRUE(cl.Servers().servers(0).cordoned());
  ASSERT_TRUE(cl.Drain("node", &drained, false, /*undo=*/true).ok());
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  server_->Sync();
  EXPECT_FALSE(cl.Servers().servers(0).cordoned());
}

// The away state is the daemon's to keep: restarted while an agent is
// away, the daemon still has its server cordoned and opens it when the
// agent is back. Restarted after --agent-away-s has passed, it still gives
// the agent --agent-timeout-s to register, as any other.
TEST_F(AgentStopTest, ARestartedDaemonStillWaitsForAnAwayAgent) {
  const int64_t j = Started();
  ASSERT_TRUE(agent_.Leave().ok());
  agent_.StopSaving(j, 40);
  ASSERT_TRUE(agent_.Report().ok());
  server_->Sync();
  const int64_t since = cl_->Servers().servers(0).away_since_us();
  ASSERT_GT(since, 0);

  server_.reset();
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.agent_away_s = 0.2;
  Pass(std::chrono::milliseconds(300));
  Client& cl = StartDaemon(o);
  Pass(std::chrono::milliseconds(300));  // 6 ticks
  server_->Sync();
  {
    const rpc::ServerInfo s = cl.Servers().servers(0);
    EXPECT_TRUE(s.cordoned());
    EXPECT_EQ(s.away_since_us(), since);
  }
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  ASSERT_TRUE(agent_.Register(server_.address()).ok());
  server_->Sync();
  EXPECT_FALSE(cl.Servers().servers(0).cordoned());
  EXPECT_TRUE(WaitFor([&] { return agent_.resume_local_starts(j) == 1; }))
      << cl.Get(j).DebugString();
}

// A restarted daemon knows its servers from its database, not whether
// their agents still serve at the addresses it has: until an agent
// registers with it, its server is not up, says until when it is waited
// for, and takes no new job (the start would go to an address no agent
// may serve). Registered, the server is open again and the job starts.
TEST_F(AgentStopTest,
       ARestartedDaemonPlacesNothingOnAServerUntilItsAgentIsBack) {
  const int64_t j = Started();
  server_.reset();
  SchedulerOptions o = Options();
  o.policy = "fifo";
  Client& cl = StartDaemon(o);
  const int64_t other = cl.MustSubmit(1, "other");
  Pass(std::chrono::milliseconds(300));  // 6 ticks
  server_->Sync();
  {
    const rpc::ServerInfo s = cl.Servers().servers(0);
    EXPECT_FALSE(s.up());
    EXPECT_TRUE(s.cordoned());
    EXPECT_EQ(s.away_since_us(), 0);
    const int64_t left_us = s.awaiting_until_us() - WorldWallMicros();
    // Awaited as long as an agent out of reach: --agent-timeout-s, then
    // --agent-grace-s.
    EXPECT_GT(left_us, static_cast<int64_t>(o.agent_timeout_s * 1e6));
    EXPECT_LE(left_us, static_cast<int64_t>(
                           (o.agent_timeout_s + o.agent_grace_s) * 1e6));
  }
  EXPECT_EQ(cl.State(other), rpc::QUEUED);
  EXPECT_EQ(agent_.start_calls(other), 0);
  EXPECT_EQ(cl.State(j), rpc::RUNNING);  // still placed there

  ASSERT_TRUE(agent_.Register(server_.address()).ok());
  server_->Sync();
  {
    const rpc::ServerInfo s = cl.Servers().servers(0);
    EXPECT_TRUE(s.up());
    EXPECT_FALSE(s.cordoned());
    EXPECT_EQ(s.awaiting_until_us(), 0);
  }
  EXPECT_TRUE(WaitFor([&] { return agent_.start_calls(other) == 1; }))
      << cl.Get(other).DebugString();
  EXPECT_EQ(agent_.start_calls(j), 1);  // the running job was left alone
}

// An operator's cordon is the operator's: a restarted daemon neither adds
// its own nor lifts it when the agent registers.
TEST_F(AgentStopTest, ARestartedDaemonKeepsAnOperatorsCordon) {
  rpc::DrainReply drained;
  ASSERT_TRUE(cl_->Drain("node", &drained, /*cordon_only=*/true).ok());
  server_.reset();
  SchedulerOptions o = Options();
  o.policy = "fifo";
  Client& cl = StartDaemon(o);
  server_->Sync();
  EXPECT_TRUE(cl.Servers().servers(0).cordoned());
  ASSERT_TRUE(agent_.Register(server_.address()).ok());
  server_->Sync();
  EXPECT_TRUE(cl.Servers().servers(0).up());
  EXPECT_TRUE(cl.Servers().servers(0).cordoned());
}

// An agent that said it stops is declared down after --agent-away-s, not
// after --agent-timeout-s; its jobs are then placed again.
TEST_F(DaemonTest, AnAwayAgentIsDeclaredDownAfterAgentAwayS) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.agent_timeout_s = 0.3;
  o.agent_away_s = 4;
  Client& cl = StartDaemon(o);
  FakeAgent agent("node", 2, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return agent.start_calls(j) == 1; }));
  ASSERT_TRUE(agent.Leave().ok());
  agent.StopSaving(j, 40);
  ASSERT_TRUE(agent.Report().ok());
  // Four times --agent-timeout-s without a report: still waited for.
  Pass(std::chrono::milliseconds(1200));
  server_->Sync();
  EXPECT_GT(cl.Servers().servers(0).away_since_us(), 0);
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  ASSERT_TRUE(WaitFor(
      [&] { return cl.Servers().servers(0).away_since_us() == 0; }, 20));
  EXPECT_FALSE(cl.Servers().servers(0).up());
  EXPECT_TRUE(WaitFor([&] { return cl.State(j) == rpc::QUEUED; }))
      << cl.Get(j).DebugString();
  // Back after all, with the checkpoint: the job goes on from it.
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor([&] {
    (void)agent.Report();
    return agent.resume_local_starts(j) == 1;
  })) << cl.Get(j).DebugString();
  EXPECT_NE(HistoryOf(cl, j, "reconcile")
                .at(0)
                .detail()
                .find("agent 'node' holds a checkpoint of it"),
            std::string::npos)
      << cl.Get(j).DebugString();
  EXPECT_EQ(agent.start_calls(j), 2);
  EXPECT_TRUE(WaitFor([&] {
    (void)agent.Report();
    return cl.State(j) == rpc::RUNNING;
  })) << cl.Get(j).DebugString();
}

// Submits a two-GPU job (elastic if asked) to a fifo daemon whose agents
// `a` and `b` have one GPU each (registered in that order, so that rank 0's
// part is b's) and waits until both parts run and the job trains through
// the job-side library. Its id; -1, with a test failure, if it does not.
int64_t StartSpanningJob(Client& cl, FakeAgent& a, FakeAgent& b, bool elastic) {
  rpc::JobSpec spec;
  spec.set_name(elastic ? "elastic" : "job");
  spec.set_command("python3 train.py");
  spec.set_gpus(2);
  spec.set_elastic(elastic);
  int64_t j = -1;
  if (!cl.Submit(spec, &j).ok()) {
    ADD_FAILURE() << "Submit";
    return -1;
  }
  if (!WaitFor([&] {
        const rpc::JobInfo info = cl.Get(j);
        return info.state() == rpc::RUNNING && HasEntry(info, "start", true) &&
               a.procs().count(j) == 1 && b.procs().count(j) == 1;
      })) {
    ADD_FAILURE() << cl.Get(j).DebugString();
    return -1;
  }
  EXPECT_EQ(cl.Get(j).server(), b.name());
  b.SetProgress(j, 10, 5.0);
  EXPECT_TRUE(b.Report().ok());
  if (!WaitFor([&] { return cl.Get(j).uses_library(); })) {
    ADD_FAILURE() << "the job does not use the library";
    return -1;
  }
  return j;
}

// An agent with a part of a job spanning servers stops: the daemon has
// rank 0 save the job's checkpoint at the lead's agent (every part exits),
// tells the agent to wait for its part's exit, and restarts every part from
// that checkpoint when the agent is back; whether the agent that stops
// holds the lead's part or another.
TEST_F(DaemonTest, AJobSpanningServersIsSavedWhenOneOfItsAgentsStops) {
  for (const bool lead_stops : {false, true}) {
    SCOPED_TRACE(lead_stops ? "the lead's agent stops"
                            : "another part's agent stops");
    TearDown();
    SetUp();
    SchedulerOptions o = Options();
    FakeAgent a("node-a", 1, Mode::kOk);
    FakeAgent b("node-b", 1, Mode::kOk);
    const int64_t j = StartDaemonAndSpanningJob(o, a, b);
    Client& cl = *client_;
    ASSERT_GT(j, 0);

    FakeAgent& stops = lead_stops ? b : a;
    rpc::LeaveReply left;
    ASSERT_TRUE(stops.Leave(&left).ok());
    ASSERT_EQ(left.saving_size(), 1);
    EXPECT_EQ(left.saving(0), j);
    ASSERT_TRUE(WaitFor([&] { return !HistoryOf(cl, j, "stop").empty(); }))
        << cl.Get(j).DebugString();
    const auto stop = HistoryOf(cl, j, "stop")[0];
    EXPECT_TRUE(stop.ok()) << stop.detail();
    EXPECT_NE(stop.detail().find("agent '" + stops.name() +
                                 "' stopped; the job, spanning servers, "
                                 "saved a checkpoint at mini-batch "),
              std::string::npos)
        << stop.detail();
    EXPECT_NE(stop.detail().find("kept on node-b"), std::string::npos)
        << stop.detail();
    EXPECT_EQ(b.procs().count(j), 0u);  // rank 0 saved and left
    EXPECT_TRUE(WaitFor([&] { return a.procs().count(j) == 0; }));
    EXPECT_EQ(cl.State(j), rpc::RUNNING);
    // The agent stops (its part's exit comes killed) and is back, listing
    // the checkpoint if it holds the lead's part.
    if (lead_stops) b.Keep(j);
    ASSERT_TRUE(stops.Register(server_.address()).ok());
    ASSERT_TRUE(WaitFor([&] {
      return a.resume_local_starts(j) == 1 && b.resume_local_starts(j) == 1;
    })) << cl.Get(j).DebugString();
    // Rank 0 trains past its checkpoint (mini-batch 10): the restart is
    // done.
    b.SetProgress(j, 11, 5.0);
    ASSERT_TRUE(b.Report().ok());
    ASSERT_TRUE(WaitFor([&] { return !HistoryOf(cl, j, "restart").empty(); }));
    const auto restart = HistoryOf(cl, j, "restart")[0];
    EXPECT_TRUE(restart.ok()) << restart.detail();
    EXPECT_NE(restart.detail().find("from the checkpoint kept on node-b "
                                    "(agent '" +
                                    stops.name() + "' is back)"),
              std::string::npos)
        << restart.detail();
    EXPECT_TRUE(HistoryOf(cl, j, "lost").empty());
    ASSERT_TRUE(FinishesOn(cl, b, j));
  }
}

// The same restart, waiting for its agent, when the daemon stops without a
// snapshot (as after a crash): replayed from the log, the core's Restart is
// pending and unsent, and the agent's first report after it registers
// (the job missing, its checkpoint held) sends it, from that checkpoint.
TEST_F(DaemonTest, ARestartWaitingForItsAgentIsReplayedFromTheLog) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.snapshot_every_events = 0;  // no snapshot at the stop: the log replays
  Client* cl = &StartDaemon(o);
  FakeAgent agent("node", 2, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t j = cl->MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return HistoryOf(*cl, j, "start").size() == 1; }));
  ASSERT_NO_FATAL_FAILURE(RestartWaitsForItsAgent(*cl, agent, j));
  EXPECT_EQ(agent.resume_local_starts(j), 0);

  server_.reset();
  cl = &StartDaemon(o);
  agent.FailResumeLocal(grpc::StatusCode::OK);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return agent.resume_local_starts(j) == 1; }))
      << cl->Get(j).DebugString();
  ASSERT_TRUE(WaitFor([&] {
    const auto r = HistoryOf(*cl, j, "restart");
    return !r.empty() && r.back().ok();
  })) << cl->Get(j).DebugString();
  EXPECT_EQ(cl->State(j), rpc::RUNNING);
  EXPECT_EQ(agent.start_calls(j), 3);  // the first, the failed, this one
  ASSERT_TRUE(FinishesOn(*cl, agent, j));
}

// Jobs killed while an action of theirs is under way leave nothing pending
// and are forgotten as any ended job is: one whose restart waits for its
// agent, and one whose start's reply comes after the kill.
TEST_F(DaemonTest, JobsKilledWithAnActionUnderWayAreForgottenLikeAnyOther) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.keep_ended_jobs = 1;
  o.retention_check_s = 0.05;
  Client& cl = StartDaemon(o);
  FakeAgent agent("node", 2, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return HistoryOf(cl, j, "start").size() == 1; }));
  ASSERT_NO_FATAL_FAILURE(RestartWaitsForItsAgent(cl, agent, j));
  ASSERT_TRUE(cl.Kill(j).ok());
  agent.HoldStarts(true);
  const int64_t starting = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return agent.starts_begun(starting) == 1; }));
  ASSERT_TRUE(cl.Kill(starting).ok());
  agent.HoldStarts(false);
  ASSERT_TRUE(WaitFor([&] { return agent.start_calls(starting) == 1; }));
  const int64_t last = cl.MustSubmit(1);
  ASSERT_TRUE(
      WaitFor([&] { return HistoryOf(cl, last, "start").size() == 1; }));
  ASSERT_TRUE(cl.Kill(last).ok());
  ASSERT_TRUE(WaitFor([&] {
    return cl.Get(j).archived() && cl.Get(starting).archived();
  })) << cl.Get(j).DebugString()
      << cl.Get(starting).DebugString();
  EXPECT_FALSE(cl.Get(last).archived());
  EXPECT_EQ(agent.start_calls(j), 2);
}

// A job spanning servers whose restart from its checkpoint fails (a part's
// agent cannot start from it) is restarted by the core, like any job whose
// process was lost: every part again from the beginning, not the job's end.
TEST_F(DaemonTest,
       AJobSpanningServersWhoseRestartFromItsCheckpointFailsStartsAfresh) {
  SchedulerOptions o = Options();
  FakeAgent a("node-a", 1, Mode::kOk);
  FakeAgent b("node-b", 1, Mode::kOk);
  const int64_t j = StartDaemonAndSpanningJob(o, a, b);
  Client& cl = *client_;
  ASSERT_GT(j, 0);
  ASSERT_TRUE(b.Leave().ok());
  ASSERT_TRUE(WaitFor([&] { return !HistoryOf(cl, j, "stop").empty(); }))
      << cl.Get(j).DebugString();
  EXPECT_TRUE(WaitFor([&] { return a.procs().count(j) == 0; }));
  b.Keep(j);
  a.FailResumeLocal(grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(b.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor([&] { return HistoryOf(cl, j, "restart").size() == 2; }))
      << cl.Get(j).DebugString();
  const auto restarts = HistoryOf(cl, j, "restart");
  EXPECT_FALSE(restarts[0].ok());
  EXPECT_NE(
      restarts[0].detail().find("; every part starts again from the beginning"),
      std::string::npos)
      << restarts[0].detail();
  EXPECT_TRUE(restarts[1].ok()) << restarts[1].detail();
  EXPECT_NE(restarts[1].detail().find("relaunched every part afresh"),
            std::string::npos)
      << restarts[1].detail();
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  EXPECT_EQ(a.procs().count(j), 1u);
  EXPECT_EQ(b.procs().count(j), 1u);
  ASSERT_TRUE(FinishesOn(cl, b, j));
}

// Both agents of a job spanning servers stop at once: each waits for its
// part (the save under way is the one for both), and every part starts
// again only when the last of them is back.
TEST_F(DaemonTest, AJobSpanningServersWaitsForTheLastOfItsAgentsToBeBack) {
  SchedulerOptions o = Options();
  FakeAgent a("node-a", 1, Mode::kOk);
  FakeAgent b("node-b", 1, Mode::kOk);
  const int64_t j = StartDaemonAndSpanningJob(o, a, b);
  Client& cl = *client_;
  ASSERT_GT(j, 0);

  b.HoldCheckpoints(true);
  rpc::LeaveReply left;
  ASSERT_TRUE(a.Leave(&left).ok());
  ASSERT_EQ(left.saving_size(), 1);
  ASSERT_TRUE(WaitFor([&] { return b.CheckpointsHeld() == 1; }));
  ASSERT_TRUE(b.Leave(&left).ok());
  ASSERT_EQ(left.saving_size(), 1);  // the same save
  EXPECT_EQ(left.saving(0), j);
  b.HoldCheckpoints(false);
  ASSERT_TRUE(WaitFor([&] { return !HistoryOf(cl, j, "stop").empty(); }));
  EXPECT_TRUE(HistoryOf(cl, j, "stop")[0].ok());
  EXPECT_EQ(b.CheckpointsHeld(), 1);

  ASSERT_TRUE(a.Register(server_.address()).ok());  // b is still away
  server_->Sync();
  Pass(std::chrono::milliseconds(200));
  EXPECT_EQ(a.resume_local_starts(j), 0);
  EXPECT_TRUE(HistoryOf(cl, j, "restart").empty());
  b.Keep(j);
  ASSERT_TRUE(b.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor([&] {
    return a.resume_local_starts(j) == 1 && b.resume_local_starts(j) == 1;
  })) << cl.Get(j).DebugString();
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  // Rank 0 trains past its checkpoint: the restart is done.
  b.SetProgress(j, 11, 5.0);
  ASSERT_TRUE(b.Report().ok());
  EXPECT_TRUE(WaitFor([&] { return !HistoryOf(cl, j, "restart").empty(); }));
}

// Rank 0 of job `j` (on `b` or `c`, wherever it is) trains past the
// checkpoint at mini-batch 10 its parts started again from: that start is
// done. The job's `start` lines once there are two (the first start and
// that one).
std::vector<rpc::HistoryEntry> StartsOnceTrainedPastTheCheckpoint(
    Client& cl, int64_t j, FakeAgent& b, FakeAgent& c) {
  b.SetProgress(j, 11, 5.0);
  c.SetProgress(j, 11, 5.0);
  std::vector<rpc::HistoryEntry> starts;
  EXPECT_TRUE(WaitFor([&] {
    (void)b.Report();
    (void)c.Report();
    starts = HistoryOf(cl, j, "start");
    return starts.size() == 2;
  })) << cl.Get(j).DebugString();
  return starts;
}

// A job spanning servers saved as the agent of one part stopped, which is
// then declared down: the job goes back to the queue with the checkpoint
// its lead's agent keeps, and starts from it where the core places it next,
// not from the beginning: on two servers (the new part's agent receives it
// from the lead's), or on one (the other part's server cordoned): that
// server's agent receives it and the job starts there cold (there is no
// process to warm up from), the lead's copy dropped.
TEST_F(DaemonTest, AJobSpanningServersWhoseAgentStaysAwayGoesOnElsewhere) {
  for (const bool one_server : {false, true}) {
    SCOPED_TRACE(one_server ? "placed next on one server"
                            : "placed next on two servers");
    TearDown();
    SetUp();
    SchedulerOptions o = Options();
    o.agent_timeout_s = 1.5;
    o.agent_away_s = 0.2;
    FakeAgent a("node-a", 1, Mode::kOk);
    FakeAgent b("node-b", 1, Mode::kOk);
    const int64_t j = StartDaemonAndSpanningJob(o, a, b);  // rank 0 on b
    Client& cl = *client_;
    ASSERT_GT(j, 0);
    FakeAgent c("node-c", one_server ? 2 : 1, Mode::kOk);
    ASSERT_TRUE(c.Register(server_.address()).ok());
    if (one_server) {
      rpc::DrainReply drained;
      ASSERT_TRUE(cl.Drain("node-b", &drained, /*cordon_only=*/true).ok());
    }
    ASSERT_TRUE(a.Leave().ok());
    ASSERT_TRUE(WaitFor([&] { return !HistoryOf(cl, j, "stop").empty(); }));
    ASSERT_TRUE(HistoryOf(cl, j, "stop")[0].ok());
    b.Keep(j);

    // a stays away; b and c report on.
    const int restarts = one_server ? 1 : 2;
    ASSERT_TRUE(WaitFor(
        [&] {
          (void)b.Report();
          (void)c.Report();
          return b.resume_local_starts(j) + c.resume_local_starts(j) ==
                 restarts;
        },
        20))
        << cl.Get(j).DebugString();
    const auto requeue = HistoryOf(cl, j, "requeue");
    ASSERT_EQ(requeue.size(), 1u) << cl.Get(j).DebugString();
    EXPECT_NE(requeue[0].detail().find(
                  "server node-a, which it waited for, is down: the job goes "
                  "back to the queue and on from the checkpoint kept on "
                  "node-b (mini-batch 10)"),
              std::string::npos)
        << requeue[0].detail();
    EXPECT_EQ(b.resume_local_starts(j), one_server ? 0 : 1);
    EXPECT_EQ(c.resume_local_starts(j), 1);
    EXPECT_EQ(c.start_calls(j), 1);  // no warm start
    EXPECT_EQ(c.received_from(j), std::vector<std::string>{b.address()});
    EXPECT_EQ(c.start_gpus(j).size(), one_server ? 2u : 1u);
    EXPECT_EQ(a.start_calls(j), 1);
    const auto starts = StartsOnceTrainedPastTheCheckpoint(cl, j, b, c);
    ASSERT_EQ(starts.size(), 2u);
    EXPECT_TRUE(starts[1].ok()) << starts[1].detail();
    EXPECT_NE(starts[1].detail().find(
                  one_server ? "from node-b to gpus [0,1] on node-c, transfer "
                             : "from gpus [0] on node-b to "),
              std::string::npos)
        << starts[1].detail();
    EXPECT_EQ(starts[1].detail().find("from scratch"), std::string::npos)
        << starts[1].detail();
    // Its first mini-batch past the checkpoint.
    EXPECT_NE(starts[1].detail().find(" after it"), std::string::npos)
        << starts[1].detail();
    if (one_server) {
      EXPECT_GE(b.kills(j), 1);  // its copy dropped
      EXPECT_EQ(cl.Get(j).server(), "node-c");
    }
    EXPECT_EQ(cl.State(j), rpc::RUNNING);
  }
}

// The same gang, requeued with its checkpoint kept on its lead's agent,
// and no room for it: the daemon restarts (replaying its log, which does
// not say where the checkpoint is kept). The lead's agent registers again
// with the checkpoint, and when a server joins the job goes on from it
// there, not from the beginning.
TEST_F(DaemonTest, ARequeuedGangGoesOnFromItsKeptCheckpointAfterARestart) {
  SchedulerOptions o = Options();
  FakeAgent a("node-a", 1, Mode::kOk);
  FakeAgent b("node-b", 1, Mode::kOk);
  const int64_t j = RequeueGangKeepingItsCheckpointAndRestart(o, a, b);
  ASSERT_GT(j, 0);
  Client& again = *client_;
  ASSERT_TRUE(b.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor([&] { return HasEntry(again.Get(j), "reconcile"); }))
      << again.Get(j).DebugString();
  const auto reconciled = HistoryOf(again, j, "reconcile");
  EXPECT_NE(reconciled.back().detail().find(
                "agent 'node-b' holds a checkpoint of it, saved where its "
                "rank 0 last ran: its next start goes on from it"),
            std::string::npos)
      << reconciled.back().detail();
  EXPECT_EQ(again.State(j), rpc::QUEUED);  // one GPU open, two needed
  FakeAgent c("node-c", 1, Mode::kOk);
  ASSERT_TRUE(c.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        (void)b.Report();
        (void)c.Report();
        return b.resume_local_starts(j) + c.resume_local_starts(j) == 2;
      },
      20))
      << again.Get(j).DebugString();
  EXPECT_EQ(c.received_from(j), std::vector<std::string>{b.address()});
  EXPECT_EQ(b.start_calls(j), 2);  // the first start, and this one
  EXPECT_EQ(c.start_calls(j), 1);
  const auto starts = StartsOnceTrainedPastTheCheckpoint(again, j, b, c);
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_TRUE(starts[1].ok()) << starts[1].detail();
  EXPECT_EQ(starts[1].detail().find("from scratch"), std::string::npos)
      << starts[1].detail();
  EXPECT_EQ(again.State(j), rpc::RUNNING);
}

// The same, the checkpoint listed as saved in another cluster (another job
// of that id: the database made anew, or the agent moved between
// clusters): the daemon does not take it; the job starts from scratch. The
// cluster's id is the same across the restart.
TEST_F(DaemonTest, ACheckpointSavedInAnotherClusterIsNotTaken) {
  SchedulerOptions o = Options();
  FakeAgent a("node-a", 1, Mode::kOk);
  FakeAgent b("node-b", 1, Mode::kOk);
  const std::string before = a.cluster_id();
  EXPECT_EQ(before, "");
  const int64_t j = RequeueGangKeepingItsCheckpointAndRestart(o, a, b);
  ASSERT_GT(j, 0);
  Client& again = *client_;
  const std::string cluster = b.cluster_id();
  EXPECT_EQ(cluster.size(), 32u) << cluster;
  b.Keep(j, "another-cluster");
  ASSERT_TRUE(b.Register(server_.address()).ok());
  EXPECT_EQ(b.cluster_id(), cluster);  // the store's, kept
  server_->Sync();
  EXPECT_FALSE(HasEntry(again.Get(j), "reconcile"))
      << again.Get(j).DebugString();
  FakeAgent c("node-c", 1, Mode::kOk);
  ASSERT_TRUE(c.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        (void)b.Report();
        (void)c.Report();
        return again.State(j) == rpc::RUNNING;
      },
      20))
      << again.Get(j).DebugString();
  EXPECT_EQ(b.resume_local_starts(j) + c.resume_local_starts(j), 0);
  EXPECT_EQ(c.received_from(j), std::vector<std::string>{});
}

// A store restored from a backup older than jobs an agent still holds
// (restored onto a new machine: the database that gave their ids is gone;
// here, the agent's table has jobs the store never gave): the ids the
// agent holds of this cluster, as processes or checkpoints, are recorded
// as lost and not given again, so that a new job does not take on a lost
// one's checkpoint; their processes are killed and checkpoints dropped.
// Jobs of another cluster, and processes of an agent not registered with
// this cluster, do not count.
TEST_F(DaemonTest, IdsAnAgentHoldsThatTheStoreNeverGaveAreNotGivenAgain) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  FakeAgent a("node-a", 2, Mode::kOk);
  FakeAgent b("node-b", 1, Mode::kOk);
  {
    Client& cl = StartDaemon(o);
    ASSERT_TRUE(a.Register(server_.address()).ok());
    EXPECT_EQ(cl.MustSubmit(1), 1);
    // Started at the agent, the reply in (a job is shown running once the
    // core decides its start).
    ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(1), "start", true); }));
    server_.reset();
  }
  const std::string cluster = a.cluster_id();
  ASSERT_EQ(cluster.size(), 32u);
  a.Plant(7);                     // started by a daemon of this cluster
  a.Keep(5, cluster);             // saved in this cluster
  a.Keep(40, "another-cluster");  // another job 40
  b.Plant(30);                    // b never registered with this cluster

  Client& cl = StartDaemon(o);
  ASSERT_TRUE(b.Register(server_.address()).ok());
  ASSERT_TRUE(a.Register(server_.address()).ok());
  server_->Sync();
  for (int64_t lost : {2, 5, 7}) {
    grpc::Status st;
    cl.Get(lost, &st);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(st.error_message(),
              "job " + std::to_string(lost) +
                  " is not in this store: it was submitted after the backup "
                  "the store was restored from (ids 2-7 are not given "
                  "again)");
  }
  EXPECT_TRUE(
      WaitFor([&] { return a.kills(7) > 0 && a.kept().count(5) == 0; }));
  EXPECT_TRUE(WaitFor([&] { return b.kills(30) > 0; }));
  EXPECT_EQ(a.procs().count(1), 1u);  // the job the store knows runs on
  EXPECT_EQ(cl.MustSubmit(1), 8);     // past 7; not past 30 or 40
  grpc::Status st;
  cl.Get(30, &st);
  EXPECT_EQ(st.error_message(), "no job 30");

  // Across a restart, the store keeps them.
  server_.reset();
  Client& again = StartDaemon(o);
  again.Get(3, &st);
  EXPECT_NE(st.error_message().find("(ids 2-7 are not given again)"),
            std::string::npos)
      << st.error_message();
  EXPECT_EQ(again.MustSubmit(1), 9);
}

// The same restore, where jobs were submitted before the agents holding
// the lost ones registered again, and were given their ids: the agents'
// process and checkpoint of those ids were saved by other jobs (submitted
// at another time). A process where the new job is being started is
// replaced by its start; a checkpoint is dropped, and the new job starts
// from scratch, not from it. The job the store knows keeps its process.
TEST_F(DaemonTest, AJobGivenALostJobsIdDoesNotTakeOnItsProcessOrCheckpoint) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  FakeAgent a("node-a", 1, Mode::kOk);
  FakeAgent b("node-b", 1, Mode::kOk);
  int64_t first_submitted = 0;
  {
    Client& cl = StartDaemon(o);
    ASSERT_TRUE(a.Register(server_.address()).ok());
    EXPECT_EQ(cl.MustSubmit(1), 1);
    ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(1), "start", true); }));
    ASSERT_TRUE(b.Register(server_.address()).ok());
    first_submitted = cl.Get(1).submitted_us();
    server_.reset();
  }
  ASSERT_EQ(a.procs().at(1).submitted_us, first_submitted);  // the core's
  const int64_t lost_at = first_submitted + 1;  // the lost jobs' time
  b.Plant(2, lost_at);
  a.Keep(3, a.cluster_id(), lost_at);

  Client& cl = StartDaemon(o);
  EXPECT_EQ(cl.MustSubmit(1), 2);  // before the agents are back
  EXPECT_EQ(cl.MustSubmit(1), 3);
  // Job 2 is placed on b as it comes up: its start finds the lost job's
  // process, kills it and starts again.
  ASSERT_TRUE(b.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(2), "start", true); }))
      << cl.Get(2).DebugString();
  EXPECT_EQ(b.kills(2), 1);
  const rpc::JobInfo two = cl.Get(2);
  ASSERT_EQ(b.procs().count(2), 1u) << two.DebugString();
  EXPECT_EQ(b.procs().at(2).submitted_us, two.submitted_us());
  EXPECT_NE(two.submitted_us(), lost_at);
  bool said = false, replaced = false;
  for (const rpc::HistoryEntry& h : two.history()) {
    said = said ||
           h.detail().find("of another job of this id") != std::string::npos;
    replaced = replaced || (h.action() == "start" && h.ok() &&
                            h.detail().find("replaced a stray process") !=
                                std::string::npos);
  }
  EXPECT_TRUE(said) << two.DebugString();
  EXPECT_TRUE(replaced) << two.DebugString();

  // Job 3 waits for a's GPU: the checkpoint a holds of the lost job 3 is
  // dropped, and job 3 starts from scratch once job 1 ends.
  ASSERT_TRUE(a.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor([&] { return a.kept().count(3) == 0; }));
  EXPECT_EQ(cl.State(3), rpc::QUEUED);
  EXPECT_EQ(a.kills(1), 0);
  EXPECT_EQ(cl.State(1), rpc::RUNNING);
  a.Exit(1, 0);
  ASSERT_TRUE(WaitFor([&] {
    (void)a.Report();
    return HasEntry(cl.Get(3), "start", true);
  })) << cl.Get(3).DebugString();
  EXPECT_EQ(a.resume_local_starts(3), 0);
  EXPECT_EQ(a.procs().at(3).submitted_us, cl.Get(3).submitted_us());
}

// The same restore, where the agent runs jobs submitted after the backup,
// each listed with the spec it was started with: they are adopted under
// their own ids and submission times rather than killed. A job whose GPUs
// hold no other job keeps its process, running or suspended; one whose
// GPU the store's own job holds is queued, its process killed, and starts
// again from the beginning on a free GPU. A process listed without a spec
// (a part of a multi-server job, an older agent) is killed, its id lost.
// Across a restart the adopted jobs are as they were.
TEST_F(DaemonTest, LostJobsAnAgentRunsWithTheirSpecsAreAdopted) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  FakeAgent a("node-a", 5, Mode::kOk);
  const int64_t first_submitted = RunOneJobAndStop(o, a);
  ASSERT_GT(first_submitted, 0);
  const std::string cluster = a.cluster_id();
  ASSERT_EQ(a.procs().at(1).gpus, std::vector<int32_t>{0});
  auto spec = [](const std::string& name) {
    rpc::JobSpec s;
    s.set_name(name);
    s.set_command("python3 train.py --name " + name);
    s.set_gpus(1);
    return s;
  };
  const int64_t lost_at = first_submitted + 1000;
  a.PlantWithSpec(3, spec("three"), lost_at, {3}, rpc::SUSPENDED);
  a.PlantWithSpec(4, spec("four"), lost_at + 1, {2});
  a.PlantWithSpec(5, spec("five"), lost_at + 2, {0});  // job 1's GPU
  a.Plant(6, lost_at + 3);                             // no spec
  a.KeepWithSpec(8, cluster, lost_at + 4, spec("eight"));
  a.SetProgress(4, 120, 3.5);
  Pass(std::chrono::milliseconds(10));  // they were submitted before now

  Client& cl = StartDaemon(o);
  ASSERT_TRUE(a.Register(server_.address()).ok());
  server_->Sync();
  auto adopted = [&](int64_t id, const std::string& says) {
    const rpc::JobInfo info = cl.Get(id);
    for (const rpc::HistoryEntry& h : info.history()) {
      if (h.action() == "adopt" && h.ok() &&
          h.detail().find(says) != std::string::npos) {
        return true;
      }
    }
    ADD_FAILURE() << info.DebugString();
    return false;
  };
  const rpc::JobInfo four = cl.Get(4);
  EXPECT_EQ(four.state(), rpc::RUNNING);
  EXPECT_EQ(four.spec().name(), "four");
  EXPECT_EQ(four.submitted_us(), lost_at + 1);
  EXPECT_EQ(four.server(), "node-a");
  EXPECT_EQ(std::vector<int32_t>(four.gpus().begin(), four.gpus().end()),
            std::vector<int32_t>{2});
  EXPECT_TRUE(adopted(4, "its process on node-a was kept, running"));
  EXPECT_TRUE(adopted(3, "was kept, suspended"));
  EXPECT_TRUE(adopted(5,
                      "could not be kept (job 5: field 'placed_on': GPU "
                      "0 holds job 1): it starts again from the "
                      "beginning"));
  // Job 5 starts afresh on the free GPU, after its old process is killed.
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(5), "start", true); }))
      << cl.Get(5).DebugString();
  EXPECT_EQ(a.kills(5), 1);
  EXPECT_EQ(a.procs().at(5).gpus, std::vector<int32_t>{1});
  EXPECT_EQ(a.procs().at(5).submitted_us, lost_at + 2);
  // Job 8 goes on from the checkpoint node-a holds, on the GPU left.
  EXPECT_TRUE(adopted(8, "it goes on from the checkpoint node-a holds"));
  ASSERT_TRUE(WaitFor([&] { return a.resume_local_starts(8) == 1; }))
      << cl.Get(8).DebugString();
  EXPECT_EQ(a.procs().at(8).gpus, std::vector<int32_t>{4});
  EXPECT_EQ(a.procs().at(8).submitted_us, lost_at + 4);
  EXPECT_TRUE(WaitFor([&] { return a.kills(6) > 0; }));
  for (const auto& [lost, says] :
       std::map<int64_t, std::string>{{2, "its id is"}, {6, "ids 6-7 are"}}) {
    grpc::Status st;  // none runs 2 or 7
    cl.Get(lost, &st);
    EXPECT_EQ(st.error_message(),
              "job " + std::to_string(lost) +
                  " is not in this store: it was submitted after the backup "
                  "the store was restored from (" +
                  says + " not given again)");
  }
  EXPECT_EQ(a.kills(3) + a.kills(4) + a.kills(1), 0);
  EXPECT_EQ(a.starts_begun(4), 0);
  EXPECT_EQ(cl.MustSubmit(1), 9);

  // The store and the event log keep them.
  server_.reset();
  Client& again = StartDaemon(o);
  const rpc::JobInfo four_again = again.Get(4);
  EXPECT_EQ(four_again.state(), rpc::RUNNING);
  EXPECT_EQ(four_again.submitted_us(), lost_at + 1);
  EXPECT_EQ(
      std::vector<int32_t>(four_again.gpus().begin(), four_again.gpus().end()),
      std::vector<int32_t>{2});
  ASSERT_TRUE(a.Register(server_.address()).ok());
  server_->Sync();
  EXPECT_EQ(a.kills(4) + a.kills(3), 0);
  EXPECT_EQ(again.State(4), rpc::RUNNING);
}

// A job the store has queued that its agent runs, started by the same
// submission (here: it started after the state the restarted daemon has,
// on the GPU the store's other job held until it was killed while the
// agent was away) is kept where it runs: no start, no kill. The job is
// then as any running job (a kill reaches its process).
TEST_F(DaemonTest, AQueuedJobItsAgentRunsIsKeptWhereItRuns) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  FakeAgent a("node-a", 1, Mode::kOk);
  ASSERT_GT(RunOneJobAndStop(o, a), 0);
  Client& cl = StartDaemon(o);  // node-a cordoned until it is back
  EXPECT_EQ(cl.MustSubmit(1, "two"), 2);
  const int64_t submitted = cl.Get(2).submitted_us();
  ASSERT_TRUE(cl.Kill(1).ok());
  server_->Sync();
  EXPECT_EQ(cl.State(2), rpc::QUEUED);
  rpc::JobSpec spec;
  spec.set_name("two");
  spec.set_command("python3 train.py");
  spec.set_gpus(1);
  a.Lose(1);
  a.PlantWithSpec(2, spec, submitted, {0});
  a.SetProgress(2, 40, 2.5);
  ASSERT_TRUE(a.Register(server_.address()).ok());
  server_->Sync();
  const rpc::JobInfo two = cl.Get(2);
  EXPECT_EQ(two.state(), rpc::RUNNING) << two.DebugString();
  EXPECT_EQ(two.server(), "node-a");
  EXPECT_TRUE(HasEntry(two, "adopt", true)) << two.DebugString();
  EXPECT_EQ(a.starts_begun(2), 0);
  EXPECT_EQ(a.kills(2), 0);
  ASSERT_TRUE(cl.Kill(2).ok());
  EXPECT_TRUE(WaitFor([&] { return a.kills(2) == 1; }));
}

// An agent out of reach past --agent-timeout-s and --agent-grace-s (0
// here): its server is declared down and its job requeued (no other server
// has room). Back, still running the job, the process is kept where it runs
// rather than killed and started again: no second start, no kill.
TEST_F(DaemonTest, AJobRequeuedWhileItsAgentWasOutOfReachKeepsItsProcess) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.agent_timeout_s = 0.3;
  o.agent_grace_s = 0;
  Client& cl = StartDaemon(o);
  FakeAgent agent("node", 1, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(j), "start", true); }));
  // No report: declared down, the job requeued.
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::QUEUED; }, 20))
      << cl.Get(j).DebugString();
  EXPECT_FALSE(cl.Servers().servers(0).up());
  agent.SetProgress(j, 50, 4.0);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  server_->Sync();
  EXPECT_EQ(cl.State(j), rpc::RUNNING) << cl.Get(j).DebugString();
  EXPECT_TRUE(HasEntry(cl.Get(j), "adopt", true)) << cl.Get(j).DebugString();
  EXPECT_TRUE(cl.Servers().servers(0).up());
  EXPECT_FALSE(cl.Servers().servers(0).cordoned());
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  EXPECT_EQ(agent.start_calls(j), 1);
  EXPECT_EQ(agent.kills(j), 0);
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
}

std::string HttpGet(int port, const std::string& path);  // below
double Sample(const std::string& page, const std::string& series);

// An agent not heard of for --agent-timeout-s is out of reach: its server
// is cordoned (nothing new goes there) and shown so, its job stays placed
// there as it was and says why, and its reports are refused until it
// registers again. Back within --agent-grace-s, the job goes on where it
// ran (no second start, no kill, no requeue) and the server opens again.
TEST_F(DaemonTest, AnAgentOutOfReachKeepsItsJobsThroughItsGrace) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.agent_timeout_s = 1;
  o.agent_grace_s = 600;
  o.metrics_listen = "127.0.0.1:0";
  Client& cl = StartDaemon(o);
  FakeAgent agent("node", 2, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(j), "start", true); }));
  ASSERT_TRUE(
      WaitFor([&] { return cl.Servers().servers(0).silent_since_us() > 0; }));
  const rpc::ServerInfo s = cl.Servers().servers(0);
  EXPECT_FALSE(s.up());
  EXPECT_TRUE(s.cordoned());
  EXPECT_GT(s.silent_until_us() - s.silent_since_us(), 599'000'000);
  EXPECT_LE(s.silent_until_us() - s.silent_since_us(), 601'000'000);
  const rpc::JobInfo info = cl.Get(j);
  EXPECT_EQ(info.state(), rpc::RUNNING);
  EXPECT_NE(info.waiting_reason().find("agent 'node' is out of reach (not "
                                       "heard of for "),
            std::string::npos)
      << info.waiting_reason();
  // Nothing new is placed on its free GPU.
  const int64_t other = cl.MustSubmit(1, "other");
  Pass(std::chrono::milliseconds(300));  // 6 ticks
  server_->Sync();
  EXPECT_EQ(cl.State(other), rpc::QUEUED);
  EXPECT_EQ(agent.starts_begun(other), 0);
  const std::string state = "gandiva_servers{state=\"out_of_reach\"}";
  std::string page;
  EXPECT_TRUE(WaitFor([&] {
    page = Metrics();
    return Sample(page, state) == 1;
  })) << page;
  EXPECT_EQ(Sample(page, "gandiva_servers{state=\"down\"}"), 1) << page;
  // A stop it asks for is refused till it registers again.
  EXPECT_EQ(agent.Leave().error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // Back: its report is refused, it registers again (as an agent does).
  agent.SetProgress(j, 50, 4.0);
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  EXPECT_EQ(agent.registrations(), 2);
  const rpc::ServerInfo back = cl.Servers().servers(0);
  EXPECT_TRUE(back.up());
  EXPECT_FALSE(back.cordoned());
  EXPECT_EQ(back.silent_since_us(), 0);
  // Heard of from now on (each wait reports).
  ASSERT_TRUE(WaitFor([&] {
    (void)agent.Report();
    return agent.start_calls(other) == 1;
  }));
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  const rpc::JobInfo after = cl.Get(j);
  EXPECT_EQ(after.state(), rpc::RUNNING);
  EXPECT_EQ(after.waiting_reason(), "");
  EXPECT_EQ(after.progress().minibatches(), 50);
  EXPECT_EQ(agent.start_calls(j), 1);
  EXPECT_EQ(agent.kills(j), 0);
  EXPECT_TRUE(HistoryOf(cl, j, "requeue").empty()) << after.DebugString();
  EXPECT_TRUE(HistoryOf(cl, j, "lost").empty()) << after.DebugString();
  const auto reach = HistoryOf(cl, j, "reach");
  ASSERT_EQ(reach.size(), 1u) << after.DebugString();
  EXPECT_NE(reach[0].detail().find("agent 'node' was out of reach for "),
            std::string::npos)
      << reach[0].detail();
  EXPECT_NE(reach[0].detail().find("; the job was kept there and goes on"),
            std::string::npos)
      << reach[0].detail();
  EXPECT_TRUE(HistoryOf(cl, other, "reach").empty());  // started after
  EXPECT_TRUE(WaitFor([&] {
    (void)agent.Report();
    page = Metrics();
    return Sample(page, state) == 0 &&
           Sample(page, "gandiva_servers{state=\"up\"}") == 1;
  })) << page;
  EXPECT_EQ(agent.registrations(), 2);  // not out of reach again
}

// An agent that registers again while a suspend the daemon sent it is
// under way (it was out of reach, say, the call waiting in it) lists the
// job running: the suspend is not settled as failed from that list, but by
// its reply, which comes after. Before, the daemon took the job for
// running while its process stayed suspended, for good.
TEST_F(DaemonTest,
       ASuspendUnderWayAsItsAgentRegistersAgainIsSettledByItsReply) {
  FakeAgent agent("node", 1, Mode::kOk);
  Client& cl = StartFifoDaemonWith(agent);
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(j), "start", true); }));
  agent.HoldSuspends(true);
  ASSERT_TRUE(cl.Suspend(j).ok());
  ASSERT_TRUE(WaitFor([&] { return agent.SuspendsHeld() == 1; }));
  ASSERT_TRUE(agent.Register(server_.address()).ok());  // lists it running
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  EXPECT_FALSE(HasEntry(cl.Get(j), "suspend", false))
      << cl.Get(j).DebugString();
  agent.HoldSuspends(false);
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(j), "suspend", true); }))
      << cl.Get(j).DebugString();
  EXPECT_EQ(cl.State(j), rpc::SUSPENDED);
  EXPECT_EQ(agent.procs().at(j).state, rpc::SUSPENDED);
  ASSERT_TRUE(cl.Resume(j).ok());
  // The job shows running as soon as the core decides the resume; the
  // agent's reply (recorded as the resume's outcome) comes after.
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(j), "resume", true); }))
      << cl.Get(j).DebugString();
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  EXPECT_EQ(agent.procs().at(j).state, rpc::RUNNING);
}

// A process its agent reports in the other state than the scheduler has
// the job in, in two reports in a row, is set right (a single report may
// predate an action's reply): resumed when the job runs, suspended when it
// waits for its turn.
TEST_F(DaemonTest, AProcessInTheOtherStateThanItsJobIsSetRight) {
  FakeAgent agent("node", 1, Mode::kOk);
  Client& cl = StartFifoDaemonWith(agent);
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(j), "start", true); }));
  agent.SetProgress(j, 10, 2.0);
  ASSERT_TRUE(agent.Report().ok());
  agent.SetProcState(j, rpc::SUSPENDED);
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  EXPECT_EQ(agent.resumes(), 0);  // one report: not yet
  EXPECT_TRUE(HistoryOf(cl, j, "reconcile").empty());
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return agent.resumes() == 1; }));
  EXPECT_EQ(agent.procs().at(j).state, rpc::RUNNING);
  ASSERT_TRUE(WaitFor([&] { return !HistoryOf(cl, j, "reconcile").empty(); }));
  const auto fixed = HistoryOf(cl, j, "reconcile");
  EXPECT_TRUE(fixed[0].ok());
  EXPECT_EQ(fixed[0].detail(),
            "agent 'node' has its process suspended while the scheduler has "
            "it running, in two reports: resumed it");
  EXPECT_EQ(cl.State(j), rpc::RUNNING);

  // Suspended (held), its process found running: suspended again.
  ASSERT_TRUE(cl.Suspend(j).ok());
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::SUSPENDED; }));
  const int suspends = agent.suspend_calls();
  agent.SetProcState(j, rpc::RUNNING);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return agent.suspend_calls() == suspends + 1; }));
  EXPECT_EQ(agent.procs().at(j).state, rpc::SUSPENDED);
  EXPECT_EQ(cl.State(j), rpc::SUSPENDED);
  EXPECT_TRUE(
      WaitFor([&] { return HistoryOf(cl, j, "reconcile").size() == 2; }));
  // Agreeing reports set nothing more right.
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  EXPECT_EQ(agent.suspend_calls(), suspends + 1);
  EXPECT_EQ(agent.resumes(), 1);
}

// The agent of one part of a job spanning servers is out of reach: the
// job keeps both parts (the other is not stopped) through the grace, and
// goes on as it was when the agent is back.
TEST_F(DaemonTest, AJobSpanningServersKeepsItsPartsThroughAnAgentsGrace) {
  SchedulerOptions o = Options();
  o.agent_timeout_s = 1;
  o.agent_grace_s = 600;
  FakeAgent a("node-a", 1, Mode::kOk);
  FakeAgent b("node-b", 1, Mode::kOk);
  const int64_t j = StartDaemonAndSpanningJob(o, a, b);  // rank 0 on b
  ASSERT_GT(j, 0);
  Client& cl = *client_;
  ASSERT_TRUE(WaitFor([&] {
    (void)b.Report();
    return cl.Servers().servers(0).silent_since_us() > 0;
  }));
  const rpc::JobInfo during = cl.Get(j);
  EXPECT_EQ(during.state(), rpc::RUNNING);
  EXPECT_NE(during.waiting_reason().find("agent 'node-a' is out of reach"),
            std::string::npos)
      << during.waiting_reason();
  EXPECT_TRUE(cl.Servers().servers(1).up());
  ASSERT_TRUE(a.Report().ok());  // back: registers again
  ASSERT_TRUE(b.Report().ok());
  server_->Sync();
  EXPECT_TRUE(cl.Servers().servers(0).up());
  const rpc::JobInfo after = cl.Get(j);
  EXPECT_EQ(after.state(), rpc::RUNNING);
  EXPECT_EQ(after.waiting_reason(), "");
  for (FakeAgent* agent : {&a, &b}) {
    EXPECT_EQ(agent->start_calls(j), 1);
    EXPECT_EQ(agent->kills(j), 0);
  }
  EXPECT_TRUE(HistoryOf(cl, j, "kill").empty()) << after.DebugString();
  EXPECT_TRUE(HistoryOf(cl, j, "requeue").empty()) << after.DebugString();
}

// An agent out of reach past --agent-grace-s as well is declared down, not
// before: its job is placed again elsewhere.
TEST_F(DaemonTest, AnAgentOutOfReachPastItsGraceIsDeclaredDown) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.agent_timeout_s = 0.3;
  o.agent_grace_s = 1;
  Client& cl = StartDaemon(o);
  FakeAgent node("node", 1, Mode::kOk);
  ASSERT_TRUE(node.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return node.start_calls(j) == 1; }));
  FakeAgent spare("spare", 1, Mode::kOk);
  ASSERT_TRUE(spare.Register(server_.address()).ok());
  int64_t until_us = 0;
  ASSERT_TRUE(WaitFor([&] {
    (void)spare.Report();
    until_us = cl.Servers().servers(0).silent_until_us();
    return until_us > 0;
  }));
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  EXPECT_EQ(spare.starts_begun(j), 0);  // kept where it ran
  ASSERT_TRUE(WaitFor(
      [&] {
        (void)spare.Report();
        return spare.start_calls(j) == 1;
      },
      20))
      << cl.Get(j).DebugString();
  EXPECT_GE(WorldWallMicros(), until_us);
  const rpc::ServerInfo down = cl.Servers().servers(0);
  EXPECT_FALSE(down.up());
  EXPECT_EQ(down.silent_since_us(), 0);
  EXPECT_FALSE(HistoryOf(cl, j, "requeue").empty()) << cl.Get(j).DebugString();
}

// Agents out of reach after 0.3 s and declared down 1 s later, and a job
// running on one of them: what becomes of its copy there when the agent
// comes back.
class CutOffCopyTest : public DaemonTest {
 protected:
  // A daemon (fifo) with `node` registered and job "long" (one GPU,
  // spec_) started there, at mini-batch 500 in node's report: its id; -1,
  // with a test failure, when it does not start.
  int64_t StartLongJob(FakeAgent& node) {
    SchedulerOptions o = Options();
    o.policy = "fifo";
    o.agent_timeout_s = 0.3;
    o.agent_grace_s = 1;
    Client& cl = StartDaemon(o);
    spec_.set_name("long");
    spec_.set_command("python3 train.py");
    spec_.set_gpus(1);
    int64_t j = -1;
    if (!node.Register(server_.address()).ok() || !cl.Submit(spec_, &j).ok() ||
        !WaitFor([&] { return node.start_calls(j) == 1; })) {
      ADD_FAILURE() << "job 'long' did not start on " << node.name();
      return -1;
    }
    node.SetProgress(j, 500, 5.0);
    if (!node.Report().ok()) {
      ADD_FAILURE() << "Report";
      return -1;
    }
    return j;
  }
  rpc::JobSpec spec_;
};

// An agent out of reach past its timeout and grace comes back with its
// copy of a job that was meanwhile placed again elsewhere, from the
// beginning. The copy, suspended by its placement lease and further on,
// saves a checkpoint there; the run elsewhere is stopped, and the job goes
// on from the checkpoint, moved to the GPUs it holds. A copy behind the
// run is killed as a stray.
TEST_F(CutOffCopyTest, AFurtherOnCopyIsWhatTheJobGoesOnFrom) {
  FakeAgent node("node", 1, Mode::kOk);
  const int64_t j = StartLongJob(node);
  ASSERT_GT(j, 0);
  Client& cl = *client_;
  const rpc::JobSpec& spec = spec_;
  FakeAgent spare("spare", 1, Mode::kOk);
  ASSERT_TRUE(spare.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        (void)spare.Report();
        return spare.start_calls(j) == 1;
      },
      20))
      << cl.Get(j).DebugString();
  spare.SetProgress(j, 30, 5.0);
  ASSERT_TRUE(spare.Report().ok());
  server_->Sync();
  ASSERT_EQ(cl.Get(j).progress().minibatches(), 30);
  // Back, its copy suspended (its placement lease ran out) at 500.
  node.PlantWithSpec(j, spec, cl.Get(j).submitted_us(), {0}, rpc::SUSPENDED);
  ASSERT_TRUE(node.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor([&] {
    // Started from the checkpoint: its first mini-batch after it.
    if (spare.resume_local_starts(j) == 1) spare.SetProgress(j, 501, 5.0);
    (void)spare.Report();
    (void)node.Report();
    return HasEntry(cl.Get(j), "restart", true);
  })) << cl.Get(j).DebugString();
  const rpc::JobInfo info = cl.Get(j);
  bool said = false;
  for (const rpc::HistoryEntry& h : info.history()) {
    if (h.action() == "reconcile") {
      said = true;
      EXPECT_EQ(h.detail(),
                "its copy on node, cut off while the job was requeued, "
                "saved a checkpoint at mini-batch 500, further on than its "
                "run on spare (at mini-batch 30), which is stopped: the job "
                "goes on from the checkpoint");
    }
  }
  EXPECT_TRUE(said) << info.DebugString();
  EXPECT_FALSE(HasEntry(info, "kill", true)) << info.DebugString();
  EXPECT_EQ(node.procs().count(j), 0u);  // it saved and left
  const int dropped = node.kills(j);     // its checkpoint, once moved
  EXPECT_LE(dropped, 1);
  EXPECT_EQ(spare.kills(j), 1);  // the run from the beginning
  EXPECT_EQ(spare.received_from(j), std::vector<std::string>{node.address()});
  EXPECT_EQ(spare.resume_local_starts(j), 1);
  EXPECT_EQ(info.state(), rpc::RUNNING);
  EXPECT_EQ(info.server(), "spare");
  EXPECT_GE(info.progress().minibatches(), 500);

  // Cut off again, back behind the run there: a stray, killed.
  spare.SetProgress(j, 600, 5.0);
  ASSERT_TRUE(spare.Report().ok());
  server_->Sync();
  node.PlantWithSpec(j, spec, cl.Get(j).submitted_us(), {0}, rpc::SUSPENDED);
  ASSERT_TRUE(node.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor([&] {
    (void)spare.Report();
    (void)node.Report();
    return node.kills(j) == dropped + 1;
  })) << cl.Get(j).DebugString();
  EXPECT_EQ(spare.kills(j), 1);
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  EXPECT_EQ(cl.Get(j).server(), "spare");
  EXPECT_TRUE(HasEntry(cl.Get(j), "kill", true)) << cl.Get(j).DebugString();
}

// The same for a job still queued when its agent is back, which cannot
// keep the copy where it runs (the job is held): the copy saves a
// checkpoint there, and the job, released, starts from it.
TEST_F(CutOffCopyTest, AQueuedJobsCopyIsWhatItStartsFrom) {
  FakeAgent node("node", 1, Mode::kOk);
  const int64_t j = StartLongJob(node);
  ASSERT_GT(j, 0);
  Client& cl = *client_;
  const rpc::JobSpec& spec = spec_;
  // Declared down, with no other server: queued again.
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::QUEUED; }, 20))
      << cl.Get(j).DebugString();
  ASSERT_TRUE(cl.Suspend(j).ok());  // held
  server_->Sync();
  node.PlantWithSpec(j, spec, cl.Get(j).submitted_us(), {0}, rpc::SUSPENDED);
  ASSERT_TRUE(node.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor([&] {
    (void)node.Report();
    return HasEntry(cl.Get(j), "reconcile", true);
  })) << cl.Get(j).DebugString();
  const rpc::JobInfo saved = cl.Get(j);
  for (const rpc::HistoryEntry& h : saved.history()) {
    if (h.action() == "reconcile") {
      EXPECT_EQ(h.detail(),
                "its copy on node, cut off while the job was requeued, saved "
                "a checkpoint at mini-batch 500: its next start goes on from "
                "it");
    }
  }
  EXPECT_EQ(node.procs().count(j), 0u);  // it saved and left
  EXPECT_EQ(node.kills(j), 0);
  EXPECT_EQ(cl.State(j), rpc::QUEUED);
  ASSERT_TRUE(cl.Resume(j).ok());
  ASSERT_TRUE(WaitFor([&] {
    // Started from the checkpoint: its first mini-batch after it.
    if (node.resume_local_starts(j) == 1) node.SetProgress(j, 501, 5.0);
    (void)node.Report();
    return cl.State(j) == rpc::RUNNING && HasEntry(cl.Get(j), "start", true) &&
           cl.Get(j).progress().minibatches() > 500;
  })) << cl.Get(j).DebugString();
  EXPECT_EQ(node.resume_local_starts(j), 1);
  EXPECT_EQ(node.start_calls(j), 2);  // the first run's, and this one
}

// A job stored but never handed to the core (the daemon died in between)
// arrives at the next start, queued, submitted when its row says.
TEST_F(DaemonTest, AJobStoredButNotArrivedArrivesWithItsSubmissionTime) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  {
    Client& cl = StartDaemon(o);
    EXPECT_EQ(cl.MustSubmit(1), 1);
    server_.reset();
  }
  const int64_t when =  // an hour ago
      WorldWallMicros() - 3'600'000'000;
  {
    auto store = Store::Open(o.db_path, false);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto id = (*store)->InsertJob(
        R"({"name":"late","command":"python3 train.py","gpus":1})", when);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_EQ(*id, 2);
  }
  Client& cl = StartDaemon(o);
  server_->Sync();
  const rpc::JobInfo late = cl.Get(2);
  EXPECT_EQ(late.state(), rpc::QUEUED);
  EXPECT_EQ(late.spec().name(), "late");
  EXPECT_EQ(late.submitted_us(), when);
}

// Leave from an agent the daemon does not know is refused, naming it.
TEST_F(DaemonTest, LeaveFromAnUnknownAgentIsRefused) {
  StartDaemon(Options());
  auto stub = SchedulerStubFor(server_.address());
  rpc::LeaveRequest r;
  r.set_name("stranger");
  rpc::LeaveReply rep;
  grpc::ClientContext ctx;
  const grpc::Status s = stub->Leave(&ctx, r, &rep);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(),
            "field 'name': agent 'stranger' is not registered (new, timed "
            "out, or the scheduler restarted)");
}

// A server keeps its GPUs: an agent registering again under its name with
// another number is refused with both numbers, and the server is as it was.
TEST_F(DaemonTest, AnAgentBackWithOtherGpusIsRefused) {
  Client& cl = StartDaemon(Options());
  FakeAgent first("node", 1, Mode::kOk);
  ASSERT_TRUE(first.Register(server_.address()).ok());
  FakeAgent bigger("node", 2, Mode::kOk);
  const grpc::Status s = bigger.Register(server_.address());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(),
            "agent 'node' registered before with 1 GPU, now 2; a server's "
            "GPUs cannot change (use another name)");
  const rpc::ListServersReply servers = cl.Servers();
  ASSERT_EQ(servers.servers_size(), 1);
  EXPECT_EQ(servers.servers(0).gpus_size(), 1);
  EXPECT_TRUE(servers.servers(0).up());
}

// An exit the daemon cannot log (its store refuses the write) is not
// answered: the agent keeps it, reports it again, and the job ends once,
// with one exit line: a success, and a failure (whose line, not written
// the first time, is not taken for a repeat of itself).
TEST_F(DaemonTest, AnExitThatCannotBeLoggedIsReportedAgainAndCountsOnce) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.tick_ms = 600'000;  // no Tick to log meanwhile
  FaultyStore* faulty = nullptr;
  o.store_wrapper = [&](std::unique_ptr<Store> inner) {
    auto f = std::make_unique<FaultyStore>(std::move(inner));
    faulty = f.get();
    return f;
  };
  Client& cl = StartDaemon(o);
  ASSERT_NE(faulty, nullptr);
  FakeAgent agent("node", 1, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  for (const int code : {0, 3}) {
    SCOPED_TRACE(code);
    const int64_t j = cl.MustSubmit(1);
    ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::RUNNING; }));
    server_->Sync();

    // The store refuses to log events and to write rows.
    const core::Status busy(core::StatusCode::kIo, "database is locked");
    faulty->Fail(FaultyStore::Op::kAppendEvents, busy);
    faulty->Fail(FaultyStore::Op::kWrite, busy);
    agent.Exit(j, code);
    const grpc::Status refused = agent.Report();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::ABORTED);
    EXPECT_NE(refused.error_message().find("report it again"),
              std::string::npos)
        << refused.error_message();
    EXPECT_EQ(agent.reported_exits()[j], 0);  // kept
    EXPECT_EQ(cl.State(j), rpc::RUNNING);

    EXPECT_GE(faulty->failures(FaultyStore::Op::kAppendEvents), 1);
    faulty->Fail(FaultyStore::Op::kAppendEvents, core::Status::Ok());
    faulty->Fail(FaultyStore::Op::kWrite, core::Status::Ok());
    ASSERT_TRUE(agent.Report().ok());
    EXPECT_EQ(agent.reported_exits()[j], 1);
    const rpc::JobState end = code == 0 ? rpc::FINISHED : rpc::FAILED;
    ASSERT_TRUE(WaitFor([&] { return cl.State(j) == end; }));
    int exits = 0;
    const rpc::JobInfo info = cl.Get(j);
    for (const auto& h : info.history()) {
      if (h.action() != "exit") continue;
      ++exits;
      EXPECT_EQ(h.detail().find("the same way"), std::string::npos)
          << "the exit's own line, not a count: " << h.detail();
    }
    EXPECT_EQ(exits, 1) << info.DebugString();
  }
}

// FIFO, two agents that checkpoint but cannot receive (a move fails once
// the job has checkpointed), and a restartable job running on one of them
// (src_).
class FailingMoveTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    SchedulerOptions o = Options();
    o.policy = "fifo";
    cl_ = &StartDaemon(o);
    a_ = std::make_unique<FakeAgent>("node-a", 1, Mode::kFailReceive);
    b_ = std::make_unique<FakeAgent>("node-b", 1, Mode::kFailReceive);
    ASSERT_TRUE(a_->Register(server_.address()).ok());
    ASSERT_TRUE(b_->Register(server_.address()).ok());
    rpc::JobSpec spec;
    spec.set_name("own-checkpoints");
    spec.set_command("python3 train.py");
    spec.set_gpus(1);
    spec.set_restartable(true);
    ASSERT_TRUE(cl_->Submit(spec, &j_).ok());
    // Running, and its start concluded (a move is refused while it is
    // under way).
    ASSERT_TRUE(WaitFor([&] {
      const rpc::JobInfo info = cl_->Get(j_);
      const bool started = HasEntry(info, "start", true);
      return info.state() == rpc::RUNNING && started &&
             (a_->procs().count(j_) + b_->procs().count(j_)) == 1;
    }));
    src_ = a_->procs().count(j_) ? a_.get() : b_.get();
    dst_ = src_ == a_.get() ? b_.get() : a_.get();
  }

  // Waits until the daemon has the job in state `s` and its one process,
  // at the source, is in that state too.
  bool SettlesAtSource(rpc::JobState s) {
    return WaitFor([&] {
      const auto procs = src_->procs();
      return cl_->State(j_) == s && procs.count(j_) == 1 &&
             procs.at(j_).state == s;
    });
  }

  Client* cl_ = nullptr;
  std::unique_ptr<FakeAgent> a_, b_;
  FakeAgent* src_ = nullptr;
  FakeAgent* dst_ = nullptr;
  int64_t j_ = -1;
};

// A move that fails once the job has checkpointed (here the transfer) leaves
// the checkpoint at the source; the core takes the job back to its GPUs
// there, running, so the daemon restarts it there from that checkpoint
// rather than leave it running nowhere.
TEST_F(FailingMoveTest,
       AMoveThatFailsAfterTheCheckpointRestartsTheJobAtItsSource) {
  Client& cl = *cl_;
  FakeAgent& src = *src_;
  FakeAgent& dst = *dst_;
  const int64_t j = j_;
  {
    const grpc::Status m = cl.Migrate(j, dst.name());
    ASSERT_TRUE(m.ok()) << m.error_message();
  }
  auto entries = [&](const std::string& action) {
    std::vector<rpc::HistoryEntry> out;
    const rpc::JobInfo now = cl.Get(j);
    for (const auto& h : now.history()) {
      if (h.action() == action) out.push_back(h);
    }
    return out;
  };
  ASSERT_TRUE(WaitFor([&] { return !entries("restart").empty(); }))
      << cl.Get(j).DebugString();
  ASSERT_FALSE(entries("migrate").empty());
  EXPECT_FALSE(entries("migrate").back().ok());
  EXPECT_NE(entries("migrate").back().detail().find("the source went away"),
            std::string::npos);
  EXPECT_TRUE(entries("restart").back().ok()) << cl.Get(j).DebugString();
  EXPECT_EQ(src.resume_local_starts(j), 1);
  EXPECT_EQ(src.procs().count(j), 1u);
  EXPECT_EQ(dst.procs().count(j), 0u);
  const rpc::JobInfo info = cl.Get(j);
  EXPECT_EQ(info.state(), rpc::RUNNING);
  EXPECT_EQ(info.server(), src.name());
  // Its process there is the one the daemon follows: its exit ends it.
  ASSERT_TRUE(FinishesOn(cl, src, j));
}

// A move whose checkpoint is not at the source when the destination asks
// for it (lost there) leaves nothing of the job anywhere: the move fails
// saying so, and the job starts again from the beginning, not "from the
// checkpoint at the source" (which would fail at every try).
TEST_F(DaemonTest, AMoveWhoseCheckpointIsGoneStartsTheJobAgain) {
  FakeAgent a("node-a", 1, Mode::kOk);
  FakeAgent b("node-b", 1, Mode::kOk);
  Client& cl = StartFifoDaemonWith(a, &b);
  rpc::JobSpec spec;
  spec.set_name("own-checkpoints");
  spec.set_command("python3 train.py");
  spec.set_gpus(1);
  spec.set_restartable(true);
  int64_t j = -1;
  ASSERT_TRUE(cl.Submit(spec, &j).ok());
  ASSERT_TRUE(WaitFor([&] {
    return cl.State(j) == rpc::RUNNING && HasEntry(cl.Get(j), "start", true);
  }));
  FakeAgent& src = a.procs().count(j) ? a : b;
  FakeAgent& dst = &src == &a ? b : a;
  dst.ReceiveFindsNothing(true);
  ASSERT_TRUE(cl.Migrate(j, dst.name()).ok());
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(j), "restart", true); }))
      << cl.Get(j).DebugString();
  const rpc::JobInfo info = cl.Get(j);
  ASSERT_TRUE(HasEntry(info, "migrate", false)) << info.DebugString();
  for (const rpc::HistoryEntry& h : info.history()) {
    if (h.action() == "migrate" && !h.ok()) {
      EXPECT_NE(h.detail().find("no checkpoint of job " + std::to_string(j) +
                                " on the source (code 5); no checkpoint of "
                                "it is left"),
                std::string::npos)
          << h.detail();
    }
    if (h.action() == "restart") {
      EXPECT_EQ(h.detail(),
                "relaunched a lost process (the move failed, and no "
                "checkpoint of it is left)");
    }
  }
  EXPECT_EQ(info.state(), rpc::RUNNING);
  EXPECT_EQ(src.resume_local_starts(j), 0) << "no checkpoint to resume from";
  EXPECT_EQ(src.procs().count(j) + dst.procs().count(j), 1u);
  FakeAgent& now = src.procs().count(j) ? src : dst;
  ASSERT_TRUE(FinishesOn(cl, now, j));
}

// A move that fails before the job checkpointed (its save failed) leaves
// its process running where it was, and the daemon still follows that
// process: a suspend stops it there, and its exit ends the job.
TEST_F(FailingMoveTest, AMoveThatFailsBeforeTheCheckpointLeavesTheJobAsItWas) {
  Client& cl = *cl_;
  FakeAgent& src = *src_;
  FakeAgent& dst = *dst_;
  const int64_t j = j_;
  src.FailCheckpoints(true);
  ASSERT_TRUE(cl.Migrate(j, dst.name()).ok());
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(j), "migrate", false); }))
      << cl.Get(j).DebugString();
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  EXPECT_EQ(cl.Get(j).server(), src.name());
  EXPECT_EQ(src.procs().count(j), 1u);
  ASSERT_TRUE(cl.Suspend(j).ok());
  ASSERT_TRUE(SettlesAtSource(rpc::SUSPENDED)) << cl.Get(j).DebugString();
  ASSERT_TRUE(cl.Resume(j).ok());
  ASSERT_TRUE(SettlesAtSource(rpc::RUNNING)) << cl.Get(j).DebugString();
  EXPECT_EQ(src.start_calls(j), 1) << "restarted instead of resumed";
  ASSERT_TRUE(FinishesOn(cl, src, j));
}

// A suspend that comes while that restart is under way waits for it: the
// restarted process is the one suspended, not left running on GPUs the
// core believes free.
TEST_F(FailingMoveTest,
       ASuspendDuringTheRestartAtTheSourceStopsTheRestartedJob) {
  Client& cl = *cl_;
  FakeAgent& src = *src_;
  FakeAgent& dst = *dst_;
  const int64_t j = j_;
  src.HoldResumeLocal(true);
  ASSERT_TRUE(cl.Migrate(j, dst.name()).ok());
  ASSERT_TRUE(WaitFor([&] { return src.ResumeLocalHeld() == 1; }))
      << cl.Get(j).DebugString();
  ASSERT_TRUE(cl.Suspend(j).ok());
  src.HoldResumeLocal(false);
  ASSERT_TRUE(SettlesAtSource(rpc::SUSPENDED)) << cl.Get(j).DebugString();
  EXPECT_EQ(src.resume_local_starts(j), 1);
  // Resumed, it runs there again.
  ASSERT_TRUE(cl.Resume(j).ok());
  ASSERT_TRUE(SettlesAtSource(rpc::RUNNING)) << cl.Get(j).DebugString();
}

// A policy whose reclaim kills jobs is the simulator's baseline only; the
// daemon refuses it by name and starts nothing.
TEST_F(DaemonTest, RefusesASimulatorOnlyPolicy) {
  SchedulerOptions o = Options();
  o.policy = "drf-reclaim";
  auto s = SchedulerServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("policy 'drf-reclaim'"),
            std::string::npos)
      << s.status().ToString();
  o.policy = "gandiva-fair";
  StartDaemon(o);
  EXPECT_EQ(server_->policy(), "gandiva-fair");
}

// Jobs name one of the daemon's queues (or none: the shared queue); a
// queue it does not have is refused by field, and nothing is stored. The
// queues are kept with the policy options: a restart with others applies
// them as a change (refused when it would strand live jobs), one without
// takes the stored ones.
TEST_F(DaemonTest, JobsNameTheDaemonsQueues) {
  SchedulerOptions o = Options();
  o.policy = "gandiva-fair";
  o.queues = core::FlatQueues({{"a", 2}, {"b", 2}});
  Client& c = StartDaemon(o);
  rpc::JobSpec spec;
  spec.set_name("j");
  spec.set_command("python3 train.py");
  spec.set_gpus(1);
  spec.set_queue("a");
  int64_t a = 0;
  ASSERT_TRUE(c.Submit(spec, &a).ok());
  EXPECT_EQ(c.Get(a).spec().queue(), "a");
  spec.set_queue("");
  ASSERT_TRUE(c.Submit(spec).ok()) << "no queue: the shared one";
  spec.set_queue("c");
  grpc::Status refused = c.Submit(spec);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find(
                "field 'queue': no queue 'c' (the daemon's queues: a, b)"),
            std::string::npos)
      << refused.error_message();
  rpc::JobSpec good = spec;
  good.set_queue("b");
  refused = c.SubmitJobs({good, spec});
  EXPECT_NE(refused.error_message().find("spec 2 of 2: field 'queue'"),
            std::string::npos)
      << refused.error_message();
  EXPECT_EQ(c.List(true).size(), 2u) << "nothing of a refused request";

  // Other queues at a restart are a change, as `gandiva queues apply`
  // makes one: taken, and kept; refused, naming the queue and its jobs,
  // when a queue with live jobs would go.
  server_.reset();
  o.queues = core::FlatQueues({{"b", 1}});
  auto other = SchedulerServer::Start(o);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find(
                "--queues: queue 'a' holds live jobs (" + std::to_string(a) +
                ") and would be removed"),
            std::string::npos)
      << other.status().ToString();
  o.queues = core::FlatQueues({{"a", 3}, {"b", 1}});
  {
    // The daemon's log says once what changed, and why.
    o.verbose = true;
    ::testing::internal::CaptureStderr();
    Client& changed = StartDaemon(o);
    const std::string log = ::testing::internal::GetCapturedStderr();
    o.verbose = false;
    const std::string line =
        "queues changed by --queues, which differs from the stored queues: "
        "queue 'a': quota 2 -> 3";
    const size_t at = log.find(line);
    EXPECT_NE(at, std::string::npos) << log;
    EXPECT_EQ(log.find("quota 2 -> 3", at + line.size()), std::string::npos)
        << "logged twice: " << log;
    const rpc::ListQueuesReply q = changed.Queues();
    ASSERT_EQ(q.queues_size(), 3);
    EXPECT_EQ(q.queues(0).quota(), 3);
    EXPECT_EQ(q.queues(1).quota(), 1);
  }
  server_.reset();
  o.queues.reset();
  Client& again = StartDaemon(o);
  spec.set_queue("b");
  EXPECT_TRUE(again.Submit(spec).ok()) << "the stored queues";
  EXPECT_EQ(again.Queues().queues(0).quota(), 3);

  // A store made before queues had trees holds quotas by name; it is read
  // as flat queues, and the same queues given again are no change.
  server_.reset();
  {
    auto store = Store::Open(o.db_path, false);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto meta = (*store)->GetMeta("policy");
    ASSERT_TRUE(meta.ok() && meta->has_value());
    std::string policy = **meta;
    const std::string tree =
        R"([{"name":"a","quota":3},{"name":"b","quota":1}])";
    const size_t at = policy.find(tree);
    ASSERT_NE(at, std::string::npos) << policy;
    policy.replace(at, tree.size(), R"({"a":3,"b":1})");
    ASSERT_TRUE((*store)->SetMeta("policy", policy).ok());
  }
  o.queues = core::FlatQueues({{"a", 3}, {"b", 1}});
  Client& old = StartDaemon(o);
  spec.set_queue("a");
  EXPECT_TRUE(old.Submit(spec).ok());
  spec.set_queue("c");
  EXPECT_FALSE(old.Submit(spec).ok());
}

// `gandiva queues apply`: new queues while jobs run. A dry run only says
// what would change. Applied, they are acted on at once (a queue given a
// quota gets it back from the borrowers by suspends) and kept: a restart
// replays the log from before the change under the queues before it, and
// takes the new ones. A file that is no tree is refused naming the queue
// and field, and a change that would strand live jobs naming them.
TEST_F(DaemonTest, QueuesAppliedLiveTakeEffectAtOnceAndAreKept) {
  SchedulerOptions o = Options();
  o.policy = "gandiva-fair";
  o.queues = core::FlatQueues({{"a", 0}, {"b", 4}});
  Client& c = StartDaemon(o);
  FakeAgent agent("node", 4, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  rpc::JobSpec spec;
  spec.set_command("python3 train.py");
  spec.set_gpus(1);
  spec.set_queue("b");
  std::vector<int64_t> b, a;
  for (int i = 0; i < 4; ++i) {
    int64_t id = 0;
    ASSERT_TRUE(c.Submit(spec, &id).ok());
    b.push_back(id);
  }
  ASSERT_TRUE(WaitFor([&] { return agent.procs().size() == 4; }));
  spec.set_queue("a");
  for (int i = 0; i < 2; ++i) {
    int64_t id = 0;
    ASSERT_TRUE(c.Submit(spec, &id).ok());
    a.push_back(id);
  }
  server_->Sync();
  EXPECT_EQ(c.State(a[0]), rpc::QUEUED) << "a has no quota yet";

  const std::string halves =
      "queues:\n  - name: a\n    quota: 2\n  - name: b\n    quota: 2\n"
      "    members: [ann]\n";
  rpc::ApplyQueuesReply rep;
  ASSERT_TRUE(c.ApplyQueues(halves, /*dry_run=*/true, &rep).ok());
  EXPECT_FALSE(rep.applied());
  EXPECT_EQ(
      std::vector<std::string>(rep.changes().begin(), rep.changes().end()),
      (std::vector<std::string>{"queue 'a': quota 0 -> 2",
                                "queue 'b': quota 4 -> 2",
                                "queue 'b': members anyone -> ann"}));
  EXPECT_EQ(c.Queues().queues(0).quota(), 0) << "a dry run changes nothing";
  EXPECT_EQ(agent.suspends(), 0);

  rep.Clear();
  ASSERT_TRUE(c.ApplyQueues(halves, false, &rep).ok());
  EXPECT_TRUE(rep.applied());
  ASSERT_TRUE(WaitFor([&] {
    return c.State(a[0]) == rpc::RUNNING && c.State(a[1]) == rpc::RUNNING;
  })) << "a's quota back at once, no time slice waited";
  EXPECT_EQ(agent.suspends(), 2) << "suspended, not killed";
  int b_running = 0;
  for (int64_t id : b) b_running += c.State(id) == rpc::RUNNING;
  EXPECT_EQ(b_running, 2);
  rpc::ListQueuesReply q = c.Queues();
  ASSERT_EQ(q.queues_size(), 3);
  EXPECT_EQ(q.queues(0).quota(), 2);
  EXPECT_EQ(q.queues(1).quota(), 2);
  EXPECT_EQ(q.queues(1).members_size(), 1);
  rep.Clear();
  ASSERT_TRUE(c.ApplyQueues(halves, false, &rep).ok());
  EXPECT_FALSE(rep.applied()) << "the same queues again: nothing to change";
  EXPECT_EQ(rep.changes_size(), 0);

  grpc::Status refused =
      c.ApplyQueues("queues:\n  - name: a\n    quota: -1\n", false, &rep);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("teams.yaml"), std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("'a'"), std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("quota"), std::string::npos)
      << refused.error_message();
  refused = c.ApplyQueues("queues:\n  - name: a\n    quota: 2\n", false, &rep);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find(
                "queue 'b' holds live jobs (" + std::to_string(b[0]) + ", " +
                std::to_string(b[1]) + ", " + std::to_string(b[2]) + ", " +
                std::to_string(b[3]) + ") and would be removed"),
            std::string::npos)
      << refused.error_message();
  refused = c.ApplyQueues(
      "queues:\n  - name: a\n    quota: 2\n  - name: b\n    quota: 2\n"
      "    queues:\n      - name: b1\n        quota: 1\n",
      false, &rep);
  EXPECT_NE(refused.error_message().find("would have queues under it"),
            std::string::npos)
      << refused.error_message();
  EXPECT_EQ(c.Queues().queues(1).quota(), 2) << "refused: nothing changed";

  // A restart replays the change where it was logged, and keeps it.
  std::map<int64_t, rpc::JobState> before;
  for (int64_t id : a) before[id] = c.State(id);
  for (int64_t id : b) before[id] = c.State(id);
  server_.reset();
  o.queues.reset();
  Client& again = StartDaemon(o);
  q = again.Queues();
  ASSERT_EQ(q.queues_size(), 3);
  EXPECT_EQ(q.queues(0).quota(), 2);
  EXPECT_EQ(q.queues(1).quota(), 2);
  for (const auto& [id, state] : before) {
    EXPECT_EQ(again.State(id), state) << "job " << id;
  }
  spec.set_queue("b");
  spec.set_owner("bob");
  EXPECT_TRUE(again.Submit(spec).ok()) << "an open daemon: an admin";
}

// ListQueues: each queue's quota, its fair share of the GPUs up for what
// its jobs ask, and its jobs running and waiting; the shared queue last.
TEST_F(DaemonTest, QueuesShowTheirQuotaShareAndUse) {
  SchedulerOptions o = Options();
  o.policy = "gandiva-fair";
  o.queues = core::FlatQueues({{"a", 2}, {"b", 2}});
  Client& c = StartDaemon(o);
  FakeAgent agent("node", 4, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  rpc::JobSpec spec;
  spec.set_command("python3 train.py");
  spec.set_gpus(1);
  spec.set_queue("b");
  std::vector<int64_t> b;
  for (int i = 0; i < 3; ++i) {
    int64_t id = 0;
    ASSERT_TRUE(c.Submit(spec, &id).ok());
    b.push_back(id);
  }
  spec.set_queue("a");
  ASSERT_TRUE(c.Submit(spec).ok());
  spec.set_queue("");
  spec.set_gpus(2);
  ASSERT_TRUE(c.Submit(spec).ok());
  ASSERT_TRUE(WaitFor([&] { return agent.procs().size() == 4; }));
  server_->Sync();
  const rpc::ListQueuesReply q = c.Queues();
  ASSERT_EQ(q.queues_size(), 3);
  EXPECT_EQ(q.queues(0).name(), "a");
  EXPECT_EQ(q.queues(1).name(), "b");
  EXPECT_EQ(q.queues(2).name(), "");
  // 4 GPUs: a asks 1 (its share), b asks 3 (2 of quota and the 1 left);
  // the shared queue's 2-GPU job gets what no quota claims: none.
  EXPECT_EQ(q.queues(0).quota(), 2);
  EXPECT_DOUBLE_EQ(q.queues(0).fair_share(), 1);
  EXPECT_EQ(q.queues(0).gpus_asked(), 1);
  EXPECT_DOUBLE_EQ(q.queues(1).fair_share(), 3);
  EXPECT_EQ(q.queues(1).gpus_asked(), 3);
  EXPECT_EQ(q.queues(1).jobs_running(), 3);
  EXPECT_EQ(q.queues(1).gpus_running(), 3);
  EXPECT_EQ(q.queues(0).jobs_running(), 1);
  EXPECT_DOUBLE_EQ(q.queues(2).fair_share(), 0);
  EXPECT_EQ(q.queues(2).gpus_asked(), 2);
  EXPECT_EQ(q.queues(2).jobs_waiting(), 1);
}

// A job is charged its GPUs while it runs, to its queue and owner: in
// GetUsage (gandiva usage), in ListQueues' last 24 hours and in the
// metrics; what was charged outlives a restart.
TEST_F(DaemonTest, UsageIsChargedByQueueAndUserAndKept) {
  SchedulerOptions o = Options();
  o.policy = "gandiva-fair";
  o.queues = core::FlatQueues({{"a", 2}, {"b", 2}});
  Client& c = StartDaemon(o);
  FakeAgent agent("node", 4, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  rpc::JobSpec spec;
  spec.set_command("python3 train.py");
  spec.set_gpus(2);
  spec.set_queue("a");
  spec.set_owner("alice");
  int64_t alices = 0, bobs = 0;
  ASSERT_TRUE(c.Submit(spec, &alices).ok());
  spec.set_gpus(1);
  spec.set_queue("b");
  spec.set_owner("bob");
  ASSERT_TRUE(c.Submit(spec, &bobs).ok());
  ASSERT_TRUE(WaitFor([&] { return agent.procs().size() == 2; }));
  Pass(std::chrono::milliseconds(11'000));  // past kQueueUsageEvery
  ASSERT_TRUE(c.Kill(bobs).ok());
  ASSERT_TRUE(WaitFor([&] { return c.Get(bobs).state() == rpc::KILLED; }));

  const rpc::UsageReply u = c.Usage();
  ASSERT_EQ(u.rows_size(), 2) << u.DebugString();
  EXPECT_EQ(u.rows(0).queue(), "a");
  EXPECT_EQ(u.rows(0).user(), "alice");
  EXPECT_EQ(u.rows(1).queue(), "b");
  EXPECT_EQ(u.rows(1).user(), "bob");
  // Two GPUs and one for the 11 s that passed, and a little more.
  EXPECT_GE(u.rows(0).gpu_seconds(), 2 * 11.0);
  EXPECT_LE(u.rows(0).gpu_seconds(), 2 * 13.0);
  EXPECT_GE(u.rows(1).gpu_seconds(), 11.0);
  EXPECT_LE(u.rows(1).gpu_seconds(), 13.0);
  EXPECT_LT(u.from_us(), u.to_us() - 86'400'000'000);
  EXPECT_EQ(u.from_us() % 3'600'000'000, 0);

  const rpc::ListQueuesReply q = c.Queues();
  ASSERT_EQ(q.queues_size(), 3);
  // Worked out at most every 10 s: as of 10 s in, or later.
  EXPECT_GE(q.queues(0).gpu_seconds_day(), 2 * 9.0);
  EXPECT_LE(q.queues(0).gpu_seconds_day(), u.rows(0).gpu_seconds());
  EXPECT_GE(q.queues(1).gpu_seconds_day(), 9.0);
  EXPECT_LE(q.queues(1).gpu_seconds_day(), u.rows(1).gpu_seconds());
  EXPECT_DOUBLE_EQ(q.queues(2).gpu_seconds_day(), 0);
  const std::string metrics = Metrics();
  EXPECT_NE(
      metrics.find(R"(gandiva_queue_gpus_running{queue="a",parent=""} 2)"),
      std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(
                R"x(gandiva_queue_quota_gpus{queue="(shared)",parent=""} 0)x"),
            std::string::npos);
  EXPECT_NE(metrics.find("gandiva_queue_gpu_seconds_last_day{queue=\"b\""),
            std::string::npos);

  // Bob's job ended: what it used is kept as it was, across a restart.
  server_.reset();
  Client& again = StartDaemon(o);
  const rpc::UsageReply after = again.Usage();
  ASSERT_EQ(after.rows_size(), 2) << after.DebugString();
  EXPECT_DOUBLE_EQ(after.rows(1).gpu_seconds(), u.rows(1).gpu_seconds());
  EXPECT_GE(after.rows(0).gpu_seconds(), u.rows(0).gpu_seconds());

  rpc::UsageRequest bad;
  bad.set_last_s(-1);
  rpc::UsageReply none;
  grpc::ClientContext ctx;
  const grpc::Status refused =
      SchedulerStubFor(server_.address())->GetUsage(&ctx, bad, &none);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("field 'last_s'"), std::string::npos);
}

TEST_F(DaemonTest, PolicyOptionsMustMatchTheDatabase) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  StartDaemon(o);
  server_.reset();
  o.policy = "gandiva";
  auto s = SchedulerServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("--policy"), std::string::npos);
  o.policy.reset();  // unset: the stored one
  o.start_attempts = 7;
  s = SchedulerServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(
      s.status().message().find("--start-attempts 7 (the database has 5)"),
      std::string::npos)
      << s.status().ToString();
  o.start_attempts.reset();
  // gandiva-fair's half-life: stored like the others (a database from
  // before it has the default, 3600 s); checked when given.
  o.share_half_life_s = 0;
  s = SchedulerServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--share-half-life-s: must be a "
                                      "positive number of seconds"),
            std::string::npos)
      << s.status().ToString();
  o.share_half_life_s = 600;
  s = SchedulerServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(
                "--share-half-life-s 600000000 (the database has 3600000000)"),
            std::string::npos)
      << s.status().ToString();
  o.share_half_life_s = 3600;
  auto again = SchedulerServer::Start(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->policy(), "fifo");
}

// A database from before the start-retry options has their defaults.
TEST_F(DaemonTest, ADatabaseWithoutStartRetryOptionsHasTheDefaults) {
  {
    auto store = Store::Open((dir_ / "gandiva.db").string(), false);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)
                    ->SetMeta("policy",
                              R"({"policy":"fifo","quantum_us":60000000,)"
                              R"("max_height":4})")
                    .ok());
  }
  SchedulerOptions o = Options();
  o.start_retry_s.reset();
  o.start_attempts = 6;
  auto s = SchedulerServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(
      s.status().message().find("--start-attempts 6 (the database has 5)"),
      std::string::npos)
      << s.status().ToString();
  o.start_attempts = 5;
  o.start_retry_s = 10;
  auto same = SchedulerServer::Start(o);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ((*same)->policy(), "fifo");
}

// The real binary as a child process, killed with SIGKILL and restarted on
// the same database.
class Daemon {
 public:
  Daemon(const fs::path& dir, const std::vector<std::string>& extra) {
    addr_file_ = dir / "addr";
    fs::remove(addr_file_);
    std::vector<std::string> args = {GANDIVA_SCHEDULER_BIN,
                                     "--listen=127.0.0.1:0",
                                     "--address-file=" + addr_file_.string(),
                                     "--db=" + (dir / "gandiva.db").string(),
                                     "--tick-ms=50",
                                     "--agent-timeout-s=600"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Daemon() { Kill(); }
  // The address, once the daemon serves.
  std::string Address() {
    std::string addr;
    WaitFor([&] {
      std::ifstream f(addr_file_);
      return static_cast<bool>(f >> addr);
    });
    return addr;
  }
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  fs::path addr_file_;
};

// SIGKILL while jobs time-slice, changes while the daemon is down, a new
// daemon on the database: every job finishes exactly once. `extra` goes to
// both daemons (the event log compaction).
class CrashRecoveryTest : public DaemonTest {
 protected:
  CrashRecoveryTest() { UseRealWorld(); }
  void Run(const std::vector<std::string>& extra);
};

TEST_F(CrashRecoveryTest, FinishesEveryJobExactlyOnce) {
  Run({"--snapshot-every=0"});  // every event replayed
}

// The log compacted every 3 events: the second daemon restores a snapshot
// taken with actions under way, and replays the few events after it.
TEST_F(CrashRecoveryTest, FromASnapshotFinishesEveryJobExactlyOnce) {
  Run({"--snapshot-every=3"});
  auto store = Store::Open((dir_ / "gandiva.db").string(), false);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto snap = (*store)->LoadSnapshot();
  ASSERT_TRUE(snap.ok() && snap->has_value());
  EXPECT_GT((*snap)->seq, 20);
  EXPECT_LT(*(*store)->EventCount(), 20);
}

void CrashRecoveryTest::Run(const std::vector<std::string>& extra) {
  std::vector<std::string> first = {"--policy=gandiva", "--quantum-s=0.3"};
  first.insert(first.end(), extra.begin(), extra.end());
  auto d1 = std::make_unique<Daemon>(dir_, first);
  const std::string a1 = d1->Address();
  ASSERT_FALSE(a1.empty());
  Client c1(a1);
  FakeAgent agent("node", 2, Mode::kOk);
  ASSERT_TRUE(agent.Register(a1).ok());
  std::vector<int64_t> jobs;
  for (int i = 0; i < 5; ++i) jobs.push_back(c1.MustSubmit(1));
  // Time-slicing under way: both GPUs busy, some job suspended.
  ASSERT_TRUE(WaitFor([&] {
    int running = 0;
    for (const auto& [id, p] : agent.procs())
      running += p.state == rpc::RUNNING;
    return running == 2 && agent.suspends() >= 1;
  }));
  d1->Kill();  // SIGKILL: no clean shutdown
  d1.reset();

  // While the daemon is down: one job exits (the agent keeps the exit), and
  // the node loses another without an exit.
  int64_t exited = -1, lost = -1;
  for (const auto& [id, p] : agent.procs()) {
    if (p.state != rpc::RUNNING) continue;
    if (exited < 0) {
      exited = id;
    } else {
      lost = id;
    }
  }
  ASSERT_GT(exited, 0);
  ASSERT_GT(lost, 0);
  agent.Exit(exited, 0);
  agent.Lose(lost);

  Daemon d2(dir_, extra);  // the stored policy options
  const std::string a2 = d2.Address();
  ASSERT_FALSE(a2.empty());
  Client c2(a2);
  // Everything submitted before the crash is there.
  ASSERT_TRUE(WaitFor([&] { return c2.List(true).size() == jobs.size(); }));
  ASSERT_TRUE(agent.Register(a2).ok());
  ASSERT_TRUE(agent.Report().ok());  // delivers the kept exit
  ASSERT_TRUE(WaitFor([&] { return c2.State(exited) == rpc::FINISHED; }));
  // The lost job runs again (relaunched where it was).
  ASSERT_TRUE(WaitFor([&] { return agent.procs().count(lost) == 1; }));
  // A new submission after recovery gets the next id.
  jobs.push_back(c2.MustSubmit(1));
  EXPECT_EQ(jobs.back(), 6);
  ASSERT_TRUE(WaitFor([&] {
    agent.FinishRunning();
    for (int64_t j : jobs) {
      if (c2.State(j) != rpc::FINISHED) return false;
    }
    return true;
  }));
  for (int64_t j : jobs) {
    EXPECT_EQ(agent.reported_exits()[j], 1) << "job " << j;
    int exits = 0;
    const rpc::JobInfo info = c2.Get(j);
    for (const auto& h : info.history()) exits += h.action() == "exit";
    EXPECT_EQ(exits, 1) << "job " << j;
  }
  EXPECT_EQ(agent.duplicate_starts(), 0);
}

// A move that failed before the job checkpointed, replayed after a crash
// (the log says it failed, not how far it got): the process the source's
// agent lists, where the core places the job, is kept as the job's, not
// killed as a stray, and its exit ends the job.
TEST_F(DaemonTest, AFailedMoveReplayedAfterACrashKeepsTheProcessWhereItRuns) {
  UseRealWorld();  // the daemon's binary, killed
  const std::vector<std::string> flags = {"--policy=fifo",
                                          "--snapshot-every=0"};
  auto d1 = std::make_unique<Daemon>(dir_, flags);
  const std::string a1 = d1->Address();
  ASSERT_FALSE(a1.empty());
  Client c1(a1);
  FakeAgent src("node-a", 1, Mode::kOk);
  ASSERT_TRUE(src.Register(a1).ok());
  rpc::JobSpec spec;
  spec.set_name("own-checkpoints");
  spec.set_command("python3 train.py");
  spec.set_gpus(1);
  spec.set_restartable(true);
  int64_t j = -1;
  ASSERT_TRUE(c1.Submit(spec, &j).ok());
  ASSERT_TRUE(WaitFor([&] {
    const rpc::JobInfo info = c1.Get(j);
    return info.state() == rpc::RUNNING && src.procs().count(j) == 1 &&
           HasEntry(info, "start", true);
  }));
  FakeAgent dst("node-b", 1, Mode::kOk);
  ASSERT_TRUE(dst.Register(a1).ok());
  src.FailCheckpoints(true);
  ASSERT_TRUE(c1.Migrate(j, dst.name()).ok());
  ASSERT_TRUE(WaitFor([&] {
    const rpc::JobInfo info = c1.Get(j);
    return HasEntry(info, "migrate", false);
  })) << c1.Get(j).DebugString();
  d1->Kill();  // SIGKILL: the failure is in the log, nothing more
  d1.reset();

  Daemon d2(dir_, {"--snapshot-every=0"});
  const std::string a2 = d2.Address();
  ASSERT_FALSE(a2.empty());
  Client c2(a2);
  ASSERT_TRUE(src.Register(a2).ok());
  ASSERT_TRUE(dst.Register(a2).ok());
  ASSERT_TRUE(src.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return HasEntry(c2.Get(j), "reconcile"); }))
      << c2.Get(j).DebugString();
  EXPECT_EQ(src.kills(j), 0);
  EXPECT_EQ(src.procs().count(j), 1u);
  EXPECT_EQ(c2.State(j), rpc::RUNNING);
  ASSERT_TRUE(FinishesOn(c2, src, j));
  EXPECT_EQ(src.start_calls(j), 1);
}

// A job that would span servers with its rank 0 on an agent registered
// with a loopback address, and a part on an agent elsewhere: the start is
// refused with the reason (those ranks could not reach rank 0) rather than
// left hanging in the ranks' rendezvous.
TEST_F(DaemonTest, AGangWhoseLeadIsOnALoopbackAddressIsNotStarted) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  Client& cl = StartDaemon(o);
  FakeAgent far("node-a", 1, Mode::kOk);
  FakeAgent near("node-b", 1, Mode::kOk);
  far.AdvertiseAs("192.0.2.1:7071");  // another host (documentation range)
  // fifo places the job's first GPU (rank 0's) on the last server here.
  ASSERT_TRUE(far.Register(server_.address()).ok());
  ASSERT_TRUE(near.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(2);
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(j), "start", false); }))
      << cl.Get(j).DebugString();
  const rpc::JobInfo info = cl.Get(j);
  std::string detail;
  for (const auto& h : info.history()) {
    if (h.action() == "start" && !h.ok()) detail = h.detail();
  }
  EXPECT_NE(detail.find("loopback address 127.0.0.1"), std::string::npos)
      << detail;
  EXPECT_NE(detail.find("--advertise-host"), std::string::npos) << detail;
  EXPECT_EQ(near.procs().count(j), 0u);
}

// A start that keeps failing is tried again only after a wait that
// doubles, and the job fails at its --start-attempts-th failure in a row,
// each failure in its history with what came of it.
TEST_F(DaemonTest, AStartThatKeepsFailingIsRetriedAfterWaitsThenFailsTheJob) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.start_attempts = 3;
  o.start_retry_s = 0.3;
  Client& cl = StartDaemon(o);
  FakeAgent agent("node-a", 1, Mode::kOk);
  agent.FailStarts(true);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(1);
  std::string why;
  ASSERT_TRUE(WaitFor([&] {
    const rpc::JobInfo info = cl.Get(j);
    why = info.waiting_reason();
    return info.state() == rpc::QUEUED && info.start_retry_us() > 0;
  })) << cl.Get(j).DebugString();
  EXPECT_GE(cl.Get(j).start_failures(), 1);
  EXPECT_NE(why.find(" in a row (on node-a): it waits before it is tried "
                     "again, on another server if one has room"),
            std::string::npos)
      << why;
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::FAILED; }))
      << cl.Get(j).DebugString();
  Pass(std::chrono::milliseconds(1000));
  EXPECT_EQ(agent.start_calls(j), 3) << "tried again after it failed";
  const rpc::JobInfo info = cl.Get(j);
  EXPECT_EQ(info.start_failures(), 3);
  EXPECT_EQ(info.start_retry_us(), 0);
  std::vector<rpc::HistoryEntry> starts;
  for (const auto& h : info.history()) {
    if (h.action() == "start") starts.push_back(h);
  }
  ASSERT_EQ(starts.size(), 3u) << info.DebugString();
  EXPECT_NE(starts[0].detail().find(
                "no GPUs today (code 8); start 1 failed in a row, tried "
                "again in 0.3 s"),
            std::string::npos)
      << starts[0].detail();
  EXPECT_NE(starts[1].detail().find("tried again in 0.6 s"), std::string::npos)
      << starts[1].detail();
  EXPECT_NE(starts[2].detail().find("the job failed: 3 starts failed in a row"),
            std::string::npos)
      << starts[2].detail();
  // Each try came after its wait (bounded below only).
  EXPECT_GE(starts[1].time_us() - starts[0].time_us(), 290'000);
  EXPECT_GE(starts[2].time_us() - starts[1].time_us(), 590'000);
}

// A run that fails with retries left is started again after the backoff,
// its history saying which run failed and when the next comes; a command
// that cannot run (exit 127) is not retried; --default-retries is set in
// a spec that sets none, and a spec's own 0 is kept.
TEST_F(DaemonTest, AFailedRunIsStartedAgainWhileTheJobHasRetries) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.start_retry_s = 0.3;
  o.default_retries = 2;
  Client& cl = StartDaemon(o);
  FakeAgent agent("node-a", 2, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(1, "flaky");
  EXPECT_EQ(cl.Get(j).spec().retries(), 2);
  ASSERT_TRUE(WaitFor([&] { return agent.procs().count(j) == 1; }));
  agent.Exit(j, -9);  // killed from outside (say, the OOM killer)
  (void)agent.Report();
  ASSERT_TRUE(WaitFor([&] {
    return agent.start_calls(j) == 2 && agent.procs().count(j) == 1;
  })) << cl.Get(j).DebugString();
  rpc::JobInfo info = cl.Get(j);
  EXPECT_EQ(info.state(), rpc::RUNNING);
  EXPECT_EQ(info.run_failures(), 1);
  std::vector<std::string> lines;
  for (const auto& h : info.history()) {
    lines.push_back(h.action() + ": " + h.detail());
  }
  const auto has = [&](const std::string& want) {
    return std::find(lines.begin(), lines.end(), want) != lines.end();
  };
  EXPECT_TRUE(has("exit: exit code -9")) << info.DebugString();
  EXPECT_TRUE(
      has("retry: run 1 of 3 failed: it runs again in 0.3 s, from the "
          "beginning"))
      << info.DebugString();
  int64_t exit_us = 0, second_start_us = 0;
  for (const auto& h : info.history()) {
    if (h.action() == "exit") exit_us = h.time_us();
    if (h.action() == "start" && exit_us > 0) second_start_us = h.time_us();
  }
  EXPECT_GE(second_start_us - exit_us, 290'000) << "waited out its backoff";
  agent.Exit(j, 0);
  (void)agent.Report();
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::FINISHED; }));

  const int64_t typo = cl.MustSubmit(1, "typo");
  ASSERT_TRUE(WaitFor([&] { return agent.procs().count(typo) == 1; }));
  agent.Exit(typo, 127);
  (void)agent.Report();
  ASSERT_TRUE(WaitFor([&] { return cl.State(typo) == rpc::FAILED; }));
  Pass(std::chrono::milliseconds(1000));
  EXPECT_EQ(agent.start_calls(typo), 1) << "a command not found is retried";
  info = cl.Get(typo);
  EXPECT_EQ(info.run_failures(), 0);
  EXPECT_EQ(info.history(info.history_size() - 1).detail(),
            "exit code 127 (command not found)");

  rpc::JobSpec once;
  once.set_name("once");
  once.set_command("python3 train.py");
  once.set_gpus(1);
  once.set_retries(0);
  int64_t id = -1;
  ASSERT_TRUE(cl.Submit(once, &id).ok());
  EXPECT_EQ(cl.Get(id).spec().retries(), 0);
  ASSERT_TRUE(WaitFor([&] { return agent.procs().count(id) == 1; }));
  agent.Exit(id, 1);
  (void)agent.Report();
  ASSERT_TRUE(WaitFor([&] { return cl.State(id) == rpc::FAILED; }));
  EXPECT_EQ(agent.start_calls(id), 1);
}

// A run that fails after a periodic checkpoint its agent keeps goes on from
// that checkpoint there (a start from the checkpoint held); a job that fails
// for good has it dropped.
TEST_F(DaemonTest, AFailedRunGoesOnFromThePeriodicCheckpointItsAgentKeeps) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.start_retry_s = 0.2;
  Client& cl = StartDaemon(o);
  FakeAgent agent("node-a", 1, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  rpc::JobSpec spec;
  spec.set_name("periodic");
  spec.set_command("python3 train.py");
  spec.set_gpus(1);
  spec.set_retries(1);
  spec.set_checkpoint_every_minibatches(50);
  int64_t j = -1;
  ASSERT_TRUE(cl.Submit(spec, &j).ok());
  EXPECT_EQ(cl.Get(j).spec().checkpoint_every_minibatches(), 50);
  ASSERT_TRUE(WaitFor([&] { return agent.procs().count(j) == 1; }));
  agent.FailKeepingPeriodic(j, -9, 150);
  (void)agent.Report();
  ASSERT_TRUE(WaitFor([&] {
    return agent.resume_local_starts(j) == 1 && agent.procs().count(j) == 1;
  })) << cl.Get(j).DebugString();
  rpc::JobInfo info = cl.Get(j);
  EXPECT_EQ(info.state(), rpc::RUNNING);
  EXPECT_EQ(info.run_failures(), 1);
  EXPECT_TRUE(HasEntry(info, "exit", false));
  std::vector<std::string> lines;
  for (const auto& h : info.history()) {
    lines.push_back(h.action() + ": " + h.detail());
  }
  const auto has = [&](const std::string& want) {
    return std::find(lines.begin(), lines.end(), want) != lines.end();
  };
  EXPECT_TRUE(
      has("exit: exit code -9; its last periodic checkpoint, at "
          "mini-batch 150, is kept on node-a"))
      << info.DebugString();
  EXPECT_TRUE(
      has("retry: run 1 of 2 failed: it runs again in 0.2 s, from "
          "its checkpoint at mini-batch 150"))
      << info.DebugString();

  // Its last retry taken: it fails, its checkpoint dropped there.
  agent.FailKeepingPeriodic(j, 1, 200);
  (void)agent.Report();
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::FAILED; }))
      << cl.Get(j).DebugString();
  ASSERT_TRUE(WaitFor([&] { return agent.kept().count(j) == 0; }))
      << "the checkpoint of a job that failed for good is kept";
  Pass(std::chrono::milliseconds(500));
  EXPECT_EQ(agent.start_calls(j), 2);
}

// The daemon restarted while a failed run waits for its retry (its log
// replayed: which does not say where the checkpoint is kept), and the
// agent that keeps it registers after the other: the retry still goes on
// from that periodic checkpoint, never from the beginning.
TEST_F(DaemonTest, ARetryAfterARestartGoesOnFromThePeriodicCheckpoint) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.start_retry_s = 1;
  o.snapshot_every_events = 0;  // the restart replays every event
  FakeAgent a("node-a", 1, Mode::kOk);
  FakeAgent b("node-b", 1, Mode::kOk);
  StartDaemon(o);
  ASSERT_TRUE(a.Register(server_.address()).ok());
  ASSERT_TRUE(b.Register(server_.address()).ok());
  rpc::JobSpec spec;
  spec.set_name("periodic");
  spec.set_command("python3 train.py");
  spec.set_gpus(1);
  spec.set_retries(2);
  spec.set_checkpoint_every_minibatches(50);
  int64_t j = -1;
  ASSERT_TRUE(client_->Submit(spec, &j).ok());
  ASSERT_TRUE(
      WaitFor([&] { return a.procs().count(j) + b.procs().count(j) == 1; }));
  FakeAgent& src = a.procs().count(j) ? a : b;
  FakeAgent& dst = &src == &a ? b : a;
  src.FailKeepingPeriodic(j, -9, 150);
  (void)src.Report();
  ASSERT_TRUE(WaitFor([&] { return HasEntry(client_->Get(j), "retry", true); }))
      << client_->Get(j).DebugString();
  server_.reset();
  StartDaemon(o);
  Client& again = *client_;
  // Past the retry's wait, before the checkpoint's agent is back: the job
  // is placed on the other, from the checkpoint (that agent's process
  // serves it to the other).
  ASSERT_TRUE(dst.Register(server_.address()).ok());
  Pass(std::chrono::milliseconds(1500));
  ASSERT_TRUE(src.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor([&] {
    // Started from the checkpoint: its first mini-batch after it.
    for (FakeAgent* f : {&src, &dst}) {
      if (f->resume_local_starts(j) == 1) f->SetProgress(j, 151, 5.0);
      (void)f->Report();
    }
    return again.State(j) == rpc::RUNNING &&
           src.resume_local_starts(j) + dst.resume_local_starts(j) == 1;
  })) << again.Get(j).DebugString();
  // Every start after the first from the checkpoint.
  EXPECT_EQ(src.start_calls(j) + dst.start_calls(j), 2)
      << again.Get(j).DebugString();
  if (dst.resume_local_starts(j) == 1) {
    EXPECT_EQ(dst.received_from(j), std::vector<std::string>{src.address()});
  }
}

// A run tried again from the beginning (no checkpoint) shows neither the
// count nor the metric of the run that failed: until it reports its own,
// it has none.
TEST_F(DaemonTest, ARunFromTheBeginningShowsNoMetricOfTheLastOne) {
  FakeAgent agent("node-a", 1, Mode::kOk);
  Client& cl = StartFifoDaemonWith(agent);
  rpc::JobSpec spec;
  spec.set_name("no-checkpoints");
  spec.set_command("python3 train.py");
  spec.set_gpus(1);
  spec.set_retries(1);
  int64_t j = -1;
  ASSERT_TRUE(cl.Submit(spec, &j).ok());
  ASSERT_TRUE(WaitFor([&] { return agent.procs().count(j) == 1; }));
  agent.SetProgress(j, 300, 5.0);
  agent.SetMetric(j, 0.75, 300);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] {
    const rpc::Progress p = cl.Get(j).progress();
    return p.metric_reports() == 1 && p.minibatches() == 300;
  })) << cl.Get(j).DebugString();
  agent.ForgetProgress(j);
  agent.Exit(j, 1);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] {
    return agent.start_calls(j) == 2 && agent.procs().count(j) == 1;
  })) << cl.Get(j).DebugString();
  rpc::JobInfo info = cl.Get(j);
  EXPECT_EQ(info.state(), rpc::RUNNING);
  EXPECT_EQ(info.progress().metric_reports(), 0) << info.DebugString();
  EXPECT_EQ(info.progress().metric(), 0);
  EXPECT_EQ(info.progress().minibatches(), 0);
  // Its own, once reported.
  agent.SetProgress(j, 20, 5.0);
  agent.SetMetric(j, 2.5, 20);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] {
    const rpc::Progress p = cl.Get(j).progress();
    return p.metric_reports() == 1 && p.metric() == 2.5 &&
           p.minibatches() == 20;
  })) << cl.Get(j).DebugString();
}

// A job id past 2^31 names no job, whatever it would be cut to: an
// operator's migrate, pack, unpack or resize of job 2^32 + j over raw gRPC
// is refused, and job j is left alone.
TEST_F(DaemonTest, AJobIdPastTheRangeNamesNoJobInAnOperatorsRequest) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  Client& cl = StartDaemon(o);
  FakeAgent a("node-a", 2, Mode::kOk);
  FakeAgent b("node-b", 2, Mode::kOk);
  ASSERT_TRUE(a.Register(server_.address()).ok());
  ASSERT_TRUE(b.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::RUNNING; }));
  const std::string at = cl.Get(j).server();
  const int64_t wide = (int64_t{1} << 32) + j;
  const std::string none = "no job " + std::to_string(wide);
  for (const grpc::Status& s :
       {cl.Migrate(wide, at == "node-a" ? "node-b" : "node-a"),
        cl.Resize(wide, 2), cl.Pack(wide, j), cl.Pack(j, wide),
        cl.Unpack(wide)}) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    EXPECT_EQ(s.error_message(), none);
  }
  Pass(std::chrono::milliseconds(300));
  const rpc::JobInfo after = cl.Get(j);
  EXPECT_EQ(after.state(), rpc::RUNNING);
  EXPECT_EQ(after.server(), at);
  EXPECT_FALSE(HasEntry(after, "request", true)) << after.DebugString();
}

// What a raw client sent is quoted in an error as the CLI's checks quote
// it: 64 bytes at most, a control character as '?' (no line of its own in
// the CLI's output).
TEST_F(DaemonTest, TextAClientSentIsQuotedSafelyInAnError) {
  Client& cl = StartDaemon(Options());
  FakeAgent a("node-a", 1, Mode::kOk);
  ASSERT_TRUE(a.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(1);
  grpc::Status s = cl.Migrate(j, "node-a\nINJECTED");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(),
            "field 'server': no server named 'node-a?INJECTED'");
  rpc::DrainReply reply;
  s = cl.Drain(std::string(300, 'n'), &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "field 'server': no server named '" +
                                   std::string(64, 'n') + "...'");
  rpc::JobSpec good;
  good.set_name("good");
  good.set_command("true");
  good.set_gpus(1);
  rpc::JobSpec bad = good;
  bad.set_name("bad\nname");
  s = cl.SubmitJobs({good, bad});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().find("spec 2 of 2 ('bad?name'): field 'name'"),
            0u)
      << s.error_message();
  EXPECT_EQ(s.error_message().find('\n'), std::string::npos);
}

// What an agent sends is checked as a client's spec is (config/agent_check.h):
// a malformed registration, report or leave is refused whole, naming the
// field, and changes nothing. An exit whose job id lies past the range is
// not taken as the exit of the job its id narrows to.
TEST_F(DaemonTest, AnAgentsBadRequestIsRefusedNamingTheFieldAndChangesNothing) {
  Client& cl = StartDaemon(Options());
  FakeAgent a("node-a", 2, Mode::kOk);
  ASSERT_TRUE(a.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return cl.State(j) == rpc::RUNNING; }));
  auto stub = SchedulerStubFor(server_.address());
  auto registration = [&](const std::string& name) {
    rpc::RegisterAgentRequest r;
    r.set_name(name);
    r.set_address("127.0.0.1:1");
    r.add_gpus()->set_local(0);
    r.add_gpus()->set_local(1);
    return r;
  };
  auto refused = [&](const rpc::RegisterAgentRequest& r) {
    rpc::RegisterAgentReply rep;
    grpc::ClientContext ctx;
    return stub->RegisterAgent(&ctx, r, &rep);
  };
  grpc::Status s = refused(registration("node-b\nINJECTED"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "field 'name': may hold only letters, digits, '.', '_' and '-' "
            "(a hostname's characters), got 'node-b?INJECTED'");
  // node-a's own name, listing job j under an id that narrows to it.
  rpc::RegisterAgentRequest wide = registration("node-a");
  rpc::AgentJob* listed = wide.add_jobs();
  listed->set_job_id((int64_t{1} << 32) + j);
  listed->set_state(rpc::RUNNING);
  s = refused(wide);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "field 'jobs[0].job_id': a job id must be 1 to 2147483647, got " +
                std::to_string((int64_t{1} << 32) + j));
  rpc::AgentReport report;
  report.set_name("node-a");
  rpc::JobExit* exit = report.add_exits();
  exit->set_job_id((int64_t{1} << 32) + j);
  exit->set_exit_code(0);
  {
    rpc::AgentReportReply rep;
    grpc::ClientContext ctx;
    s = stub->Report(&ctx, report, &rep);
  }
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().find("field 'exits[0].job_id'"), 0u)
      << s.error_message();
  rpc::LeaveRequest leave;
  leave.set_name(std::string(300, 'n'));
  {
    rpc::LeaveReply rep;
    grpc::ClientContext ctx;
    s = stub->Leave(&ctx, leave, &rep);
  }
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "field 'name': must be 1 to 253 characters, got 300");
  Pass(std::chrono::milliseconds(300));
  const rpc::JobInfo after = cl.Get(j);
  EXPECT_EQ(after.state(), rpc::RUNNING) << after.DebugString();
  EXPECT_EQ(after.server(), "node-a");
  EXPECT_EQ(a.registrations(), 1);
  const rpc::ListServersReply servers = cl.Servers();
  ASSERT_EQ(servers.servers_size(), 1);
  EXPECT_EQ(servers.servers(0).name(), "node-a");
  EXPECT_TRUE(servers.servers(0).up());
}

// A job whose start failed on one server starts on another one next, and
// its history says where it failed and that the next try goes elsewhere.
TEST_F(DaemonTest, AStartThatFailedOnOneServerIsTriedOnAnother) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.start_retry_s = 0.2;
  Client& cl = StartDaemon(o);
  FakeAgent bad("node-a", 1, Mode::kOk);
  FakeAgent good("node-b", 1, Mode::kOk);
  bad.FailStarts(true);
  // fifo tries the first server first (both have one free GPU).
  ASSERT_TRUE(bad.Register(server_.address()).ok());
  ASSERT_TRUE(good.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] {
    return good.procs().count(j) == 1 && cl.Get(j).start_failures() == 0;
  })) << cl.Get(j).DebugString();
  EXPECT_EQ(cl.State(j), rpc::RUNNING);
  EXPECT_EQ(bad.start_calls(j), 1);
  EXPECT_EQ(good.start_calls(j), 1);
  EXPECT_EQ(good.procs().count(j), 1u);
  const rpc::JobInfo info = cl.Get(j);
  EXPECT_EQ(info.start_failures(), 0);
  std::string detail;
  for (const auto& h : info.history()) {
    if (h.action() == "start" && !h.ok()) detail = h.detail();
  }
  EXPECT_NE(detail.find("start 1 failed in a row, tried again in 0.2 s (away "
                        "from node-a if another server has room)"),
            std::string::npos)
      << detail;
}

// A job spanning servers whose second part cannot start: the lead's part,
// started first, is stopped again; once that agent can start it, the next
// try starts both.
TEST_F(DaemonTest, AGangWhosePartCannotStartStopsTheRestAndIsTriedAgain) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  Client& cl = StartDaemon(o);
  FakeAgent a("node-a", 1, Mode::kOk);
  FakeAgent b("node-b", 1, Mode::kOk);
  a.FailStarts(true);
  // fifo places the job's first GPU (rank 0's) on the last server here.
  ASSERT_TRUE(a.Register(server_.address()).ok());
  ASSERT_TRUE(b.Register(server_.address()).ok());
  const int64_t j = cl.MustSubmit(2);
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(j), "start", false); }))
      << cl.Get(j).DebugString();
  std::string detail;
  const rpc::JobInfo failed = cl.Get(j);
  for (const auto& h : failed.history()) {
    if (h.action() == "start" && !h.ok()) detail = h.detail();
  }
  EXPECT_NE(detail.find("part 1 on node-a: StartJob: no GPUs today"),
            std::string::npos)
      << detail;
  EXPECT_GE(b.start_calls(j), 1);
  ASSERT_TRUE(WaitFor([&] {
    return b.kills(j) >= 1 && b.procs().count(j) == 0;
  })) << "the lead's part was left running";
  a.FailStarts(false);
  ASSERT_TRUE(WaitFor([&] {
    const rpc::JobInfo info = cl.Get(j);
    return info.state() == rpc::RUNNING && HasEntry(info, "start", true) &&
           a.procs().count(j) == 1 && b.procs().count(j) == 1;
  })) << cl.Get(j).DebugString();
  // The history is read from the store, which the loop writes before it
  // publishes the pass's state: the publication too.
  server_->Sync();
  const rpc::JobInfo info = cl.Get(j);
  EXPECT_EQ(info.server(), b.name());
  EXPECT_EQ(info.parts_size(), 2);
  EXPECT_EQ(info.start_failures(), 0);
}

// A grow of a job spanning servers that fails once rank 0 checkpointed
// (here the transfer to the new server): every part starts again where it
// was, from the checkpoint the lead's agent kept, and the job runs on
// there at its old size.
TEST_F(DaemonTest, AGangGrowWhoseTransferFailsRestartsEveryPartWhereItWas) {
  SchedulerOptions o = Options();
  FakeAgent a("node-a", 1, Mode::kOk);
  FakeAgent b("node-b", 1, Mode::kOk);
  // It runs with the job-side library: it moves by checkpoint.
  const int64_t j = StartDaemonAndSpanningJob(o, a, b, /*elastic=*/true);
  Client& cl = *client_;
  ASSERT_GT(j, 0);
  FakeAgent c("node-c", 2, Mode::kFailReceive);
  ASSERT_TRUE(c.Register(server_.address()).ok());
  {
    const grpc::Status r = cl.Resize(j, 4);
    ASSERT_TRUE(r.ok()) << r.error_message();
  }
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(j), "restart"); }))
      << cl.Get(j).DebugString();
  const rpc::JobInfo info = cl.Get(j);
  std::string grow, restart;
  for (const auto& h : info.history()) {
    if (h.action() == "grow") grow = h.detail();
    if (h.action() == "restart") restart = h.detail();
  }
  EXPECT_TRUE(HasEntry(info, "grow", false)) << info.DebugString();
  EXPECT_NE(grow.find("to node-c: ReceiveCheckpoint: the source went away"),
            std::string::npos)
      << grow;
  EXPECT_TRUE(HasEntry(info, "restart", true)) << restart;
  EXPECT_NE(restart.find("from the checkpoint kept on node-b"),
            std::string::npos)
      << restart;
  EXPECT_EQ(a.resume_local_starts(j), 1);
  EXPECT_EQ(b.resume_local_starts(j), 1);
  EXPECT_EQ(c.start_calls(j), 0);
  EXPECT_EQ(c.procs().count(j), 0u);
  EXPECT_EQ(info.state(), rpc::RUNNING);
  EXPECT_EQ(info.server(), b.name());
  EXPECT_EQ(info.parts_size(), 2);
  // The lead's exit is the job's end.
  ASSERT_TRUE(FinishesOn(cl, b, j));
}

// A queued job says why it waits: larger than the open servers, not
// enough free GPUs with the jobs ahead of it, held by an operator.
TEST_F(DaemonTest, AQueuedJobSaysWhyItWaits) {
  FakeAgent agent("node-a", 2, Mode::kOk);
  Client& cl = StartFifoDaemonWith(agent);
  const int64_t one = cl.MustSubmit(1, "one");
  const int64_t big = cl.MustSubmit(4, "big");
  const int64_t two = cl.MustSubmit(2, "two");
  ASSERT_TRUE(WaitFor([&] { return cl.State(one) == rpc::RUNNING; }));
  auto reason = [&](int64_t j) { return cl.Get(j).waiting_reason(); };
  EXPECT_EQ(reason(big),
            "it needs 4 GPUs and the open servers have 2 in all: it waits "
            "for servers to join (or cordoned ones to open)");
  EXPECT_EQ(reason(two),
            "it needs 2 GPUs, 1 is free; 1 job is ahead of it in the queue");
  EXPECT_EQ(reason(one), "") << "it runs";
  ASSERT_TRUE(cl.Suspend(two).ok());
  EXPECT_EQ(reason(two), "held by an operator (gandiva resume releases it)");
  // A server joins: the big job fits on the two servers' GPUs, and would
  // run once it has them.
  FakeAgent more("node-b", 2, Mode::kOk);
  ASSERT_TRUE(more.Register(server_.address()).ok());
  ASSERT_TRUE(WaitFor([&] {
    return reason(big) == "it needs 4 GPUs, 3 are free";
  })) << reason(big);
}

// A queued job's reason follows the queue: the job ahead of it killed, it
// says one job fewer is ahead (its own published info is unchanged: the
// reason is composed from the queue as published), the same in ListJobs as
// in GetJob; and the free GPUs as they change.
TEST_F(DaemonTest, AQueuedJobsReasonFollowsTheJobsAheadOfIt) {
  FakeAgent agent("node-a", 1, Mode::kOk);
  Client& cl = StartFifoDaemonWith(agent);
  const int64_t run = cl.MustSubmit(1, "run");
  ASSERT_TRUE(WaitFor([&] { return cl.State(run) == rpc::RUNNING; }));
  const int64_t a = cl.MustSubmit(1, "a");
  const int64_t b = cl.MustSubmit(1, "b");
  const int64_t c = cl.MustSubmit(1, "c");
  auto reason = [&](int64_t j) { return cl.Get(j).waiting_reason(); };
  auto listed = [&](int64_t j) {
    for (const rpc::JobInfo& info : cl.List(/*all=*/false)) {
      if (info.id() == j) return info.waiting_reason();
    }
    return std::string("(not listed)");
  };
  EXPECT_EQ(reason(a), "it needs 1 GPUs, 0 are free");
  EXPECT_EQ(reason(c),
            "it needs 1 GPUs, 0 are free; 2 jobs are ahead of it in the queue");
  ASSERT_TRUE(cl.Kill(a).ok());
  EXPECT_EQ(reason(b), "it needs 1 GPUs, 0 are free");
  EXPECT_EQ(listed(b), "it needs 1 GPUs, 0 are free");
  EXPECT_EQ(reason(c),
            "it needs 1 GPUs, 0 are free; 1 job is ahead of it in the queue");
  EXPECT_EQ(listed(c), reason(c));
  // Held, its own reason (out of the queue); released, back in its place
  // ahead of c (the queue keeps submission order).
  ASSERT_TRUE(cl.Suspend(b).ok());
  EXPECT_EQ(reason(b), "held by an operator (gandiva resume releases it)");
  EXPECT_EQ(reason(c), "it needs 1 GPUs, 0 are free");
  ASSERT_TRUE(cl.Resume(b).ok());
  EXPECT_EQ(reason(c),
            "it needs 1 GPUs, 0 are free; 1 job is ahead of it in the queue");
  // The running job killed, b takes its GPU and c is at the head.
  ASSERT_TRUE(cl.Kill(run).ok());
  ASSERT_TRUE(WaitFor([&] { return cl.State(b) == rpc::RUNNING; }));
  EXPECT_EQ(reason(b), "");
  EXPECT_EQ(reason(c), "it needs 1 GPUs, 0 are free");
}

// The reason is the policy's (core::Policy::ExplainQueue): under
// tiresias-las a queued job names its queue and the jobs that go before
// it, in GetJob as in ListJobs.
TEST_F(DaemonTest, AQueuedJobsReasonIsThePolicys) {
  FakeAgent agent("node-a", 1, Mode::kOk);
  SchedulerOptions o = Options();
  o.policy = "tiresias-las";
  Client& cl = StartDaemon(o);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t run = cl.MustSubmit(1, "run");
  ASSERT_TRUE(WaitFor([&] { return cl.State(run) == rpc::RUNNING; }));
  const int64_t next = cl.MustSubmit(1, "next");
  const std::string why =
      "in queue 0 of 2 (0 first), with 0 GPU-seconds of service: 1 job goes "
      "before it (higher priority, a higher queue, or earlier in its own) "
      "and takes 1 of the 1 GPUs up; it needs 1";
  EXPECT_EQ(cl.Get(next).waiting_reason(), why);
  std::string listed;
  for (const rpc::JobInfo& info : cl.List(/*all=*/false)) {
    if (info.id() == next) listed = info.waiting_reason();
  }
  EXPECT_EQ(listed, why);
}

// ListJobs filters by state (an end state brings the ended jobs without
// `all`), owner and name pattern, and pages in id order: max_jobs, or 1 MiB
// of jobs, whichever comes first; next_after_id says where to go on.
TEST_F(DaemonTest, ListJobsFiltersAndPages) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  Client& cl = StartDaemon(o);
  std::vector<rpc::JobSpec> specs;
  for (int i = 0; i < 30; ++i) {
    rpc::JobSpec spec;
    spec.set_name(i % 3 == 0 ? "search-" + std::to_string(i) : "cnn");
    spec.set_owner(i % 2 == 0 ? "alice" : "bob");
    spec.set_command("python3 train.py");
    spec.set_gpus(1);
    specs.push_back(spec);
  }
  std::vector<int64_t> ids;
  ASSERT_TRUE(cl.SubmitJobs(specs, &ids).ok());
  ASSERT_EQ(ids.size(), 30u);
  ASSERT_TRUE(cl.Kill(ids[0]).ok());
  ASSERT_TRUE(cl.Kill(ids[1]).ok());
  // Every page of `r`, their ids in order.
  auto ids_of = [&](rpc::ListJobsRequest r, int* pages = nullptr) {
    std::vector<int64_t> got;
    for (int n = 1;; ++n) {
      rpc::ListJobsReply rep;
      const grpc::Status st = cl.ListPage(r, &rep);
      EXPECT_TRUE(st.ok()) << st.error_message();
      for (const rpc::JobInfo& j : rep.jobs()) got.push_back(j.id());
      if (pages != nullptr) *pages = n;
      if (!st.ok() || rep.next_after_id() == 0) return got;
      EXPECT_EQ(rep.next_after_id(), got.back());
      r.set_after_id(rep.next_after_id());
    }
  };
  rpc::ListJobsRequest r;
  EXPECT_EQ(ids_of(r).size(), 28u) << "live jobs only";
  r.set_all(true);
  int pages = 0;
  r.set_max_jobs(7);
  EXPECT_EQ(ids_of(r, &pages), ids);
  EXPECT_EQ(pages, 5) << "7 + 7 + 7 + 7 + 2";
  r.set_max_jobs(0);
  r.set_all(false);
  r.add_states(rpc::KILLED);
  EXPECT_EQ(ids_of(r), (std::vector<int64_t>{ids[0], ids[1]}))
      << "an end state brings the ended jobs";
  r.clear_states();
  r.set_owner("alice");
  r.set_name("search-*");
  std::vector<int64_t> want;
  for (int i = 2; i < 30; ++i) {
    if (i % 6 == 0) want.push_back(ids[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(ids_of(r), want);
  r.set_name("search-1?");  // the whole name: search-12 and search-18
  EXPECT_EQ(ids_of(r), (std::vector<int64_t>{ids[12], ids[18]}));
  r.set_name("search-\\*");  // quoted: a name with a star only
  EXPECT_EQ(ids_of(r), std::vector<int64_t>{});
  // A queued job's reason as GetJob gives it.
  r = rpc::ListJobsRequest();
  r.set_after_id(ids[4]);
  r.set_max_jobs(1);
  rpc::ListJobsReply one;
  ASSERT_TRUE(cl.ListPage(r, &one).ok());
  ASSERT_EQ(one.jobs_size(), 1);
  EXPECT_EQ(one.jobs(0).id(), ids[5]);
  EXPECT_EQ(one.jobs(0).spec().name(), "cnn");
  EXPECT_EQ(one.jobs(0).waiting_reason(), cl.Get(ids[5]).waiting_reason());
  EXPECT_FALSE(one.jobs(0).waiting_reason().empty());
  // Large jobs: a page ends before 1 MiB.
  std::vector<rpc::JobSpec> big(4);
  for (rpc::JobSpec& spec : big) {
    spec.set_name("big");
    spec.set_command("true");
    for (int v = 0; v < 4; ++v) {
      (*spec.mutable_env())["V" + std::to_string(v)] =
          std::string(100 << 10, 'x');
    }
    spec.set_gpus(1);
  }
  std::vector<int64_t> big_ids;
  ASSERT_TRUE(cl.SubmitJobs(big, &big_ids).ok());
  r = rpc::ListJobsRequest();
  r.set_name("big");
  EXPECT_EQ(ids_of(r, &pages), big_ids);
  EXPECT_EQ(pages, 2) << "two of 400 KiB a page";
  // Bad requests name the field.
  r = rpc::ListJobsRequest();
  r.set_max_jobs(10001);
  rpc::ListJobsReply rep;
  grpc::Status st = cl.ListPage(r, &rep);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("field 'max_jobs'"), std::string::npos)
      << st.error_message();
  r = rpc::ListJobsRequest();
  r.add_states(static_cast<rpc::JobState>(99));
  st = cl.ListPage(r, &rep);
  EXPECT_NE(st.error_message().find("field 'states': 99"), std::string::npos)
      << st.error_message();
}

// Ended jobs are published apart from the live ones (settled): listed once
// each, in id order among the live ones, shown with their end, and still
// so after something about them comes in again (a late exit report).
TEST_F(DaemonTest, EndedJobsAreListedOnceInOrderAmongTheLiveOnes) {
  FakeAgent agent("node-a", 2, Mode::kOk);
  Client& cl = StartFifoDaemonWith(agent);
  const int64_t a = cl.MustSubmit(1, "a");
  const int64_t b = cl.MustSubmit(1, "b");
  ASSERT_TRUE(WaitFor([&] { return agent.procs().size() == 2; }));
  agent.Exit(a, 3);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return cl.State(a) == rpc::FAILED; }));
  const int64_t c = cl.MustSubmit(1, "c");  // takes a's GPU
  ASSERT_TRUE(WaitFor([&] { return cl.State(c) == rpc::RUNNING; }));
  ASSERT_TRUE(cl.Kill(b).ok());
  // A late report of b's exit (killed) touches the ended job again.
  agent.KilledExit(b, -9);
  ASSERT_TRUE(agent.Report().ok());
  for (int round = 0; round < 2; ++round) {
    std::vector<int64_t> ids;
    std::vector<rpc::JobState> states;
    for (const rpc::JobInfo& j : cl.List(/*all=*/true)) {
      ids.push_back(j.id());
      states.push_back(j.state());
    }
    EXPECT_EQ(ids, (std::vector<int64_t>{a, b, c}));
    EXPECT_EQ(states, (std::vector<rpc::JobState>{rpc::FAILED, rpc::KILLED,
                                                  rpc::RUNNING}));
    const std::vector<rpc::JobInfo> live = cl.List(/*all=*/false);
    ASSERT_EQ(live.size(), 1u);
    EXPECT_EQ(live[0].id(), c);
    const rpc::JobInfo ended = cl.Get(a);
    EXPECT_EQ(ended.state(), rpc::FAILED);
    EXPECT_EQ(ended.exit_code(), 3);
    EXPECT_GT(ended.ended_us(), 0);
    EXPECT_TRUE(HasEntry(ended, "exit", false)) << ended.DebugString();
    Pass(std::chrono::milliseconds(200));
  }
}

// A clean stop compacts the log: the next start restores the snapshot,
// replays nothing, and finds the jobs where they were.
TEST_F(DaemonTest, ACleanStopLeavesASnapshotAndNoEventsToReplay) {
  SchedulerOptions o = Options();
  Client& c1 = StartDaemon(o);
  FakeAgent agent("node", 2, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t a = c1.MustSubmit(1);
  const int64_t b = c1.MustSubmit(1);
  // Started at the agent, the replies in (a job is shown running once the
  // core decides its start).
  ASSERT_TRUE(WaitFor([&] {
    return HasEntry(c1.Get(a), "start", true) &&
           HasEntry(c1.Get(b), "start", true);
  }));
  ASSERT_EQ(c1.State(a), rpc::RUNNING);
  ASSERT_EQ(c1.State(b), rpc::RUNNING);
  server_.reset();
  client_.reset();
  {
    auto store = Store::Open(o.db_path, false);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    EXPECT_EQ(*(*store)->EventCount(), 0);
    auto snap = (*store)->LoadSnapshot();
    ASSERT_TRUE(snap.ok() && snap->has_value());
    EXPECT_EQ((*snap)->seq, (*store)->LastEventSeq());
  }
  Client& c2 = StartDaemon(o);
  EXPECT_EQ(c2.State(a), rpc::RUNNING);
  EXPECT_EQ(c2.State(b), rpc::RUNNING);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  ASSERT_TRUE(agent.Report().ok());
  // A third job queues behind them (the restored core knows both GPUs are
  // taken), and runs when one ends.
  const int64_t c = c2.MustSubmit(1);
  server_->Sync();
  EXPECT_EQ(agent.start_calls(c), 0);
  agent.Exit(a, 0);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return c2.State(c) == rpc::RUNNING; }));
  EXPECT_EQ(c2.State(a), rpc::FINISHED);
  EXPECT_EQ(agent.start_calls(a), 1);
  EXPECT_EQ(agent.start_calls(b), 1);
  EXPECT_EQ(agent.duplicate_starts(), 0);
}

// A stop while a start is at the agent: the snapshot keeps the action under
// way, and the agent's view decides it when it registers again.
TEST_F(DaemonTest, AnActionUnderWayAtTheSnapshotIsDecidedAfterTheRestart) {
  SchedulerOptions o = Options();
  Client& c1 = StartDaemon(o);
  FakeAgent agent("node", 1, Mode::kSlow);  // a start takes 300 ms
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t a = c1.MustSubmit(1);
  ASSERT_TRUE(WaitFor([&] { return agent.starts_begun(a) == 1; }));
  server_.reset();
  client_.reset();
  ASSERT_TRUE(WaitFor([&] { return agent.start_calls(a) == 1; }));

  Client& c2 = StartDaemon(o);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  ASSERT_TRUE(agent.Report().ok());
  // Done: the job is not busy, so it can be suspended.
  const grpc::Status st = c2.Suspend(a);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_TRUE(WaitFor([&] { return agent.suspends() == 1; }));
  EXPECT_EQ(agent.start_calls(a), 1);
}

// A snapshot this build cannot read stops the start with the reason: the
// events it replaced are gone, so replaying the log alone would be wrong.
TEST_F(DaemonTest, AnUnreadableSnapshotStopsTheStart) {
  SchedulerOptions o = Options();
  Client& c1 = StartDaemon(o);
  c1.MustSubmit(1);
  server_.reset();
  client_.reset();
  {
    auto store = Store::Open(o.db_path, false);
    ASSERT_TRUE(store.ok());
    auto snap = (*store)->LoadSnapshot();
    ASSERT_TRUE(snap.ok() && snap->has_value());
    SnapshotRow row = **snap;
    row.core.resize(row.core.size() / 2);
    ASSERT_TRUE((*store)->WriteSnapshot(row).ok());
  }
  auto s = SchedulerServer::Start(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("cannot be restored"), std::string::npos)
      << s.status().message();
}

// The value of the sample `series` (name and labels, as printed) in a
// Prometheus text page; -1 when absent.
double Sample(const std::string& page, const std::string& series) {
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) {
      return std::stod(line.substr(series.size() + 1));
    }
  }
  return -1;
}

// The ids of the jobs ListJobs lists, ended ones too.
std::vector<int64_t> ListedIds(Client& c) {
  std::vector<int64_t> ids;
  for (const rpc::JobInfo& j : c.List(/*all=*/true)) ids.push_back(j.id());
  return ids;
}

// Every page of ListJobs for `r` (from after_id 0, at most `per_page` a
// page): the jobs' ids, in order.
std::vector<int64_t> PagedIds(Client& c, rpc::ListJobsRequest r, int per_page) {
  std::vector<int64_t> ids;
  r.set_max_jobs(per_page);
  for (int page = 0; page < 100; ++page) {
    rpc::ListJobsReply rep;
    const grpc::Status st = c.ListPage(r, &rep);
    EXPECT_TRUE(st.ok()) << st.error_message();
    for (const rpc::JobInfo& j : rep.jobs()) ids.push_back(j.id());
    if (rep.next_after_id() == 0) break;
    r.set_after_id(rep.next_after_id());
  }
  return ids;
}

// With --keep-ended-jobs 2, each compaction forgets the ended jobs beyond
// the two that ended last: ListJobs no longer lists them, GetJob reads
// them from the store (with their history), a request about one says it
// ended, and a restart neither brings them back nor queues them again, even
// when their rows were left unarchived (a stop between the snapshot and
// the archiving).
TEST_F(DaemonTest, EndedJobsBeyondTheKeptOnesAreForgottenAndArchived) {
  SchedulerOptions o = Options();
  o.keep_ended_jobs = 2;
  o.snapshot_every_events = 1;  // compact after every pass that logs
  o.metrics_listen = "127.0.0.1:0";
  Client& c1 = StartDaemon(o);
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(c1.MustSubmit(1, "j" + std::to_string(i)));
  }
  const int64_t live = c1.MustSubmit(1, "live");  // queued: no agent
  for (int64_t id : ids) ASSERT_TRUE(c1.Kill(id).ok());
  server_->Sync();
  EXPECT_EQ(ListedIds(c1), (std::vector<int64_t>{ids[3], ids[4], live}));

  // `lives`: the jobs not ended.
  auto check_archived = [&](Client& c, const std::vector<int64_t>& lives) {
    for (int i = 0; i < 3; ++i) {
      grpc::Status st;
      const rpc::JobInfo info = c.Get(ids[i], &st);
      ASSERT_TRUE(st.ok()) << st.error_message();
      EXPECT_TRUE(info.archived());
      EXPECT_EQ(info.state(), rpc::KILLED);
      EXPECT_EQ(info.spec().name(), "j" + std::to_string(i));
      EXPECT_NE(info.ended_us(), 0);
      ASSERT_GE(info.history_size(), 1);
      EXPECT_EQ(info.history(0).action(), "kill");
    }
    EXPECT_FALSE(c.Get(ids[3]).archived());
    EXPECT_EQ(c.Get(ids[3]).state(), rpc::KILLED);
    EXPECT_EQ(c.Kill(ids[0]).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(c.Kill(ids[0]).error_message().find("already ended"),
              std::string::npos);
    grpc::Status none;
    c.Get(live + 100, &none);
    EXPECT_EQ(none.error_code(), grpc::StatusCode::NOT_FOUND);
    // Listed with the archived ones, in id order, whatever the page size.
    rpc::ListJobsRequest r;
    r.set_all(true);
    r.set_archived(true);
    std::vector<int64_t> every = ids;
    every.insert(every.end(), lives.begin(), lives.end());
    for (int per_page : {1, 2, 100}) {
      EXPECT_EQ(PagedIds(c, r, per_page), every) << per_page;
    }
    r.set_name("j[12]");
    EXPECT_EQ(PagedIds(c, r, 1), (std::vector<int64_t>{ids[1], ids[2]}));
    // A name without wildcards is looked up by name in the store; like
    // fnmatch, it is read up to a NUL byte.
    for (const std::string& name :
         {std::string("j1"), std::string("\\j\\1"), std::string("j1\0x", 4)}) {
      r.set_name(name);
      EXPECT_EQ(PagedIds(c, r, 1), (std::vector<int64_t>{ids[1]})) << name;
    }
    r.clear_name();
    r.set_all(false);
    r.add_states(rpc::QUEUED);
    EXPECT_EQ(PagedIds(c, r, 100), lives);
    r.add_states(rpc::KILLED);  // an end state: ended jobs, archived too
    EXPECT_EQ(PagedIds(c, r, 100), every);
  };
  check_archived(c1, {live});
  const std::string page = Metrics();
  EXPECT_EQ(Sample(page, "gandiva_jobs_archived"), 3) << page;
  EXPECT_EQ(Sample(page, "gandiva_jobs{state=\"killed\"}"), 2) << page;
  o.metrics_listen.clear();  // its server takes seconds to stop
  server_.reset();
  client_.reset();
  {
    auto store = Store::Open(o.db_path, false);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto rows = (*store)->LoadJobs();
    ASSERT_TRUE(rows.ok());
    std::vector<int64_t> loaded;
    for (const JobRow& r : *rows) loaded.push_back(r.id);
    EXPECT_EQ(loaded, (std::vector<int64_t>{ids[3], ids[4], live}));
    auto one = (*store)->LoadJob(ids[1]);
    ASSERT_TRUE(one.ok() && one->has_value());
    EXPECT_EQ((*one)->state, rpc::KILLED);
  }

  Client& c2 = StartDaemon(o);
  EXPECT_EQ(ListedIds(c2), (std::vector<int64_t>{ids[3], ids[4], live}));
  check_archived(c2, {live});
  EXPECT_EQ(c2.MustSubmit(1), live + 1);  // ids are never used again
  server_.reset();
  client_.reset();

  // As if the daemon had stopped after its snapshot, before archiving.
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(o.db_path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE jobs SET archived = 0", nullptr, nullptr,
                           nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  Client& c3 = StartDaemon(o);
  EXPECT_EQ(ListedIds(c3),
            (std::vector<int64_t>{ids[3], ids[4], live, live + 1}));
  check_archived(c3, {live, live + 1});
  EXPECT_EQ(c3.State(live), rpc::QUEUED);
  server_.reset();
  client_.reset();
  auto store = Store::Open(o.db_path, false);
  ASSERT_TRUE(store.ok());
  auto rows = (*store)->LoadJobs();
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 4u);  // archived again
}

// 0 keeps every ended job.
TEST_F(DaemonTest, KeepEndedJobsZeroKeepsThemAll) {
  SchedulerOptions o = Options();
  o.keep_ended_jobs = 0;
  o.snapshot_every_events = 1;
  Client& c = StartDaemon(o);
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(c.MustSubmit(1));
  for (int64_t id : ids) ASSERT_TRUE(c.Kill(id).ok());
  server_->Sync();
  EXPECT_EQ(ListedIds(c), ids);
  EXPECT_FALSE(c.Get(ids[0]).archived());
}

// --keep-ended-for forgets ended jobs by age, however few, at a compaction
// the retention check makes (not at --snapshot-every events), and
// --keep-archived-for deletes their records later: GetJob says so, a
// request about one still says it ended, and a restart brings none back.
TEST_F(DaemonTest, EndedJobsAreForgottenByAgeAndTheirRecordsDeletedLater) {
  SchedulerOptions o = Options();
  o.keep_ended_jobs = 0;
  o.keep_ended_for_s = 0.2;
  o.keep_archived_for_s = 1;
  o.retention_check_s = 0.05;
  o.snapshot_every_events = 1'000'000;
  o.metrics_listen = "127.0.0.1:0";
  Client& c1 = StartDaemon(o);
  const int64_t a = c1.MustSubmit(1, "a");
  const int64_t b = c1.MustSubmit(1, "b");
  const int64_t live = c1.MustSubmit(1, "live");  // queued: no agent
  ASSERT_TRUE(c1.Kill(a).ok());
  ASSERT_TRUE(c1.Kill(b).ok());
  ASSERT_TRUE(WaitFor([&] { return c1.Get(a).archived(); }));
  ASSERT_TRUE(WaitFor([&] { return c1.Get(b).archived(); }));
  EXPECT_EQ(ListedIds(c1), (std::vector<int64_t>{live}));
  EXPECT_EQ(c1.Get(a).state(), rpc::KILLED);
  // Deleted a second after they ended.
  for (int64_t id : {a, b}) {
    grpc::Status st;
    ASSERT_TRUE(WaitFor([&] {
      c1.Get(id, &st);
      return !st.ok();
    }));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(st.error_message(), "job " + std::to_string(id) +
                                      " ended and its record was deleted "
                                      "(--keep-archived-for)");
  }
  EXPECT_NE(c1.Kill(a).error_message().find("already ended"),
            std::string::npos);
  grpc::Status none;
  c1.Get(live + 1, &none);
  EXPECT_EQ(none.error_message(), "no job " + std::to_string(live + 1));
  const std::string page = Metrics();
  EXPECT_EQ(Sample(page, "gandiva_jobs_archived"), 2) << page;
  EXPECT_EQ(Sample(page, "gandiva_archive_deleted_total"), 2) << page;
  o.metrics_listen.clear();
  server_.reset();
  client_.reset();

  Client& c2 = StartDaemon(o);
  EXPECT_EQ(ListedIds(c2), (std::vector<int64_t>{live}));
  grpc::Status st;
  c2.Get(a, &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(c2.State(live), rpc::QUEUED);
  EXPECT_EQ(c2.MustSubmit(1), live + 1);  // ids are never used again
}

// The retention check forgets the ended jobs beyond --keep-ended-jobs
// between compactions, once they exceed it by a tenth (here: by one).
TEST_F(DaemonTest, TheRetentionCheckForgetsJobsBeyondTheKeptOnes) {
  SchedulerOptions o = Options();
  o.keep_ended_jobs = 2;
  o.retention_check_s = 0.05;
  o.snapshot_every_events = 1'000'000;
  Client& c = StartDaemon(o);
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(c.MustSubmit(1));
  for (int64_t id : ids) ASSERT_TRUE(c.Kill(id).ok());
  ASSERT_TRUE(WaitFor([&] { return ListedIds(c).size() == 2; }));
  EXPECT_EQ(ListedIds(c), (std::vector<int64_t>{ids[3], ids[4]}));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(c.Get(ids[i]).archived());
}

// `o` for counting the event log's appends from the metrics: served on a
// port, with no Tick logged meanwhile.
SchedulerOptions CountingAppends(SchedulerOptions o) {
  o.metrics_listen = "127.0.0.1:0";
  o.tick_ms = 600'000;
  return o;
}

TEST_F(DaemonTest, MetricsShowJobsGpusActionsAndMechanismCosts) {
  UseRealWorld();  // served over HTTP
  SchedulerOptions o = Options();
  o.metrics_listen = "127.0.0.1:0";
  o.profile_interval_s = 0;
  Client& c = StartDaemon(o);
  ASSERT_GT(server_->metrics_port(), 0);
  FakeAgent agent("node", 2, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  const int64_t a = c.MustSubmit(1, "alpha");
  const int64_t b = c.MustSubmit(1, "beta");
  const int64_t q = c.MustSubmit(2, "wide");  // waits for both GPUs
  ASSERT_TRUE(WaitFor([&] {
    return c.State(a) == rpc::RUNNING && c.State(b) == rpc::RUNNING;
  }));
  agent.SetProgress(a, 40, 7.5, 0.75, int64_t{3} << 30);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(
      WaitFor([&] { return c.Get(a).progress().minibatch_rate() == 7.5; }));
  server_->Sync();

  // Both starts concluded (a job shows RUNNING once its start is sent).
  std::string page;
  const std::string starts_ok =
      "gandiva_mechanism_seconds_count{action=\"start\",outcome=\"ok\"}";
  EXPECT_TRUE(WaitFor([&] {
    page = Metrics();
    return Sample(page, starts_ok) == 2;
  })) << page;
  ASSERT_NE(page.find("200 OK"), std::string::npos) << page;
  EXPECT_EQ(Sample(page, "gandiva_jobs{state=\"running\"}"), 2) << page;
  EXPECT_EQ(Sample(page, "gandiva_jobs{state=\"finished\"}"), 0);
  const double waiting = Sample(page, "gandiva_jobs{state=\"queued\"}") +
                         Sample(page, "gandiva_jobs{state=\"suspended\"}");
  EXPECT_EQ(waiting, 1) << "job " << q << "\n" << page;
  EXPECT_EQ(Sample(page, "gandiva_gpus{state=\"all\"}"), 2);
  EXPECT_EQ(Sample(page, "gandiva_gpus{state=\"training\"}"), 2);
  EXPECT_EQ(Sample(page, "gandiva_servers{state=\"up\"}"), 1);
  EXPECT_EQ(Sample(page, "gandiva_actions_total{kind=\"start\"}"), 2);
  EXPECT_EQ(Sample(page, "gandiva_job_minibatches_per_second{job=\"" +
                             std::to_string(a) + "\",name=\"alpha\"}"),
            7.5)
      << page;
  EXPECT_EQ(Sample(page, "gandiva_job_minibatches{job=\"" + std::to_string(a) +
                             "\",name=\"alpha\"}"),
            40);
  EXPECT_EQ(Sample(page, "gandiva_job_gpu_utilization{job=\"" +
                             std::to_string(a) + "\",name=\"alpha\"}"),
            0.75);
  EXPECT_EQ(Sample(page, "gandiva_job_gpu_memory_bytes{job=\"" +
                             std::to_string(a) + "\",name=\"alpha\"}"),
            static_cast<double>(int64_t{3} << 30));
  EXPECT_GT(Sample(page, "gandiva_core_events_total"), 3);
  EXPECT_GT(Sample(page, "gandiva_event_log_events"), 3);

  // A job that ends leaves the per-job series.
  agent.Exit(b, 0);
  ASSERT_TRUE(agent.Report().ok());
  ASSERT_TRUE(WaitFor([&] { return c.State(b) == rpc::FINISHED; }));
  server_->Sync();
  const std::string after = Metrics();
  EXPECT_EQ(Sample(after, "gandiva_jobs{state=\"finished\"}"), 1);
  EXPECT_EQ(after.find("name=\"beta\""), std::string::npos) << after;
}

// The profile reports of a loop pass (here one agent's report of four jobs)
// are logged in one append, in the order they came, before the core gets
// them; so is what the report teaches of each job's carrier (the library
// seen, for the first time). With one append per report
// (log_profile_reports_together false), a job's carrier shares its
// report's append.
class ReportAppendsTest : public DaemonTest,
                          public ::testing::WithParamInterface<bool> {};

TEST_P(ReportAppendsTest, TheProfileReportsOfAReportShareOneAppendToTheLog) {
  const bool together = GetParam();
  SchedulerOptions o = CountingAppends(Options());
  o.policy = "fifo";
  o.profile_interval_s = 0;
  o.log_profile_reports_together = together;
  Client& c = StartDaemon(o);
  FakeAgent agent("node", 4, Mode::kOk);
  ASSERT_TRUE(agent.Register(server_.address()).ok());
  std::vector<int64_t> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(c.MustSubmit(1));
  std::string page;
  ASSERT_TRUE(WaitFor([&] {
    page = Metrics();
    return Sample(page,
                  "gandiva_mechanism_seconds_count{action=\"start\","
                  "outcome=\"ok\"}") == 4;
  })) << page;
  server_->Sync();
  page = Metrics();
  const double appends = Sample(page, "gandiva_event_log_appends_total");
  const double seq = Sample(page, "gandiva_event_log_last_seq");
  ASSERT_GT(appends, 0) << page;

  for (size_t i = 0; i < jobs.size(); ++i) {
    agent.SetProgress(jobs[i], 10, 1.0 + static_cast<double>(i));
  }
  ASSERT_TRUE(agent.Report().ok());
  server_->Sync();
  page = Metrics();
  EXPECT_EQ(Sample(page, "gandiva_event_log_appends_total"),
            appends + (together ? 1 : 4))
      << page;
  EXPECT_EQ(Sample(page, "gandiva_event_log_last_seq"), seq + 8) << page;

  auto store = Store::Open(o.db_path, false);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<std::string> logged;
  ASSERT_TRUE((*store)
                  ->ForEachEvent(
                      [&](const EventRow& e) {
                        logged.push_back(e.kind + " " + e.json);
                        return core::Status::Ok();
                      },
                      static_cast<int64_t>(seq))
                  .ok());
  ASSERT_EQ(logged.size(), 8u);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const std::string job = "\"job\":" + std::to_string(jobs[i]);
    const std::string& carrier = logged[2 * i];
    const std::string& profile = logged[2 * i + 1];
    EXPECT_EQ(carrier.rfind("CarrierKnown ", 0), 0u) << carrier;
    EXPECT_NE(carrier.find("\"carrier\":\"self\""), std::string::npos)
        << carrier;
    EXPECT_NE(carrier.find(job), std::string::npos) << carrier;
    EXPECT_EQ(profile.rfind("ProfileReport ", 0), 0u) << profile;
    EXPECT_NE(profile.find(job), std::string::npos) << profile;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ReportAppendsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Together" : "OneAppendEach";
                         });

// Jobs submitted together get consecutive ids in the order of their specs,
// and their arrivals share one append to the log; a request with a spec
// that is refused submits none of them, and says which spec; a daemon
// started again has them all.
TEST_F(DaemonTest, JobsSubmittedTogetherArriveInOrderInOneAppend) {
  SchedulerOptions o = CountingAppends(Options());
  o.policy = "fifo";
  Client& c = StartDaemon(o);
  auto spec = [](const std::string& name, int gpus) {
    rpc::JobSpec s;
    s.set_name(name);
    s.set_command("python3 train.py");
    s.set_gpus(gpus);
    return s;
  };
  EXPECT_EQ(c.MustSubmit(1, "alone"), 1);
  server_->Sync();
  std::string page = Metrics();
  const double appends = Sample(page, "gandiva_event_log_appends_total");
  const double seq = Sample(page, "gandiva_event_log_last_seq");

  std::vector<rpc::JobSpec> specs;
  for (const char* name : {"a", "b", "c", "d", "e"}) {
    specs.push_back(spec(name, 2));
  }
  std::vector<int64_t> ids;
  grpc::Status s = c.SubmitJobs(specs, &ids);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(ids, (std::vector<int64_t>{2, 3, 4, 5, 6}));
  server_->Sync();
  page = Metrics();
  EXPECT_EQ(Sample(page, "gandiva_event_log_appends_total"), appends + 1)
      << page;
  EXPECT_EQ(Sample(page, "gandiva_event_log_last_seq"), seq + 5) << page;

  // Refused: the third spec, by its index and name; nothing is stored.
  std::vector<rpc::JobSpec> bad = {spec("f", 1), spec("g", 1), spec("h", 3)};
  s = c.SubmitJobs(bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec 3 of 3 ('h'): field 'gpus'"),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("no job was submitted"), std::string::npos)
      << s.error_message();
  s = c.SubmitJobs({});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("'specs'"), std::string::npos)
      << s.error_message();
  s = c.SubmitJobs(
      std::vector<rpc::JobSpec>(kMaxJobsPerSubmit + 1, spec("many", 1)));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("at most 10000 jobs in one request, got "
                                   "10001"),
            std::string::npos)
      << s.error_message();

  auto names = [&] {
    std::vector<std::string> out;
    for (const rpc::JobInfo& j : client_->List(true)) {
      out.push_back(std::to_string(j.id()) + ":" + j.spec().name());
    }
    return out;
  };
  const std::vector<std::string> want = {"1:alone", "2:a", "3:b",
                                         "4:c",     "5:d", "6:e"};
  EXPECT_EQ(names(), want);
  server_.reset();
  Client& again = StartDaemon(o);
  EXPECT_EQ(names(), want);
  EXPECT_EQ(again.MustSubmit(1, "next"), 7);
}

// A restarted daemon cordons the servers whose agents it awaits in one
// append to the log, not one each.
TEST_F(DaemonTest, ARestartedDaemonCordonsTheAwaitedServersInOneAppend) {
  SchedulerOptions o = CountingAppends(Options());
  StartDaemon(o);
  std::vector<std::unique_ptr<FakeAgent>> agents;
  for (int i = 0; i < 3; ++i) {
    agents.push_back(
        std::make_unique<FakeAgent>("node-" + std::to_string(i), 1, Mode::kOk));
    ASSERT_TRUE(agents.back()->Register(server_.address()).ok());
  }
  server_.reset();
  int64_t seq = 0;
  {
    auto store = Store::Open(o.db_path, false);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    seq = (*store)->LastEventSeq();
  }
  Client& c = StartDaemon(o);
  server_->Sync();
  const std::string page = Metrics();
  EXPECT_EQ(Sample(page, "gandiva_event_log_appends_total"), 1) << page;
  EXPECT_EQ(Sample(page, "gandiva_event_log_last_seq"), seq + 3) << page;
  const rpc::ListServersReply servers = c.Servers();
  ASSERT_EQ(servers.servers_size(), 3);
  for (const rpc::ServerInfo& s : servers.servers()) {
    EXPECT_TRUE(s.cordoned()) << s.name();
    EXPECT_GT(s.awaiting_until_us(), 0) << s.name();
  }
  ASSERT_TRUE(agents[1]->Register(server_.address()).ok());
  server_->Sync();
  EXPECT_FALSE(c.Servers().servers(1).cordoned());
  EXPECT_TRUE(c.Servers().servers(2).cordoned());
}

// On etcd a submission is stored 99 jobs a transaction: when etcd refuses
// one part way (here a spec over its request limit, 1.1 MiB here), the jobs
// stored before it are submitted and run, the error names them, and
// nothing after them is stored.
TEST_F(DaemonTest, ASubmissionEtcdStoresInPartSaysWhichJobsWereSubmitted) {
  std::string error;
  std::unique_ptr<EtcdForTest> etcd =
      EtcdForTest::Start(&error, {}, {"--max-request-bytes", "1153433"});
  ASSERT_NE(etcd, nullptr) << error;
  auto lead = Leadership::Create(etcd->Client(), {"/submit/", 5, "test"});
  ASSERT_TRUE(lead.ok()) << lead.status().ToString();
  ASSERT_TRUE((*lead)->Campaign([](const std::string&) {}).ok());
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.leadership = *lead;
  Client& c = StartDaemon(o);
  std::vector<rpc::JobSpec> specs(150);
  for (size_t i = 0; i < specs.size(); ++i) {
    specs[i].set_name("j" + std::to_string(i));
    specs[i].set_command("python3 train.py");
    specs[i].set_gpus(1);
  }
  // Within the daemon's limits (config::CheckJobSpec), over etcd's.
  specs[120].set_command(std::string(127 << 10, 'x'));
  for (int v = 0; v < 8; ++v) {
    (*specs[120].mutable_env())["V" + std::to_string(v)] =
        std::string(127 << 10, 'v');
  }
  const grpc::Status s = c.SubmitJobs(specs);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_message().find(
                "stored 120 of the 150 jobs (ids 1-120, submitted), not the "
                "others: "),
            std::string::npos)
      << s.error_message();
  const std::vector<rpc::JobInfo> jobs = c.List(true);
  ASSERT_EQ(jobs.size(), 120u);
  EXPECT_EQ(jobs.front().spec().name(), "j0");
  EXPECT_EQ(jobs.back().spec().name(), "j119");
  EXPECT_EQ(c.MustSubmit(1, "next"), 121);
  server_.reset();
  (*lead)->Resign();
}

// While the log cannot be written and this daemon leads (etcd electing its
// own leader), the loop waits for it, trying the append again as the clock
// moves, and takes no other work; readers are answered meanwhile from what
// was published, and the event waited for is handled once it is logged.
TEST_F(DaemonTest, WhileTheLogWaitsForItsStoreReadersAreAnswered) {
  std::string error;
  std::unique_ptr<EtcdForTest> etcd = EtcdForTest::Start(&error);
  ASSERT_NE(etcd, nullptr) << error;
  auto lead = Leadership::Create(etcd->Client(), {"/wait/", 10, "test"});
  ASSERT_TRUE(lead.ok()) << lead.status().ToString();
  ASSERT_TRUE((*lead)->Campaign([](const std::string&) {}).ok());
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.tick_ms = 600'000;  // no Tick to log meanwhile
  o.leadership = *lead;
  FaultyStore* faulty = nullptr;
  o.store_wrapper = [&](std::unique_ptr<Store> inner) {
    auto f = std::make_unique<FaultyStore>(std::move(inner));
    faulty = f.get();
    return f;
  };
  Client& c = StartDaemon(o);
  ASSERT_NE(faulty, nullptr);
  const int64_t a = c.MustSubmit(1, "a");
  server_->Sync();

  faulty->Fail(FaultyStore::Op::kAppendEvents,
               core::Status(core::StatusCode::kUnavailable, "no leader"));
  std::atomic<int64_t> b{0};
  std::thread submit([&] {
    Client other(server_.address());
    b = other.MustSubmit(1, "b");
  });
  // Moves the clock on by one retry's wait (in the real world it moves by
  // itself) and lets the loop try again.
  auto next_try = [] {
    if (FakeDaemonEnv* env = TestWorld::Fake()) {
      env->AdvanceTo(env->SteadyMicros() + 100'000);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (faulty->failures(FaultyStore::Op::kAppendEvents) < 3 &&
         std::chrono::steady_clock::now() < give_up) {
    next_try();
  }
  ASSERT_GE(faulty->failures(FaultyStore::Op::kAppendEvents), 3);
  // The loop still waits on the submission, and readers are answered.
  EXPECT_EQ(b.load(), 0);
  EXPECT_EQ(c.State(a), rpc::QUEUED);
  EXPECT_EQ(c.List(true).size(), 1u);
  EXPECT_TRUE((*lead)->leading());

  faulty->Fail(FaultyStore::Op::kAppendEvents, core::Status::Ok());
  while (b.load() == 0 && std::chrono::steady_clock::now() < give_up) {
    next_try();
  }
  submit.join();
  EXPECT_EQ(b.load(), a + 1);
  ASSERT_TRUE(WaitFor([&] { return c.List(true).size() == 2u; }));
  EXPECT_EQ(c.State(b.load()), rpc::QUEUED);
  server_.reset();
  (*lead)->Resign();
}

// KillJobs, SuspendJobs and ResumeJobs act on every job they can, in one
// append, and give each job's outcome in the order asked, with the reason
// the one-job call would give: an unknown or ended job, a job named twice
// (its first outcome), a resume of a job not suspended.
TEST_F(DaemonTest, SeveralJobsAreKilledSuspendedAndResumedInOneRequest) {
  SchedulerOptions o = CountingAppends(Options());
  o.policy = "fifo";
  Client& c = StartDaemon(o);
  std::vector<int64_t> ids;
  for (const char* name : {"a", "b", "c", "d"}) {
    ids.push_back(c.MustSubmit(1, name));
  }
  using Outcomes = std::vector<std::pair<int, std::string>>;
  const int kOk = grpc::StatusCode::OK;
  const int kNotFound = grpc::StatusCode::NOT_FOUND;
  const int kRefused = grpc::StatusCode::FAILED_PRECONDITION;
  Outcomes out;
  ASSERT_TRUE(c.Act("suspend", {ids[0], ids[1], 99, ids[0]}, &out).ok());
  EXPECT_EQ(
      out,
      (Outcomes{{kOk, ""}, {kOk, ""}, {kNotFound, "no job 99"}, {kOk, ""}}));
  EXPECT_EQ(c.Get(ids[1]).waiting_reason(),
            "held by an operator (gandiva resume releases it)");
  std::vector<std::string> notes;
  ASSERT_TRUE(c.Act("resume", {ids[0], ids[2]}, &out, &notes).ok());
  EXPECT_EQ(out, (Outcomes{{kOk, ""},
                           {kRefused, "job " + std::to_string(ids[2]) +
                                          " is not suspended by an "
                                          "operator"}}));
  // Released, but with no GPUs it does not run: said, not "resumed".
  EXPECT_EQ(notes, (std::vector<std::string>{
                       "released from its hold; it is queued (gandiva show " +
                           std::to_string(ids[0]) + " says why)",
                       ""}));
  EXPECT_TRUE(HasEntry(c.Get(ids[0]), "release", true));

  server_->Sync();
  std::string page = Metrics();
  const double appends = Sample(page, "gandiva_event_log_appends_total");
  const double seq = Sample(page, "gandiva_event_log_last_seq");
  ASSERT_TRUE(c.Act("kill", {ids[0], ids[1], ids[3], ids[3]}, &out).ok());
  EXPECT_EQ(out, (Outcomes{{kOk, ""}, {kOk, ""}, {kOk, ""}, {kOk, ""}}));
  server_->Sync();
  page = Metrics();
  EXPECT_EQ(Sample(page, "gandiva_event_log_appends_total"), appends + 1)
      << page;
  EXPECT_EQ(Sample(page, "gandiva_event_log_last_seq"), seq + 3) << page;
  for (int64_t id : {ids[0], ids[1], ids[3]}) {
    EXPECT_EQ(c.State(id), rpc::KILLED) << id;
  }
  EXPECT_EQ(c.State(ids[2]), rpc::QUEUED);
  ASSERT_TRUE(c.Act("kill", {ids[1], ids[2]}, &out).ok());
  EXPECT_EQ(out, (Outcomes{{kRefused, "job " + std::to_string(ids[1]) +
                                          " already ended (killed)"},
                           {kOk, ""}}));
  // Too many for one request: refused whole, naming the field.
  std::vector<int64_t> many(10001, ids[2]);
  const grpc::Status st = c.Act("kill", many, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("field 'job_ids': 10001 jobs"),
            std::string::npos)
      << st.error_message();
}

TEST_F(DaemonTest, AMetricsAddressInUseIsRefused) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  SchedulerOptions o = Options();
  o.metrics_listen = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  auto s = SchedulerServer::Start(o);
  ::close(fd);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--metrics-listen"), std::string::npos)
      << s.status().message();
}

// One daemon per database: a second start is refused while the first
// runs, and allowed once it stopped.
TEST_F(DaemonTest, ASecondDaemonOnTheSameDatabaseIsRefused) {
  SchedulerOptions o = Options();
  Client& c = StartDaemon(o);
  const int64_t j = c.MustSubmit(1);
  auto second = SchedulerServer::Start(o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), core::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find(
                "is in use by another gandiva-scheduler (pid " +
                std::to_string(getpid()) + ")"),
            std::string::npos)
      << second.status().message();
  // The first goes on undisturbed.
  EXPECT_EQ(c.Get(j).id(), j);
  server_.reset();
  client_.reset();
  Client& again = StartDaemon(o);
  EXPECT_EQ(again.Get(j).id(), j);
}

// A suspended job packed by an operator onto a job running on another
// server: the core says the pack relocates it (core::Action::relocates),
// and the daemon moves its process there (checkpoint, transfer, start),
// where it runs with its partner; its server keeps nothing of it.
TEST_F(DaemonTest, APackOntoAJobOfAnotherServerMovesTheSuspendedJob) {
  FakeAgent a("node-a", 1, Mode::kOk);
  FakeAgent b("node-b", 1, Mode::kOk);
  Client& cl = StartFifoDaemonWith(a);
  ASSERT_TRUE(b.Register(server_.address()).ok());
  std::vector<int64_t> jobs;
  for (int i = 0; i < 2; ++i) {
    jobs.push_back(cl.MustSubmit(1, "job" + std::to_string(i), true));
    ASSERT_GT(jobs.back(), 0);
  }
  ASSERT_TRUE(WaitFor([&] {
    for (int64_t j : jobs) {
      if (cl.State(j) != rpc::RUNNING || !HasEntry(cl.Get(j), "start", true)) {
        return false;
      }
    }
    return true;
  }));
  // The job on node-b is suspended by an operator, then packed with the
  // one on node-a.
  const bool first_on_b = cl.Get(jobs[0]).server() == b.name();
  const int64_t mover = first_on_b ? jobs[0] : jobs[1];
  const int64_t host = first_on_b ? jobs[1] : jobs[0];
  ASSERT_EQ(cl.Get(mover).server(), b.name());
  ASSERT_TRUE(cl.Suspend(mover).ok());
  ASSERT_TRUE(WaitFor([&] {
    return cl.State(mover) == rpc::SUSPENDED &&
           b.procs()[mover].state == rpc::SUSPENDED;
  }));
  ASSERT_TRUE(cl.Pack(mover, host).ok());
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(mover), "pack"); }));
  const std::vector<rpc::HistoryEntry> packs = HistoryOf(cl, mover, "pack");
  ASSERT_EQ(packs.size(), 1u);
  EXPECT_TRUE(packs[0].ok()) << packs[0].detail();
  EXPECT_NE(packs[0].detail().find("from node-b to"), std::string::npos)
      << packs[0].detail();
  EXPECT_EQ(cl.State(mover), rpc::RUNNING);
  EXPECT_EQ(cl.Get(mover).server(), a.name());
  EXPECT_EQ(a.procs().count(mover), 1u);
  EXPECT_EQ(b.procs().count(mover), 0u);
  EXPECT_EQ(a.procs().count(host), 1u);
}

// Drain: the server is cordoned, its jobs migrate to the open server with
// room, new jobs go elsewhere; with nowhere to go a job stays, with the
// reason; undo opens it again.
// A release of a held job says whether it runs again: nothing more when
// it does (the CLI prints "resumed"); when its GPU is taken meanwhile, that
// it waits.
TEST_F(DaemonTest, AReleaseSaysWhetherTheJobRuns) {
  FakeAgent a("node-a", 1, Mode::kOk);
  Client& cl = StartFifoDaemonWith(a);
  const int64_t first = cl.MustSubmit(1, "first");
  ASSERT_TRUE(WaitFor([&] {
    return cl.State(first) == rpc::RUNNING &&
           HasEntry(cl.Get(first), "start", true);
  }));
  std::vector<std::pair<int, std::string>> out;
  std::vector<std::string> notes;
  ASSERT_TRUE(cl.Act("suspend", {first}, &out, &notes).ok());
  ASSERT_TRUE(WaitFor([&] { return cl.State(first) == rpc::SUSPENDED; }));
  ASSERT_TRUE(cl.Act("resume", {first}, &out, &notes).ok());
  EXPECT_EQ(notes, std::vector<std::string>{""});
  ASSERT_TRUE(WaitFor([&] { return cl.State(first) == rpc::RUNNING; }));
}

// A pack of a job already on its partner's GPU (unpacked there, suspended)
// resumes it in place, and its history says with whom and where.
TEST_F(DaemonTest, APackInPlaceSaysWithWhomAndWhere) {
  FakeAgent a("node-a", 1, Mode::kOk);
  Client& cl = StartFifoDaemonWith(a);
  const int64_t first = cl.MustSubmit(1, "first", true);
  const int64_t second = cl.MustSubmit(1, "second", true);
  ASSERT_TRUE(WaitFor([&] {
    return cl.State(first) == rpc::RUNNING &&
           HasEntry(cl.Get(first), "start", true);
  }));
  ASSERT_TRUE(cl.Pack(second, first).ok());
  ASSERT_TRUE(WaitFor([&] { return HasEntry(cl.Get(second), "pack", true); }));
  ASSERT_TRUE(cl.Unpack(second).ok());
  ASSERT_TRUE(WaitFor([&] {
    return cl.State(second) == rpc::SUSPENDED &&
           HasEntry(cl.Get(second), "unpack", true);
  }));
  ASSERT_TRUE(cl.Pack(second, first).ok());
  ASSERT_TRUE(
      WaitFor([&] { return HistoryOf(cl, second, "pack").size() == 2; }));
  const rpc::HistoryEntry again = HistoryOf(cl, second, "pack").back();
  EXPECT_TRUE(again.ok());
  EXPECT_EQ(again.detail(),
            "with job " + std::to_string(first) + ", gpus [0] on node-a");
  EXPECT_EQ(a.start_calls(second), 1) << "resumed in place, not restarted";
}

// A packed pair cannot move: a drain unpacks it, and the next drain moves
// both jobs off.
TEST_F(DaemonTest, DrainUnpacksAPackedPairAndTheNextDrainMovesIt) {
  FakeAgent a("node-a", 1, Mode::kOk);
  Client& cl = StartFifoDaemonWith(a);
  std::vector<int64_t> jobs;
  for (int i = 0; i < 2; ++i) {
    jobs.push_back(cl.MustSubmit(1, "job" + std::to_string(i), true));
    ASSERT_GT(jobs.back(), 0);
  }
  // Running, and its start concluded (a pack with it is refused while a
  // mechanism of it is under way).
  ASSERT_TRUE(WaitFor([&] {
    return cl.State(jobs[0]) == rpc::RUNNING &&
           HasEntry(cl.Get(jobs[0]), "start", true);
  }));
  EXPECT_EQ(cl.State(jobs[1]), rpc::QUEUED);  // one GPU
  ASSERT_TRUE(cl.Pack(jobs[1], jobs[0]).ok());
  // The pack done (until then a drain's unpack is refused: a mechanism is
  // under way).
  ASSERT_TRUE(WaitFor([&] {
    const rpc::JobInfo info = cl.Get(jobs[1]);
    return HasEntry(info, "pack", true);
  }));
  FakeAgent b("node-b", 2, Mode::kOk);
  ASSERT_TRUE(b.Register(server_.address()).ok());

  rpc::DrainReply first;
  ASSERT_TRUE(cl.Drain("node-a", &first).ok());
  ASSERT_EQ(first.jobs_size(), 2);
  int unpacking = 0;
  for (const rpc::DrainedJob& j : first.jobs()) {
    EXPECT_TRUE(j.moved_to().empty());
    EXPECT_NE(j.reason().find("packed with job"), std::string::npos)
        << j.reason();
    unpacking += j.unpacking();
  }
  EXPECT_EQ(unpacking, 1);  // one request unpacks the pair
  ASSERT_TRUE(WaitFor([&] {
    int running = 0;
    for (int64_t id : jobs) running += cl.State(id) == rpc::RUNNING;
    return running == 1;  // the other suspended, alone on its GPU
  }));
  server_->Sync();

  rpc::DrainReply second;
  ASSERT_TRUE(cl.Drain("node-a", &second).ok());
  ASSERT_EQ(second.jobs_size(), 2);
  for (const rpc::DrainedJob& j : second.jobs()) {
    EXPECT_EQ(j.moved_to(), "node-b") << j.reason();
    EXPECT_FALSE(j.unpacking());
  }
  EXPECT_TRUE(WaitFor([&] {
    for (int64_t id : jobs) {
      if (cl.Get(id).server() != "node-b") return false;
    }
    return true;
  }));
}

TEST_F(DaemonTest, DrainCordonsAServerAndMigratesItsJobsOff) {
  SchedulerOptions o = Options();
  o.policy = "fifo";
  o.metrics_listen = "127.0.0.1:0";
  StartDaemon(o);
  auto stub = SchedulerStubFor(server_.address());
  auto drain = [&](const std::string& server, bool undo,
                   rpc::DrainReply* reply) {
    grpc::ClientContext ctx;
    rpc::DrainRequest req;
    req.set_server(server);
    req.set_undo(undo);
    return stub->Drain(&ctx, req, reply);
  };
  FakeAgent a("node-a", 2, Mode::kOk);
  FakeAgent b("node-b", 2, Mode::kOk);
  ASSERT_TRUE(a.Register(server_.address()).ok());
  ASSERT_TRUE(b.Register(server_.address()).ok());
  std::vector<int64_t> jobs;
  for (int i = 0; i < 2; ++i) {
    jobs.push_back(client_->MustSubmit(1, "job" + std::to_string(i), true));
    ASSERT_GT(jobs.back(), 0);
  }
  auto started = [&](int64_t id) {
    const rpc::JobInfo info = client_->Get(id);
    return info.state() == rpc::RUNNING && HasEntry(info, "start", true);
  };
  ASSERT_TRUE(WaitFor([&] { return started(jobs[0]) && started(jobs[1]); }));
  // Drain the server of the first job.
  const std::string from = client_->Get(jobs[0]).server();
  const std::string to = from == "node-a" ? "node-b" : "node-a";
  const std::set<int64_t> there = {
      jobs[0], client_->Get(jobs[1]).server() == from ? jobs[1] : jobs[0]};
  rpc::DrainReply reply;
  rpc::DrainReply none;
  EXPECT_EQ(drain("node-x", false, &none).error_code(),
            grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(drain(from, false, &reply).ok());
  ASSERT_EQ(static_cast<size_t>(reply.jobs_size()), there.size());
  for (const rpc::DrainedJob& j : reply.jobs()) {
    EXPECT_TRUE(there.count(j.job_id()));
    EXPECT_EQ(j.moved_to(), to) << j.reason();
  }
  ASSERT_TRUE(WaitFor([&] {
    for (int64_t id : jobs) {
      const rpc::JobInfo info = client_->Get(id);
      if (info.state() != rpc::RUNNING || info.server() != to) return false;
    }
    return true;
  }));
  const rpc::ListServersReply servers = client_->Servers();
  for (const rpc::ServerInfo& s : servers.servers()) {
    EXPECT_EQ(s.cordoned(), s.name() == from) << s.name();
  }
  const std::string page = Metrics();
  EXPECT_EQ(Sample(page, "gandiva_servers{state=\"cordoned\"}"), 1) << page;
  // A new job waits rather than go to the cordoned server.
  const int64_t late = client_->MustSubmit(1, "late");
  server_->Sync();
  EXPECT_EQ(client_->State(late), rpc::QUEUED);
  // Draining the other one too: nowhere open to go, so its jobs stay.
  rpc::DrainReply stuck;
  ASSERT_TRUE(drain(to, false, &stuck).ok());
  ASSERT_EQ(stuck.jobs_size(), 2);
  for (const rpc::DrainedJob& j : stuck.jobs()) {
    EXPECT_TRUE(j.moved_to().empty());
    EXPECT_EQ(j.reason(), "no other server is up and open");
  }
  // Undo: the first server takes the waiting job.
  ASSERT_TRUE(drain(from, true, &none).ok());
  ASSERT_TRUE(WaitFor([&] {
    const rpc::JobInfo info = client_->Get(late);
    return info.state() == rpc::RUNNING && info.server() == from;
  }));
}

// A drain is the core's: a job only CRIU could move (no library seen, not
// restartable) stays on a server whose agent cannot use CRIU, saying why;
// one whose reports show the library leaves.
TEST_F(DaemonTest, ADrainLeavesAJobOnlyCriuCouldMoveAndMovesOneWithTheLibrary) {
  FakeAgent a("node-a", 2, Mode::kOk);  // reports no CRIU
  Client& cl = StartFifoDaemonWith(a);
  const int64_t lib = cl.MustSubmit(1, "lib");
  const int64_t plain = cl.MustSubmit(1, "plain");
  ASSERT_TRUE(WaitFor([&] {
    return HasEntry(cl.Get(lib), "start", true) &&
           HasEntry(cl.Get(plain), "start", true);
  }));
  a.SetProgress(lib, 10, 2.0);
  ASSERT_TRUE(a.Report().ok());
  server_->Sync();
  ASSERT_TRUE(cl.Get(lib).uses_library());
  FakeAgent b("node-b", 2, Mode::kOk);
  ASSERT_TRUE(b.Register(server_.address()).ok());
  server_->Sync();

  rpc::DrainReply reply;
  ASSERT_TRUE(cl.Drain("node-a", &reply).ok());
  ASSERT_EQ(reply.jobs_size(), 2);
  EXPECT_EQ(reply.jobs(0).job_id(), lib);
  EXPECT_EQ(reply.jobs(0).moved_to(), "node-b") << reply.jobs(0).reason();
  EXPECT_EQ(reply.jobs(1).job_id(), plain);
  EXPECT_EQ(reply.jobs(1).moved_to(), "");
  EXPECT_FALSE(reply.jobs(1).unpacking());
  EXPECT_EQ(reply.jobs(1).reason(),
            "cannot migrate job " + std::to_string(plain) +
                ": it does not use the gandiva job-side library, is not "
                "declared restartable, and CRIU is not usable on node-a (not "
                "checked)");
  EXPECT_EQ(HistoryOf(cl, lib, "request").size(), 1u);
  EXPECT_TRUE(HistoryOf(cl, plain, "request").empty());
  // An operator's migrate of it is refused the same way.
  EXPECT_EQ(cl.Migrate(plain, "node-b").error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  server_->Sync();
  EXPECT_EQ(cl.Get(plain).server(), "node-a");
  EXPECT_EQ(cl.State(plain), rpc::RUNNING);
}

}  // namespace
}  // namespace gandiva::runtime
