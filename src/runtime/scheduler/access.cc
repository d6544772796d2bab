#include "runtime/scheduler/access.h"

#include <algorithm>

namespace gandiva::runtime {
namespace {

core::Status Denied(const Caller& c, std::string_view action,
                    const std::string& why, std::string_view rule) {
  return core::PermissionDenied(c.Describe() + " may not " +
                                std::string(action) + ": " + why +
                                " (rule: " + std::string(rule) + ")");
}

const core::QueueConfig* Find(const std::vector<core::QueueConfig>& queues,
                              const std::string& name) {
  for (const core::QueueConfig& q : queues) {
    if (q.name == name) return &q;
  }
  return nullptr;
}

bool HasChildren(const std::vector<core::QueueConfig>& queues,
                 const std::string& name) {
  for (const core::QueueConfig& q : queues) {
    if (q.parent == name) return true;
  }
  return false;
}

// The queues from `leaf` up to the top (at most as many as there are, so
// a cycle ends).
std::vector<const core::QueueConfig*> Path(
    const std::vector<core::QueueConfig>& queues, const std::string& leaf) {
  std::vector<const core::QueueConfig*> path;
  for (const core::QueueConfig* q = Find(queues, leaf);
       q != nullptr && path.size() < queues.size();
       q = q->parent.empty() ? nullptr : Find(queues, q->parent)) {
    path.push_back(q);
  }
  return path;
}

bool Lists(const core::QueueConfig& q, const std::string& user) {
  return std::find(q.members.begin(), q.members.end(), user) != q.members.end();
}

// The leaves, by name.
std::vector<std::string> Leaves(const std::vector<core::QueueConfig>& queues) {
  std::vector<std::string> leaves;
  for (const core::QueueConfig& q : queues) {
    if (!HasChildren(queues, q.name)) leaves.push_back(q.name);
  }
  std::sort(leaves.begin(), leaves.end());
  return leaves;
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

}  // namespace

core::StatusOr<std::string> QueueOfSubmission(
    const Caller& c, const std::string& owner, const std::string& named,
    const std::vector<core::QueueConfig>& queues) {
  const std::vector<std::string> leaves = Leaves(queues);
  if (named.empty()) {
    for (bool direct : {true, false}) {
      for (const std::string& leaf : leaves) {
        const auto path = Path(queues, leaf);
        for (size_t k = 0;
             k < (direct ? std::min<size_t>(1, path.size()) : path.size());
             ++k) {
          if (Lists(*path[k], owner)) return leaf;
        }
      }
    }
    return std::string();
  }
  if (Find(queues, named) == nullptr) {
    return core::InvalidArgument("field 'queue': no queue '" + named +
                                 "' (the daemon's queues: " + Join(leaves) +
                                 ")");
  }
  if (HasChildren(queues, named)) {
    std::vector<std::string> under;
    for (const std::string& leaf : leaves) {
      for (const core::QueueConfig* q : Path(queues, leaf)) {
        if (q->name == named) under.push_back(leaf);
      }
    }
    return core::InvalidArgument("field 'queue': '" + named +
                                 "' has queues under it; name one of them (" +
                                 Join(under) + ")");
  }
  if (c.open() || c.admin()) return named;
  std::vector<std::string> members;
  for (const core::QueueConfig* q : Path(queues, named)) {
    if (Lists(*q, c.user)) return named;
    members.insert(members.end(), q->members.begin(), q->members.end());
  }
  if (members.empty()) return named;
  return Denied(c, "submit to queue '" + named + "'",
                "its members are " + Join(members) +
                    " (with those of the "
                    "queues above it)",
                "queue");
}

core::Status MayUsePriority(const Caller& c, std::string_view action,
                            const std::string& queue, int priority,
                            const std::vector<core::QueueConfig>& queues) {
  if (c.open() || c.admin()) return core::Status::Ok();
  for (const core::QueueConfig* q : Path(queues, queue)) {
    if (q->max_priority && priority > *q->max_priority) {
      return Denied(
          c, std::string(action) + " at priority " + std::to_string(priority),
          "queue '" + q->name + "' allows priorities up to " +
              std::to_string(*q->max_priority),
          "queue");
    }
  }
  return core::Status::Ok();
}

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

core::Status MayActAsAgentNamed(const Caller& c, std::string_view action,
                                std::string_view name) {
  GANDIVA_RETURN_IF_ERROR(MayActAsAgent(c, action));
  return MayUseAgentName(c, action, name);
}

core::Status MayUseAgentName(const Caller& c, std::string_view action,
                             std::string_view name) {
  if (c.open() || !c.certified || c.user == name) return core::Status::Ok();
  return Denied(c, action,
                "its certificate names agent '" + c.user +
                    "', which acts as that agent only (its --name)",
                "agent name");
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
