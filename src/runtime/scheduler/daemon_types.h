// The daemon's records of jobs, agents and actions under way, and the
// small helpers its source files share (daemon_impl.h); not for use
// outside the daemon.
#pragma once

#include <fnmatch.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/policies/registry.h"
#include "core/scheduler.h"
#include "proto/gandiva.grpc.pb.h"
#include "runtime/scheduler/agent_liveness.h"
#include "runtime/scheduler/agent_outcome.h"
#include "runtime/scheduler/dispatcher.h"
#include "runtime/scheduler/etcd_store.h"
#include "runtime/scheduler/event_codec.h"
#include "runtime/scheduler/metrics.h"
#include "runtime/scheduler/store.h"
#include "runtime/tls/tls.h"

namespace gandiva::runtime {

using core::ActionKind;
using core::JobId;
using core::JobState;
using core::ServerId;
using nlohmann::json;

inline grpc::Status ToGrpc(const core::Status& s) {
  using core::StatusCode;
  switch (s.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
      return {grpc::StatusCode::INVALID_ARGUMENT, s.message()};
    case StatusCode::kNotFound:
      return {grpc::StatusCode::NOT_FOUND, s.message()};
    case StatusCode::kFailedPrecondition:
      return {grpc::StatusCode::FAILED_PRECONDITION, s.message()};
    case StatusCode::kAlreadyExists:
      return {grpc::StatusCode::ALREADY_EXISTS, s.message()};
    case StatusCode::kUnavailable:
      return {grpc::StatusCode::UNAVAILABLE, s.message()};
    case StatusCode::kUnauthenticated:
      return {grpc::StatusCode::UNAUTHENTICATED, s.message()};
    case StatusCode::kPermissionDenied:
      return {grpc::StatusCode::PERMISSION_DENIED, s.message()};
    default:
      return {grpc::StatusCode::INTERNAL, s.ToString()};
  }
}

inline rpc::JobState ToRpcState(const core::Job& j) {
  switch (j.state) {
    case JobState::kQueued:
      return rpc::QUEUED;
    case JobState::kRunning:
      return rpc::RUNNING;
    case JobState::kSuspended:
      // Placed but never launched: it waits for its first slice.
      return j.launched ? rpc::SUSPENDED : rpc::QUEUED;
    case JobState::kMigrating:
      return rpc::MIGRATING;
    case JobState::kFinished:
      return rpc::FINISHED;
    case JobState::kFailed:
      return rpc::FAILED;
    case JobState::kKilled:
      return rpc::KILLED;
  }
  return rpc::JOB_STATE_UNSPECIFIED;
}

inline std::string SpecToJson(const rpc::JobSpec& spec) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(spec, &out, o);
  return out;
}

// How a job's work is carried when it moves, from what the daemon knows:
// the job-side library seen in its process's reports, else what it
// declares.
inline core::Carrier CarrierOf(const rpc::JobSpec& s, bool uses_library) {
  if (uses_library) return core::Carrier::kSelf;
  return s.restartable() ? core::Carrier::kRestart
                         : core::Carrier::kProcessImage;
}

// As submitted: no library seen yet.
inline core::JobSpec ToCoreSpec(const rpc::JobSpec& s) {
  core::JobSpec c;
  c.name = s.name();
  c.gpus = s.gpus();
  c.priority = s.priority();
  c.owner = s.owner();
  c.group = s.group();
  c.vc = s.queue();
  c.elastic = s.elastic();
  c.total_minibatches = s.total_minibatches();
  c.retries = s.retries();
  c.carrier = CarrierOf(s, false);
  return c;
}

// Why the spec of a job the store lost, as an agent lists it, is refused
// ("": it is not). Looser than a submission's check (config::CheckJobSpec):
// the job was accepted once, and its process may be running.
inline std::string CheckSpec(const rpc::JobSpec& spec) {
  std::string err = core::ValidateJobSpec(ToCoreSpec(spec));
  if (err.empty() && spec.command().empty()) {
    err = "field 'command': must not be empty";
  }
  if (err.empty() && !spec.workdir().empty() &&
      !std::filesystem::path(spec.workdir()).is_absolute()) {
    err = "field 'workdir': must be an absolute path, got '" + spec.workdir() +
          "'";
  }
  return err;
}

// One server's share of a job's GPUs.
struct Part {
  ServerId server;
  std::vector<int32_t> local;  // local GPU indices there
  bool operator==(const Part&) const = default;
};

// Where the daemon believes a job's process lives. A job whose GPUs span
// servers (a gang) runs one process per server: the lead's at `server`
// (rank 0, the one that talks to its agent), the others in `followers`.
struct Proc {
  ServerId server;
  std::vector<int32_t> local;  // local GPU indices there
  bool exists = false;         // false: none (or lost); start afresh
  // No process, but the agent at `server` holds the job's checkpoint (a
  // migration whose transfer failed): the job resumes from it.
  bool checkpoint = false;
  // A move or resize is under way: the process at `server` was asked to
  // checkpoint and exit, so its exit with 75 or 76 is not the job's end.
  bool leaving = false;
  // A gang's other parts, in rank order (empty: a single-server job).
  std::vector<Part> followers{};

  bool gang() const { return !followers.empty(); }
  // The lead first, then the followers: rank order.
  std::vector<Part> parts() const {
    std::vector<Part> all{Part{server, local}};
    all.insert(all.end(), followers.begin(), followers.end());
    return all;
  }
  bool FollowerOn(ServerId s) const {
    for (const Part& f : followers) {
      if (f.server == s) return true;
    }
    return false;
  }
  // A part of the job is (or would be) on `s`.
  bool On(ServerId s) const { return server == s || FollowerOn(s); }
  // Where it was, without a process: its lead's agent holds its checkpoint
  // (a gang's: the one rank 0 saved, for every part).
  Proc CheckpointOnly() const {
    Proc p = *this;
    p.exists = p.leaving = false;
    p.checkpoint = true;
    return p;
  }
  // Its other parts alone, to stop: no lead (an invalid server).
  Proc FollowersOnly() const {
    Proc p = *this;
    p.server = ServerId();
    return p;
  }
  static Proc At(const std::vector<Part>& parts) {
    Proc p;
    if (parts.empty()) return p;
    p.server = parts[0].server;
    p.local = parts[0].local;
    p.exists = true;
    p.followers.assign(parts.begin() + 1, parts.end());
    return p;
  }
};

// An agent to call from an executor thread for one part of a job: what the
// loop knew of it when the work was handed over.
struct PartConn {
  Part part;
  std::shared_ptr<rpc::Agent::StubInterface> stub;
  std::string name;
  std::string address;  // host:port of its Agent service
};

// A decision whose effect on the job's mini-batch rate is measured: the
// rate before it, and the first report at least `due_us` later gives the
// rate after it (kept in the job's history).
struct Probe {
  std::string what;
  double before = 0;
  int64_t due_us = 0;
};

// Reports in a row that found a job's process in the other state than
// the scheduler has the job in (StateCheck), while no suspend or resume of
// it happened.
struct StateMismatch {
  int reports = 0;
  int64_t suspends = 0;  // the job's counts at the first of them
  int64_t resumes = 0;
};

struct JobExtra {
  rpc::JobSpec spec;
  std::string spec_json;
  std::optional<int32_t> exit_code;
  rpc::Progress progress;
  Proc proc;
  // Exits to ignore per server: processes the daemon killed itself (a job
  // restarted elsewhere), whose exit is not the job's.
  std::map<int32_t, int> ignore_exits;
  JobRow written;  // the row as last written to the store
  bool has_written = false;
  StateMismatch mismatch;
  std::optional<Probe> probe;
  // When its next ProfileReport is due at the core (0: the next report).
  int64_t profile_due_us = 0;
  // Saved as its agent stopped (JobExit.checkpoint_kept): the mini-batch
  // of that checkpoint (-1: none) and when the exit came (wall clock), for
  // the cost of the restart from it.
  int64_t kept_at = -1;
  int64_t stopped_us = 0;
  // Why its process was lost (LoseProcess), for the restart's history line.
  std::string restart_why;
  // A part of it on another server than its lead's failed, with this exit
  // code, and its lead was stopped keeping its last periodic checkpoint
  // (JobRequest.keep_periodic): the lead's exit, awaited, ends the run,
  // with that checkpoint for a retry if one was saved. In memory alone: a
  // daemon started again meanwhile finds the lead's process gone at its
  // agent's next list, and the core restarts the job.
  std::optional<int32_t> part_failed;
  // Ended, with nothing of it left anywhere, and published as such in
  // Impl::settled_jobs: PersistAndPublish passes it by. Cleared whenever the
  // loop looks it up (Extra()), which is how anything could change it.
  bool settled = false;
  // The info last published for it, and a hash of everything it was built
  // from (PublishInputs; 0: build it again regardless): a publication
  // reuses it while that hash is the same.
  std::shared_ptr<const rpc::JobInfo> published;
  uint64_t published_inputs = 0;
  // Something its info is built from may have changed since the last
  // publication: the loop looked it up (Extra), the core changed the job
  // (Scheduler::TrackChangedJobs), or a loop over the jobs acted on it.
  // Publishing looks again only at these, and at the volatile ones: those
  // whose info depends on the clock (PublishInputs 0, or waiting to try a
  // start again).
  bool dirty = true;
  bool volatile_info = false;
};

// An agent as the daemon knows it; whether it can be reached is its
// Liveness (agent_liveness.h).
struct AgentConn : Liveness {
  ServerId id;
  std::string name;
  std::string address;
  // The agent process's (RegisterAgentRequest.incarnation; not stored).
  std::string incarnation;
  std::vector<rpc::Gpu> gpus;
  int32_t sockets = 1;
  int32_t switches_per_socket = 1;
  std::shared_ptr<rpc::Agent::StubInterface> stub;
  // Set at registration: jobs the daemon placed here that the agent did not
  // list; decided at its first report (their exits may still come).
  bool reconcile_pending = false;
  std::set<int32_t> missing;
  // The jobs whose checkpoint it said it holds at registration.
  std::set<int32_t> held;
  rpc::AgentCapabilities caps;
  // Its server was cordoned for being away, out of reach or awaited by the
  // daemon (not by an operator): opened again when it registers.
  bool away_cordon = false;
  // Registrations with this daemon process (each may bring other GPUs and
  // capabilities).
  uint64_t registrations = 0;
  // Its server's info as last published, and a hash of what it was built
  // from (ServerInputs): an unchanged server's is shared with the next
  // snapshot.
  std::shared_ptr<const rpc::ServerInfo> published;
  uint64_t published_inputs = 0;
  // Its row (ServerRowOf) changed since it was last written: written at the
  // end of the loop's pass, with the rows of the other servers that did
  // (not every server's, which made registering 1,250 agents one after
  // another take 41 s).
  bool row_dirty = false;
};

struct PendingAction {
  core::Action action;
  int64_t dispatched_us = 0;
  // Carried out as a move (checkpoint, transfer, warm start), or a fresh
  // start: the action relocates the job (core::Action::relocates), or its
  // process was lost (a resume or pack), or a start goes on from a
  // checkpoint an agent keeps.
  bool relocate = false;
  double rate_before = 0;  // the job's mini-batch rate when it was taken
  // Sent to an agent by this daemon process (not replayed from the log):
  // its reply will come.
  bool sent = false;
  // A restart from a checkpoint kept at an agent that could not be
  // reached: when (wall clock), for the retry at a report from it.
  int64_t unreached_us = 0;
  // A move concluded (FinishMove): where it left the process is set, and
  // its failure must not reset it.
  bool settled = false;
};

// Where a move left the job's process.
enum class MovedTo { kDestination, kAsBefore, kCheckpointAtSource, kNowhere };

// ListJobs with archived jobs reads them from the store this many at a
// time, and at most kMaxArchivedReadPerPage for one page.
constexpr int kArchivedReadChunk = 1000;
constexpr int64_t kMaxArchivedReadPerPage = 100'000;

// Whether a job in `state` has ended (finished, failed or killed).
inline bool EndState(int state) {
  return state == rpc::FINISHED || state == rpc::FAILED || state == rpc::KILLED;
}

// The one name an fnmatch pattern matches, if it has no wildcard (`\`
// quotes the next character); none for an empty pattern. Like fnmatch, it
// reads the pattern up to a NUL byte.
inline std::optional<std::string> LiteralPattern(const std::string& text) {
  const std::string_view pattern(text.c_str());
  if (pattern.empty()) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '*' || c == '?' || c == '[') return std::nullopt;
    if (c == '\\') {
      if (i + 1 == pattern.size()) return std::nullopt;  // fnmatch's to say
      out.push_back(pattern[++i]);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// A duration as flags take it: "30d", "12h", "90m", "45s", "0.5s".
inline std::string DurationText(double seconds) {
  for (const auto& [unit, n] :
       {std::pair{"w", 604800.0}, std::pair{"d", 86400.0},
        std::pair{"h", 3600.0}, std::pair{"m", 60.0}}) {
    const double q = seconds / n;
    if (q >= 1 && q == std::floor(q)) {
      return std::to_string(static_cast<int64_t>(q)) + unit;
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%gs", seconds);
  return buf;
}

// How long the daemon keeps the GPU-time used by queue and user
// (core::UsageLedger, `gandiva usage`), and how often the last 24 hours'
// by queue (`gandiva queues`) are worked out again for readers.
inline constexpr core::Duration kKeepUsage =
    core::Duration::Seconds(35 * 24 * 3600);
inline constexpr core::Duration kQueueUsageEvery = core::Duration::Seconds(10);

struct Snapshot {
  // The jobs not settled (JobExtra::settled) when it was published, in id
  // order; the others are in Impl::settled_jobs. Without their specs, which
  // never change: readers take them from Impl::specs. An unchanged job's
  // info is shared with the snapshots before (JobExtra::published).
  std::vector<std::pair<int64_t, std::shared_ptr<const rpc::JobInfo>>> jobs;
  const rpc::JobInfo* Find(int64_t id) const {
    auto it = std::lower_bound(
        jobs.begin(), jobs.end(), id,
        [](const auto& entry, int64_t key) { return entry.first < key; });
    return it != jobs.end() && it->first == id ? it->second.get() : nullptr;
  }
  // Every server's info, in id order; an unchanged server's is shared with
  // the snapshots before (AgentConn::published).
  std::vector<std::shared_ptr<const rpc::ServerInfo>> servers;
  // Why the queued jobs wait, as the policy said when this was published
  // (core::Scheduler::ExplainQueue): a queued job's published info without
  // a waiting reason (one in the core, neither held nor waiting to try its
  // start again) has its reason composed from it by the reader. So a
  // job's info does not change when the jobs ahead of it or the free GPUs
  // do (killing the job at the head of a queue of 10,000 would otherwise
  // build every other one's info again); this one summary does.
  std::shared_ptr<const core::QueueReasons> queue;
  // For the metrics.
  core::Counters counters;
  int64_t log_events = 0;
  int64_t last_event_seq = 0;
  int64_t log_appends = 0;
  int64_t compactions = 0;
  double last_compaction_s = 0;
  int64_t jobs_archived = 0;
  int64_t archive_deleted = 0;
  // Every job id ever handed out is below it (core::ClusterState).
  int32_t job_id_limit = 1;
  // The ids of the jobs restores lost (Impl::lost_ids).
  std::shared_ptr<const IdRanges> lost_ids;
  // GPU-seconds used by each queue (JobSpec::vc) over the last 24 hours
  // (core::UsageLedger), worked out at most kQueueUsageEvery before.
  std::shared_ptr<const std::map<std::string, double>> queue_usage_day;
};

// A hash of what a published info is built from (the daemon's
// PublishInputs, ServerInputs); never 0, which says "build it again".
class InputsHash {
 public:
  void Mix(uint64_t v) {
    h_ ^= v + 0x9e3779b97f4a7c15ull + (h_ << 6) + (h_ >> 2);
  }
  uint64_t value() const { return h_ == 0 ? 1 : h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// A job's last metric from an agent's rpc::Progress or rpc::JobExit (the
// same fields) into `to`; nothing when it reported none.
template <typename From>
void CopyMetric(const From& from, rpc::Progress* to) {
  if (from.metric_reports() == 0) return;
  to->set_metric(from.metric());
  to->set_metric_minibatches(from.metric_minibatches());
  to->set_metric_reports(from.metric_reports());
}

// A run that starts from the beginning: the last run's count and metric
// are not its own.
inline void ForgetRunProgress(rpc::Progress* p) {
  p->set_minibatches(0);
  p->set_metric(0);
  p->set_metric_minibatches(0);
  p->set_metric_reports(0);
}

inline std::string HostPortForClients(const std::string& listen, int port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    host = "127.0.0.1";
  }
  return host + ":" + std::to_string(port);
}

}  // namespace gandiva::runtime
