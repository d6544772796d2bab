#include "runtime/scheduler/users.h"

#include <pwd.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "runtime/auth/credentials.h"
#include "runtime/scheduler/store.h"

namespace gandiva::runtime {

std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kUser:
      return "user";
    case Role::kAdmin:
      return "admin";
    case Role::kAgent:
      return "agent";
  }
  return "user";
}

std::optional<Role> ParseRole(std::string_view name) {
  for (Role r : {Role::kUser, Role::kAdmin, Role::kAgent}) {
    if (RoleName(r) == name) return r;
  }
  return std::nullopt;
}

std::string Caller::Describe() const {
  if (open()) return "a caller";
  switch (role) {
    case Role::kAdmin:
      return user + " (admin)";
    case Role::kAgent:
      return "agent " + user;
    case Role::kUser:
      break;
  }
  return user;
}

core::Status Users::Load(const std::string& json) {
  const auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return core::InvalidArgument("the stored users are not a JSON object");
  }
  std::map<std::string, UserRecord> by_name;
  std::unordered_map<std::string, std::string> by_hash;
  for (const auto& item : j.items()) {
    // Named, not a structured binding: the lambda below refers to them,
    // which clang before 16 does not take for bindings.
    const std::string name = item.key();
    const nlohmann::json& rec = item.value();
    UserRecord u;
    u.name = name;
    auto field = [&](const char* f) -> core::StatusOr<std::string> {
      if (!rec.is_object() || !rec.contains(f) || !rec[f].is_string()) {
        return core::InvalidArgument("stored user '" + name + "': field '" + f +
                                     "' is missing or not a string");
      }
      return rec[f].get<std::string>();
    };
    auto role = field("role");
    if (!role.ok()) return role.status();
    auto r = ParseRole(*role);
    if (!r) {
      return core::InvalidArgument("stored user '" + name +
                                   "': field 'role': no role '" + *role + "'");
    }
    u.role = *r;
    auto hash = field("token_sha256");
    if (!hash.ok()) return hash.status();
    u.token_sha256 = *hash;
    u.created_us = rec.value("created_us", int64_t{0});
    by_hash[u.token_sha256] = name;
    by_name[name] = std::move(u);
  }
  std::lock_guard lock(mu_);
  by_name_ = std::move(by_name);
  by_hash_ = std::move(by_hash);
  return core::Status::Ok();
}

std::string Users::ToJson() const {
  nlohmann::json j = nlohmann::json::object();
  std::lock_guard lock(mu_);
  for (const auto& [name, u] : by_name_) {
    j[name] = {{"role", RoleName(u.role)},
               {"token_sha256", u.token_sha256},
               {"created_us", u.created_us}};
  }
  return j.dump();
}

bool Users::empty() const {
  std::lock_guard lock(mu_);
  return by_name_.empty();
}

std::optional<Caller> Users::ByToken(std::string_view token) const {
  const std::string hash = Sha256Hex(token);
  std::lock_guard lock(mu_);
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return Caller{it->second, by_name_.at(it->second).role};
}

std::optional<Caller> Users::ByName(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return std::nullopt;
  return Caller{name, it->second.role};
}

std::vector<UserRecord> Users::List() const {
  std::lock_guard lock(mu_);
  std::vector<UserRecord> out;
  for (const auto& [name, u] : by_name_) out.push_back(u);
  return out;
}

core::Status Users::CheckName(const std::string& name) {
  return CheckUserName(name);
}

core::StatusOr<std::string> Users::Add(const std::string& name, Role role,
                                       int64_t now_us) {
  GANDIVA_RETURN_IF_ERROR(CheckName(name));
  std::string token = NewToken();
  std::lock_guard lock(mu_);
  if (by_name_.contains(name)) {
    return core::AlreadyExists("field 'name': user '" + name +
                               "' already exists");
  }
  UserRecord u{name, role, Sha256Hex(token), now_us};
  by_hash_[u.token_sha256] = name;
  by_name_[name] = std::move(u);
  return token;
}

core::Status Users::Put(const std::string& name, Role role,
                        const std::string& token, int64_t now_us) {
  GANDIVA_RETURN_IF_ERROR(CheckName(name));
  const std::string hash = Sha256Hex(token);
  std::lock_guard lock(mu_);
  if (auto other = by_hash_.find(hash);
      other != by_hash_.end() && other->second != name) {
    return core::AlreadyExists("the token given for user '" + name +
                               "' is already the token of user '" +
                               other->second + "'");
  }
  UserRecord& u = by_name_[name];
  if (!u.token_sha256.empty()) by_hash_.erase(u.token_sha256);
  if (u.name.empty()) u.created_us = now_us;
  u.name = name;
  u.role = role;
  u.token_sha256 = hash;
  by_hash_[hash] = name;
  return core::Status::Ok();
}

core::Status Users::Remove(const std::string& name) {
  std::lock_guard lock(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    return core::NotFound("field 'name': no user '" + name + "'");
  }
  if (it->second.role == Role::kAdmin) {
    int admins = 0;
    for (const auto& [n, u] : by_name_) admins += u.role == Role::kAdmin;
    if (admins == 1) {
      return core::FailedPrecondition("user '" + name +
                                      "' is the last admin; add another "
                                      "admin first");
    }
  }
  by_hash_.erase(it->second.token_sha256);
  by_name_.erase(it);
  return core::Status::Ok();
}

namespace {

core::Status Save(Users& users, Store& store, const std::string& before) {
  core::Status s = store.SetMeta(Users::kMetaKey, users.ToJson());
  if (!s.ok()) (void)users.Load(before);
  return s;
}

}  // namespace

core::Status OpenUsers(Users& users, Store& store, const std::string& dir,
                       const std::string& admin, int64_t now_us) {
  auto stored = store.GetMeta(Users::kMetaKey);
  if (!stored.ok()) return stored.status();
  if (stored->has_value()) GANDIVA_RETURN_IF_ERROR(users.Load(**stored));
  if (dir.empty()) return core::Status::Ok();
  std::string admin_name = admin;
  if (admin_name.empty()) {
    const passwd* pw = ::getpwuid(::geteuid());
    admin_name = pw != nullptr && Users::CheckName(pw->pw_name).ok()
                     ? pw->pw_name
                     : "admin";
  }
  const std::string before = users.ToJson();
  struct Want {
    std::string file, name;
    Role role;
  };
  for (const Want& w : {Want{dir + "/admin.cred", admin_name, Role::kAdmin},
                        Want{dir + "/agent.cred", "agents", Role::kAgent}}) {
    if (::access(w.file.c_str(), F_OK) == 0) {
      auto c = ReadCredential(w.file);
      if (!c.ok()) return c.status();
      if (auto s = users.Put(c->user, w.role, c->token, now_us); !s.ok()) {
        return core::Status(s.code(), w.file + ": " + s.message());
      }
      continue;
    }
    const std::string token = NewToken();
    GANDIVA_RETURN_IF_ERROR(users.Put(w.name, w.role, token, now_us));
    GANDIVA_RETURN_IF_ERROR(WriteCredential(w.file, {w.name, token}));
  }
  return Save(users, store, before);
}

core::StatusOr<std::string> AddUser(Users& users, Store& store,
                                    const std::string& name, Role role,
                                    int64_t now_us) {
  const std::string before = users.ToJson();
  auto token = users.Add(name, role, now_us);
  if (!token.ok()) return token;
  GANDIVA_RETURN_IF_ERROR(Save(users, store, before));
  return token;
}

core::Status RemoveUser(Users& users, Store& store, const std::string& name) {
  const std::string before = users.ToJson();
  GANDIVA_RETURN_IF_ERROR(users.Remove(name));
  return Save(users, store, before);
}

}  // namespace gandiva::runtime
