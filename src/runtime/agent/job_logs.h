// JobLogs: the logs of the jobs on this agent. TailLog streams a job's log:
// what it wrote on the servers it ran on before it moved here
// (Supervisor::EarlierLogPath), then here (LogPath), as one stream whose
// offsets run over both, passing over what the bound dropped. A thread
// bounds the logs of the running jobs every interval (log_cap.h), and
// FetchEarlier copies a moved job's whole log from the agent it came from.
// Part of the agent's implementation (AgentServer).
//
// Thread-safety: thread-safe; Tail, FetchEarlier and Cap may run on many
// threads at once. StartCapping and StopCapping are called by the agent's
// lifecycle, once each.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/agent/supervisor.h"
#include "runtime/auth/control_token.h"
#include "runtime/tls/tls.h"

namespace gandiva::runtime {

class JobLogs {
 public:
  // `supervisor` and `agent_stopping` (true once the agent stops: a
  // following Tail ends) must outlive this. Each log keeps at most
  // `max_log_bytes` (0: unbounded), checked every `cap_interval`. `log`
  // takes the agent's own messages. `gate` (which must outlive this)
  // admits the reads of a log (Tail) and signs this agent's reads of
  // another's (FetchEarlier).
  JobLogs(Supervisor& supervisor, std::optional<TlsConfig> tls,
          int64_t max_log_bytes, std::chrono::milliseconds cap_interval,
          const std::atomic<bool>& agent_stopping, const ControlGate& gate,
          std::function<void(const std::string&)> log);
  // StopCapping.
  ~JobLogs();
  JobLogs(const JobLogs&) = delete;
  JobLogs& operator=(const JobLogs&) = delete;

  // Starts the thread that bounds the logs of the jobs running here, when
  // there is a bound.
  void StartCapping();
  // Stops that thread and joins it. Idempotent.
  void StopCapping();

  // The Agent service's TailLog: from req->offset() (negative: the last
  // -offset bytes) and, with follow, on until the job has ended and all is
  // sent, the client cancels, or the agent stops. NOT_FOUND for a job this
  // agent has neither a log nor a record of.
  grpc::Status Tail(grpc::ServerContext* ctx, const rpc::TailLogRequest* req,
                    grpc::ServerWriter<rpc::LogChunk>* writer);

  // Copies the job's whole log at `source` (its TailLog: the earlier part
  // and its own) into EarlierLogPath, replacing it; truncate_log also
  // empties LogPath (no process of the job writes it). `ticket`: the move's
  // fetch ticket, which the source admits the read with. A failure is
  // logged and otherwise ignored: the move does not depend on it.
  void FetchEarlier(int64_t job_id, const std::string& source,
                    const std::string& ticket, bool truncate_log);

  // Drops the oldest output of the job's log beyond the bound; `earlier`:
  // of its copy of the log from earlier servers. A file system that cannot
  // is said once.
  void Cap(int64_t job_id, bool earlier = false);

 private:
  // Bounds the logs of the jobs running here, every cap_interval_ until
  // StopCapping.
  void CapLoop();

  Supervisor& supervisor_;
  const std::optional<TlsConfig> tls_;
  const ControlGate& gate_;
  const int64_t max_log_bytes_;
  const std::chrono::milliseconds cap_interval_;
  const std::atomic<bool>& agent_stopping_;
  const std::function<void(const std::string&)> log_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
  std::thread capper_;

  // What Cap said once: that logs cannot be bounded here, and the jobs
  // whose log was bounded.
  std::mutex capped_mu_;
  bool log_cap_failed_ = false;    // guarded by capped_mu_
  std::set<int64_t> capped_logs_;  // guarded by capped_mu_
};

}  // namespace gandiva::runtime
