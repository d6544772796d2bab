// Which jobs `gandiva ls` lists (--state, --owner, --name) and which
// `kill`, `suspend` and `resume` act on (--name): pure functions of a job's
// info, thread-safe.
#pragma once

#include <set>
#include <string>

#include "core/status.h"
#include "proto/gandiva.pb.h"

namespace gandiva::cli {

struct JobFilter {
  std::set<rpc::JobState> states;  // empty: any state
  std::string owner;               // empty: any owner
  // Empty: any name. Else a shell pattern (fnmatch: `*`, `?`, `[...]`)
  // that the whole name matches: "search-*".
  std::string name;

  bool empty() const { return states.empty() && owner.empty() && name.empty(); }
  // True when the jobs asked for may have ended (a state given is an end
  // state, or no state is given): ListJobs must include ended jobs.
  bool MayHaveEnded() const;
  bool Matches(const rpc::JobInfo& job) const;
};

// The states of a comma-separated list of names ("running,queued"; case
// does not matter; "live": queued, running, suspended and migrating;
// "ended": finished, failed and killed). An error names the value and the
// known names.
core::StatusOr<std::set<rpc::JobState>> ParseStates(const std::string& list);

}  // namespace gandiva::cli
