// Identify: who makes a gRPC call, from its credential, never from what the
// request claims.
//   - A token ("authorization: Bearer TOKEN", credentials.h) names the user
//     whose token it is. Accepted over mutual TLS, and in the clear only
//     from this machine (a loopback or Unix-socket peer).
//   - Else, over mutual TLS, the client certificate: its subject's common
//     name (CN) is the user and its organisational unit (OU) the role,
//     "user", "admin" or "agent" (`gandiva certs` signs such certificates).
// A daemon without users is open: every call is Caller{} (users.h).
//
// Plain functions; thread-safe as Users is.
#pragma once

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "runtime/scheduler/users.h"

namespace gandiva::runtime {

// Unauthenticated, saying what is missing or wrong and what to do.
core::StatusOr<Caller> Identify(const Users& users,
                                const grpc::ServerContext& ctx);

// Whether a gRPC peer ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000",
// "unix:/path") is on this machine.
bool IsLoopbackPeer(std::string_view peer);
// The user and role an RFC 2253 subject ("CN=alice,OU=admin,O=lab") names;
// nullopt without a CN or a known OU.
std::optional<Caller> CallerFromSubject(std::string_view subject);

}  // namespace gandiva::runtime
