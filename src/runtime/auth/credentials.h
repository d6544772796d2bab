// Credentials: how a caller proves to the scheduler daemon who it is.
//
// A credential is a user's name and a secret token. The daemon keeps only
// the token's SHA-256 (users.h); a caller sends the token with each call as
// the metadata "authorization: Bearer TOKEN". A credential file holds one,
// as JSON ({"user": NAME, "token": TOKEN}), mode 0600: `gandiva up` writes
// the local cluster's (admin.cred for its admin, agent.cred for its agents)
// and `gandiva user add` writes a new user's.
//
// Plain functions and values; thread-compatible.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "core/status.h"

namespace gandiva::runtime {

struct Credential {
  std::string user;
  std::string token;
};

// The metadata key a token travels under, and the prefix of its value.
inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

// Reads a credential file. InvalidArgument naming the file, and the field
// when one is missing or malformed; IoError when it cannot be read.
core::StatusOr<Credential> ReadCredential(const std::string& path);
// Writes `c` to `path` with mode 0600 (a temporary file, then renamed).
// IoError naming the path.
core::Status WriteCredential(const std::string& path, const Credential& c);

// A new secret token: "gdv_" and 64 hex digits (256 random bits from the
// system's CSPRNG).
std::string NewToken();
// The SHA-256 of `data`, as 64 lower-case hex digits.
std::string Sha256Hex(std::string_view data);
// The HMAC-SHA256 of `data` keyed by `key`, as 64 lower-case hex digits.
std::string HmacSha256Hex(std::string_view key, std::string_view data);

// A user's name (and so a certificate's CN) is 1-64 of [A-Za-z0-9._@-],
// starting with a letter or digit. InvalidArgument naming the field 'name'
// otherwise.
core::Status CheckUserName(const std::string& name);

// Adds `c`'s token to a call's metadata.
void AttachCredential(const Credential& c, grpc::ClientContext* ctx);

}  // namespace gandiva::runtime
