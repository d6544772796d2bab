// The agent's lifecycle: AgentServer::Start (options checked, the
// supervisor and the agent's parts made, what an earlier run left taken
// up, the service started) and Shutdown (jobs saved or killed, their exits
// handed over or kept for the next run), and the accessors.
#include "runtime/agent/agent_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <sstream>
#include <utility>
#include <vector>

#include "config/agent_check.h"
#include "runtime/agent/agent_impl.h"
#include "runtime/agent/agent_rpc.h"
#include "runtime/agent/criu.h"
#include "runtime/auth/credentials.h"

namespace gandiva::runtime {
namespace {

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') {
    return "localhost";
  }
  return buf;
}

bool IsWildcardHost(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::" ||
         host == "*";
}

}  // namespace

core::StatusOr<std::pair<std::string, int>> SplitHostPort(
    const std::string& address, std::string_view field) {
  const size_t colon = address.rfind(':');
  const std::string bad =
      std::string(field) + ": expected HOST:PORT, got '" + address + "'";
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return core::InvalidArgument(bad);
  }
  std::string host = address.substr(0, colon);
  const std::string port_text = address.substr(colon + 1);
  if (port_text.find_first_not_of("0123456789") != std::string::npos ||
      port_text.size() > 5) {
    return core::InvalidArgument(bad);
  }
  const int port = std::stoi(port_text);
  if (port > 65535) return core::InvalidArgument(bad + " (port > 65535)");
  return std::make_pair(std::move(host), port);
}

void AgentServer::Impl::Log(const std::string& msg) {
  if (options.log) {
    options.log(msg);
  } else {
    std::fprintf(stderr, "gandiva-agent[%s]: %s\n", name.c_str(), msg.c_str());
  }
}

bool AgentServer::Impl::WaitForCapabilities(
    std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(caps_mu);
  return caps_cv.wait_for(lock, timeout, [&] { return caps_done; });
}

void AgentServer::Impl::ProbeCapabilities() {
  Capabilities c;
  ProbeMps(&c);
  if (options.criu) {
    ProbeCriu(&c, options.criu_probe_timeout);
  } else {
    c.criu_detail = "turned off on this agent (--no-criu)";
  }
  supervisor->SetCapabilities(c);
  Log("capabilities: CRIU " + std::string(c.criu ? "usable" : "not usable") +
      " (" + c.criu_detail + "); MPS " + (c.mps ? "usable" : "not usable") +
      " (" + c.mps_detail + ")");
  {
    std::lock_guard<std::mutex> lock(caps_mu);
    caps_done = true;
  }
  caps_cv.notify_all();
  // Registered without them: register again with them.
  link->RegisterAgain();
}

void AgentServer::Impl::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(life_mu);
    if (shut_down) return;
    shut_down = true;
  }
  shutting_down = true;  // no new work (RefuseWhileStopping)
  Log("shutting down");
  transfer->Shutdown();
  // The reporter stops first: an exit of a job saved below must not
  // reach the daemon before it is marked checkpoint_kept. The logs' bound
  // stops with it.
  link->Stop();
  logs->StopCapping();
  const std::vector<int64_t> exiting = link->Leave();
  if (options.stop_checkpoint_timeout.count() > 0) {
    std::vector<std::string> failures;
    const std::vector<int64_t> saved = supervisor->CheckpointForStop(
        options.stop_checkpoint_timeout, &failures, exiting,
        options.criu && options.criu_at_stop);
    for (int64_t id : saved) {
      Log("job " + std::to_string(id) + ": saved its checkpoint, kept in " +
          supervisor->HeldCheckpoint(id) + " for when this agent runs again");
    }
    for (const std::string& why : failures) {
      Log("stopping without a checkpoint: " + why);
    }
  }
  if (server) {
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::seconds(2));
  }
  supervisor->KillAll(/*agent_stopping=*/true);
  if (caps_thread.joinable()) caps_thread.join();
  // Last try to hand over the exits of the jobs just killed.
  link->FinalReport();
  // Jobs that ended by themselves and the daemon has not heard of (it is
  // unreachable): the next run of this agent reports them, or the daemon,
  // missing the jobs then, would start them again.
  if (const size_t kept = supervisor->SaveUnreportedExits(); kept > 0) {
    Log("kept the exits of " + std::to_string(kept) +
        " jobs the scheduler has not heard of, for the next run of this "
        "agent to report");
  }
  if (server) server->Wait();
  {
    std::lock_guard<std::mutex> lock(life_mu);
    shutdown_done = true;
  }
  life_cv.notify_all();
}

AgentServer::AgentServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AgentServer::~AgentServer() { Shutdown(); }

core::StatusOr<std::unique_ptr<AgentServer>> AgentServer::Start(
    AgentOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->name = options.name.empty() ? Hostname() : options.name;
  if (std::string err = config::CheckServerName(impl->name); !err.empty()) {
    return core::InvalidArgument((options.name.empty()
                                      ? "--name (by default the hostname): "
                                      : "--name: ") +
                                 err);
  }
  std::vector<std::string> schedulers;
  if (options.report_interval.count() <= 0) {
    return core::InvalidArgument("--report-interval-ms: must be positive");
  }
  if (options.cpus_per_gpu < 0) {
    return core::InvalidArgument("--cpus-per-gpu: must be >= 0");
  }
  std::map<std::string, std::string> user_map;
  for (const std::string& m : options.map_user) {
    const size_t eq = m.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == m.size()) {
      return core::InvalidArgument("--map-user: '" + m +
                                   "' is not CLUSTER_USER=UNIX_ACCOUNT");
    }
    user_map[m.substr(0, eq)] = m.substr(eq + 1);
  }
  if (options.run_as_owner && ::geteuid() != 0) {
    return core::InvalidArgument(
        "--run-as-owner: the agent must run as root to run jobs as their "
        "owners");
  }
  if (!options.run_as_owner && (!user_map.empty() || options.allow_root_jobs)) {
    return core::InvalidArgument(
        "--map-user and --allow-root-jobs need --run-as-owner");
  }
  auto listen = SplitHostPort(options.listen_address, "--listen");
  if (!listen.ok()) return listen.status();
  auto tls = LoadTls(options.tls, "--tls-");
  if (!tls.ok()) return tls.status();
  impl->tls = std::move(*tls);
  std::optional<Credential> credential;
  if (!options.credentials.empty()) {
    auto c = ReadCredential(options.credentials);
    if (!c.ok()) {
      return core::InvalidArgument("--credentials: " + c.status().message());
    }
    credential = std::move(*c);
  }
  // The bulk channel is plain TCP: with TLS, checkpoints go over the
  // (encrypted) gRPC stream unless the operator says the network is safe.
  const bool bulk_off_for_tls =
      impl->tls.has_value() && options.bulk_transfer && !options.bulk_plaintext;
  if (bulk_off_for_tls) options.bulk_transfer = false;
  if (!options.scheduler_address.empty()) {
    std::stringstream list(options.scheduler_address);
    std::string one;
    while (std::getline(list, one, ',')) {
      auto sched = SplitHostPort(one, "--scheduler");
      if (!sched.ok()) return sched.status();
      schedulers.push_back(one);
    }
  }
  if (options.work_dir.empty()) {
    options.work_dir = "/tmp/gandiva-agent-" + impl->name;
  }
  std::error_code ec;
  std::filesystem::create_directories(options.work_dir + "/jobs", ec);
  if (ec) {
    return core::IoError("--work-dir: cannot create " + options.work_dir +
                         "/jobs: " + ec.message());
  }
  if (options.checkpoint_root.empty()) {
    struct stat st;
    options.checkpoint_root = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)
                                  ? "/dev/shm/gandiva-" + impl->name
                                  : options.work_dir + "/checkpoints";
  }
  std::filesystem::create_directories(options.checkpoint_root + "/jobs", ec);
  if (ec) {
    return core::IoError("--checkpoint-dir: cannot create " +
                         options.checkpoint_root + "/jobs: " + ec.message());
  }
  if (options.checkpoint_timeout.count() <= 0 ||
      options.receive_timeout.count() <= 0) {
    return core::InvalidArgument("--checkpoint-timeout-ms: must be positive");
  }
  if (options.stop_checkpoint_timeout.count() < 0) {
    return core::InvalidArgument("--stop-checkpoint-timeout-ms: must be >= 0");
  }
  if (options.bulk_accept_timeout.count() <= 0) {
    return core::InvalidArgument("bulk_accept_timeout: must be positive");
  }
  if (options.bulk_streams < 1 || options.bulk_streams > kBulkMaxStreams) {
    return core::InvalidArgument("--bulk-streams: must be 1 to " +
                                 std::to_string(kBulkMaxStreams));
  }

  GpuInventoryOptions gopts;
  gopts.virtual_gpus = options.virtual_gpus;
  gopts.virtual_only = options.virtual_only;
  gopts.sockets = options.sockets;
  gopts.switches_per_socket = options.switches_per_socket;
  gopts.nvml_library = options.nvml_library;
  auto inventory = GpuInventory::Discover(gopts);
  if (!inventory.ok()) return inventory.status();
  impl->inventory = std::move(*inventory);

  SupervisorOptions sopts;
  sopts.name = impl->name;
  sopts.work_dir = options.work_dir;
  sopts.page_dir = options.page_dir;
  sopts.num_gpus = static_cast<int>(impl->inventory->gpus().size());
  sopts.virtual_gpus = impl->inventory->is_virtual();
  sopts.cpus_per_gpu = options.cpus_per_gpu;
  sopts.kill_grace = options.kill_grace;
  sopts.suspend_timeout = options.suspend_timeout;
  sopts.checkpoint_root = options.checkpoint_root;
  sopts.checkpoint_timeout = options.checkpoint_timeout;
  sopts.library_start_grace = options.library_start_grace;
  sopts.run_as_owner = options.run_as_owner;
  sopts.user_map = std::move(user_map);
  sopts.allow_root_jobs = options.allow_root_jobs;
  sopts.job_shim = options.job_shim;
  Impl* raw = impl.get();
  impl->options = std::move(options);
  const AgentOptions& o = impl->options;
  // The exit callback uses the link made below: no job runs before it is
  // (jobs start through the service, which is not up yet).
  impl->supervisor =
      std::make_unique<Supervisor>(sopts, [raw](const ExitRecord& e) {
        raw->Log("job " + std::to_string(e.job_id) + " exited with code " +
                 std::to_string(e.exit_code) + " after " +
                 std::to_string(e.minibatches) + " mini-batches");
        raw->link->Wake();
      });
  auto log = [raw](const std::string& m) { raw->Log(m); };
  impl->gate = std::make_unique<ControlGate>(!schedulers.empty());
  impl->logs = std::make_unique<JobLogs>(*impl->supervisor, impl->tls,
                                         o.max_log_bytes, o.report_interval,
                                         impl->shutting_down, *impl->gate, log);
  CheckpointTransferOptions topts;
  topts.bulk_transfer = o.bulk_transfer;
  topts.stream_to_job = o.stream_to_job;
  topts.bulk_streams = o.bulk_streams;
  topts.bulk_accept_timeout = o.bulk_accept_timeout;
  topts.receive_timeout = o.receive_timeout;
  topts.listen_host = listen->first;
  topts.tls = impl->tls;
  impl->transfer = std::make_unique<CheckpointTransfer>(
      std::move(topts), *impl->supervisor, *impl->logs, impl->shutting_down,
      log);
  DaemonLinkOptions lopts;
  lopts.name = impl->name;
  lopts.schedulers = std::move(schedulers);
  lopts.tls = impl->tls;
  lopts.credential = std::move(credential);
  lopts.rpc_timeout = o.rpc_timeout;
  lopts.report_interval = o.report_interval;
  lopts.max_backoff = o.max_backoff;
  lopts.gate = impl->gate.get();
  impl->link = std::make_unique<DaemonLink>(
      std::move(lopts), *impl->inventory, *impl->supervisor,
      [raw](std::chrono::milliseconds timeout) {
        (void)raw->WaitForCapabilities(timeout);
      },
      log);
  // Jobs an earlier run of this agent left running (it was killed or
  // crashed): those started through the shim are taken back, and reported
  // at registration as running here; the rest are killed (the daemon
  // starts them again, from their checkpoint if one is held).
  const Supervisor::TakenBack left = impl->supervisor->TakeBackLeftovers();
  for (int64_t id : left.adopted) {
    raw->Log("job " + std::to_string(id) +
             ": took back the process an earlier run of this agent started");
  }
  for (int64_t id : left.ended) {
    raw->Log("job " + std::to_string(id) +
             ": ended while no agent ran; reporting its exit");
  }
  for (int64_t id : left.killed) {
    raw->Log("job " + std::to_string(id) +
             ": killed the process an earlier run of this agent left running "
             "(it could not be taken back)");
  }
  if (impl->supervisor->job_shim().empty()) {
    raw->Log(
        "no gandiva-job-shim: jobs run without it, and a restart of "
        "this agent will lose them (--job-shim)");
  }
  // Exits an earlier run could not report: they go with the first report.
  if (const size_t n = impl->supervisor->RecoverUnreportedExits(); n > 0) {
    raw->Log("reporting the exits of " + std::to_string(n) +
             " jobs that ended before an earlier run of this agent stopped");
  }
  // Checkpoints an earlier run kept (saved as it stopped, or left by a
  // move): the daemon learns of them at registration and restarts the
  // jobs it still wants here from them.
  for (int64_t id : impl->supervisor->RecoverCheckpoints()) {
    raw->Log("job " + std::to_string(id) + ": holding the checkpoint in " +
             impl->supervisor->HeldCheckpoint(id) +
             " that an earlier run of this agent kept");
  }

  grpc::ServerBuilder builder;
  builder.AddListeningPort(impl->options.listen_address,
                           ServerCredentials(impl->tls), &impl->port);
  builder.RegisterService(impl.get());
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    impl->server.reset();
    return core::Status(
        core::StatusCode::kUnavailable,
        "--listen: cannot listen on " + impl->options.listen_address);
  }
  std::string host = impl->options.advertise_host;
  if (host.empty()) {
    host = IsWildcardHost(listen->first) ? Hostname() : listen->first;
  }
  impl->address = host + ":" + std::to_string(impl->port);
  raw->Log(std::to_string(impl->inventory->gpus().size()) +
           (impl->inventory->is_virtual()
                ? " virtual GPUs (" + impl->inventory->nvml_note() + ")"
                : " GPUs from NVML") +
           "; serving on " + impl->address + "; work dir " +
           impl->options.work_dir + "; checkpoints in " +
           impl->options.checkpoint_root +
           (bulk_off_for_tls ? "; checkpoints move over the TLS gRPC stream "
                               "(the bulk channel is plain TCP: "
                               "--bulk-plaintext turns it on)"
                             : ""));
  impl->caps_thread = std::thread([raw] { raw->ProbeCapabilities(); });

  impl->link->Start(impl->address);
  impl->logs->StartCapping();
  return std::unique_ptr<AgentServer>(new AgentServer(std::move(impl)));
}

const std::string& AgentServer::name() const { return impl_->name; }
const std::string& AgentServer::address() const { return impl_->address; }
int AgentServer::port() const { return impl_->port; }
const GpuInventory& AgentServer::gpus() const { return *impl_->inventory; }
Supervisor& AgentServer::supervisor() { return *impl_->supervisor; }
bool AgentServer::registered() const { return impl_->link->registered(); }
int AgentServer::registrations() const { return impl_->link->registrations(); }
int32_t AgentServer::server_id() const { return impl_->link->server_id(); }
void AgentServer::ReportNow() { impl_->link->Wake(); }
Capabilities AgentServer::capabilities() const {
  return impl_->supervisor->capabilities();
}
bool AgentServer::WaitForCapabilities(std::chrono::milliseconds timeout) const {
  return impl_->WaitForCapabilities(timeout);
}
void AgentServer::Shutdown() { impl_->Shutdown(); }

void AgentServer::Wait() {
  std::unique_lock<std::mutex> lock(impl_->life_mu);
  impl_->life_cv.wait(lock, [&] { return impl_->shutdown_done; });
}

}  // namespace gandiva::runtime
