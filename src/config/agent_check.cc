#include "config/agent_check.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <utility>

#include "config/job_spec_check.h"

namespace gandiva::config {
namespace {

constexpr size_t kMaxSharingBytes = 64;

std::string Field(const std::string& field, const std::string& why) {
  return "field '" + field + "': " + why;
}

std::string At(const std::string& field, int i) {
  return field + "[" + std::to_string(i) + "]";
}

std::string CheckJobId(const std::string& field, int64_t id) {
  if (id < 1 || id > std::numeric_limits<int32_t>::max()) {
    return Field(field,
                 "a job id must be 1 to 2147483647, got " + std::to_string(id));
  }
  return "";
}

std::string CheckNotNegative(const std::string& field, int64_t v) {
  return v < 0 ? Field(field, "must be 0 or more, got " + std::to_string(v))
               : "";
}

std::string CheckSharing(const std::string& field, const rpc::Progress& p) {
  return CheckText(field + ".sharing", p.sharing(), kMaxSharingBytes);
}

std::string CheckGpus(const rpc::RegisterAgentRequest& r) {
  const int n = r.gpus_size();
  if (n > kMaxGpusPerServer) {
    return Field("gpus", "at most " + std::to_string(kMaxGpusPerServer) +
                             " on a server, got " + std::to_string(n));
  }
  std::set<int32_t> seen;
  for (int i = 0; i < n; ++i) {
    const rpc::Gpu& g = r.gpus(i);
    const std::string f = At("gpus", i);
    if (g.local() < 0 || g.local() >= n) {
      return Field(f + ".local", "must be 0 to " + std::to_string(n - 1) +
                                     " (the server's GPU count less one), "
                                     "got " +
                                     std::to_string(g.local()));
    }
    if (!seen.insert(g.local()).second) {
      return Field(f + ".local",
                   "GPU " + std::to_string(g.local()) + " is listed twice");
    }
    if (std::string e = CheckText(f + ".uuid", g.uuid(), kMaxLabelBytes);
        !e.empty()) {
      return e;
    }
    if (std::string e = CheckText(f + ".name", g.name(), kMaxLabelBytes);
        !e.empty()) {
      return e;
    }
    if (std::string e = CheckNotNegative(f + ".memory_bytes", g.memory_bytes());
        !e.empty()) {
      return e;
    }
  }
  for (auto [field, v] :
       {std::pair<const char*, int32_t>{"sockets", r.sockets()},
        {"switches_per_socket", r.switches_per_socket()}}) {
    if (v < 0 || v > std::max(n, 1)) {
      return Field(field, "must be 0 (one) to the GPU count (" +
                              std::to_string(n) + "), got " +
                              std::to_string(v));
    }
  }
  return "";
}

std::string CheckJobs(const rpc::RegisterAgentRequest& r) {
  if (r.jobs_size() > kMaxListedJobs) {
    return Field("jobs", "at most " + std::to_string(kMaxListedJobs) +
                             " on an agent, got " +
                             std::to_string(r.jobs_size()));
  }
  std::set<int64_t> ids;
  for (int i = 0; i < r.jobs_size(); ++i) {
    const rpc::AgentJob& j = r.jobs(i);
    const std::string f = At("jobs", i);
    if (std::string e = CheckJobId(f + ".job_id", j.job_id()); !e.empty()) {
      return e;
    }
    if (!ids.insert(j.job_id()).second) {
      return Field(f + ".job_id",
                   "job " + std::to_string(j.job_id()) + " is listed twice");
    }
    if (j.state() != rpc::RUNNING && j.state() != rpc::SUSPENDED) {
      return Field(f + ".state", "must be RUNNING or SUSPENDED, got " +
                                     rpc::JobState_Name(j.state()));
    }
    std::set<int32_t> gpus;
    for (int k = 0; k < j.gpus_size(); ++k) {
      const int32_t g = j.gpus(k);
      if (g < 0 || g >= r.gpus_size()) {
        return Field(At(f + ".gpus", k), "must be a GPU of the server, 0 to " +
                                             std::to_string(r.gpus_size() - 1) +
                                             ", got " + std::to_string(g));
      }
      if (!gpus.insert(g).second) {
        return Field(At(f + ".gpus", k),
                     "GPU " + std::to_string(g) + " is listed twice");
      }
    }
    for (auto [field, v] : {std::pair<const char*, int64_t>{"pid", j.pid()},
                            {"submitted_us", j.submitted_us()}}) {
      if (std::string e = CheckNotNegative(f + "." + field, v); !e.empty()) {
        return e;
      }
    }
    if (std::string e = CheckSharing(f + ".progress", j.progress());
        !e.empty()) {
      return e;
    }
  }
  return "";
}

std::string CheckCheckpoints(const rpc::RegisterAgentRequest& r) {
  const int n = r.checkpoints_size();
  if (n > kMaxListedJobs) {
    return Field("checkpoints", "at most " + std::to_string(kMaxListedJobs) +
                                    " on an agent, got " + std::to_string(n));
  }
  std::set<int64_t> ids;
  for (int i = 0; i < n; ++i) {
    const std::string f = At("checkpoints", i);
    if (std::string e = CheckJobId(f, r.checkpoints(i)); !e.empty()) return e;
    if (!ids.insert(r.checkpoints(i)).second) {
      return Field(
          f, "job " + std::to_string(r.checkpoints(i)) + " is listed twice");
    }
  }
  for (auto [field, size] :
       {std::pair<const char*, int>{"checkpoint_clusters",
                                    r.checkpoint_clusters_size()},
        {"checkpoint_submitted_us", r.checkpoint_submitted_us_size()},
        {"checkpoint_specs", r.checkpoint_specs_size()}}) {
    if (size > n) {
      return Field(field, "lists " + std::to_string(size) + " entries, for " +
                              std::to_string(n) + " checkpoints");
    }
  }
  for (int i = 0; i < r.checkpoint_clusters_size(); ++i) {
    if (std::string e = CheckText(At("checkpoint_clusters", i),
                                  r.checkpoint_clusters(i), kMaxLabelBytes);
        !e.empty()) {
      return e;
    }
  }
  for (int i = 0; i < r.checkpoint_submitted_us_size(); ++i) {
    if (std::string e = CheckNotNegative(At("checkpoint_submitted_us", i),
                                         r.checkpoint_submitted_us(i));
        !e.empty()) {
      return e;
    }
  }
  return "";
}

}  // namespace

std::string CheckServerName(std::string_view name) {
  if (name.empty() || name.size() > kMaxServerNameBytes) {
    return "must be 1 to " + std::to_string(kMaxServerNameBytes) +
           " characters, got " + std::to_string(name.size());
  }
  if (!OnlyNameChars(name)) {
    return "may hold only letters, digits, '.', '_' and '-' (a hostname's "
           "characters), got " +
           Shown(name);
  }
  return "";
}

std::string CheckAgentRegistration(const rpc::RegisterAgentRequest& r) {
  if (std::string e = CheckServerName(r.name()); !e.empty()) {
    return Field("name", e);
  }
  if (r.address().empty()) return Field("address", "empty");
  if (r.address().size() > kMaxAddressBytes) {
    return Field("address",
                 "must be at most " + std::to_string(kMaxAddressBytes) +
                     " bytes, got " + std::to_string(r.address().size()));
  }
  for (unsigned char c : r.address()) {
    if (c <= 0x20 || c == 0x7f) {
      return Field("address", "holds a space or a control character: " +
                                  Shown(r.address()));
    }
  }
  for (const std::string& e :
       {CheckGpus(r), CheckText("incarnation", r.incarnation(), kMaxLabelBytes),
        CheckText("cluster_id", r.cluster_id(), kMaxLabelBytes)}) {
    if (!e.empty()) return e;
  }
  for (auto [field, s] :
       {std::pair<const char*, const std::string*>{
            "capabilities.criu_detail", &r.capabilities().criu_detail()},
        {"capabilities.mps_detail", &r.capabilities().mps_detail()}}) {
    if (s->size() > kMaxDetailBytes) {
      return Field(field, "must be at most " + std::to_string(kMaxDetailBytes) +
                              " bytes, got " + std::to_string(s->size()));
    }
  }
  if (std::string e = CheckJobs(r); !e.empty()) return e;
  return CheckCheckpoints(r);
}

std::string CheckAgentReport(const rpc::AgentReport& r) {
  if (std::string e = CheckServerName(r.name()); !e.empty()) {
    return Field("name", e);
  }
  for (int i = 0; i < r.exits_size(); ++i) {
    if (std::string e =
            CheckJobId(At("exits", i) + ".job_id", r.exits(i).job_id());
        !e.empty()) {
      return e;
    }
  }
  for (int i = 0; i < r.profiles_size(); ++i) {
    const std::string f = At("profiles", i);
    if (std::string e = CheckJobId(f + ".job_id", r.profiles(i).job_id());
        !e.empty()) {
      return e;
    }
    if (std::string e = CheckSharing(f + ".progress", r.profiles(i).progress());
        !e.empty()) {
      return e;
    }
  }
  return "";
}

std::string CheckAgentLeave(const rpc::LeaveRequest& r) {
  if (std::string e = CheckServerName(r.name()); !e.empty()) {
    return Field("name", e);
  }
  return "";
}

}  // namespace gandiva::config
