#include "runtime/agent/bulk_transfer.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>
#include <utility>

namespace gandiva::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Blocking socket calls return at least this often, to look at the deadline
// and for a stop.
constexpr milliseconds kSlice{200};
// The source gives up on a receiver that took nothing for this long.
constexpr std::chrono::seconds kSendStall{30};
// Each connect attempt's bound (then the next address).
constexpr std::chrono::seconds kConnectTimeout{5};
// Connections that have not presented their token yet, per transfer (more:
// the oldest is closed).
constexpr size_t kMaxPending = 64;
// One sendfile() call moves at most this much.
constexpr size_t kSendStep = size_t{1} << 30;
// The pipe between socket and file (and the buffer where there is none).
constexpr int64_t kPipeBytes = int64_t{1} << 20;
// The source's buffer where it copies a file into the socket.
constexpr size_t kCopyBytes = size_t{1} << 20;

std::string ErrnoText(int err) { return std::strerror(err); }

std::string StripBrackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

bool IsWildcard(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "*";
}

int RemainingMs(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
}

void SetTimeouts(int fd, milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool SetBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0;
}

bool RandomBytes(size_t n, std::string* out) {
  out->assign(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(out->data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  if (got == n) return true;
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  got = 0;
  while (got < n) {
    const ssize_t r = read(fd, out->data() + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  close(fd);
  return got == n;
}

// Compares in time independent of where they differ.
bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

std::string SockaddrText(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST] = {}, serv[NI_MAXSERV] = {};
  if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  const bool v6 = std::strchr(host, ':') != nullptr;
  return (v6 ? "[" + std::string(host) + "]" : std::string(host)) + ":" + serv;
}

std::string PeerText(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return SockaddrText(reinterpret_cast<sockaddr*>(&ss), len);
}

// A listening socket (non-blocking) on `bind_host`, ephemeral port.
core::StatusOr<int> Listen(const std::string& bind_host, int* port) {
  const std::string host = StripBrackets(bind_host);
  std::vector<std::pair<sockaddr_storage, socklen_t>> addrs;
  if (IsWildcard(host)) {
    // All interfaces: IPv6 dual-stack, else IPv4.
    sockaddr_storage ss{};
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    a6->sin6_family = AF_INET6;
    a6->sin6_addr = in6addr_any;
    addrs.emplace_back(ss, static_cast<socklen_t>(sizeof(sockaddr_in6)));
    ss = {};
    auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
    a4->sin_family = AF_INET;
    a4->sin_addr.s_addr = htonl(INADDR_ANY);
    addrs.emplace_back(ss, static_cast<socklen_t>(sizeof(sockaddr_in)));
  } else {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), "0", &hints, &res);
    if (rc != 0) {
      return core::Status(core::StatusCode::kUnavailable,
                          "resolving " + host + ": " + gai_strerror(rc));
    }
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      sockaddr_storage ss{};
      std::memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
      addrs.emplace_back(ss, ai->ai_addrlen);
    }
    freeaddrinfo(res);
  }
  std::string errors;
  for (auto& [ss, len] : addrs) {
    const int family = ss.ss_family;
    const int fd =
        socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      errors += (errors.empty() ? "" : "; ") + std::string("socket: ") +
                ErrnoText(errno);
      continue;
    }
    if (family == AF_INET6 && IsWildcard(host)) {
      const int off = 0;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    }
    sockaddr_storage bound{};
    socklen_t blen = sizeof bound;
    if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
        listen(fd, 16) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen) != 0) {
      errors += (errors.empty() ? "" : "; ") +
                SockaddrText(reinterpret_cast<sockaddr*>(&ss), len) + ": " +
                ErrnoText(errno);
      close(fd);
      continue;
    }
    *port = ntohs(family == AF_INET6
                      ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                      : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return fd;
  }
  return core::Status(core::StatusCode::kUnavailable,
                      "cannot listen on " + bind_host + ": " + errors);
}

core::Status Interrupted(const std::atomic<bool>* cancel, Clock::time_point end,
                         int64_t got, int64_t size) {
  if (cancel != nullptr && cancel->load()) {
    return core::Status(core::StatusCode::kUnavailable,
                        "cancelled (the agent is shutting down)");
  }
  if (Clock::now() >= end) {
    return core::Status(core::StatusCode::kUnavailable,
                        "timed out after " + std::to_string(got) + " of " +
                            std::to_string(size) + " bytes");
  }
  return core::Status::Ok();
}

core::Status Ended(ssize_t r, int err, int64_t got, int64_t size) {
  return core::Status(core::StatusCode::kUnavailable,
                      (r == 0 ? std::string("the source closed the connection")
                              : "receiving: " + ErrnoText(err)) +
                          " after " + std::to_string(got) + " of " +
                          std::to_string(size) + " bytes");
}

// Reads exactly `n` bytes from a blocking socket (kSlice timeouts).
core::Status RecvExactly(int fd, char* out, size_t n, Clock::time_point end) {
  size_t got = 0;
  while (got < n) {
    const int64_t g = static_cast<int64_t>(got);
    core::Status s = Interrupted(nullptr, end, g, static_cast<int64_t>(n));
    if (!s.ok()) return s;
    const ssize_t r = recv(fd, out + got, n - got, MSG_WAITALL);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      continue;
    }
    if (r <= 0) return Ended(r, errno, g, static_cast<int64_t>(n));
    got += static_cast<size_t>(r);
  }
  return core::Status::Ok();
}

core::Status SendAll(int fd, const char* data, size_t n,
                     Clock::time_point end) {
  size_t sent = 0;
  while (sent < n) {
    if (Clock::now() >= end) {
      return core::Status(core::StatusCode::kUnavailable, "send timed out");
    }
    const ssize_t r = send(fd, data + sent, n - sent, MSG_NOSIGNAL);
    if (r > 0) {
      sent += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      continue;
    }
    return core::Status(core::StatusCode::kUnavailable,
                        "send: " + ErrnoText(errno));
  }
  return core::Status::Ok();
}

// Receives `size` bytes into the open file `fd` at `base` through a buffer.
core::Status ReceiveBuffered(int sock, int fd, int64_t base, int64_t size,
                             Clock::time_point end,
                             const std::atomic<bool>* cancel) {
  std::vector<char> buf(kPipeBytes);
  int64_t got = 0;
  while (got < size) {
    core::Status s = Interrupted(cancel, end, got, size);
    if (!s.ok()) return s;
    const ssize_t r =
        recv(sock, buf.data(),
             static_cast<size_t>(std::min<int64_t>(size - got, kPipeBytes)), 0);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      continue;
    }
    if (r <= 0) return Ended(r, errno, got, size);
    if (!PwriteAll(fd, buf.data(), static_cast<size_t>(r), base + got)) {
      return core::IoError("write: " + ErrnoText(errno));
    }
    got += r;
  }
  return core::Status::Ok();
}

// Receives `size` bytes into the open file `fd` at `base`: spliced from
// the socket into a pipe and from the pipe into the file, so the bytes are
// copied once (into the file's pages), with no user-space buffer. Where the
// kernel cannot splice these, through a buffer.
core::Status ReceiveInto(int sock, int fd, int64_t base, int64_t size,
                         Clock::time_point end,
                         const std::atomic<bool>* cancel) {
  if (size == 0) return core::Status::Ok();
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return ReceiveBuffered(sock, fd, base, size, end, cancel);
  }
  fcntl(pipe_fds[1], F_SETPIPE_SZ, static_cast<int>(kPipeBytes));
  int64_t got = 0;
  core::Status result = core::Status::Ok();
  bool buffered = false;
  while (got < size) {
    result = Interrupted(cancel, end, got, size);
    if (!result.ok()) break;
    const ssize_t r =
        splice(sock, nullptr, pipe_fds[1], nullptr,
               static_cast<size_t>(std::min<int64_t>(size - got, kPipeBytes)),
               SPLICE_F_MOVE);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      continue;
    }
    if (r < 0 && got == 0 && errno == EINVAL) {
      buffered = true;  // nothing taken from the socket yet
      break;
    }
    if (r <= 0) {
      result = Ended(r, errno, got, size);
      break;
    }
    for (ssize_t left = r; left > 0 && result.ok();) {
      loff_t at = base + got;
      const ssize_t w = splice(pipe_fds[0], nullptr, fd, &at,
                               static_cast<size_t>(left), SPLICE_F_MOVE);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        result = core::IoError("write: " + ErrnoText(errno));
      } else {
        left -= w;
        got += w;
      }
    }
    if (!result.ok()) break;
  }
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  if (buffered) return ReceiveBuffered(sock, fd, base, size, end, cancel);
  return result;
}

// Whether the peer of connected socket `fd` is this host (the same address
// at both ends: loopback, or one of this host's own).
bool SameHost(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t llen = sizeof local, plen = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0 ||
      local.ss_family != peer.ss_family) {
    return false;
  }
  if (local.ss_family == AF_INET) {
    return reinterpret_cast<sockaddr_in*>(&local)->sin_addr.s_addr ==
           reinterpret_cast<sockaddr_in*>(&peer)->sin_addr.s_addr;
  }
  if (local.ss_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr,
                       &reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  }
  return false;
}

// Sends bytes [begin, begin + length) of the open file `fd` (of `f.size`
// bytes) to blocking socket `sock` (kSlice timeouts): with sendfile(), or
// through *buf when given. Stops on `stop`, or when the receiver took
// nothing for kSendStall. Returns the error ("" when all went out); *sent:
// the bytes that did.
std::string SendRange(int sock, int fd, const BulkFile& f, int64_t begin,
                      int64_t length, const std::atomic<bool>& stop,
                      std::vector<char>* buf, int64_t* sent) {
  const int64_t end = begin + length;
  off_t offset = begin;      // sent up to here
  int64_t read_end = begin;  // read into *buf up to here
  size_t buf_begin = 0;      // *buf holds [buf_begin, buf_end) unsent
  size_t buf_end = 0;
  auto last_progress = Clock::now();
  std::string error;
  while (offset < end && error.empty()) {
    if (stop.load()) {
      error = "the agent is shutting down";
      break;
    }
    ssize_t n = 0;
    if (buf == nullptr) {
      const size_t step =
          std::min(static_cast<size_t>(end - offset), kSendStep);
      n = sendfile(sock, fd, &offset, step);
      if (n == 0) {
        error = f.path + " ended at " + std::to_string(offset) + " of " +
                std::to_string(f.size) + " bytes";
        break;
      }
    } else {
      if (buf_begin == buf_end) {
        const ssize_t r =
            pread(fd, buf->data(),
                  static_cast<size_t>(std::min<int64_t>(
                      end - read_end, static_cast<int64_t>(buf->size()))),
                  read_end);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
          error = r == 0 ? f.path + " ended at " + std::to_string(read_end) +
                               " of " + std::to_string(f.size) + " bytes"
                         : "reading " + f.path + ": " + ErrnoText(errno);
          break;
        }
        read_end += r;
        buf_begin = 0;
        buf_end = static_cast<size_t>(r);
      }
      n = send(sock, buf->data() + buf_begin, buf_end - buf_begin,
               MSG_NOSIGNAL);
      if (n > 0) {
        buf_begin += static_cast<size_t>(n);
        offset += n;
      }
    }
    if (n > 0) {
      last_progress = Clock::now();
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (Clock::now() - last_progress > kSendStall) {
        error = "the receiver took nothing for " +
                std::to_string(kSendStall.count()) + " s";
      }
    } else {
      error = "sending " + f.path + ": " + ErrnoText(errno);
    }
  }
  *sent = offset - begin;
  return error;
}

// Where stream `k` of `streams` begins in the concatenated files' `total`
// bytes: a 4 KiB multiple (`total` for k == streams).
int64_t SliceStart(int64_t total, int streams, int k) {
  if (k >= streams) return total;
  const int64_t exact = total / streams * k + total % streams * k / streams;
  return exact / 4096 * 4096;
}

// The stream index that follows the token, big endian.
std::string IndexBytes(int index) {
  const auto v = static_cast<uint32_t>(index);
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
          static_cast<char>(v >> 8), static_cast<char>(v)};
}

uint32_t ParseIndex(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) |
         (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

int64_t TotalSize(const std::vector<BulkFile>& files) {
  int64_t total = 0;
  for (const BulkFile& f : files) total += std::max<int64_t>(0, f.size);
  return total;
}

// Refuses a manifest with an unsafe or repeated path or a negative size.
core::Status CheckManifest(const std::vector<BulkFile>& files) {
  std::set<std::string> seen;
  for (const BulkFile& f : files) {
    if (!SafeRelativePath(f.path)) {
      return core::InvalidArgument("the source sent a bad path '" + f.path +
                                   "'");
    }
    if (!seen.insert(f.path).second) {
      return core::InvalidArgument("the source listed " + f.path + " twice");
    }
    if (f.size < 0) {
      return core::InvalidArgument("the source gave " + f.path +
                                   " a negative size");
    }
  }
  return core::Status::Ok();
}

}  // namespace

int BulkStreamsFor(int64_t total_bytes, int requested) {
  const int asked = std::clamp(requested, 1, kBulkMaxStreams);
  const int64_t fit = std::max<int64_t>(1, total_bytes / kBulkMinStreamBytes);
  return static_cast<int>(std::min<int64_t>(asked, fit));
}

std::vector<BulkPiece> BulkSlice(const std::vector<BulkFile>& files,
                                 int streams, int index) {
  std::vector<BulkPiece> out;
  if (streams < 1 || index < 0 || index >= streams) return out;
  const int64_t total = TotalSize(files);
  const int64_t begin = SliceStart(total, streams, index);
  const int64_t end = SliceStart(total, streams, index + 1);
  int64_t start = 0;  // of file i in the concatenation
  for (size_t i = 0; i < files.size(); ++i) {
    const int64_t size = std::max<int64_t>(0, files[i].size);
    const int64_t lo = std::max(begin, start);
    const int64_t hi = std::min(end, start + size);
    if (hi > lo) out.push_back({i, lo - start, hi - lo});
    start += size;
  }
  return out;
}

bool SafeRelativePath(const std::string& path) {
  if (path.empty() || path[0] == '/') return false;
  for (const auto& part : std::filesystem::path(path)) {
    if (part == ".." || part == ".") return false;
  }
  return true;
}

bool PwriteAll(int fd, const char* data, size_t n, off_t offset) {
  while (n > 0) {
    const ssize_t w = pwrite(fd, data, n, offset);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
    offset += w;
  }
  return true;
}

// ------------------------------------------------------------ source

struct BulkServer::Transfer {
  std::string what;
  std::string token;
  int streams = 1;
  std::vector<BulkFile> files;
  std::vector<int> fds;  // the files, open; closed by Run
  int listen_fd = -1;    // closed by Run
  int wake_fd = -1;      // eventfd: Shutdown writes it
  Clock::time_point deadline;
  std::atomic<bool> stop{false};
  std::mutex conn_mu;
  std::vector<int> conn_fds;  // guarded by conn_mu: the streams being served
  std::string peer;           // guarded by conn_mu: of the first stream
  int64_t sent = 0;           // guarded by conn_mu: by all streams
  int served = 0;             // guarded by conn_mu: streams sent in full
  bool copied = false;        // guarded by conn_mu: through a buffer
  bool failed = false;        // guarded by conn_mu: a stream failed
  std::atomic<bool> done{false};
  std::thread thread;

  ~Transfer() {
    if (wake_fd >= 0) close(wake_fd);
  }
};

BulkServer::BulkServer(std::function<void(const std::string&)> log,
                       BulkSend send)
    : log_(std::move(log)), send_(send) {}

BulkServer::~BulkServer() { Shutdown(); }

int BulkServer::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& t : transfers_) n += t->done.load() ? 0 : 1;
  return n;
}

void BulkServer::ReapLocked() {
  for (auto it = transfers_.begin(); it != transfers_.end();) {
    if ((*it)->done.load()) {
      if ((*it)->thread.joinable()) (*it)->thread.join();
      it = transfers_.erase(it);
    } else {
      ++it;
    }
  }
}

void BulkServer::Shutdown() {
  std::vector<std::unique_ptr<Transfer>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    all.swap(transfers_);
  }
  for (auto& t : all) {
    t->stop = true;
    const uint64_t one = 1;
    if (write(t->wake_fd, &one, sizeof one) < 0) {
      // The flag and the connections' shutdown below still stop it.
    }
    std::lock_guard<std::mutex> lock(t->conn_mu);
    for (int fd : t->conn_fds) shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : all) {
    if (t->thread.joinable()) t->thread.join();
  }
}

core::StatusOr<BulkServer::Offered> BulkServer::Offer(
    const std::string& bind_host, const std::string& dir,
    const std::vector<std::string>& files, Clock::time_point accept_deadline,
    const std::string& what, int streams) {
  auto t = std::make_unique<Transfer>();
  t->what = what;
  t->deadline = accept_deadline;
  auto close_files = [&] {
    for (int fd : t->fds) close(fd);
    t->fds.clear();
  };
  for (const std::string& rel : files) {
    const std::string path = dir + "/" + rel;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
      const int err = errno;
      if (fd >= 0) close(fd);
      close_files();
      return core::IoError("opening " + path + ": " + ErrnoText(err));
    }
    t->fds.push_back(fd);
    t->files.push_back({rel, static_cast<int64_t>(st.st_size),
                        static_cast<uint32_t>(st.st_mode & 07777)});
  }
  t->streams = BulkStreamsFor(TotalSize(t->files), streams);
  if (!RandomBytes(kBulkTokenBytes, &t->token)) {
    close_files();
    return core::Status(core::StatusCode::kUnavailable,
                        "no random bytes for a token");
  }
  int port = 0;
  auto listen_fd = Listen(bind_host, &port);
  if (!listen_fd.ok()) {
    close_files();
    return listen_fd.status();
  }
  t->listen_fd = *listen_fd;
  t->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (t->wake_fd < 0) {
    const int err = errno;
    close(t->listen_fd);
    close_files();
    return core::Status(core::StatusCode::kUnavailable,
                        "eventfd: " + ErrnoText(err));
  }
  Offered out;
  out.port = port;
  out.token = t->token;
  out.streams = t->streams;
  out.files = t->files;
  std::lock_guard<std::mutex> lock(mu_);
  ReapLocked();
  if (stopped_) {
    close(t->listen_fd);
    close_files();
    return core::Status(core::StatusCode::kUnavailable, "shutting down");
  }
  Transfer* raw = t.get();
  t->thread = std::thread([this, raw] { Run(raw); });
  transfers_.push_back(std::move(t));
  return out;
}

void BulkServer::Run(Transfer* t) {
  // sendfile() raises SIGPIPE when the receiver is gone: this thread blocks
  // it (the error is EPIPE), whatever the embedding process does with it;
  // the stream threads it starts inherit the mask.
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);

  struct Pending {
    int fd;
    std::string got;
  };
  // The token, then the stream index when there are several.
  const size_t hello = kBulkTokenBytes + (t->streams > 1 ? kBulkIndexBytes : 0);
  std::vector<Pending> pending;
  std::vector<bool> admitted(static_cast<size_t>(t->streams), false);
  int admitted_count = 0;
  std::vector<std::thread> senders;
  Clock::time_point t0;
  // Drops connection `p` with a reason (logged).
  auto drop = [&](const Pending& p, const std::string& why) {
    log_("bulk channel for " + t->what + ": dropped a connection from " +
         PeerText(p.fd) + " " + why);
    close(p.fd);
  };
  while (admitted_count < t->streams && !t->stop.load()) {
    const int wait_ms = RemainingMs(t->deadline);
    if (wait_ms == 0) {
      if (admitted_count == 0) {
        log_("nobody fetched " + t->what + " over the bulk channel in time");
      } else {
        log_("only " + std::to_string(admitted_count) + " of " +
             std::to_string(t->streams) + " streams of " + t->what +
             " were fetched over the bulk channel in time");
      }
      break;
    }
    std::vector<pollfd> fds;
    fds.push_back({t->wake_fd, POLLIN, 0});
    fds.push_back({t->listen_fd, POLLIN, 0});
    for (const Pending& p : pending) fds.push_back({p.fd, POLLIN, 0});
    const int rc = poll(fds.data(), fds.size(), wait_ms);
    if (rc < 0 && errno != EINTR) {
      log_("bulk channel for " + t->what + ": poll: " + ErrnoText(errno));
      break;
    }
    if (rc <= 0) continue;
    if (fds[0].revents != 0) break;  // Shutdown
    // Pending connections first (fds[2..] match `pending` as it was).
    std::vector<Pending> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      if (fds[i + 2].revents == 0 || admitted_count == t->streams) {
        still.push_back(std::move(p));
        continue;
      }
      char buf[kBulkTokenBytes + kBulkIndexBytes];
      const ssize_t n = recv(p.fd, buf, hello - p.got.size(), MSG_DONTWAIT);
      if (n < 0 &&
          (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        still.push_back(std::move(p));
        continue;
      }
      if (n <= 0) {
        close(p.fd);
        continue;
      }
      p.got.append(buf, static_cast<size_t>(n));
      if (p.got.size() < hello) {
        still.push_back(std::move(p));
        continue;
      }
      if (!SameToken(p.got.substr(0, kBulkTokenBytes), t->token)) {
        drop(p, "with a wrong token");
        continue;
      }
      const uint32_t index =
          t->streams > 1 ? ParseIndex(p.got.data() + kBulkTokenBytes) : 0;
      if (index >= static_cast<uint32_t>(t->streams)) {
        drop(p, "asking for stream " + std::to_string(index) + " of " +
                    std::to_string(t->streams));
        continue;
      }
      if (admitted[index]) {
        drop(p, "asking for stream " + std::to_string(index) + " again");
        continue;
      }
      admitted[index] = true;
      ++admitted_count;
      {
        std::lock_guard<std::mutex> lock(t->conn_mu);
        if (t->stop.load() || t->failed) {
          close(p.fd);  // the transfer is over
          continue;
        }
        if (t->conn_fds.empty() && t->peer.empty()) {
          t->peer = PeerText(p.fd);
          t0 = Clock::now();
        }
        t->conn_fds.push_back(p.fd);
      }
      const int fd = p.fd;
      const int k = static_cast<int>(index);
      senders.emplace_back([this, t, fd, k] { Serve(t, fd, k); });
    }
    pending.swap(still);
    if (admitted_count == t->streams) break;
    if (fds[1].revents != 0) {
      for (;;) {
        const int fd = accept4(t->listen_fd, nullptr, nullptr,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (pending.size() >= kMaxPending) {
          // The oldest makes room: silent connections cannot lock out the
          // ones with the token.
          close(pending.front().fd);
          pending.erase(pending.begin());
        }
        pending.push_back({fd, {}});
      }
    }
  }
  close(t->listen_fd);
  t->listen_fd = -1;
  for (const Pending& p : pending) close(p.fd);

  for (std::thread& s : senders) s.join();
  if (!senders.empty()) {
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0)
            .count();
    std::lock_guard<std::mutex> lock(t->conn_mu);
    if (t->served == t->streams) {
      log_("sent " + t->what + " over the bulk channel to " + t->peer + " (" +
           std::to_string(t->files.size()) + " files, " +
           (t->streams > 1 ? std::to_string(t->streams) + " streams, " : "") +
           std::to_string(t->sent) + " bytes in " + std::to_string(us) +
           " us, " + (t->copied ? "copied" : "sendfile") + ")");
    }
  }
  for (int fd : t->fds) close(fd);
  t->fds.clear();
  t->done = true;
}

void BulkServer::Serve(Transfer* t, int fd, int index) {
  std::string error;
  if (!SetBlocking(fd)) {
    error = "fcntl: " + ErrnoText(errno);
  } else {
    SetTimeouts(fd, kSlice);
    core::Status s = SendAll(fd, kBulkAccepted, kBulkAcceptedBytes,
                             Clock::now() + kSendStall);
    if (!s.ok()) error = s.message();
  }
  const bool copy = send_ == BulkSend::kCopy ||
                    (send_ == BulkSend::kAuto && error.empty() && SameHost(fd));
  std::vector<char> buf(copy ? kCopyBytes : 0);
  int64_t total = 0;
  for (const BulkPiece& p : BulkSlice(t->files, t->streams, index)) {
    if (!error.empty()) break;
    int64_t sent = 0;
    error = SendRange(fd, t->fds[p.file], t->files[p.file], p.offset, p.length,
                      t->stop, copy ? &buf : nullptr, &sent);
    total += sent;
  }
  std::string peer;
  {
    std::lock_guard<std::mutex> lock(t->conn_mu);
    if (!error.empty()) {
      if (t->failed) {
        error = "stopped: another stream failed (" + error + ")";
      } else {
        // The destination cannot use the rest: the other streams stop now
        // rather than fill socket buffers nobody reads.
        t->failed = true;
        for (int other : t->conn_fds) {
          if (other != fd) shutdown(other, SHUT_RDWR);
        }
      }
    }
    shutdown(fd, SHUT_WR);
    t->conn_fds.erase(std::find(t->conn_fds.begin(), t->conn_fds.end(), fd));
    t->sent += total;
    if (error.empty()) ++t->served;
    t->copied = copy;
    peer = t->peer;
  }
  close(fd);
  if (!error.empty()) {
    log_("sending " + t->what + " over the bulk channel" +
         (t->streams > 1 ? " (stream " + std::to_string(index) + " of " +
                               std::to_string(t->streams) + ")"
                         : "") +
         " to " + peer + " failed after " + std::to_string(total) +
         " bytes: " + error);
  }
  // A SIGPIPE left pending by a receiver that went away: taken here.
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  const timespec zero{0, 0};
  while (sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
  }
}

// ------------------------------------------------------------ destination

core::StatusOr<int> ConnectBulk(const std::string& host_in, int port,
                                const std::string& token,
                                Clock::time_point deadline, int stream,
                                int streams) {
  const std::string host = StripBrackets(host_in);
  const std::string hello =
      streams > 1 ? token + IndexBytes(stream) : std::string(token);
  const std::string where = host_in + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc =
      getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    return core::Status(core::StatusCode::kUnavailable,
                        "resolving " + host + ": " + gai_strerror(rc));
  }
  std::string errors;
  auto note = [&](const addrinfo* ai, const std::string& e) {
    errors += (errors.empty() ? "" : "; ") +
              SockaddrText(ai->ai_addr, ai->ai_addrlen) + ": " + e;
  };
  int result = -1;
  for (addrinfo* ai = res; ai != nullptr && result < 0; ai = ai->ai_next) {
    const int fd =
        socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      note(ai, "socket: " + ErrnoText(errno));
      continue;
    }
    int err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        const auto end = std::min(deadline, Clock::now() + kConnectTimeout);
        pollfd p{fd, POLLOUT, 0};
        int n = 0;
        do {
          n = poll(&p, 1, RemainingMs(end));
        } while (n < 0 && errno == EINTR);
        socklen_t len = sizeof err;
        if (n == 0) {
          err = ETIMEDOUT;
        } else if (n < 0 ||
                   getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
          err = errno;
        }
      }
    }
    if (err != 0) {
      note(ai, "connect: " + ErrnoText(err));
      close(fd);
      continue;
    }
    if (!SetBlocking(fd)) {
      note(ai, "fcntl: " + ErrnoText(errno));
      close(fd);
      continue;
    }
    SetTimeouts(fd, kSlice);
    core::Status s = SendAll(fd, hello.data(), hello.size(), deadline);
    char accepted[kBulkAcceptedBytes];
    if (s.ok()) {
      s = RecvExactly(fd, accepted, sizeof accepted, deadline);
    }
    if (s.ok() &&
        std::memcmp(accepted, kBulkAccepted, kBulkAcceptedBytes) != 0) {
      s = core::Status(core::StatusCode::kUnavailable,
                       "not a gandiva bulk channel");
    }
    if (!s.ok()) {
      note(ai, "token not accepted (" + s.message() + ")");
      close(fd);
      continue;
    }
    result = fd;
  }
  freeaddrinfo(res);
  if (result < 0) {
    return core::Status(core::StatusCode::kUnavailable,
                        "bulk channel at " + where + ": " + errors);
  }
  return result;
}

core::Status ReceiveBulkFiles(int sock, const std::vector<BulkFile>& files,
                              const std::string& dir,
                              Clock::time_point deadline,
                              const std::atomic<bool>* cancel, int64_t* bytes) {
  core::Status checked = CheckManifest(files);
  if (!checked.ok()) return checked;
  for (const BulkFile& f : files) {
    const std::string final_path = dir + "/" + f.path;
    const std::string temp = final_path + ".gandiva-part";
    std::error_code ec;
    std::filesystem::create_directories(
        std::filesystem::path(temp).parent_path(), ec);
    if (ec) {
      return core::IoError("receiving " + final_path +
                           ": creating its directory: " + ec.message());
    }
    const int fd =
        open(temp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      return core::IoError("receiving " + final_path + ": creating " + temp +
                           ": " + ErrnoText(errno));
    }
    core::Status s = ReceiveInto(sock, fd, 0, f.size, deadline, cancel);
    if (s.ok() && fchmod(fd, f.mode & 07777) != 0) {
      s = core::IoError("chmod: " + ErrnoText(errno));
    }
    struct stat st {};
    if (s.ok() && (fstat(fd, &st) != 0 || st.st_size != f.size)) {
      s = core::IoError("it has " + std::to_string(st.st_size) +
                        " bytes, not " + std::to_string(f.size));
    }
    if (close(fd) != 0 && s.ok()) {
      s = core::IoError("close: " + ErrnoText(errno));
    }
    if (s.ok() && rename(temp.c_str(), final_path.c_str()) != 0) {
      s = core::IoError("renaming " + temp + ": " + ErrnoText(errno));
    }
    if (!s.ok()) {
      unlink(temp.c_str());
      return core::Status(s.code(), "receiving " + final_path + " (" +
                                        std::to_string(f.size) +
                                        " bytes): " + s.message());
    }
    *bytes += f.size;
  }
  return core::Status::Ok();
}

core::Status ReceiveBulkFiles(const std::vector<int>& socks,
                              const std::vector<BulkFile>& files,
                              const std::string& dir,
                              Clock::time_point deadline,
                              const std::atomic<bool>* cancel, int64_t* bytes) {
  if (socks.size() <= 1) {
    return ReceiveBulkFiles(socks.empty() ? -1 : socks[0], files, dir, deadline,
                            cancel, bytes);
  }
  core::Status checked = CheckManifest(files);
  if (!checked.ok()) return checked;
  const int streams = static_cast<int>(socks.size());
  struct Part {
    std::string final_path, temp;
    int fd = -1;
  };
  std::vector<Part> parts(files.size());
  // Closes and removes every part file (none is renamed yet).
  auto discard = [&parts] {
    for (Part& p : parts) {
      if (p.fd >= 0) {
        close(p.fd);
        unlink(p.temp.c_str());
      }
      p.fd = -1;
    }
  };
  auto failed = [&](size_t i, const std::string& why) {
    discard();
    return core::IoError("receiving " + parts[i].final_path + " (" +
                         std::to_string(files[i].size) + " bytes): " + why);
  };
  // Every part file at its final size first: the streams fill them in
  // place.
  for (size_t i = 0; i < files.size(); ++i) {
    Part& p = parts[i];
    p.final_path = dir + "/" + files[i].path;
    p.temp = p.final_path + ".gandiva-part";
    std::error_code ec;
    std::filesystem::create_directories(
        std::filesystem::path(p.temp).parent_path(), ec);
    if (ec) return failed(i, "creating its directory: " + ec.message());
    p.fd = open(p.temp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (p.fd < 0) {
      return failed(i, "creating " + p.temp + ": " + ErrnoText(errno));
    }
    if (ftruncate(p.fd, files[i].size) != 0) {
      return failed(i, "sizing " + p.temp + ": " + ErrnoText(errno));
    }
  }

  std::mutex mu;
  core::Status first = core::Status::Ok();  // guarded by mu
  std::vector<std::thread> threads;
  threads.reserve(socks.size());
  for (int k = 0; k < streams; ++k) {
    threads.emplace_back([&, k] {
      for (const BulkPiece& piece : BulkSlice(files, streams, k)) {
        core::Status s =
            ReceiveInto(socks[static_cast<size_t>(k)], parts[piece.file].fd,
                        piece.offset, piece.length, deadline, cancel);
        if (s.ok()) continue;
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) {
          first = core::Status(
              s.code(), "receiving " + parts[piece.file].final_path + " (" +
                            std::to_string(files[piece.file].size) +
                            " bytes; stream " + std::to_string(k) + " of " +
                            std::to_string(streams) + ", bytes " +
                            std::to_string(piece.offset) + " to " +
                            std::to_string(piece.offset + piece.length) +
                            "): " + s.message());
          // The others stop at once: the transfer has failed. Closing the
          // sockets then resets the connections, so that the source's
          // streams stop too, even those blocked on a full window.
          const linger reset{1, 0};
          for (int sock : socks) {
            setsockopt(sock, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
            shutdown(sock, SHUT_RDWR);
          }
        }
        return;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (!first.ok()) {
    discard();
    return first;
  }

  // Every byte is in: checked, given its mode and renamed, file by file.
  int64_t total = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    Part& p = parts[i];
    struct stat st {};
    if (fchmod(p.fd, files[i].mode & 07777) != 0) {
      return failed(i, "chmod: " + ErrnoText(errno));
    }
    if (fstat(p.fd, &st) != 0 || st.st_size != files[i].size) {
      return failed(i, "it has " + std::to_string(st.st_size) + " bytes, not " +
                           std::to_string(files[i].size));
    }
    const int fd = p.fd;
    p.fd = -1;
    if (close(fd) != 0) {
      unlink(p.temp.c_str());
      return failed(i, "close: " + ErrnoText(errno));
    }
    if (rename(p.temp.c_str(), p.final_path.c_str()) != 0) {
      const int err = errno;
      unlink(p.temp.c_str());
      return failed(i, "renaming " + p.temp + ": " + ErrnoText(err));
    }
    total += files[i].size;
  }
  *bytes += total;
  return core::Status::Ok();
}

}  // namespace gandiva::runtime
