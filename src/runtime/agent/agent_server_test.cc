// The Agent gRPC service in-process, against a fake Scheduler service that
// records RegisterAgent and Report calls: registration, exits reported once,
// idempotent actions, logs, re-registration after the daemon restarts (or
// forgets the agent) with the exits kept meanwhile, and a Python job
// suspended and resumed through the service.
#include "runtime/agent/agent_server.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "client/progress_page.h"
#include "client/progress_reader.h"
#include "proto/gandiva.grpc.pb.h"
#include "runtime/agent/capabilities.h"
#include "runtime/agent/criu.h"
#include "runtime/agent/gpu_inventory.h"
#include "runtime/agent/log_cap.h"
#include "runtime/agent/supervisor.h"
#include "runtime/agent/test_util.h"
#include "runtime/auth/control_token.h"
#include "runtime/exec_env.h"

namespace gandiva::runtime {
namespace {

using testing::TempDir;
using testing::UniqueName;
using testing::WaitUntil;
using namespace std::chrono_literals;

// A daemon that records what agents tell it. Report from an agent it has not
// registered is answered NOT_FOUND, as a restarted daemon would.
class FakeScheduler final : public rpc::Scheduler::Service {
 public:
  // Listens on `address` ("127.0.0.1:0" for a free port).
  explicit FakeScheduler(const std::string& address) {
    grpc::ServerBuilder b;
    b.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
  }
  ~FakeScheduler() override { Stop(); }
  void Stop() {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now());
      server_->Wait();
      server_.reset();
    }
  }
  bool ok() const { return server_ != nullptr && port_ > 0; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  grpc::Status RegisterAgent(grpc::ServerContext*,
                             const rpc::RegisterAgentRequest* req,
                             rpc::RegisterAgentReply* reply) override {
    std::function<void(const rpc::RegisterAgentRequest&)> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      registrations_.push_back(*req);
      known_.insert(req->name());
      reply->set_server_id(7);
      reply->set_cluster_id(cluster_);
      reply->set_control_token(AgentControlToken(control_token_, req->name()));
      hook = std::exchange(on_register_, nullptr);
    }
    if (hook) hook(*req);
    return grpc::Status::OK;
  }
  grpc::Status Report(grpc::ServerContext*, const rpc::AgentReport* req,
                      rpc::AgentReportReply*) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!known_.contains(req->name())) {
      ++unknown_reports_;
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "agent " + req->name() + " is not registered");
    }
    reports_.push_back(*req);
    return grpc::Status::OK;
  }

  grpc::Status Leave(grpc::ServerContext*, const rpc::LeaveRequest* req,
                     rpc::LeaveReply* reply) override {
    std::lock_guard<std::mutex> lock(mu_);
    leaves_.emplace_back(req->name(), reports_.size());
    reply->set_away_s(300);
    return grpc::Status::OK;
  }

  void Forget() {
    std::lock_guard<std::mutex> lock(mu_);
    known_.clear();
  }
  // The cluster id registrations are answered with from now on.
  void SetCluster(const std::string& cluster) {
    std::lock_guard<std::mutex> lock(mu_);
    cluster_ = cluster;
  }
  // The cluster's secret registrations are answered with, each with the
  // agent's own token derived from it (AgentControlToken), from now on
  // ("": none, as from a daemon before it).
  void SetControlToken(const std::string& token) {
    std::lock_guard<std::mutex> lock(mu_);
    control_token_ = token;
  }
  // Called once, with the next registration, before it is answered.
  void OnNextRegistration(
      std::function<void(const rpc::RegisterAgentRequest&)> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    on_register_ = std::move(hook);
  }
  // Each Leave: the agent's name and how many reports had come before it.
  std::vector<std::pair<std::string, size_t>> leaves() {
    std::lock_guard<std::mutex> lock(mu_);
    return leaves_;
  }
  std::vector<rpc::RegisterAgentRequest> registrations() {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_;
  }
  std::vector<rpc::AgentReport> reports() {
    std::lock_guard<std::mutex> lock(mu_);
    return reports_;
  }
  int unknown_reports() {
    std::lock_guard<std::mutex> lock(mu_);
    return unknown_reports_;
  }
  // Exits of `job_id` received so far, over all reports.
  std::vector<rpc::JobExit> ExitsOf(int64_t job_id) {
    std::vector<rpc::JobExit> out;
    for (const auto& r : reports()) {
      for (const auto& e : r.exits()) {
        if (e.job_id() == job_id) out.push_back(e);
      }
    }
    return out;
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::vector<rpc::RegisterAgentRequest> registrations_;
  std::vector<rpc::AgentReport> reports_;
  std::set<std::string> known_;
  std::vector<std::pair<std::string, size_t>> leaves_;
  int unknown_reports_ = 0;
  std::string cluster_ = "cluster-a";
  std::string control_token_;
  std::function<void(const rpc::RegisterAgentRequest&)> on_register_;
};

class AgentServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<FakeScheduler>("127.0.0.1:0");
    ASSERT_TRUE(daemon_->ok());
  }
  void StartAgent(int gpus = 4, int sockets = 2) {
    AgentOptions o;
    o.scheduler_address = daemon_->address();
    o.listen_address = "127.0.0.1:0";
    o.name = UniqueName("agent");
    o.virtual_gpus = gpus;
    o.sockets = sockets;
    o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
    o.work_dir = dir_.path();
    o.checkpoint_root = dir_.path() + "/ckpt";
    o.library_start_grace = 300ms;
    o.checkpoint_timeout = 20s;
    o.receive_timeout = 20s;
    o.report_interval = 100ms;
    o.criu = criu_;
    o.max_backoff = 300ms;
    o.kill_grace = 2s;
    o.max_log_bytes = max_log_bytes_;
    o.log = [](std::string_view) {};
    auto a = AgentServer::Start(o);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    agent_ = std::move(*a);
    stub_ = rpc::Agent::NewStub(grpc::CreateChannel(
        agent_->address(), grpc::InsecureChannelCredentials()));
    // Until it has registered it takes no job call (ControlGate).
    ASSERT_TRUE(WaitUntil([&] { return agent_->registered(); }));
  }
  grpc::Status Start(int64_t job, int64_t action, const std::string& command,
                     rpc::StartJobReply* reply = nullptr,
                     std::map<std::string, std::string> env = {}) {
    rpc::StartJobRequest req;
    req.set_job_id(job);
    req.set_action_id(action);
    req.mutable_spec()->set_command(command);
    req.mutable_spec()->set_gpus(1);
    for (const auto& [k, v] : env) (*req.mutable_spec()->mutable_env())[k] = v;
    req.add_gpus(0);
    rpc::StartJobReply r;
    grpc::ClientContext ctx;
    return stub_->StartJob(&ctx, req, reply ? reply : &r);
  }
  rpc::JobRequest Req(int64_t job, int64_t action) {
    rpc::JobRequest r;
    r.set_job_id(job);
    r.set_action_id(action);
    return r;
  }
  grpc::Status Suspend(int64_t job, int64_t action, rpc::SuspendReply* out) {
    grpc::ClientContext ctx;
    return stub_->SuspendJob(&ctx, Req(job, action), out);
  }
  grpc::Status Resume(int64_t job, int64_t action, rpc::ResumeReply* out) {
    grpc::ClientContext ctx;
    return stub_->ResumeJob(&ctx, Req(job, action), out);
  }
  grpc::Status Kill(int64_t job, int64_t action) {
    grpc::ClientContext ctx;
    rpc::KillReply out;
    return stub_->KillJob(&ctx, Req(job, action), &out);
  }
  rpc::AgentStatusReply Status() {
    grpc::ClientContext ctx;
    rpc::AgentStatusReply out;
    EXPECT_TRUE(stub_->Status(&ctx, {}, &out).ok());
    return out;
  }
  // *skipped: the output the agent said it dropped.
  std::string Tail(int64_t job, bool follow, int64_t offset = 0,
                   grpc::Status* status = nullptr, int64_t* skipped = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    rpc::TailLogRequest req;
    req.set_job_id(job);
    req.set_follow(follow);
    req.set_offset(offset);
    auto reader = stub_->TailLog(&ctx, req);
    std::string data;
    rpc::LogChunk chunk;
    int64_t next = -1;  // chunks are contiguous, but for what was dropped
    if (skipped != nullptr) *skipped = 0;
    while (reader->Read(&chunk)) {
      if (skipped != nullptr) *skipped += chunk.skipped();
      if (next >= 0) {
        EXPECT_EQ(chunk.offset(), next + chunk.skipped());
      } else if (offset >= 0) {
        EXPECT_EQ(chunk.offset(), offset + chunk.skipped());
      }
      next = chunk.offset() + static_cast<int64_t>(chunk.data().size());
      data += chunk.data();
    }
    grpc::Status s = reader->Finish();
    if (status) *status = s;
    return data;
  }

  TempDir dir_;
  bool criu_ = true;  // AgentOptions::criu of StartAgent
  int64_t max_log_bytes_ = int64_t{1} << 30;  // and its max_log_bytes
  std::unique_ptr<FakeScheduler> daemon_;
  std::unique_ptr<AgentServer> agent_;
  std::unique_ptr<rpc::Agent::Stub> stub_;
};

TEST_F(AgentServerTest, RegistersAndReportsAnExitExactlyOnce) {
  StartAgent(4, 2);
  ASSERT_TRUE(WaitUntil([&] { return !daemon_->registrations().empty(); }));
  const rpc::RegisterAgentRequest reg = daemon_->registrations()[0];
  EXPECT_EQ(reg.name(), agent_->name());
  EXPECT_EQ(reg.address(), "127.0.0.1:" + std::to_string(agent_->port()));
  EXPECT_EQ(reg.sockets(), 2);
  EXPECT_EQ(reg.switches_per_socket(), 1);
  ASSERT_EQ(reg.gpus_size(), 4);
  EXPECT_EQ(reg.gpus(3).uuid(), "virtual-3");
  EXPECT_EQ(reg.gpus(3).name(), "virtual");
  EXPECT_EQ(reg.gpus(3).socket(), 1);
  EXPECT_EQ(reg.jobs_size(), 0);
  ASSERT_TRUE(WaitUntil([&] { return agent_->registered(); }));
  EXPECT_EQ(agent_->server_id(), 7);

  rpc::StartJobReply started;
  ASSERT_TRUE(Start(1, 1, "echo hello; exit 4", &started).ok());
  EXPECT_GT(started.pid(), 0);
  ASSERT_TRUE(WaitUntil([&] { return !daemon_->ExitsOf(1).empty(); }));
  // A few more reports go out; the exit is in none of them.
  const size_t seen = daemon_->reports().size();
  ASSERT_TRUE(WaitUntil([&] { return daemon_->reports().size() >= seen + 3; }));
  const auto exits = daemon_->ExitsOf(1);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].exit_code(), 4);
  EXPECT_EQ(exits[0].minibatches(), 0);
  EXPECT_EQ(Tail(1, false), "hello\n");
  EXPECT_EQ(Tail(1, false, 2), "llo\n");
  EXPECT_EQ(Tail(1, false, -3), "lo\n");
  EXPECT_EQ(daemon_->registrations().size(), 1u);
}

TEST_F(AgentServerTest, JobActionsAreIdempotentPerActionId) {
  StartAgent();
  rpc::StartJobReply a, b;
  ASSERT_TRUE(Start(1, 10, "exec sleep 1000", &a).ok());
  ASSERT_TRUE(Start(1, 10, "exec sleep 1000", &b).ok());  // a repeat
  EXPECT_EQ(a.pid(), b.pid());
  grpc::Status s = Start(1, 11, "exec sleep 1000");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS)
      << s.error_message();

  rpc::SuspendReply s1, s2;
  ASSERT_TRUE(Suspend(1, 12, &s1).ok());
  ASSERT_TRUE(Suspend(1, 12, &s2).ok());  // the first result again
  EXPECT_EQ(s1.took_us(), s2.took_us());
  EXPECT_FALSE(s1.at_boundary());
  EXPECT_EQ(Suspend(1, 13, &s2).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  rpc::AgentStatusReply st = Status();
  EXPECT_EQ(st.server_name(), agent_->name());
  ASSERT_EQ(st.jobs_size(), 1);
  EXPECT_EQ(st.jobs(0).state(), rpc::SUSPENDED);
  EXPECT_EQ(st.jobs(0).pid(), a.pid());
  ASSERT_EQ(st.jobs(0).gpus_size(), 1);

  rpc::ResumeReply r;
  s = Resume(1, 12, &r);  // action 12 was a suspend
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("action_id"), std::string::npos);
  ASSERT_TRUE(Resume(1, 14, &r).ok());
  EXPECT_EQ(Status().jobs(0).state(), rpc::RUNNING);
  ASSERT_TRUE(Kill(1, 15).ok());
  ASSERT_TRUE(Kill(1, 15).ok());
  ASSERT_TRUE(Kill(1, 16).ok());  // already dead: still ok
  EXPECT_EQ(Status().jobs_size(), 0);

  rpc::SuspendReply unused;
  s = Suspend(42, 17, &unused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("job 42"), std::string::npos);
  rpc::StartJobRequest bad;
  bad.set_job_id(2);
  bad.set_action_id(18);
  bad.mutable_spec()->set_command("true");
  bad.mutable_spec()->set_workdir("/nonexistent/dir");
  rpc::StartJobReply unused2;
  grpc::ClientContext ctx;
  s = stub_->StartJob(&ctx, bad, &unused2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.workdir"), std::string::npos);
  EXPECT_EQ(Tail(99, false, 0, &s), "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(AgentServerTest, TailLogFollowsUntilTheJobEnds) {
  StartAgent();
  ASSERT_TRUE(
      Start(1, 1, "for i in 1 2 3; do echo line$i; sleep 0.2; done").ok());
  EXPECT_EQ(Tail(1, true), "line1\nline2\nline3\n");
}

// A job that prints more than the agent keeps of a log: the oldest output
// is dropped while it runs (its blocks freed, the offsets of the rest as
// they were), the newest kept, and TailLog says how much it passed over.
TEST_F(AgentServerTest, ALogBeyondItsBoundKeepsTheNewestOutput) {
  {
    // Where holes cannot be punched, the bound cannot hold.
    const std::string probe = dir_.path() + "/probe";
    std::FILE* f = std::fopen(probe.c_str(), "w");
    ASSERT_NE(f, nullptr);
    const std::string block(64 << 10, 'x');
    std::fwrite(block.data(), 1, block.size(), f);
    std::fclose(f);
    auto dropped = CapLog(probe, 16 << 10);
    if (!dropped.ok()) GTEST_SKIP() << dropped.status().ToString();
    EXPECT_GT(*dropped, 0);
  }
  max_log_bytes_ = 1 << 20;
  StartAgent();
  // About 2.7 MB of numbered lines; then it waits while the agent bounds
  // its log.
  ASSERT_TRUE(Start(1, 1, "seq 1 400000; echo last; exec sleep 600").ok());
  const std::string path = agent_->supervisor().LogPath(1);
  struct stat info;
  ASSERT_TRUE(WaitUntil([&] {
    return stat(path.c_str(), &info) == 0 && info.st_size > 2'000'000 &&
           info.st_blocks * 512 <= (1 << 20) + (64 << 10);
  })) << "not bounded: "
      << info.st_size << " bytes, " << info.st_blocks * 512 << " on disk";
  int64_t skipped = 0;
  grpc::Status st;
  const std::string log = Tail(1, false, 0, &st, &skipped);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_EQ(skipped + static_cast<int64_t>(log.size()), info.st_size);
  EXPECT_GT(skipped, 1'000'000);
  EXPECT_LE(log.size(), 1u << 20);
  const std::string end = "399999\n400000\nlast\n";
  ASSERT_GE(log.size(), end.size());
  EXPECT_EQ(log.substr(log.size() - end.size()), end);
  EXPECT_EQ(log.find("\n1000\n"), std::string::npos) << "oldest kept";
  // The last bytes, asked for from the end, are as they were.
  EXPECT_EQ(Tail(1, false, -static_cast<int64_t>(end.size())), end);
  EXPECT_TRUE(Kill(1, 2).ok());
}

// An agent that stops while the daemon is unreachable keeps the exits of
// the jobs that ended by themselves (not of those it saved or killed as it
// stopped): its next run on the same work dir reports them, so that the
// daemon ends those jobs instead of starting them again.
TEST_F(AgentServerTest, ExitsTheDaemonDidNotHearOfGoToTheNextRun) {
  StartAgent();
  ASSERT_TRUE(WaitUntil([&] { return agent_->registered(); }));
  const std::string address = daemon_->address();
  daemon_->Stop();
  ASSERT_TRUE(Start(2, 2, "exit 5").ok());
  ASSERT_TRUE(Start(3, 3, "exec sleep 1000").ok());  // saved or killed
  ASSERT_TRUE(agent_->supervisor().WaitForExit(2, 30s));
  agent_->Shutdown();
  EXPECT_TRUE(std::filesystem::exists(dir_.path() + "/unreported-exits"));
  agent_.reset();

  daemon_ = std::make_unique<FakeScheduler>(address);  // same port
  ASSERT_TRUE(daemon_->ok());
  StartAgent();
  ASSERT_TRUE(WaitUntil([&] { return !daemon_->ExitsOf(2).empty(); }));
  ASSERT_EQ(daemon_->ExitsOf(2).size(), 1u);
  EXPECT_EQ(daemon_->ExitsOf(2)[0].exit_code(), 5);
  EXPECT_TRUE(daemon_->ExitsOf(3).empty());  // not the job's end
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/unreported-exits"));
}

TEST_F(AgentServerTest, ReRegistersAfterTheDaemonRestartsAndKeepsExits) {
  StartAgent();
  ASSERT_TRUE(WaitUntil([&] { return agent_->registered(); }));
  ASSERT_TRUE(Start(1, 1, "exec sleep 1000").ok());
  const std::string address = daemon_->address();
  daemon_->Stop();
  // While the daemon is down a job ends; its exit is kept.
  ASSERT_TRUE(Start(2, 2, "exit 5").ok());
  ASSERT_TRUE(agent_->supervisor().WaitForExit(2, 30s));
  ASSERT_TRUE(WaitUntil([&] { return !agent_->registered(); }));
  ASSERT_EQ(agent_->supervisor().PendingExits().size(), 1u);

  daemon_ = std::make_unique<FakeScheduler>(address);  // same port
  ASSERT_TRUE(daemon_->ok());
  ASSERT_TRUE(WaitUntil([&] { return !daemon_->ExitsOf(2).empty(); }));
  const auto regs = daemon_->registrations();
  ASSERT_GE(regs.size(), 1u);
  ASSERT_EQ(regs[0].jobs_size(), 1);  // the job still running
  EXPECT_EQ(regs[0].jobs(0).job_id(), 1);
  EXPECT_EQ(regs[0].jobs(0).state(), rpc::RUNNING);
  // With the spec it was started with (a daemon that lost it adopts it).
  EXPECT_EQ(regs[0].jobs(0).spec().command(), "exec sleep 1000");
  EXPECT_EQ(regs[0].jobs(0).spec().gpus(), 1);
  const size_t seen = daemon_->reports().size();
  ASSERT_TRUE(WaitUntil([&] { return daemon_->reports().size() >= seen + 2; }));
  ASSERT_EQ(daemon_->ExitsOf(2).size(), 1u);
  EXPECT_EQ(daemon_->ExitsOf(2)[0].exit_code(), 5);
  EXPECT_TRUE(agent_->supervisor().PendingExits().empty());
  EXPECT_GE(agent_->registrations(), 2);

  // A daemon that forgets the agent answers NOT_FOUND: the agent registers
  // again at once.
  const int before = agent_->registrations();
  daemon_->Forget();
  ASSERT_TRUE(WaitUntil([&] { return agent_->registrations() > before; }));
  EXPECT_GE(daemon_->unknown_reports(), 1);
  EXPECT_EQ(daemon_->registrations().back().jobs_size(), 1);
}

// A checkpoint held here is listed at registration with the cluster it was
// saved in; registered with another cluster (its database made anew), the
// agent drops it: that cluster's job of the same id is another job. Each
// registration says the cluster the agent last registered with (none at
// the first).
TEST_F(AgentServerTest, ACheckpointOfAnotherClusterIsDroppedAtRegistration) {
  StartAgent();
  ASSERT_TRUE(WaitUntil([&] { return agent_->registered(); }));
  EXPECT_EQ(daemon_->registrations().front().cluster_id(), "");
  Supervisor& sup = agent_->supervisor();
  const std::string dir = sup.CheckpointDir(5);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/state") << "minibatches 5";
  sup.HoldCheckpoint(5, dir);
  EXPECT_EQ(sup.HeldCheckpointCluster(5), "cluster-a");

  int before = agent_->registrations();
  daemon_->Forget();  // the same cluster: kept
  ASSERT_TRUE(WaitUntil([&] { return agent_->registrations() > before; }));
  rpc::RegisterAgentRequest reg = daemon_->registrations().back();
  ASSERT_EQ(reg.checkpoints_size(), 1);
  EXPECT_EQ(reg.checkpoints(0), 5);
  ASSERT_EQ(reg.checkpoint_clusters_size(), 1);
  EXPECT_EQ(reg.checkpoint_clusters(0), "cluster-a");
  ASSERT_EQ(reg.checkpoint_specs_size(), 1);  // held by hand: no spec
  EXPECT_EQ(reg.checkpoint_specs(0).command(), "");
  EXPECT_EQ(reg.cluster_id(), "cluster-a");
  EXPECT_EQ(sup.HeldCheckpoint(5), dir);

  daemon_->SetCluster("cluster-b");
  before = agent_->registrations();
  daemon_->Forget();
  ASSERT_TRUE(WaitUntil([&] { return agent_->registrations() > before; }));
  // The agent forgets the checkpoint before it removes its files: wait for
  // both.
  ASSERT_TRUE(WaitUntil([&] { return sup.HeldCheckpoint(5).empty(); }));
  EXPECT_TRUE(WaitUntil([&] { return !std::filesystem::exists(dir); }));
  before = agent_->registrations();
  daemon_->Forget();
  ASSERT_TRUE(WaitUntil([&] { return agent_->registrations() > before; }));
  EXPECT_EQ(daemon_->registrations().back().checkpoints_size(), 0);
  EXPECT_EQ(daemon_->registrations().back().cluster_id(), "cluster-b");
}

TEST_F(AgentServerTest, ProfilesAndSuspendOfAPythonJob) {
  if (access("/usr/bin/python3", X_OK) != 0) {
    GTEST_SKIP() << "no /usr/bin/python3";
  }
  StartAgent();
  ASSERT_TRUE(Start(3, 1,
                    "/usr/bin/python3 -c 'import time, gandiva\n"
                    "gandiva.init()\n"
                    "for i in range(100):\n"
                    "    time.sleep(0.01)\n"
                    "    gandiva.step()\n'",
                    nullptr,
                    {{"PYTHONPATH", GANDIVA_PYTHON_DIR},
                     {"GANDIVA_CLIENT_LIB", GANDIVA_CLIENT_LIB_PATH},
                     {"PYTHONDONTWRITEBYTECODE", "1"}})
                  .ok());
  // Profiles show the library and progress.
  ASSERT_TRUE(WaitUntil([&] {
    for (const auto& r : daemon_->reports()) {
      for (const auto& p : r.profiles()) {
        if (p.job_id() == 3 && p.progress().uses_library() &&
            p.progress().minibatches() >= 3) {
          return true;
        }
      }
    }
    return !daemon_->ExitsOf(3).empty();
  }));
  ASSERT_TRUE(daemon_->ExitsOf(3).empty()) << "ended too soon";
  rpc::SuspendReply s;
  grpc::Status st = Suspend(3, 2, &s);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(s.at_boundary());
  const int64_t at = Status().jobs(0).progress().minibatches();
  EXPECT_LT(at, 100);
  // Its reports say so (the daemon checks the process's state by them).
  auto reported = [&](rpc::JobState want) {
    return WaitUntil([&] {
      const auto reports = daemon_->reports();
      if (reports.empty()) return false;
      for (const auto& p : reports.back().profiles()) {
        if (p.job_id() == 3) return p.state() == want;
      }
      return false;
    });
  };
  EXPECT_TRUE(reported(rpc::SUSPENDED));
  rpc::ResumeReply r;
  ASSERT_TRUE(Resume(3, 3, &r).ok());
  EXPECT_TRUE(reported(rpc::RUNNING));
  std::printf(
      "[ python via gRPC ] suspend %lld us (at boundary), resume %lld us\n",
      static_cast<long long>(s.took_us()), static_cast<long long>(r.took_us()));
  ASSERT_TRUE(WaitUntil([&] { return !daemon_->ExitsOf(3).empty(); }, 60s));
  EXPECT_EQ(daemon_->ExitsOf(3)[0].exit_code(), 0);
  EXPECT_EQ(daemon_->ExitsOf(3)[0].minibatches(), 100);
}

// ------------------------------------------------ migration and resize

// A second agent (destination of a migration) with its own dirs, serving
// without a daemon, and helpers for the new calls.
class MigrationTest : public AgentServerTest {
 protected:
  // `with_daemon`: it registers with the first one's daemon (and so has
  // the cluster's control token, if it gives one).
  void StartSecondAgent(bool with_daemon = false) {
    AgentOptions o;
    if (with_daemon) {
      o.scheduler_address = daemon_->address();
      o.report_interval = 100ms;
      o.max_backoff = 300ms;
    }
    o.listen_address = "127.0.0.1:0";
    o.name = UniqueName("agent-b");
    o.virtual_gpus = 4;
    o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
    o.work_dir = dir2_.path();
    o.checkpoint_root = dir2_.path() + "/ckpt";
    o.library_start_grace = 300ms;
    o.checkpoint_timeout = 20s;
    o.receive_timeout = 20s;
    o.kill_grace = 2s;
    o.log = [](std::string_view) {};
    auto a = AgentServer::Start(o);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    agent2_ = std::move(*a);
    stub2_ = rpc::Agent::NewStub(grpc::CreateChannel(
        agent2_->address(), grpc::InsecureChannelCredentials()));
    if (with_daemon) {
      ASSERT_TRUE(WaitUntil([&] { return agent2_->registered(); }));
    }
  }
  static rpc::StartJobRequest StartReq(int64_t job, int64_t action,
                                       const std::string& command) {
    rpc::StartJobRequest req;
    req.set_job_id(job);
    req.set_action_id(action);
    req.mutable_spec()->set_command(command);
    req.mutable_spec()->set_gpus(1);
    req.add_gpus(0);
    return req;
  }
  // A restartable job: says it started, saves 42 of its own on SIGTERM,
  // and says so when started from it ("resumed 42").
  static constexpr char kRestartable[] =
      "echo started; "
      "if [ -f \"$GANDIVA_RESUME_FROM/own\" ]; then "
      "echo \"resumed $(cat \"$GANDIVA_RESUME_FROM/own\")\"; fi; "
      "trap 'echo 42 > \"$GANDIVA_CHECKPOINT_DIR/own\"; exit 0' TERM; "
      "while :; do sleep 0.05; done";
  static grpc::Status StartOn(rpc::Agent::Stub* stub,
                              const rpc::StartJobRequest& req,
                              const std::string& token = "") {
    grpc::ClientContext ctx;
    AttachControlToken(token, &ctx);
    rpc::StartJobReply r;
    return stub->StartJob(&ctx, req, &r);
  }
  static grpc::Status CheckpointOn(rpc::Agent::Stub* stub, int64_t job,
                                   int64_t action, rpc::CheckpointReply* out,
                                   int resize_to = 0,
                                   const std::string& token = "") {
    rpc::CheckpointRequest req;
    req.set_job_id(job);
    req.set_action_id(action);
    req.set_resize_to(resize_to);
    grpc::ClientContext ctx;
    AttachControlToken(token, &ctx);
    return stub->CheckpointJob(&ctx, req, out);
  }
  static grpc::Status ReceiveOn(rpc::Agent::Stub* stub, int64_t job,
                                int64_t action, const std::string& source,
                                rpc::ReceiveCheckpointReply* out,
                                const std::string& token = "",
                                const std::string& fetch_ticket = "") {
    rpc::ReceiveCheckpointRequest req;
    req.set_job_id(job);
    req.set_action_id(action);
    req.set_source_address(source);
    req.set_fetch_ticket(fetch_ticket);
    req.set_await_first_minibatch(true);
    grpc::ClientContext ctx;
    AttachControlToken(token, &ctx);
    return stub->ReceiveCheckpoint(&ctx, req, out);
  }
  // The job's whole log as the agent serves it (TailLog, not following).
  static std::string TailAll(rpc::Agent::Stub* stub, int64_t job) {
    grpc::Status s;
    std::string all = TailWith(stub, job, "", &s);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return all;
  }
  // The same with a log ticket (none when empty); *status: how it ended.
  static std::string TailWith(rpc::Agent::Stub* stub, int64_t job,
                              const std::string& ticket, grpc::Status* status) {
    grpc::ClientContext ctx;
    rpc::TailLogRequest req;
    req.set_job_id(job);
    req.set_ticket(ticket);
    auto reader = stub->TailLog(&ctx, req);
    rpc::LogChunk chunk;
    std::string all;
    while (reader->Read(&chunk)) all += chunk.data();
    *status = reader->Finish();
    return all;
  }
  // A ReadCheckpoint of `job` that must yield no chunk: how it ended.
  static grpc::Status ReadNothing(rpc::Agent::Stub* stub, int64_t job,
                                  const std::string& fetch_ticket = "") {
    grpc::ClientContext ctx;
    AttachFetchTicket(fetch_ticket, &ctx);
    rpc::ReadCheckpointRequest req;
    req.set_job_id(job);
    auto reader = stub->ReadCheckpoint(&ctx, req);
    rpc::CheckpointChunk chunk;
    EXPECT_FALSE(reader->Read(&chunk));
    return reader->Finish();
  }
  static rpc::AgentStatusReply StatusOf(rpc::Agent::Stub* stub,
                                        const std::string& token = "") {
    grpc::ClientContext ctx;
    AttachControlToken(token, &ctx);
    rpc::AgentStatusReply out;
    EXPECT_TRUE(stub->Status(&ctx, {}, &out).ok());
    return out;
  }
  static int64_t Minibatches(rpc::Agent::Stub* stub, int64_t job) {
    const rpc::AgentStatusReply st = StatusOf(stub);
    for (const auto& j : st.jobs()) {
      if (j.job_id() == job) return j.progress().minibatches();
    }
    return -1;
  }
  static const rpc::AgentJob* FindJob(const rpc::AgentStatusReply& st,
                                      int64_t job) {
    for (const auto& j : st.jobs()) {
      if (j.job_id() == job) return &j;
    }
    return nullptr;
  }
  // The count saved in a checkpoint's state file (-1: none).
  static int64_t SavedCount(const std::string& dir) {
    unsigned long long n = 0;
    const std::string text = testing::ReadFile(dir + "/state");
    if (std::sscanf(text.c_str(), "minibatches %llu", &n) != 1) return -1;
    return static_cast<int64_t>(n);
  }
  std::string Job(const std::string& args) {
    return std::string("exec ") + GANDIVA_AGENT_TEST_JOB + " " + args;
  }
  std::string Ckpt(int64_t job) {
    return dir_.path() + "/ckpt/jobs/" + std::to_string(job) + "/checkpoint";
  }
  std::string Log(const TempDir& d, int64_t job) {
    return testing::ReadFile(d.path() + "/jobs/" + std::to_string(job) +
                             "/log");
  }
  // Starts job 1 on the first agent again from the checkpoint held for it,
  // saved at mini-batch `n` (with a `big_kib` KiB weights file), to train 5
  // mini-batches more (action 3); waits for its end and checks that it
  // restored n and the weights and trained to n + 5. *again: the request.
  void ResumeHereAndFinish(int64_t n, int big_kib,
                           rpc::StartJobRequest* again) {
    *again = StartReq(1, 3,
                      Job(std::to_string(n + 5) + " 5 --state --big " +
                          std::to_string(big_kib)));
    again->set_resume_local(true);
    const grpc::Status s = StartOn(stub_.get(), *again);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_TRUE(agent_->supervisor().WaitForExit(1, 20s));
    const std::string log = Log(dir_, 1);
    EXPECT_NE(log.find("restored " + std::to_string(n)), std::string::npos)
        << log;
    EXPECT_NE(log.find("weights ok"), std::string::npos) << log;
    EXPECT_NE(log.find("minibatches " + std::to_string(n + 5)),
              std::string::npos)
        << log;
  }

  // Starts `job` on the first agent and warm on the second (on GPU `job`
  // of each), lets it train, checkpoints it at the first and has the second
  // receive it: the receive's status.
  grpc::Status MoveWarm(int64_t job, const std::string& src_args,
                        const std::string& dst_args, rpc::CheckpointReply* c,
                        rpc::ReceiveCheckpointReply* r) {
    rpc::StartJobRequest start = StartReq(job, job * 10, Job(src_args));
    start.set_gpus(0, static_cast<int32_t>(job));
    EXPECT_TRUE(StartOn(stub_.get(), start).ok());
    rpc::StartJobRequest warm = StartReq(job, job * 10, Job(dst_args));
    warm.set_gpus(0, static_cast<int32_t>(job));
    warm.set_warm(true);
    warm.set_await_ready_ms(20000);
    EXPECT_TRUE(StartOn(stub2_.get(), warm).ok());
    EXPECT_TRUE(WaitUntil([&] { return Minibatches(stub_.get(), job) >= 3; }));
    grpc::Status s = CheckpointOn(stub_.get(), job, job * 10 + 1, c);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return ReceiveOn(stub2_.get(), job, job * 10 + 1, agent_->address(), r);
  }

  TempDir dir2_;
  std::unique_ptr<AgentServer> agent2_;
  std::unique_ptr<rpc::Agent::Stub> stub2_;
};

TEST_F(MigrationTest, CheckpointOfARunningJobThenResumeLocalThenKillDrops) {
  StartAgent();
  ASSERT_TRUE(
      StartOn(stub_.get(), StartReq(1, 1, Job("100000 5 --state --big 3000")))
          .ok());
  ASSERT_TRUE(WaitUntil([&] { return Minibatches(stub_.get(), 1) >= 3; }));
  rpc::CheckpointReply c;
  grpc::Status s = CheckpointOn(stub_.get(), 1, 2, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(c.method(), "library");
  EXPECT_EQ(c.files(), 2);
  EXPECT_GT(c.bytes(), 3000 * 1024);
  EXPECT_GE(c.minibatches(), 3);
  EXPECT_GT(c.took_us(), 0);
  EXPECT_GE(c.save_us(), 0);
  EXPECT_EQ(SavedCount(Ckpt(1)), c.minibatches());
  std::printf("[ checkpoint ] took %lld us, save %lld us, %lld bytes\n",
              static_cast<long long>(c.took_us()),
              static_cast<long long>(c.save_us()),
              static_cast<long long>(c.bytes()));
  // The exit reaches the daemon as any other, with code 75.
  ASSERT_TRUE(WaitUntil([&] { return !daemon_->ExitsOf(1).empty(); }));
  EXPECT_EQ(daemon_->ExitsOf(1)[0].exit_code(), 75);

  // Resumes here from that checkpoint.
  rpc::StartJobRequest again;
  ASSERT_NO_FATAL_FAILURE(ResumeHereAndFinish(c.minibatches(), 3000, &again));

  // KillJob drops the checkpoint; resume_local is then refused.
  ASSERT_TRUE(Kill(1, 4).ok());
  EXPECT_FALSE(std::filesystem::exists(Ckpt(1)));
  again.set_action_id(5);
  EXPECT_EQ(StartOn(stub_.get(), again).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

// An agent that stops has each job that can save its state do so and exit
// (its exit reported with checkpoint_kept and how it saved): with the
// library, or where CRIU works here by a dump; the others are killed. The
// next agent on the same checkpoint root holds those checkpoints again,
// lists them when it registers, and starts each job from its checkpoint.
TEST_F(MigrationTest, AStoppingAgentKeepsCheckpointsForTheNextRun) {
  StartAgent();
  ASSERT_TRUE(
      StartOn(stub_.get(), StartReq(1, 1, Job("100000 5 --state --big 300")))
          .ok());
  rpc::StartJobRequest plain = StartReq(2, 2, "exec sleep 1000");
  plain.set_gpus(0, 1);
  ASSERT_TRUE(StartOn(stub_.get(), plain).ok());
  ASSERT_TRUE(WaitUntil([&] { return Minibatches(stub_.get(), 1) >= 3; }));
  ASSERT_TRUE(WaitUntil([&] { return agent_->registered(); }));
  ASSERT_TRUE(WaitUntil(
      [&] { return agent_->capabilities().criu_detail != "not checked yet"; }));
  const bool criu = agent_->capabilities().criu;
  const pid_t plain_pid = agent_->supervisor().Job(2)->pid;
  const std::string name = agent_->name();
  agent_->Shutdown();

  const auto leaves = daemon_->leaves();
  ASSERT_EQ(leaves.size(), 1u);
  EXPECT_EQ(leaves[0].first, name);
  const auto reports = daemon_->reports();
  for (size_t i = 0; i < leaves[0].second; ++i) {
    EXPECT_EQ(reports[i].exits_size(), 0) << "an exit came before the Leave";
  }
  ASSERT_EQ(daemon_->ExitsOf(1).size(), 1u);
  const rpc::JobExit saved = daemon_->ExitsOf(1)[0];
  EXPECT_EQ(saved.exit_code(), 75);
  EXPECT_TRUE(saved.checkpoint_kept());
  EXPECT_GE(saved.minibatches(), 3);
  EXPECT_EQ(SavedCount(Ckpt(1)), saved.minibatches());
  EXPECT_EQ(saved.checkpoint_method(), "library");
  EXPECT_FALSE(saved.agent_stopped());
  ASSERT_EQ(daemon_->ExitsOf(2).size(), 1u);
  const rpc::JobExit plain_exit = daemon_->ExitsOf(2)[0];
  if (criu) {
    EXPECT_TRUE(plain_exit.checkpoint_kept());
    EXPECT_EQ(plain_exit.checkpoint_method(), "criu");
    EXPECT_FALSE(plain_exit.agent_stopped());
  } else {
    EXPECT_FALSE(plain_exit.checkpoint_kept());
    EXPECT_TRUE(plain_exit.agent_stopped());
    EXPECT_FALSE(std::filesystem::exists(Ckpt(2)));
  }

  agent_.reset();
  const size_t before = daemon_->registrations().size();
  StartAgent();
  ASSERT_TRUE(
      WaitUntil([&] { return daemon_->registrations().size() > before; }));
  const rpc::RegisterAgentRequest reg = daemon_->registrations().back();
  EXPECT_EQ(reg.jobs_size(), 0);
  ASSERT_EQ(reg.checkpoints_size(), criu ? 2 : 1);
  EXPECT_EQ(reg.checkpoints(0), 1);
  EXPECT_EQ(agent_->supervisor().HeldCheckpoint(1), Ckpt(1));
  if (criu) {
    // The dumped job is restored, not started afresh.
    EXPECT_EQ(reg.checkpoints(1), 2);
    rpc::StartJobRequest restore = StartReq(2, 20, "exec sleep 1000");
    restore.set_gpus(0, 1);
    restore.set_resume_local(true);
    ASSERT_TRUE(StartOn(stub_.get(), restore).ok());
    EXPECT_EQ(agent_->supervisor().Job(2)->pid, plain_pid);  // CRIU's
  }

  rpc::StartJobRequest again;
  ASSERT_NO_FATAL_FAILURE(
      ResumeHereAndFinish(saved.minibatches(), 300, &again));
}

TEST_F(MigrationTest, CheckpointOfASuspendedJobSavesWhereItStopped) {
  StartAgent();
  ASSERT_TRUE(
      StartOn(stub_.get(), StartReq(1, 1, Job("100000 5 --state"))).ok());
  ASSERT_TRUE(WaitUntil([&] { return Minibatches(stub_.get(), 1) >= 3; }));
  rpc::SuspendReply sr;
  ASSERT_TRUE(Suspend(1, 2, &sr).ok());
  ASSERT_TRUE(sr.at_boundary());
  const int64_t at = Minibatches(stub_.get(), 1);
  rpc::CheckpointReply c;
  grpc::Status s = CheckpointOn(stub_.get(), 1, 3, &c, /*resize_to=*/2);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(c.method(), "library");
  EXPECT_EQ(c.minibatches(), at);  // no further mini-batch was trained
  EXPECT_EQ(SavedCount(Ckpt(1)), at);
  ASSERT_TRUE(WaitUntil([&] { return !daemon_->ExitsOf(1).empty(); }));
  EXPECT_EQ(daemon_->ExitsOf(1)[0].exit_code(), 76);  // a resize
}

TEST_F(MigrationTest, AFailedSaveLeavesTheJobAsItWas) {
  StartAgent();
  ASSERT_TRUE(
      StartOn(stub_.get(), StartReq(1, 1, Job("100000 5 --state --fail-save")))
          .ok());
  ASSERT_TRUE(WaitUntil([&] { return Minibatches(stub_.get(), 1) >= 3; }));
  rpc::CheckpointReply c;
  grpc::Status s = CheckpointOn(stub_.get(), 1, 2, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("save failed"), std::string::npos)
      << s.error_message();
  auto st = Status();
  ASSERT_EQ(st.jobs_size(), 1);
  EXPECT_EQ(st.jobs(0).state(), rpc::RUNNING);
  const int64_t m = st.jobs(0).progress().minibatches();
  ASSERT_TRUE(WaitUntil([&] { return Minibatches(stub_.get(), 1) > m + 2; }));

  // Suspended: suspended again afterwards.
  rpc::SuspendReply sr;
  ASSERT_TRUE(Suspend(1, 3, &sr).ok());
  s = CheckpointOn(stub_.get(), 1, 4, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  st = Status();
  ASSERT_EQ(st.jobs_size(), 1);
  EXPECT_EQ(st.jobs(0).state(), rpc::SUSPENDED);
  EXPECT_TRUE(ProcessGroupStopped(static_cast<pid_t>(st.jobs(0).pid())));
  rpc::ResumeReply rr;
  ASSERT_TRUE(Resume(1, 5, &rr).ok());
  const int64_t m2 = Minibatches(stub_.get(), 1);
  ASSERT_TRUE(WaitUntil([&] { return Minibatches(stub_.get(), 1) > m2 + 2; }));
  EXPECT_TRUE(daemon_->ExitsOf(1).empty());
}

TEST_F(MigrationTest, RefusesAJobThatCannotBeCheckpointedAndLeavesItRunning) {
  criu_ = false;  // else CRIU would move it
  StartAgent();
  rpc::StartJobReply started;
  ASSERT_TRUE(Start(7, 1, "exec sleep 1000", &started).ok());
  ASSERT_TRUE(agent_->WaitForCapabilities(20s));
  rpc::CheckpointReply c;
  grpc::Status s = CheckpointOn(stub_.get(), 7, 2, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("job 7 cannot be migrated"),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("not declared restartable"),
            std::string::npos);
  EXPECT_NE(s.error_message().find("CRIU is not usable on this server "
                                   "(turned off on this agent (--no-criu))"),
            std::string::npos)
      << s.error_message();
  std::printf("[ refusal ] %s\n", s.error_message().c_str());
  auto st = Status();
  ASSERT_EQ(st.jobs_size(), 1);
  EXPECT_EQ(st.jobs(0).state(), rpc::RUNNING);
  EXPECT_EQ(st.jobs(0).pid(), started.pid());
  EXPECT_EQ(kill(static_cast<pid_t>(started.pid()), 0), 0);
}

TEST_F(MigrationTest, ARestartableJobGetsSigterm) {
  StartAgent();
  rpc::StartJobRequest req = StartReq(
      1, 1,
      "trap 'echo saved > \"$GANDIVA_CHECKPOINT_DIR/own\"; exit 0' TERM; "
      "while :; do sleep 0.05; done");
  req.mutable_spec()->set_restartable(true);
  ASSERT_TRUE(StartOn(stub_.get(), req).ok());
  std::this_thread::sleep_for(100ms);
  rpc::SuspendReply sr;
  ASSERT_TRUE(Suspend(1, 2, &sr).ok());  // SIGCONT after SIGTERM too
  rpc::CheckpointReply c;
  grpc::Status s = CheckpointOn(stub_.get(), 1, 3, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(c.method(), "restart");
  EXPECT_EQ(c.files(), 1);
  EXPECT_EQ(testing::ReadFile(Ckpt(1) + "/own"), "saved\n");
  ASSERT_TRUE(WaitUntil([&] { return !daemon_->ExitsOf(1).empty(); }));
  EXPECT_EQ(daemon_->ExitsOf(1)[0].exit_code(), 0);
}

// A job without the library that keeps its own checkpoints moves to another
// agent cold: SIGTERM at the source, the files received and held at the
// destination (no process there yet), then started from them.
TEST_F(MigrationTest, ARestartableJobMovesColdToAnotherAgent) {
  StartAgent();
  StartSecondAgent();
  const std::string script = kRestartable;
  rpc::StartJobRequest req = StartReq(1, 1, script);
  req.mutable_spec()->set_restartable(true);
  ASSERT_TRUE(StartOn(stub_.get(), req).ok());
  std::this_thread::sleep_for(100ms);
  rpc::CheckpointReply c;
  grpc::Status s = CheckpointOn(stub_.get(), 1, 2, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(c.method(), "restart");
  rpc::ReceiveCheckpointReply r;
  s = ReceiveOn(stub2_.get(), 1, 3, agent_->address(), &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(r.bytes(), c.bytes());
  EXPECT_EQ(r.load_us(), 0);  // nothing loaded it yet
  rpc::StartJobRequest there = StartReq(1, 4, script);
  there.mutable_spec()->set_restartable(true);
  there.set_resume_local(true);
  s = StartOn(stub2_.get(), there);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string log = agent2_->supervisor().LogPath(1);
  ASSERT_TRUE(WaitUntil([&] {
    return testing::ReadFile(log).find("resumed 42\n") != std::string::npos;
  })) << testing::ReadFile(log);
}

// The daemon sends its first calls to an agent once it has registered it,
// and one can overtake the registration's reply, which carries the control
// token: the agent waits for the reply rather than refuse it.
TEST_F(MigrationTest, ACallThatOvertakesTheRegistrationsReplyWaitsForIt) {
  const std::string token = "gdv_control_test";
  daemon_->SetControlToken(token);
  grpc::Status overtaking(grpc::StatusCode::UNKNOWN, "not called");
  std::thread caller;
  daemon_->OnNextRegistration([&](const rpc::RegisterAgentRequest& r) {
    caller = std::thread([&, address = r.address(), name = r.name()] {
      auto stub = rpc::Agent::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
      overtaking = StartOn(stub.get(), StartReq(1, 1, "sleep 30"),
                           AgentControlToken(token, name));
    });
    std::this_thread::sleep_for(500ms);  // the reply comes after the call
  });
  StartAgent();
  caller.join();
  EXPECT_TRUE(overtaking.ok()) << overtaking.error_message();
  EXPECT_EQ(agent_->supervisor().Jobs().size(), 1u);
  EXPECT_TRUE(Kill(1, 2).error_code() == grpc::StatusCode::UNAUTHENTICATED);
}

// With a daemon that gives control tokens, an agent takes job control and
// checkpoint transfers only with its own: a local user who reaches its
// port, or another agent with its own token, can neither start, suspend,
// kill or checkpoint a job, nor fetch a checkpoint, nor read a job's spec
// from Status, nor its log without a ticket the daemon signed for that job
// there (LogTicket). An agent fetches a checkpoint from another with the
// fetch ticket the daemon gave it for that job (ReceiveCheckpointRequest),
// and with it reads nothing else.
TEST_F(MigrationTest,
       OnlyTheAgentsOwnControlTokenActsOnJobsOrFetchesCheckpoints) {
  const std::string master = "gdv_control_test";
  daemon_->SetControlToken(master);
  StartAgent();
  StartSecondAgent(/*with_daemon=*/true);
  const std::string token = AgentControlToken(master, agent_->name());
  const std::string token2 = AgentControlToken(master, agent2_->name());
  ASSERT_NE(token, token2);
  const std::string script = kRestartable;
  rpc::StartJobRequest req = StartReq(1, 1, script);
  req.mutable_spec()->set_restartable(true);
  (*req.mutable_spec()->mutable_env())["SECRET"] = "s3cret";
  grpc::Status s = StartOn(stub_.get(), req);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(s.error_message(),
            "StartJob: refused: only the daemon and the cluster's agents may "
            "call it (the call carries no control token)");
  for (const std::string& other :
       {std::string("gdv_another_clusters"), master, token2}) {
    s = StartOn(stub_.get(), req, other);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << other;
    EXPECT_EQ(s.error_message(),
              "StartJob: refused: only the daemon and the cluster's agents "
              "may call it (the call's control token is not this cluster's)");
  }
  EXPECT_TRUE(agent_->supervisor().Jobs().empty());
  s = StartOn(stub_.get(), req, token);
  ASSERT_TRUE(s.ok()) << s.error_message();

  rpc::SuspendReply suspended;
  s = Suspend(1, 2, &suspended);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(s.error_message().find("SuspendJob: refused"), 0u);
  s = Kill(1, 2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(s.error_message().find("KillJob: refused"), 0u);
  rpc::CheckpointReply c;
  s = CheckpointOn(stub_.get(), 1, 2, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // Status: which jobs run, their specs only with the token.
  const rpc::AgentJob* listed = nullptr;
  const rpc::AgentStatusReply open = StatusOf(stub_.get());
  listed = FindJob(open, 1);
  ASSERT_NE(listed, nullptr);
  EXPECT_GT(listed->pid(), 0);
  EXPECT_FALSE(listed->has_spec()) << listed->DebugString();
  EXPECT_FALSE(FindJob(StatusOf(stub_.get(), token2), 1)->has_spec());
  const rpc::AgentStatusReply whole = StatusOf(stub_.get(), token);
  listed = FindJob(whole, 1);
  ASSERT_NE(listed, nullptr);
  EXPECT_EQ(listed->spec().env().at("SECRET"), "s3cret");
  // Its log, with a ticket for it there and only so.
  const int64_t now_us =
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count();
  const std::string ticket = MakeLogTicket(token, 1, now_us + 60'000'000);
  grpc::Status tail;
  ASSERT_TRUE(WaitUntil([&] {
    return TailWith(stub_.get(), 1, ticket, &tail).find("started") !=
           std::string::npos;
  })) << tail.error_message();
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"",
       "TailLog: refused: only the daemon and the cluster's agents may "
       "call it (the call carries no control token)"},
      {MakeLogTicket(token, 2, now_us + 60'000'000),
       "TailLog: refused: the ticket is for job 2, not job 1"},
      {MakeLogTicket(token, 1, now_us - 1'000'000),
       "TailLog: refused: the ticket expired (ask the daemon for another: "
       "gandiva logs does)"},
      {MakeLogTicket(token2, 1, now_us + 60'000'000),
       "TailLog: refused: the log ticket is not one this cluster's daemon "
       "gave for this agent"},
      {MakeLogTicket("gdv_forged", 1, now_us + 60'000'000),
       "TailLog: refused: the log ticket is not one this cluster's daemon "
       "gave for this agent"},
      {"1.x.00",
       "TailLog: refused: the log ticket is not one this cluster's "
       "daemon gave for this agent"}};
  for (const auto& [bad, why] : refused) {
    EXPECT_EQ(TailWith(stub_.get(), 1, bad, &tail), "");
    EXPECT_EQ(tail.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(tail.error_message(), why);
  }

  std::this_thread::sleep_for(100ms);
  s = CheckpointOn(stub_.get(), 1, 3, &c, 0, token);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // Its checkpoint is not read without the token or a fetch ticket for it.
  const std::string fetch =
      MakeFetchTicket(token, 1, agent2_->name(), now_us + 60'000'000);
  EXPECT_EQ(ReadNothing(stub_.get(), 1).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  for (const std::string& bad :
       {MakeFetchTicket(token, 2, agent2_->name(), now_us + 60'000'000),
        MakeFetchTicket(token, 1, agent2_->name(), now_us - 1'000'000),
        MakeFetchTicket(token2, 1, agent2_->name(), now_us + 60'000'000),
        fetch + "x"}) {
    EXPECT_EQ(ReadNothing(stub_.get(), 1, bad).error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << bad;
  }
  // A fetch ticket reads that job's checkpoint and log, and acts on
  // nothing.
  {
    grpc::ClientContext ctx;
    AttachFetchTicket(fetch, &ctx);
    rpc::KillReply out;
    EXPECT_EQ(stub_->KillJob(&ctx, Req(1, 9), &out).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  rpc::ReceiveCheckpointReply r;
  s = ReceiveOn(stub2_.get(), 1, 4, agent_->address(), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // The second agent's own token, without a fetch ticket, is not the
  // source's: the fetch is refused there.
  s = ReceiveOn(stub2_.get(), 1, 4, agent_->address(), &r, token2);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error_message().find("ReadCheckpoint: refused: "),
            std::string::npos)
      << s.error_message();
  // With the fetch ticket the daemon would give it, it fetches the
  // checkpoint and the log.
  s = ReceiveOn(stub2_.get(), 1, 5, agent_->address(), &r, token2, fetch);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(r.bytes(), c.bytes());
  rpc::StartJobRequest there = StartReq(1, 6, script);
  there.mutable_spec()->set_restartable(true);
  there.set_resume_local(true);
  s = StartOn(stub2_.get(), there, token2);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string log = agent2_->supervisor().LogPath(1);
  ASSERT_TRUE(WaitUntil([&] {
    return testing::ReadFile(log).find("resumed 42\n") != std::string::npos;
  })) << testing::ReadFile(log);
  EXPECT_NE(testing::ReadFile(agent2_->supervisor().EarlierLogPath(1))
                .find("started"),
            std::string::npos);
}

// A job with neither the library nor checkpoints of its own moves by CRIU
// (where CRIU works): dumped at the source (which kills it), the images
// received cold, restored at the destination with the memory it had (the
// count goes on, it does not start over), its output in the destination's
// log, its exit reported there. Dumped while suspended, it comes back
// running.
TEST_F(MigrationTest, AJobWithoutTheLibraryMovesByCriu) {
  StartAgent();
  StartSecondAgent();
  ASSERT_TRUE(agent_->WaitForCapabilities(20s));
  ASSERT_TRUE(agent2_->WaitForCapabilities(20s));
  const Capabilities caps = agent_->capabilities();
  if (!caps.criu || !agent2_->capabilities().criu) {
    GTEST_SKIP() << "CRIU is not usable here: " << caps.criu_detail;
  }
  const std::string script =
      "i=0; while [ $i -lt 60 ]; do i=$((i+1)); echo \"n $i\"; sleep 0.05; "
      "done; exit 7";
  ASSERT_TRUE(StartOn(stub_.get(), StartReq(1, 1, script)).ok());
  const std::string src_log = agent_->supervisor().LogPath(1);
  ASSERT_TRUE(WaitUntil([&] {
    return testing::ReadFile(src_log).find("n 5\n") != std::string::npos;
  }));
  rpc::SuspendReply sr;
  ASSERT_TRUE(Suspend(1, 2, &sr).ok());
  const int64_t src_pid = FindJob(StatusOf(stub_.get()), 1)->pid();
  rpc::CheckpointReply c;
  grpc::Status s = CheckpointOn(stub_.get(), 1, 3, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(c.method(), "criu");
  EXPECT_GT(c.bytes(), 0);
  EXPECT_GT(c.save_us(), 0);  // the dump
  std::printf("[ criu ] dump %.1f ms, %lld bytes in %d files\n",
              c.save_us() / 1e3, static_cast<long long>(c.bytes()), c.files());
  EXPECT_TRUE(FindJob(StatusOf(stub_.get()), 1) == nullptr);
  const std::string at_dump = testing::ReadFile(src_log);

  rpc::ReceiveCheckpointReply r;
  s = ReceiveOn(stub2_.get(), 1, 4, agent_->address(), &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(r.bytes(), c.bytes());
  rpc::StartJobRequest there = StartReq(1, 5, script);
  there.set_resume_local(true);
  rpc::StartJobReply started;
  {
    grpc::ClientContext ctx;
    s = stub2_->StartJob(&ctx, there, &started);
  }
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(started.pid(), src_pid);  // CRIU keeps its PID
  const rpc::AgentStatusReply st = StatusOf(stub2_.get());
  const rpc::AgentJob* job = FindJob(st, 1);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->state(), rpc::RUNNING);
  const std::string dst_log = agent2_->supervisor().LogPath(1);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return testing::ReadFile(dst_log).find("n 60\n") != std::string::npos;
      },
      20s))
      << testing::ReadFile(dst_log);
  // It went on from where it was dumped: no line written twice, none lost.
  const std::string after = testing::ReadFile(dst_log);
  EXPECT_EQ(after.find("n 1\n"), std::string::npos) << after;
  std::string all = at_dump + after;
  for (int i = 1; i <= 60; ++i) {
    const std::string line = "n " + std::to_string(i) + "\n";
    const size_t at = all.find(line);
    EXPECT_NE(at, std::string::npos) << line << all;
    EXPECT_EQ(all.find(line, at + 1), std::string::npos) << line << all;
  }
  // Nothing more went to the source's log after the dump.
  EXPECT_EQ(testing::ReadFile(src_log), at_dump);
  ASSERT_TRUE(WaitUntil(
      [&] { return FindJob(StatusOf(stub2_.get()), 1) == nullptr; }, 10s));
  EXPECT_EQ(agent2_->supervisor().Job(1)->exit_code, 7);
}

// A restore whose PID is taken at the destination fails, naming the PID,
// and loses nothing: the images stay held there, and once the PID is free
// the job is restored from them.
TEST_F(MigrationTest, ACriuRestoreWhosePidIsTakenFailsAndKeepsTheImages) {
  StartAgent();
  StartSecondAgent();
  ASSERT_TRUE(agent_->WaitForCapabilities(20s));
  ASSERT_TRUE(agent2_->WaitForCapabilities(20s));
  if (!agent_->capabilities().criu || !agent2_->capabilities().criu) {
    GTEST_SKIP() << "CRIU is not usable here: "
                 << agent_->capabilities().criu_detail;
  }
  const std::string script =
      "i=0; while :; do i=$((i+1)); echo \"n $i\"; sleep 0.05; done";
  rpc::StartJobReply first;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->StartJob(&ctx, StartReq(1, 1, script), &first).ok());
  }
  const pid_t pid = static_cast<pid_t>(first.pid());
  std::this_thread::sleep_for(300ms);
  rpc::CheckpointReply c;
  grpc::Status s = CheckpointOn(stub_.get(), 1, 2, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(c.method(), "criu");
  rpc::ReceiveCheckpointReply r;
  s = ReceiveOn(stub2_.get(), 1, 3, agent_->address(), &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // The dumped tree's PIDs free (what it started is reaped by init).
  ASSERT_TRUE(WaitUntil([&] { return ProcessGroupMembers(pid).empty(); }));

  // Another process takes the PID (clone3 with set_tid; root only).
  pid_t blocker = -1;
  {
    clone_args args{};
    pid_t want = pid;
    args.exit_signal = SIGCHLD;
    args.set_tid = reinterpret_cast<uint64_t>(&want);
    args.set_tid_size = 1;
    // Until the dumped run's last zombie (reparented to init) is reaped,
    // its PID stays taken.
    long made = -1;
    int err = 0;
    WaitUntil([&] {
      made = syscall(SYS_clone3, &args, sizeof args);
      err = errno;
      return made >= 0 || err != EEXIST;
    });
    if (made == 0) {
      pause();
      _exit(0);
    }
    if (made < 0) {
      GTEST_SKIP() << "cannot create a process with PID " << pid << ": "
                   << std::strerror(err);
    }
    blocker = static_cast<pid_t>(made);
  }
  ASSERT_EQ(blocker, pid);
  rpc::StartJobRequest there = StartReq(1, 4, script);
  there.set_resume_local(true);
  s = StartOn(stub2_.get(), there);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("PID " + std::to_string(pid) +
                                   ", which the process had, is in use"),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(FindJob(StatusOf(stub2_.get()), 1), nullptr);
  kill(blocker, SIGKILL);
  waitpid(blocker, nullptr, 0);

  // Nothing was lost: restored from the same images.
  there.set_action_id(5);
  s = StartOn(stub2_.get(), there);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string log = agent2_->supervisor().LogPath(1);
  const std::string at_dump =
      testing::ReadFile(agent_->supervisor().LogPath(1));
  const size_t last_n = at_dump.rfind("n ");
  ASSERT_NE(last_n, std::string::npos) << at_dump;
  const int dumped_at = std::atoi(at_dump.c_str() + last_n + 2);
  const std::string next = "n " + std::to_string(dumped_at + 1) + "\n";
  ASSERT_TRUE(WaitUntil([&] {
    return testing::ReadFile(log).find(next) != std::string::npos;
  })) << testing::ReadFile(log);
  EXPECT_EQ(testing::ReadFile(log).find("n 1\n"), std::string::npos);
}

// Where CRIU works, a resize of a job without the library is still refused:
// CRIU moves a process, it cannot change its world size.
TEST_F(MigrationTest, CriuDoesNotResize) {
  StartAgent();
  ASSERT_TRUE(agent_->WaitForCapabilities(20s));
  if (!agent_->capabilities().criu) {
    GTEST_SKIP() << "CRIU is not usable here: "
                 << agent_->capabilities().criu_detail;
  }
  ASSERT_TRUE(StartOn(stub_.get(), StartReq(1, 1, "exec sleep 1000")).ok());
  rpc::CheckpointReply c;
  grpc::Status s = CheckpointOn(stub_.get(), 1, 2, &c, /*resize_to=*/2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("cannot be resized"), std::string::npos)
      << s.error_message();
  ASSERT_NE(FindJob(StatusOf(stub_.get()), 1), nullptr);
}

TEST_F(MigrationTest, MigratesBetweenTwoAgentsWithAWarmStart) {
  StartAgent();
  StartSecondAgent();
  ASSERT_TRUE(
      StartOn(stub_.get(), StartReq(1, 1, Job("100000 5 --state --big 5000")))
          .ok());
  // The destination starts warm at once; it waits for its checkpoint.
  rpc::StartJobRequest warm =
      StartReq(1, 1, Job("100000 5 --state --big 5000"));
  warm.set_warm(true);
  ASSERT_TRUE(StartOn(stub2_.get(), warm).ok());
  ASSERT_TRUE(WaitUntil([&] { return Minibatches(stub_.get(), 1) >= 3; }));
  EXPECT_EQ(Minibatches(stub2_.get(), 1), 0);
  const int64_t src_pid = FindJob(StatusOf(stub_.get()), 1)->pid();
  const int64_t dst_pid = FindJob(StatusOf(stub2_.get()), 1)->pid();
  rpc::CheckpointReply c;
  grpc::Status s = CheckpointOn(stub_.get(), 1, 2, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  rpc::ReceiveCheckpointReply r;
  s = ReceiveOn(stub2_.get(), 1, 2, agent_->address(), &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // The destination serves the job's whole log: the source's part first.
  const std::string whole = TailAll(stub2_.get(), 1);
  const size_t at_src = whole.find("pid " + std::to_string(src_pid) + "\n");
  const size_t at_dst = whole.find("pid " + std::to_string(dst_pid) + "\n");
  EXPECT_NE(at_src, std::string::npos) << whole;
  EXPECT_NE(at_dst, std::string::npos) << whole;
  EXPECT_LT(at_src, at_dst) << whole;
  EXPECT_EQ(whole.find("pid " + std::to_string(src_pid) + "\n", at_src + 1),
            std::string::npos)
      << whole;
  EXPECT_EQ(r.bytes(), c.bytes());
  EXPECT_GT(r.transfer_us(), 0);
  EXPECT_GT(r.warm_us(), 0);
  EXPECT_GT(r.load_us(), 0);
  EXPECT_GT(r.first_minibatch_us(), 0);
  EXPECT_GE(r.took_us(), r.transfer_us());
  std::printf(
      "[ migration ] checkpoint %lld us (save %lld), %lld bytes moved in "
      "%lld us, warm %lld us, load %lld us, first mini-batch %lld us, "
      "receive %lld us\n",
      static_cast<long long>(c.took_us()), static_cast<long long>(c.save_us()),
      static_cast<long long>(r.bytes()),
      static_cast<long long>(r.transfer_us()),
      static_cast<long long>(r.warm_us()), static_cast<long long>(r.load_us()),
      static_cast<long long>(r.first_minibatch_us()),
      static_cast<long long>(r.took_us()));
  const std::string log = Log(dir2_, 1);
  EXPECT_NE(log.find("restored " + std::to_string(c.minibatches())),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("weights ok"), std::string::npos) << log;
  auto st = StatusOf(stub2_.get());
  const rpc::AgentJob* j = FindJob(st, 1);
  ASSERT_NE(j, nullptr);
  EXPECT_GT(j->progress().minibatches(), c.minibatches());
  EXPECT_TRUE(j->has_checkpoint());
  EXPECT_EQ(j->progress().world_size(), 1);
  EXPECT_EQ(j->progress().sharing(), "exclusive");
  // The source still holds its copy until told to drop it.
  EXPECT_TRUE(std::filesystem::exists(Ckpt(1) + "/state"));
  grpc::ClientContext ctx;
  rpc::KillReply kr;
  ASSERT_TRUE(stub2_->KillJob(&ctx, Req(1, 3), &kr).ok());
  EXPECT_FALSE(std::filesystem::exists(dir2_.path() + "/ckpt/jobs/1"));

  // Nothing to read for an unknown job.
  EXPECT_EQ(ReadNothing(stub_.get(), 99).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// A warm process that can take its checkpoint file from a socket gets the
// source's bulk channel offered (one stream) instead of the files: nothing
// lands at the destination, nothing is held there, and the move's transfer
// is the process's own receive and load.
TEST_F(MigrationTest, AWarmProcessTakesItsCheckpointStraightFromTheSource) {
  StartAgent();
  StartSecondAgent();
  rpc::CheckpointReply c;
  rpc::ReceiveCheckpointReply r;
  grpc::Status s = MoveWarm(1, "100000 5 --state",
                            "100000 5 --state --stream-ok state", &c, &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(r.streamed());
  EXPECT_EQ(r.channel(), "tcp");
  EXPECT_EQ(r.bytes(), c.bytes());
  EXPECT_GT(r.transfer_us(), 0);
  EXPECT_EQ(r.load_us(), 0);
  EXPECT_GT(r.first_minibatch_us(), 0);
  const std::string log = Log(dir2_, 1);
  EXPECT_NE(
      log.find("restored " + std::to_string(c.minibatches()) + " (streamed)"),
      std::string::npos)
      << log;
  const std::string incoming = dir2_.path() + "/ckpt/jobs/1/incoming";
  EXPECT_FALSE(std::filesystem::exists(incoming + "/state"));
  EXPECT_FALSE(
      std::filesystem::exists(incoming + "/" GANDIVA_STREAM_OFFER_FILE));
  auto st = StatusOf(stub2_.get());
  const rpc::AgentJob* j = FindJob(st, 1);
  ASSERT_NE(j, nullptr);
  EXPECT_FALSE(j->has_checkpoint());
  EXPECT_GT(j->progress().minibatches(), c.minibatches());
  // The source keeps its copy until told to drop it.
  EXPECT_EQ(SavedCount(Ckpt(1)), c.minibatches());
}

// A checkpoint that is not the one file the process can take is received
// into files as before; a process that fails to take its stream fails the
// receive, and the source's copy stays for a restart there.
TEST_F(MigrationTest, AStreamIsOfferedOnlyForTheFileTheProcessTakes) {
  StartAgent();
  StartSecondAgent();
  rpc::CheckpointReply c;
  // Two files (state and weights): received here, loaded from the files.
  rpc::ReceiveCheckpointReply r;
  grpc::Status s =
      MoveWarm(1, "100000 5 --state --big 64",
               "100000 5 --state --big 64 --stream-ok state", &c, &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(r.streamed());
  EXPECT_GT(r.load_us(), 0);
  const std::string log = Log(dir2_, 1);
  EXPECT_NE(log.find("weights ok"), std::string::npos) << log;
  EXPECT_EQ(log.find("(streamed)"), std::string::npos) << log;
  const rpc::AgentStatusReply st = StatusOf(stub2_.get());
  const rpc::AgentJob* j = FindJob(st, 1);
  ASSERT_NE(j, nullptr);
  EXPECT_TRUE(j->has_checkpoint());

  // The process dies in the middle of its stream.
  s = MoveWarm(2, "100000 5 --state",
               "100000 5 --state --stream-ok state --stream-fail", &c, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("exited (code 9) while restoring"),
            std::string::npos)
      << s.error_message();
  EXPECT_NE(Log(dir2_, 2).find("failing on purpose"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(
      dir2_.path() + "/ckpt/jobs/2/incoming/" GANDIVA_STREAM_OFFER_FILE));
  // The source's copy restarts the job there.
  EXPECT_GT(SavedCount(Ckpt(2)), 0);
  rpc::StartJobRequest back = StartReq(2, 22, Job("100000 5 --state"));
  back.set_gpus(0, 2);
  back.set_resume_local(true);
  ASSERT_TRUE(StartOn(stub_.get(), back).ok());
  EXPECT_TRUE(WaitUntil([&] {
    return Log(dir_, 2).find("restored ") != std::string::npos;
  })) << Log(dir_, 2);
}

TEST_F(MigrationTest, ReplyWhenSavedComesBeforeTheProcessExits) {
  StartAgent();
  const std::string release = dir_.path() + "/release";
  ASSERT_TRUE(
      StartOn(stub_.get(),
              StartReq(1, 1,
                       Job("100000 5 --state --big 64 --hold-exit " + release)))
          .ok());
  ASSERT_TRUE(WaitUntil([&] { return Minibatches(stub_.get(), 1) >= 3; }));
  rpc::CheckpointRequest req;
  req.set_job_id(1);
  req.set_action_id(2);
  req.set_reply_when_saved(true);
  rpc::CheckpointReply c;
  grpc::ClientContext ctx;
  grpc::Status s = stub_->CheckpointJob(&ctx, req, &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // The process waits for `release` in its exit: the reply came without it.
  EXPECT_TRUE(c.exiting());
  EXPECT_EQ(c.method(), "library");
  EXPECT_EQ(SavedCount(Ckpt(1)), c.minibatches());
  EXPECT_GT(c.bytes(), 64 * 1024);
  const rpc::AgentJob* j = nullptr;
  auto st = StatusOf(stub_.get());
  j = FindJob(st, 1);
  ASSERT_NE(j, nullptr) << "the job was listed as gone before its exit";
  // The checkpoint can be read at once.
  grpc::ClientContext rctx;
  rpc::ReadCheckpointRequest rr;
  rr.set_job_id(1);
  auto reader = stub_->ReadCheckpoint(&rctx, rr);
  rpc::CheckpointChunk chunk;
  int64_t bytes = 0;
  while (reader->Read(&chunk)) bytes += chunk.data().size();
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(bytes, c.bytes());
  // Once it exits (75, expected), the checkpoint stays held.
  std::ofstream(release).put('\n');
  ASSERT_TRUE(WaitUntil([&] {
    auto now = StatusOf(stub_.get());
    return FindJob(now, 1) == nullptr;
  }));
  EXPECT_TRUE(std::filesystem::exists(Ckpt(1) + "/state"));
  EXPECT_EQ(SavedCount(Ckpt(1)), c.minibatches());
  // Held with the spec of the job that saved it (listed at registration).
  rpc::JobSpec held;
  ASSERT_TRUE(held.ParseFromString(agent_->supervisor().HeldCheckpointSpec(1)));
  EXPECT_NE(held.command().find("--hold-exit " + release), std::string::npos)
      << held.DebugString();
}

TEST_F(MigrationTest, AWarmStartCanReplyOnceTheProcessWaits) {
  StartAgent();
  rpc::StartJobReply rep;
  auto warm_start = [&](int64_t job, int64_t action, const std::string& cmd,
                        int await_ms) {
    rpc::StartJobRequest req = StartReq(job, action, cmd);
    req.set_warm(true);
    req.set_await_ready_ms(await_ms);
    grpc::ClientContext ctx;
    return stub_->StartJob(&ctx, req, &rep);
  };
  grpc::Status s = warm_start(1, 1, Job("100000 5 --state"), 20000);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(rep.ready());
  EXPECT_GT(rep.ready_us(), 0);
  EXPECT_EQ(Minibatches(stub_.get(), 1), 0);
  ASSERT_TRUE(Kill(1, 2).ok());

  // A process that never waits (no library): not ready, not an error.
  s = warm_start(2, 3, "exec sleep 1000", 300);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(rep.ready());
  ASSERT_TRUE(Kill(2, 4).ok());

  // One that exits first: an error that says so.
  s = warm_start(3, 5, "exit 3", 20000);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("exited (code 3)"), std::string::npos)
      << s.error_message();
}

TEST_F(MigrationTest, AWarmStartTakesTheCheckpointHeldHere) {
  StartAgent();
  ASSERT_TRUE(
      StartOn(stub_.get(), StartReq(1, 1, Job("100000 5 --state"))).ok());
  ASSERT_TRUE(WaitUntil([&] { return Minibatches(stub_.get(), 1) >= 3; }));
  rpc::CheckpointReply c;
  ASSERT_TRUE(CheckpointOn(stub_.get(), 1, 2, &c).ok());
  rpc::StartJobRequest warm = StartReq(1, 3, Job("100000 5 --state"));
  warm.set_warm(true);
  ASSERT_TRUE(StartOn(stub_.get(), warm).ok());
  rpc::ReceiveCheckpointReply r;
  grpc::Status s = ReceiveOn(stub_.get(), 1, 4, "", &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(r.bytes(), 0);
  EXPECT_NE(Log(dir_, 1).find("restored " + std::to_string(c.minibatches())),
            std::string::npos);
  // A warm start's receive fails when the process is gone.
  ASSERT_TRUE(Kill(1, 5).ok());
  warm.set_action_id(6);
  warm.mutable_spec()->set_command("exit 3");
  ASSERT_TRUE(StartOn(stub_.get(), warm).ok());
  s = ReceiveOn(stub_.get(), 1, 7, "", &r);
  EXPECT_FALSE(s.ok());
}

TEST_F(MigrationTest, CapabilitiesSharingAndWorldSize) {
  StartAgent();
  ASSERT_TRUE(agent_->WaitForCapabilities(20s));
  const Capabilities caps = agent_->capabilities();
  EXPECT_NE(caps.criu_detail, "not checked yet");
  EXPECT_FALSE(caps.criu_detail.empty());
  std::printf("[ capabilities ] criu %d (%s); mps %d (%s)\n", caps.criu,
              caps.criu_detail.c_str(), caps.mps, caps.mps_detail.c_str());
  if (FindOnPath("criu").empty()) {
    EXPECT_FALSE(caps.criu);
    EXPECT_NE(caps.criu_detail.find("not found"), std::string::npos);
  }
  ASSERT_TRUE(WaitUntil([&] {
    auto regs = daemon_->registrations();
    return !regs.empty() &&
           regs.back().capabilities().criu_detail() == caps.criu_detail;
  }));
  EXPECT_EQ(Status().capabilities().criu(), caps.criu);
  EXPECT_EQ(Status().capabilities().mps_detail(), caps.mps_detail);

  rpc::StartJobRequest a = StartReq(1, 1,
                                    "echo ws=$GANDIVA_WORLD_SIZE; "
                                    "exec sleep 1000");
  a.add_gpus(1);
  ASSERT_TRUE(StartOn(stub_.get(), a).ok());
  ASSERT_TRUE(StartOn(stub_.get(), StartReq(2, 2, "exec sleep 1000")).ok());
  ASSERT_TRUE(StartOn(stub_.get(), StartReq(3, 3, "exec sleep 1000")).ok());
  rpc::SuspendReply sr;
  ASSERT_TRUE(Suspend(3, 4, &sr).ok());
  const rpc::AgentStatusReply st = Status();
  const std::string packed = caps.mps ? "mps" : "time-shared";
  std::map<int64_t, rpc::Progress> progress;
  for (const auto& j : st.jobs()) progress[j.job_id()] = j.progress();
  ASSERT_EQ(progress.size(), 3u);
  EXPECT_EQ(progress[1].world_size(), 2);
  EXPECT_EQ(progress[1].sharing(), packed);
  EXPECT_EQ(progress[2].world_size(), 1);
  EXPECT_EQ(progress[2].sharing(), packed);
  EXPECT_EQ(progress[3].sharing(), "exclusive");  // suspended
  ASSERT_TRUE(WaitUntil(
      [&] { return Log(dir_, 1).find("ws=2") != std::string::npos; }));
}

// One part of a job that spans servers: the lead gets a free port for its
// ranks to meet at, every part the launcher's variables; a gang that does
// not add up is refused naming the field, and nothing starts.
TEST_F(MigrationTest, APartOfAJobSpanningServersGetsItsLaunchVariables) {
  StartAgent();
  const std::string echo =
      "echo nnodes=$GANDIVA_NNODES node=$GANDIVA_NODE_RANK "
      "ws=$GANDIVA_WORLD_SIZE local=$GANDIVA_LOCAL_WORLD_SIZE "
      "offset=$GANDIVA_RANK_OFFSET at=$GANDIVA_MASTER_ADDR:"
      "$GANDIVA_MASTER_PORT; exec sleep 1000";
  auto gang = [&](int64_t job, int node, int offset, int port) {
    rpc::StartJobRequest req = StartReq(job, job * 10, echo);
    req.add_gpus(1);
    rpc::Gang* g = req.mutable_gang();
    g->set_nodes(2);
    g->set_node_rank(node);
    g->set_world_size(4);
    g->set_rank_offset(offset);
    g->set_master_addr("127.0.0.1");
    g->set_master_port(port);
    return req;
  };
  grpc::ClientContext ctx;
  rpc::StartJobReply lead;
  ASSERT_TRUE(stub_->StartJob(&ctx, gang(1, 0, 0, 0), &lead).ok());
  ASSERT_GT(lead.master_port(), 0);
  const std::string at = "at=127.0.0.1:" + std::to_string(lead.master_port());
  ASSERT_TRUE(WaitUntil([&] {
    return Log(dir_, 1).find("nnodes=2 node=0 ws=4 local=2 offset=0 " + at) !=
           std::string::npos;
  })) << Log(dir_, 1);
  ASSERT_TRUE(StartOn(stub_.get(), gang(2, 1, 2, lead.master_port())).ok());
  ASSERT_TRUE(WaitUntil([&] {
    return Log(dir_, 2).find("nnodes=2 node=1 ws=4 local=2 offset=2 " + at) !=
           std::string::npos;
  })) << Log(dir_, 2);
  // A part other than the lead is stopped at once, not after the grace
  // the library gets to attach.
  rpc::SuspendReply sr;
  ASSERT_TRUE(Suspend(2, 21, &sr).ok());
  EXPECT_FALSE(sr.at_boundary());

  struct Bad {
    int node, offset, port;
    std::string words;
  };
  int64_t job = 3;  // each its own job id: an action id answers once
  for (const Bad& b :
       {Bad{2, 0, 0, "node_rank 2 of 2"},
        Bad{1, 3, 5000, "outside world size 4"},
        Bad{1, 0, 5000, "holds rank 0"}, Bad{1, 2, 0, "only the lead"}}) {
    const grpc::Status st =
        StartOn(stub_.get(), gang(job++, b.node, b.offset, b.port));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << b.words;
    EXPECT_NE(st.error_message().find(b.words), std::string::npos)
        << st.error_message();
  }
  EXPECT_EQ(Status().jobs_size(), 2);
}

TEST_F(MigrationTest, ADataParallelJobIsSuspendedResumedAndKilledAsAGroup) {
  StartAgent();
  // Rank 1 runs without the page, rank 0 (the exec'd shell) attaches.
  const std::string cmd = std::string("env -u GANDIVA_PROGRESS_FILE ") +
                          GANDIVA_AGENT_TEST_JOB + " 100000 5 & exec " +
                          GANDIVA_AGENT_TEST_JOB + " 100000 5";
  rpc::StartJobReply started;
  ASSERT_TRUE(Start(1, 1, cmd, &started).ok());
  const pid_t pgid = static_cast<pid_t>(started.pid());
  ASSERT_TRUE(WaitUntil([&] {
    return Minibatches(stub_.get(), 1) >= 3 &&
           ProcessGroupMembers(pgid).size() >= 2;
  }));
  rpc::SuspendReply sr;
  ASSERT_TRUE(Suspend(1, 2, &sr).ok());
  EXPECT_TRUE(sr.at_boundary());
  EXPECT_EQ(ProcessGroupMembers(pgid).size(), 2u);
  EXPECT_TRUE(ProcessGroupStopped(pgid));
  for (pid_t p : ProcessGroupMembers(pgid)) {
    EXPECT_TRUE(client::ProcessIsStopped(p)) << p;
  }
  rpc::ResumeReply rr;
  ASSERT_TRUE(Resume(1, 3, &rr).ok());
  ASSERT_TRUE(WaitUntil([&] {
    for (pid_t p : ProcessGroupMembers(pgid)) {
      if (client::ProcessIsStopped(p)) return false;
    }
    return true;
  }));
  ASSERT_TRUE(Kill(1, 4).ok());
  ASSERT_TRUE(WaitUntil([&] { return ProcessGroupMembers(pgid).empty(); }));
}

// A process embedding the agent may hold descriptors without close-on-exec
// (here a connected TCP socket); the CRIU probe's trial process must not
// inherit them, or its dump fails ("Connected TCP socket") and CRIU is
// wrongly reported unusable.
TEST(CriuProbeTest, DescriptorsThisProcessLeaksDoNotFailTheProbe) {
  {
    // CRIU must work here at all (with nothing leaked) for the test to mean
    // anything: some sandboxes refuse every dump.
    Capabilities clean;
    ProbeCriu(&clean, std::chrono::milliseconds(10000));
    if (!clean.criu)
      GTEST_SKIP() << "CRIU is not usable here: " << clean.criu_detail;
  }
  const int listener = socket(AF_INET, SOCK_STREAM, 0);  // no CLOEXEC
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr),
            0);
  const int server = accept(listener, nullptr, nullptr);
  ASSERT_GE(server, 0);
  Capabilities caps;
  ProbeCriu(&caps, std::chrono::milliseconds(10000));
  close(server);
  close(client);
  close(listener);
  EXPECT_TRUE(caps.criu) << caps.criu_detail;
}

TEST(AgentServerOptionsTest, BadOptionsNameTheFlag) {
  TempDir dir;
  AgentOptions o;
  o.work_dir = dir.path();
  o.log = [](std::string_view) {};
  o.listen_address = "nonsense";
  auto a = AgentServer::Start(o);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("--listen"), std::string::npos);
  o.listen_address = "127.0.0.1:0";
  o.scheduler_address = "host:notaport";
  a = AgentServer::Start(o);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("--scheduler"), std::string::npos);
  o.scheduler_address = "";
  o.name = "node a";
  a = AgentServer::Start(o);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(),
            "--name: may hold only letters, digits, '.', '_' and '-' (a "
            "hostname's characters), got 'node a'");
  o.name = "";  // the hostname
  o.virtual_only = true;
  o.virtual_gpus = 3;
  o.sockets = 2;
  a = AgentServer::Start(o);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("sockets"), std::string::npos);
  // Serving alone (no daemon) works.
  o.sockets = 1;
  a = AgentServer::Start(o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_GT((*a)->port(), 0);
  EXPECT_EQ((*a)->gpus().gpus().size(), 3u);
  (*a)->Shutdown();
  (*a)->Shutdown();  // idempotent
}

}  // namespace
}  // namespace gandiva::runtime
