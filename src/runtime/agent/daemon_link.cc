#include "runtime/agent/daemon_link.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <utility>

#include "runtime/agent/agent_rpc.h"

namespace gandiva::runtime {

DaemonLink::DaemonLink(
    DaemonLinkOptions options, const GpuInventory& inventory,
    Supervisor& supervisor,
    std::function<void(std::chrono::milliseconds)> await_capabilities,
    std::function<void(const std::string&)> log)
    : options_(std::move(options)),
      inventory_(inventory),
      supervisor_(supervisor),
      await_capabilities_(std::move(await_capabilities)),
      log_(std::move(log)) {
  std::random_device rd;
  char id[33];
  std::snprintf(id, sizeof id, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  incarnation_ = id;
}

DaemonLink::~DaemonLink() { Stop(); }

void DaemonLink::Start(const std::string& address) {
  address_ = address;
  if (options_.schedulers.empty()) return;
  ConnectScheduler();
  reporter_ = std::thread([this] { ReporterLoop(); });
}

void DaemonLink::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (reporter_.joinable()) reporter_.join();
}

void DaemonLink::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = true;
  }
  cv_.notify_all();
}

void DaemonLink::RegisterAgain() {
  if (registrations_.load() > 0) {
    registered_ = false;
    Wake();
  }
}

void DaemonLink::FinalReport() {
  if (scheduler_ && !supervisor_.PendingExits().empty()) {
    if (!registered_) (void)Register();
    if (registered_) (void)SendReport();
  }
}

std::unique_ptr<grpc::ClientContext> DaemonLink::CallContext() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
  if (options_.credential) AttachCredential(*options_.credential, ctx.get());
  return ctx;
}

grpc::Status DaemonLink::Register() {
  rpc::RegisterAgentRequest req;
  req.set_name(options_.name);
  req.set_address(address_);
  req.set_incarnation(incarnation_);
  for (const GpuInfo& g : inventory_.gpus()) {
    rpc::Gpu* out = req.add_gpus();
    out->set_local(g.local);
    out->set_socket(g.socket);
    out->set_pcie_switch(g.pcie_switch);
    out->set_uuid(g.uuid);
    out->set_name(g.name);
    out->set_memory_bytes(g.memory_bytes);
  }
  req.set_sockets(inventory_.sockets());
  req.set_switches_per_socket(inventory_.switches_per_socket());
  for (const JobView& v : supervisor_.Jobs()) {
    *req.add_jobs() = ToAgentJob(v, inventory_);
  }
  for (int64_t id : supervisor_.HeldCheckpoints()) {
    req.add_checkpoints(id);
    req.add_checkpoint_clusters(supervisor_.HeldCheckpointCluster(id));
    req.add_checkpoint_submitted_us(supervisor_.HeldCheckpointSubmitted(id));
    rpc::JobSpec* spec = req.add_checkpoint_specs();
    if (!spec->ParseFromString(supervisor_.HeldCheckpointSpec(id))) {
      spec->Clear();
    }
  }
  req.set_cluster_id(supervisor_.Cluster());
  *req.mutable_capabilities() = ToCapabilities(supervisor_.capabilities());
  rpc::RegisterAgentReply reply;
  auto ctx = CallContext();
  grpc::Status s = scheduler_->RegisterAgent(ctx.get(), req, &reply);
  if (s.ok()) {
    server_id_ = reply.server_id();
    lease_ = std::chrono::milliseconds(reply.placement_lease_ms());
    if (options_.gate != nullptr) options_.gate->Set(reply.control_token());
    registered_ = true;
    ++registrations_;
    log_("registered with " + options_.schedulers[sched_at_] + " as server " +
         std::to_string(reply.server_id()) + " (" +
         std::to_string(req.jobs_size()) + " jobs running)");
    // A daemon from before cluster ids sends none: nothing is dropped.
    if (!reply.cluster_id().empty()) {
      for (int64_t id : supervisor_.SetCluster(reply.cluster_id())) {
        log_("job " + std::to_string(id) +
             ": dropped the checkpoint held here, saved in another "
             "cluster (not this cluster's job " +
             std::to_string(id) + ")");
      }
    }
  }
  return s;
}

grpc::Status DaemonLink::SendReport() {
  rpc::AgentReport req;
  req.set_name(options_.name);
  const std::vector<ExitRecord> exits = supervisor_.PendingExits();
  for (const ExitRecord& e : exits) {
    rpc::JobExit* x = req.add_exits();
    x->set_job_id(e.job_id);
    x->set_exit_code(e.exit_code);
    x->set_minibatches(e.minibatches);
    x->set_superseded(e.superseded);
    x->set_killed(e.killed);
    x->set_checkpoint_kept(e.checkpoint_kept);
    x->set_checkpoint_method(e.checkpoint_method);
    x->set_agent_stopped(e.agent_stopping);
    SetMetric(e.metric, x);
  }
  for (const JobView& v : supervisor_.Jobs()) {
    rpc::JobProfile* p = req.add_profiles();
    p->set_job_id(v.job_id);
    *p->mutable_progress() = ToProgress(v, inventory_);
    if (v.state != RunState::kExited) p->set_state(ToRpcState(v.state));
  }
  rpc::AgentReportReply reply;
  auto ctx = CallContext();
  grpc::Status s = scheduler_->Report(ctx.get(), req, &reply);
  if (s.ok() && !exits.empty()) supervisor_.AckExits(exits.back().seq);
  return s;
}

std::vector<int64_t> DaemonLink::Leave() {
  if (!scheduler_ || !registered_) return {};
  rpc::LeaveRequest req;
  req.set_name(options_.name);
  rpc::LeaveReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::min<std::chrono::milliseconds>(
                       options_.rpc_timeout, std::chrono::seconds(2)));
  if (options_.credential) AttachCredential(*options_.credential, &ctx);
  const grpc::Status s = scheduler_->Leave(&ctx, req, &reply);
  if (!s.ok()) {
    log_("could not tell the scheduler this agent stops: " + s.error_message());
    return {};
  }
  char b[160];
  std::snprintf(b, sizeof b,
                "told the scheduler this agent stops: it waits %g s for "
                "it to be back before declaring the server down",
                reply.away_s());
  std::string line = b;
  if (reply.saving_size() > 0) {
    line += "; it has the jobs spanning servers with a part here save (";
    for (int i = 0; i < reply.saving_size(); ++i) {
      line += (i > 0 ? ", " : "") + std::to_string(reply.saving(i));
    }
    line += ")";
  }
  log_(line);
  return {reply.saving().begin(), reply.saving().end()};
}

bool DaemonLink::ReportRound() {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!registered_) {
      grpc::Status s = Register();
      if (!s.ok()) {
        NoteFailure("RegisterAgent", s);
        return false;
      }
    }
    grpc::Status s = SendReport();
    if (s.ok()) {
      if (was_unreachable_) {
        was_unreachable_ = false;
        log_("daemon reachable again");
      }
      return true;
    }
    registered_ = false;  // register again before the next report
    if (s.error_code() != grpc::StatusCode::NOT_FOUND &&
        s.error_code() != grpc::StatusCode::FAILED_PRECONDITION) {
      NoteFailure("Report", s);
      return false;
    }
    // The daemon does not know this agent (it restarted): again at once.
    log_("daemon does not know this agent (" + s.error_message() +
         "); registering again");
  }
  return false;
}

void DaemonLink::ConnectScheduler() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = MakeChannel(options_.schedulers[sched_at_], options_.tls, args);
  scheduler_ = rpc::Scheduler::NewStub(channel_);
}

void DaemonLink::NoteFailure(const char* call, const grpc::Status& s) {
  // Unreachable: the daemon there died or stands by (a standby does not
  // listen); the next one may lead.
  const bool unreachable =
      s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
  if (unreachable && options_.schedulers.size() > 1) {
    log_(std::string(call) + " to " + options_.schedulers[sched_at_] +
         " failed (" + s.error_message() + "); trying " +
         options_.schedulers[(sched_at_ + 1) % options_.schedulers.size()]);
    sched_at_ = (sched_at_ + 1) % options_.schedulers.size();
    ConnectScheduler();
    registered_ = false;
    was_unreachable_ = true;
    return;
  }
  if (!was_unreachable_) {
    log_(std::string(call) + " to " + options_.schedulers[sched_at_] +
         " failed (" + std::to_string(s.error_code()) + ": " +
         s.error_message() + "); retrying with backoff, keeping exits");
  }
  was_unreachable_ = true;
}

void DaemonLink::SuspendForLease(std::chrono::milliseconds unreached) {
  std::string done, failed;
  for (const JobView& v : supervisor_.Jobs()) {
    if (v.state != RunState::kRunning) continue;
    auto r = supervisor_.Suspend(v.job_id);
    if (r.ok()) {
      done += (done.empty() ? "" : ", ") + std::to_string(v.job_id);
    } else {
      failed +=
          "; job " + std::to_string(v.job_id) + ": " + r.status().message();
    }
  }
  log_(
      "no daemon reached for " + std::to_string(unreached.count() / 1000) +
      " s, past the placement lease (" + std::to_string(lease_.count()) +
      " ms): " +
      (done.empty()
           ? std::string("no job ran here")
           : "suspended job" +
                 std::string(done.find(',') == std::string::npos ? " " : "s ") +
                 done) +
      ", before a daemon may place them elsewhere" + failed);
}

void DaemonLink::ReporterLoop() {
  {
    // The first registration carries the capabilities when they come
    // soon (the probe is bounded); else they follow in a new one.
    await_capabilities_(std::chrono::seconds(5));
  }
  const auto min_backoff = std::chrono::milliseconds(100);
  auto backoff = min_backoff;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      wake_ = false;
    }
    const auto began = std::chrono::steady_clock::now();
    const bool ok = ReportRound();
    std::chrono::milliseconds wait = options_.report_interval;
    if (ok) {
      backoff = min_backoff;
      reached_ = began;
      if (suspended_for_lease_) {
        suspended_for_lease_ = false;
        log_(
            "daemon reached again: it resumes the jobs suspended for the "
            "placement lease");
      }
    } else {
      const auto unreached =
          std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - reached_);
      if (lease_.count() > 0 && registrations_ > 0 && !suspended_for_lease_ &&
          unreached >= lease_) {
        suspended_for_lease_ = true;
        SuspendForLease(unreached);
      }
      wait = backoff;
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    // Not past the lease's end unchecked (a call may take rpc_timeout).
    if (lease_.count() > 0 && registrations_ > 0 && !suspended_for_lease_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          reached_ + lease_ - std::chrono::steady_clock::now());
      wait = std::max(std::chrono::milliseconds(0), std::min(wait, left));
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, wait, [&] { return stopping_ || wake_; });
  }
}

}  // namespace gandiva::runtime
