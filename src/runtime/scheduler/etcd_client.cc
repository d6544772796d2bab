#include "runtime/scheduler/etcd_client.h"

#include <algorithm>
#include <sstream>
#include <utility>

namespace gandiva::runtime {

namespace ep = etcdserverpb;

core::StatusOr<std::shared_ptr<EtcdClient>> EtcdClient::Create(
    const std::string& endpoints, const std::optional<TlsConfig>& tls,
    std::chrono::milliseconds timeout, const std::string& flag) {
  std::shared_ptr<EtcdClient> c(new EtcdClient());
  c->timeout_ = timeout;
  std::stringstream in(endpoints);
  std::string one;
  while (std::getline(in, one, ',')) {
    const size_t colon = one.rfind(':');
    if (one.empty() || colon == std::string::npos || colon == 0 ||
        colon + 1 == one.size() ||
        one.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
      return core::InvalidArgument(
          flag + ": expected HOST:PORT[,HOST:PORT...], got '" + endpoints +
          "'");
    }
    c->endpoints_.push_back(one);
  }
  if (c->endpoints_.empty()) {
    return core::InvalidArgument(flag + ": no endpoint given");
  }
  c->tls_ = tls;
  for (const std::string& a : c->endpoints_) {
    c->stubs_.push_back(c->Connect(a));
  }
  return c;
}

std::shared_ptr<EtcdClient::Endpoint> EtcdClient::Connect(
    const std::string& address) const {
  // Reconnect soon after a member comes back (gRPC's default backoff
  // grows to two minutes). The minimum is also how long a connection
  // attempt may take: etcd answers a new connection within a second.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Connections of its own: gRPC would share one between the channels to
  // an address, the stalled one too.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // A snapshot's chunks come two to a response.
  args.SetMaxReceiveMessageSize(16 << 20);
  auto e = std::make_shared<Endpoint>();
  e->channel = MakeChannel(address, tls_, args);
  e->kv = ep::KV::NewStub(e->channel);
  e->lease = ep::Lease::NewStub(e->channel);
  e->made = std::chrono::steady_clock::now();
  return e;
}

template <typename F>
core::Status EtcdClient::Call(const char* what, F&& f,
                              std::chrono::milliseconds budget) {
  const auto end = budget == std::chrono::milliseconds::max()
                       ? std::chrono::system_clock::time_point::max()
                       : std::chrono::system_clock::now() + budget;
  size_t at;
  {
    std::lock_guard lock(mu_);
    at = current_;
  }
  std::string errors;
  for (size_t tried = 0; tried < endpoints_.size(); ++tried) {
    const size_t i = (at + tried) % endpoints_.size();
    std::shared_ptr<Endpoint> e;
    {
      std::lock_guard lock(mu_);
      e = stubs_[i];
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(
        std::min(end, std::chrono::system_clock::now() + timeout_));
    const grpc::Status s = f(*e, &ctx);
    if (s.ok()) {
      std::lock_guard lock(mu_);
      current_ = i;
      return core::Status::Ok();
    }
    const std::string err =
        "etcd " + std::string(what) + " at " + endpoints_[i] + ": " +
        s.error_message() + " (code " +
        std::to_string(static_cast<int>(s.error_code())) + ")";
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
        s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return core::IoError(err);
    }
    errors += (errors.empty() ? "" : "; ") + err;
    std::lock_guard lock(mu_);
    if (stubs_[i] == e &&
        std::chrono::steady_clock::now() - e->made > std::chrono::seconds(1)) {
      stubs_[i] = Connect(endpoints_[i]);
    }
  }
  return core::Status(core::StatusCode::kUnavailable, errors);
}

core::StatusOr<ep::RangeResponse> EtcdClient::Range(
    const ep::RangeRequest& req) {
  ep::RangeResponse rep;
  GANDIVA_RETURN_IF_ERROR(
      Call("Range", [&](Endpoint& e, grpc::ClientContext* ctx) {
        return e.kv->Range(ctx, req, &rep);
      }));
  return rep;
}

core::StatusOr<ep::PutResponse> EtcdClient::Put(const ep::PutRequest& req) {
  ep::PutResponse rep;
  GANDIVA_RETURN_IF_ERROR(
      Call("Put", [&](Endpoint& e, grpc::ClientContext* ctx) {
        return e.kv->Put(ctx, req, &rep);
      }));
  return rep;
}

core::StatusOr<ep::DeleteRangeResponse> EtcdClient::DeleteRange(
    const ep::DeleteRangeRequest& req) {
  ep::DeleteRangeResponse rep;
  GANDIVA_RETURN_IF_ERROR(
      Call("DeleteRange", [&](Endpoint& e, grpc::ClientContext* ctx) {
        return e.kv->DeleteRange(ctx, req, &rep);
      }));
  return rep;
}

core::StatusOr<ep::TxnResponse> EtcdClient::Txn(const ep::TxnRequest& req) {
  ep::TxnResponse rep;
  GANDIVA_RETURN_IF_ERROR(
      Call("Txn", [&](Endpoint& e, grpc::ClientContext* ctx) {
        return e.kv->Txn(ctx, req, &rep);
      }));
  return rep;
}

core::Status EtcdClient::Compact(int64_t revision) {
  ep::CompactionRequest req;
  req.set_revision(revision);
  ep::CompactionResponse rep;
  return Call("Compact", [&](Endpoint& e, grpc::ClientContext* ctx) {
    return e.kv->Compact(ctx, req, &rep);
  });
}

core::StatusOr<int64_t> EtcdClient::LeaseGrant(int64_t ttl_s) {
  ep::LeaseGrantRequest req;
  req.set_ttl(ttl_s);
  ep::LeaseGrantResponse rep;
  GANDIVA_RETURN_IF_ERROR(
      Call("LeaseGrant", [&](Endpoint& e, grpc::ClientContext* ctx) {
        return e.lease->LeaseGrant(ctx, req, &rep);
      }));
  if (!rep.error().empty()) {
    return core::IoError("etcd LeaseGrant: " + rep.error());
  }
  return rep.id();
}

core::Status EtcdClient::LeaseRevoke(int64_t id) {
  ep::LeaseRevokeRequest req;
  req.set_id(id);
  ep::LeaseRevokeResponse rep;
  return Call("LeaseRevoke", [&](Endpoint& e, grpc::ClientContext* ctx) {
    return e.lease->LeaseRevoke(ctx, req, &rep);
  });
}

core::StatusOr<int64_t> EtcdClient::LeaseKeepAlive(
    int64_t id, std::chrono::milliseconds timeout) {
  ep::LeaseKeepAliveResponse rep;
  GANDIVA_RETURN_IF_ERROR(Call(
      "LeaseKeepAlive",
      [&](Endpoint& e, grpc::ClientContext* ctx) {
        // One request and its answer on a stream of its own: a renewal is
        // due only every few seconds.
        auto stream = e.lease->LeaseKeepAlive(ctx);
        ep::LeaseKeepAliveRequest req;
        req.set_id(id);
        if (!stream->Write(req) || !stream->WritesDone() ||
            !stream->Read(&rep)) {
          grpc::Status s = stream->Finish();
          if (s.ok()) {
            s = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                             "the keep-alive stream ended without an answer");
          }
          return s;
        }
        ctx->TryCancel();  // the stream would stay open for more
        (void)stream->Finish();
        return grpc::Status::OK;
      },
      timeout));
  return rep.ttl();
}

std::string EtcdClient::PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

}  // namespace gandiva::runtime
