#include "runtime/agent/job_logs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "runtime/agent/bulk_transfer.h"
#include "runtime/agent/log_cap.h"

namespace gandiva::runtime {

JobLogs::JobLogs(Supervisor& supervisor, std::optional<TlsConfig> tls,
                 int64_t max_log_bytes, std::chrono::milliseconds cap_interval,
                 const std::atomic<bool>& agent_stopping,
                 const ControlGate& gate,
                 std::function<void(const std::string&)> log)
    : supervisor_(supervisor),
      tls_(std::move(tls)),
      gate_(gate),
      max_log_bytes_(max_log_bytes),
      cap_interval_(cap_interval),
      agent_stopping_(agent_stopping),
      log_(std::move(log)) {}

JobLogs::~JobLogs() { StopCapping(); }

void JobLogs::StartCapping() {
  if (max_log_bytes_ > 0) capper_ = std::thread([this] { CapLoop(); });
}

void JobLogs::StopCapping() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (capper_.joinable()) capper_.join();
}

grpc::Status JobLogs::Tail(grpc::ServerContext* ctx,
                           const rpc::TailLogRequest* req,
                           grpc::ServerWriter<rpc::LogChunk>* writer) {
  const int64_t job_id = req->job_id();
  if (auto s = gate_.AdmitLogRead(*ctx, job_id, req->ticket()); !s.ok()) {
    return s;
  }
  const std::string path = supervisor_.LogPath(job_id);
  const bool known = supervisor_.Job(job_id).ok();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const int earlier_fd =
      open(supervisor_.EarlierLogPath(job_id).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && earlier_fd < 0) {
    if (!known) {
      return grpc::Status(
          grpc::StatusCode::NOT_FOUND,
          "job " + std::to_string(job_id) + " is not known to this agent");
    }
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "opening " + path + ": " + std::strerror(errno));
  }
  struct stat st;
  const int64_t earlier_size =
      earlier_fd >= 0 && fstat(earlier_fd, &st) == 0 ? st.st_size : 0;
  int64_t offset = req->offset();
  if (offset < 0) {  // the last -offset bytes
    const int64_t size =
        earlier_size + (fd >= 0 && fstat(fd, &st) == 0 ? st.st_size : 0);
    offset = std::max<int64_t>(0, size + offset);
  }
  std::vector<char> buf(64 * 1024);
  grpc::Status result = grpc::Status::OK;
  int64_t skipped = 0;  // dropped output passed over, not yet said
  for (;;) {
    // Ended before the read: a read that finds nothing means the end.
    auto view = supervisor_.Job(job_id);
    const bool ended = !view.ok() || view->state == RunState::kExited;
    ssize_t n = 0;
    // Past what the log bound dropped (holes: no need to read zeros).
    auto skip_holes = [&](int file, int64_t base, int64_t size) {
      const int64_t data = base + NextData(file, offset - base, size);
      skipped += data - offset;
      offset = data;
    };
    if (offset < earlier_size) skip_holes(earlier_fd, 0, earlier_size);
    if (offset < earlier_size) {
      n = pread(earlier_fd, buf.data(),
                static_cast<size_t>(std::min<int64_t>(
                    static_cast<int64_t>(buf.size()), earlier_size - offset)),
                offset);
    } else if (fd >= 0) {
      skip_holes(fd, earlier_size, fstat(fd, &st) == 0 ? st.st_size : 0);
      n = pread(fd, buf.data(), buf.size(), offset - earlier_size);
    }
    if (n < 0) {
      result = grpc::Status(grpc::StatusCode::INTERNAL,
                            "reading " + path + ": " + std::strerror(errno));
      break;
    }
    if (n > 0) {
      rpc::LogChunk chunk;
      chunk.set_data(buf.data(), static_cast<size_t>(n));
      chunk.set_offset(offset);
      chunk.set_skipped(skipped);
      skipped = 0;
      offset += n;
      if (!writer->Write(chunk)) break;  // the client went away
      continue;
    }
    if (!req->follow() || ended || ctx->IsCancelled() ||
        agent_stopping_.load() || fd < 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (fd >= 0) close(fd);
  if (earlier_fd >= 0) close(earlier_fd);
  return result;
}

void JobLogs::FetchEarlier(int64_t job_id, const std::string& source,
                           const std::string& ticket, bool truncate_log) {
  const std::string path = supervisor_.EarlierLogPath(job_id);
  const std::string part = path + ".gandiva-part";
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(),
                                      ec);
  const int fd =
      open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    log_("job " + std::to_string(job_id) + ": creating " + part + ": " +
         std::strerror(errno));
    return;
  }
  auto stub = rpc::Agent::NewStub(MakeChannel(source, tls_));
  grpc::ClientContext ctx;
  AttachFetchTicket(ticket, &ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  rpc::TailLogRequest req;
  req.set_job_id(job_id);
  auto reader = stub->TailLog(&ctx, req);
  rpc::LogChunk chunk;
  bool ok = true;
  while (ok && reader->Read(&chunk)) {
    const std::string& d = chunk.data();
    ok = PwriteAll(fd, d.data(), d.size(), static_cast<off_t>(chunk.offset()));
  }
  const grpc::Status st = reader->Finish();
  ok = close(fd) == 0 && ok;
  if (!ok || !st.ok() || rename(part.c_str(), path.c_str()) != 0) {
    unlink(part.c_str());
    log_("job " + std::to_string(job_id) + ": its log at " + source +
         " was not copied here (" +
         (st.ok() ? std::string("write failed") : st.error_message()) + ")");
    return;
  }
  Cap(job_id, /*earlier=*/true);
  if (truncate_log) {
    if (truncate(supervisor_.LogPath(job_id).c_str(), 0) != 0 &&
        errno != ENOENT) {
      log_("job " + std::to_string(job_id) +
           ": emptying its old log: " + std::strerror(errno));
    }
  }
}

void JobLogs::Cap(int64_t job_id, bool earlier) {
  const std::string path = earlier ? supervisor_.EarlierLogPath(job_id)
                                   : supervisor_.LogPath(job_id);
  auto dropped = CapLog(path, max_log_bytes_);
  std::lock_guard<std::mutex> lock(capped_mu_);
  if (!dropped.ok()) {
    if (!log_cap_failed_) {
      log_cap_failed_ = true;
      log_("job logs are not bounded here: " + dropped.status().ToString());
    }
  } else if (*dropped > 0 && capped_logs_.insert(job_id).second) {
    log_("job " + std::to_string(job_id) + ": dropped the oldest " +
         std::to_string(*dropped) +
         " bytes of its log (--max-log-mb), and will again as it grows");
  }
}

void JobLogs::CapLoop() {
  for (;;) {
    for (const JobView& v : supervisor_.Jobs()) Cap(v.job_id);
    std::unique_lock<std::mutex> lock(stop_mu_);
    if (stop_cv_.wait_for(lock, cap_interval_, [&] { return stop_; })) {
      return;
    }
  }
}

}  // namespace gandiva::runtime
