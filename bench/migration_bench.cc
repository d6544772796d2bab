// Migration and resize latencies on this machine, printed (asserts nothing):
//  1. the migration fast path between two in-process agents, driven through
//     their gRPC Agent stubs as the daemon's Move() does (warm StartJob on
//     the destination until its process waits for the checkpoint,
//     CheckpointJob on the source until the checkpoint is saved,
//     ReceiveCheckpoint on the destination with await_first_minibatch,
//     KillJob on the source; --overlap: the older order), back
//     and forth N times, for a small and a large model (PyTorch MLPs with
//     Adam, bench/jobs/model_job.py); plus raw loopback TCP bandwidth, to
//     which the checkpoint transfer is compared;
//  2. grow 1 -> 2 GPUs and shrink 2 -> 1 of the data-parallel example
//     (examples/train_ddp.py through gandiva.launch) on one agent with 2
//     virtual GPUs: CheckpointJob(resize_to) + StartJob(resume_local), until
//     the job trains its first mini-batch at the new size;
//  3. where CRIU is usable: generic migration of the large model run
//     without the job-side library (bench/jobs/model_job.py --plain), moved
//     by CRIU between the agents --criu-runs times: dump, transfer of the
//     images, restore, next mini-batch, and the pause against the fast
//     path's in the same run.
// The checkpoint moves over the agents' bulk TCP channel (--bulk-streams N
// parallel connections), or over the gRPC stream with --no-bulk-transfer;
// --compare-grpc adds a large-model column moved over the gRPC stream by a
// second pair of agents, in the same run; --compare-tls one moved between
// agents with mutual TLS (a throwaway CA made with openssl), over their TLS
// gRPC stream, as such agents do; --compare-streams 1,2,4 moves the
// large model between one pair of agents per number of streams, side by
// side. By default the warm process takes the checkpoint from the source's
// bulk channel itself, straight into its memory (its transfer then places
// the tensors, and its load is what is left); --no-stream-to-job has the
// agents receive it into files first,
// and --compare-files adds a large-model column moved that way by a second
// pair of agents, in the same run.
//
// With --gpu the agents offer the GPUs NVML finds and the models train on
// the GPU (a checkpoint copies them to host memory); the resize needs a GPU
// per rank there. $GANDIVA_PYTHON names the interpreter with torch (default
// /usr/bin/python3).
//
//   gandiva_bench_migration [--migrations N] [--resizes N] [--skip-small]
//       [--skip-large] [--small-only] [--skip-resize] [--loopback-mib N]
//       [--large-width W] [--large-layers L] [--no-bulk-transfer]
//       [--bulk-streams N] [--compare-grpc] [--compare-tls]
//       [--compare-streams N,N,...]
//       [--compare-files] [--no-stream-to-job] [--criu-runs N] [--gpu]
//       [--overlap] [--wait-source-exit] [--verbose]
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/agent/agent_server.h"
#include "runtime/agent/bulk_transfer.h"
#include "runtime/agent/gpu_inventory.h"
#include "runtime/tls/test_certs.h"
#include "runtime/tls/tls.h"

namespace {

namespace fs = std::filesystem;
using namespace gandiva;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool verbose = false;
bool real_gpus = false;  // --gpu
// --overlap: checkpoint right after the warm StartJob (the warm start
// overlaps the save and transfer), and wait for the source's exit; by
// default the job trains on until its new process is ready and the
// checkpoint call returns once the checkpoint is saved.
bool overlap = false;
// --wait-source-exit: the destination receives only once the source's
// process has exited, so that its teardown does not share the CPUs with the
// transfer (as it would not across machines).
bool wait_source_exit = false;

// The interpreter the jobs run under.
std::string Python() {
  const char* p = std::getenv("GANDIVA_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gandiva_bench_migration: %s\n", what.c_str());
  std::exit(1);
}

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Agents dedupe by action id: every call gets its own.
std::atomic<int64_t> next_action{1};
int64_t NewAction() { return next_action++; }

// ------------------------------------------------------------ the agents

struct Agent {
  std::unique_ptr<runtime::AgentServer> server;
  std::unique_ptr<rpc::Agent::Stub> stub;
  fs::path work_dir;
  std::string label;
  int bulk_streams = 1;
  std::optional<runtime::TlsConfig> tls;  // mutual TLS, if on
};

Agent StartAgent(const std::string& label, const fs::path& work_dir,
                 const fs::path& checkpoint_root, bool bulk_transfer,
                 int bulk_streams, bool stream_to_job = true,
                 const runtime::TlsFiles& tls = {}) {
  runtime::AgentOptions o;
  o.tls = tls;
  o.bulk_transfer = bulk_transfer;
  o.stream_to_job = stream_to_job;
  o.bulk_streams = bulk_streams;
  o.listen_address = "127.0.0.1:0";
  o.name = "bench-" + label + "-" + std::to_string(::getpid());
  o.virtual_gpus = 2;
  o.virtual_only = !real_gpus;
  o.work_dir = work_dir.string();
  o.checkpoint_root = checkpoint_root.string();
  o.checkpoint_timeout = milliseconds(180000);
  o.receive_timeout = milliseconds(180000);
  o.kill_grace = milliseconds(5000);
  o.log = [label](std::string_view m) {
    if (verbose) {
      std::fprintf(stderr, "agent %s: %.*s\n", label.c_str(),
                   static_cast<int>(m.size()), m.data());
    }
  };
  auto a = runtime::AgentServer::Start(o);
  if (!a.ok()) Die("agent " + label + ": " + a.status().ToString());
  Agent agent;
  agent.server = std::move(*a);
  auto config = runtime::LoadTls(tls, "--tls-");
  if (!config.ok()) Die(config.status().ToString());
  agent.tls = *config;
  agent.stub = rpc::Agent::NewStub(
      runtime::MakeChannel(agent.server->address(), agent.tls));
  agent.work_dir = work_dir;
  agent.label = label;
  agent.bulk_streams = bulk_streams;
  return agent;
}

std::unique_ptr<grpc::ClientContext> Ctx(int seconds) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(seconds));
  return ctx;
}

std::string LogTail(const Agent& a, int64_t job) {
  std::ifstream f(a.work_dir / "jobs" / std::to_string(job) / "log");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.size() > 3000) s = "..." + s.substr(s.size() - 3000);
  return s;
}

[[noreturn]] void DieWithLog(const Agent& a, int64_t job,
                             const std::string& what) {
  Die(what + "\n--- job " + std::to_string(job) + " log on agent " + a.label +
      " ---\n" + LogTail(a, job));
}

// The job as `a` lists it; false when it is not listed (not running).
bool JobOn(const Agent& a, int64_t job, rpc::AgentJob* out) {
  auto ctx = Ctx(10);
  rpc::AgentStatusReply st;
  grpc::Status s = a.stub->Status(ctx.get(), {}, &st);
  if (!s.ok()) Die("Status on " + a.label + ": " + s.error_message());
  for (const auto& j : st.jobs()) {
    if (j.job_id() == job) {
      *out = j;
      return true;
    }
  }
  return false;
}

// Waits until the job attached the library and its count passed `past`;
// returns the count seen (dies with the job's log if it is gone or late).
int64_t WaitMinibatches(const Agent& a, int64_t job, int64_t past,
                        int timeout_s, milliseconds poll = milliseconds(5)) {
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  while (Clock::now() < deadline) {
    rpc::AgentJob j;
    if (!JobOn(a, job, &j)) DieWithLog(a, job, "the job exited");
    if (j.progress().uses_library() && j.progress().minibatches() > past) {
      return j.progress().minibatches();
    }
    std::this_thread::sleep_for(poll);
  }
  DieWithLog(a, job,
             "the job did not pass mini-batch " + std::to_string(past) +
                 " within " + std::to_string(timeout_s) + " s");
}

rpc::JobSpec Spec(const std::string& name, const std::string& command,
                  int gpus) {
  rpc::JobSpec spec;
  spec.set_name(name);
  spec.set_command(command);
  spec.set_gpus(gpus);
  spec.set_workdir(GANDIVA_SOURCE_DIR);
  (*spec.mutable_env())["PYTHONPATH"] =
      std::string(GANDIVA_SOURCE_DIR) + "/python";
  (*spec.mutable_env())["GANDIVA_CLIENT_LIB"] = GANDIVA_CLIENT_LIB_PATH;
  (*spec.mutable_env())["OMP_NUM_THREADS"] = "1";
  return spec;
}

// await_ready_ms > 0 (warm): returns once the process waits for its
// checkpoint, as the daemon's migrations do.
rpc::StartJobReply StartJob(const Agent& a, int64_t job,
                            const rpc::JobSpec& spec,
                            const std::vector<int32_t>& gpus, bool warm,
                            bool resume_local, int await_ready_ms = 0) {
  rpc::StartJobRequest req;
  req.set_job_id(job);
  req.set_action_id(NewAction());
  *req.mutable_spec() = spec;
  for (int32_t g : gpus) req.add_gpus(g);
  req.set_warm(warm);
  req.set_resume_local(resume_local);
  req.set_await_ready_ms(await_ready_ms);
  rpc::StartJobReply rep;
  auto ctx = Ctx(60 + await_ready_ms / 1000);
  grpc::Status s = a.stub->StartJob(ctx.get(), req, &rep);
  if (!s.ok()) Die("StartJob on " + a.label + ": " + s.error_message());
  return rep;
}

rpc::CheckpointReply Checkpoint(const Agent& a, int64_t job, int resize_to,
                                bool reply_when_saved = false) {
  rpc::CheckpointRequest req;
  req.set_job_id(job);
  req.set_action_id(NewAction());
  req.set_resize_to(resize_to);
  req.set_reply_when_saved(reply_when_saved);
  rpc::CheckpointReply rep;
  auto ctx = Ctx(240);
  grpc::Status s = a.stub->CheckpointJob(ctx.get(), req, &rep);
  if (!s.ok()) {
    DieWithLog(a, job,
               "CheckpointJob on " + a.label + ": " + s.error_message());
  }
  return rep;
}

void Kill(const Agent& a, int64_t job) {
  rpc::JobRequest req;
  req.set_job_id(job);
  req.set_action_id(NewAction());
  rpc::KillReply rep;
  auto ctx = Ctx(60);
  grpc::Status s = a.stub->KillJob(ctx.get(), req, &rep);
  if (!s.ok()) Die("KillJob on " + a.label + ": " + s.error_message());
}

// ------------------------------------------------------------ statistics

struct Stat {
  double median = 0, max = 0;
};

Stat Summarise(std::vector<double> v) {
  Stat s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.median = v.size() % 2 ? v[v.size() / 2]
                          : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  s.max = v.back();
  return s;
}

// One model's migrations: each metric's samples, by name, in print order.
struct Series {
  std::string label;
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> values;
  double step_ms = 0;  // the job's own mini-batch time before migrating
  double state_mib = 0;
  // ReadCheckpoint drained by a client that keeps nothing, with no warm
  // process competing for the CPUs: the gRPC stream alone, GB/s per run.
  std::vector<double> stream_alone_gbps;
  // The same for the source's bulk channel (empty: it offers none).
  std::vector<double> bulk_alone_gbps;
  // ReceiveCheckpointReply.channel of each migration.
  std::map<std::string, int> channels;
  void Add(const std::string& name, double v) {
    if (!values.count(name)) order.push_back(name);
    values[name].push_back(v);
  }
};

// ------------------------------------------------------------ loopback

// Raw TCP bandwidth over 127.0.0.1: one thread writes `bytes` in 4 MiB
// writes, another reads them; GB/s (1e9 bytes/s) from the first write to
// the last byte read. With `sink` the reader splices them into that new
// file (socket -> pipe -> file, as the agents' bulk channel receives)
// instead of dropping them.
double LoopbackGBps(size_t bytes, const fs::path* sink = nullptr) {
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (lfd < 0) Die("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(lfd, 1) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Die(std::string("loopback listen: ") + std::strerror(errno));
  }
  const int cfd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(cfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    Die(std::string("loopback connect: ") + std::strerror(errno));
  }
  const int sfd = ::accept(lfd, nullptr, nullptr);
  if (sfd < 0) Die(std::string("loopback accept: ") + std::strerror(errno));
  ::close(lfd);
  constexpr size_t kChunk = 4 << 20;
  std::vector<char> out(kChunk, 'x'), in(kChunk);
  const auto t0 = Clock::now();
  std::thread writer([&] {
    size_t sent = 0;
    while (sent < bytes) {
      const ssize_t n =
          ::write(cfd, out.data(), std::min(kChunk, bytes - sent));
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        Die(std::string("loopback write: ") + std::strerror(errno));
      }
      sent += static_cast<size_t>(n);
    }
  });
  size_t got = 0;
  int file = -1, pipe_fds[2] = {-1, -1};
  if (sink != nullptr) {
    file =
        ::open(sink->c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (file < 0 || ::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      Die("loopback into " + sink->string() + ": " + std::strerror(errno));
    }
    ::fcntl(pipe_fds[1], F_SETPIPE_SZ, 1 << 20);
  }
  while (got < bytes) {
    const ssize_t n =
        sink == nullptr
            ? ::read(sfd, in.data(), kChunk)
            : ::splice(sfd, nullptr, pipe_fds[1], nullptr,
                       std::min<size_t>(1 << 20, bytes - got), SPLICE_F_MOVE);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      Die("loopback read ended early");
    }
    for (ssize_t left = n; sink != nullptr && left > 0;) {
      const ssize_t w = ::splice(pipe_fds[0], nullptr, file, nullptr,
                                 static_cast<size_t>(left), SPLICE_F_MOVE);
      if (w <= 0) Die(std::string("loopback splice: ") + std::strerror(errno));
      left -= w;
    }
    got += static_cast<size_t>(n);
  }
  if (sink != nullptr) {
    ::close(file);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  writer.join();
  ::close(cfd);
  ::close(sfd);
  if (sink != nullptr) fs::remove(*sink);
  return static_cast<double>(bytes) / s / 1e9;
}

// ------------------------------------------------------------ migration

Series MigrateBench(Agent& a, Agent& b, int64_t job, const std::string& label,
                    int width, int layers, int batch, double min_step_ms,
                    int migrations) {
  Series out;
  out.label = label;
  const double params = static_cast<double>(layers) *
                        (static_cast<double>(width) * width + width);
  out.state_mib = params * 12 / (1 << 20);
  char cmd[1024];
  std::snprintf(cmd, sizeof cmd,
                "exec %s %s/bench/jobs/model_job.py --width %d --layers %d "
                "--batch-size %d --min-step-ms %g --log-every 0 --device %s",
                Python().c_str(), GANDIVA_SOURCE_DIR, width, layers, batch,
                min_step_ms, real_gpus ? "cuda" : "cpu");
  const rpc::JobSpec spec = Spec("migrate-" + std::to_string(job), cmd, 1);
  std::printf("  %s: starting on agent a...\n", label.c_str());
  std::fflush(stdout);
  StartJob(a, job, spec, {0}, false, false);
  WaitMinibatches(a, job, 0, 180, milliseconds(20));
  // Step time from a few mini-batches.
  {
    rpc::AgentJob j;
    JobOn(a, job, &j);
    const int64_t m0 = j.progress().minibatches();
    const auto t0 = Clock::now();
    const int64_t m1 = WaitMinibatches(a, job, m0 + 3, 180);
    out.step_ms = MsSince(t0) / static_cast<double>(m1 - m0);
  }
  Agent* src = &a;
  Agent* dst = &b;
  for (int i = 0; i < migrations; ++i) {
    const auto t0 = Clock::now();
    const rpc::StartJobReply w = StartJob(*dst, job, spec, {0}, /*warm=*/true,
                                          false, overlap ? 0 : 120000);
    const double start_call_ms = MsSince(t0);
    if (!overlap && !w.ready()) {
      DieWithLog(*dst, job, "the warm process was not ready within 120 s");
    }
    const auto t1 = Clock::now();
    const rpc::CheckpointReply c = Checkpoint(*src, job, 0, !overlap);
    const double ckpt_call_ms = MsSince(t1);
    if (wait_source_exit) {
      const auto t_exit = Clock::now();
      rpc::AgentJob gone;
      while (JobOn(*src, job, &gone))
        std::this_thread::sleep_for(milliseconds(1));
      out.Add("  waited for the source's exit", MsSince(t_exit));
    }
    rpc::ReceiveCheckpointRequest rreq;
    rreq.set_job_id(job);
    rreq.set_action_id(NewAction());
    rreq.set_source_address(src->server->address());
    rreq.set_await_first_minibatch(true);
    rpc::ReceiveCheckpointReply r;
    auto ctx = Ctx(300);
    grpc::Status s = dst->stub->ReceiveCheckpoint(ctx.get(), rreq, &r);
    if (!s.ok()) {
      DieWithLog(
          *dst, job,
          "ReceiveCheckpoint on " + dst->label + ": " + s.error_message());
    }
    const double critical_ms = MsSince(t1);
    const double whole_ms = MsSince(t0);
    Kill(*src, job);  // drops the source's copy of the checkpoint
    if (r.bytes() != c.bytes()) {
      Die("moved " + std::to_string(r.bytes()) + " bytes of a " +
          std::to_string(c.bytes()) + "-byte checkpoint");
    }
    out.Add(overlap ? "warm StartJob call" : "warm start (job trains on)",
            start_call_ms);
    out.Add(overlap ? "checkpoint (request -> exited)"
                    : "checkpoint (request -> saved)",
            c.took_us() / 1e3);
    out.Add("  job's save", c.save_us() / 1e3);
    out.Add(overlap ? "  rest (boundary wait, exit)" : "  rest (boundary wait)",
            static_cast<double>(c.took_us() - c.save_us()) / 1e3);
    out.Add("transfer", r.transfer_us() / 1e3);
    out.Add("transfer GB/s",
            r.transfer_us() > 0 ? static_cast<double>(r.bytes()) /
                                      static_cast<double>(r.transfer_us()) / 1e3
                                : 0);
    if (overlap) {
      out.Add("warm start (overlapped)", r.warm_us() / 1e3);
      // Roughly how long the checkpoint, once transferred, waited for the
      // warm process (started at the end of the StartJob call) to be ready.
      out.Add("  not ready after transfer (est.)",
              std::max(0.0, r.warm_us() / 1e3 - ckpt_call_ms -
                                r.transfer_us() / 1e3));
    }
    out.Add("load", r.load_us() / 1e3);
    // Straight into the job (streamed), the job places the tensors as they
    // come: transfer and load overlap, and their sum compares like with like.
    out.Add("transfer + load", (r.transfer_us() + r.load_us()) / 1e3);
    out.Add("first mini-batch", r.first_minibatch_us() / 1e3);
    out.Add("ReceiveCheckpoint call", r.took_us() / 1e3);
    out.Add("CRITICAL PATH (ckpt -> 1st mb)", critical_ms);
    out.Add("whole (incl. warm StartJob)", whole_ms);
    out.Add("checkpoint MB", static_cast<double>(c.bytes()) / 1e6);
    ++out.channels[r.channel() + (r.streamed() ? " to job" : "")];
    std::printf(
        "  %s: migration %d %s -> %s: checkpoint %.0f ms, transfer %.0f ms "
        "(%s%s), load %.0f ms, first mini-batch %.0f ms; critical path %.0f "
        "ms\n",
        label.c_str(), i + 1, src->label.c_str(), dst->label.c_str(),
        c.took_us() / 1e3, r.transfer_us() / 1e3, r.channel().c_str(),
        r.streamed() ? ", straight into the job" : "", r.load_us() / 1e3,
        r.first_minibatch_us() / 1e3, critical_ms);
    std::fflush(stdout);
    std::swap(src, dst);
    // Let it train a little at the new place before moving it again.
    rpc::AgentJob j;
    if (!JobOn(*src, job, &j)) DieWithLog(*src, job, "the job exited");
    WaitMinibatches(*src, job, j.progress().minibatches() + 1, 180);
  }
  // The stream alone: checkpoint once more, then drain ReadCheckpoint from
  // the source three times (no warm process, nothing written).
  const rpc::CheckpointReply c = Checkpoint(*src, job, 0);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto stub = rpc::Agent::NewStub(
      runtime::MakeChannel(src->server->address(), src->tls, args));
  for (int i = 0; i < 3; ++i) {
    rpc::ReadCheckpointRequest req;
    req.set_job_id(job);
    auto ctx = Ctx(120);
    const auto t0 = Clock::now();
    auto reader = stub->ReadCheckpoint(ctx.get(), req);
    rpc::CheckpointChunk chunk;
    int64_t bytes = 0;
    while (reader->Read(&chunk))
      bytes += static_cast<int64_t>(chunk.data().size());
    const grpc::Status s = reader->Finish();
    const double ms = MsSince(t0);
    if (!s.ok() || bytes != c.bytes()) {
      Die("ReadCheckpoint alone: " + s.error_message() + " (" +
          std::to_string(bytes) + " of " + std::to_string(c.bytes()) +
          " bytes)");
    }
    out.stream_alone_gbps.push_back(static_cast<double>(bytes) / ms / 1e6);
  }
  // The bulk channel alone, likewise: offered, connected (as many streams
  // as the destination asks for), drained.
  auto host = runtime::SplitHostPort(src->server->address(), "address");
  for (int i = 0; i < 3 && host.ok(); ++i) {
    const auto t0 = Clock::now();
    rpc::OpenCheckpointTransferRequest req;
    req.set_job_id(job);
    req.set_streams(dst->bulk_streams);
    rpc::OpenCheckpointTransferReply offer;
    auto ctx = Ctx(30);
    const grpc::Status s = stub->OpenCheckpointTransfer(ctx.get(), req, &offer);
    if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) break;
    if (!s.ok()) Die("OpenCheckpointTransfer: " + s.error_message());
    int64_t want = 0;
    for (const auto& f : offer.files()) want += f.size();
    const int streams = std::max(1, offer.streams());
    std::vector<int> fds;
    for (int k = 0; k < streams; ++k) {
      auto fd = runtime::ConnectBulk(host->first, offer.port(), offer.token(),
                                     Clock::now() + std::chrono::seconds(30), k,
                                     streams);
      if (!fd.ok()) Die("bulk channel alone: " + fd.status().ToString());
      fds.push_back(*fd);
    }
    std::atomic<int64_t> bytes{0};
    std::vector<std::thread> drains;
    for (int fd : fds) {
      drains.emplace_back([fd, &bytes] {
        std::vector<char> sink(1 << 20);
        for (;;) {
          const ssize_t n = ::recv(fd, sink.data(), sink.size(), 0);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) break;
          bytes += n;
        }
        ::close(fd);
      });
    }
    for (std::thread& t : drains) t.join();
    const double ms = MsSince(t0);
    if (bytes != want || bytes != c.bytes()) {
      Die("bulk channel alone: " + std::to_string(bytes) + " of " +
          std::to_string(c.bytes()) + " bytes");
    }
    out.bulk_alone_gbps.push_back(static_cast<double>(bytes) / ms / 1e6);
  }
  Kill(*src, job);
  return out;
}

void PrintMigrations(const std::vector<Series>& all, double loopback_gbps,
                     double loopback_file_gbps) {
  if (all.empty()) return;
  std::printf(
      "\nmigration fast path, %zu migrations each (ms unless said)\n",
      all[0].values.empty() ? size_t{0} : all[0].values.begin()->second.size());
  std::printf("%-32s", "");
  for (const Series& s : all) std::printf(" %21s", s.label.c_str());
  std::printf("\n%-32s", "");
  for (size_t i = 0; i < all.size(); ++i) {
    std::printf(" %10s %10s", "median", "max");
  }
  std::printf("\n");
  std::printf("%-32s", "model + Adam state MiB");
  for (const Series& s : all) std::printf(" %21.1f", s.state_mib);
  std::printf("\n%-32s", "job's step time (before)");
  for (const Series& s : all) std::printf(" %21.1f", s.step_ms);
  std::printf("\n%-32s", "channel (migrations)");
  for (const Series& s : all) {
    std::string text;
    for (const auto& [channel, n] : s.channels) {
      text +=
          (text.empty() ? "" : " ") + channel + " (" + std::to_string(n) + ")";
    }
    std::printf(" %21s", text.c_str());
  }
  std::printf("\n");
  for (const std::string& name : all[0].order) {
    std::printf("%-32s", name.c_str());
    for (const Series& s : all) {
      auto it = s.values.find(name);
      const Stat st = it == s.values.end() ? Stat{} : Summarise(it->second);
      const bool small = name == "transfer GB/s";
      std::printf(small ? " %10.3f %10.3f" : " %10.1f %10.1f", st.median,
                  st.max);
    }
    std::printf("\n");
  }
  std::printf("%-32s", "gRPC stream alone GB/s");
  for (const Series& s : all) {
    const Stat st = Summarise(s.stream_alone_gbps);
    std::printf(" %10.3f %10.3f", st.median, st.max);
  }
  std::printf("\n%-32s", "bulk channel alone GB/s");
  for (const Series& s : all) {
    const Stat st = Summarise(s.bulk_alone_gbps);
    if (s.bulk_alone_gbps.empty()) {
      std::printf(" %10s %10s", "-", "-");
    } else {
      std::printf(" %10.3f %10.3f", st.median, st.max);
    }
  }
  std::printf("\n");
  if (loopback_gbps > 0) {
    std::printf("%-32s", "stream alone / loopback TCP");
    for (const Series& s : all) {
      const Stat st = Summarise(s.stream_alone_gbps);
      std::printf(" %9.0f%% %9s", 100 * st.median / loopback_gbps, "");
    }
    std::printf("\n%-32s", "bulk alone / loopback TCP");
    for (const Series& s : all) {
      const Stat st = Summarise(s.bulk_alone_gbps);
      if (s.bulk_alone_gbps.empty()) {
        std::printf(" %10s %10s", "-", "");
      } else {
        std::printf(" %9.0f%% %9s", 100 * st.median / loopback_gbps, "");
      }
    }
    std::printf("\n");
    std::printf("%-32s", "transfer / loopback TCP");
    for (const Series& s : all) {
      const Stat st = Summarise(s.values.at("transfer GB/s"));
      std::printf(" %9.0f%% %9s", 100 * st.median / loopback_gbps, "");
    }
    std::printf("\n");
    if (loopback_file_gbps > 0) {
      std::printf("%-32s", "transfer / loopback into file");
      for (const Series& s : all) {
        const Stat st = Summarise(s.values.at("transfer GB/s"));
        std::printf(" %9.0f%% %9s", 100 * st.median / loopback_file_gbps, "");
      }
      std::printf("\n");
    }
  }
  std::printf(
      "critical path = CheckpointJob call -> ReceiveCheckpoint returned (the "
      "job\ntrained its first mini-batch on the destination): the time the "
      "job trains\nnowhere. %s It includes waiting for the source's next\n"
      "mini-batch boundary (up to one step) and the first mini-batch (one "
      "step).\ngRPC stream alone = ReadCheckpoint from the "
      "source drained by a client that\nkeeps nothing, with no warm process "
      "running (3 runs after the migrations);\nbulk channel alone = the "
      "same over the source's bulk TCP channel (offer,\nconnect, drain; "
      "'-' where the source offers none).\n",
      overlap ? "--overlap: the warm start is begun just before it and "
                "overlaps the save\nand the transfer; the checkpoint call "
                "waits for the source's exit."
              : "The warm start comes before it (the StartJob call returns "
                "once the new\nprocess waits for its checkpoint; the job "
                "trains on meanwhile), and the\ncheckpoint call returns once "
                "the checkpoint is saved, not at the exit.");
}

// ------------------------------------------------------------ resize

struct ResizeSeries {
  // [0] grow, [1] shrink
  std::vector<double> ckpt[2], save[2], restart[2], total[2];
};

void ResizeOnce(Agent& a, int64_t job, const rpc::JobSpec& spec, int to,
                ResizeSeries* out, int cycle) {
  const int k = to == 2 ? 0 : 1;
  const auto t0 = Clock::now();
  const rpc::CheckpointReply c = Checkpoint(a, job, to);
  const double ckpt_ms = MsSince(t0);
  const auto t1 = Clock::now();
  rpc::JobSpec s2 = spec;
  s2.set_gpus(to);
  StartJob(a, job, s2,
           to == 2 ? std::vector<int32_t>{0, 1} : std::vector<int32_t>{0},
           false, /*resume_local=*/true);
  WaitMinibatches(a, job, c.minibatches(), 180);
  const double restart_ms = MsSince(t1);
  const double total_ms = MsSince(t0);
  out->ckpt[k].push_back(ckpt_ms);
  out->save[k].push_back(c.save_us() / 1e3);
  out->restart[k].push_back(restart_ms);
  out->total[k].push_back(total_ms);
  std::printf(
      "  cycle %d %s %d -> %d: checkpoint %.0f ms (save %.0f ms, at mini-batch "
      "%lld), restart -> first mini-batch %.0f ms, total %.0f ms\n",
      cycle, to == 2 ? "grow  " : "shrink", to == 2 ? 1 : 2, to, ckpt_ms,
      c.save_us() / 1e3, static_cast<long long>(c.minibatches()), restart_ms,
      total_ms);
  std::fflush(stdout);
}

void ResizeBench(Agent& a, int64_t job, int cycles) {
  const std::string cmd =
      "exec " + Python() + " -m gandiva.launch -- " + GANDIVA_SOURCE_DIR +
      "/examples/train_ddp.py --samples 1000000000 --min-step-ms 20 "
      "--log-every 0";
  rpc::JobSpec spec = Spec("ddp", cmd, 1);
  spec.set_elastic(true);
  std::printf(
      "\nresize of examples/train_ddp.py (gandiva.launch; gloo on virtual "
      "GPUs, NCCL on GPUs)\n");
  std::fflush(stdout);
  StartJob(a, job, spec, {0}, false, false);
  WaitMinibatches(a, job, 3, 180, milliseconds(20));
  ResizeSeries r;
  for (int c = 1; c <= cycles; ++c) {
    ResizeOnce(a, job, spec, 2, &r, c);
    rpc::AgentJob j;
    JobOn(a, job, &j);
    WaitMinibatches(a, job, j.progress().minibatches() + 3, 180);
    ResizeOnce(a, job, spec, 1, &r, c);
    JobOn(a, job, &j);
    WaitMinibatches(a, job, j.progress().minibatches() + 3, 180);
  }
  Kill(a, job);
  std::printf("\n%-18s %10s %10s %10s %12s %12s %10s %10s\n",
              ("ms, " + std::to_string(cycles) + " cycles").c_str(), "ckpt_med",
              "ckpt_max", "save_med", "restart_med", "restart_max", "total_med",
              "total_max");
  for (int k = 0; k < 2; ++k) {
    const Stat c = Summarise(r.ckpt[k]), v = Summarise(r.save[k]),
               s = Summarise(r.restart[k]), t = Summarise(r.total[k]);
    std::printf("%-18s %10.1f %10.1f %10.1f %12.1f %12.1f %10.1f %10.1f\n",
                k == 0 ? "grow 1->2" : "shrink 2->1", c.median, c.max, v.median,
                s.median, s.max, t.median, t.max);
  }
  std::printf(
      "checkpoint = CheckpointJob(resize_to) call (request -> the job exited "
      "76);\nsave = the job's own save; restart = StartJob(resume_local) call "
      "-> the job's\nmini-batch count passes the saved one (first mini-batch "
      "at the new size: starts\nthe launcher and ranks, gloo rendezvous, "
      "load); total = checkpoint + restart\n");
}

}  // namespace

// ------------------------------------------------------------ CRIU

// Lines of the job's log at `a` that start with `prefix`.
int CountLogLines(const Agent& a, int64_t job, const std::string& prefix) {
  std::ifstream f(a.work_dir / "jobs" / std::to_string(job) / "log");
  int n = 0;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(prefix, 0) == 0) ++n;
  }
  return n;
}

// Waits until the job's log at `a` has more than `past` lines starting with
// "step "; returns the count seen.
int WaitStepLines(const Agent& a, int64_t job, int past, int timeout_s) {
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  while (Clock::now() < deadline) {
    const int n = CountLogLines(a, job, "step ");
    if (n > past) return n;
    std::this_thread::sleep_for(milliseconds(2));
  }
  DieWithLog(a, job,
             "no step line past " + std::to_string(past) + " within " +
                 std::to_string(timeout_s) + " s");
}

// The model without the job-side library, moved by CRIU between the agents
// as the daemon does it: CheckpointJob (the dump, which kills it),
// ReceiveCheckpoint cold at the destination, StartJob(resume_local) (the
// restore), then its next mini-batch (a log line per step). Prints each
// run's phases and their medians, and the pause against the fast path's
// `fast_path_ms` (the large model's median, same run; 0: not measured).
void CriuBench(Agent& a, Agent& b, int64_t job, int width, int layers,
               int migrations, double fast_path_ms) {
  const double params = static_cast<double>(layers) *
                        (static_cast<double>(width) * width + width);
  char cmd[1024];
  std::snprintf(cmd, sizeof cmd,
                "exec %s %s/bench/jobs/model_job.py --plain --width %d "
                "--layers %d --batch-size 1 --log-every 1",
                Python().c_str(), GANDIVA_SOURCE_DIR, width, layers);
  const rpc::JobSpec spec = Spec("criu-" + std::to_string(job), cmd, 1);
  std::printf(
      "  %dx%d without the library (%.0f MiB of model + Adam state): "
      "starting on agent a...\n",
      layers, width, params * 12 / (1 << 20));
  std::fflush(stdout);
  const auto started = Clock::now();
  StartJob(a, job, spec, {0}, false, false);
  WaitStepLines(a, job, 3, 180);
  // The agent gives a job this young time to attach the library before it
  // treats it as a job without (a process CRIU restored is not waited
  // for): the first dump comes after that, as it would in a real run.
  const auto grace = started + runtime::AgentOptions().library_start_grace;
  if (Clock::now() < grace) std::this_thread::sleep_until(grace);
  Series out;
  Agent* src = &a;
  Agent* dst = &b;
  std::printf("  %-4s %9s %9s %11s %9s %9s %10s\n", "run", "dump ms",
              "image MB", "transfer ms", "restore", "1st step", "PAUSE ms");
  for (int i = 0; i < migrations; ++i) {
    const int before = CountLogLines(*src, job, "step ");
    const auto t0 = Clock::now();
    const rpc::CheckpointReply c = Checkpoint(*src, job, 0);
    if (c.method() != "criu") {
      Die("CheckpointJob used '" + c.method() + "', not criu");
    }
    const double ckpt_ms = MsSince(t0);
    rpc::ReceiveCheckpointRequest rreq;
    rreq.set_job_id(job);
    rreq.set_action_id(NewAction());
    rreq.set_source_address(src->server->address());
    rpc::ReceiveCheckpointReply r;
    auto ctx = Ctx(240);
    grpc::Status s = dst->stub->ReceiveCheckpoint(ctx.get(), rreq, &r);
    if (!s.ok()) Die("ReceiveCheckpoint: " + s.error_message());
    const auto t_restore = Clock::now();
    StartJob(*dst, job, spec, {0}, false, /*resume_local=*/true);
    const double restore_ms = MsSince(t_restore);
    const auto t_step = Clock::now();
    WaitStepLines(*dst, job, 0, 120);
    const double step_ms = MsSince(t_step);
    const double pause_ms = MsSince(t0);
    Kill(*src, job);  // drops the source's images
    out.Add("dump ms", c.save_us() / 1e3);
    out.Add("checkpoint call ms", ckpt_ms);
    out.Add("image MB", c.bytes() / 1e6);
    out.Add("transfer ms", r.transfer_us() / 1e3);
    out.Add("transfer GB/s",
            r.transfer_us() > 0 ? r.bytes() / 1e3 / r.transfer_us() : 0);
    out.Add("restore ms", restore_ms);
    out.Add("first step ms", step_ms);
    out.Add("PAUSE ms", pause_ms);
    std::printf(
        "  %-4d %9.0f %9.0f %11.0f %9.0f %9.0f %10.0f   (%d steps "
        "before; over %s)\n",
        i + 1, c.save_us() / 1e3, c.bytes() / 1e6, r.transfer_us() / 1e3,
        restore_ms, step_ms, pause_ms, before, r.channel().c_str());
    std::fflush(stdout);
    std::swap(src, dst);
  }
  Kill(*src, job);
  Kill(*dst, job);
  std::printf("  medians (max):");
  for (const std::string& name : out.order) {
    const Stat st = Summarise(out.values.at(name));
    std::printf(" %s %.2f (%.2f);", name.c_str(), st.median, st.max);
  }
  std::printf("\n");
  const Stat pause = Summarise(out.values.at("PAUSE ms"));
  if (fast_path_ms > 0) {
    std::printf(
        "  CRIU pause %.0f ms against the fast path's %.0f ms (same model, "
        "same run): x%.1f\n",
        pause.median, fast_path_ms, pause.median / fast_path_ms);
  }
}

int main(int argc, char** argv) {
  int migrations = 5;
  int resizes = 3;
  bool small = true, large = true, resize = true;
  size_t loopback_mib = 1024;
  int large_width = 2048, large_layers = 6;
  int criu_runs = 3;
  bool bulk_transfer = true, compare_grpc = false, compare_files = false,
       compare_tls = false;
  bool stream_to_job = true;
  int bulk_streams = runtime::AgentOptions().bulk_streams;
  std::vector<int> compare_streams;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> int {
      if (i + 1 >= argc) Die(arg + " needs a value");
      return std::atoi(argv[++i]);
    };
    if (arg == "--migrations") {
      migrations = std::max(1, value());
    } else if (arg == "--resizes") {
      resizes = std::max(1, value());
    } else if (arg == "--skip-small") {
      small = false;
    } else if (arg == "--skip-large") {
      large = false;
    } else if (arg == "--small-only") {
      large = false;
      resize = false;
    } else if (arg == "--skip-resize") {
      resize = false;
    } else if (arg == "--loopback-mib") {
      loopback_mib = static_cast<size_t>(std::max(0, value()));
    } else if (arg == "--large-width") {
      large_width = value();
    } else if (arg == "--large-layers") {
      large_layers = value();
    } else if (arg == "--no-bulk-transfer") {
      bulk_transfer = false;
    } else if (arg == "--bulk-streams") {
      bulk_streams = std::clamp(value(), 1, runtime::kBulkMaxStreams);
    } else if (arg == "--compare-streams") {
      if (i + 1 >= argc) Die(arg + " needs a value");
      std::stringstream list(argv[++i]);
      std::string item;
      while (std::getline(list, item, ',')) {
        const int n = std::atoi(item.c_str());
        if (n < 1 || n > runtime::kBulkMaxStreams) {
          Die("--compare-streams: '" + item + "' is not 1 to " +
              std::to_string(runtime::kBulkMaxStreams));
        }
        compare_streams.push_back(n);
      }
    } else if (arg == "--criu-runs") {
      criu_runs = std::max(0, value());
    } else if (arg == "--compare-grpc") {
      compare_grpc = true;
    } else if (arg == "--compare-tls") {
      compare_tls = true;
    } else if (arg == "--compare-files") {
      compare_files = true;
    } else if (arg == "--no-stream-to-job") {
      stream_to_job = false;
    } else if (arg == "--gpu") {
      real_gpus = true;
    } else if (arg == "--overlap") {
      overlap = true;
    } else if (arg == "--wait-source-exit") {
      wait_source_exit = true;
    } else if (arg == "--verbose") {
      verbose = true;
    } else if (arg == "--help" || arg == "-h") {
      std::printf(
          "gandiva_bench_migration [--migrations N (5)] [--resizes N (3)] "
          "[--skip-small] [--skip-large] [--small-only] [--skip-resize] "
          "[--loopback-mib N (1024; 0: skip)] [--large-width W (2048)] "
          "[--large-layers L (6)] [--no-bulk-transfer] [--bulk-streams N] "
          "[--compare-grpc] [--compare-tls] [--compare-streams N,N,...] "
          "[--compare-files] "
          "[--no-stream-to-job] [--criu-runs N (3)] [--gpu] [--overlap] "
          "[--wait-source-exit] [--verbose]\n"
          "  --criu-runs N       CRIU migrations of the large model without "
          "the library\n"
          "                      (where CRIU works; 0: none)\n"
          "  --no-bulk-transfer  agents move checkpoints over the gRPC stream "
          "only\n"
          "  --bulk-streams N    parallel TCP streams the agents ask for "
          "(default: the\n"
          "                      agents' default)\n"
          "  --compare-grpc      also move the large model between two agents "
          "with\n"
          "                      the bulk channel off (a gRPC column beside "
          "it)\n"
          "  --compare-tls       also move it between two agents with mutual "
          "TLS\n"
          "                      (over their TLS gRPC stream; a TLS column)\n"
          "  --compare-streams L also move the large model between a pair "
          "of agents\n"
          "                      per number of streams in the list L "
          "(e.g. 1,2,4),\n"
          "                      side by side; agents a and b use the "
          "first\n"
          "  --no-stream-to-job  agents receive a warm start's checkpoint "
          "into files\n"
          "                      first (by default the job takes it from "
          "the source)\n"
          "  --compare-files     also move the large model between two agents "
          "that\n"
          "                      receive it into files first (a column beside "
          "it)\n"
          "  --wait-source-exit  receive only once the source's process has "
          "exited\n"
          "                      (its teardown then shares no CPU with the "
          "transfer)\n"
          "  --gpu               the agents offer the GPUs NVML finds; the "
          "models\n"
          "                      train there\n"
          "  --overlap           the older order: the warm start overlaps the "
          "save\n"
          "                      and transfer; the checkpoint waits for the "
          "exit\n");
      return 0;
    } else {
      Die("unknown argument " + arg + " (--help lists them)");
    }
  }
  const auto t_all = Clock::now();
  const std::string tag =
      "gandiva-bench-migration-" + std::to_string(::getpid());
  const fs::path dir = fs::temp_directory_path() / tag;
  const bool shm = fs::is_directory("/dev/shm");
  const fs::path ckpt_dir = shm ? fs::path("/dev/shm") / tag : dir / "ckpt";
  fs::create_directories(dir);
  std::printf(
      "gandiva migration and resize benchmark: %u cores, load average %s\n"
      "checkpoints under %s (%s)\n",
      std::thread::hardware_concurrency(), LoadAverage().c_str(),
      ckpt_dir.c_str(), shm ? "ramdisk" : "no /dev/shm: disk");
  std::fflush(stdout);

  if (!compare_streams.empty()) {
    if (!bulk_transfer) Die("--compare-streams needs the bulk channel");
    bulk_streams = compare_streams.front();
  }
  if (compare_files && (!bulk_transfer || !stream_to_job)) {
    Die("--compare-files compares against the default (bulk channel, "
        "straight into the job)");
  }
  Agent a = StartAgent("a", dir / "a", ckpt_dir / "a", bulk_transfer,
                       bulk_streams, stream_to_job);
  Agent b = StartAgent("b", dir / "b", ckpt_dir / "b", bulk_transfer,
                       bulk_streams, stream_to_job);
  const runtime::GpuInventory& inv = a.server->gpus();
  if (real_gpus && inv.is_virtual()) {
    Die("--gpu: no GPU found (" + inv.nvml_note() + ")");
  }
  if (inv.is_virtual()) {
    std::printf("jobs on the CPU (agents with 2 virtual GPUs)\n");
  } else {
    std::printf("jobs on GPU (each agent offers %zu: %s)\n", inv.gpus().size(),
                inv.gpus().front().name.c_str());
    if (resize && inv.gpus().size() < 2) {
      std::printf("resize skipped: it needs 2 GPUs, one per rank\n");
      resize = false;
    }
  }
  std::fflush(stdout);

  double loopback = 0, loopback_file = 0;
  if (loopback_mib > 0) {
    std::vector<double> runs;
    for (int i = 0; i < 3; ++i)
      runs.push_back(LoopbackGBps(loopback_mib << 20));
    const Stat s = Summarise(runs);
    loopback = s.median;
    std::printf(
        "\nraw loopback TCP (127.0.0.1, two threads, %zu MiB in 4 MiB writes, "
        "3 runs): median %.2f GB/s, best %.2f GB/s\n",
        loopback_mib, s.median, s.max);
    // The same into a new file on the checkpoint ramdisk: what any TCP
    // transfer of a checkpoint can reach here.
    runs.clear();
    const fs::path sink = ckpt_dir / "loopback-sink";
    fs::create_directories(ckpt_dir);
    for (int i = 0; i < 3; ++i) {
      runs.push_back(LoopbackGBps(loopback_mib << 20, &sink));
    }
    const Stat f = Summarise(runs);
    loopback_file = f.median;
    std::printf(
        "loopback TCP into a new file under %s (spliced, 3 runs): median "
        "%.2f GB/s, best %.2f GB/s\n",
        ckpt_dir.c_str(), f.median, f.max);
    std::fflush(stdout);
  }

  std::vector<Series> series;
  if (small || large) {
    std::printf(
        "\nmigrations between agents a and b (%s, %s; %s)\n",
        a.server->address().c_str(), b.server->address().c_str(),
        !bulk_transfer ? "gRPC stream"
        : bulk_streams == 1
            ? "bulk channel, 1 stream"
            : ("bulk channel, " + std::to_string(bulk_streams) + " streams")
                  .c_str());
    std::fflush(stdout);
  }
  if (small) {
    series.push_back(
        MigrateBench(a, b, 1, "small 2x256", 256, 2, 8, 20, migrations));
  }
  size_t large_index = 0;
  if (large) {
    char label[64];
    if (compare_streams.empty()) {
      std::snprintf(label, sizeof label, "large %dx%d", large_layers,
                    large_width);
    } else {
      std::snprintf(label, sizeof label, "%dx%d x%d", large_layers, large_width,
                    bulk_streams);
    }
    large_index = series.size();
    series.push_back(MigrateBench(a, b, 2, label, large_width, large_layers, 1,
                                  0, migrations));
  }
  size_t grpc_index = 0;
  if (large && compare_grpc && bulk_transfer) {
    // The same model between agents that move it over the gRPC stream.
    Agent c = StartAgent("c", dir / "c", ckpt_dir / "c", false, 1);
    Agent d = StartAgent("d", dir / "d", ckpt_dir / "d", false, 1);
    std::printf("  (agents c and d, %s and %s: bulk channel off)\n",
                c.server->address().c_str(), d.server->address().c_str());
    std::fflush(stdout);
    char label[64];
    std::snprintf(label, sizeof label, "%dx%d gRPC", large_layers, large_width);
    grpc_index = series.size();
    series.push_back(MigrateBench(c, d, 4, label, large_width, large_layers, 1,
                                  0, migrations));
    c.server->Shutdown();
    d.server->Shutdown();
  }
  size_t tls_index = 0;
  const fs::path certs = dir / "certs";
  if (large && compare_tls) {
    // The same model between agents with mutual TLS: over their TLS gRPC
    // stream (the bulk channel is plain TCP, off under TLS).
    fs::create_directories(certs);
    const runtime::TlsFiles files =
        runtime::testing::MakeTestCertificates(certs, "bench");
    if (files.ca.empty()) Die("--compare-tls: openssl made no certificates");
    Agent e = StartAgent("e", dir / "e", ckpt_dir / "e", true, bulk_streams,
                         stream_to_job, files);
    Agent f = StartAgent("f", dir / "f", ckpt_dir / "f", true, bulk_streams,
                         stream_to_job, files);
    std::printf("  (agents e and f, %s and %s: mutual TLS)\n",
                e.server->address().c_str(), f.server->address().c_str());
    std::fflush(stdout);
    char label[64];
    std::snprintf(label, sizeof label, "%dx%d TLS", large_layers, large_width);
    tls_index = series.size();
    series.push_back(MigrateBench(e, f, 5, label, large_width, large_layers, 1,
                                  0, migrations));
    e.server->Shutdown();
    f.server->Shutdown();
  }
  size_t files_index = 0;
  if (large && compare_files) {
    // The same model between agents that receive it into files first.
    Agent c =
        StartAgent("g", dir / "g", ckpt_dir / "g", true, bulk_streams, false);
    Agent d =
        StartAgent("h", dir / "h", ckpt_dir / "h", true, bulk_streams, false);
    std::printf("  (agents g and h, %s and %s: files first)\n",
                c.server->address().c_str(), d.server->address().c_str());
    std::fflush(stdout);
    char label[64];
    std::snprintf(label, sizeof label, "%dx%d files", large_layers,
                  large_width);
    files_index = series.size();
    series.push_back(MigrateBench(c, d, 5, label, large_width, large_layers, 1,
                                  0, migrations));
    c.server->Shutdown();
    d.server->Shutdown();
  }
  // The large model again between pairs of agents asking for other numbers
  // of streams: (number, index in `series`), the first being a and b.
  std::vector<std::pair<int, size_t>> by_streams;
  if (large && !compare_streams.empty()) {
    by_streams.emplace_back(bulk_streams, large_index);
    for (size_t k = 1; k < compare_streams.size(); ++k) {
      const int n = compare_streams[k];
      const std::string e = "e" + std::to_string(k);
      const std::string f = "f" + std::to_string(k);
      Agent c = StartAgent(e, dir / e, ckpt_dir / e, true, n);
      Agent d = StartAgent(f, dir / f, ckpt_dir / f, true, n);
      std::printf("  (agents %s and %s, %s and %s: %d stream%s)\n", e.c_str(),
                  f.c_str(), c.server->address().c_str(),
                  d.server->address().c_str(), n, n == 1 ? "" : "s");
      std::fflush(stdout);
      char label[64];
      std::snprintf(label, sizeof label, "%dx%d x%d", large_layers, large_width,
                    n);
      by_streams.emplace_back(n, series.size());
      series.push_back(MigrateBench(c, d, 10 + static_cast<int64_t>(k), label,
                                    large_width, large_layers, 1, 0,
                                    migrations));
      c.server->Shutdown();
      d.server->Shutdown();
    }
  }
  PrintMigrations(series, loopback, loopback_file);
  if (!by_streams.empty()) {
    std::printf(
        "large-model transfer by streams, median GB/s (%% of loopback"
        "%s):",
        loopback_file > 0 ? ", of loopback into a file" : "");
    for (const auto& [n, index] : by_streams) {
      const Stat st = Summarise(series[index].values.at("transfer GB/s"));
      std::printf(" x%d %.2f", n, st.median);
      if (loopback > 0) {
        std::printf(" (%.0f%%", 100 * st.median / loopback);
        if (loopback_file > 0) {
          std::printf(", %.0f%%", 100 * st.median / loopback_file);
        }
        std::printf(")");
      }
      std::printf(";");
    }
    std::printf("\n");
  }
  if (large && grpc_index > 0 && loopback > 0) {
    const Stat tcp = Summarise(series[large_index].values.at("transfer GB/s"));
    const Stat grpc = Summarise(series[grpc_index].values.at("transfer GB/s"));
    std::printf(
        "large-model transfer, median: bulk channel %.2f GB/s (%.0f%% of "
        "loopback, %.0f%% of loopback into a file), gRPC stream %.2f GB/s "
        "(%.0f%%, %.0f%%): x%.2f\n",
        tcp.median, 100 * tcp.median / loopback,
        loopback_file > 0 ? 100 * tcp.median / loopback_file : 0.0, grpc.median,
        100 * grpc.median / loopback,
        loopback_file > 0 ? 100 * grpc.median / loopback_file : 0.0,
        grpc.median > 0 ? tcp.median / grpc.median : 0.0);
  }
  if (large && compare_tls && tls_index > 0) {
    auto median = [&](size_t i, const char* row) {
      return Summarise(series[i].values.at(row)).median;
    };
    const double p = median(large_index, "CRITICAL PATH (ckpt -> 1st mb)");
    const double p_tls = median(tls_index, "CRITICAL PATH (ckpt -> 1st mb)");
    std::printf(
        "large-model migration under mutual TLS, median: transfer %.2f GB/s "
        "against %.2f GB/s without; training paused %.0f ms against %.0f ms: "
        "x%.2f\n",
        median(tls_index, "transfer GB/s"),
        median(large_index, "transfer GB/s"), p_tls, p,
        p > 0 ? p_tls / p : 0.0);
  }
  if (large && compare_files) {
    const Series& to_job = series[large_index];
    const Series& files = series[files_index];
    auto median = [](const Series& x, const char* row) {
      return Summarise(x.values.at(row)).median;
    };
    const double tl = median(to_job, "transfer + load");
    const double tl_files = median(files, "transfer + load");
    const double p = median(to_job, "CRITICAL PATH (ckpt -> 1st mb)");
    const double p_files = median(files, "CRITICAL PATH (ckpt -> 1st mb)");
    const double mb = median(to_job, "checkpoint MB");
    std::printf(
        "large-model transfer + load, median: straight into the job %.0f ms "
        "(%.2f GB/s), files first %.0f ms (%.2f GB/s): x%.2f; training "
        "paused %.0f ms against %.0f ms: x%.2f\n",
        tl, tl > 0 ? mb / tl : 0.0, tl_files,
        tl_files > 0 ? mb / tl_files : 0.0, tl > 0 ? tl_files / tl : 0.0, p,
        p_files, p > 0 ? p_files / p : 0.0);
  }
  if (large && !series.empty()) {
    const Series& big = series[large_index];
    const Stat crit =
        Summarise(big.values.at("CRITICAL PATH (ckpt -> 1st mb)"));
    const Stat gbps = Summarise(big.values.at("transfer GB/s"));
    std::printf(
        "target: large-model fast-path migration < 2000 ms (here: median "
        "%.0f ms, max %.0f ms: %s); transfer close to loopback bandwidth "
        "(here: %.2f GB/s",
        crit.median, crit.max, crit.median < 2000 ? "met" : "NOT met",
        gbps.median);
    if (loopback > 0) {
      std::printf(" = %.0f%% of %.2f GB/s", 100 * gbps.median / loopback,
                  loopback);
    }
    std::printf(")\n");
  } else if (small) {
    std::printf(
        "target: large-model fast-path migration < 2000 ms; transfer close to "
        "loopback bandwidth (large model skipped)\n");
  }
  std::fflush(stdout);

  if (resize) ResizeBench(a, 3, resizes);

  std::printf("\nCRIU: ");
  if (!a.server->WaitForCapabilities(milliseconds(15000))) {
    std::printf("the agent's probe did not finish within 15 s\n");
  } else {
    const runtime::Capabilities caps = a.server->capabilities();
    if (caps.criu && criu_runs > 0 && large) {
      std::printf("usable here (%s); generic migration of the large model:\n",
                  caps.criu_detail.c_str());
      double fast_ms = 0;
      if (!series.empty()) {
        fast_ms = Summarise(series[large_index].values.at(
                                "CRITICAL PATH (ckpt -> 1st mb)"))
                      .median;
      }
      CriuBench(a, b, 9, large_width, large_layers, criu_runs, fast_ms);
    } else if (caps.criu) {
      std::printf(
          "usable here (%s); skipped (--criu-runs 0 or no large "
          "model)\n",
          caps.criu_detail.c_str());
    } else {
      std::printf("not usable here: %s (nothing to time)\n",
                  caps.criu_detail.c_str());
    }
  }
  std::printf("\ndone in %.1f s; load average now %s\n", MsSince(t_all) / 1e3,
              LoadAverage().c_str());

  a.server->Shutdown();
  b.server->Shutdown();
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::remove_all(ckpt_dir, ec);
  return 0;
}
