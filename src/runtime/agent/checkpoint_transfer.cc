#include "runtime/agent/checkpoint_transfer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "client/progress_page.h"
#include "runtime/agent/agent_rpc.h"
#include "runtime/agent/agent_server.h"

namespace gandiva::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Checkpoint files travel in chunks of this size (one message each).
constexpr size_t kChunkBytes = 2 << 20;

int64_t MicrosSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() -
                                                               t0)
      .count();
}

grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx,
                                  Clock::time_point end) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        end - Clock::now()));
  return ctx;
}

}  // namespace

std::vector<std::string> CheckpointFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string name = it->path().filename().string();
    if (IsNoteFile(name)) continue;
    if (name.ends_with(".gandiva-part")) continue;
    out.push_back(std::filesystem::relative(it->path(), dir, ec).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

CheckpointTransfer::CheckpointTransfer(
    CheckpointTransferOptions options, Supervisor& supervisor, JobLogs& logs,
    const std::atomic<bool>& agent_stopping,
    std::function<void(const std::string&)> log)
    : options_(std::move(options)),
      supervisor_(supervisor),
      logs_(logs),
      agent_stopping_(agent_stopping),
      log_(std::move(log)),
      bulk_(std::make_unique<BulkServer>(log_)) {}

void CheckpointTransfer::Shutdown() { bulk_->Shutdown(); }

grpc::Status CheckpointTransfer::Read(
    grpc::ServerContext* ctx, const rpc::ReadCheckpointRequest* req,
    grpc::ServerWriter<rpc::CheckpointChunk>* writer) {
  const int64_t job_id = req->job_id();
  const std::string dir = supervisor_.HeldCheckpoint(job_id);
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

grpc::Status CheckpointTransfer::Offer(
    grpc::ServerContext* ctx, const rpc::OpenCheckpointTransferRequest* req,
    rpc::OpenCheckpointTransferReply* reply) {
  if (!options_.bulk_transfer) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "the bulk channel is switched off on this agent "
                        "(--no-bulk-transfer)");
  }
  const int64_t job_id = req->job_id();
  const std::string what = "the checkpoint of job " + std::to_string(job_id);
  const std::string dir = supervisor_.HeldCheckpoint(job_id);
  if (dir.empty()) {
    return grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        "no checkpoint of job " + std::to_string(job_id) + " on this agent");
  }
  auto deadline = Clock::now() + options_.bulk_accept_timeout;
  const auto call_left = ctx->deadline() - std::chrono::system_clock::now();
  if (call_left < options_.bulk_accept_timeout) {
    deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(call_left);
  }
  auto offered = bulk_->Offer(options_.listen_host, dir, CheckpointFiles(dir),
                              deadline, what, req->streams());
  if (!offered.ok()) {
    log_("offering " + what +
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

grpc::Status CheckpointTransfer::FetchCheckpoint(
    int64_t job_id, const std::string& source, const std::string& ticket,
    const std::string& dir, Clock::time_point end, int64_t* bytes,
    std::string* via, const std::string& stream_file, bool* streamed) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  auto source_channel = MakeChannel(source, options_.tls, args);
  auto stub = rpc::Agent::NewStub(source_channel);
  if (options_.bulk_transfer) {
    bool fall_back = false;
    int streams = 1;
    grpc::Status s = FetchBulk(job_id, source, ticket, *stub, dir, end, bytes,
                               &fall_back, &streams, stream_file, streamed);
    if (s.ok()) {
      *via = streams > 1 ? "tcp x" + std::to_string(streams) : "tcp";
      return s;
    }
    if (!fall_back) return s;
    log_("job " + std::to_string(job_id) + ": " + s.error_message() +
         "; fetching the checkpoint over the gRPC stream instead");
  }
  *via = "grpc";
  return FetchStream(job_id, source, ticket, *stub, dir, end, bytes);
}

grpc::Status CheckpointTransfer::FetchBulk(
    int64_t job_id, const std::string& source, const std::string& ticket,
    rpc::Agent::Stub& stub, const std::string& dir, Clock::time_point end,
    int64_t* bytes, bool* fall_back, int* streams,
    const std::string& stream_file, bool* streamed) {
  const std::string what = "fetching the checkpoint of job " +
                           std::to_string(job_id) + " from " + source;
  grpc::ClientContext ctx;
  AttachFetchTicket(ticket, &ctx);
  rpc::OpenCheckpointTransferRequest oreq;
  oreq.set_job_id(job_id);
  oreq.set_streams(options_.bulk_streams);
  rpc::OpenCheckpointTransferReply offer;
  grpc::Status s =
      stub.OpenCheckpointTransfer(WithDeadline(&ctx, end), oreq, &offer);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
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
      offer.port() > 65535 || granted > options_.bulk_streams) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        source + " offered an unusable bulk channel (port " +
                            std::to_string(offer.port()) + ", a " +
                            std::to_string(offer.token().size()) +
                            "-byte token, " + std::to_string(granted) +
                            " streams of " +
                            std::to_string(options_.bulk_streams) + ")");
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
    auto fd =
        ConnectBulk(host->first, offer.port(), offer.token(), end, k, granted);
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
      ReceiveBulkFiles(socks, files, dir, end, &agent_stopping_, bytes);
  for (int sock : socks) close(sock);
  if (!r.ok()) {
    return grpc::Status(r.code() == core::StatusCode::kUnavailable
                            ? grpc::StatusCode::UNAVAILABLE
                            : grpc::StatusCode::INTERNAL,
                        what + " over the bulk channel: " + r.message());
  }
  return grpc::Status::OK;
}

core::Status CheckpointTransfer::WriteStreamOffer(
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
  std::string text = "host " + host + "\nport " + std::to_string(offer.port()) +
                     "\ntoken " + token + "\npath " + files[0].path +
                     "\nsize " + std::to_string(files[0].size) + "\nstreams " +
                     std::to_string(streams) + "\n";
  int64_t at = 0;
  for (int i = 0; i < streams; ++i) {
    int64_t length = 0;
    for (const BulkPiece& p : BulkSlice(files, streams, i)) {
      length += p.length;
    }
    text += "slice " + std::to_string(at) + " " + std::to_string(length) + "\n";
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

std::string CheckpointTransfer::StreamFileOf(const std::string& dir) const {
  if (!options_.stream_to_job || !options_.bulk_transfer) return "";
  std::ifstream in(dir + "/" GANDIVA_STREAM_OK_FILE);
  std::string file;
  if (!std::getline(in, file) || !SafeRelativePath(file)) return "";
  return file;
}

grpc::Status CheckpointTransfer::FetchStream(
    int64_t job_id, const std::string& source, const std::string& ticket,
    rpc::Agent::Stub& stub, const std::string& dir, Clock::time_point end,
    int64_t* bytes) {
  grpc::ClientContext ctx;
  AttachFetchTicket(ticket, &ctx);
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
                            ? grpc::StatusCode::NOT_FOUND
                            : grpc::StatusCode::UNAVAILABLE,
                        "fetching the checkpoint of job " +
                            std::to_string(job_id) + " from " + source + ": " +
                            s.error_message());
  }
  return grpc::Status::OK;
}

grpc::Status CheckpointTransfer::MoveLocalCheckpoint(int64_t job_id,
                                                     const std::string& dir,
                                                     int64_t* bytes) {
  const std::string held = supervisor_.HeldCheckpoint(job_id);
  if (held.empty()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "no checkpoint of job " + std::to_string(job_id) +
                            " on this agent to receive from");
  }
  if (held == dir) {
    for (const std::string& rel : CheckpointFiles(dir)) {
      std::error_code ec;
      *bytes +=
          static_cast<int64_t>(std::filesystem::file_size(dir + "/" + rel, ec));
    }
    return grpc::Status::OK;
  }
  for (const std::string& rel : CheckpointFiles(held)) {
    const std::string from = held + "/" + rel;
    const std::string to = dir + "/" + rel;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(to).parent_path(),
                                        ec);
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
  supervisor_.HoldCheckpoint(job_id, dir);
  return grpc::Status::OK;
}

grpc::Status CheckpointTransfer::Receive(
    const rpc::ReceiveCheckpointRequest& req,
    rpc::ReceiveCheckpointReply* out) {
  const auto t0 = Clock::now();
  const auto end = t0 + options_.receive_timeout;
  const int64_t job_id = req.job_id();
  const std::string what = "job " + std::to_string(job_id);
  auto view = supervisor_.Job(job_id);
  // No process of the job here (a job without the library, or one that
  // will be started later): the checkpoint is only received and held, for
  // a StartJob(resume_local).
  const bool cold = !view.ok() || view->state == RunState::kExited;
  if (!cold && !view->warm) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        what + " runs here and was not started warm");
  }
  const std::string dir = supervisor_.IncomingDir(job_id);
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
          : FetchCheckpoint(job_id, req.source_address(), req.fetch_ticket(),
                            dir, end, &bytes, &via, stream_file, &streamed);
  if (!s.ok()) return s;
  int64_t transfer_us = MicrosSince(transfer0);
  out->set_channel(via);
  out->set_streamed(streamed);
  if (cold) {
    supervisor_.HoldCheckpoint(job_id, dir, req.submitted_us());
    if (!req.source_address().empty() && !req.without_log()) {
      // The job starts here from the checkpoint: its log so far is the
      // source's, and what an earlier stay here left is not repeated.
      logs_.FetchEarlier(job_id, req.source_address(), req.fetch_ticket(),
                         /*truncate_log=*/true);
    }
    out->set_bytes(bytes);
    out->set_transfer_us(transfer_us);
    out->set_took_us(MicrosSince(t0));
    log_(what + " received its checkpoint (" + std::to_string(bytes) +
         " bytes in " + std::to_string(transfer_us) + " us, " + via +
         "), held for its start here");
    return grpc::Status::OK;
  }
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
  auto r = supervisor_.AwaitRestore(
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
      r->load_us = static_cast<int64_t>((r->restore_end_ns - received) / 1000);
    } else {
      transfer_us = r->load_us;
      r->load_us = 0;
    }
    unlink(done.c_str());
  }
  // Training goes on here: now the job's log so far, from the source.
  if (!req.source_address().empty()) {
    logs_.FetchEarlier(job_id, req.source_address(), req.fetch_ticket(),
                       /*truncate_log=*/false);
  }
  out->set_bytes(bytes);
  out->set_transfer_us(transfer_us);
  out->set_warm_us(r->warm_us);
  out->set_load_us(r->load_us);
  out->set_first_minibatch_us(r->first_minibatch_us);
  out->set_took_us(MicrosSince(t0));
  log_("job " + std::to_string(job_id) +
       (streamed ? " took its checkpoint straight from the source ("
                 : " received its checkpoint (") +
       std::to_string(bytes) + " bytes in " + std::to_string(transfer_us) +
       " us, " + via + ") and restored it");
  return grpc::Status::OK;
}

}  // namespace gandiva::runtime
