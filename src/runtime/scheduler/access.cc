#include "runtime/scheduler/access.h"

namespace gandiva::runtime {
namespace {

core::Status Denied(const Caller& c, std::string_view action,
                    const std::string& why, std::string_view rule) {
  return core::PermissionDenied(c.Describe() + " may not " +
                                std::string(action) + ": " + why +
                                " (rule: " + std::string(rule) + ")");
}

}  // namespace

core::Status MayActOnJob(const Caller& c, std::string_view action, int64_t job,
                         const std::string& owner) {
  const std::string what = std::string(action) + " job " + std::to_string(job);
  if (c.open() || c.admin()) return core::Status::Ok();
  if (c.role == Role::kAgent) {
    return Denied(c, what, "an agent's credential makes no user request",
                  "agent");
  }
  if (owner == c.user) return core::Status::Ok();
  return Denied(c, what,
                "it is " + (owner.empty() ? std::string("nobody") : owner) +
                    "'s, and only its owner or an admin acts on it",
                "owner");
}

core::Status MayOperate(const Caller& c, std::string_view action) {
  if (c.open() || c.admin()) return core::Status::Ok();
  return Denied(c, action, "only an admin does", "admin");
}

core::Status MayActAsAgent(const Caller& c, std::string_view action) {
  if (c.open() || c.role == Role::kAgent) return core::Status::Ok();
  return Denied(c, action, "only a node agent's credential does", "agent");
}

core::Status MayActAsUser(const Caller& c, std::string_view action) {
  if (c.open() || c.role != Role::kAgent) return core::Status::Ok();
  return Denied(c, action, "an agent's credential makes no user request",
                "agent");
}

bool MayReadSpec(const Caller& c, const std::string& owner) {
  return c.open() || c.admin() || owner == c.user;
}

}  // namespace gandiva::runtime
