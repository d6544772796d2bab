#include "runtime/scheduler/identify.h"

#include <grpc/grpc_security_constants.h>

#include <vector>

#include "runtime/auth/credentials.h"
#include "runtime/auth/subject.h"

namespace gandiva::runtime {

bool IsLoopbackPeer(std::string_view peer) {
  return peer.starts_with("ipv4:127.") || peer.starts_with("ipv6:[::1]") ||
         peer.starts_with("ipv6:%5B::1%5D") ||
         peer.starts_with("ipv6:[::ffff:127.") || peer.starts_with("unix:");
}

std::optional<Caller> CallerFromSubject(std::string_view subject) {
  std::string cn;
  std::optional<Role> role;
  for (const auto& [key, value] : SubjectAttributes(subject)) {
    if (key == "CN") cn = value;
    if (key == "OU" && !role) role = ParseRole(value);
  }
  if (cn.empty() || !role || !Users::CheckName(cn).ok()) return std::nullopt;
  return Caller{cn, *role, /*certified=*/true};
}

core::StatusOr<Caller> Identify(const Users& users,
                                const grpc::ServerContext& ctx) {
  if (users.empty()) return Caller{};
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  const bool tls = auth != nullptr && auth->IsPeerAuthenticated();
  const auto& md = ctx.client_metadata();
  if (auto it = md.find(kAuthorizationKey); it != md.end()) {
    const std::string_view value(it->second.data(), it->second.size());
    if (!value.starts_with(kBearerPrefix)) {
      return core::Unauthenticated(
          "the call's 'authorization' metadata is not 'Bearer TOKEN'");
    }
    if (!tls && !IsLoopbackPeer(ctx.peer())) {
      return core::Unauthenticated(
          "a token is accepted in the clear only from this machine; from " +
          ctx.peer() + " connect with mutual TLS (--tls-*)");
    }
    auto caller =
        users.ByToken(value.substr(std::string_view(kBearerPrefix).size()));
    if (!caller) {
      return core::Unauthenticated(
          "the credential's token is no user's of this cluster (removed, "
          "or of another cluster)");
    }
    return *caller;
  }
  if (tls) {
    for (const auto& subject :
         auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME)) {
      if (auto caller = CallerFromSubject(
              std::string_view(subject.data(), subject.size()))) {
        return *caller;
      }
    }
  }
  return core::Unauthenticated(
      "no credential: this daemon has users, and every call must say whose "
      "it is (gandiva --credentials FILE or $GANDIVA_CREDENTIALS; a local "
      "cluster's admin credential is admin.cred in its state directory)" +
      std::string(tls ? "; this call's client certificate names no user "
                        "with a role (CN=NAME, OU=user|admin|agent)"
                      : ""));
}

}  // namespace gandiva::runtime
