// CheckpointTransfer: moving checkpoints between agents. At the source it
// serves the checkpoint held here for a job: ReadCheckpoint (a gRPC stream
// of 2 MiB chunks) and OpenCheckpointTransfer (a bulk TCP channel,
// bulk_transfer.h). At the destination it serves ReceiveCheckpoint: it
// fetches the checkpoint from the source (the bulk channel when both
// agents have it, else the stream; or offers the channel to a warm process
// that can take its file from a socket itself) or moves the one held here,
// then either holds it for a later start (no process of the job here) or
// has the warm process restore it, and copies the job's log from the
// source (JobLogs::FetchEarlier). Part of the agent's implementation
// (AgentServer): the service checks whether the agent takes such calls.
//
// Thread-safety: thread-safe; each call may run on its own thread.
// Shutdown may be called from any thread, once the agent stops.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "proto/gandiva.grpc.pb.h"
#include "runtime/agent/bulk_transfer.h"
#include "runtime/agent/job_logs.h"
#include "runtime/agent/supervisor.h"
#include "runtime/auth/control_token.h"
#include "runtime/tls/tls.h"

namespace gandiva::runtime {

// AgentOptions' fields of the same names (agent_server.h), and the host the
// Agent service listens on (the bulk channel listens there too).
struct CheckpointTransferOptions {
  bool bulk_transfer = true;
  bool stream_to_job = true;
  int bulk_streams = 2;
  std::chrono::milliseconds bulk_accept_timeout{15000};
  std::chrono::milliseconds receive_timeout{60000};
  std::string listen_host;
  std::optional<TlsConfig> tls;
};

class CheckpointTransfer {
 public:
  using Clock = std::chrono::steady_clock;

  // `supervisor`, `logs` and `agent_stopping` (true once the agent stops:
  // a bulk receive under way is aborted) must outlive this. `log` takes
  // the agent's own messages.
  CheckpointTransfer(CheckpointTransferOptions options, Supervisor& supervisor,
                     JobLogs& logs, const std::atomic<bool>& agent_stopping,
                     std::function<void(const std::string&)> log);
  CheckpointTransfer(const CheckpointTransfer&) = delete;
  CheckpointTransfer& operator=(const CheckpointTransfer&) = delete;

  // Closes the bulk channels offered and aborts those under way; later
  // offers fail. Idempotent.
  void Shutdown();

  // The Agent service's ReadCheckpoint: every file of the checkpoint held
  // for the job (CheckpointFiles), in order, in chunks. NOT_FOUND when none
  // is held.
  grpc::Status Read(grpc::ServerContext* ctx,
                    const rpc::ReadCheckpointRequest* req,
                    grpc::ServerWriter<rpc::CheckpointChunk>* writer);
  // The Agent service's OpenCheckpointTransfer: a bulk channel for the
  // checkpoint held for the job, accepting until bulk_accept_timeout (or
  // the call's deadline, if sooner). UNIMPLEMENTED without bulk_transfer;
  // NOT_FOUND when none is held.
  grpc::Status Offer(grpc::ServerContext* ctx,
                     const rpc::OpenCheckpointTransferRequest* req,
                     rpc::OpenCheckpointTransferReply* reply);
  // The Agent service's ReceiveCheckpoint, bounded by receive_timeout.
  grpc::Status Receive(const rpc::ReceiveCheckpointRequest& req,
                       rpc::ReceiveCheckpointReply* out);

 private:
  // Pulls the checkpoint of `job_id` from the agent at `source` into `dir`:
  // over the bulk channel when both agents have it, else over the
  // ReadCheckpoint stream. *via: "tcp" (one stream), "tcp xN" (N parallel
  // streams) or "grpc". Adds the bytes written to *bytes.
  // stream_file non-empty: the warm process there can take that one file
  // from the bulk channel itself (GANDIVA_STREAM_OK_FILE). When the
  // checkpoint is that file alone, nothing is received: the offer is
  // written to `dir` (GANDIVA_STREAM_OFFER_FILE), *streamed is set and
  // *bytes is the file's size.
  // `ticket`: the request's fetch ticket, which the source admits it with.
  grpc::Status FetchCheckpoint(int64_t job_id, const std::string& source,
                               const std::string& ticket,
                               const std::string& dir, Clock::time_point end,
                               int64_t* bytes, std::string* via,
                               const std::string& stream_file = "",
                               bool* streamed = nullptr);
  // The bulk channel, over options.bulk_streams streams or fewer as the
  // source grants (*streams: how many), received here or, see
  // FetchCheckpoint, offered to the job. An error before any file's byte
  // came (the source does not offer it, it cannot be reached, a stream
  // cannot connect) sets *fall_back.
  grpc::Status FetchBulk(int64_t job_id, const std::string& source,
                         const std::string& ticket, rpc::Agent::Stub& stub,
                         const std::string& dir, Clock::time_point end,
                         int64_t* bytes, bool* fall_back, int* streams,
                         const std::string& stream_file, bool* streamed);
  // GANDIVA_STREAM_OFFER_FILE in `dir` (progress_page.h): where the warm
  // process connects for its checkpoint file (one file), the token, and
  // the slice of the file each of the `streams` granted carries
  // (BulkSlice). Written to a temp file (mode 0600: the token is the key)
  // and renamed.
  static core::Status WriteStreamOffer(
      const std::string& dir, const std::string& host,
      const rpc::OpenCheckpointTransferReply& offer, int streams);
  // The checkpoint file the warm process can take from a socket itself
  // (the first line of GANDIVA_STREAM_OK_FILE in `dir`, which it writes
  // just before it waits), or "" when it cannot, is not that far yet (the
  // files are then received while it finishes starting), or this agent
  // does not offer it (--no-stream-to-job, --no-bulk-transfer).
  std::string StreamFileOf(const std::string& dir) const;
  // Writes the files of a ReadCheckpoint stream into `dir` (temp names, then
  // rename). Adds the bytes written to *bytes.
  grpc::Status FetchStream(int64_t job_id, const std::string& source,
                           const std::string& ticket, rpc::Agent::Stub& stub,
                           const std::string& dir, Clock::time_point end,
                           int64_t* bytes);
  // Moves (rename, else copy) the checkpoint held here into `dir`.
  grpc::Status MoveLocalCheckpoint(int64_t job_id, const std::string& dir,
                                   int64_t* bytes);

  const CheckpointTransferOptions options_;
  Supervisor& supervisor_;
  JobLogs& logs_;
  const std::atomic<bool>& agent_stopping_;
  const std::function<void(const std::string&)> log_;
  // Bulk channels offered for checkpoints held here.
  const std::unique_ptr<BulkServer> bulk_;
};

// Regular files under `dir`, relative paths, sorted; the warm start's own
// files (IsNoteFile) and partial files of a transfer are left out.
std::vector<std::string> CheckpointFiles(const std::string& dir);

}  // namespace gandiva::runtime
