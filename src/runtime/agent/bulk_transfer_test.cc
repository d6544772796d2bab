// The bulk TCP channel for checkpoints between agents (bulk_transfer.h and
// the Agent service's OpenCheckpointTransfer / ReceiveCheckpoint): files
// arrive byte-identical with their modes, a wrong token is dropped while the
// right one is served, the gRPC stream takes over where the channel is off,
// a source that goes away mid-transfer leaves no file under its final name,
// bad paths are refused, and listeners close at their deadline and at
// shutdown; several parallel streams carry the same bytes, admit each
// stream index once, and fail whole when one stream fails, while one stream
// still speaks the original single-connection protocol; and BulkServer
// alone with each way of sending (sendfile, copy).
#include "runtime/agent/bulk_transfer.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/agent/agent_server.h"
#include "runtime/agent/supervisor.h"
#include "runtime/agent/test_util.h"

namespace gandiva::runtime {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::UniqueName;
using testing::WaitUntil;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Bytes that differ from file to file and from place to place.
std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 gen(seed);
  for (size_t i = 0; i < n; i += 4) {
    const uint32_t v = gen();
    for (size_t k = 0; k < 4 && i + k < n; ++k) {
      s[i + k] = static_cast<char>(v >> (8 * k));
    }
  }
  return s;
}

void WriteFile(const std::string& path, const std::string& data, mode_t mode) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary).write(data.data(), data.size());
  ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

// Paths under `dir`, relative, that end with ".gandiva-part".
std::vector<std::string> PartFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().string().ends_with(".gandiva-part")) {
      out.push_back(fs::relative(it->path(), dir).string());
    }
  }
  return out;
}

// A plain TCP connection to 127.0.0.1:port; -1 when refused.
int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads until EOF or an error (bounded by a receive timeout); the bytes.
std::string ReadToEnd(int fd) {
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

struct File {
  std::string data;
  mode_t mode;
};

// Several files, a nested directory, an empty file, executable and
// private modes, and one much larger than any buffer or pipe used.
std::map<std::string, File> SampleCheckpoint() {
  return {
      {"model.bin", {Pattern((40 << 20) + 123, 1), 0644}},
      {"optim/state.bin", {Pattern(3 << 20, 2), 0640}},
      {"optim/deep/er/meta.json", {"{\"step\": 17}\n", 0600}},
      {"empty", {"", 0644}},
      {"run.sh", {"#!/bin/sh\necho ok\n", 0755}},
  };
}

// Odd sizes for several streams: an empty file, one of fewer bytes than
// streams, and one much larger than the streams times any buffer, with
// slice boundaries falling inside files.
std::map<std::string, File> OddCheckpoint() {
  return {
      {"big.bin", {Pattern((37 << 20) + 4097 * 3 + 5, 11), 0644}},
      {"empty", {"", 0600}},
      {"tiny", {"ab", 0640}},
      {"mid/state.bin", {Pattern((5 << 20) + 333, 12), 0600}},
      {"mid/odd", {Pattern((1 << 20) + 1, 13), 0755}},
  };
}

int64_t TotalBytes(const std::map<std::string, File>& files) {
  int64_t n = 0;
  for (const auto& [rel, f] : files) n += static_cast<int64_t>(f.data.size());
  return n;
}

void ExpectSame(const std::map<std::string, File>& files,
                const std::string& dir) {
  for (const auto& [rel, f] : files) {
    const std::string path = dir + "/" + rel;
    ASSERT_TRUE(fs::exists(path)) << path;
    EXPECT_EQ(fs::file_size(path), f.data.size()) << path;
    EXPECT_TRUE(testing::ReadFile(path) == f.data) << path << " differs";
    EXPECT_EQ(ModeOf(path), f.mode) << path;
  }
  EXPECT_TRUE(PartFiles(dir).empty());
}

struct TestAgent {
  std::unique_ptr<AgentServer> server;
  std::unique_ptr<rpc::Agent::Stub> stub;
};

class BulkTransferTest : public ::testing::Test {
 protected:
  static TestAgent StartAgent(
      const TempDir& dir, bool bulk,
      std::chrono::milliseconds accept_timeout = 15000ms,
      const std::string& listen = "127.0.0.1:0", int streams = 1) {
    AgentOptions o;
    o.listen_address = listen;
    o.name = UniqueName("bulk");
    o.virtual_gpus = 2;
    o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
    o.work_dir = dir.path();
    o.checkpoint_root = dir.path() + "/ckpt";
    o.receive_timeout = 20s;
    o.bulk_transfer = bulk;
    o.bulk_accept_timeout = accept_timeout;
    o.bulk_streams = streams;
    o.log = [](std::string_view) {};
    auto a = AgentServer::Start(o);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    if (!a.ok()) return {};
    TestAgent t;
    t.server = std::move(*a);
    t.stub = rpc::Agent::NewStub(grpc::CreateChannel(
        t.server->address(), grpc::InsecureChannelCredentials()));
    return t;
  }

  // Files (relative path -> content, mode) held by `a` as job's checkpoint.
  // Files (relative path -> content, mode) held by `a` as job's checkpoint.
  static void Hold(AgentServer& a, int64_t job,
                   const std::map<std::string, File>& files) {
    const std::string dir = a.supervisor().CheckpointDir(job);
    for (const auto& [rel, f] : files)
      WriteFile(dir + "/" + rel, f.data, f.mode);
    a.supervisor().HoldCheckpoint(job, dir);
  }

  static grpc::Status Receive(rpc::Agent::Stub* stub, int64_t job,
                              const std::string& source,
                              rpc::ReceiveCheckpointReply* out) {
    rpc::ReceiveCheckpointRequest req;
    req.set_job_id(job);
    req.set_action_id(0);
    req.set_source_address(source);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 60s);
    return stub->ReceiveCheckpoint(&ctx, req, out);
  }

  // Holds `files` as the job's checkpoint at `from`, has `to` pull it, and
  // expects it whole over `channel`, byte-identical in `to`'s incoming dir.
  // The reply goes to *out when given.
  static void MoveAndExpect(const TestAgent& from, const TestAgent& to,
                            int64_t job,
                            const std::map<std::string, File>& files,
                            const std::string& channel,
                            rpc::ReceiveCheckpointReply* out = nullptr) {
    Hold(*from.server, job, files);
    rpc::ReceiveCheckpointReply r;
    grpc::Status s = Receive(to.stub.get(), job, from.server->address(), &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(r.channel(), channel);
    EXPECT_EQ(r.bytes(), TotalBytes(files));
    ExpectSame(files, to.server->supervisor().IncomingDir(job));
    if (out != nullptr) *out = r;
  }

  static grpc::Status Open(rpc::Agent::Stub* stub, int64_t job,
                           rpc::OpenCheckpointTransferReply* out) {
    rpc::OpenCheckpointTransferRequest req;
    req.set_job_id(job);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    return stub->OpenCheckpointTransfer(&ctx, req, out);
  }

  static std::vector<BulkFile> Manifest(
      const rpc::OpenCheckpointTransferReply& r) {
    std::vector<BulkFile> out;
    for (const auto& f : r.files())
      out.push_back({f.path(), f.size(), f.mode()});
    return out;
  }

  TempDir dir_a_, dir_b_, scratch_;
};

TEST_F(BulkTransferTest, FilesArriveByteIdenticalOverTheBulkChannel) {
  TestAgent a = StartAgent(dir_a_, true);
  TestAgent b = StartAgent(dir_b_, true);
  ASSERT_TRUE(a.server && b.server);
  const auto files = SampleCheckpoint();
  rpc::ReceiveCheckpointReply r;
  ASSERT_NO_FATAL_FAILURE(MoveAndExpect(a, b, 5, files, "tcp", &r));
  EXPECT_GT(r.transfer_us(), 0);
  const std::string incoming = b.server->supervisor().IncomingDir(5);
  EXPECT_EQ(b.server->supervisor().HeldCheckpoint(5), incoming);
  // The source's channel is done with: nothing of it stays behind.
  std::printf("[ bulk ] %lld bytes in %lld us\n",
              static_cast<long long>(r.bytes()),
              static_cast<long long>(r.transfer_us()));
}

TEST_F(BulkTransferTest, ASourceListeningOnIpv6LoopbackIsReachable) {
  const int probe = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 a6{};
  a6.sin6_family = AF_INET6;
  a6.sin6_addr = in6addr_loopback;
  const bool v6 = probe >= 0 &&
                  bind(probe, reinterpret_cast<sockaddr*>(&a6), sizeof a6) == 0;
  if (probe >= 0) close(probe);
  if (!v6) GTEST_SKIP() << "no IPv6 loopback here";
  TestAgent a = StartAgent(dir_a_, true, 15000ms, "[::1]:0");
  TestAgent b = StartAgent(dir_b_, true);
  ASSERT_TRUE(a.server && b.server);
  ASSERT_EQ(a.server->address().rfind("[::1]:", 0), 0u) << a.server->address();
  const std::map<std::string, File> files = {
      {"a", {Pattern(5 << 20, 3), 0644}}};
  MoveAndExpect(a, b, 1, files, "tcp");
}

TEST_F(BulkTransferTest, AWrongTokenIsDroppedAndTheRightOneStillGetsTheFiles) {
  TestAgent a = StartAgent(dir_a_, true);
  ASSERT_TRUE(a.server);
  const auto files = SampleCheckpoint();
  Hold(*a.server, 2, files);
  rpc::OpenCheckpointTransferReply offer;
  grpc::Status s = Open(a.stub.get(), 2, &offer);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(offer.token().size(), kBulkTokenBytes);
  // Asked for no streams (as an older destination): one, the original
  // protocol.
  EXPECT_EQ(offer.streams(), 1);
  ASSERT_EQ(offer.files_size(), static_cast<int>(files.size()));
  for (const auto& f : offer.files()) {
    ASSERT_TRUE(files.contains(f.path())) << f.path();
    EXPECT_EQ(f.size(), static_cast<int64_t>(files.at(f.path()).data.size()));
    EXPECT_EQ(f.mode(), files.at(f.path()).mode) << f.path();
  }

  // Connections that say nothing must not hold up the others, not even
  // more of them than the source keeps waiting.
  std::vector<int> silent;
  for (int i = 0; i < 70; ++i) {
    silent.push_back(ConnectLoopback(offer.port()));
    ASSERT_GE(silent.back(), 0);
  }
  // The wrong token (one bit off): closed without a byte.
  std::string wrong = offer.token();
  wrong[7] = static_cast<char>(wrong[7] ^ 1);
  const int bad = ConnectLoopback(offer.port());
  ASSERT_GE(bad, 0);
  ASSERT_EQ(send(bad, wrong.data(), wrong.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(wrong.size()));
  EXPECT_EQ(ReadToEnd(bad).size(), 0u);
  close(bad);
  // ConnectBulk with a wrong token says so.
  auto refused =
      ConnectBulk("127.0.0.1", offer.port(), wrong, Clock::now() + 10s);
  EXPECT_FALSE(refused.ok());

  // The right token: every byte, in manifest order.
  auto fd =
      ConnectBulk("127.0.0.1", offer.port(), offer.token(), Clock::now() + 10s);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  int64_t bytes = 0;
  core::Status r = ReceiveBulkFiles(*fd, Manifest(offer), scratch_.path(),
                                    Clock::now() + 30s, nullptr, &bytes);
  close(*fd);
  ASSERT_TRUE(r.ok()) << r.ToString();
  EXPECT_EQ(bytes, TotalBytes(files));
  ExpectSame(files, scratch_.path());
  // The silent ones were let go, at the latest once the files went out.
  for (int quiet : silent) {
    EXPECT_EQ(ReadToEnd(quiet).size(), 0u);
    close(quiet);
  }

  // Single use: the token does not open it again.
  auto again =
      ConnectBulk("127.0.0.1", offer.port(), offer.token(), Clock::now() + 5s);
  EXPECT_FALSE(again.ok());
}

TEST_F(BulkTransferTest, WithBulkTransferOffTheGrpcStreamCarriesIt) {
  TestAgent a = StartAgent(dir_a_, true);
  TestAgent b = StartAgent(dir_b_, /*bulk=*/false);
  ASSERT_TRUE(a.server && b.server);
  const auto files = SampleCheckpoint();
  ASSERT_NO_FATAL_FAILURE(MoveAndExpect(a, b, 3, files, "grpc"));
  // An agent with it off offers none.
  rpc::OpenCheckpointTransferReply offer;
  EXPECT_EQ(Open(b.stub.get(), 3, &offer).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(BulkTransferTest, ASourceWithoutTheChannelFallsBackToTheGrpcStream) {
  // As an older agent: OpenCheckpointTransfer answers UNIMPLEMENTED.
  TestAgent a = StartAgent(dir_a_, /*bulk=*/false);
  TestAgent b = StartAgent(dir_b_, true);
  ASSERT_TRUE(a.server && b.server);
  const auto files = SampleCheckpoint();
  ASSERT_NO_FATAL_FAILURE(MoveAndExpect(a, b, 4, files, "grpc"));
  // No checkpoint at the source: an error, not a fallback that hides it.
  rpc::ReceiveCheckpointReply r;
  grpc::Status s = Receive(b.stub.get(), 99, a.server->address(), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  TestAgent c = StartAgent(scratch_, true);
  ASSERT_TRUE(c.server);
  s = Receive(b.stub.get(), 99, c.server->address(), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
}

// A source that offers a bulk channel and then does what the test says.
class FakeSource final : public rpc::Agent::Service {
 public:
  FakeSource() {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                       &port_);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        listen(listen_fd_, 4) == 0 &&
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      data_port_ = ntohs(a.sin_port);
    }
  }
  ~FakeSource() override {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now());
      server_->Wait();
    }
    if (sender_.joinable()) sender_.join();
    close(listen_fd_);
  }
  bool ok() const { return server_ && port_ > 0 && data_port_ > 0; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  std::vector<BulkFile> manifest;
  std::string to_send;  // after kBulkAccepted; the connection then closes

  grpc::Status OpenCheckpointTransfer(
      grpc::ServerContext*, const rpc::OpenCheckpointTransferRequest*,
      rpc::OpenCheckpointTransferReply* reply) override {
    const std::string token(kBulkTokenBytes, 'k');
    reply->set_port(data_port_);
    reply->set_token(token);
    for (const BulkFile& f : manifest) {
      auto* out = reply->add_files();
      out->set_path(f.path);
      out->set_size(f.size);
      out->set_mode(f.mode);
    }
    sender_ = std::thread([this, token] {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      std::string got(kBulkTokenBytes, '\0');
      if (recv(fd, got.data(), got.size(), MSG_WAITALL) ==
              static_cast<ssize_t>(got.size()) &&
          got == token) {
        const std::string out = kBulkAccepted + to_send;
        send(fd, out.data(), out.size(), MSG_NOSIGNAL);
      }
      close(fd);  // gone, whatever was left to send
    });
    return grpc::Status::OK;
  }

 private:
  int port_ = 0;
  int data_port_ = 0;
  int listen_fd_ = -1;
  std::unique_ptr<grpc::Server> server_;
  std::thread sender_;
};

TEST_F(BulkTransferTest, ParallelStreamsCarryTheFilesByteIdentical) {
  TestAgent a = StartAgent(dir_a_, true);
  ASSERT_TRUE(a.server);
  const auto files = OddCheckpoint();
  for (int streams : {2, 4}) {
    SCOPED_TRACE(streams);
    TempDir dir;
    TestAgent b = StartAgent(dir, true, 15000ms, "127.0.0.1:0", streams);
    ASSERT_TRUE(b.server);
    const int64_t job = 20 + streams;
    ASSERT_NO_FATAL_FAILURE(
        MoveAndExpect(a, b, job, files, "tcp x" + std::to_string(streams)));
  }
  // A small checkpoint goes over one stream whatever is asked for.
  TempDir dir;
  TestAgent b = StartAgent(dir, true, 15000ms, "127.0.0.1:0", 4);
  ASSERT_TRUE(b.server);
  const std::map<std::string, File> small = {
      {"s", {Pattern(5 << 20, 14), 0644}}};
  MoveAndExpect(a, b, 30, small, "tcp");
}

TEST(BulkSliceTest, TheSlicesCoverEveryByteOnceInOrder) {
  const std::vector<std::vector<int64_t>> cases = {
      {0},
      {1},
      {3, 0, 2},
      {(37 << 20) + 5, 0, 2, (5 << 20) + 333},
      {4096, 4096, 4096},
      {(64 << 20) + 1}};
  for (const auto& sizes : cases) {
    std::vector<BulkFile> files;
    for (size_t i = 0; i < sizes.size(); ++i) {
      files.push_back({"f" + std::to_string(i), sizes[i], 0644});
    }
    for (int streams = 1; streams <= kBulkMaxStreams; ++streams) {
      size_t file = 0;
      int64_t at = 0;  // the next byte expected, in `file`
      for (int k = 0; k < streams; ++k) {
        for (const BulkPiece& p : BulkSlice(files, streams, k)) {
          while (file < files.size() && at == files[file].size) {
            ++file;
            at = 0;
          }
          ASSERT_EQ(p.file, file) << "stream " << k << " of " << streams;
          ASSERT_EQ(p.offset, at) << "stream " << k << " of " << streams;
          ASSERT_GT(p.length, 0);
          at += p.length;
          ASSERT_LE(at, files[file].size);
        }
      }
      while (file < files.size() && at == files[file].size) {
        ++file;
        at = 0;
      }
      EXPECT_EQ(file, files.size()) << streams << " streams";
    }
  }
  EXPECT_EQ(BulkStreamsFor(100 << 20, 0), 1);  // an older destination
  EXPECT_EQ(BulkStreamsFor(100 << 20, 4), 4);
  EXPECT_EQ(BulkStreamsFor(100 << 20, 64), kBulkMaxStreams);
  EXPECT_EQ(BulkStreamsFor(kBulkMinStreamBytes * 2, 4), 2);
  EXPECT_EQ(BulkStreamsFor(kBulkMinStreamBytes - 1, 4), 1);
}

TEST_F(BulkTransferTest, TheSourceGoingAwayMidFileLeavesNoFileUnderItsName) {
  FakeSource source;
  ASSERT_TRUE(source.ok());
  const std::string first = Pattern(1 << 20, 4);
  const std::string second = Pattern(4 << 20, 5);
  source.manifest = {{"first", static_cast<int64_t>(first.size()), 0644},
                     {"dir/second", static_cast<int64_t>(second.size()), 0644},
                     {"third", 10, 0644}};
  source.to_send = first + second.substr(0, second.size() / 2);
  TestAgent b = StartAgent(dir_b_, true);
  ASSERT_TRUE(b.server);
  rpc::ReceiveCheckpointReply r;
  grpc::Status s = Receive(b.stub.get(), 6, source.address(), &r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("dir/second"), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("closed the connection after 2097152 of "
                                   "4194304 bytes"),
            std::string::npos)
      << s.error_message();
  const std::string incoming = b.server->supervisor().IncomingDir(6);
  // The complete file may stay; the cut one is nowhere, not even partial.
  EXPECT_TRUE(testing::ReadFile(incoming + "/first") == first);
  EXPECT_FALSE(fs::exists(incoming + "/dir/second"));
  EXPECT_FALSE(fs::exists(incoming + "/third"));
  EXPECT_TRUE(PartFiles(incoming).empty());
  EXPECT_EQ(b.server->supervisor().HeldCheckpoint(6), "");
}

TEST_F(BulkTransferTest, AnOlderSourceThatGrantsNoStreamsServesOneConnection) {
  FakeSource source;  // leaves OpenCheckpointTransferReply.streams out
  ASSERT_TRUE(source.ok());
  const std::string first = Pattern(9 << 20, 15);
  const std::string second = Pattern(7 << 20, 16);
  source.manifest = {{"first", static_cast<int64_t>(first.size()), 0644},
                     {"second", static_cast<int64_t>(second.size()), 0600}};
  source.to_send = first + second;
  TempDir dir;
  TestAgent b = StartAgent(dir, true, 15000ms, "127.0.0.1:0", 4);
  ASSERT_TRUE(b.server);
  rpc::ReceiveCheckpointReply r;
  grpc::Status s = Receive(b.stub.get(), 10, source.address(), &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(r.channel(), "tcp");
  ExpectSame({{"first", {first, 0644}}, {"second", {second, 0600}}},
             b.server->supervisor().IncomingDir(10));
}

TEST_F(BulkTransferTest, UnsafePathsFromTheSourceAreRefused) {
  FakeSource source;
  ASSERT_TRUE(source.ok());
  source.manifest = {{"ok", 2, 0644}, {"../escape", 2, 0644}};
  source.to_send = "okno";
  TestAgent b = StartAgent(dir_b_, true);
  ASSERT_TRUE(b.server);
  rpc::ReceiveCheckpointReply r;
  grpc::Status s = Receive(b.stub.get(), 7, source.address(), &r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error_message().find("'../escape'"), std::string::npos)
      << s.error_message();
  const std::string incoming = b.server->supervisor().IncomingDir(7);
  EXPECT_FALSE(fs::exists(fs::path(incoming).parent_path() / "escape"));
  EXPECT_FALSE(fs::exists(incoming + "/ok"));  // refused before any byte

  // The same checks, without a network.
  for (const std::vector<BulkFile>& bad :
       {std::vector<BulkFile>{{"/abs", 1, 0644}},
        std::vector<BulkFile>{{"a/./b", 1, 0644}},
        std::vector<BulkFile>{{"", 1, 0644}},
        std::vector<BulkFile>{{"a/../../b", 1, 0644}},
        std::vector<BulkFile>{{"x", 1, 0644}, {"x", 1, 0644}},
        std::vector<BulkFile>{{"x", -1, 0644}}}) {
    int64_t bytes = 0;
    core::Status st = ReceiveBulkFiles(-1, bad, scratch_.path(),
                                       Clock::now() + 1s, nullptr, &bytes);
    EXPECT_EQ(st.code(), core::StatusCode::kInvalidArgument)
        << bad[0].path << ": " << st.ToString();
  }
  EXPECT_TRUE(fs::is_empty(scratch_.path()));
}

TEST_F(BulkTransferTest, AnUnusedChannelClosesAtItsDeadline) {
  TestAgent a = StartAgent(dir_a_, true, /*accept_timeout=*/300ms);
  ASSERT_TRUE(a.server);
  Hold(*a.server, 8, {{"x", {Pattern(1000, 6), 0644}}});
  rpc::OpenCheckpointTransferReply offer;
  ASSERT_TRUE(Open(a.stub.get(), 8, &offer).ok());
  // Listening now; refused once the deadline has passed.
  const int early = ConnectLoopback(offer.port());
  EXPECT_GE(early, 0);
  ASSERT_TRUE(WaitUntil([&] {
    const int fd = ConnectLoopback(offer.port());
    if (fd >= 0) close(fd);
    return fd < 0;
  }));
  // The early connection (no token) was closed too.
  EXPECT_EQ(ReadToEnd(early).size(), 0u);
  close(early);
}

TEST_F(BulkTransferTest, ShutdownAbortsATransferUnderWay) {
  TestAgent a = StartAgent(dir_a_, true);
  ASSERT_TRUE(a.server);
  // Far more than the socket buffers hold: the sender blocks mid-file.
  const std::string big = Pattern(96 << 20, 7);
  Hold(*a.server, 9, {{"big", {big, 0644}}});
  rpc::OpenCheckpointTransferReply offer;
  ASSERT_TRUE(Open(a.stub.get(), 9, &offer).ok());
  auto fd =
      ConnectBulk("127.0.0.1", offer.port(), offer.token(), Clock::now() + 10s);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  char one = 0;
  ASSERT_EQ(recv(*fd, &one, 1, MSG_WAITALL), 1);
  EXPECT_EQ(one, big[0]);
  a.server->Shutdown();  // returns: the sender's thread is joined
  const std::string rest = ReadToEnd(*fd);
  close(*fd);
  EXPECT_LT(rest.size() + 1, big.size());
  const int after = ConnectLoopback(offer.port());
  EXPECT_LT(after, 0);
  if (after >= 0) close(after);
}

// BulkServer alone, with each way of sending.
class BulkServerTest : public ::testing::TestWithParam<BulkSend> {
 protected:
  void SetUp() override {
    server_ = std::make_unique<BulkServer>(
        [this](const std::string& m) {
          std::lock_guard<std::mutex> lock(mu_);
          log_ += m + "\n";
        },
        GetParam());
  }
  std::string log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  static std::vector<std::string> Names(
      const std::map<std::string, File>& files) {
    std::vector<std::string> out;
    for (const auto& [rel, f] : files) out.push_back(rel);
    return out;
  }
  // OddCheckpoint(), written into src_.
  std::map<std::string, File> WriteOddCheckpoint() {
    auto files = OddCheckpoint();
    for (const auto& [rel, f] : files) {
      WriteFile(src_.path() + "/" + rel, f.data, f.mode);
    }
    return files;
  }

  TempDir src_, dst_;
  std::mutex mu_;
  std::string log_;
  std::unique_ptr<BulkServer> server_;
};

TEST_P(BulkServerTest, CarriesTheFilesByteIdentical) {
  const auto files = SampleCheckpoint();
  for (const auto& [rel, f] : files) {
    WriteFile(src_.path() + "/" + rel, f.data, f.mode);
  }
  auto offer = server_->Offer("127.0.0.1", src_.path(), Names(files),
                              Clock::now() + 20s, "the sample");
  ASSERT_TRUE(offer.ok()) << offer.status().ToString();
  EXPECT_EQ(server_->active(), 1);
  auto fd =
      ConnectBulk("127.0.0.1", offer->port, offer->token, Clock::now() + 10s);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  int64_t bytes = 0;
  core::Status r = ReceiveBulkFiles(*fd, offer->files, dst_.path(),
                                    Clock::now() + 30s, nullptr, &bytes);
  close(*fd);
  ASSERT_TRUE(r.ok()) << r.ToString();
  EXPECT_EQ(bytes, TotalBytes(files));
  ExpectSame(files, dst_.path());
  ASSERT_TRUE(WaitUntil([&] { return server_->active() == 0; }));
  // Over loopback the automatic choice copies.
  const char* how = GetParam() == BulkSend::kSendfile ? "sendfile" : "copied";
  EXPECT_NE(log().find(std::string(" us, ") + how + ")"), std::string::npos)
      << log();
}

TEST_P(BulkServerTest, AFileCutShortAfterTheOfferEndsTheTransfer) {
  const std::string data = Pattern(3 << 20, 8);
  WriteFile(src_.path() + "/a", data, 0644);
  auto offer = server_->Offer("127.0.0.1", src_.path(), {"a"},
                              Clock::now() + 20s, "the file");
  ASSERT_TRUE(offer.ok()) << offer.status().ToString();
  ASSERT_EQ(truncate((src_.path() + "/a").c_str(), 1 << 20), 0);
  auto fd =
      ConnectBulk("127.0.0.1", offer->port, offer->token, Clock::now() + 10s);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  int64_t bytes = 0;
  core::Status r = ReceiveBulkFiles(*fd, offer->files, dst_.path(),
                                    Clock::now() + 30s, nullptr, &bytes);
  close(*fd);
  EXPECT_EQ(r.code(), core::StatusCode::kUnavailable) << r.ToString();
  EXPECT_NE(r.message().find("after 1048576 of 3145728 bytes"),
            std::string::npos)
      << r.message();
  EXPECT_FALSE(fs::exists(dst_.path() + "/a"));
  EXPECT_TRUE(PartFiles(dst_.path()).empty());
  ASSERT_TRUE(WaitUntil([&] { return server_->active() == 0; }));
  EXPECT_NE(log().find("a ended at 1048576 of 3145728 bytes"),
            std::string::npos)
      << log();
}

TEST_P(BulkServerTest, SeveralStreamsCarryTheFilesByteIdentical) {
  const auto files = WriteOddCheckpoint();
  for (int streams : {2, 4}) {
    SCOPED_TRACE(streams);
    TempDir dst;
    auto offer = server_->Offer("127.0.0.1", src_.path(), Names(files),
                                Clock::now() + 20s, "the odd ones", streams);
    ASSERT_TRUE(offer.ok()) << offer.status().ToString();
    ASSERT_EQ(offer->streams, streams);
    std::vector<int> socks(static_cast<size_t>(streams), -1);
    // Out of order: each stream carries its own slice whenever it comes.
    for (int k = streams - 1; k >= 0; --k) {
      auto fd = ConnectBulk("127.0.0.1", offer->port, offer->token,
                            Clock::now() + 10s, k, streams);
      ASSERT_TRUE(fd.ok()) << fd.status().ToString();
      socks[static_cast<size_t>(k)] = *fd;
    }
    int64_t bytes = 0;
    core::Status r = ReceiveBulkFiles(socks, offer->files, dst.path(),
                                      Clock::now() + 30s, nullptr, &bytes);
    for (int fd : socks) close(fd);
    ASSERT_TRUE(r.ok()) << r.ToString();
    EXPECT_EQ(bytes, TotalBytes(files));
    ExpectSame(files, dst.path());
    ASSERT_TRUE(WaitUntil([&] { return server_->active() == 0; }));
    EXPECT_NE(log().find(std::to_string(streams) + " streams, " +
                         std::to_string(TotalBytes(files)) + " bytes in "),
              std::string::npos)
        << log();
  }
}

TEST_P(BulkServerTest, AStreamIndexTwiceOrOutOfRangeIsDropped) {
  const auto files = WriteOddCheckpoint();
  auto offer = server_->Offer("127.0.0.1", src_.path(), Names(files),
                              Clock::now() + 20s, "the odd ones", 4);
  ASSERT_TRUE(offer.ok()) << offer.status().ToString();
  ASSERT_EQ(offer->streams, 4);
  // The token with index bytes: closed without a byte unless admitted.
  auto raw = [&](uint32_t index) {
    const int fd = ConnectLoopback(offer->port);
    EXPECT_GE(fd, 0);
    std::string hello = offer->token;
    for (int shift : {24, 16, 8, 0}) {
      hello.push_back(static_cast<char>(index >> shift));
    }
    EXPECT_EQ(send(fd, hello.data(), hello.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(hello.size()));
    return fd;
  };
  for (uint32_t bad : {4u, 0xffffffffu}) {
    const int fd = raw(bad);
    EXPECT_EQ(ReadToEnd(fd).size(), 0u) << bad;
    close(fd);
  }
  std::vector<int> socks;
  auto first = ConnectBulk("127.0.0.1", offer->port, offer->token,
                           Clock::now() + 10s, 0, 4);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  socks.push_back(*first);
  const int again = raw(0);
  EXPECT_EQ(ReadToEnd(again).size(), 0u);
  close(again);
  for (int k = 1; k < 4; ++k) {
    auto fd = ConnectBulk("127.0.0.1", offer->port, offer->token,
                          Clock::now() + 10s, k, 4);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    socks.push_back(*fd);
  }
  int64_t bytes = 0;
  core::Status r = ReceiveBulkFiles(socks, offer->files, dst_.path(),
                                    Clock::now() + 30s, nullptr, &bytes);
  for (int fd : socks) close(fd);
  ASSERT_TRUE(r.ok()) << r.ToString();
  ExpectSame(files, dst_.path());
  EXPECT_NE(log().find("asking for stream 4 of 4"), std::string::npos) << log();
  EXPECT_NE(log().find("asking for stream 4294967295 of 4"), std::string::npos)
      << log();
  EXPECT_NE(log().find("asking for stream 0 again"), std::string::npos)
      << log();
}

TEST_P(BulkServerTest, AStreamDyingMidRangeFailsTheWholeTransfer) {
  const auto files = WriteOddCheckpoint();
  auto offer = server_->Offer("127.0.0.1", src_.path(), Names(files),
                              Clock::now() + 20s, "the odd ones", 4);
  ASSERT_TRUE(offer.ok()) << offer.status().ToString();
  ASSERT_EQ(offer->streams, 4);
  // big.bin comes first and spans streams 0 to 3: cut 2 MiB short, only
  // the last stream (connected last) ends early, mid-range, while the others
  // may have carried their slices in full.
  const std::string big = src_.path() + "/big.bin";
  ASSERT_EQ(
      truncate(big.c_str(), static_cast<off_t>(fs::file_size(big) - (2 << 20))),
      0);
  std::vector<int> socks;
  for (int k = 0; k < 4; ++k) {
    auto fd = ConnectBulk("127.0.0.1", offer->port, offer->token,
                          Clock::now() + 10s, k, 4);
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    socks.push_back(*fd);
  }
  int64_t bytes = 0;
  core::Status r = ReceiveBulkFiles(socks, offer->files, dst_.path(),
                                    Clock::now() + 30s, nullptr, &bytes);
  for (int fd : socks) close(fd);
  EXPECT_EQ(r.code(), core::StatusCode::kUnavailable) << r.ToString();
  EXPECT_NE(r.message().find("receiving " + dst_.path() + "/big.bin"),
            std::string::npos)
      << r.message();
  EXPECT_NE(r.message().find(" of 4, bytes "), std::string::npos)
      << r.message();
  EXPECT_NE(r.message().find("the source closed the connection"),
            std::string::npos)
      << r.message();
  EXPECT_EQ(bytes, 0);
  // Nothing under a final name, not even the files no stream failed on,
  // and no part file.
  for (const auto& [rel, f] : files) {
    EXPECT_FALSE(fs::exists(dst_.path() + "/" + rel)) << rel;
  }
  EXPECT_TRUE(PartFiles(dst_.path()).empty());
  ASSERT_TRUE(WaitUntil([&] { return server_->active() == 0; })) << log();
  EXPECT_NE(log().find("big.bin ended at"), std::string::npos) << log();
}

TEST_P(BulkServerTest, AMissingFileIsRefusedAtTheOffer) {
  auto offer = server_->Offer("127.0.0.1", src_.path(), {"nope"},
                              Clock::now() + 20s, "the file");
  EXPECT_EQ(offer.status().code(), core::StatusCode::kIo);
  EXPECT_NE(offer.status().message().find("/nope"), std::string::npos);
  EXPECT_EQ(server_->active(), 0);
}

INSTANTIATE_TEST_SUITE_P(Send, BulkServerTest,
                         ::testing::Values(BulkSend::kAuto, BulkSend::kSendfile,
                                           BulkSend::kCopy),
                         [](const ::testing::TestParamInfo<BulkSend>& p) {
                           return p.param == BulkSend::kAuto
                                      ? std::string("Auto")
                                  : p.param == BulkSend::kSendfile
                                      ? std::string("Sendfile")
                                      : std::string("Copy");
                         });

}  // namespace
}  // namespace gandiva::runtime
