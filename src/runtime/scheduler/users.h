// Users: the cluster's users, their roles and the SHA-256 of their tokens,
// kept in the store (meta key "users", JSON) with the rest of the state;
// and Caller, who made a request.
//
// A daemon has users once it is given a credentials directory
// (gandiva-scheduler --credentials-dir) or its store holds any; from then
// on every request must prove who makes it (daemon_service.cc). Without
// users the daemon is open: every caller acts as an admin, and a job's
// owner is what its spec says.
//
// Thread-safety: Users is thread-safe (the loop changes it; the gRPC
// handlers look tokens up).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace gandiva::runtime {

class Store;

enum class Role { kUser, kAdmin, kAgent };
std::string_view RoleName(Role r);  // "user", "admin", "agent"
std::optional<Role> ParseRole(std::string_view name);

// Who made a request.
struct Caller {
  std::string user;  // empty: the daemon has no users (open)
  Role role = Role::kAdmin;
  // Proven by a client certificate (CN=user, OU=role), not a token: an
  // agent's names the one agent it is.
  bool certified = false;
  bool open() const { return user.empty(); }
  bool admin() const { return role == Role::kAdmin; }
  // "alice", "alice (admin)", "agent node-agents", or "a caller" when open.
  std::string Describe() const;
};

struct UserRecord {
  std::string name;
  Role role = Role::kUser;
  std::string token_sha256;
  int64_t created_us = 0;
};

class Users {
 public:
  static constexpr char kMetaKey[] = "users";

  // Replaces the users with those of `json` (as ToJson wrote it).
  // InvalidArgument naming the user and field of a malformed record.
  core::Status Load(const std::string& json);
  std::string ToJson() const;
  bool empty() const;

  // The user whose token this is (compared by SHA-256).
  std::optional<Caller> ByToken(std::string_view token) const;
  // A user by name (a client certificate's common name).
  std::optional<Caller> ByName(const std::string& name) const;
  std::vector<UserRecord> List() const;  // by name

  // CheckUserName (credentials.h).
  static core::Status CheckName(const std::string& name);
  // Adds a user with a new token, which it returns (the only time it is
  // seen). AlreadyExists when the name is taken.
  core::StatusOr<std::string> Add(const std::string& name, Role role,
                                  int64_t now_us);
  // Adds or updates `name` to have `role` and `token` (a credentials
  // directory's files, at the daemon's start).
  core::Status Put(const std::string& name, Role role, const std::string& token,
                   int64_t now_us);
  // NotFound; FailedPrecondition when it would leave no admin.
  core::Status Remove(const std::string& name);

 private:
  mutable std::mutex mu_;
  std::map<std::string, UserRecord> by_name_;             // guarded by mu_
  std::unordered_map<std::string, std::string> by_hash_;  // hash -> name
};

// The users as kept in a store.
//
// Loads them from `store`. With `dir` (--credentials-dir), makes sure
// DIR/admin.cred and DIR/agent.cred hold the tokens of an admin (named
// `admin`, or as the file says) and of the agent user "agents", writing
// new ones (mode 0600) where missing, and saves the users.
core::Status OpenUsers(Users& users, Store& store, const std::string& dir,
                       const std::string& admin, int64_t now_us);
// Users::Add and Users::Remove, saved to `store`; the users are left as
// they were when the save fails.
core::StatusOr<std::string> AddUser(Users& users, Store& store,
                                    const std::string& name, Role role,
                                    int64_t now_us);
core::Status RemoveUser(Users& users, Store& store, const std::string& name);

}  // namespace gandiva::runtime
