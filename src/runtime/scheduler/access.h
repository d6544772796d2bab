// Access: what each caller may do, as pure rules. A refusal
// (PermissionDenied) says who asked, for what, and the rule:
//   owner  - a user acts on (kills, suspends, resumes, reprioritises) only
//            the jobs they own, which are those they submitted; an admin
//            acts on any;
//   admin  - the operator's mechanisms (migrate, pack, unpack, resize),
//            drain and cordon, and users are for admins;
//   agent  - only an agent's credential registers, reports and leaves as
//            a node agent, and an agent's credential makes no other
//            request;
//   spec   - a job's command and env are read only by its owner and
//            admins (others see the rest of it).
// An open daemon (no users) allows everything.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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
// A user's `action` that acts on no job of another (submit, list, read):
// anyone but an agent (rule agent).
core::Status MayActAsUser(const Caller& c, std::string_view action);
// Whether `c` reads a job's command and env (rule spec).
bool MayReadSpec(const Caller& c, const std::string& owner);

}  // namespace gandiva::runtime
