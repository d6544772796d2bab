// ConnectScheduler with a leader and its standbys: the address that
// listens, awaited while none does.
#include "cli/scheduler_client.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "runtime/scheduler/etcd_test_util.h"

namespace gandiva::cli {
namespace {

using namespace std::chrono_literals;

// A daemon that answers ListServers with one server named `name`.
class NamedScheduler final : public rpc::Scheduler::Service {
 public:
  explicit NamedScheduler(std::string name) : name_(std::move(name)) {}
  grpc::Status ListServers(grpc::ServerContext*, const rpc::Empty*,
                           rpc::ListServersReply* reply) override {
    reply->add_servers()->set_name(name_);
    return grpc::Status::OK;
  }

 private:
  std::string name_;
};

std::unique_ptr<grpc::Server> Serve(int port, NamedScheduler* service) {
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:" + std::to_string(port),
                     grpc::InsecureServerCredentials());
  b.RegisterService(service);
  return b.BuildAndStart();
}

std::string Answer(rpc::Scheduler::Stub& stub) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  rpc::ListServersReply reply;
  const grpc::Status s = stub.ListServers(&ctx, rpc::Empty(), &reply);
  if (!s.ok()) return "error " + std::to_string(s.error_code());
  return reply.servers_size() == 1 ? reply.servers(0).name() : "?";
}

TEST(ConnectSchedulerTest, TheOneOfSeveralThatListensIsAwaited) {
  const int standby = runtime::FreeLoopbackPort();
  int leader = runtime::FreeLoopbackPort();
  while (leader == standby) leader = runtime::FreeLoopbackPort();
  const std::string both = "127.0.0.1:" + std::to_string(standby) +
                           ",127.0.0.1:" + std::to_string(leader);
  NamedScheduler service("second");
  // The second address starts to listen a second after the CLI asks (a
  // standby taking over): the CLI waits for it.
  std::unique_ptr<grpc::Server> server;
  std::thread later([&] {
    std::this_thread::sleep_for(1s);
    server = Serve(leader, &service);
  });
  auto stub = ConnectScheduler(both, 10s);
  later.join();
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Answer(*stub), "second");
  // Listening from the start: the same, at once.
  EXPECT_EQ(Answer(*ConnectScheduler(both, 0s)), "second");
  server->Shutdown();

  // None listens within the wait: the first, whose calls fail.
  auto none = ConnectScheduler(both, 300ms);
  EXPECT_EQ(Answer(*none),
            "error " + std::to_string(grpc::StatusCode::UNAVAILABLE));
}

}  // namespace
}  // namespace gandiva::cli
