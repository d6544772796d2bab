// How the CLI finds the scheduler daemon and the local cluster's state, and
// how it turns a failed call into a message a user can act on.
//
// The daemon's address comes from, in order: --scheduler HOST:PORT, then
// $GANDIVA_SCHEDULER (either may list several, comma-separated: a leader
// and its standbys, of which the CLI uses the first it reaches), then the local
// cluster's state directory (what `gandiva up` recorded), then
// kDefaultSchedulerAddress (only when no state directory was named by
// --state-dir or $GANDIVA_STATE_DIR). The state directory is --state-dir, else
// $GANDIVA_STATE_DIR, else ~/.gandiva
// (./.gandiva when HOME is not set).
//
// Each call carries a credential (credentials.h) when one is found: the
// file of --credentials, else $GANDIVA_CREDENTIALS, else, only when the
// address is the local cluster's, its admin credential (admin.cred in the
// state directory) if this user can read it. A daemon without users
// ignores it.
//
// Plain functions; the stubs they return are gRPC's (thread-safe).
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "proto/gandiva.grpc.pb.h"
#include "runtime/auth/credentials.h"
#include "runtime/tls/tls.h"

namespace gandiva::cli {

// Where the daemon listens when started without --listen.
inline constexpr const char* kDefaultSchedulerAddress = "127.0.0.1:7070";

// Options every cluster subcommand takes.
struct ConnectionFlags {
  std::string scheduler;    // empty: resolve as above
  std::string state_dir;    // empty: resolve as above
  std::string credentials;  // empty: resolve as above
};

// Adds --scheduler, --state-dir and --credentials to a subcommand.
void AddConnectionFlags(CLI::App* sub, ConnectionFlags* flags);

// The state directory to use (see above); absolute.
std::string ResolveStateDir(const std::string& flag);

// Where the address came from, for messages.
struct SchedulerAddress {
  std::string address;  // empty: the named state dir records no cluster
  bool from_local_cluster = false;  // the state dir or the default
  std::string state_dir;            // set when from_local_cluster
};
// Also sets the credential Context() attaches (see above); a credential
// file named but unreadable or malformed prints the reason and exits with
// status 2.
SchedulerAddress ResolveScheduler(const ConnectionFlags& flags);

// Calls carry the local cluster's admin credential (`state_dir`/admin.cred)
// when this user can read it: for `gandiva up` and `down`, which manage the
// local cluster.
void UseLocalAdminCredential(const std::string& state_dir);

// Mutual TLS from $GANDIVA_TLS_CA, $GANDIVA_TLS_CERT, $GANDIVA_TLS_KEY (and
// $GANDIVA_TLS_NAME), read once; nullopt when none is set. Bad settings
// print the reason and exit with status 2.
const std::optional<runtime::TlsConfig>& ClientTls();

// How long the CLI waits for one of several daemons to lead (a standby
// taking over after the leader died, or through an etcd restart).
inline constexpr std::chrono::milliseconds kLeaderWait{15000};

// Stubs over channels with ClientTls(). Of several comma-separated
// addresses (a leader and its standbys, of which only the leader listens),
// the first that accepts a connection; while none does, tried again until
// `leader_wait` has passed, then the first.
std::unique_ptr<rpc::Scheduler::Stub> ConnectScheduler(
    const std::string& address,
    std::chrono::milliseconds leader_wait = kLeaderWait);
std::unique_ptr<rpc::Agent::Stub> ConnectAgent(const std::string& address);

// A client context with a deadline `timeout` from now, carrying the
// credential ResolveScheduler found.
std::unique_ptr<grpc::ClientContext> Context(
    std::chrono::milliseconds timeout = std::chrono::seconds(15));

// "no scheduler at 127.0.0.1:7070: is the local cluster up? run `gandiva up`"
// for an unreachable daemon; otherwise the daemon's own message (with its
// code when it is not a plain INVALID_ARGUMENT / NOT_FOUND).
std::string DescribeRpcError(const grpc::Status& status,
                             const SchedulerAddress& where);

// One subcommand's connection to the daemon, and its error reporting.
class SchedulerSession {
 public:
  // No address (no cluster recorded): a channel that fails at once, so that
  // every call reports it through DescribeRpcError.
  SchedulerSession(std::string command, const ConnectionFlags& flags)
      : command_(std::move(command)),
        where_(ResolveScheduler(flags)),
        stub_(ConnectScheduler(where_.address.empty() ? "unix:/nonexistent"
                                                      : where_.address)) {}

  rpc::Scheduler::Stub& stub() { return *stub_; }
  const SchedulerAddress& where() const { return where_; }

  // Prints "gandiva <command>: <message>" on stderr; returns 1.
  int Fail(const std::string& message) const {
    std::fprintf(stderr, "gandiva %s: %s\n", command_.c_str(), message.c_str());
    return 1;
  }
  int Fail(const grpc::Status& status) const {
    return Fail(DescribeRpcError(status, where_));
  }

 private:
  std::string command_;
  SchedulerAddress where_;
  std::unique_ptr<rpc::Scheduler::Stub> stub_;
};

// The directory holding the running `gandiva` binary (/proc/self/exe's).
std::string SelfDirectory();

}  // namespace gandiva::cli
