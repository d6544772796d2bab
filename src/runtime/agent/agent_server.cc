#include "runtime/agent/agent_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
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
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "client/progress_page.h"
#include "proto/gandiva.grpc.pb.h"
#include "runtime/agent/bulk_transfer.h"
#include "runtime/agent/criu.h"
#include "runtime/agent/gpu_inventory.h"
#include "runtime/agent/log_cap.h"
#include "runtime/agent/supervisor.h"
#include "runtime/tls/tls.h"

namespace gandiva::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Checkpoint files travel in chunks of this size (one message each).
constexpr size_t kChunkBytes = 2 << 20;
// gRPC message size limit on the Agent service and agent-to-agent channels.
constexpr int kMaxMessageBytes = 64 << 20;

int64_t MicrosSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() -
                                                               t0)
      .count();
}

// Regular files under `dir`, relative paths, sorted; the warm start's own
// files (IsWarmStartFile) and partial files of a transfer are left out.
std::vector<std::string> CheckpointFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string name = it->path().filename().string();
    if (IsWarmStartFile(name)) continue;
    if (name.ends_with(".gandiva-part")) continue;
    out.push_back(std::filesystem::relative(it->path(), dir, ec).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

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

// A job's metric into an rpc::Progress or an rpc::JobExit (the same
// fields); nothing when it reported none.
template <typename Message>
void SetMetric(const client::Metric& m, Message* out) {
  if (m.reports == 0) return;
  out->set_metric(m.value);
  out->set_metric_minibatches(static_cast<int64_t>(m.minibatches));
  out->set_metric_reports(static_cast<int64_t>(m.reports));
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
  // Mutual TLS (--tls-*), if configured: the Agent service, the calls to
  // the daemon and to other agents.
  std::optional<TlsConfig> tls;
  std::string name;
  std::string address;
  std::string listen_host;  // the bulk channel listens there too
  int port = 0;
  std::unique_ptr<GpuInventory> inventory;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
  // The daemons to report to (--scheduler, comma-separated): a leader and
  // its standbys. The reporter talks to schedulers[sched_at] and moves to
  // the next when it cannot reach it (reporter thread only).
  std::vector<std::string> schedulers;
  size_t sched_at = 0;
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
  std::thread log_capper;
  // What CapLogOf said once (the log_capper thread and FetchEarlierLog):
  // that logs cannot be bounded here, and the jobs whose log was bounded.
  std::mutex capped_mu;
  bool log_cap_failed = false;    // guarded by capped_mu
  std::set<int64_t> capped_logs;  // guarded by capped_mu

  // Capabilities, probed once in the background at start.
  mutable std::mutex caps_mu;
  mutable std::condition_variable caps_cv;
  bool caps_done = false;  // guarded by caps_mu
  std::thread caps_thread;

  // Bulk channels offered for checkpoints held here.
  std::unique_ptr<BulkServer> bulk;

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

  // A process's state as the daemon is told it (one that exited and is
  // not reaped yet: RUNNING).
  static rpc::JobState ToRpcState(RunState s) {
    return s == RunState::kSuspended ? rpc::SUSPENDED : rpc::RUNNING;
  }

  rpc::AgentJob ToAgentJob(const JobView& v) {
    rpc::AgentJob j;
    j.set_job_id(v.job_id);
    j.set_pid(v.pid);
    j.set_state(ToRpcState(v.state));
    for (int g : v.gpus) j.add_gpus(g);
    *j.mutable_progress() = ToProgress(v);
    j.set_has_checkpoint(v.has_checkpoint);
    j.set_submitted_us(v.submitted_us);
    if (!v.spec.empty() && !j.mutable_spec()->ParseFromString(v.spec)) {
      j.clear_spec();
    }
    return j;
  }

  rpc::Progress ToProgress(const JobView& v) {
    rpc::Progress p;
    p.set_minibatches(static_cast<int64_t>(v.minibatches));
    p.set_minibatch_rate(v.minibatch_rate);
    p.set_uses_library(v.uses_library);
    p.set_sharing(v.sharing);
    p.set_world_size(v.world_size);
    SetMetric(v.metric, &p);
    if (!inventory->is_virtual() && v.state == RunState::kRunning) {
      p.set_gpu_utilization(inventory->Utilization(v.gpus));
      p.set_gpu_memory_bytes(
          inventory->ProcessMemory(v.gpus, ProcessGroupMembers(v.pid)));
    }
    return p;
  }

  grpc::Status StartJob(grpc::ServerContext*, const rpc::StartJobRequest* req,
                        rpc::StartJobReply* reply) override {
    if (auto s = RefuseWhileStopping("StartJob"); !s.ok()) return s;
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
          p.restartable = req->spec().restartable();
          p.warm = req->warm();
          p.resume_local = req->resume_local();
          p.submitted_us = req->submitted_us();
          if (!req->has_gang()) p.spec = req->spec().SerializeAsString();
          int32_t master_port = 0;
          if (req->has_gang()) {
            auto env = GangEnv(*req, &master_port);
            if (!env.ok()) return ToGrpc(env.status());
            p.gang_env = std::move(*env);
            p.without_library = req->gang().node_rank() > 0;
          }
          auto r = supervisor->Start(p);
          if (!r.ok()) {
            Log("StartJob " + std::to_string(p.job_id) +
                " failed: " + r.status().ToString());
            return ToGrpc(r.status());
          }
          out->set_pid(r->pid);
          out->set_took_us(r->took_us);
          out->set_master_port(master_port);
          Log("started job " + std::to_string(p.job_id) + " (pid " +
              std::to_string(r->pid) + ")" +
              (req->has_gang()
                   ? " part " + std::to_string(req->gang().node_rank()) +
                         " of " + std::to_string(req->gang().nodes()) +
                         ", ranks meet at " +
                         p.gang_env["GANDIVA_MASTER_ADDR"] + ":" +
                         std::to_string(master_port)
                   : std::string()) +
              (p.warm           ? " warm, waiting for its checkpoint"
               : p.resume_local ? " from its checkpoint here"
                                : ""));
          if (p.warm && req->await_ready_ms() > 0) {
            auto w = supervisor->AwaitWarm(
                p.job_id, std::chrono::milliseconds(req->await_ready_ms()));
            if (!w.ok()) {
              Log("StartJob " + std::to_string(p.job_id) +
                  " failed: " + w.status().ToString());
              return ToGrpc(w.status());
            }
            out->set_ready(w->ready);
            out->set_ready_us(w->ready_us);
          }
          return grpc::Status::OK;
        });
  }

  // The launcher's variables for one part of a multi-server job; the lead
  // (node_rank 0) given no port gets a free one on this host.
  static core::StatusOr<std::map<std::string, std::string>> GangEnv(
      const rpc::StartJobRequest& req, int32_t* master_port) {
    const rpc::Gang& g = req.gang();
    const int local = req.gpus_size();
    if (g.nodes() < 2 || g.node_rank() < 0 || g.node_rank() >= g.nodes()) {
      return core::InvalidArgument(
          "gang: node_rank " + std::to_string(g.node_rank()) + " of " +
          std::to_string(g.nodes()) + " parts (a gang has 2 or more)");
    }
    if (local < 1 || g.rank_offset() < 0 ||
        g.rank_offset() + local > g.world_size()) {
      return core::InvalidArgument(
          "gang: ranks " + std::to_string(g.rank_offset()) + ".." +
          std::to_string(g.rank_offset() + local - 1) + " outside world size " +
          std::to_string(g.world_size()));
    }
    if ((g.node_rank() == 0) != (g.rank_offset() == 0)) {
      return core::InvalidArgument(
          "gang: the lead (node_rank 0), and it alone, holds rank 0");
    }
    if (g.master_addr().empty()) {
      return core::InvalidArgument("gang.master_addr: empty");
    }
    *master_port = g.master_port();
    if (*master_port <= 0) {
      if (g.node_rank() != 0) {
        return core::InvalidArgument(
            "gang.master_port: only the lead may leave it to the agent");
      }
      auto port = FreeTcpPort();
      if (!port.ok()) return port.status();
      *master_port = *port;
    }
    return std::map<std::string, std::string>{
        {"GANDIVA_NNODES", std::to_string(g.nodes())},
        {"GANDIVA_NODE_RANK", std::to_string(g.node_rank())},
        {"GANDIVA_WORLD_SIZE", std::to_string(g.world_size())},
        {"GANDIVA_LOCAL_WORLD_SIZE", std::to_string(local)},
        {"GANDIVA_RANK_OFFSET", std::to_string(g.rank_offset())},
        {"GANDIVA_MASTER_ADDR", g.master_addr()},
        {"GANDIVA_MASTER_PORT", std::to_string(*master_port)}};
  }

  // A TCP port free on all interfaces now (the ranks bind it moments later).
  static core::StatusOr<int32_t> FreeTcpPort() {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return core::IoError(std::string("socket: ") + std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof addr;
    const bool ok =
        bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
    const int err = errno;
    close(fd);
    if (!ok) {
      return core::IoError(std::string("picking a free port: ") +
                           std::strerror(err));
    }
    return static_cast<int32_t>(ntohs(addr.sin_port));
  }

  grpc::Status SuspendJob(grpc::ServerContext*, const rpc::JobRequest* req,
                          rpc::SuspendReply* reply) override {
    if (auto s = RefuseWhileStopping("SuspendJob", req->job_id()); !s.ok()) {
      return s;
    }
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
    if (auto s = RefuseWhileStopping("ResumeJob", req->job_id()); !s.ok()) {
      return s;
    }
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
          core::Status s = supervisor->Kill(req->job_id());
          const bool had = !req->keep_checkpoint() &&
                           supervisor->DropCheckpoint(req->job_id());
          if (s.code() == core::StatusCode::kNotFound && had) {
            return grpc::Status::OK;  // only its checkpoint was left here
          }
          return ToGrpc(s);
        });
  }

  grpc::Status CheckpointJob(grpc::ServerContext*,
                             const rpc::CheckpointRequest* req,
                             rpc::CheckpointReply* reply) override {
    // Stopping, the agent saves its own jobs (CheckpointForStop); the
    // daemon saves a multi-server job's through its lead's part.
    if (auto s = RefuseWhileStopping("CheckpointJob", req->job_id()); !s.ok()) {
      return s;
    }
    return actions.Run<rpc::CheckpointReply>(
        {"CheckpointJob", req->job_id()}, req->action_id(), reply,
        [&](rpc::CheckpointReply* out) {
          auto r = supervisor->Checkpoint(req->job_id(), req->resize_to(),
                                          req->reply_when_saved());
          if (!r.ok()) {
            Log("CheckpointJob " + std::to_string(req->job_id()) +
                " failed: " + r.status().ToString());
            return ToGrpc(r.status());
          }
          out->set_took_us(r->took_us);
          out->set_save_us(r->save_us);
          out->set_bytes(r->bytes);
          out->set_files(r->files);
          out->set_method(r->method);
          out->set_minibatches(r->minibatches);
          out->set_exiting(r->exiting);
          Log("checkpointed job " + std::to_string(req->job_id()) + " (" +
              r->method + ", " + std::to_string(r->files) + " files, " +
              std::to_string(r->bytes) + " bytes, " +
              std::to_string(r->took_us) + " us)");
          return grpc::Status::OK;
        });
  }

  grpc::Status ReadCheckpoint(
      grpc::ServerContext* ctx, const rpc::ReadCheckpointRequest* req,
      grpc::ServerWriter<rpc::CheckpointChunk>* writer) override {
    const int64_t job_id = req->job_id();
    const std::string dir = supervisor->HeldCheckpoint(job_id);
    if (dir.empty()) {
      return grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          "no checkpoint of job " + std::to_string(job_id) + " on this agent");
    }
    std::vector<char> buf(kChunkBytes);
    for (const std::string& rel : CheckpointFiles(dir)) {
      const std::string path = dir + "/" + rel;
      const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        return grpc::Status(grpc::StatusCode::INTERNAL,
                            "opening " + path + ": " + std::strerror(errno));
      }
      struct stat st;
      if (fstat(fd, &st) != 0) {
        close(fd);
        return grpc::Status(grpc::StatusCode::INTERNAL,
                            "stat " + path + ": " + std::strerror(errno));
      }
      int64_t offset = 0;
      bool first = true;
      for (;;) {
        const ssize_t n = pread(fd, buf.data(), buf.size(), offset);
        if (n < 0) {
          close(fd);
          return grpc::Status(grpc::StatusCode::INTERNAL,
                              "reading " + path + ": " + std::strerror(errno));
        }
        if (n == 0 && !first) break;
        rpc::CheckpointChunk chunk;
        chunk.set_path(rel);
        chunk.set_offset(offset);
        chunk.set_data(buf.data(), static_cast<size_t>(n));
        chunk.set_file_size(st.st_size);
        chunk.set_mode(st.st_mode & 07777);
        if (ctx->IsCancelled() || !writer->Write(chunk)) {
          close(fd);
          return grpc::Status(grpc::StatusCode::CANCELLED,
                              "the reader went away");
        }
        first = false;
        offset += n;
        if (n == 0) break;
      }
      close(fd);
    }
    return grpc::Status::OK;
  }

  grpc::Status OpenCheckpointTransfer(
      grpc::ServerContext* ctx, const rpc::OpenCheckpointTransferRequest* req,
      rpc::OpenCheckpointTransferReply* reply) override {
    if (auto s = RefuseWhileStopping("OpenCheckpointTransfer"); !s.ok()) {
      return s;
    }
    if (!options.bulk_transfer) {
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          "the bulk channel is switched off on this agent "
                          "(--no-bulk-transfer)");
    }
    const int64_t job_id = req->job_id();
    const std::string what = "the checkpoint of job " + std::to_string(job_id);
    const std::string dir = supervisor->HeldCheckpoint(job_id);
    if (dir.empty()) {
      return grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          "no checkpoint of job " + std::to_string(job_id) + " on this agent");
    }
    auto deadline = Clock::now() + options.bulk_accept_timeout;
    const auto call_left = ctx->deadline() - std::chrono::system_clock::now();
    if (call_left < options.bulk_accept_timeout) {
      deadline =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(call_left);
    }
    auto offered = bulk->Offer(listen_host, dir, CheckpointFiles(dir), deadline,
                               what, req->streams());
    if (!offered.ok()) {
      Log("offering " + what +
          " over the bulk channel failed: " + offered.status().ToString());
      return ToGrpc(offered.status());
    }
    reply->set_port(offered->port);
    reply->set_token(offered->token);
    reply->set_streams(offered->streams);
    for (const BulkFile& f : offered->files) {
      rpc::CheckpointFile* out = reply->add_files();
      out->set_path(f.path);
      out->set_size(f.size);
      out->set_mode(f.mode);
    }
    return grpc::Status::OK;
  }

  static grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx,
                                           Clock::time_point end) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::duration_cast<std::chrono::milliseconds>(
                          end - Clock::now()));
    return ctx;
  }

  // Pulls the checkpoint of `job_id` from the agent at `source` into `dir`:
  // over the bulk channel when both agents have it, else over the
  // ReadCheckpoint stream. *via: "tcp" (one stream), "tcp xN" (N parallel
  // streams) or "grpc". Adds the bytes written to *bytes.
  // stream_file non-empty: the warm process there can take that one file
  // from the bulk channel itself (GANDIVA_STREAM_OK_FILE). When the
  // checkpoint is that file alone, nothing is received: the offer is
  // written to `dir` (GANDIVA_STREAM_OFFER_FILE), *streamed is set and
  // *bytes is the file's size.
  grpc::Status FetchCheckpoint(int64_t job_id, const std::string& source,
                               const std::string& dir, Clock::time_point end,
                               int64_t* bytes, std::string* via,
                               const std::string& stream_file = "",
                               bool* streamed = nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxMessageBytes);
    args.SetMaxSendMessageSize(kMaxMessageBytes);
    auto source_channel = MakeChannel(source, tls, args);
    auto stub = rpc::Agent::NewStub(source_channel);
    if (options.bulk_transfer) {
      bool fall_back = false;
      int streams = 1;
      grpc::Status s = FetchBulk(job_id, source, *stub, dir, end, bytes,
                                 &fall_back, &streams, stream_file, streamed);
      if (s.ok()) {
        *via = streams > 1 ? "tcp x" + std::to_string(streams) : "tcp";
        return s;
      }
      if (!fall_back) return s;
      Log("job " + std::to_string(job_id) + ": " + s.error_message() +
          "; fetching the checkpoint over the gRPC stream instead");
    }
    *via = "grpc";
    return FetchStream(job_id, source, *stub, dir, end, bytes);
  }

  // The bulk channel, over options.bulk_streams streams or fewer as the
  // source grants (*streams: how many), received here or, see
  // FetchCheckpoint, offered to the job. An error before any file's byte
  // came (the source does not offer it, it cannot be reached, a stream
  // cannot connect) sets *fall_back.
  grpc::Status FetchBulk(int64_t job_id, const std::string& source,
                         rpc::Agent::Stub& stub, const std::string& dir,
                         Clock::time_point end, int64_t* bytes, bool* fall_back,
                         int* streams, const std::string& stream_file,
                         bool* streamed) {
    const std::string what = "fetching the checkpoint of job " +
                             std::to_string(job_id) + " from " + source;
    grpc::ClientContext ctx;
    rpc::OpenCheckpointTransferRequest oreq;
    oreq.set_job_id(job_id);
    oreq.set_streams(options.bulk_streams);
    rpc::OpenCheckpointTransferReply offer;
    grpc::Status s =
        stub.OpenCheckpointTransfer(WithDeadline(&ctx, end), oreq, &offer);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          what + ": " + s.error_message());
    }
    *fall_back = true;
    if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      return grpc::Status(s.error_code(), source + " offers no bulk channel (" +
                                              s.error_message() + ")");
    }
    if (!s.ok()) {
      return grpc::Status(s.error_code(), "opening the bulk channel of " +
                                              source + " failed (" +
                                              s.error_message() + ")");
    }
    auto host = SplitHostPort(source, "source_address");
    if (!host.ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          host.status().message());
    }
    // An older source leaves `streams` out: one.
    const int granted = std::max(1, offer.streams());
    if (offer.token().size() != kBulkTokenBytes || offer.port() <= 0 ||
        offer.port() > 65535 || granted > options.bulk_streams) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          source + " offered an unusable bulk channel (port " +
                              std::to_string(offer.port()) + ", a " +
                              std::to_string(offer.token().size()) +
                              "-byte token, " + std::to_string(granted) +
                              " streams of " +
                              std::to_string(options.bulk_streams) + ")");
    }
    if (!stream_file.empty() && offer.files_size() == 1 &&
        offer.files(0).path() == stream_file) {
      // The warm process takes the file from the source itself.
      core::Status w = WriteStreamOffer(dir, host->first, offer, granted);
      if (!w.ok()) return ToGrpc(w);
      *fall_back = false;
      *streams = granted;
      *streamed = true;
      *bytes += offer.files(0).size();
      return grpc::Status::OK;
    }
    // Every stream connects before any byte is taken, so that one that
    // cannot still leaves the gRPC stream to fall back on.
    std::vector<int> socks;
    for (int k = 0; k < granted; ++k) {
      auto fd = ConnectBulk(host->first, offer.port(), offer.token(), end, k,
                            granted);
      if (!fd.ok()) {
        for (int sock : socks) close(sock);
        return grpc::Status(
            grpc::StatusCode::UNAVAILABLE,
            (granted > 1 ? "stream " + std::to_string(k) + " of " +
                               std::to_string(granted) + ": "
                         : std::string()) +
                fd.status().message());
      }
      socks.push_back(*fd);
    }
    *fall_back = false;
    *streams = granted;
    std::vector<BulkFile> files;
    for (const rpc::CheckpointFile& f : offer.files()) {
      files.push_back({f.path(), f.size(), f.mode() != 0 ? f.mode() : 0600});
    }
    core::Status r =
        ReceiveBulkFiles(socks, files, dir, end, &shutting_down, bytes);
    for (int sock : socks) close(sock);
    if (!r.ok()) {
      return grpc::Status(r.code() == core::StatusCode::kUnavailable
                              ? grpc::StatusCode::UNAVAILABLE
                              : grpc::StatusCode::INTERNAL,
                          what + " over the bulk channel: " + r.message());
    }
    return grpc::Status::OK;
  }

  // GANDIVA_STREAM_OFFER_FILE in `dir` (progress_page.h): where the warm
  // process connects for its checkpoint file (one file), the token, and
  // the slice of the file each of the `streams` granted carries
  // (BulkSlice). Written to a temp file (mode 0600: the token is the key)
  // and renamed.
  static core::Status WriteStreamOffer(
      const std::string& dir, const std::string& host,
      const rpc::OpenCheckpointTransferReply& offer, int streams) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string token;
    for (unsigned char c : offer.token()) {
      token += kHex[c >> 4];
      token += kHex[c & 15];
    }
    const std::vector<BulkFile> files = {
        {offer.files(0).path(), offer.files(0).size(), 0600}};
    std::string text = "host " + host + "\nport " +
                       std::to_string(offer.port()) + "\ntoken " + token +
                       "\npath " + files[0].path + "\nsize " +
                       std::to_string(files[0].size) + "\nstreams " +
                       std::to_string(streams) + "\n";
    int64_t at = 0;
    for (int i = 0; i < streams; ++i) {
      int64_t length = 0;
      for (const BulkPiece& p : BulkSlice(files, streams, i)) {
        length += p.length;
      }
      text +=
          "slice " + std::to_string(at) + " " + std::to_string(length) + "\n";
      at += length;
    }
    const std::string path = dir + "/" GANDIVA_STREAM_OFFER_FILE;
    const std::string temp = path + ".gandiva-part";
    const int fd =
        open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      return core::IoError("creating " + temp + ": " + std::strerror(errno));
    }
    bool ok = PwriteAll(fd, text.data(), text.size(), 0);
    ok = close(fd) == 0 && ok;
    if (!ok || rename(temp.c_str(), path.c_str()) != 0) {
      const std::string err = std::strerror(errno);
      unlink(temp.c_str());
      return core::IoError("writing " + path + ": " + err);
    }
    return core::Status::Ok();
  }

  // The checkpoint file the warm process can take from a socket itself
  // (the first line of GANDIVA_STREAM_OK_FILE in `dir`, which it writes
  // just before it waits), or "" when it cannot, is not that far yet (the
  // files are then received while it finishes starting), or this agent
  // does not offer it (--no-stream-to-job, --no-bulk-transfer).
  std::string StreamFileOf(const std::string& dir) {
    if (!options.stream_to_job || !options.bulk_transfer) return "";
    std::ifstream in(dir + "/" GANDIVA_STREAM_OK_FILE);
    std::string file;
    if (!std::getline(in, file) || !SafeRelativePath(file)) return "";
    return file;
  }

  // Writes the files of a ReadCheckpoint stream into `dir` (temp names, then
  // rename). Adds the bytes written to *bytes.
  grpc::Status FetchStream(int64_t job_id, const std::string& source,
                           rpc::Agent::Stub& stub, const std::string& dir,
                           Clock::time_point end, int64_t* bytes) {
    grpc::ClientContext ctx;
    rpc::ReadCheckpointRequest rreq;
    rreq.set_job_id(job_id);
    auto reader = stub.ReadCheckpoint(WithDeadline(&ctx, end), rreq);
    rpc::CheckpointChunk chunk;
    std::string current, temp;
    int fd = -1;
    int64_t size = 0;
    uint32_t mode = 0600;
    grpc::Status failure = grpc::Status::OK;
    auto finish_file = [&]() -> bool {
      if (fd < 0) return true;
      bool ok = fchmod(fd, mode & 07777) == 0;
      ok = close(fd) == 0 && ok;
      fd = -1;
      struct stat st;
      if (!ok || stat(temp.c_str(), &st) != 0 || st.st_size != size ||
          rename(temp.c_str(), (dir + "/" + current).c_str()) != 0) {
        failure = grpc::Status(
            grpc::StatusCode::INTERNAL,
            "writing " + dir + "/" + current + " failed or it is incomplete");
        return false;
      }
      return true;
    };
    while (reader->Read(&chunk)) {
      if (chunk.path() != current) {
        if (!finish_file()) break;
        if (!SafeRelativePath(chunk.path())) {
          failure =
              grpc::Status(grpc::StatusCode::INTERNAL,
                           "the source sent a bad path '" + chunk.path() + "'");
          break;
        }
        current = chunk.path();
        temp = dir + "/" + current + ".gandiva-part";
        std::error_code ec;
        std::filesystem::create_directories(
            std::filesystem::path(temp).parent_path(), ec);
        fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) {
          failure =
              grpc::Status(grpc::StatusCode::INTERNAL,
                           "creating " + temp + ": " + std::strerror(errno));
          break;
        }
        size = chunk.file_size();
        mode = chunk.mode() != 0 ? chunk.mode() : 0600;
      }
      const std::string& data = chunk.data();
      if (!PwriteAll(fd, data.data(), data.size(),
                     static_cast<off_t>(chunk.offset()))) {
        failure = grpc::Status(grpc::StatusCode::INTERNAL,
                               "writing " + temp + ": " + std::strerror(errno));
        break;
      }
      *bytes += static_cast<int64_t>(data.size());
    }
    if (failure.ok()) finish_file();
    if (fd >= 0) close(fd);
    if (!failure.ok()) {
      ctx.TryCancel();
      (void)reader->Finish();
      return failure;
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) {
      return grpc::Status(s.error_code() == grpc::StatusCode::NOT_FOUND
                              ? grpc::StatusCode::FAILED_PRECONDITION
                              : grpc::StatusCode::UNAVAILABLE,
                          "fetching the checkpoint of job " +
                              std::to_string(job_id) + " from " + source +
                              ": " + s.error_message());
    }
    return grpc::Status::OK;
  }

  // Moves (rename, else copy) the checkpoint held here into `dir`.
  grpc::Status MoveLocalCheckpoint(int64_t job_id, const std::string& dir,
                                   int64_t* bytes) {
    const std::string held = supervisor->HeldCheckpoint(job_id);
    if (held.empty()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "no checkpoint of job " + std::to_string(job_id) +
                              " on this agent to receive from");
    }
    if (held == dir) {
      for (const std::string& rel : CheckpointFiles(dir)) {
        std::error_code ec;
        *bytes += static_cast<int64_t>(
            std::filesystem::file_size(dir + "/" + rel, ec));
      }
      return grpc::Status::OK;
    }
    for (const std::string& rel : CheckpointFiles(held)) {
      const std::string from = held + "/" + rel;
      const std::string to = dir + "/" + rel;
      std::error_code ec;
      std::filesystem::create_directories(
          std::filesystem::path(to).parent_path(), ec);
      *bytes += static_cast<int64_t>(std::filesystem::file_size(from, ec));
      if (rename(from.c_str(), to.c_str()) == 0) continue;
      const std::string temp = to + ".gandiva-part";
      std::filesystem::copy_file(
          from, temp, std::filesystem::copy_options::overwrite_existing, ec);
      if (ec || rename(temp.c_str(), to.c_str()) != 0) {
        return grpc::Status(grpc::StatusCode::INTERNAL,
                            "copying " + from + " to " + to + ": " +
                                (ec ? ec.message() : std::strerror(errno)));
      }
    }
    // The files now live there only.
    supervisor->HoldCheckpoint(job_id, dir);
    return grpc::Status::OK;
  }

  grpc::Status ReceiveCheckpoint(grpc::ServerContext*,
                                 const rpc::ReceiveCheckpointRequest* req,
                                 rpc::ReceiveCheckpointReply* reply) override {
    if (auto s = RefuseWhileStopping("ReceiveCheckpoint"); !s.ok()) return s;
    return actions.Run<rpc::ReceiveCheckpointReply>(
        {"ReceiveCheckpoint", req->job_id()}, req->action_id(), reply,
        [&](rpc::ReceiveCheckpointReply* out) {
          grpc::Status s = Receive(*req, out);
          if (!s.ok()) {
            Log("ReceiveCheckpoint " + std::to_string(req->job_id()) +
                " failed: " + s.error_message());
          }
          return s;
        });
  }

  // Copies the job's whole log at `source` (its TailLog: the earlier part
  // and its own) into EarlierLogPath, replacing it; truncate_log also
  // empties LogPath (no process of the job writes it). A failure is logged
  // and otherwise ignored: the move does not depend on it.
  void FetchEarlierLog(int64_t job_id, const std::string& source,
                       bool truncate_log) {
    const std::string path = supervisor->EarlierLogPath(job_id);
    const std::string part = path + ".gandiva-part";
    std::error_code ec;
    std::filesystem::create_directories(
        std::filesystem::path(path).parent_path(), ec);
    const int fd =
        open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      Log("job " + std::to_string(job_id) + ": creating " + part + ": " +
          std::strerror(errno));
      return;
    }
    auto stub = rpc::Agent::NewStub(MakeChannel(source, tls));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(30));
    rpc::TailLogRequest req;
    req.set_job_id(job_id);
    auto reader = stub->TailLog(&ctx, req);
    rpc::LogChunk chunk;
    bool ok = true;
    while (ok && reader->Read(&chunk)) {
      const std::string& d = chunk.data();
      ok =
          PwriteAll(fd, d.data(), d.size(), static_cast<off_t>(chunk.offset()));
    }
    const grpc::Status st = reader->Finish();
    ok = close(fd) == 0 && ok;
    if (!ok || !st.ok() || rename(part.c_str(), path.c_str()) != 0) {
      unlink(part.c_str());
      Log("job " + std::to_string(job_id) + ": its log at " + source +
          " was not copied here (" +
          (st.ok() ? std::string("write failed") : st.error_message()) + ")");
      return;
    }
    CapLogOf(job_id, /*earlier=*/true);
    if (truncate_log) {
      if (truncate(supervisor->LogPath(job_id).c_str(), 0) != 0 &&
          errno != ENOENT) {
        Log("job " + std::to_string(job_id) +
            ": emptying its old log: " + std::strerror(errno));
      }
    }
  }

  grpc::Status Receive(const rpc::ReceiveCheckpointRequest& req,
                       rpc::ReceiveCheckpointReply* out) {
    const auto t0 = Clock::now();
    const auto end = t0 + options.receive_timeout;
    const int64_t job_id = req.job_id();
    const std::string what = "job " + std::to_string(job_id);
    auto view = supervisor->Job(job_id);
    // No process of the job here (a job without the library, or one that
    // will be started later): the checkpoint is only received and held, for
    // a StartJob(resume_local).
    const bool cold = !view.ok() || view->state == RunState::kExited;
    if (!cold && !view->warm) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          what + " runs here and was not started warm");
    }
    const std::string dir = supervisor->IncomingDir(job_id);
    if (cold) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
    int64_t bytes = 0;
    std::string via = "local";
    bool streamed = false;
    const std::string stream_file =
        cold || req.source_address().empty() ? "" : StreamFileOf(dir);
    const auto transfer0 = Clock::now();
    grpc::Status s =
        req.source_address().empty()
            ? MoveLocalCheckpoint(job_id, dir, &bytes)
            : FetchCheckpoint(job_id, req.source_address(), dir, end, &bytes,
                              &via, stream_file, &streamed);
    if (!s.ok()) return s;
    int64_t transfer_us = MicrosSince(transfer0);
    out->set_channel(via);
    out->set_streamed(streamed);
    if (cold) {
      supervisor->HoldCheckpoint(job_id, dir, req.submitted_us());
      if (!req.source_address().empty() && !req.without_log()) {
        // The job starts here from the checkpoint: its log so far is the
        // source's, and what an earlier stay here left is not repeated.
        FetchEarlierLog(job_id, req.source_address(), /*truncate_log=*/true);
      }
      out->set_bytes(bytes);
      out->set_transfer_us(transfer_us);
      out->set_took_us(MicrosSince(t0));
      Log(what + " received its checkpoint (" + std::to_string(bytes) +
          " bytes in " + std::to_string(transfer_us) + " us, " + via +
          "), held for its start here");
      return grpc::Status::OK;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - Clock::now());
    auto r = supervisor->AwaitRestore(
        job_id, req.await_first_minibatch(),
        std::max(left, std::chrono::milliseconds(1)),
        [&]() -> core::Status {
          const std::string ready = dir + "/" GANDIVA_RESUME_READY_FILE;
          const int fd =
              open(ready.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
          if (fd < 0) {
            return core::IoError("creating " + ready + ": " +
                                 std::strerror(errno));
          }
          close(fd);
          return core::Status::Ok();
        },
        /*hold=*/!streamed);
    if (streamed) {
      // The token is spent either way.
      unlink((dir + "/" GANDIVA_STREAM_OFFER_FILE).c_str());
    }
    if (!r.ok()) return ToGrpc(r.status());
    if (streamed) {
      // The process received as it loaded: its restore is the transfer, up
      // to the last byte when it said when that was, and the rest its load.
      const std::string done = dir + "/" GANDIVA_STREAM_DONE_FILE;
      std::ifstream in(done);
      std::string key;
      uint64_t received = 0;
      if (in >> key >> received && key == "received_ns" &&
          received >= r->restore_begin_ns && received <= r->restore_end_ns) {
        transfer_us =
            static_cast<int64_t>((received - r->restore_begin_ns) / 1000);
        r->load_us =
            static_cast<int64_t>((r->restore_end_ns - received) / 1000);
      } else {
        transfer_us = r->load_us;
        r->load_us = 0;
      }
      unlink(done.c_str());
    }
    // Training goes on here: now the job's log so far, from the source.
    if (!req.source_address().empty()) {
      FetchEarlierLog(job_id, req.source_address(), /*truncate_log=*/false);
    }
    out->set_bytes(bytes);
    out->set_transfer_us(transfer_us);
    out->set_warm_us(r->warm_us);
    out->set_load_us(r->load_us);
    out->set_first_minibatch_us(r->first_minibatch_us);
    out->set_took_us(MicrosSince(t0));
    Log("job " + std::to_string(job_id) +
        (streamed ? " took its checkpoint straight from the source ("
                  : " received its checkpoint (") +
        std::to_string(bytes) + " bytes in " + std::to_string(transfer_us) +
        " us, " + via + ") and restored it");
    return grpc::Status::OK;
  }

  grpc::Status Status(grpc::ServerContext*, const rpc::AgentStatusRequest*,
                      rpc::AgentStatusReply* reply) override {
    reply->set_server_name(name);
    for (const JobView& v : supervisor->Jobs()) {
      *reply->add_jobs() = ToAgentJob(v);
    }
    *reply->mutable_capabilities() = ToCapabilities();
    return grpc::Status::OK;
  }

  // The job's log: what it wrote on the servers it ran on before it moved
  // here (EarlierLogPath), then here (LogPath), as one stream; offsets run
  // over both.
  grpc::Status TailLog(grpc::ServerContext* ctx, const rpc::TailLogRequest* req,
                       grpc::ServerWriter<rpc::LogChunk>* writer) override {
    const int64_t job_id = req->job_id();
    const std::string path = supervisor->LogPath(job_id);
    const bool known = supervisor->Job(job_id).ok();
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const int earlier_fd =
        open(supervisor->EarlierLogPath(job_id).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && earlier_fd < 0) {
      if (!known) {
        return grpc::Status(
            grpc::StatusCode::NOT_FOUND,
            "job " + std::to_string(job_id) + " is not known to this agent");
      }
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          "opening " + path + ": " + std::strerror(errno));
    }
    struct stat st;
    const int64_t earlier_size =
        earlier_fd >= 0 && fstat(earlier_fd, &st) == 0 ? st.st_size : 0;
    int64_t offset = req->offset();
    if (offset < 0) {  // the last -offset bytes
      const int64_t size =
          earlier_size + (fd >= 0 && fstat(fd, &st) == 0 ? st.st_size : 0);
      offset = std::max<int64_t>(0, size + offset);
    }
    std::vector<char> buf(64 * 1024);
    grpc::Status result = grpc::Status::OK;
    int64_t skipped = 0;  // dropped output passed over, not yet said
    for (;;) {
      // Ended before the read: a read that finds nothing means the end.
      auto view = supervisor->Job(job_id);
      const bool ended = !view.ok() || view->state == RunState::kExited;
      ssize_t n = 0;
      // Past what the log bound dropped (holes: no need to read zeros).
      auto skip_holes = [&](int file, int64_t base, int64_t size) {
        const int64_t data = base + NextData(file, offset - base, size);
        skipped += data - offset;
        offset = data;
      };
      if (offset < earlier_size) skip_holes(earlier_fd, 0, earlier_size);
      if (offset < earlier_size) {
        n = pread(earlier_fd, buf.data(),
                  static_cast<size_t>(std::min<int64_t>(
                      static_cast<int64_t>(buf.size()), earlier_size - offset)),
                  offset);
      } else if (fd >= 0) {
        skip_holes(fd, earlier_size, fstat(fd, &st) == 0 ? st.st_size : 0);
        n = pread(fd, buf.data(), buf.size(), offset - earlier_size);
      }
      if (n < 0) {
        result = grpc::Status(grpc::StatusCode::INTERNAL,
                              "reading " + path + ": " + std::strerror(errno));
        break;
      }
      if (n > 0) {
        rpc::LogChunk chunk;
        chunk.set_data(buf.data(), static_cast<size_t>(n));
        chunk.set_offset(offset);
        chunk.set_skipped(skipped);
        skipped = 0;
        offset += n;
        if (!writer->Write(chunk)) break;  // the client went away
        continue;
      }
      if (!req->follow() || ended || ctx->IsCancelled() ||
          shutting_down.load() || fd < 0) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (fd >= 0) close(fd);
    if (earlier_fd >= 0) close(earlier_fd);
    return result;
  }

  rpc::AgentCapabilities ToCapabilities() {
    const Capabilities c = supervisor->capabilities();
    rpc::AgentCapabilities out;
    out.set_criu(c.criu);
    out.set_criu_detail(c.criu_detail);
    out.set_mps(c.mps);
    out.set_mps_detail(c.mps_detail);
    return out;
  }

  void ProbeCapabilities() {
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
    if (registrations.load() > 0) {
      registered = false;
      Wake();
    }
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
    for (int64_t id : supervisor->HeldCheckpoints()) {
      req.add_checkpoints(id);
      req.add_checkpoint_clusters(supervisor->HeldCheckpointCluster(id));
      req.add_checkpoint_submitted_us(supervisor->HeldCheckpointSubmitted(id));
      rpc::JobSpec* spec = req.add_checkpoint_specs();
      if (!spec->ParseFromString(supervisor->HeldCheckpointSpec(id))) {
        spec->Clear();
      }
    }
    req.set_cluster_id(supervisor->Cluster());
    *req.mutable_capabilities() = ToCapabilities();
    rpc::RegisterAgentReply reply;
    auto ctx = CallContext();
    grpc::Status s = scheduler->RegisterAgent(ctx.get(), req, &reply);
    if (s.ok()) {
      server_id = reply.server_id();
      registered = true;
      ++registrations;
      Log("registered with " + schedulers[sched_at] + " as server " +
          std::to_string(reply.server_id()) + " (" +
          std::to_string(req.jobs_size()) + " jobs running)");
      // A daemon from before cluster ids sends none: nothing is dropped.
      if (!reply.cluster_id().empty()) {
        for (int64_t id : supervisor->SetCluster(reply.cluster_id())) {
          Log("job " + std::to_string(id) +
              ": dropped the checkpoint held here, saved in another "
              "cluster (not this cluster's job " +
              std::to_string(id) + ")");
        }
      }
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
      x->set_superseded(e.superseded);
      x->set_killed(e.killed);
      x->set_checkpoint_kept(e.checkpoint_kept);
      x->set_checkpoint_method(e.checkpoint_method);
      x->set_agent_stopped(e.agent_stopping);
      SetMetric(e.metric, x);
    }
    for (const JobView& v : supervisor->Jobs()) {
      rpc::JobProfile* p = req.add_profiles();
      p->set_job_id(v.job_id);
      *p->mutable_progress() = ToProgress(v);
      if (v.state != RunState::kExited) p->set_state(ToRpcState(v.state));
    }
    rpc::AgentReportReply reply;
    auto ctx = CallContext();
    grpc::Status s = scheduler->Report(ctx.get(), req, &reply);
    if (s.ok() && !exits.empty()) supervisor->AckExits(exits.back().seq);
    return s;
  }

  // Tells the daemon that this agent stops: it cordons the server and
  // waits for the agent to be back (its jobs go on from the checkpoints
  // they save now) longer than for one gone silent. Best effort, within
  // the stop's first seconds: a daemon that is not told declares the
  // server down after --agent-timeout-s and --agent-grace-s, as for any
  // silent agent.
  std::vector<int64_t> Leave() {
    rpc::LeaveRequest req;
    req.set_name(name);
    rpc::LeaveReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::min<std::chrono::milliseconds>(
                         options.rpc_timeout, std::chrono::seconds(2)));
    const grpc::Status s = scheduler->Leave(&ctx, req, &reply);
    if (!s.ok()) {
      Log("could not tell the scheduler this agent stops: " +
          s.error_message());
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
    Log(line);
    return {reply.saving().begin(), reply.saving().end()};
  }

  // While the agent stops it serves on, but only for the daemon to have
  // the jobs spanning servers with a part here save (`job`: a call about a
  // part of one is let through); it takes no new work.
  grpc::Status RefuseWhileStopping(const char* call, int64_t job = -1) const {
    if (!shutting_down.load()) return grpc::Status::OK;
    if (job >= 0) {
      auto v = supervisor->Job(job);
      if (v.ok() && v->gang) return grpc::Status::OK;
    }
    return {grpc::StatusCode::UNAVAILABLE,
            std::string(call) + ": agent '" + name + "' is stopping"};
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

  // Connects to schedulers[sched_at].
  void ConnectScheduler() {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    channel = MakeChannel(schedulers[sched_at], tls, args);
    scheduler = rpc::Scheduler::NewStub(channel);
  }

  void NoteFailure(const char* call, const grpc::Status& s) {
    // Unreachable: the daemon there died or stands by (a standby does not
    // listen); the next one may lead.
    const bool unreachable =
        s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (unreachable && schedulers.size() > 1) {
      Log(std::string(call) + " to " + schedulers[sched_at] + " failed (" +
          s.error_message() + "); trying " +
          schedulers[(sched_at + 1) % schedulers.size()]);
      sched_at = (sched_at + 1) % schedulers.size();
      ConnectScheduler();
      registered = false;
      was_unreachable = true;
      return;
    }
    if (!was_unreachable) {
      Log(std::string(call) + " to " + schedulers[sched_at] + " failed (" +
          std::to_string(s.error_code()) + ": " + s.error_message() +
          "); retrying with backoff, keeping exits");
    }
    was_unreachable = true;
  }

  void ReporterLoop() {
    {
      // The first registration carries the capabilities when they come
      // soon (the probe is bounded); else they follow in a new one.
      std::unique_lock<std::mutex> lock(caps_mu);
      caps_cv.wait_for(lock, std::chrono::seconds(5),
                       [&] { return caps_done; });
    }
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

  // Bounds the logs of the jobs running here (options.max_log_bytes),
  // every report interval until the agent stops.
  void LogCapLoop() {
    for (;;) {
      for (const JobView& v : supervisor->Jobs()) CapLogOf(v.job_id);
      std::unique_lock<std::mutex> lock(rep_mu);
      if (rep_cv.wait_for(lock, options.report_interval,
                          [&] { return stopping; })) {
        return;
      }
    }
  }

  // Drops the oldest output of the job's log beyond options.max_log_bytes;
  // `earlier`: of its copy of the log from earlier servers. A file system
  // that cannot is said once.
  void CapLogOf(int64_t job_id, bool earlier = false) {
    const std::string path = earlier ? supervisor->EarlierLogPath(job_id)
                                     : supervisor->LogPath(job_id);
    auto dropped = CapLog(path, options.max_log_bytes);
    std::lock_guard<std::mutex> lock(capped_mu);
    if (!dropped.ok()) {
      if (!log_cap_failed) {
        log_cap_failed = true;
        Log("job logs are not bounded here: " + dropped.status().ToString());
      }
    } else if (*dropped > 0 && capped_logs.insert(job_id).second) {
      Log("job " + std::to_string(job_id) + ": dropped the oldest " +
          std::to_string(*dropped) +
          " bytes of its log (--max-log-mb), and will again as it grows");
    }
  }

  // ----------------------------------------------------------- lifecycle

  void Shutdown() {
    {
      std::lock_guard<std::mutex> lock(rep_mu);
      if (shut_down) return;
      shut_down = true;
    }
    shutting_down = true;  // no new work (RefuseWhileStopping)
    Log("shutting down");
    bulk->Shutdown();
    // The reporter stops first: an exit of a job saved below must not
    // reach the daemon before it is marked checkpoint_kept.
    {
      std::lock_guard<std::mutex> lock(rep_mu);
      stopping = true;
    }
    rep_cv.notify_all();
    if (reporter.joinable()) reporter.join();
    std::vector<int64_t> exiting;
    if (scheduler && registered) exiting = Leave();
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
    if (log_capper.joinable()) log_capper.join();
    if (caps_thread.joinable()) caps_thread.join();
    // Last try to hand over the exits of the jobs just killed.
    if (scheduler && !supervisor->PendingExits().empty()) {
      if (!registered) (void)Register();
      if (registered) (void)SendReport();
    }
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
  auto tls = LoadTls(options.tls, "--tls-");
  if (!tls.ok()) return tls.status();
  impl->tls = std::move(*tls);
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
      impl->schedulers.push_back(one);
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
  Impl* raw = impl.get();
  impl->listen_host = listen->first;
  impl->bulk = std::make_unique<BulkServer>(
      [raw](const std::string& m) { raw->Log(m); });
  impl->options = std::move(options);
  impl->supervisor =
      std::make_unique<Supervisor>(sopts, [raw](const ExitRecord& e) {
        raw->Log("job " + std::to_string(e.job_id) + " exited with code " +
                 std::to_string(e.exit_code) + " after " +
                 std::to_string(e.minibatches) + " mini-batches");
        raw->Wake();
      });
  // Jobs an earlier run of this agent left running (it was killed or
  // crashed): the daemon will start them again, so these copies go first.
  for (int64_t id : impl->supervisor->KillLeftovers()) {
    raw->Log("job " + std::to_string(id) +
             ": killed the process an earlier run of this agent left running");
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

  if (!impl->schedulers.empty()) {
    impl->ConnectScheduler();
    impl->reporter = std::thread([raw] { raw->ReporterLoop(); });
  }
  if (impl->options.max_log_bytes > 0) {
    impl->log_capper = std::thread([raw] { raw->LogCapLoop(); });
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
Capabilities AgentServer::capabilities() const {
  return impl_->supervisor->capabilities();
}
bool AgentServer::WaitForCapabilities(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(impl_->caps_mu);
  return impl_->caps_cv.wait_for(lock, timeout,
                                 [&] { return impl_->caps_done; });
}
void AgentServer::Shutdown() { impl_->Shutdown(); }

void AgentServer::Wait() {
  std::unique_lock<std::mutex> lock(impl_->rep_mu);
  impl_->rep_cv.wait(lock, [&] { return impl_->shutdown_done; });
}

}  // namespace gandiva::runtime
