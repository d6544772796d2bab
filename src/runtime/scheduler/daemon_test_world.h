// The world a scheduler daemon test runs in: fake (a clock the test moves,
// and services called in this process, with no socket) or real (sockets
// on loopback, the wall clock). For tests only.
//
// In the fake world:
//  - FakeDaemonEnv is the daemon's DaemonEnv: its time moves only when the
//    test moves it (AdvanceTo), which WaitFor and Pass do once the daemon
//    has nothing left to do before its next timer (Quiet).
//  - Services are reachable at made-up loopback addresses ("127.0.0.1:N",
//    never bound) through InProcess: the daemon's Scheduler service and
//    the fake agents' Agent services, called through gMock stubs that
//    forward to them (InProcessAgentStub, InProcessSchedulerStub).
// TestWorld::Current() says which world the running test is in; the fake
// agents, clients, WaitFor and Pass follow it.
#pragma once

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "proto/gandiva.grpc.pb.h"
#include "proto/gandiva_mock.grpc.pb.h"
#include "runtime/scheduler/daemon_env.h"
#include "runtime/scheduler/scheduler_server.h"

namespace gandiva::runtime {

// A service reachable in this process. Calls fail UNAVAILABLE once it is
// closed, as calls to a server that went away do; Close waits for the
// calls under way. Thread-safe.
template <typename Service>
class Endpoint {
 public:
  Endpoint(Service* service, std::string address)
      : service_(service), address_(std::move(address)) {}

  template <typename F>
  grpc::Status Call(F&& f) {
    Service* s;
    {
      std::lock_guard lock(mu_);
      if (service_ == nullptr) {
        return {grpc::StatusCode::UNAVAILABLE,
                "nothing serves " + address_ + " (in process)"};
      }
      s = service_;
      ++calls_;
    }
    grpc::Status status = f(*s);
    {
      std::lock_guard lock(mu_);
      --calls_;
    }
    cv_.notify_all();
    return status;
  }
  void Close() {
    std::unique_lock lock(mu_);
    service_ = nullptr;
    cv_.wait(lock, [&] { return calls_ == 0; });
  }
  const std::string& address() const { return address_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  Service* service_;  // guarded by mu_; null once closed
  int calls_ = 0;     // guarded by mu_
  const std::string address_;
};

using AgentEndpoint = Endpoint<rpc::Agent::Service>;
using SchedulerEndpoint = Endpoint<rpc::Scheduler::Service>;

// The services of this process by address. Thread-safe.
class InProcess {
 public:
  static InProcess& Get() {
    static InProcess* registry = new InProcess();
    return *registry;
  }
  // A loopback address nothing listens on (ports below 1024 are never
  // bound by tests), unique in this process.
  std::string NewAddress() {
    return "127.0.0.1:" + std::to_string(next_port_.fetch_add(1));
  }
  void Add(std::shared_ptr<AgentEndpoint> e) {
    std::lock_guard lock(mu_);
    agents_[e->address()] = std::move(e);
  }
  void Add(std::shared_ptr<SchedulerEndpoint> e) {
    std::lock_guard lock(mu_);
    schedulers_[e->address()] = std::move(e);
  }
  void Remove(const std::string& address) {
    std::lock_guard lock(mu_);
    agents_.erase(address);
    schedulers_.erase(address);
  }
  // Null when nothing of that kind is at `address` in this process.
  std::shared_ptr<AgentEndpoint> Agent(const std::string& address) {
    std::lock_guard lock(mu_);
    auto it = agents_.find(address);
    return it == agents_.end() ? nullptr : it->second;
  }
  std::shared_ptr<SchedulerEndpoint> Scheduler(const std::string& address) {
    std::lock_guard lock(mu_);
    auto it = schedulers_.find(address);
    return it == schedulers_.end() ? nullptr : it->second;
  }

 private:
  std::atomic<int> next_port_{1};
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<AgentEndpoint>> agents_;
  std::map<std::string, std::shared_ptr<SchedulerEndpoint>> schedulers_;
};

// A stub method forwarded to the endpoint's service, as a server would
// call it (a fresh ServerContext; the client's deadline is not applied).
#define GANDIVA_FORWARD_TO(endpoint, Method)                                 \
  ON_CALL(*this, Method(::testing::_, ::testing::_, ::testing::_))           \
      .WillByDefault(                                                        \
          [e = endpoint](grpc::ClientContext*, const auto& req, auto* rep) { \
            return e->Call([&](auto& service) {                              \
              grpc::ServerContext ctx;                                       \
              return service.Method(&ctx, &req, rep);                        \
            });                                                              \
          })

// The Agent service's unary methods the daemon calls, forwarded to an
// agent served in this process (a closed endpoint: none is there).
class InProcessAgentStub final
    : public ::testing::NiceMock<rpc::MockAgentStub> {
 public:
  explicit InProcessAgentStub(std::shared_ptr<AgentEndpoint> e) {
    GANDIVA_FORWARD_TO(e, StartJob);
    GANDIVA_FORWARD_TO(e, SuspendJob);
    GANDIVA_FORWARD_TO(e, ResumeJob);
    GANDIVA_FORWARD_TO(e, KillJob);
    GANDIVA_FORWARD_TO(e, CheckpointJob);
    GANDIVA_FORWARD_TO(e, OpenCheckpointTransfer);
    GANDIVA_FORWARD_TO(e, ReceiveCheckpoint);
    GANDIVA_FORWARD_TO(e, Status);
  }
};

// Every method of the Scheduler service, forwarded to a daemon served in
// this process.
class InProcessSchedulerStub final
    : public ::testing::NiceMock<rpc::MockSchedulerStub> {
 public:
  explicit InProcessSchedulerStub(std::shared_ptr<SchedulerEndpoint> e) {
    GANDIVA_FORWARD_TO(e, RegisterAgent);
    GANDIVA_FORWARD_TO(e, Report);
    GANDIVA_FORWARD_TO(e, Leave);
    GANDIVA_FORWARD_TO(e, Submit);
    GANDIVA_FORWARD_TO(e, SubmitJobs);
    GANDIVA_FORWARD_TO(e, ListJobs);
    GANDIVA_FORWARD_TO(e, GetJob);
    GANDIVA_FORWARD_TO(e, Kill);
    GANDIVA_FORWARD_TO(e, Suspend);
    GANDIVA_FORWARD_TO(e, Resume);
    GANDIVA_FORWARD_TO(e, KillJobs);
    GANDIVA_FORWARD_TO(e, SuspendJobs);
    GANDIVA_FORWARD_TO(e, ResumeJobs);
    GANDIVA_FORWARD_TO(e, SetPriority);
    GANDIVA_FORWARD_TO(e, ListServers);
    GANDIVA_FORWARD_TO(e, ListQueues);
    GANDIVA_FORWARD_TO(e, ApplyQueues);
    GANDIVA_FORWARD_TO(e, GetUsage);
    GANDIVA_FORWARD_TO(e, Migrate);
    GANDIVA_FORWARD_TO(e, Drain);
    GANDIVA_FORWARD_TO(e, Pack);
    GANDIVA_FORWARD_TO(e, Unpack);
    GANDIVA_FORWARD_TO(e, Resize);
    GANDIVA_FORWARD_TO(e, Ping);
  }
};

#undef GANDIVA_FORWARD_TO

// A client of the Scheduler service at `address`: in process when a daemon
// is served there in this process, else over gRPC.
inline std::unique_ptr<rpc::Scheduler::StubInterface> SchedulerStubFor(
    const std::string& address) {
  if (auto e = InProcess::Get().Scheduler(address)) {
    return std::make_unique<InProcessSchedulerStub>(std::move(e));
  }
  return rpc::Scheduler::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

// A DaemonEnv whose time moves only when the test moves it, and whose
// agents are those served in this process. Wall time starts at the real
// time of its creation. Thread-safe.
class FakeDaemonEnv final : public DaemonEnv {
 public:
  FakeDaemonEnv()
      : wall0_(std::chrono::duration_cast<std::chrono::microseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()) {}

  int64_t WallMicros() override { return wall0_ + SteadyMicros() - kStart; }
  int64_t SteadyMicros() override {
    std::lock_guard lock(mu_);
    return now_;
  }
  bool WaitUntil(std::unique_lock<std::mutex>& lock,
                 std::condition_variable& cv, int64_t deadline_us,
                 const std::function<bool()>& pred) override {
    // The clock moves without notifying `cv`: look again every
    // millisecond.
    while (!pred()) {
      if (SteadyMicros() >= deadline_us) return pred();
      cv.wait_for(lock, std::chrono::milliseconds(1));
    }
    return true;
  }
  void SleepFor(int64_t us) override {
    std::unique_lock lock(mu_);
    const int64_t wake = now_ + std::max<int64_t>(us, 0);
    auto it = sleepers_.insert(wake);
    ++generation_;
    moved_.wait(lock, [&] { return now_ >= wake; });
    sleepers_.erase(it);
    ++generation_;
  }
  // The control token is not checked: the fake agents take every call.
  std::shared_ptr<rpc::Agent::StubInterface> AgentStub(
      const std::string& address, const std::optional<TlsConfig>&,
      const std::string&) override {
    auto e = InProcess::Get().Agent(address);
    if (e == nullptr) {
      // Nothing there: every call fails as a refused connection does.
      e = std::make_shared<AgentEndpoint>(nullptr, address);
    }
    return std::make_shared<InProcessAgentStub>(std::move(e));
  }

  // Moves the clock on to `t` (never back) and wakes those it reaches.
  void AdvanceTo(int64_t t) {
    {
      std::lock_guard lock(mu_);
      now_ = std::max(now_, t);
    }
    moved_.notify_all();
  }
  // Threads asleep on the clock: how many (`due`: of those, whose time
  // has come but which have not woken yet), the first wake-up still to
  // come, and a count that changes as they fall asleep and wake.
  struct Sleepers {
    int count = 0;
    int due = 0;
    int64_t next_wake = std::numeric_limits<int64_t>::max();
    uint64_t generation = 0;
  };
  Sleepers sleepers() {
    std::lock_guard lock(mu_);
    Sleepers s;
    s.count = static_cast<int>(sleepers_.size());
    for (int64_t wake : sleepers_) {
      if (wake <= now_) {
        ++s.due;
      } else {
        s.next_wake = std::min(s.next_wake, wake);
      }
    }
    s.generation = generation_;
    return s;
  }

 private:
  static constexpr int64_t kStart = 1'000'000'000'000;
  const int64_t wall0_;
  std::mutex mu_;
  std::condition_variable moved_;
  int64_t now_ = kStart;             // guarded by mu_
  std::multiset<int64_t> sleepers_;  // guarded by mu_
  uint64_t generation_ = 0;          // guarded by mu_
};

// The running test's world. The fixture sets Current() for the test's
// duration; nullptr (as in tests without the fixture) is the real world.
struct TestWorld {
  // Null: the real world.
  std::shared_ptr<FakeDaemonEnv> env;
  // The daemon now running (null between two), whose work WaitFor and
  // Pass wait for before they move the clock.
  std::function<SchedulerServer*()> daemon;

  static TestWorld*& Current() {
    static TestWorld* world = nullptr;
    return world;
  }
  static FakeDaemonEnv* Fake() {
    TestWorld* w = Current();
    return w == nullptr ? nullptr : w->env.get();
  }

  // When nothing is left to do before the clock moves (the daemon's loop
  // waits for its timer with nothing posted, no agent call is ready, and
  // every call running sleeps on the clock, none of them due, nothing
  // changing over a little real time): the time of the next thing due.
  std::optional<int64_t> Quiet() const {
    auto look = [&]() -> std::optional<std::pair<uint64_t, int64_t>> {
      const int64_t now = env->SteadyMicros();
      const FakeDaemonEnv::Sleepers s = env->sleepers();
      if (s.due > 0) return std::nullopt;
      int64_t next = s.next_wake;
      uint64_t generation = s.generation;
      SchedulerServer* d = daemon ? daemon() : nullptr;
      if (d != nullptr) {
        const SchedulerServer::Activity a = d->activity();
        if (!a.loop_idle || a.tasks_ready > 0 || a.tasks_running != s.count ||
            a.next_timer_us <= now) {
          return std::nullopt;
        }
        next = std::min(next, a.next_timer_us);
        generation += a.generation;
      }
      return std::make_pair(generation, next);
    };
    const auto first = look();
    if (!first) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    const auto second = look();
    if (!second || second->first != first->first) return std::nullopt;
    return second->second;
  }
};

// The world's time since the Unix epoch, in microseconds: the fake clock's
// in the fake world.
inline int64_t WorldWallMicros() {
  if (FakeDaemonEnv* env = TestWorld::Fake()) return env->WallMicros();
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Polls `cond` until it holds. In the fake world the clock moves on to
// the next thing due whenever the daemon is quiet, for at most `seconds`
// of the clock (and of real time), and once `cond` holds the daemon's loop
// finishes its pass (SchedulerServer::Sync): a job's history, read from
// the store, is written before the pass's state is published, so a test
// that waits for a history line then reads the state sees that pass's. In
// the real world, for `seconds`.
inline bool WaitFor(const std::function<bool()>& cond, int seconds = 30) {
  const auto real_end =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  TestWorld* w = TestWorld::Current();
  FakeDaemonEnv* env = TestWorld::Fake();
  const int64_t fake_end =
      env == nullptr ? 0 : env->SteadyMicros() + int64_t{seconds} * 1'000'000;
  while (std::chrono::steady_clock::now() < real_end) {
    if (cond()) {
      if (SchedulerServer* d = env && w->daemon ? w->daemon() : nullptr) {
        d->Sync();
      }
      return true;
    }
    if (env == nullptr) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (const std::optional<int64_t> next = w->Quiet()) {
      if (env->SteadyMicros() >= fake_end) return cond();
      env->AdvanceTo(std::min(*next, fake_end));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return cond();
}

// Lets `d` of time pass: in the fake world the clock moves on to each
// thing due on the way, once the daemon is quiet, then to the end, and
// returns once the daemon is quiet again; in the real world, a sleep.
inline void Pass(std::chrono::milliseconds d) {
  TestWorld* w = TestWorld::Current();
  FakeDaemonEnv* env = TestWorld::Fake();
  if (env == nullptr) {
    std::this_thread::sleep_for(d);
    return;
  }
  const int64_t end = env->SteadyMicros() + d.count() * 1000;
  auto quiet = [&] {
    std::optional<int64_t> next;
    const auto limit =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!(next = w->Quiet()) && std::chrono::steady_clock::now() < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return next.value_or(env->SteadyMicros() + 1000);
  };
  while (true) {
    const int64_t next = quiet();
    if (env->SteadyMicros() >= end) return;
    env->AdvanceTo(std::min(next, end));
  }
}

// The fixture's running daemon: a unique_ptr that, in the fake world,
// serves it in process at an address of its own, no longer served once it
// is reset.
class DaemonHolder {
 public:
  ~DaemonHolder() { reset(); }
  void Set(std::unique_ptr<SchedulerServer> s) {
    reset();
    server_ = std::move(s);
    if (server_ == nullptr) return;
    if (server_->address().empty()) {
      endpoint_ = std::make_shared<SchedulerEndpoint>(
          &server_->service(), InProcess::Get().NewAddress());
      InProcess::Get().Add(endpoint_);
    }
  }
  void reset() {
    if (endpoint_ != nullptr) {
      InProcess::Get().Remove(endpoint_->address());
      endpoint_->Close();
      endpoint_.reset();
    }
    server_.reset();
  }
  SchedulerServer* get() const { return server_.get(); }
  SchedulerServer* operator->() const { return server_.get(); }
  explicit operator bool() const { return server_ != nullptr; }
  // Where clients reach it: in process, or its gRPC address.
  std::string address() const {
    if (endpoint_ != nullptr) return endpoint_->address();
    return server_ == nullptr ? std::string() : server_->address();
  }

 private:
  std::unique_ptr<SchedulerServer> server_;
  std::shared_ptr<SchedulerEndpoint> endpoint_;
};

}  // namespace gandiva::runtime
