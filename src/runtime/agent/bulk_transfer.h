// The bulk data channel for checkpoint files between agents, beside gRPC:
// plain TCP, one or several connections per transfer, the files' bytes back
// to back with sendfile() at the source.
//
// Source: BulkServer::Offer opens the files, listens on an ephemeral port of
// the given host and returns the port, a single-use random token, the
// number of streams granted (see BulkStreamsFor) and the manifest (path,
// size, mode of each file); a thread of its own then waits for connections
// until the accept deadline, drops every connection whose first bytes are
// not the token (and, with several streams, a valid stream index not
// admitted yet), and sends to each admitted connection kBulkAccepted, then
// its slice of the files' bytes (BulkSlice), with sendfile() (the ramdisk's
// pages go out without a copy) to another host, through a buffer to this
// host (see BulkSend). Each stream is served by a thread of its own as soon
// as it is admitted; one that fails stops the others (shut down), since the
// destination cannot use the rest.
//
// Wire, per connection: destination -> the 32 token bytes, followed, when
// more than one stream was granted, by the stream index (4 bytes, big
// endian, 0 <= index < streams); source -> the 8 bytes "GNDVBLK1", then the
// stream's slice. With one stream this is the original single-connection
// protocol: the token alone, then every file in manifest order.
//
// Slices: the files' bytes in manifest order, concatenated, cut into
// `streams` contiguous ranges at multiples of 4 KiB; each stream carries its
// range, file piece by file piece, in order.
//
// Destination: ConnectBulk (connect, send the token and the index, wait for
// kBulkAccepted) once per stream, then ReceiveBulkFiles. One stream: each
// file into <path>.gandiva-part, renamed once complete and checked. Several:
// every <path>.gandiva-part is created at its final size first (ftruncate:
// on tmpfs, fallocate up front measured no faster), each stream's thread
// puts its pieces at their offsets, and only once all have finished and
// every size checks are the modes set and the files renamed; any stream
// failing fails the whole transfer, resets the other connections and
// removes every part file.
// Either way the bytes are spliced socket -> pipe -> file: copied once,
// into the file's pages. (On a ramdisk this beat receiving into an mmap of
// the file, which pays a page fault per page, and a recv() buffer plus
// write(), which copies twice.) Several streams help on a ramdisk because
// filling fresh pages, not the network, bounds one stream there: each
// stream's thread fills its own (a 288 MiB checkpoint over loopback: about
// 20% faster with two streams than with one; four, no faster than two, with
// two cores).
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
// With several streams, the index that follows the token.
inline constexpr size_t kBulkIndexBytes = 4;
// The most streams a source grants to one transfer.
inline constexpr int kBulkMaxStreams = 8;
// A source grants no more streams than give each at least this many bytes
// (a smaller checkpoint goes over one).
inline constexpr int64_t kBulkMinStreamBytes = int64_t{4} << 20;

// One file of a transfer: its path relative to the checkpoint directory.
struct BulkFile {
  std::string path;
  int64_t size = 0;
  uint32_t mode = 0600;
};

// The streams granted for `total_bytes` when `requested` are asked for
// (0 or less: an older destination, which asks for none): 1 to
// kBulkMaxStreams, each with at least kBulkMinStreamBytes (or 1 stream).
int BulkStreamsFor(int64_t total_bytes, int requested);

// A contiguous part of one file that a stream carries.
struct BulkPiece {
  size_t file = 0;  // index in the manifest
  int64_t offset = 0;
  int64_t length = 0;  // > 0
};
// The pieces stream `index` of `streams` carries, in the order sent (see
// the header comment). Source and destination compute it alike from the
// manifest.
std::vector<BulkPiece> BulkSlice(const std::vector<BulkFile>& files,
                                 int streams, int index);

// A relative path that stays inside its directory (no "..", ".", or
// leading '/').
bool SafeRelativePath(const std::string& path);

// Writes all `n` bytes at `offset` of `fd` (retrying short writes and
// EINTR); false with errno set when a write fails.
bool PwriteAll(int fd, const char* data, size_t n, off_t offset);

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
    int streams = 1;    // granted: BulkStreamsFor(the files' bytes, asked)
    std::vector<BulkFile> files;
  };
  // Opens `files` (relative to `dir`) now: what is sent is what they hold,
  // even if they are deleted meanwhile. Listens on `bind_host` (a name, an
  // IPv4 address or a bracketed IPv6 one; empty, "0.0.0.0", "::", "[::]" or
  // "*": all interfaces) and serves the first connection with the token (the
  // first with the token and each stream index, when several `streams` are
  // asked for and granted) until `accept_deadline`; `what` names the
  // transfer in log messages.
  // Errors: a file that cannot be opened (kIo, naming it), no socket or no
  // randomness (kUnavailable), after Shutdown (kUnavailable).
  core::StatusOr<Offered> Offer(const std::string& bind_host,
                                const std::string& dir,
                                const std::vector<std::string>& files,
                                Clock::time_point accept_deadline,
                                const std::string& what, int streams = 1);

  // Closes every listener, aborts every transfer under way and joins their
  // threads; later Offers fail. Idempotent.
  void Shutdown();

  // Transfers whose thread has not finished (listening or sending).
  int active() const;

 private:
  struct Transfer;
  void Run(Transfer* t);
  // Sends stream `index`'s slice to the admitted connection `fd`.
  void Serve(Transfer* t, int fd, int index);
  void ReapLocked();  // mu_ held: joins finished transfers

  const std::function<void(const std::string&)> log_;
  const BulkSend send_;
  mutable std::mutex mu_;
  bool stopped_ = false;                              // guarded by mu_
  std::vector<std::unique_ptr<Transfer>> transfers_;  // guarded by mu_
};

// Connects to host:port (`host` as in an address: a name, an IPv4 address
// or a bracketed IPv6 one), sends the token (and `stream`, when `streams` >
// 1) and waits for kBulkAccepted.
// Returns the socket, from which the files' bytes follow. Errors
// (kUnavailable): no address, refused, the token not accepted (the
// connection closed), the deadline passed.
core::StatusOr<int> ConnectBulk(const std::string& host, int port,
                                const std::string& token,
                                std::chrono::steady_clock::time_point deadline,
                                int stream = 0, int streams = 1);

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

// The same over several streams: `socks[i]` (after ConnectBulk with stream
// i of socks.size()) carries BulkSlice(files, socks.size(), i). Every part
// file is created at its final size, the streams are received in parallel,
// one thread each, and the files are checked, given their modes and renamed
// only once every stream has finished; when any fails, the others are shut
// down and every part file is removed, and the error names the file and the
// stream. One socket: as above. Does not close the sockets (shuts them down
// on failure).
core::Status ReceiveBulkFiles(const std::vector<int>& socks,
                              const std::vector<BulkFile>& files,
                              const std::string& dir,
                              std::chrono::steady_clock::time_point deadline,
                              const std::atomic<bool>* cancel, int64_t* bytes);

}  // namespace gandiva::runtime
