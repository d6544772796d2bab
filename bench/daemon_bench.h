// What the benchmarks of the scheduler daemon share (report_bench.cc,
// switch_bench.cc): a fake agent service whose calls all succeed at once,
// the stores they compare, and registering fake agents. Each benchmark
// defines Die(), which prints its name and the reason and exits.
#pragma once

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/scheduler/etcd_test_util.h"
#include "runtime/scheduler/leadership.h"
#include "runtime/scheduler/scheduler_server.h"

namespace gandiva::bench {

[[noreturn]] void Die(const std::string& what);

// Every agent's calls succeed at once: a start (no process), suspend,
// resume, kill.
class NullAgent final : public rpc::Agent::Service {
 public:
  grpc::Status StartJob(grpc::ServerContext*, const rpc::StartJobRequest* r,
                        rpc::StartJobReply* rep) override {
    rep->set_pid(static_cast<int32_t>(100000 + r->job_id()));
    rep->set_took_us(1);
    return grpc::Status::OK;
  }
  grpc::Status SuspendJob(grpc::ServerContext*, const rpc::JobRequest*,
                          rpc::SuspendReply* rep) override {
    rep->set_took_us(1);
    return grpc::Status::OK;
  }
  grpc::Status ResumeJob(grpc::ServerContext*, const rpc::JobRequest*,
                         rpc::ResumeReply* rep) override {
    rep->set_took_us(1);
    return grpc::Status::OK;
  }
  grpc::Status KillJob(grpc::ServerContext*, const rpc::JobRequest*,
                       rpc::KillReply*) override {
    return grpc::Status::OK;
  }
};

// Serves `agent` on a free loopback port; *address: where.
inline std::unique_ptr<grpc::Server> ServeAgent(NullAgent* agent,
                                                std::string* address) {
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(agent);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  if (server == nullptr) Die("cannot start the fake agent service");
  *address = "127.0.0.1:" + std::to_string(port);
  return server;
}

inline std::unique_ptr<grpc::ClientContext> Ctx(int seconds = 60) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(seconds));
  return ctx;
}

// `agents` agents named node-0, node-1, ... of `gpus` virtual GPUs each,
// all served at `address`, registered one after another.
inline void RegisterAgents(rpc::Scheduler::Stub& stub, int agents, int gpus,
                           const std::string& address) {
  for (int a = 0; a < agents; ++a) {
    rpc::RegisterAgentRequest r;
    r.set_name("node-" + std::to_string(a));
    r.set_address(address);
    r.set_sockets(1);
    r.set_switches_per_socket(1);
    for (int g = 0; g < gpus; ++g) {
      rpc::Gpu* gpu = r.add_gpus();
      gpu->set_local(g);
      gpu->set_uuid("virtual-" + std::to_string(a) + "-" + std::to_string(g));
      gpu->set_name("virtual");
    }
    rpc::RegisterAgentReply rep;
    grpc::Status s = stub.RegisterAgent(Ctx().get(), r, &rep);
    if (!s.ok()) Die("RegisterAgent: " + s.error_message());
  }
}

// --stores: a comma-separated list of sqlite, durable, etcd.
inline std::vector<std::string> ParseStores(const std::string& list) {
  std::vector<std::string> kinds;
  std::stringstream in(list);
  std::string k;
  while (std::getline(in, k, ',')) {
    if (k != "sqlite" && k != "durable" && k != "etcd") {
      Die("--stores: '" + k + "' is not one of sqlite, durable, etcd");
    }
    kinds.push_back(k);
  }
  return kinds;
}

inline const char* StoreLabel(const std::string& kind) {
  return kind == "sqlite"    ? "SQLite"
         : kind == "durable" ? "SQLite --durable-sync"
                             : "etcd (1 member, loopback)";
}

// The stores of one benchmark's runs: SQLite files in a directory of its
// own (removed at the end), and one etcd member started when a run first
// needs it.
class Stores {
 public:
  explicit Stores(const std::string& bench)
      : dir_(std::filesystem::temp_directory_path() /
             ("gandiva-" + bench + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~Stores() { std::filesystem::remove_all(dir_); }
  Stores(const Stores&) = delete;
  Stores& operator=(const Stores&) = delete;

  // Points `o` at a new store of `kind` named `name` (etcd: a prefix of
  // its own, which this process leads). The leadership, if any.
  std::shared_ptr<runtime::Leadership> Use(const std::string& kind,
                                           const std::string& name,
                                           runtime::SchedulerOptions& o) {
    if (kind != "etcd") {
      o.db_path = (dir_ / (name + ".db")).string();
      o.durable_sync = kind == "durable";
      return nullptr;
    }
    if (etcd_ == nullptr) {
      std::string error;
      etcd_ = runtime::EtcdForTest::Start(&error);
      if (etcd_ == nullptr) Die(error);
    }
    auto l = runtime::Leadership::Create(etcd_->Client(),
                                         {"/" + name + "/", 10, name});
    if (!l.ok()) Die("leadership: " + l.status().ToString());
    core::Status s = (*l)->Campaign([](const std::string&) {});
    if (!s.ok()) Die("campaign: " + s.ToString());
    o.leadership = *l;
    return *l;
  }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<runtime::EtcdForTest> etcd_;
};

}  // namespace gandiva::bench
