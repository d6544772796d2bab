// DaemonEnv: what the scheduler daemon takes from the world besides its
// store and its listening socket: the time, waiting for it, and channels to
// agents (as LevelDB's Env, Kubernetes' WithClock). SchedulerOptions::env
// injects one; unset, the daemon uses RealDaemonEnv(). Tests inject a fake
// (daemon_test_util.h: a clock the test moves, agents served in process),
// so the daemon runs with no socket and no wait on the wall clock.
//
// Thread-safety: every method may be called from any thread at once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/tls/tls.h"

namespace gandiva::runtime {

class DaemonEnv {
 public:
  virtual ~DaemonEnv() = default;

  // Microseconds since the Unix epoch: submission times, history, agents'
  // liveness.
  virtual int64_t WallMicros() = 0;
  // Monotonic microseconds from any origin: the loop's timers and the
  // durations the daemon measures.
  virtual int64_t SteadyMicros() = 0;
  // With `lock` held on the mutex `cv` waits with: waits until `pred()`
  // holds (checked under the lock) or SteadyMicros() reaches `deadline_us`.
  // Returns pred().
  virtual bool WaitUntil(std::unique_lock<std::mutex>& lock,
                         std::condition_variable& cv, int64_t deadline_us,
                         const std::function<bool()>& pred) = 0;
  // Blocks the calling thread for `us` microseconds of this env's time.
  virtual void SleepFor(int64_t us) = 0;
  // A client of the Agent service an agent registered at `address`, with
  // mutual TLS when `tls` is set; each call carries `control_token`, the
  // agent's (control_token.h), when not empty. Calls to an agent that
  // cannot be reached fail (UNAVAILABLE, or DEADLINE_EXCEEDED at the call's
  // deadline).
  virtual std::shared_ptr<rpc::Agent::StubInterface> AgentStub(
      const std::string& address, const std::optional<TlsConfig>& tls,
      const std::string& control_token) = 0;
};

// The system's clocks and gRPC channels (MakeChannel). One shared instance.
std::shared_ptr<DaemonEnv> RealDaemonEnv();

}  // namespace gandiva::runtime
