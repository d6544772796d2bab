// The bulk data channel for checkpoint files between agents, beside gRPC:
// plain TCP, one connection per transfer, the files' bytes back to back with
// sendfile() at the source.
//
// Source: BulkServer::Offer opens the files, listens on an ephemeral port of
// the given host and returns the port, a single-use random token and the
// manifest (path, size, mode of each file); a thread of its own then waits
// for connections until the accept deadline, drops every connection whose
// first 32 bytes are not the token, and sends the files to the one that
// presents it: kBulkAccepted, then each file's bytes in manifest order, with
// sendfile() (the ramdisk's pages go out without a copy) to another host,
// through a buffer to this host (see BulkSend).
//
// Destination: ConnectBulk (connect, send the token, wait for kBulkAccepted),
// then ReceiveBulkFiles (each file into <path>.gandiva-part, renamed once
// complete and checked), spliced socket -> pipe -> file: the bytes are
// copied once, into the file's pages. (On a ramdisk this beat receiving
// into an mmap of the file, which pays a page fault per page, and a recv()
// buffer plus write(), which copies twice.)
//
// Thread-safety: BulkServer's methods may be called from any thread; the
// free functions are thread-compatible.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace gandiva::runtime {

inline constexpr size_t kBulkTokenBytes = 32;
// The source's answer to the right token, before the files' bytes.
inline constexpr char kBulkAccepted[] = "GNDVBLK1";
inline constexpr size_t kBulkAcceptedBytes = sizeof kBulkAccepted - 1;

// One file of a transfer: its path relative to the checkpoint directory.
struct BulkFile {
  std::string path;
  int64_t size = 0;
  uint32_t mode = 0600;
};

// A relative path that stays inside its directory (no "..", ".", or
// leading '/').
bool SafeRelativePath(const std::string& path);

// How the source puts the files' bytes into the socket.
enum class BulkSend {
  // sendfile() to another host; pread() + send() through a 1 MiB buffer to
  // this host. Over loopback the receiver copies straight out of the
  // sender's socket buffers: fresh ones from a copy (in cache) beat the cold
  // ramdisk pages that sendfile() hands over (measured 15-40% faster into a
  // ramdisk file).
  kAuto,
  kSendfile,
  kCopy,
};

class BulkServer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit BulkServer(std::function<void(const std::string&)> log,
                      BulkSend send = BulkSend::kAuto);
  // Shutdown().
  ~BulkServer();
  BulkServer(const BulkServer&) = delete;
  BulkServer& operator=(const BulkServer&) = delete;

  struct Offered {
    int port = 0;
    std::string token;  // kBulkTokenBytes random bytes
    std::vector<BulkFile> files;
  };
  // Opens `files` (relative to `dir`) now: what is sent is what they hold,
  // even if they are deleted meanwhile. Listens on `bind_host` (a name, an
  // IPv4 address or a bracketed IPv6 one; empty, "0.0.0.0", "::", "[::]" or
  // "*": all interfaces) and serves the first connection with the token
  // until `accept_deadline`; `what` names the transfer in log messages.
  // Errors: a file that cannot be opened (kIo, naming it), no socket or no
  // randomness (kUnavailable), after Shutdown (kUnavailable).
  core::StatusOr<Offered> Offer(const std::string& bind_host,
                                const std::string& dir,
                                const std::vector<std::string>& files,
                                Clock::time_point accept_deadline,
                                const std::string& what);

  // Closes every listener, aborts every transfer under way and joins their
  // threads; later Offers fail. Idempotent.
  void Shutdown();

  // Transfers whose thread has not finished (listening or sending).
  int active() const;

 private:
  struct Transfer;
  void Run(Transfer* t);
  void ReapLocked();  // mu_ held: joins finished transfers

  const std::function<void(const std::string&)> log_;
  const BulkSend send_;
  mutable std::mutex mu_;
  bool stopped_ = false;                              // guarded by mu_
  std::vector<std::unique_ptr<Transfer>> transfers_;  // guarded by mu_
};

// Connects to host:port (`host` as in an address: a name, an IPv4 address
// or a bracketed IPv6 one), sends the token and waits for kBulkAccepted.
// Returns the socket, from which the files' bytes follow. Errors
// (kUnavailable): no address, refused, the token not accepted (the
// connection closed), the deadline passed.
core::StatusOr<int> ConnectBulk(const std::string& host, int port,
                                const std::string& token,
                                std::chrono::steady_clock::time_point deadline);

// Receives `files` from `fd` (after ConnectBulk) into `dir`: each as
// <dir>/<path>.gandiva-part (directories made as needed), filled with
// exactly `size` bytes, given `mode`, checked, then renamed to <dir>/<path>;
// a file that fails is removed, so none is ever visible incomplete under its
// final name. Stops with an error at `deadline` or when *cancel becomes true.
// Adds the bytes of each completed file to *bytes. Errors name the file:
// an unsafe or repeated path (kInvalidArgument), the connection ended or
// failed (kUnavailable), a local write (kIo). Does not close `fd`.
core::Status ReceiveBulkFiles(int fd, const std::vector<BulkFile>& files,
                              const std::string& dir,
                              std::chrono::steady_clock::time_point deadline,
                              const std::atomic<bool>* cancel, int64_t* bytes);

}  // namespace gandiva::runtime
