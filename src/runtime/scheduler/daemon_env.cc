#include "runtime/scheduler/daemon_env.h"

#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/auth/control_token.h"

namespace gandiva::runtime {
namespace {

class RealEnv final : public DaemonEnv {
 public:
  int64_t WallMicros() override {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  int64_t SteadyMicros() override {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  bool WaitUntil(std::unique_lock<std::mutex>& lock,
                 std::condition_variable& cv, int64_t deadline_us,
                 const std::function<bool()>& pred) override {
    const auto deadline = std::chrono::steady_clock::time_point(
        std::chrono::microseconds(deadline_us));
    return cv.wait_until(lock, deadline, pred);
  }
  void SleepFor(int64_t us) override {
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }
  std::shared_ptr<rpc::Agent::StubInterface> AgentStub(
      const std::string& address, const std::optional<TlsConfig>& tls,
      const std::string& control_token) override {
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors;
    if (auto token = ControlTokenInterceptor(control_token)) {
      interceptors.push_back(std::move(token));
    }
    return rpc::Agent::NewStub(
        MakeChannel(address, tls, {}, std::move(interceptors)));
  }
};

}  // namespace

std::shared_ptr<DaemonEnv> RealDaemonEnv() {
  static const std::shared_ptr<DaemonEnv> env = std::make_shared<RealEnv>();
  return env;
}

}  // namespace gandiva::runtime
