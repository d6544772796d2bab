// Which jobs `gandiva ls` lists (--state, --owner, --name), as a ListJobs
// request, which the daemon answers with the jobs that match.
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
  // Its conditions into `req` (ListJobsRequest's states, owner and name).
  void ToRequest(rpc::ListJobsRequest* req) const;
};

// The states of a comma-separated list of names ("running,queued"; case
// does not matter; "live": queued, running, suspended and migrating;
// "ended": finished, failed and killed). An error names the value and the
// known names.
core::StatusOr<std::set<rpc::JobState>> ParseStates(const std::string& list);

}  // namespace gandiva::cli
