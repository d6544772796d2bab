#include "cli/scheduler_client.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/local_cluster.h"

namespace gandiva::cli {

namespace fs = std::filesystem;

namespace {

std::string Trim(std::string s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return Trim(line);
}

// The credential calls carry (ResolveScheduler sets it).
std::optional<runtime::Credential>& CallCredential() {
  static std::optional<runtime::Credential> credential;
  return credential;
}

void UseCredential(const ConnectionFlags& flags, const SchedulerAddress& at) {
  std::string path = flags.credentials;
  if (path.empty()) {
    if (const char* env = std::getenv("GANDIVA_CREDENTIALS"); env && *env) {
      path = env;
    }
  }
  if (path.empty()) {
    // The local cluster's admin credential, only to the local cluster.
    const std::string local = at.state_dir + "/admin.cred";
    if (!at.from_local_cluster || ::access(local.c_str(), R_OK) != 0) return;
    path = local;
  }
  auto c = runtime::ReadCredential(path);
  if (!c.ok()) {
    std::fprintf(stderr, "gandiva: --credentials: %s\n",
                 c.status().message().c_str());
    std::exit(2);
  }
  CallCredential() = std::move(*c);
}

}  // namespace

void AddConnectionFlags(CLI::App* sub, ConnectionFlags* flags) {
  sub->add_option("--scheduler", flags->scheduler,
                  "The daemon's HOST:PORT; several, comma-separated, for a "
                  "leader and its standbys (while none leads, it waits up "
                  "to 15 s for one) (default: $GANDIVA_SCHEDULER, "
                  "else the local cluster's, else " +
                      std::string(kDefaultSchedulerAddress) + ")");
  sub->add_option("--state-dir", flags->state_dir,
                  "The local cluster's state directory (default: "
                  "$GANDIVA_STATE_DIR, else ~/.gandiva)");
  sub->add_option("--credentials", flags->credentials,
                  "Act as the user of this credential file (default: "
                  "$GANDIVA_CREDENTIALS, else the local cluster's admin "
                  "credential when this user can read it)");
}

std::string ResolveStateDir(const std::string& flag) {
  std::string dir = flag;
  if (dir.empty()) {
    if (const char* env = std::getenv("GANDIVA_STATE_DIR"); env && *env) {
      dir = env;
    }
  }
  if (dir.empty()) {
    const char* home = std::getenv("HOME");
    dir = (home != nullptr && *home) ? std::string(home) + "/.gandiva"
                                     : std::string(".gandiva");
  }
  std::error_code ec;
  fs::path abs = fs::absolute(dir, ec);
  return ec ? dir : abs.lexically_normal().string();
}

namespace {

SchedulerAddress FindScheduler(const ConnectionFlags& flags) {
  if (!flags.scheduler.empty()) return {flags.scheduler, false, ""};
  if (const char* env = std::getenv("GANDIVA_SCHEDULER"); env && *env) {
    return {env, false, ""};
  }
  const std::string state = ResolveStateDir(flags.state_dir);
  if (auto record = ReadClusterRecord(state)) {
    if (const ClusterProcess* s = record->scheduler()) {
      return {s->name, true, state};
    }
  }
  if (std::string addr = ReadFirstLine(state + "/scheduler.addr");
      !addr.empty()) {
    return {addr, true, state};
  }
  const char* env_dir = std::getenv("GANDIVA_STATE_DIR");
  if (!flags.state_dir.empty() || (env_dir != nullptr && *env_dir)) {
    return {"", true, state};
  }
  return {kDefaultSchedulerAddress, true, state};
}

}  // namespace

SchedulerAddress ResolveScheduler(const ConnectionFlags& flags) {
  SchedulerAddress at = FindScheduler(flags);
  UseCredential(flags, at);
  return at;
}

void UseLocalAdminCredential(const std::string& state_dir) {
  const std::string path = state_dir + "/admin.cred";
  if (::access(path.c_str(), R_OK) != 0) return;
  if (auto c = runtime::ReadCredential(path); c.ok()) {
    CallCredential() = std::move(*c);
  }
}

const std::optional<runtime::TlsConfig>& ClientTls() {
  static const std::optional<runtime::TlsConfig> tls = [] {
    auto t = runtime::LoadTls(runtime::TlsFilesFromEnv(), "$GANDIVA_TLS_");
    if (!t.ok()) {
      std::fprintf(stderr, "gandiva: %s\n", t.status().message().c_str());
      std::exit(2);
    }
    return *t;
  }();
  return tls;
}

std::unique_ptr<rpc::Scheduler::Stub> ConnectScheduler(
    const std::string& address, std::chrono::milliseconds leader_wait) {
  std::vector<std::string> list;
  std::stringstream in(address);
  for (std::string one; std::getline(in, one, ',');) {
    if (!one.empty()) list.push_back(one);
  }
  if (list.size() <= 1) {
    return rpc::Scheduler::NewStub(
        runtime::MakeChannel(list.empty() ? address : list[0], ClientTls()));
  }
  // A leader and its standbys: only the leader listens. While none does,
  // one is taking over: tried again, a while.
  const auto give_up = std::chrono::steady_clock::now() + leader_wait;
  for (;;) {
    for (const std::string& one : list) {
      auto channel = runtime::MakeChannel(one, ClientTls());
      const auto deadline =
          std::chrono::system_clock::now() + std::chrono::seconds(3);
      grpc_connectivity_state st = channel->GetState(/*try_to_connect=*/true);
      while (st != GRPC_CHANNEL_READY && st != GRPC_CHANNEL_TRANSIENT_FAILURE &&
             st != GRPC_CHANNEL_SHUTDOWN &&
             channel->WaitForStateChange(st, deadline)) {
        st = channel->GetState(true);
      }
      if (st == GRPC_CHANNEL_READY) return rpc::Scheduler::NewStub(channel);
    }
    if (std::chrono::steady_clock::now() >= give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return rpc::Scheduler::NewStub(runtime::MakeChannel(list[0], ClientTls()));
}

std::unique_ptr<rpc::Agent::Stub> ConnectAgent(const std::string& address) {
  return rpc::Agent::NewStub(runtime::MakeChannel(address, ClientTls()));
}

std::unique_ptr<grpc::ClientContext> Context(
    std::chrono::milliseconds timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  if (CallCredential()) runtime::AttachCredential(*CallCredential(), ctx.get());
  return ctx;
}

std::string DescribeRpcError(const grpc::Status& status,
                             const SchedulerAddress& where) {
  if (where.address.empty()) {
    return "no local cluster in " + where.state_dir +
           ": is the local cluster up? run `gandiva up`";
  }
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      if (where.from_local_cluster) {
        return "no scheduler at " + where.address +
               ": is the local cluster up? run `gandiva up`";
      }
      return "no scheduler at " + where.address + " (" +
             status.error_message() + ")";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "the scheduler at " + where.address + " did not answer in time (" +
             status.error_message() + ")";
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::FAILED_PRECONDITION:
      return status.error_message();
    case grpc::StatusCode::PERMISSION_DENIED:
      return "refused: " + status.error_message();
    case grpc::StatusCode::UNAUTHENTICATED:
      return "not authenticated by the scheduler at " + where.address + ": " +
             status.error_message();
    case grpc::StatusCode::UNIMPLEMENTED:
      return "the scheduler at " + where.address +
             " does not implement this call (" + status.error_message() + ")";
    default:
      return "scheduler error " + std::to_string(status.error_code()) + ": " +
             status.error_message();
  }
}

std::string SelfDirectory() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

}  // namespace gandiva::cli
