// EtcdClient: the calls gandiva-scheduler makes to an etcd v3 cluster
// (proto/etcd/rpc.proto), over gRPC, with mutual TLS when configured.
//
// An etcd cluster has several members and any of them serves a request
// (forwarding writes to its raft leader). The client holds one channel per
// endpoint given and sends each call to the current one; a call that finds
// it unreachable (UNAVAILABLE) is tried on the next, until each was tried
// once. Every call has a deadline (`timeout`). An endpoint found
// unreachable gets a new channel (at most once a second): a connection
// made while etcd starts can stay unserved long after etcd serves.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "proto/etcd/rpc.grpc.pb.h"
#include "runtime/tls/tls.h"

namespace gandiva::runtime {

class EtcdClient {
 public:
  // `endpoints`: "HOST:PORT[,HOST:PORT...]" (InvalidArgument naming
  // `flag` when malformed). Connects lazily: an unreachable cluster shows
  // at the first call.
  static core::StatusOr<std::shared_ptr<EtcdClient>> Create(
      const std::string& endpoints, const std::optional<TlsConfig>& tls,
      std::chrono::milliseconds timeout = std::chrono::seconds(5),
      const std::string& flag = "--etcd");

  core::StatusOr<etcdserverpb::RangeResponse> Range(
      const etcdserverpb::RangeRequest& req);
  core::StatusOr<etcdserverpb::PutResponse> Put(
      const etcdserverpb::PutRequest& req);
  core::StatusOr<etcdserverpb::DeleteRangeResponse> DeleteRange(
      const etcdserverpb::DeleteRangeRequest& req);
  core::StatusOr<etcdserverpb::TxnResponse> Txn(
      const etcdserverpb::TxnRequest& req);
  // Discards the history before `revision` (etcd keeps every version of
  // every key until compacted).
  core::Status Compact(int64_t revision);

  // A lease of `ttl_s` seconds; returns its id.
  core::StatusOr<int64_t> LeaseGrant(int64_t ttl_s);
  core::Status LeaseRevoke(int64_t id);
  // Renews the lease once; returns its remaining TTL in seconds (0: it is
  // gone, expired or revoked). `timeout` (if shorter) bounds the call and
  // its tries of other endpoints together.
  core::StatusOr<int64_t> LeaseKeepAlive(
      int64_t id,
      std::chrono::milliseconds timeout = std::chrono::milliseconds::max());

  const std::vector<std::string>& endpoints() const { return endpoints_; }

  // The key just after every key starting with `prefix` (a range_end).
  static std::string PrefixEnd(const std::string& prefix);

 private:
  struct Endpoint {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::chrono::steady_clock::time_point made;
  };
  EtcdClient() = default;
  std::shared_ptr<Endpoint> Connect(const std::string& address) const;
  // Calls `f(endpoint, ctx)` on the current endpoint, then the next ones
  // while they are unavailable; each try has `timeout_` and all of them
  // `budget` at most.
  template <typename F>
  core::Status Call(
      const char* what, F&& f,
      std::chrono::milliseconds budget = std::chrono::milliseconds::max());

  std::vector<std::string> endpoints_;
  std::optional<TlsConfig> tls_;
  std::chrono::milliseconds timeout_{};
  std::mutex mu_;
  // One per endpoint, replaced by a new connection when unreachable.
  std::vector<std::shared_ptr<Endpoint>> stubs_;  // guarded by mu_
  size_t current_ = 0;                            // guarded by mu_
};

}  // namespace gandiva::runtime
