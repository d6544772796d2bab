// Access: what each caller may do, as pure rules. A refusal
// (PermissionDenied) says who asked, for what, and the rule:
//   owner  - a user acts on (kills, suspends, resumes, reprioritises, reads
//            the log of) only the jobs they own, which are those they
//            submitted; an admin acts on any;
//   admin  - the operator's mechanisms (migrate, pack, unpack, resize),
//            drain and cordon, and users are for admins;
//   agent  - only an agent's credential registers, reports and leaves as
//            a node agent, and an agent's credential makes no other
//            request;
//   spec   - a job's command and env are read only by its owner and
//            admins (others see the rest of it);
//   queue  - a user submits only to a queue they are a member of (listed
//            in its members or those of a queue above it; a queue with no
//            members on its path is open to all), and gives a job no
//            priority above its queue's max_priority (the lowest along
//            its path); an admin is bound by neither.
// An open daemon (no users) allows everything.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/policies/queues.h"
#include "core/status.h"
#include "runtime/scheduler/users.h"

namespace gandiva::runtime {

// `action` on job `job`, owned by `owner` (rule owner; an agent: rule
// agent).
core::Status MayActOnJob(const Caller& c, std::string_view action, int64_t job,
                         const std::string& owner);
// An operator's `action` (rule admin).
core::Status MayOperate(const Caller& c, std::string_view action);
// A node agent's `action` (rule agent).
core::Status MayActAsAgent(const Caller& c, std::string_view action);
// MayActAsAgent, as agent `name` (registering, reporting, leaving): an
// agent proven by its certificate acts only as the agent it names (its
// CN); the agents' shared token, as any.
core::Status MayActAsAgentNamed(const Caller& c, std::string_view action,
                                std::string_view name);
// Its name part alone, for a caller MayActAsAgent already admitted.
core::Status MayUseAgentName(const Caller& c, std::string_view action,
                             std::string_view name);
// A user's `action` that acts on no job of another (submit, list, read):
// anyone but an agent (rule agent).
core::Status MayActAsUser(const Caller& c, std::string_view action);
// Whether `c` reads a job's command and env (rule spec).
bool MayReadSpec(const Caller& c, const std::string& owner);

// The queue a job goes to, submitted by `c` for `owner` naming queue
// `named` among `queues`: `named` if a leaf the caller may submit to (rule
// queue); "" naming none: the owner's own, the first leaf by name that
// lists them as a member, else the first reached through a queue above
// that lists them, else the shared queue "". A queue not there, or one
// with queues under it, is InvalidArgument naming the field.
core::StatusOr<std::string> QueueOfSubmission(
    const Caller& c, const std::string& owner, const std::string& named,
    const std::vector<core::QueueConfig>& queues);
// Whether `c` may give a job of queue `queue` priority `priority` (rule
// queue); `action` says what for.
core::Status MayUsePriority(const Caller& c, std::string_view action,
                            const std::string& queue, int priority,
                            const std::vector<core::QueueConfig>& queues);

}  // namespace gandiva::runtime
