// EtcdForTest: a one-member etcd cluster for a test or a benchmark, on free
// loopback ports with its data in a temporary directory; killed and removed
// when destroyed. Needs the `etcd` binary (Debian's etcd-server, which
// scripts/setup installs).
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/exec_env.h"
#include "runtime/scheduler/etcd_client.h"

namespace gandiva::runtime {

// A port free on 127.0.0.1 now (bound and released: another process may
// take it before the caller does, which tests on one machine accept).
inline int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

class EtcdForTest {
 public:
  // nullptr, with the reason in *error, when etcd cannot start. With `tls`
  // (PEM files, tls.h) its client port serves HTTPS and asks clients for a
  // certificate the CA signed; Client() then presents `tls`'s.
  // `extra`: more flags for etcd.
  static std::unique_ptr<EtcdForTest> Start(
      std::string* error, const TlsFiles& tls = {},
      const std::vector<std::string>& extra = {}) {
    const std::string bin = FindOnPath("etcd");
    if (bin.empty()) {
      *error = std::string() +
               "no etcd binary on $PATH: install "
               "etcd-server (scripts/setup does)";
      return nullptr;
    }
    // A port found free may be taken by another test before etcd binds it;
    // etcd then exits at once, and a try on other ports is made.
    constexpr int kTries = 5;
    std::string logs;
    for (int attempt = 1; attempt <= kTries; ++attempt) {
      std::unique_ptr<EtcdForTest> e(new EtcdForTest());
      bool exited = false;
      const std::string log = e->Launch(bin, tls, extra, error, &exited);
      if (!exited && error->empty()) return e;
      e->keep_dir_ = true;  // its log says why
      if (!exited) return nullptr;
      logs += (logs.empty() ? "" : ", ") + log;
    }
    *error = "etcd exited at start " + std::to_string(kTries) +
             " times; their logs: " + logs;
    return nullptr;
  }

  ~EtcdForTest() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    if (!keep_dir_) std::filesystem::remove_all(dir_, ec);
  }

  // Kills etcd (SIGKILL), keeping its data: an outage until Restart.
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Kills etcd if it runs, and starts it again on the same ports and data
  // (its keys and leases kept). False, with the reason in *error, when it
  // does not serve again.
  bool Restart(std::string* error) {
    Kill();
    bool exited = false;
    Run(error, &exited);
    if (exited && error->empty()) *error = "etcd exited at its restart";
    return error->empty();
  }

  // HOST:PORT of its client URL.
  const std::string& endpoint() const { return endpoint_; }

  // A client with short deadlines (and the TLS files it was started with).
  std::shared_ptr<EtcdClient> Client() const {
    return *EtcdClient::Create(endpoint_, *LoadTls(tls_, "--etcd-tls-"),
                               std::chrono::seconds(1));
  }

 private:
  EtcdForTest() = default;
  static int& Counter() {
    static int n = 0;
    return n;
  }

  // Starts etcd on two new ports and waits until it serves. Returns its
  // log's path; *exited when it exited at start, else *error is "" when it
  // serves.
  std::string Launch(const std::string& bin, const TlsFiles& tls,
                     const std::vector<std::string>& extra, std::string* error,
                     bool* exited) {
    tls_ = tls;
    dir_ = std::filesystem::temp_directory_path() /
           ("gandiva-etcd-" + std::to_string(::getpid()) + "-" +
            std::to_string(Counter()++));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    int client = FreeLoopbackPort(), peer = FreeLoopbackPort();
    while (peer == client) peer = FreeLoopbackPort();
    endpoint_ = "127.0.0.1:" + std::to_string(client);
    client_url_ = (tls.empty() ? "http://" : "https://") + endpoint_;
    peer_url_ = "http://127.0.0.1:" + std::to_string(peer);
    bin_ = bin;
    extra_ = extra;
    return Run(error, exited);
  }

  // Runs etcd on the ports and data directory chosen, and waits until it
  // serves (see Launch).
  std::string Run(std::string* error, bool* exited) {
    const std::string& c = client_url_;
    const std::string& p = peer_url_;
    const std::string log = (dir_ / "etcd.log").string();
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(log.c_str(), "a", stderr);
      (void)f;
      (void)std::freopen("/dev/null", "w", stdout);
      const std::string data = (dir_ / "data").string();
      std::vector<std::string> args = {
          bin_,     "--name",
          "t",      "--data-dir",
          data,     "--listen-client-urls",
          c,        "--advertise-client-urls",
          c,        "--listen-peer-urls",
          p,        "--initial-advertise-peer-urls",
          p,        "--initial-cluster",
          "t=" + p, "--log-level",
          "warn",   "--logger",
          "zap"};
      args.insert(args.end(), extra_.begin(), extra_.end());
      if (!tls_.empty()) {
        args.insert(args.end(),
                    {"--cert-file", tls_.cert, "--key-file", tls_.key,
                     "--trusted-ca-file", tls_.ca, "--client-cert-auth"});
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(bin_.c_str(), argv.data());
      ::_exit(127);
    }
    *error = "";
    *exited = false;
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      // A new client each time: a connection made while etcd starts may
      // never be served.
      etcdserverpb::RangeRequest r;
      r.set_key("ready");
      if (Client()->Range(r).ok()) return log;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        *exited = true;
        return log;
      }
    }
    *error = std::string() + "etcd did not serve within 30 s; its log: " + log;
    return log;
  }

  std::filesystem::path dir_;
  std::string endpoint_;
  std::string client_url_, peer_url_, bin_;
  std::vector<std::string> extra_;
  TlsFiles tls_;
  pid_t pid_ = -1;
  bool keep_dir_ = false;
};

}  // namespace gandiva::runtime
