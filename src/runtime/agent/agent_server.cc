#include "runtime/agent/agent_server.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/agent/gpu_inventory.h"
#include "runtime/agent/supervisor.h"

namespace gandiva::runtime {
namespace {

using Clock = std::chrono::steady_clock;

grpc::StatusCode ToGrpcCode(core::StatusCode code) {
  switch (code) {
    case core::StatusCode::kOk:
      return grpc::StatusCode::OK;
    case core::StatusCode::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case core::StatusCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case core::StatusCode::kFailedPrecondition:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case core::StatusCode::kAlreadyExists:
      return grpc::StatusCode::ALREADY_EXISTS;
    case core::StatusCode::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case core::StatusCode::kInternal:
    case core::StatusCode::kIo:
      return grpc::StatusCode::INTERNAL;
  }
  return grpc::StatusCode::UNKNOWN;
}

grpc::Status ToGrpc(const core::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(ToGrpcCode(s.code()), s.message());
}

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

// The request a cached action answered, to catch a reused action_id.
struct ActionKey {
  std::string method;
  int64_t job_id = 0;
  bool operator==(const ActionKey&) const = default;
};

// One job action's result, shared by repeats of the same action_id.
struct ActionEntry {
  ActionKey key;
  bool done = false;  // guarded by ActionCache::mu_
  grpc::Status status;
  std::string reply;  // serialised reply message
};

// action_id -> first result. A repeat waits for a first call still running.
class ActionCache {
 public:
  template <typename Reply>
  grpc::Status Run(const ActionKey& key, int64_t action_id, Reply* reply,
                   const std::function<grpc::Status(Reply*)>& fn) {
    if (action_id == 0) return fn(reply);  // 0: no idempotency asked for
    std::shared_ptr<ActionEntry> entry;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto it = entries_.find(action_id);
      if (it != entries_.end()) {
        entry = it->second;
        if (!(entry->key == key)) {
          return grpc::Status(
              grpc::StatusCode::INVALID_ARGUMENT,
              "action_id: " + std::to_string(action_id) + " was used for " +
                  entry->key.method + " of job " +
                  std::to_string(entry->key.job_id) + ", not " + key.method +
                  " of job " + std::to_string(key.job_id));
        }
        cv_.wait(lock, [&] { return entry->done; });
        reply->ParseFromString(entry->reply);
        return entry->status;
      }
      entry = std::make_shared<ActionEntry>();
      entry->key = key;
      entries_[action_id] = entry;
      order_.push_back(action_id);
      Evict();
    }
    grpc::Status status = fn(reply);
    {
      std::lock_guard<std::mutex> lock(mu_);
      entry->status = status;
      reply->SerializeToString(&entry->reply);
      entry->done = true;
    }
    cv_.notify_all();
    return status;
  }

 private:
  static constexpr size_t kMaxEntries = 8192;

  void Evict() {  // mu_ held
    while (order_.size() > kMaxEntries) {
      auto it = entries_.find(order_.front());
      if (it != entries_.end() && !it->second->done) break;
      if (it != entries_.end()) entries_.erase(it);
      order_.pop_front();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, std::shared_ptr<ActionEntry>> entries_;
  std::deque<int64_t> order_;
};

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

struct AgentServer::Impl final : public rpc::Agent::Service {
  AgentOptions options;
  std::string name;
  std::string address;
  int port = 0;
  std::unique_ptr<GpuInventory> inventory;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<rpc::Scheduler::Stub> scheduler;
  ActionCache actions;
  std::atomic<bool> shutting_down{false};

  // Reporter state.
  std::mutex rep_mu;
  std::condition_variable rep_cv;
  bool wake = false;           // guarded by rep_mu
  bool stopping = false;       // guarded by rep_mu
  bool shut_down = false;      // guarded by rep_mu: Shutdown began
  bool shutdown_done = false;  // guarded by rep_mu: Shutdown finished
  std::atomic<bool> registered{false};
  std::atomic<int> registrations{0};
  std::atomic<int32_t> server_id{-1};
  bool was_unreachable = false;  // reporter thread only
  std::thread reporter;

  // Declared last: destroyed first, while what its exit callback uses lives.
  std::unique_ptr<Supervisor> supervisor;

  void Log(const std::string& msg) {
    if (options.log) {
      options.log(msg);
    } else {
      std::fprintf(stderr, "gandiva-agent[%s]: %s\n", name.c_str(),
                   msg.c_str());
    }
  }

  void Wake() {
    {
      std::lock_guard<std::mutex> lock(rep_mu);
      wake = true;
    }
    rep_cv.notify_all();
  }

  // ------------------------------------------------------------ service

  rpc::AgentJob ToAgentJob(const JobView& v) {
    rpc::AgentJob j;
    j.set_job_id(v.job_id);
    j.set_pid(v.pid);
    j.set_state(v.state == RunState::kSuspended ? rpc::SUSPENDED
                                                : rpc::RUNNING);
    for (int g : v.gpus) j.add_gpus(g);
    *j.mutable_progress() = ToProgress(v);
    return j;
  }

  rpc::Progress ToProgress(const JobView& v) {
    rpc::Progress p;
    p.set_minibatches(static_cast<int64_t>(v.minibatches));
    p.set_minibatch_rate(v.minibatch_rate);
    p.set_uses_library(v.uses_library);
    if (!inventory->is_virtual() && v.state == RunState::kRunning) {
      p.set_gpu_utilization(inventory->Utilization(v.gpus));
      p.set_gpu_memory_bytes(
          inventory->ProcessMemory(v.gpus, ProcessGroupMembers(v.pid)));
    }
    return p;
  }

  grpc::Status StartJob(grpc::ServerContext*, const rpc::StartJobRequest* req,
                        rpc::StartJobReply* reply) override {
    return actions.Run<rpc::StartJobReply>(
        {"StartJob", req->job_id()}, req->action_id(), reply,
        [&](rpc::StartJobReply* out) {
          StartParams p;
          p.job_id = req->job_id();
          p.command = req->spec().command();
          p.workdir = req->spec().workdir();
          for (const auto& [k, v] : req->spec().env()) p.env[k] = v;
          p.gpus.assign(req->gpus().begin(), req->gpus().end());
          p.resume_from = req->resume_from();
          auto r = supervisor->Start(p);
          if (!r.ok()) {
            Log("StartJob " + std::to_string(p.job_id) +
                " failed: " + r.status().ToString());
            return ToGrpc(r.status());
          }
          out->set_pid(r->pid);
          out->set_took_us(r->took_us);
          Log("started job " + std::to_string(p.job_id) + " (pid " +
              std::to_string(r->pid) + ")");
          return grpc::Status::OK;
        });
  }

  grpc::Status SuspendJob(grpc::ServerContext*, const rpc::JobRequest* req,
                          rpc::SuspendReply* reply) override {
    return actions.Run<rpc::SuspendReply>(
        {"SuspendJob", req->job_id()}, req->action_id(), reply,
        [&](rpc::SuspendReply* out) {
          auto r = supervisor->Suspend(req->job_id());
          if (!r.ok()) return ToGrpc(r.status());
          out->set_took_us(r->took_us);
          out->set_at_boundary(r->at_boundary);
          return grpc::Status::OK;
        });
  }

  grpc::Status ResumeJob(grpc::ServerContext*, const rpc::JobRequest* req,
                         rpc::ResumeReply* reply) override {
    return actions.Run<rpc::ResumeReply>(
        {"ResumeJob", req->job_id()}, req->action_id(), reply,
        [&](rpc::ResumeReply* out) {
          auto r = supervisor->Resume(req->job_id());
          if (!r.ok()) return ToGrpc(r.status());
          out->set_took_us(r->took_us);
          return grpc::Status::OK;
        });
  }

  grpc::Status KillJob(grpc::ServerContext*, const rpc::JobRequest* req,
                       rpc::KillReply* reply) override {
    return actions.Run<rpc::KillReply>(
        {"KillJob", req->job_id()}, req->action_id(), reply,
        [&](rpc::KillReply*) {
          return ToGrpc(supervisor->Kill(req->job_id()));
        });
  }

  grpc::Status Status(grpc::ServerContext*, const rpc::AgentStatusRequest*,
                      rpc::AgentStatusReply* reply) override {
    reply->set_server_name(name);
    for (const JobView& v : supervisor->Jobs()) {
      *reply->add_jobs() = ToAgentJob(v);
    }
    return grpc::Status::OK;
  }

  grpc::Status TailLog(grpc::ServerContext* ctx, const rpc::TailLogRequest* req,
                       grpc::ServerWriter<rpc::LogChunk>* writer) override {
    const int64_t job_id = req->job_id();
    const std::string path = supervisor->LogPath(job_id);
    const bool known = supervisor->Job(job_id).ok();
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (!known) {
        return grpc::Status(
            grpc::StatusCode::NOT_FOUND,
            "job " + std::to_string(job_id) + " is not known to this agent");
      }
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "opening " + path + ": " + std::strerror(errno));
    }
    struct stat st;
    int64_t offset = req->offset();
    if (offset < 0 && fstat(fd, &st) == 0) {  // the last -offset bytes
      offset = std::max<int64_t>(0, st.st_size + offset);
    }
    std::vector<char> buf(64 * 1024);
    grpc::Status result = grpc::Status::OK;
    for (;;) {
      // Ended before the read: a read that finds nothing means the end.
      auto view = supervisor->Job(job_id);
      const bool ended = !view.ok() || view->state == RunState::kExited;
      const ssize_t n = pread(fd, buf.data(), buf.size(), offset);
      if (n < 0) {
        result = grpc::Status(grpc::StatusCode::INTERNAL,
                              "reading " + path + ": " + std::strerror(errno));
        break;
      }
      if (n > 0) {
        rpc::LogChunk chunk;
        chunk.set_data(buf.data(), static_cast<size_t>(n));
        chunk.set_offset(offset);
        offset += n;
        if (!writer->Write(chunk)) break;  // the client went away
        continue;
      }
      if (!req->follow() || ended || ctx->IsCancelled() ||
          shutting_down.load()) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    close(fd);
    return result;
  }

  // ----------------------------------------------------------- reporter

  std::unique_ptr<grpc::ClientContext> CallContext() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + options.rpc_timeout);
    return ctx;
  }

  grpc::Status Register() {
    rpc::RegisterAgentRequest req;
    req.set_name(name);
    req.set_address(address);
    for (const GpuInfo& g : inventory->gpus()) {
      rpc::Gpu* out = req.add_gpus();
      out->set_local(g.local);
      out->set_socket(g.socket);
      out->set_pcie_switch(g.pcie_switch);
      out->set_uuid(g.uuid);
      out->set_name(g.name);
      out->set_memory_bytes(g.memory_bytes);
    }
    req.set_sockets(inventory->sockets());
    req.set_switches_per_socket(inventory->switches_per_socket());
    for (const JobView& v : supervisor->Jobs()) *req.add_jobs() = ToAgentJob(v);
    rpc::RegisterAgentReply reply;
    auto ctx = CallContext();
    grpc::Status s = scheduler->RegisterAgent(ctx.get(), req, &reply);
    if (s.ok()) {
      server_id = reply.server_id();
      registered = true;
      ++registrations;
      Log("registered with " + options.scheduler_address + " as server " +
          std::to_string(reply.server_id()) + " (" +
          std::to_string(req.jobs_size()) + " jobs running)");
    }
    return s;
  }

  grpc::Status SendReport() {
    rpc::AgentReport req;
    req.set_name(name);
    const std::vector<ExitRecord> exits = supervisor->PendingExits();
    for (const ExitRecord& e : exits) {
      rpc::JobExit* x = req.add_exits();
      x->set_job_id(e.job_id);
      x->set_exit_code(e.exit_code);
      x->set_minibatches(e.minibatches);
    }
    for (const JobView& v : supervisor->Jobs()) {
      rpc::JobProfile* p = req.add_profiles();
      p->set_job_id(v.job_id);
      *p->mutable_progress() = ToProgress(v);
    }
    rpc::AgentReportReply reply;
    auto ctx = CallContext();
    grpc::Status s = scheduler->Report(ctx.get(), req, &reply);
    if (s.ok() && !exits.empty()) supervisor->AckExits(exits.back().seq);
    return s;
  }

  // One round: register if needed, then report. True when it reached the
  // daemon with this agent known.
  bool ReportRound() {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!registered) {
        grpc::Status s = Register();
        if (!s.ok()) {
          NoteFailure("RegisterAgent", s);
          return false;
        }
      }
      grpc::Status s = SendReport();
      if (s.ok()) {
        if (was_unreachable) {
          was_unreachable = false;
          Log("daemon reachable again");
        }
        return true;
      }
      registered = false;  // register again before the next report
      if (s.error_code() != grpc::StatusCode::NOT_FOUND &&
          s.error_code() != grpc::StatusCode::FAILED_PRECONDITION) {
        NoteFailure("Report", s);
        return false;
      }
      // The daemon does not know this agent (it restarted): again at once.
      Log("daemon does not know this agent (" + s.error_message() +
          "); registering again");
    }
    return false;
  }

  void NoteFailure(const char* call, const grpc::Status& s) {
    if (!was_unreachable) {
      Log(std::string(call) + " to " + options.scheduler_address + " failed (" +
          std::to_string(s.error_code()) + ": " + s.error_message() +
          "); retrying with backoff, keeping exits");
    }
    was_unreachable = true;
  }

  void ReporterLoop() {
    const auto min_backoff = std::chrono::milliseconds(100);
    auto backoff = min_backoff;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(rep_mu);
        if (stopping) return;
        wake = false;
      }
      const bool ok = ReportRound();
      std::chrono::milliseconds wait = options.report_interval;
      if (ok) {
        backoff = min_backoff;
      } else {
        wait = backoff;
        backoff = std::min(backoff * 2, options.max_backoff);
      }
      std::unique_lock<std::mutex> lock(rep_mu);
      rep_cv.wait_for(lock, wait, [&] { return stopping || wake; });
    }
  }

  // ----------------------------------------------------------- lifecycle

  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(rep_mu);
      if (shut_down) return;
      shut_down = true;
    }
    shutting_down = true;
    Log("shutting down");
    if (server) {
      server->Shutdown(std::chrono::system_clock::now() +
                       std::chrono::seconds(2));
    }
    supervisor->KillAll();
    {
      std::lock_guard<std::mutex> lock(rep_mu);
      stopping = true;
    }
    rep_cv.notify_all();
    if (reporter.joinable()) reporter.join();
    // Last try to hand over the exits of the jobs just killed.
    if (scheduler && !supervisor->PendingExits().empty()) {
      if (!registered) (void)Register();
      if (registered) (void)SendReport();
    }
    if (server) server->Wait();
    {
      std::lock_guard<std::mutex> lock(rep_mu);
      shutdown_done = true;
    }
    rep_cv.notify_all();
  }
};

AgentServer::AgentServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AgentServer::~AgentServer() { Shutdown(); }

core::StatusOr<std::unique_ptr<AgentServer>> AgentServer::Start(
    AgentOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->name = options.name.empty() ? Hostname() : options.name;
  if (options.report_interval.count() <= 0) {
    return core::InvalidArgument("--report-interval-ms: must be positive");
  }
  if (options.cpus_per_gpu < 0) {
    return core::InvalidArgument("--cpus-per-gpu: must be >= 0");
  }
  auto listen = SplitHostPort(options.listen_address, "--listen");
  if (!listen.ok()) return listen.status();
  if (!options.scheduler_address.empty()) {
    auto sched = SplitHostPort(options.scheduler_address, "--scheduler");
    if (!sched.ok()) return sched.status();
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
  Impl* raw = impl.get();
  impl->options = std::move(options);
  impl->supervisor =
      std::make_unique<Supervisor>(sopts, [raw](const ExitRecord& e) {
        raw->Log("job " + std::to_string(e.job_id) + " exited with code " +
                 std::to_string(e.exit_code) + " after " +
                 std::to_string(e.minibatches) + " mini-batches");
        raw->Wake();
      });

  grpc::ServerBuilder builder;
  builder.AddListeningPort(impl->options.listen_address,
                           grpc::InsecureServerCredentials(), &impl->port);
  builder.RegisterService(impl.get());
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
           impl->options.work_dir);

  if (!impl->options.scheduler_address.empty()) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    impl->channel =
        grpc::CreateCustomChannel(impl->options.scheduler_address,
                                  grpc::InsecureChannelCredentials(), args);
    impl->scheduler = rpc::Scheduler::NewStub(impl->channel);
    impl->reporter = std::thread([raw] { raw->ReporterLoop(); });
  }
  return std::unique_ptr<AgentServer>(new AgentServer(std::move(impl)));
}

const std::string& AgentServer::name() const { return impl_->name; }
const std::string& AgentServer::address() const { return impl_->address; }
int AgentServer::port() const { return impl_->port; }
const GpuInventory& AgentServer::gpus() const { return *impl_->inventory; }
Supervisor& AgentServer::supervisor() { return *impl_->supervisor; }
bool AgentServer::registered() const { return impl_->registered.load(); }
int AgentServer::registrations() const { return impl_->registrations.load(); }
int32_t AgentServer::server_id() const { return impl_->server_id.load(); }
void AgentServer::ReportNow() { impl_->Wake(); }
void AgentServer::Shutdown() { impl_->Shutdown(); }

void AgentServer::Wait() {
  std::unique_lock<std::mutex> lock(impl_->rep_mu);
  impl_->rep_cv.wait(lock, [&] { return impl_->shutdown_done; });
}

}  // namespace gandiva::runtime
