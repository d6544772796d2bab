#include "runtime/scheduler/scheduler_server.h"

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
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/policies/registry.h"
#include "core/scheduler.h"
#include "proto/gandiva.grpc.pb.h"
#include "runtime/scheduler/agent_liveness.h"
#include "runtime/scheduler/dispatcher.h"
#include "runtime/scheduler/etcd_store.h"
#include "runtime/scheduler/event_codec.h"
#include "runtime/scheduler/metrics.h"
#include "runtime/scheduler/store.h"
#include "runtime/tls/tls.h"

namespace gandiva::runtime {

namespace {

using core::ActionKind;
using core::JobId;
using core::JobState;
using core::ServerId;
using nlohmann::json;

int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

grpc::Status ToGrpc(const core::Status& s) {
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
    default:
      return {grpc::StatusCode::INTERNAL, s.ToString()};
  }
}

rpc::JobState ToRpcState(const core::Job& j) {
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

std::string SpecToJson(const rpc::JobSpec& spec) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(spec, &out, o);
  return out;
}

core::JobSpec ToCoreSpec(const rpc::JobSpec& s) {
  core::JobSpec c;
  c.name = s.name();
  c.gpus = s.gpus();
  c.priority = s.priority();
  c.owner = s.owner();
  c.group = s.group();
  c.elastic = s.elastic();
  c.total_minibatches = s.total_minibatches();
  return c;
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
  std::shared_ptr<rpc::Agent::Stub> stub;
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
  std::vector<rpc::Gpu> gpus;
  int32_t sockets = 1;
  int32_t switches_per_socket = 1;
  std::shared_ptr<rpc::Agent::Stub> stub;
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
  // A resume or pack on other GPUs than the job's process is on: carried
  // out as a move (checkpoint, transfer, warm start), or a fresh start.
  bool relocate = false;
  double rate_before = 0;  // the job's mini-batch rate when it was taken
  // Sent to an agent by this daemon process (not replayed from the log):
  // its reply will come.
  bool sent = false;
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
bool EndState(int state) {
  return state == rpc::FINISHED || state == rpc::FAILED || state == rpc::KILLED;
}

// What the waiting reason of a queued job in the queue is judged against,
// gathered once per publication and published with it: readers compose
// that reason (QueueWaitingReason), so that a job's published info does
// not change when the jobs ahead of it or the free GPUs do (killing the
// job at the head of a queue of 10,000 would otherwise build every other
// one's info again).
struct QueueView {
  // The queue's order: by job id - first, the jobs ahead of it (-1: not in
  // the queue). Shared by the snapshots while the queue stays the same.
  struct Order {
    uint64_t version = 0;  // core::ClusterState::queue_version
    int32_t first = 0;
    std::vector<int32_t> ahead;
  };
  std::shared_ptr<const Order> order;
  int Ahead(int64_t id) const {
    if (order == nullptr) return -1;
    const int64_t k = id - order->first;
    return k >= 0 && static_cast<uint64_t>(k) < order->ahead.size()
               ? order->ahead[static_cast<size_t>(k)]
               : -1;
  }
  int open_gpus = 0;  // on servers up and not cordoned
  int free_gpus = 0;  // of those, held by no job
  int most_free_on_one = 0;
  int largest_server = 0;
};

// Why a queued job that needs `need` GPUs, with `ahead` jobs ahead of it
// (-1: not in the queue), does not run yet, when it is neither held nor
// waiting to try its start again.
std::string QueueWaitingReason(int need, int ahead, const QueueView& v) {
  const auto ahead_of_it = [&] {
    if (ahead <= 0) return std::string();
    return "; " + std::to_string(ahead) + " job" +
           (ahead == 1 ? " is" : "s are") + " ahead of it in the queue";
  };
  if (need > v.open_gpus) {
    return "it needs " + std::to_string(need) +
           " GPUs and the open servers have " + std::to_string(v.open_gpus) +
           " in all: it waits for servers to join (or cordoned ones to "
           "open)";
  }
  if (need > v.free_gpus) {
    return "it needs " + std::to_string(need) + " GPUs, " +
           std::to_string(v.free_gpus) +
           (v.free_gpus == 1 ? " is free" : " are free") + ahead_of_it();
  }
  if (need <= v.largest_server && need > v.most_free_on_one) {
    return std::to_string(v.free_gpus) + " GPUs are free, but no server has " +
           std::to_string(need) +
           " free (a job that fits on one server waits for one)" +
           ahead_of_it();
  }
  const std::string a = ahead_of_it();
  return a.empty() ? "placed at the next scheduling pass" : a.substr(2);
}

// The one name an fnmatch pattern matches, if it has no wildcard (`\`
// quotes the next character); none for an empty pattern.
std::optional<std::string> LiteralPattern(const std::string& pattern) {
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
std::string DurationText(double seconds) {
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
  // The queue as it was: a queued job's published info without a waiting
  // reason (one in the core, neither held nor waiting to try its start
  // again) has its reason composed from it.
  std::shared_ptr<const QueueView> queue;
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

std::string HostPortForClients(const std::string& listen, int port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    host = "127.0.0.1";
  }
  return host + ":" + std::to_string(port);
}

}  // namespace

// ------------------------------------------------------------------ Impl

struct SchedulerServer::Impl final : public rpc::Scheduler::Service {
  SchedulerOptions opts;
  std::string policy_name;
  std::string address;
  // Mutual TLS (--tls-*), if configured.
  std::optional<TlsConfig> tls;
  // `<db>.lock`, locked (flock) while this daemon uses the database.
  int lock_fd = -1;

  ~Impl() override {
    if (lock_fd >= 0) ::close(lock_fd);
  }
  std::unique_ptr<Store> store;
  std::unique_ptr<core::Scheduler> sched;

  // --- Owned by the loop thread (and by Start before it runs). ---
  int64_t clock_us = 0;
  // This cluster's id (RegisterAgentReply.cluster_id): set by Open, before
  // the service starts, and never changed.
  std::string cluster_id;
  // The ids of the jobs restores from backups lost (kRestoreLostJobsMeta:
  // RestoreDatabase's, and those agents hold, MarkLostIds): read by Open,
  // added to by MarkLostIds; published with each snapshot.
  std::shared_ptr<const IdRanges> lost_ids = std::make_shared<IdRanges>();
  int64_t next_internal_id = 0;
  std::map<int32_t, JobExtra> extras;  // by job id
  // The jobs of `extras` not settled (those PersistAndPublish publishes),
  // in id order, with their records (extras never drops one, so the
  // pointers hold); and those that became so since the last publication,
  // which merges them in.
  std::vector<std::pair<int32_t, JobExtra*>> unsettled;
  // The queue's order as last published (ViewQueue): built again only when
  // the core's queue changed.
  std::shared_ptr<const QueueView::Order> queue_order;
  std::vector<std::pair<int32_t, JobExtra*>> unsettling;
  // Answers to Call()s, given once what they did is published.
  std::vector<std::function<void()>> answers;
  // The warm StartJob calls of moves under way, by job: a kill cancels the
  // wait for the new process (it may take a minute) instead of queueing
  // behind it. Guarded by warm_mu (executor threads and the loop).
  std::mutex warm_mu;
  std::map<int32_t, grpc::ClientContext*> warm_calls;
  // Moves waiting for the job's first mini-batch after a restart, by job:
  // true once the job was killed (AwaitFirstMinibatch gives up). Guarded
  // by warm_mu.
  std::map<int32_t, bool> first_minibatch_waits;
  std::vector<AgentConn> agents;  // by server id
  std::map<std::string, int32_t> agent_by_name;
  std::map<int64_t, PendingAction> pending;  // by action id
  // Jobs whose StartJob of the daemon's own (RestartAtSource, Relaunch) is
  // under way: an agent's list of jobs may not show it yet.
  std::set<int32_t> restarting;
  // Jobs spanning servers that SaveGangForLeave is saving.
  std::set<int32_t> leave_saving;
  WriteBatch batch;
  // Every server's row is written at the end of the first pass (then only
  // those of AgentConn::row_dirty).
  bool all_server_rows_dirty = true;
  // The last event a snapshot includes (0: none); events logged since.
  int64_t compacted_seq = 0;
  int64_t events_since_compaction = 0;
  int64_t compactions = 0;
  double last_compaction_s = 0;
  // Events a snapshot includes are still in the log: deleted a chunk per
  // loop iteration, so that no iteration holds the loop long.
  bool compacted_events_left = false;
  // When the loop next applies the retention limits (CheckRetention).
  std::chrono::steady_clock::time_point next_retention_check;
  // Archived jobs past --keep-archived-for may be left to delete, a chunk
  // per loop iteration; those deleted this round, and since the start.
  bool archive_prune_left = false;
  int64_t archive_pruned_round = 0;
  int64_t archive_pruned = 0;
  // An event Feed could not log since this was last cleared.
  bool unlogged = false;
  // Events to log and handle together (Defer), each with its time.
  struct Deferred {
    int64_t time_us = 0;
    core::EventBody body;
  };
  std::vector<Deferred> deferred;
  // Events of the batch FlushDeferred hands to the core still to come.
  size_t handling_left = 0;
  // Appends of events to the log by this process (one per batch).
  int64_t log_appends = 0;
  // Jobs whose row is behind in progress alone (PersistAndPublish), and
  // when those rows are written next (Now()).
  std::set<int32_t> progress_behind;
  int64_t progress_write_due_us = 0;
  // The Prometheus endpoint (--metrics-listen), if any.
  std::unique_ptr<MetricsExporter> metrics;

  // --- The queue into the loop. ---
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  bool shutdown_started = false;
  bool stopped = false;
  std::condition_variable stopped_cv;
  std::thread loop;

  std::unique_ptr<Dispatcher> executor;
  std::unique_ptr<grpc::Server> grpc_server;

  std::mutex snap_mu;
  std::shared_ptr<const Snapshot> snap = std::make_shared<Snapshot>();
  // Jobs that ended for good, as last published: a job is added (or
  // updated) here before a snapshot without it is published, and its entry
  // stays when it is looked up again (a snapshot's own entry wins), so a
  // reader finds every job in one of the two. Kept out of the snapshot so
  // that publishing costs the live jobs, not every job ever run.
  std::mutex settled_mu;
  std::map<int64_t, rpc::JobInfo> settled_jobs;  // guarded by settled_mu
  // Per job, its last history line when that was a failure, and how many
  // like it came since (not written: History). GetJob shows the count.
  struct FailureStreak {
    std::string action, detail;
    int64_t first_us = 0, last_us = 0;
    int repeats = 0;
  };
  std::mutex streak_mu;
  std::unordered_map<int32_t, FailureStreak> streaks;  // guarded by streak_mu
  // Every job's spec, from its submission on (guarded by settled_mu): the
  // published JobInfos leave it out, so that publishing does not copy it.
  std::map<int64_t, std::shared_ptr<const rpc::JobSpec>> specs;
  // Every job's submission time (wall clock, us; guarded by settled_mu),
  // sent with its starts and receives (StartJobRequest.submitted_us): with
  // the id, what tells it from another job of that id on an agent.
  std::unordered_map<int32_t, int64_t> submitted_at;
  int64_t SubmittedUs(int32_t id) {
    std::lock_guard lock(settled_mu);
    auto it = submitted_at.find(id);
    return it == submitted_at.end() ? 0 : it->second;
  }
  // A published JobInfo (no spec) with its job's spec, for a reader; and
  // for a queued job whose reason is the queue's (none published: it is
  // in the core, neither held nor waiting to try its start again), that
  // reason as the queue was (`view`).
  rpc::JobInfo WithSpec(const rpc::JobInfo& info,
                        const QueueView* view = nullptr) const {
    rpc::JobInfo out = info;
    auto it = specs.find(info.id());
    if (it != specs.end()) *out.mutable_spec() = *it->second;
    if (view != nullptr && info.state() == rpc::QUEUED &&
        info.submitted_us() != 0 && info.waiting_reason().empty()) {
      out.set_waiting_reason(
          QueueWaitingReason(out.spec().gpus(), view->Ahead(info.id()), *view));
    }
    return out;
  }

  // ------------------------------------------------------------ helpers

  void Log(const std::string& s) const {
    if (opts.verbose)
      std::fprintf(stderr, "gandiva-scheduler: %s\n", s.c_str());
  }
  void Warn(const std::string& s) const {
    std::fprintf(stderr, "gandiva-scheduler: %s\n", s.c_str());
  }

  int64_t Now() {
    clock_us = std::max(clock_us, WallMicros());
    return clock_us;
  }
  // Now() without moving the clock on.
  int64_t NowConst() const { return std::max(clock_us, WallMicros()); }
  int64_t InternalActionId() {
    // Distinct from the core's small action ids and from earlier runs.
    next_internal_id = std::max(next_internal_id + 1, WallMicros());
    return (int64_t{1} << 62) | next_internal_id;
  }

  void Post(std::function<void()> f) {
    std::lock_guard lock(mu);
    if (stopping) return;
    queue.push_back(std::move(f));
    cv.notify_one();
  }

  // Runs `f` on the loop and waits for its answer (nullopt when the daemon
  // shuts down first, or after 60 s).
  template <typename T>
  std::optional<T> Call(std::function<T()> f) {
    auto p = std::make_shared<std::promise<T>>();
    auto fut = p->get_future();
    // Answered once published (LoopMain, after the work at hand): a client
    // reads its own writes, and requests that come together share one
    // publication.
    Post([this, p, f = std::move(f)] {
      auto result = std::make_shared<T>(f());
      answers.push_back([p, result] { p->set_value(std::move(*result)); });
    });
    if (fut.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      return std::nullopt;
    }
    try {
      return fut.get();
    } catch (const std::future_error&) {
      return std::nullopt;  // dropped at shutdown
    }
  }
  static grpc::Status Unavailable() {
    return {grpc::StatusCode::UNAVAILABLE, "the scheduler is shutting down"};
  }

  // The loop's record of a job; whoever looks it up may change it, so it
  // is published again (no longer settled).
  JobExtra* Extra(int32_t job) {
    auto it = extras.find(job);
    if (it == extras.end()) return nullptr;
    if (it->second.settled) {
      it->second.settled = false;
      unsettling.emplace_back(job, &it->second);
    }
    it->second.dirty = true;
    return &it->second;
  }
  // The records of the jobs not settled (the only ones with a process or a
  // checkpoint anywhere), in id order: what a loop over jobs that may have
  // them visits, rather than every job ever run. A copy, so that the loop
  // may look jobs up (Extra) as it goes.
  std::vector<std::pair<int32_t, JobExtra*>> UnsettledJobs() const {
    std::vector<std::pair<int32_t, JobExtra*>> out;
    out.reserve(unsettled.size() + unsettling.size());
    out.insert(out.end(), unsettled.begin(), unsettled.end());
    out.insert(out.end(), unsettling.begin(), unsettling.end());
    std::sort(out.begin() + static_cast<std::ptrdiff_t>(unsettled.size()),
              out.end());
    std::inplace_merge(
        out.begin(),
        out.begin() + static_cast<std::ptrdiff_t>(unsettled.size()), out.end());
    return out;
  }
  const core::ClusterState& st() const { return sched->state(); }
  bool LiveJob(int64_t id) const {
    return id > 0 && id < (int64_t{1} << 31) &&
           st().has_job(JobId(static_cast<int32_t>(id)));
  }

  // The servers a set of cluster GPUs is on, with their local indices, in
  // the order the GPUs first name them (rank order).
  std::vector<Part> Parts(const std::vector<core::GpuId>& gpus) const {
    std::vector<Part> parts;
    const core::Cluster& c = st().cluster();
    for (core::GpuId g : gpus) {
      const ServerId s = c.gpu(g).server;
      auto it = std::find_if(parts.begin(), parts.end(),
                             [s](const Part& p) { return p.server == s; });
      if (it == parts.end()) {
        parts.push_back(Part{s, {}});
        it = parts.end() - 1;
      }
      it->local.push_back(c.gpu(g).local);
    }
    return parts;
  }

  // The agents of a job's parts, for an executor thread; nullopt (and the
  // server in *missing) when one has no connection.
  std::optional<std::vector<PartConn>> Conns(const std::vector<Part>& parts,
                                             std::string* missing) const {
    std::vector<PartConn> conns;
    for (const Part& p : parts) {
      if (std::string away = Away(p.server); !away.empty()) {
        *missing = away;
        return std::nullopt;
      }
      auto stub = StubOf(p.server);
      if (stub == nullptr) {
        *missing =
            "no agent connected for server " + std::to_string(p.server.value);
        return std::nullopt;
      }
      const AgentConn& a = agents[static_cast<size_t>(p.server.value)];
      conns.push_back(PartConn{p, stub, a.name, a.address});
    }
    return conns;
  }

  void History(int32_t job, const std::string& action, bool ok, int64_t took_us,
               const std::string& detail) {
    const int64_t now = Now();
    {
      // A failure just like the job's last line (a policy asking each tick
      // for a suspend an unreachable agent cannot do, say) is counted, not
      // written; the next other line first writes how many there were.
      std::lock_guard lock(streak_mu);
      auto it = streaks.find(job);
      if (it != streaks.end() && !ok && it->second.action == action &&
          it->second.detail == detail) {
        ++it->second.repeats;
        it->second.last_us = now;
        return;
      }
      EndStreakLocked(job);
      if (!ok) streaks[job] = FailureStreak{action, detail, now, now, 0};
    }
    batch.history.push_back(HistoryRow{job, now, action, ok, took_us, detail});
    Log("job " + std::to_string(job) + ": " + action +
        (ok ? " ok" : " FAILED") + (detail.empty() ? "" : " (" + detail + ")"));
  }
  // Writes how often the job's last failure repeated, if it did, and
  // forgets it.
  void EndStreak(int32_t job) {
    std::lock_guard lock(streak_mu);
    EndStreakLocked(job);
  }
  void EndStreakLocked(int32_t job) {
    auto it = streaks.find(job);
    if (it == streaks.end()) return;
    const FailureStreak& f = it->second;
    if (f.repeats > 0) {
      std::string line = StreakLine(f);
      Log("job " + std::to_string(job) + ": " + f.action + " " + line);
      batch.history.push_back(
          HistoryRow{job, f.last_us, f.action, false, 0, std::move(line)});
    }
    streaks.erase(it);
  }
  static std::string StreakLine(const FailureStreak& f) {
    char over[64];
    std::snprintf(over, sizeof over, "%.1f s", (f.last_us - f.first_us) / 1e6);
    return "failed the same way " + std::to_string(f.repeats) + " more time" +
           (f.repeats == 1 ? "" : "s") + " in a row, the last " + over +
           " after the first";
  }

  // ---------------------------------------------------------- the core

  // Logs `body`, hands it to the core and carries out the actions; the
  // events deferred before it are logged in the same transaction and
  // handled first, in the order they came.
  core::Status Feed(core::EventBody body) {
    if (handling_left > 0) {
      // It would be logged after the rest of the batch but handled before
      // it: a recovery would replay another order.
      Warn(std::string("event ") + EventKindName(body) +
           " fed while a batch of logged events is handled");
    }
    deferred.push_back(Deferred{Now(), std::move(body)});
    return FlushDeferred();
  }
  // Feeds `bodies`, in order, logged in one append (with any deferred
  // before them); each one's outcome: the core's, or the store's error for
  // one that could not be logged (and was not handled).
  std::vector<core::Status> FeedTogether(std::vector<core::EventBody> bodies) {
    const size_t n = bodies.size();
    const size_t before = deferred.size();
    for (core::EventBody& b : bodies) {
      deferred.push_back(Deferred{Now(), std::move(b)});
    }
    std::vector<core::Status> each;
    (void)FlushDeferred(&each);
    return std::vector<core::Status>(
        each.begin() + static_cast<std::ptrdiff_t>(before),
        each.begin() + static_cast<std::ptrdiff_t>(before + n));
  }
  // Logs and handles `body` with the next event fed, or at the end of the
  // loop's pass (fed at once when not `together`): profile reports, which
  // come by the thousand a second on a large cluster, and the outcomes of
  // actions, by the thousand at a quantum's switch, share their
  // transactions (a store's commit costs the same for one event or for a
  // hundred).
  void Defer(core::EventBody body, bool together) {
    if (!together) {
      (void)Feed(std::move(body));
      return;
    }
    deferred.push_back(Deferred{Now(), std::move(body)});
  }

  // Logs the deferred events together (see Store::AppendEvents), then
  // hands them to the core in order; returns the last one's outcome (and
  // each one's into `each`). Those that cannot be logged are dropped, not
  // handled.
  core::Status FlushDeferred(std::vector<core::Status>* each = nullptr) {
    if (deferred.empty()) return core::Status::Ok();
    std::vector<Deferred> todo;
    todo.swap(deferred);
    std::vector<EventRow> rows;
    rows.reserve(todo.size());
    for (const Deferred& d : todo) {
      rows.push_back(
          EventRow{0, d.time_us, EventKindName(d.body), EncodeEvent(d.body)});
    }
    size_t logged = 0;
    core::Status error;
    while (logged < rows.size()) {
      Store::Appended a =
          store->AppendEvents(std::span<const EventRow>(rows).subspan(logged));
      logged += a.count;
      if (a.status.ok()) break;
      // etcd out of reach for a moment (electing its own leader, say): the
      // loop waits while this daemon still leads, which it stops doing 2/3
      // of its lease's TTL after its last renewal.
      if (a.status.code() == core::StatusCode::kUnavailable &&
          opts.leadership && opts.leadership->leading()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      error = a.status;
      break;
    }
    if (logged > 0) ++log_appends;
    if (!error.ok()) {
      Warn("cannot log " +
           (todo.size() - logged == 1
                ? std::string("event ") + EventKindName(todo.back().body)
                : std::to_string(todo.size() - logged) + " events") +
           ", not handled: " + error.ToString());
      unlogged = true;
    }
    core::Status last = error;
    if (each != nullptr) each->assign(todo.size(), error);
    for (size_t i = 0; i < logged; ++i) {
      const core::EventBody& body = todo[i].body;
      handling_left = logged - i - 1;
      ++events_since_compaction;
      std::vector<core::Action> actions;
      core::Status s = sched->Handle(
          core::Event{core::Time::FromMicros(todo[i].time_us), body}, actions);
      for (JobId changed : sched->TakeChangedJobs()) (void)Extra(changed.value);
      if (!s.ok())
        Log(std::string(EventKindName(body)) + " refused: " + s.ToString());
      AfterHandle(body, actions, /*live=*/true);
      if (i + 1 == todo.size()) last = s;
      if (each != nullptr) (*each)[i] = s;
    }
    handling_left = 0;
    return last;
  }

  // Daemon bookkeeping after an event; `live` false while replaying the log
  // (the actions were carried out before the crash).
  void AfterHandle(const core::EventBody& body,
                   const std::vector<core::Action>& actions, bool live) {
    if (const auto* arrived = std::get_if<core::JobArrived>(&body)) {
      // Before its first start goes out.
      NoteSubmitted(std::array<int32_t, 1>{arrived->id.value});
    } else if (const auto* f = std::get_if<core::JobFinished>(&body)) {
      if (JobExtra* x = Extra(f->job.value)) x->proc = Proc{};
    } else if (const auto* d = std::get_if<core::ActionDone>(&body)) {
      pending.erase(d->action.value);
    } else if (const auto* fl = std::get_if<core::ActionFailed>(&body)) {
      auto it = pending.find(fl->action.value);
      if (it != pending.end()) {
        const ActionKind k = it->second.action.kind;
        JobExtra* x = Extra(fl->job.value);
        // A failed start leaves no process; a move that failed says
        // itself where it left it (FinishMove), e.g. running where it was
        // when it could not checkpoint.
        if (x != nullptr && !it->second.settled &&
            (k == ActionKind::kStart || it->second.relocate ||
             (k == ActionKind::kPack && it->second.action.launch))) {
          x->proc.exists = false;
        }
        pending.erase(it);
      }
    } else if (const auto* down = std::get_if<core::ServerDown>(&body)) {
      for (auto& [id, x] : extras) {
        if (!x.proc.On(down->id)) continue;
        x.dirty = true;
        if (x.proc.gang() && x.proc.checkpoint && !x.proc.exists &&
            x.proc.server != down->id) {
          // A gang waiting, without processes, for the agent of a part
          // (it saved as that agent stopped): its lead's agent, not the
          // one down, keeps the checkpoint, and the job's next start goes
          // on from it wherever the core places it (Execute).
          x.proc.followers.clear();
          if (live) {
            History(id, "requeue", true, 0,
                    "server " + AgentName(down->id) +
                        ", which it waited for, is down: the job goes back "
                        "to the queue and on from the checkpoint kept on " +
                        AgentName(x.proc.server) + " (mini-batch " +
                        std::to_string(x.kept_at) +
                        ") wherever it is placed next");
          }
          continue;
        }
        if (live && !x.proc.gang() && (x.proc.exists || x.proc.checkpoint)) {
          History(id, "requeue", true, 0,
                  "server " + AgentName(down->id) +
                      " is down: the job goes back to the queue, its " +
                      (x.proc.exists ? "process" : "checkpoint") +
                      " there lost, and starts again wherever it is placed "
                      "next");
        }
        // A gang with a part on the lost server cannot train on: its other
        // parts are stopped (their exits are not the job's end).
        if (live && x.proc.gang() && x.proc.exists) {
          History(id, "kill", true, 0,
                  "the parts of a job spanning server " +
                      std::to_string(down->id.value) + ", which is down");
          KillAt(id, x.proc, InternalActionId());
        }
        x.proc = Proc{};
        x.kept_at = -1;
        x.stopped_us = 0;
      }
    }
    for (const core::Action& a : actions) Execute(a, live);
  }

  void Execute(const core::Action& a, bool live) {
    JobExtra* x = Extra(a.job.value);
    if (x == nullptr) {
      Warn("action for a job without a record: " + std::to_string(a.job.value));
      return;
    }
    const bool resume_like = a.kind == ActionKind::kResume ||
                             (a.kind == ActionKind::kPack && !a.launch);
    switch (a.kind) {
      case ActionKind::kStart:
      case ActionKind::kResume:
      case ActionKind::kPack:
      case ActionKind::kMigrate:
      case ActionKind::kGrow:
      case ActionKind::kShrink: {
        PendingAction p{a, Now(), false, x->progress.minibatch_rate()};
        const Proc old = x->proc;
        const bool moves = a.kind == ActionKind::kMigrate ||
                           a.kind == ActionKind::kGrow ||
                           a.kind == ActionKind::kShrink;
        const std::vector<Part> parts = Parts(a.gpus);
        if (parts.empty()) {
          // No GPUs: the core never asks for that.
          Warn("action without GPUs for job " + std::to_string(a.job.value));
          return;
        }
        // A gang, or a job that becomes one or stops being one, moves as
        // one (MoveGang).
        const bool gang = parts.size() > 1 || old.gang();
        // A start of a job whose checkpoint an agent keeps (a gang's after
        // a server of it went down) moves that checkpoint to the new
        // place and starts from it.
        const bool from_checkpoint =
            a.kind == ActionKind::kStart && old.checkpoint && !old.exists;
        p.relocate = moves || from_checkpoint ||
                     (resume_like && !(old.exists && old.parts() == parts));
        x->proc = Proc::At(parts);
        x->proc.leaving = p.relocate;
        p.sent = live;
        pending[a.id.value] = p;
        if (live) {
          if (!p.relocate) {
            Dispatch(p);
          } else if (gang) {
            MoveGang(p, old);
          } else {
            Move(p, old);
          }
        }
        return;
      }
      case ActionKind::kSuspend:
      case ActionKind::kUnpack: {
        PendingAction& p = pending[a.id.value] =
            PendingAction{a, Now(), false, x->progress.minibatch_rate()};
        p.sent = live;
        if (live) Dispatch(p);
        return;
      }
      case ActionKind::kKill: {
        const Proc old = x->proc;
        x->proc = Proc{};
        if (live) {
          {
            // A move waiting for its warm process gives up now; what it
            // leaves is killed when it concludes (FinishMove).
            std::lock_guard<std::mutex> lock(warm_mu);
            if (auto it = warm_calls.find(a.job.value);
                it != warm_calls.end()) {
              it->second->TryCancel();
            }
            if (auto it = first_minibatch_waits.find(a.job.value);
                it != first_minibatch_waits.end()) {
              it->second = true;
            }
          }
          History(a.job.value, "kill", true, 0, a.reason);
          if (old.exists || old.checkpoint)
            KillAt(a.job.value, old, a.id.value);
        }
        return;
      }
      case ActionKind::kSetPriority:
      case ActionKind::kNone:
        return;
    }
  }

  bool IsEnded(int32_t job) const {
    return !st().has_job(JobId(job)) ||
           core::IsTerminal(st().job(JobId(job)).state);
  }

  // On the loop: the outcome of an action goes into the job's history, and
  // to the core unless it is stale (the job ended or moved on).
  void Conclude(int32_t job, int64_t action, const std::string& what, bool ok,
                int64_t took_us, const std::string& detail, bool permanent) {
    if (metrics) metrics->ObserveMechanism(what, ok, took_us / 1e6);
    const bool current = LiveJob(job) && [&] {
      const core::Job& j = st().job(JobId(job));
      return j.busy() && j.in_flight_id.value == action;
    }();
    const auto took = core::Duration::Micros(took_us);
    std::string line = detail;
    if (current && !ok) {
      (void)Feed(core::ActionFailed{core::ActionId(action), JobId(job), took,
                                    detail, permanent});
      // What the core made of a failed start: a wait, or the job's end.
      const core::Job& after = st().job(JobId(job));
      if (after.state == core::JobState::kFailed && after.start_failures > 0) {
        line += "; the job failed: " + std::to_string(after.start_failures) +
                " starts failed in a row (--start-attempts)";
      } else if (after.awaits_start_retry(st().now())) {
        char wait[32];
        std::snprintf(wait, sizeof wait, "%g s",
                      (after.start_retry_at - st().now()).seconds());
        line += "; start " + std::to_string(after.start_failures) +
                " failed in a row, tried again in " + wait;
        // Where it is not tried first (core: Job::start_failed_on).
        const std::string avoid = StartFailedOn(after, st().cluster());
        if (!avoid.empty()) {
          line += " (away from " + avoid + " if another server has room)";
        }
      }
    }
    History(job, what, ok, took_us, line);
    if (current && ok) {
      StartProbe(job, what, action);
      Defer(core::ActionDone{core::ActionId(action), JobId(job), took},
            opts.log_action_outcomes_together);
    }
  }

  // Posts the outcome of an action back to the loop.
  void Reply(int32_t job, int64_t action, const std::string& what, bool ok,
             int64_t took_us, const std::string& detail) {
    Post([=, this] {
      Conclude(job, action, what, ok, took_us, detail, /*permanent=*/false);
    });
  }

  std::shared_ptr<rpc::Agent::Stub> StubOf(ServerId s) const {
    if (!s.valid() || static_cast<size_t>(s.value) >= agents.size()) {
      return nullptr;
    }
    return agents[static_cast<size_t>(s.value)].stub;
  }
  // The name of the agent of a server that has registered.
  const std::string& AgentName(ServerId s) const {
    return agents[static_cast<size_t>(s.value)].name;
  }
  // A StartJob refused because a process of the job already runs there.
  static bool AlreadyRunsThere(const grpc::Status& s) {
    return s.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
           s.error_message().find("already runs here") != std::string::npos;
  }

  std::unique_ptr<grpc::ClientContext> Ctx() const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::microseconds(static_cast<int64_t>(
                          opts.agent_rpc_timeout_s * 1e6)));
    return ctx;
  }
  // Suspends (or resumes) the job's process at an agent: the agent's time
  // in *took_us and, for a suspend, in *at_boundary whether the job
  // stopped at a mini-batch boundary (not: SIGSTOP wherever it was).
  static grpc::Status SuspendOrResume(rpc::Agent::Stub& stub,
                                      grpc::ClientContext* ctx,
                                      const rpc::JobRequest& req, bool suspend,
                                      int64_t* took_us,
                                      bool* at_boundary = nullptr) {
    if (suspend) {
      rpc::SuspendReply rep;
      grpc::Status s = stub.SuspendJob(ctx, req, &rep);
      *took_us = rep.took_us();
      if (at_boundary != nullptr) *at_boundary = rep.at_boundary();
      return s;
    }
    rpc::ResumeReply rep;
    grpc::Status s = stub.ResumeJob(ctx, req, &rep);
    *took_us = rep.took_us();
    return s;
  }
  static std::string RpcError(const char* call, const grpc::Status& s) {
    return std::string(call) + ": " + s.error_message() + " (code " +
           std::to_string(static_cast<int>(s.error_code())) + ")";
  }

  // From an executor thread: kills the job's process at `server` and has
  // its exit ignored (the daemon stopped it; it is not the job's end). The
  // loop counts the exit to ignore before the agent can report it.
  void KillIgnoringExit(int32_t job, ServerId server, rpc::Agent::Stub& stub,
                        int64_t action_id) {
    Post([this, job, server] {
      if (JobExtra* x = Extra(job)) ++x->ignore_exits[server.value];
    });
    rpc::JobRequest req;
    req.set_job_id(job);
    req.set_action_id(action_id);
    rpc::KillReply rep;
    auto ctx = Ctx();
    (void)stub.KillJob(ctx.get(), req, &rep);
  }

  // Kills a process the daemon no longer wants (fire and forget); a gang's
  // parts on every server.
  void KillAt(int32_t job, const Proc& where, int64_t action_id) {
    for (const Part& f : where.followers) {
      KillAt(job, Proc{f.server, f.local, true}, InternalActionId());
    }
    auto stub = StubOf(where.server);
    if (stub == nullptr) return;
    executor->Run(job, [this, stub, job, action_id] {
      rpc::JobRequest req;
      req.set_job_id(job);
      req.set_action_id(action_id);
      rpc::KillReply rep;
      auto ctx = Ctx();
      grpc::Status s = stub->KillJob(ctx.get(), req, &rep);
      if (!s.ok())
        Log("job " + std::to_string(job) + ": " + RpcError("KillJob", s));
    });
  }

  // Carries out a start, a resume or a suspend at the agent where x.proc
  // says the job's process is (moves are Move()'s).
  void Dispatch(const PendingAction& p) {
    const core::Action& a = p.action;
    JobExtra& x = *Extra(a.job.value);
    const int32_t job = a.job.value;
    const int64_t aid = a.id.value;
    const std::string what(core::ActionKindName(a.kind));
    const bool starts = a.kind == ActionKind::kStart || p.relocate ||
                        (a.kind == ActionKind::kPack && a.launch);
    const bool suspends =
        a.kind == ActionKind::kSuspend || a.kind == ActionKind::kUnpack;
    if (suspends && !x.proc.exists) {
      Reply(job, aid, what, true, 0,
            x.proc.checkpoint
                ? "no process to stop; it resumes from the checkpoint kept "
                  "on " +
                      AgentName(x.proc.server)
                : "no process to stop; it restarts afresh");
      return;
    }
    if (x.proc.gang()) {
      DispatchGang(p, starts, suspends);
      return;
    }
    if (std::string away = Away(x.proc.server); !away.empty()) {
      Reply(job, aid, what, false, 0, away);
      return;
    }
    auto stub = StubOf(x.proc.server);
    if (stub == nullptr) {
      Reply(job, aid, what, false, 0,
            "no agent connected for server " +
                std::to_string(x.proc.server.value));
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto took = [t0] {
      return std::chrono::duration_cast<std::chrono::microseconds>(
                 std::chrono::steady_clock::now() - t0)
          .count();
    };
    if (starts) {
      // A relocation reaches here only for a lost process (Lost()); the
      // others are moves (Move()).
      std::string detail = "gpus " + json(x.proc.local).dump();
      if (p.relocate) {
        detail += "; restarted from scratch (its process was lost)";
      }
      rpc::StartJobRequest req;
      req.set_job_id(job);
      req.set_submitted_us(SubmittedUs(job));
      req.set_action_id(aid);
      *req.mutable_spec() = x.spec;
      for (int32_t g : x.proc.local) req.add_gpus(g);
      const int64_t stray_kill_id = InternalActionId();
      const int64_t retry_id = InternalActionId();
      const ServerId start_server = x.proc.server;
      executor->Run(job, [=, this]() mutable {
        rpc::StartJobReply rep;
        auto ctx = Ctx();
        grpc::Status s = stub->StartJob(ctx.get(), req, &rep);
        if (AlreadyRunsThere(s)) {
          // A process of this job the daemon lost track of (a start whose
          // reply was lost in a crash): the daemon wants a new one here.
          KillIgnoringExit(job, start_server, *stub, stray_kill_id);
          rep.Clear();
          auto ctx2 = Ctx();
          req.set_action_id(retry_id);
          s = stub->StartJob(ctx2.get(), req, &rep);
          detail += "; replaced a stray process of the job";
        }
        if (s.ok()) {
          Reply(job, aid, what, true,
                rep.took_us() > 0 ? rep.took_us() : took(), detail);
        } else {
          Reply(job, aid, what, false, took(), RpcError("StartJob", s));
        }
      });
      return;
    }
    rpc::JobRequest req;
    req.set_job_id(job);
    req.set_action_id(aid);
    executor->Run(job, [=, this] {
      auto ctx = Ctx();
      int64_t agent_took = 0;
      std::string detail;
      bool at_boundary = false;
      grpc::Status s = SuspendOrResume(*stub, ctx.get(), req, suspends,
                                       &agent_took, &at_boundary);
      // Jobs with the library stop at a mini-batch boundary; others are
      // stopped wherever they are (SIGSTOP).
      if (suspends) detail = at_boundary ? "at boundary" : "not at boundary";
      // The process is already where the action wants it (a call of an
      // earlier daemon life got there first): done.
      if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
          s.error_message().find(suspends ? "already suspended"
                                          : "is not suspended") !=
              std::string::npos) {
        s = grpc::Status::OK;
        agent_took = 0;
        detail = suspends ? "already suspended" : "already running";
      }
      if (s.ok()) {
        Reply(job, aid, what, true, agent_took > 0 ? agent_took : took(),
              detail);
      } else {
        Reply(job, aid, what, false, took(),
              RpcError(suspends ? "SuspendJob" : "ResumeJob", s));
      }
    });
  }

  // Posts the outcome of a move back to the loop: where the process is now,
  // the history line, and the event for the core.
  void FinishMove(int32_t job, int64_t action, const std::string& what, bool ok,
                  bool permanent, int64_t took_us, const std::string& detail,
                  MovedTo moved, Proc from) {
    Post([=, this]() mutable {
      JobExtra* x = Extra(job);
      if (x == nullptr) return;
      const auto pit = pending.find(action);
      const bool current = pit != pending.end();
      if (current) {
        pit->second.settled = true;
        switch (moved) {
          case MovedTo::kDestination:
            x->proc.exists = true;
            x->proc.leaving = false;
            x->proc.checkpoint = false;
            break;
          case MovedTo::kAsBefore:
            x->proc = from;
            x->proc.exists = true;
            x->proc.checkpoint = x->proc.leaving = false;
            break;
          case MovedTo::kCheckpointAtSource:
            x->proc = from.CheckpointOnly();
            break;
          case MovedTo::kNowhere:
            x->proc = Proc{};
            break;
        }
      }
      // Killed while it moved: the kill went to the destination; what the
      // move left at the source goes too.
      if (IsEnded(job) && (moved == MovedTo::kAsBefore ||
                           moved == MovedTo::kCheckpointAtSource)) {
        x->proc = Proc{};
        KillAt(job, from, InternalActionId());
      }
      Conclude(job, action, what, ok, took_us, detail, permanent);
      // The core takes a failed migrate (grow, shrink) back to the GPUs the
      // job had, running; its process is gone and its checkpoint is at the
      // source: it restarts there from it.
      if (current && moved == MovedTo::kCheckpointAtSource && LiveJob(job) &&
          st().job(JobId(job)).state == core::JobState::kRunning &&
          !x->proc.exists && x->proc.checkpoint &&
          x->proc.server == from.server) {
        RestartAtSource(job, from, "the move failed");
      }
    });
  }

  // After a move failed once the job had checkpointed, or when an agent
  // that kept a job's checkpoint is back (`why`, for the history): starts
  // it again where it was, from the checkpoint its agent kept
  // (resume_local). The process counts as there from now on: an action
  // that comes meanwhile (a suspend, a kill, another move) is queued behind
  // the start (the executor runs one job's calls in order) and acts on it.
  // With `saved` (the mini-batch of the checkpoint; -1: unknown) the
  // history line also says when the job trained its first mini-batch past
  // it, and with `paused_since_us` (wall clock) how long it had not
  // trained.
  void RestartAtSource(int32_t job, const Proc& from, const std::string& why,
                       int64_t saved = -1, int64_t paused_since_us = 0) {
    JobExtra* x = Extra(job);
    if (from.gang()) {
      RestartGangAtSource(job, from);
      return;
    }
    auto stub = StubOf(from.server);
    if (x == nullptr || stub == nullptr) return;
    if (!Away(from.server).empty()) {
      // Its agent is away: the job waits for it there, and Reconcile
      // restarts it from the checkpoint when it is back.
      x->proc = from.CheckpointOnly();
      return;
    }
    x->proc = Proc{from.server, from.local, true, false, false};
    restarting.insert(job);
    rpc::StartJobRequest req;
    req.set_job_id(job);
    req.set_submitted_us(SubmittedUs(job));
    req.set_action_id(InternalActionId());
    *req.mutable_spec() = x->spec;
    for (int32_t g : from.local) req.add_gpus(g);
    req.set_resume_local(true);
    const std::string name = AgentName(from.server);
    executor->Run(job, [=, this] {
      const auto t0 = std::chrono::steady_clock::now();
      rpc::StartJobReply rep;
      auto ctx = Ctx();
      grpc::Status s = stub->StartJob(ctx.get(), req, &rep);
      const int64_t took =
          std::chrono::duration_cast<std::chrono::microseconds>(
              std::chrono::steady_clock::now() - t0)
              .count();
      // A start of this daemon's that the agent's list had not shown yet
      // got there first: the job runs there.
      const bool already = AlreadyRunsThere(s);
      if (already) s = grpc::Status::OK;
      std::string cost;
      if (s.ok() && saved >= 0) {
        const int64_t first = AwaitFirstMinibatch(
            job, PartConn{Part{from.server, from.local}, stub, name, ""}, saved,
            t0);
        cost = first >= 0
                   ? "; first mini-batch " + Ms(first) + " after the start"
                   : "; no mini-batch within a minute of the start";
        if (first >= 0 && paused_since_us > 0) {
          cost += "; training paused " + Ms(WallMicros() - paused_since_us) +
                  " since its agent reported its stop";
        }
      }
      Post([=, this] {
        restarting.erase(job);
        JobExtra* y = Extra(job);
        if (y == nullptr) return;
        if (!s.ok()) {
          const bool ours = y->proc.exists && y->proc.server == from.server &&
                            !y->proc.gang();
          if (ours) y->proc.exists = false;
          const core::Job* j = LiveJob(job) ? &st().job(JobId(job)) : nullptr;
          const bool can_wait = ours && !IsEnded(job) && j != nullptr &&
                                j->state == JobState::kRunning && !j->busy();
          const bool unreachable =
              s.error_code() == grpc::StatusCode::UNAVAILABLE ||
              s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
          std::string then;
          if (can_wait && unreachable) {
            // The agent went away again: the job waits for it with its
            // checkpoint (restarted from it at its next registration, or
            // placed again if its server is declared down).
            y->proc.checkpoint = true;
            then = "; it waits for the agent, with its checkpoint";
          } else if (can_wait) {
            // The agent could not start it from its checkpoint (gone,
            // unreadable): it starts afresh there rather than fail.
            y->proc.checkpoint = false;
            then = "; it starts again from the beginning";
          }
          History(job, "restart", false, took,
                  "on " + name + " from the checkpoint kept there: " +
                      RpcError("StartJob", s) + then);
          if (can_wait && !unreachable) {
            Relaunch(job);
          } else if (!can_wait && !IsEnded(job)) {
            (void)Feed(core::JobFinished{JobId(job), false});
          }
          return;
        }
        // Killed or moved on meanwhile: that action, queued behind this
        // start, dealt with the process.
        History(job, "restart", true, took,
                "on " + name + " from the checkpoint kept there (" + why + ")" +
                    (already ? "; it was already running there" : "") + cost);
      });
    });
  }

  // ------------------------------------------------------------ gangs
  //
  // A job whose GPUs span servers runs one part per server, each a
  // launcher of the ranks on that server's GPUs (StartJobRequest.gang). The
  // lead's part holds rank 0, which alone talks to its agent: a suspend
  // stops it at a mini-batch boundary (the other ranks then wait in their
  // next collective) and then stops the other parts where they wait; a
  // resume continues them first. A gang moves (migrate, resize, a resume
  // or pack elsewhere, and into or out of being a gang) by restarting
  // every part from the one checkpoint rank 0 saves at the lead's agent,
  // copied to each other part's agent first.

  // Action ids for the agent calls of one piece of executor work, drawn on
  // the loop: agents answer a repeated id with the first call's result.
  struct Ids {
    std::vector<int64_t> ids;
    size_t next = 0;
    int64_t operator()() {
      // Sized for the most calls the work makes; past that, ids beyond the
      // last one drawn (still above every id of an earlier daemon).
      if (next < ids.size()) return ids[next++];
      return ids.back() + static_cast<int64_t>(++next - ids.size());
    }
  };
  Ids TakeIds(size_t n) {
    Ids r;
    for (size_t i = 0; i < n; ++i) r.ids.push_back(InternalActionId());
    // The fallback above must not reach the next id drawn.
    next_internal_id += static_cast<int64_t>(n) + 64;
    return r;
  }

  static int64_t UsSince(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::steady_clock::now() - t)
        .count();
  }

  static std::string Placement(const std::vector<PartConn>& parts) {
    std::string s = "gpus ";
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i > 0) s += " + ";
      s += json(parts[i].part.local).dump() + " on " + parts[i].name;
    }
    return s;
  }

  // Executor thread: continues (`resume`) or stops again every part of a
  // suspended gang but its lead's, for the lead's checkpoint (which needs
  // all its ranks) or after it failed.
  void ContinueOrStopFollowers(int32_t job, const std::vector<PartConn>& parts,
                               Ids& ids, bool resume) {
    for (size_t i = 1; i < parts.size(); ++i) {
      rpc::JobRequest req;
      req.set_job_id(job);
      req.set_action_id(ids());
      auto ctx = Ctx();
      if (resume) {
        rpc::ResumeReply rep;
        (void)parts[i].stub->ResumeJob(ctx.get(), req, &rep);
      } else {
        rpc::SuspendReply rep;
        (void)parts[i].stub->SuspendJob(ctx.get(), req, &rep);
      }
    }
  }

  // Executor thread: stops the job's process at a part (its exit comes
  // marked killed, not the job's end); keep_checkpoint leaves the
  // checkpoint that agent holds, else it goes too.
  void KillPart(int32_t job, const PartConn& c, int64_t id,
                bool keep_checkpoint) {
    rpc::JobRequest req;
    req.set_job_id(job);
    req.set_action_id(id);
    req.set_keep_checkpoint(keep_checkpoint);
    rpc::KillReply rep;
    auto ctx = Ctx();
    (void)c.stub->KillJob(ctx.get(), req, &rep);
  }

  // Executor thread: after a restart from a checkpoint taken at mini-batch
  // `saved`, polls the agent of the job's rank 0 until its process there
  // has trained past it. Returns the time since `since`, or -1 when that
  // did not happen within a minute, the process went away, or the job was
  // killed meanwhile.
  int64_t AwaitFirstMinibatch(int32_t job, const PartConn& lead, int64_t saved,
                              std::chrono::steady_clock::time_point since) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    {
      std::lock_guard<std::mutex> lock(warm_mu);
      first_minibatch_waits[job] = false;
    }
    int64_t result = -1;
    while (std::chrono::steady_clock::now() < end) {
      {
        std::lock_guard<std::mutex> lock(warm_mu);
        if (first_minibatch_waits[job]) break;
      }
      rpc::AgentStatusReply rep;
      auto ctx = Ctx();
      if (lead.stub->Status(ctx.get(), rpc::AgentStatusRequest(), &rep).ok()) {
        const auto it = std::find_if(
            rep.jobs().begin(), rep.jobs().end(),
            [job](const rpc::AgentJob& j) { return j.job_id() == job; });
        if (it == rep.jobs().end()) break;  // it exited
        if (it->progress().minibatches() > saved) {
          result = UsSince(since);
          break;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::lock_guard<std::mutex> lock(warm_mu);
    first_minibatch_waits.erase(job);
    return result;
  }

  // The host part of an agent's address ("host:port", "[v6]:port").
  static std::string HostOf(const std::string& address) {
    return address.substr(0, address.rfind(':'));
  }
  static bool IsLoopback(const std::string& host) {
    return host.rfind("127.", 0) == 0 || host == "localhost" ||
           host == "[::1]" || host == "::1";
  }
  // Why the other parts could not reach the ranks' meeting point at the
  // lead ("" if they can, as far as the addresses say): a lead agent
  // registered with a loopback address while a part's agent is elsewhere.
  static std::string UnreachableLead(const std::vector<PartConn>& parts) {
    const std::string lead = HostOf(parts[0].address);
    if (!IsLoopback(lead)) return "";
    for (size_t i = 1; i < parts.size(); ++i) {
      if (!IsLoopback(HostOf(parts[i].address))) {
        return "the job spans servers and its rank 0 would be on " +
               parts[0].name +
               ", whose agent registered with the loopback "
               "address " +
               parts[0].address + ": the ranks on " + parts[i].name + " (" +
               parts[i].address +
               ") could not reach it; start that agent with --advertise-host";
      }
    }
    return "";
  }

  // Executor thread: starts the job's parts in rank order, the lead first
  // (its agent picks the port the ranks meet at); resume_local: each from
  // the checkpoint its agent holds. One part alone is a plain start. On a
  // failure the parts started are stopped again, their checkpoints kept.
  bool StartParts(int32_t job, const rpc::JobSpec& spec,
                  const std::vector<PartConn>& parts, bool resume_local,
                  Ids& ids, std::string* err) {
    if (std::string why = UnreachableLead(parts); !why.empty()) {
      *err = why;
      return false;
    }
    int32_t world = 0;
    for (const PartConn& c : parts) {
      world += static_cast<int32_t>(c.part.local.size());
    }
    const std::string host = HostOf(parts[0].address);
    int32_t port = 0;
    int32_t offset = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const PartConn& c = parts[i];
      rpc::StartJobRequest req;
      req.set_job_id(job);
      req.set_submitted_us(SubmittedUs(job));
      req.set_action_id(ids());
      *req.mutable_spec() = spec;
      for (int32_t g : c.part.local) req.add_gpus(g);
      req.set_resume_local(resume_local);
      if (parts.size() > 1) {
        rpc::Gang* g = req.mutable_gang();
        g->set_nodes(static_cast<int32_t>(parts.size()));
        g->set_node_rank(static_cast<int32_t>(i));
        g->set_world_size(world);
        g->set_rank_offset(offset);
        g->set_master_addr(host);
        g->set_master_port(port);
      }
      offset += static_cast<int32_t>(c.part.local.size());
      rpc::StartJobReply rep;
      auto ctx = Ctx();
      grpc::Status s = c.stub->StartJob(ctx.get(), req, &rep);
      if (AlreadyRunsThere(s)) {
        // A process of the job that lingers there (a part that was being
        // stopped, a start whose reply was lost): the new one replaces it.
        KillPart(job, c, ids(), /*keep_checkpoint=*/true);
        rep.Clear();
        auto ctx2 = Ctx();
        req.set_action_id(ids());
        s = c.stub->StartJob(ctx2.get(), req, &rep);
      }
      if (s.ok() && i == 0 && parts.size() > 1) {
        port = rep.master_port();
        if (port <= 0) {
          s = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                           "the agent did not say which port the ranks "
                           "meet at (it does not run multi-server jobs)");
          KillPart(job, c, ids(), /*keep_checkpoint=*/true);
        }
      }
      if (!s.ok()) {
        *err = (parts.size() > 1
                    ? "part " + std::to_string(i) + " on " + c.name + ": "
                    : std::string()) +
               RpcError("StartJob", s);
        for (size_t k = 0; k < i; ++k) {
          KillPart(job, parts[k], ids(), /*keep_checkpoint=*/true);
        }
        return false;
      }
    }
    return true;
  }

  // Executor thread: each part not on the source's server receives the
  // checkpoint the source holds (held there for StartParts(resume_local)),
  // all at once (each pull is its own offer at the source). *summary: the
  // slowest transfer, bytes and channel ("" if none); *err: the first part
  // that failed.
  bool Distribute(int32_t job, const PartConn& source,
                  const std::vector<PartConn>& parts, Ids& ids,
                  std::string* err, std::string* summary) {
    struct Pull {
      const PartConn* to;
      int64_t id;
      bool lead;
      grpc::Status status;
      rpc::ReceiveCheckpointReply reply;
    };
    std::vector<Pull> pulls;
    for (const PartConn& c : parts) {
      if (c.part.server == source.part.server) continue;
      pulls.push_back(Pull{&c, ids(), &c == &parts[0], {}, {}});
    }
    std::vector<std::thread> threads;
    for (Pull& p : pulls) {
      threads.emplace_back([&, job] {
        rpc::ReceiveCheckpointRequest req;
        req.set_job_id(job);
        req.set_submitted_us(SubmittedUs(job));
        req.set_action_id(p.id);
        req.set_source_address(source.address);
        // The job's log so far goes to its new lead only.
        req.set_without_log(!p.lead);
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(300));
        p.status = p.to->stub->ReceiveCheckpoint(&ctx, req, &p.reply);
      });
    }
    for (std::thread& t : threads) t.join();
    int64_t slowest = -1;
    int64_t bytes = 0;
    std::string channel;
    for (const Pull& p : pulls) {
      if (!p.status.ok()) {
        *err =
            "to " + p.to->name + ": " + RpcError("ReceiveCheckpoint", p.status);
        return false;
      }
      bytes = p.reply.bytes();
      if (p.reply.transfer_us() > slowest) {
        slowest = p.reply.transfer_us();
        channel = p.reply.channel();
      }
    }
    summary->clear();
    const size_t n = pulls.size();
    if (n > 0) {
      *summary = "transfer to " + std::to_string(n) +
                 (n == 1 ? " server " : " servers at once, the slowest ") +
                 Ms(slowest) + " (" + Mb(bytes) + Rate(bytes, slowest) +
                 (channel.empty() ? "" : " over " + channel) + ")";
    }
    return true;
  }

  // A start, suspend or resume of a gang where x.proc says its parts are.
  void DispatchGang(const PendingAction& p, bool starts, bool suspends) {
    const core::Action& a = p.action;
    JobExtra& x = *Extra(a.job.value);
    const int32_t job = a.job.value;
    const int64_t aid = a.id.value;
    const std::string what(core::ActionKindName(a.kind));
    std::string missing;
    auto conns = Conns(x.proc.parts(), &missing);
    if (!conns) {
      Reply(job, aid, what, false, 0, missing);
      return;
    }
    const rpc::JobSpec spec = x.spec;
    const bool relocated = p.relocate;
    Ids ids = TakeIds(4 * conns->size() + 4);
    executor->Run(job, [=, this]() mutable {
      const auto t0 = std::chrono::steady_clock::now();
      if (starts) {
        std::string err;
        const bool ok = StartParts(job, spec, *conns, false, ids, &err);
        Reply(job, aid, what, ok, UsSince(t0),
              ok ? Placement(*conns) +
                       (relocated
                            ? "; restarted from scratch (its process was lost)"
                            : "")
                 : err);
        return;
      }
      std::vector<PartConn> order = *conns;
      if (!suspends) std::reverse(order.begin(), order.end());
      bool at_boundary = false;
      for (const PartConn& c : order) {
        rpc::JobRequest req;
        req.set_job_id(job);
        req.set_action_id(ids());
        auto ctx = Ctx();
        grpc::Status s;
        if (suspends) {
          rpc::SuspendReply rep;
          s = c.stub->SuspendJob(ctx.get(), req, &rep);
          if (c.part.server == (*conns)[0].part.server) {
            at_boundary = rep.at_boundary();
          }
        } else {
          rpc::ResumeReply rep;
          s = c.stub->ResumeJob(ctx.get(), req, &rep);
        }
        if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
            s.error_message().find(suspends ? "already suspended"
                                            : "is not suspended") !=
                std::string::npos) {
          s = grpc::Status::OK;
        }
        if (!s.ok()) {
          Reply(job, aid, what, false, UsSince(t0),
                "part on " + c.name + ": " +
                    RpcError(suspends ? "SuspendJob" : "ResumeJob", s));
          return;
        }
      }
      const std::string n = std::to_string(conns->size()) + " parts";
      Reply(job, aid, what, true, UsSince(t0),
            suspends ? (at_boundary ? "at boundary, " : "not at boundary, ") + n
                     : n);
    });
  }

  // A gang whose part was lost while the core believes it runs: every
  // part starts afresh where it is placed.
  void RelaunchGang(int32_t id) {
    JobExtra& x = *Extra(id);
    std::string missing;
    auto conns = Conns(x.proc.parts(), &missing);
    if (!conns) return;  // its agent's return settles it
    x.proc.exists = true;
    const rpc::JobSpec spec = x.spec;
    Ids ids = TakeIds(4 * conns->size() + 4);
    executor->Run(id, [=, this]() mutable {
      const auto t0 = std::chrono::steady_clock::now();
      std::string err;
      const bool ok = StartParts(id, spec, *conns, false, ids, &err);
      const int64_t took = UsSince(t0);
      Post([=, this] {
        History(id, "restart", ok, took,
                ok ? "relaunched every part afresh (" + Placement(*conns) +
                         ") after one was lost"
                   : err);
        if (!ok && !IsEnded(id)) {
          Extra(id)->proc.exists = false;
          (void)Feed(core::JobFinished{JobId(id), false});
        }
      });
    });
  }

  // An agent with a part of this job spanning servers stops (Leave; it
  // serves on until its own jobs have saved): rank 0 saves the job's
  // checkpoint at the lead's agent and every rank exits, as for a move;
  // the job then waits, placed where it was, for the agent to be back
  // (Reconcile restarts every part from that checkpoint) or to be declared
  // down. Without this the ranks left on the other servers fail when
  // their peers go, and the job with them. True when the save is under way
  // (the agent waits for its part to exit).
  bool SaveGangForLeave(int32_t id, JobExtra& x, const AgentConn& a) {
    if (!x.proc.gang() || !x.proc.exists || x.proc.leaving ||
        !x.proc.On(a.id) || IsEnded(id) || !x.progress.uses_library()) {
      return false;
    }
    const core::Job& j = st().job(JobId(id));
    if (j.busy()) return false;  // that action's outcome decides
    std::string missing;
    auto conns = Conns(x.proc.parts(), &missing);
    if (!conns) return false;
    const Proc from = x.proc;
    x.proc.leaving = true;
    leave_saving.insert(id);
    const bool was_suspended = j.state == JobState::kSuspended;
    const std::string name = a.name;
    Ids ids = TakeIds(4 * conns->size() + 4);
    executor->Run(id, [=, this]() mutable {
      const auto t0 = std::chrono::steady_clock::now();
      auto each_follower = [&](bool resume) {
        ContinueOrStopFollowers(id, *conns, ids, resume);
      };
      // A suspended gang's other parts take part in the save.
      if (was_suspended) each_follower(/*resume=*/true);
      rpc::CheckpointRequest req;
      req.set_job_id(id);
      req.set_action_id(ids());
      rpc::CheckpointReply rep;
      auto ctx = Ctx();
      const grpc::Status s =
          (*conns)[0].stub->CheckpointJob(ctx.get(), req, &rep);
      if (s.ok()) {
        // The other parts left with rank 0; any that lingers is stopped.
        for (size_t i = 1; i < conns->size(); ++i) {
          KillPart(id, (*conns)[i], ids(), /*keep_checkpoint=*/false);
        }
      } else if (was_suspended) {
        each_follower(/*resume=*/false);
      }
      const int64_t took = UsSince(t0);
      Post([=, this] {
        leave_saving.erase(id);
        JobExtra* y = Extra(id);
        if (y == nullptr) return;
        y->proc.leaving = false;
        if (!s.ok()) {
          History(id, "stop", false, took,
                  "agent '" + name +
                      "' stops, and the job, spanning servers, could not "
                      "save a checkpoint: " +
                      RpcError("CheckpointJob", s));
          return;
        }
        if (IsEnded(id)) {
          y->proc = Proc{};
          KillAt(id, from, InternalActionId());
          return;
        }
        y->proc = from.CheckpointOnly();
        y->kept_at = rep.minibatches();
        y->stopped_us = Now();
        if (rep.minibatches() > 0) {
          y->progress.set_minibatches(rep.minibatches());
        }
        y->progress.set_minibatch_rate(0);
        History(id, "stop", true, took,
                "agent '" + name +
                    "' stopped; the job, spanning servers, saved a "
                    "checkpoint at mini-batch " +
                    std::to_string(rep.minibatches()) + " (" + rep.method() +
                    ", " + Mb(rep.bytes()) + "), kept on " + (*conns)[0].name +
                    ": every part goes on from it when the agent is back");
      });
    });
    return true;
  }

  // After a gang's move failed once it had checkpointed: every part starts
  // again where it was, from the checkpoint the lead's agent kept.
  // With `saved` and `paused_since_us`, as RestartAtSource's.
  void RestartGangAtSource(int32_t job, const Proc& from,
                           const std::string& why = "the move failed",
                           int64_t saved = -1, int64_t paused_since_us = 0) {
    JobExtra* x = Extra(job);
    if (x == nullptr) return;
    if (AnyPartAway(from)) {
      // A part's agent is away: the job waits for it, and Reconcile
      // restarts every part when the last of them is back.
      x->proc = from.CheckpointOnly();
      return;
    }
    std::string missing;
    auto conns = Conns(from.parts(), &missing);
    if (!conns) {
      History(job, "restart", false, 0, missing);
      if (!IsEnded(job)) (void)Feed(core::JobFinished{JobId(job), false});
      return;
    }
    x->proc = from;
    x->proc.exists = true;
    x->proc.checkpoint = x->proc.leaving = false;
    const rpc::JobSpec spec = x->spec;
    Ids ids = TakeIds(6 * conns->size() + 4);
    executor->Run(job, [=, this]() mutable {
      const auto t0 = std::chrono::steady_clock::now();
      std::string err, transfer;
      const bool ok =
          Distribute(job, (*conns)[0], *conns, ids, &err, &transfer) &&
          StartParts(job, spec, *conns, true, ids, &err);
      const int64_t took = UsSince(t0);
      std::string cost;
      if (ok && saved >= 0) {
        const int64_t first = AwaitFirstMinibatch(job, (*conns)[0], saved, t0);
        cost = first >= 0
                   ? "; first mini-batch " + Ms(first) + " after the restart"
                   : "; no mini-batch within a minute of the restart";
        if (first >= 0 && paused_since_us > 0) {
          cost += "; training paused " + Ms(WallMicros() - paused_since_us) +
                  " since it saved";
        }
      }
      Post([=, this] {
        JobExtra* y = Extra(job);
        if (y == nullptr) return;
        if (!ok) {
          History(job, "restart", false, took,
                  Placement(*conns) + " from the checkpoint kept on " +
                      (*conns)[0].name + ": " + err);
          if (y->proc.exists && y->proc.server == from.server) {
            y->proc.exists = false;
          }
          if (!IsEnded(job)) (void)Feed(core::JobFinished{JobId(job), false});
          return;
        }
        History(job, "restart", true, took,
                Placement(*conns) + " from the checkpoint kept on " +
                    (*conns)[0].name + " (" + why + ")" +
                    (transfer.empty() ? "" : "; " + transfer) + cost);
      });
    });
  }

  // Carries out a move of a gang, or of a job that becomes one or stops
  // being one, from `from` to where x.proc now says: rank 0 saves at a
  // mini-batch boundary and every rank exits (CheckpointJob at the lead;
  // a suspended gang's other parts are continued first so that they can
  // take part); the other parts that remain are stopped; each new part's
  // agent receives the checkpoint from the lead's; every part starts from
  // it. No warm start: the parts must meet afresh at the new lead anyway.
  void MoveGang(const PendingAction& p, const Proc& from) {
    const core::Action& a = p.action;
    JobExtra& x = *Extra(a.job.value);
    const int32_t job = a.job.value;
    const int64_t aid = a.id.value;
    const std::string what(core::ActionKindName(a.kind));
    const bool resize =
        a.kind == ActionKind::kGrow || a.kind == ActionKind::kShrink;
    const bool was_suspended = a.kind == ActionKind::kResume ||
                               (a.kind == ActionKind::kPack && !a.launch);
    const bool fresh_fallback = was_suspended;
    const bool has_source = from.exists || from.checkpoint;
    std::string missing;
    auto dst = Conns(x.proc.parts(), &missing);
    std::optional<std::vector<PartConn>> src =
        has_source
            ? Conns(from.parts(), &missing)
            : std::optional<std::vector<PartConn>>(std::vector<PartConn>{});
    if (!dst || !src) {
      FinishMove(job, aid, what, false, false, 0, missing,
                 from.exists ? MovedTo::kAsBefore : MovedTo::kNowhere, from);
      return;
    }
    const bool library = x.progress.uses_library();
    // A checkpoint kept without a process: the mini-batch it was saved at.
    const int64_t kept_at = from.exists ? -1 : x.kept_at;
    int32_t world = 0;
    for (const PartConn& c : *dst) {
      world += static_cast<int32_t>(c.part.local.size());
    }
    const rpc::JobSpec spec = x.spec;
    const std::string where =
        has_source ? "from " + Placement(*src) + " to " + Placement(*dst)
                   : Placement(*dst);
    Ids ids = TakeIds(8 * (dst->size() + src->size()) + 8);
    executor->Run(job, [=, this]() mutable {
      const auto t0 = std::chrono::steady_clock::now();
      std::string err;
      // Nothing to carry over: every part starts afresh.
      auto fresh = [&](const std::string& why) {
        for (const PartConn& c : *src) KillPart(job, c, ids(), false);
        const bool ok = StartParts(job, spec, *dst, false, ids, &err);
        FinishMove(job, aid, what, ok, false, UsSince(t0),
                   ok ? where + "; restarted from scratch (" + why + ")" : err,
                   ok ? MovedTo::kDestination : MovedTo::kNowhere, from);
      };
      if (!has_source) {
        fresh("its process was lost");
        return;
      }
      if (from.exists && !library) {
        const std::string why =
            "a job that spans servers moves only with the gandiva job-side "
            "library (its parts restart from the checkpoint rank 0 saves)";
        if (fresh_fallback) {
          fresh(why);
          return;
        }
        FinishMove(job, aid, what, false, /*permanent=*/true, UsSince(t0), why,
                   MovedTo::kAsBefore, from);
        return;
      }
      const PartConn& source = (*src)[0];
      std::string phases;
      const auto t_ckpt = std::chrono::steady_clock::now();
      // The mini-batch the checkpoint was taken at (-1: unknown).
      int64_t saved = kept_at > 0 ? kept_at : -1;
      if (from.exists) {
        auto each_follower = [&](bool resume) {
          ContinueOrStopFollowers(job, *src, ids, resume);
        };
        if (was_suspended) each_follower(/*resume=*/true);
        rpc::CheckpointRequest req;
        req.set_job_id(job);
        req.set_action_id(aid);
        if (resize) req.set_resize_to(world);
        rpc::CheckpointReply rep;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(120));
        const grpc::Status s = source.stub->CheckpointJob(&ctx, req, &rep);
        if (!s.ok()) {
          const bool cannot =
              s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
              s.error_code() == grpc::StatusCode::UNIMPLEMENTED;
          if (cannot && fresh_fallback) {
            fresh(s.error_message());
            return;
          }
          // As it was: a suspended gang's other parts stop again.
          if (was_suspended) each_follower(/*resume=*/false);
          FinishMove(job, aid, what, false, cannot, UsSince(t0),
                     RpcError("CheckpointJob", s), MovedTo::kAsBefore, from);
          return;
        }
        phases = "checkpoint " + Ms(rep.took_us()) + " (" + rep.method() +
                 ", " + Mb(rep.bytes()) +
                 (rep.save_us() > 0 ? ", save " + Ms(rep.save_us()) : "") + ")";
        saved = rep.minibatches();
      }
      // The other parts left with the lead; any that lingers is stopped,
      // so that its agent can take the checkpoint in.
      for (size_t i = 1; i < src->size(); ++i) {
        KillPart(job, (*src)[i], ids(), /*keep_checkpoint=*/false);
      }
      std::string transfer;
      auto drop_copies = [&] {
        for (const PartConn& c : *dst) {
          if (c.part.server != source.part.server) {
            KillPart(job, c, ids(), /*keep_checkpoint=*/false);
          }
        }
      };
      if (!Distribute(job, source, *dst, ids, &err, &transfer)) {
        drop_copies();
        FinishMove(job, aid, what, false, false, UsSince(t0),
                   err + "; the checkpoint stays on " + source.name,
                   MovedTo::kCheckpointAtSource, from);
        return;
      }
      const auto t_start = std::chrono::steady_clock::now();
      if (!StartParts(job, spec, *dst, true, ids, &err)) {
        drop_copies();
        FinishMove(job, aid, what, false, false, UsSince(t0),
                   "start from the checkpoint: " + err,
                   MovedTo::kCheckpointAtSource, from);
        return;
      }
      const int64_t restart_us = UsSince(t_start);
      // The parts meet, rank 0 loads and they train: until then the job
      // trains nowhere.
      const int64_t first_us =
          saved >= 0 ? AwaitFirstMinibatch(job, (*dst)[0], saved, t_start) : -1;
      const bool source_kept =
          std::any_of(dst->begin(), dst->end(), [&](const PartConn& c) {
            return c.part.server == source.part.server;
          });
      if (!source_kept) KillPart(job, source, ids(), false);  // its copy
      std::string detail = where;
      if (!phases.empty()) detail += "; " + phases;
      if (!transfer.empty()) detail += ", " + transfer;
      detail += ", restart " + Ms(restart_us);
      if (saved >= 0) {
        detail += first_us >= 0
                      ? ", first mini-batch " + Ms(first_us) + " after it"
                      : ", no mini-batch within a minute of it";
      }
      if (from.exists && first_us >= 0) {
        detail += "; training paused " + Ms(UsSince(t_ckpt));
      }
      FinishMove(job, aid, what, true, false, UsSince(t0), detail,
                 MovedTo::kDestination, from);
    });
  }

  // Moves a job's process, or the checkpoint an agent holds for it, from
  // `from` to where x.proc now says, carrying out a Migrate, a Grow or a
  // Shrink, a Resume or Pack on other GPUs than its process is on, or the
  // Start of a job whose checkpoint an agent kept (Execute):
  //   1. the destination starts the job warm (another server only, for a
  //      job running at the source; a kept checkpoint is received cold): the
  //      interpreter starts and the model is built while the job trains on
  //      at the source, until the new process waits for its checkpoint;
  //   2. the source has the job save its training state and exit
  //      (CheckpointJob: at a mini-batch boundary, to a ramdisk; to another
  //      server the call returns once the checkpoint is saved);
  //   3. the destination pulls the checkpoint (bulk TCP channel, else the
  //      gRPC stream) and hands it to the warm process, which loads it and
  //      trains its first mini-batch (ReceiveCheckpoint); on the same server
  //      it restarts from the checkpoint there instead.
  // A job that cannot be checkpointed fails a Migrate for good; a resume
  // elsewhere restarts it from scratch (it has nothing else to go on).
  void Move(const PendingAction& p, const Proc& from) {
    const core::Action& a = p.action;
    JobExtra& x = *Extra(a.job.value);
    const int32_t job = a.job.value;
    const int64_t aid = a.id.value;
    const std::string what(core::ActionKindName(a.kind));
    const Proc to = x.proc;
    const bool resize =
        a.kind == ActionKind::kGrow || a.kind == ActionKind::kShrink;
    const bool fresh_fallback =
        a.kind == ActionKind::kResume || a.kind == ActionKind::kPack;
    auto dst = StubOf(to.server);
    const bool has_source = from.exists || from.checkpoint;
    auto src = has_source ? StubOf(from.server) : nullptr;
    std::string away = Away(to.server);
    if (away.empty() && has_source) away = Away(from.server);
    if (!away.empty()) {
      // Its process, or the checkpoint it saved as its agent stopped, stays
      // where it is.
      FinishMove(job, aid, what, false, false, 0, away,
                 from.exists       ? MovedTo::kAsBefore
                 : from.checkpoint ? MovedTo::kCheckpointAtSource
                                   : MovedTo::kNowhere,
                 from);
      return;
    }
    if (dst == nullptr || (has_source && src == nullptr)) {
      FinishMove(job, aid, what, false, false, 0,
                 "no agent connected for server " +
                     std::to_string((dst == nullptr ? to : from).server.value),
                 from.exists ? MovedTo::kAsBefore : MovedTo::kNowhere, from);
      return;
    }
    const bool same_server = has_source && from.server == to.server;
    const std::string src_address =
        has_source ? agents[static_cast<size_t>(from.server.value)].address
                   : "";
    std::string where =
        "gpus " + json(to.local).dump() + " on " + AgentName(to.server);
    if (has_source && !same_server) {
      where = "from " + AgentName(from.server) + " to " + where;
    }
    // Only a job that attached the library can wait for its checkpoint, and
    // only a running one needs to: a checkpoint kept without a process is
    // received and held, and the job started from it.
    const bool warm = x.progress.uses_library() && !same_server && from.exists;
    // A checkpoint kept without a process: the mini-batch it was saved at.
    const int64_t kept_at = from.exists ? -1 : x.kept_at;
    const rpc::JobSpec spec = x.spec;
    const int32_t world = static_cast<int32_t>(to.local.size());
    // Agents answer a repeated action id with the first call's result:
    // each call of the move gets its own.
    const int64_t warm_id = InternalActionId();
    const int64_t start_id = InternalActionId();
    const int64_t receive_id = InternalActionId();
    const int64_t back_id = InternalActionId();
    const int64_t kill_src_id = InternalActionId();
    const int64_t kill_dst_id = InternalActionId();
    executor->Run(job, [=, this] {
      const auto t0 = std::chrono::steady_clock::now();
      auto us_since = [](std::chrono::steady_clock::time_point t) {
        return std::chrono::duration_cast<std::chrono::microseconds>(
                   std::chrono::steady_clock::now() - t)
            .count();
      };
      rpc::StartJobReply warm_rep;
      auto start = [&](bool warm_start, bool local, const Proc& at,
                       std::string* err) {
        rpc::StartJobRequest req;
        req.set_job_id(job);
        req.set_submitted_us(SubmittedUs(job));
        req.set_action_id(warm_start     ? warm_id
                          : &at == &from ? back_id
                                         : start_id);
        *req.mutable_spec() = spec;
        for (int32_t g : at.local) req.add_gpus(g);
        req.set_warm(warm_start);
        req.set_resume_local(local);
        // A warm start replies once the process waits for its checkpoint:
        // the source trains until then.
        const int32_t ready_ms =
            warm_start ? static_cast<int32_t>(opts.warm_ready_timeout_s * 1e3)
                       : 0;
        req.set_await_ready_ms(ready_ms);
        rpc::StartJobReply rep;
        auto ctx = Ctx();
        if (ready_ms > 0) {
          ctx->set_deadline(std::chrono::system_clock::now() +
                            std::chrono::milliseconds(ready_ms) +
                            std::chrono::microseconds(static_cast<int64_t>(
                                opts.agent_rpc_timeout_s * 1e6)));
        }
        if (warm_start) {
          std::lock_guard<std::mutex> lock(warm_mu);
          warm_calls[job] = ctx.get();
        }
        grpc::Status s = StubOf(at.server)->StartJob(ctx.get(), req, &rep);
        if (warm_start) {
          std::lock_guard<std::mutex> lock(warm_mu);
          warm_calls.erase(job);
          warm_rep = rep;
        }
        if (!s.ok()) *err = RpcError("StartJob", s);
        return s.ok();
      };
      auto kill = [&](const std::shared_ptr<rpc::Agent::Stub>& stub) {
        rpc::JobRequest req;
        req.set_job_id(job);
        req.set_action_id(stub == src ? kill_src_id : kill_dst_id);
        rpc::KillReply rep;
        auto ctx = Ctx();
        (void)stub->KillJob(ctx.get(), req, &rep);
      };
      std::string err;
      if (!has_source) {
        const bool ok = start(false, false, to, &err);
        FinishMove(job, aid, what, ok, false, us_since(t0),
                   ok ? where +
                            "; restarted from scratch (its process was "
                            "lost)"
                      : err,
                   ok ? MovedTo::kDestination : MovedTo::kNowhere, from);
        return;
      }
      if (warm && from.exists && !start(true, false, to, &err)) {
        // The new process may have started (a call cancelled by a kill, or
        // one whose reply was lost): it goes.
        kill(dst);
        FinishMove(job, aid, what, false, false, us_since(t0),
                   "warm start: " + err, MovedTo::kAsBefore, from);
        return;
      }
      std::string phases;
      std::string method;  // how the source checkpointed it
      // Starting from the checkpoint: a CRIU dump is restored.
      auto restart_phase = [&method](int64_t us) {
        return (method == "criu" ? ", restore " : ", restart ") + Ms(us);
      };
      // From the checkpoint request on, the job trains nowhere.
      const auto t_ckpt = std::chrono::steady_clock::now();
      // The mini-batch a library checkpoint was taken at (-1: none).
      int64_t saved = -1;
      if (from.exists) {
        rpc::CheckpointRequest req;
        req.set_job_id(job);
        req.set_action_id(aid);
        if (resize) req.set_resize_to(world);
        // To another server: the destination needs only the files, not the
        // source's GPUs, so the source's exit need not be awaited.
        req.set_reply_when_saved(!resize && !same_server);
        rpc::CheckpointReply rep;
        auto ctx = std::make_unique<grpc::ClientContext>();
        ctx->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(120));
        grpc::Status s = src->CheckpointJob(ctx.get(), req, &rep);
        if (!s.ok()) {
          if (warm) kill(dst);
          // The job cannot be checkpointed (or the agent cannot do it).
          const bool cannot =
              s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
              s.error_code() == grpc::StatusCode::UNIMPLEMENTED;
          if (cannot && fresh_fallback) {
            // Nothing to carry over: start afresh where the core wants it.
            KillIgnoringExit(job, from.server, *src, kill_src_id);
            const bool ok = start(false, false, to, &err);
            FinishMove(job, aid, what, ok, false, us_since(t0),
                       ok ? where + "; restarted from scratch (" +
                                s.error_message() + ")"
                          : err,
                       ok ? MovedTo::kDestination : MovedTo::kNowhere, from);
            return;
          }
          FinishMove(job, aid, what, false, cannot, us_since(t0),
                     RpcError("CheckpointJob", s), MovedTo::kAsBefore, from);
          return;
        }
        // took_us runs from the request to the process's exit; save_us is
        // the job's own save (from its progress page).
        if (warm) {
          phases = "warm start " +
                   (warm_rep.ready()
                        ? Ms(warm_rep.ready_us()) +
                              " (before the checkpoint; the job trained on)"
                        : std::string("not ready after ") +
                              Ms(static_cast<int64_t>(
                                  opts.warm_ready_timeout_s * 1e6)) +
                              " (checkpointed anyway)") +
                   ", ";
        }
        method = rep.method();
        if (method == "library") saved = rep.minibatches();
        phases +=
            "checkpoint " + Ms(rep.took_us()) + " (" + method + ", " +
            Mb(rep.bytes()) +
            (rep.save_us() > 0 ? (method == "criu" ? ", dump " : ", save ") +
                                     Ms(rep.save_us())
                               : "") +
            ")";
      }
      if (same_server) {
        const auto t_start = std::chrono::steady_clock::now();
        if (!start(false, true, to, &err)) {
          // Back as it was, from the checkpoint, if it can.
          std::string err2;
          const bool back = resize && start(false, true, from, &err2);
          FinishMove(job, aid, what, false, false, us_since(t0),
                     "restart: " + err + (back ? "; restarted as it was" : ""),
                     back ? MovedTo::kAsBefore : MovedTo::kCheckpointAtSource,
                     from);
          return;
        }
        std::string detail =
            where + "; " + phases + restart_phase(us_since(t_start));
        // Until its first mini-batch from the checkpoint the job trains
        // nowhere (a job without the library: until its restart).
        if (saved >= 0) {
          const int64_t first = AwaitFirstMinibatch(
              job, PartConn{Part{to.server, to.local}, dst, "", ""}, saved,
              t_start);
          detail += first >= 0 ? ", first mini-batch " + Ms(first) +
                                     " after it; training paused " +
                                     Ms(us_since(t_ckpt))
                               : ", no mini-batch within a minute of it";
        } else {
          detail += "; training paused " + Ms(us_since(t_ckpt));
        }
        FinishMove(job, aid, what, true, false, us_since(t0), detail,
                   MovedTo::kDestination, from);
        return;
      }
      rpc::ReceiveCheckpointRequest rreq;
      rreq.set_job_id(job);
      rreq.set_submitted_us(SubmittedUs(job));
      rreq.set_action_id(receive_id);
      rreq.set_source_address(src_address);
      rreq.set_await_first_minibatch(warm);
      rpc::ReceiveCheckpointReply rrep;
      auto ctx = std::make_unique<grpc::ClientContext>();
      ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(300));
      grpc::Status s = dst->ReceiveCheckpoint(ctx.get(), rreq, &rrep);
      if (!s.ok()) {
        kill(dst);
        FinishMove(job, aid, what, false, false, us_since(t0),
                   RpcError("ReceiveCheckpoint", s) +
                       "; the checkpoint stays on the source",
                   MovedTo::kCheckpointAtSource, from);
        return;
      }
      const auto t_start = std::chrono::steady_clock::now();
      if (!warm && !start(false, true, to, &err)) {
        // Received but not started: the copy at the source stays the one
        // the job resumes from.
        kill(dst);
        FinishMove(job, aid, what, false, false, us_since(t0),
                   "start from the received checkpoint: " + err,
                   MovedTo::kCheckpointAtSource, from);
        return;
      }
      const int64_t restart_us =
          std::chrono::duration_cast<std::chrono::microseconds>(
              std::chrono::steady_clock::now() - t_start)
              .count();
      kill(src);  // drops the source's copy of the checkpoint
      std::string detail = where;
      if (!phases.empty()) detail += "; " + phases;
      detail += ", transfer " + Ms(rrep.transfer_us()) + " (" +
                Mb(rrep.bytes()) + Rate(rrep.bytes(), rrep.transfer_us()) +
                (rrep.channel().empty() ? "" : " over " + rrep.channel()) +
                (rrep.streamed() ? ", straight into the job's memory" : "") +
                ")";
      if (!warm) detail += restart_phase(restart_us);
      if (!warm && kept_at > 0) {
        const int64_t first = AwaitFirstMinibatch(
            job, PartConn{Part{to.server, to.local}, dst, "", ""}, kept_at,
            t_start);
        detail += first >= 0 ? ", first mini-batch " + Ms(first) + " after it"
                             : ", no mini-batch within a minute of it";
      }
      if (warm) {
        if (!warm_rep.ready()) {
          detail += ", warm start " + Ms(rrep.warm_us()) + " (overlapped)";
        }
        detail += ", load " + Ms(rrep.load_us()) + ", first mini-batch " +
                  Ms(rrep.first_minibatch_us());
      }
      if (from.exists) detail += "; training paused " + Ms(us_since(t_ckpt));
      FinishMove(job, aid, what, true, false, us_since(t0), detail,
                 MovedTo::kDestination, from);
    });
  }

  static std::string Ms(int64_t us) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f ms", static_cast<double>(us) / 1e3);
    return b;
  }
  static std::string Mb(int64_t bytes) {
    char b[32];
    if (bytes < 1'000'000) {
      std::snprintf(b, sizeof b, "%.1f kB", static_cast<double>(bytes) / 1e3);
    } else {
      std::snprintf(b, sizeof b, "%.1f MB", static_cast<double>(bytes) / 1e6);
    }
    return b;
  }
  static std::string Rate(int64_t bytes, int64_t us) {
    if (us <= 0) return "";
    char b[48];
    std::snprintf(b, sizeof b, " at %.2f GB/s",
                  static_cast<double>(bytes) / static_cast<double>(us) / 1e3);
    return b;
  }

  // After a decision that changes how fast the job (and its partner)
  // trains, the next reports say by how much.
  void StartProbe(int32_t job, const std::string& what, int64_t action) {
    auto it = pending.find(action);
    if (it == pending.end()) return;
    const core::ActionKind k = it->second.action.kind;
    if (k == ActionKind::kStart || k == ActionKind::kResume ||
        k == ActionKind::kSuspend || k == ActionKind::kKill) {
      if (!it->second.relocate) return;
    }
    const int64_t due = Now() + static_cast<int64_t>(opts.probe_delay_s * 1e6);
    JobExtra* x = Extra(job);
    if (x == nullptr) return;
    x->probe = Probe{what, it->second.rate_before, due};
    // A pack or unpack changes the partner's rate too.
    const core::JobId peer = it->second.action.peer;
    if (peer.valid() && (k == ActionKind::kPack || k == ActionKind::kUnpack)) {
      if (JobExtra* px = Extra(peer.value)) {
        px->probe = Probe{what + " of job " + std::to_string(job),
                          px->progress.minibatch_rate(), due};
      }
    }
  }

  void CheckProbe(int32_t job, JobExtra& x) {
    if (!x.probe || Now() < x.probe->due_us) return;
    const double after = x.progress.minibatch_rate();
    if (after <= 0) return;
    char b[160];
    if (x.probe->before > 0) {
      std::snprintf(b, sizeof b,
                    "after %s: %.2f mini-batches/s, before %.2f (x%.2f)",
                    x.probe->what.c_str(), after, x.probe->before,
                    after / x.probe->before);
    } else {
      std::snprintf(b, sizeof b, "after %s: %.2f mini-batches/s",
                    x.probe->what.c_str(), after);
    }
    History(job, "profile", true, 0, b);
    x.probe.reset();
  }

  // ----------------------------------------------------------- agents

  core::StatusOr<int32_t> RegisterAgent(const rpc::RegisterAgentRequest& r) {
    if (r.name().empty()) return core::InvalidArgument("field 'name': empty");
    if (r.address().empty()) {
      return core::InvalidArgument("field 'address': empty");
    }
    core::ServerSpec spec;
    spec.name = r.name();
    spec.gpus = r.gpus_size();
    spec.sockets = std::max(1, r.sockets());
    spec.switches_per_socket = std::max(1, r.switches_per_socket());
    // The smallest GPU's memory, for packing; unknown (0) if any GPU's is
    // (virtual GPUs).
    for (const rpc::Gpu& g : r.gpus()) {
      const double gib =
          static_cast<double>(g.memory_bytes()) / (1024.0 * 1024.0 * 1024.0);
      if (gib <= 0) {
        spec.gpu_memory_gb = 0;
        break;
      }
      if (spec.gpu_memory_gb == 0 || gib < spec.gpu_memory_gb) {
        spec.gpu_memory_gb = gib;
      }
    }
    if (std::string err = core::ValidateServerSpec(spec); !err.empty()) {
      return core::InvalidArgument(err);
    }
    int32_t id;
    auto it = agent_by_name.find(r.name());
    if (it == agent_by_name.end()) {
      id = static_cast<int32_t>(agents.size());
      agents.push_back(AgentConn{});
      agent_by_name[r.name()] = id;
    } else {
      id = it->second;
      const AgentConn& a = agents[static_cast<size_t>(id)];
      if (static_cast<int>(a.gpus.size()) != spec.gpus) {
        return core::FailedPrecondition(
            "agent '" + r.name() + "' registered before with " +
            std::to_string(a.gpus.size()) +
            (a.gpus.size() == 1 ? " GPU" : " GPUs") + ", now " +
            std::to_string(spec.gpus) +
            "; a server's GPUs cannot change (use another name)");
      }
    }
    AgentConn& a = agents[static_cast<size_t>(id)];
    a.id = ServerId(id);
    a.name = r.name();
    a.gpus.assign(r.gpus().begin(), r.gpus().end());
    a.sockets = spec.sockets;
    a.switches_per_socket = spec.switches_per_socket;
    if (a.address != r.address() || a.stub == nullptr) {
      a.address = r.address();
      a.stub = rpc::Agent::NewStub(MakeChannel(a.address, tls));
    }
    const WasUnreachable was = Registered(a, Now());
    const bool was_away = was.away;
    const int64_t silent_since_us = was.silent_since_us;
    a.caps = r.capabilities();
    ++a.registrations;
    const bool open_again = a.away_cordon;
    const core::Cluster& c = st().cluster();
    // A server back up with processes the daemon may keep where they run
    // (AdoptQueuedJobsFound, AdoptLostJobs) is cordoned meanwhile: coming up
    // would place queued jobs on their GPUs first. Recorded as the daemon's
    // cordon (in the row, before it is logged), which the next registration
    // lifts should this one not get that far.
    const bool hold_closed = id < c.num_servers() &&
                             !c.server(ServerId(id)).up &&
                             !c.server(ServerId(id)).cordoned && MayAdopt(r);
    a.away_cordon = hold_closed;
    // The row first: a ServerUp in the log always has its row.
    WriteBatch rows;
    rows.servers.push_back(ServerRowOf(a));
    GANDIVA_RETURN_IF_ERROR(store->Write(rows));
    a.row_dirty = false;
    // Before the server is up or open again, which may place them.
    AdoptKeptCheckpoints(a, r);
    if (hold_closed) {
      GANDIVA_RETURN_IF_ERROR(Feed(core::CordonRequest{ServerId(id), true}));
    }
    if (id >= c.num_servers()) {
      if (id != c.num_servers()) {
        return core::Status(core::StatusCode::kInternal,
                            "server ids out of step with the core");
      }
      GANDIVA_RETURN_IF_ERROR(Feed(core::ServerUp{spec, ServerId()}));
    } else if (!c.server(ServerId(id)).up) {
      GANDIVA_RETURN_IF_ERROR(Feed(core::ServerUp{spec, ServerId(id)}));
    }
    // Before it opens again, which may place queued jobs on their GPUs.
    MarkLostIds(a, r);
    AdoptQueuedJobsFound(a, r);
    const std::set<int32_t> killed = AdoptLostJobs(a, r);
    if ((open_again || hold_closed) && c.server(ServerId(id)).cordoned) {
      GANDIVA_RETURN_IF_ERROR(Feed(core::CordonRequest{ServerId(id), false}));
    }
    if (hold_closed) {
      a.away_cordon = false;
      a.row_dirty = true;
    }
    if (was_away || silent_since_us > 0) {
      char out[48] = "";
      if (silent_since_us > 0) {
        std::snprintf(
            out, sizeof out, " after %.1f s out of reach",
            static_cast<double>(WallMicros() - silent_since_us) / 1e6);
      }
      Log("agent '" + a.name + "' is back" + out +
          (open_again ? ": server " + std::to_string(id) + " opened again"
                      : ""));
    }
    Log("agent '" + a.name + "' registered as server " + std::to_string(id) +
        " at " + a.address + " with " + std::to_string(r.jobs_size()) +
        " jobs");
    Reconcile(a, r, killed);
    if (silent_since_us > 0) KeptThroughSilence(a, r, silent_since_us);
    return id;
  }

  // After an agent out of reach registers again: each job it still runs
  // that the daemon kept there says so in its history, with how long.
  void KeptThroughSilence(const AgentConn& a,
                          const rpc::RegisterAgentRequest& r,
                          int64_t silent_since_us) {
    const double out_s =
        static_cast<double>(WallMicros() - silent_since_us) / 1e6;
    char detail[160];
    std::snprintf(detail, sizeof detail,
                  "agent '%s' was out of reach for %.1f s (not heard of for "
                  "%.1f s); the job was kept there and goes on",
                  a.name.c_str(), out_s, out_s + opts.agent_timeout_s);
    for (const rpc::AgentJob& listed : r.jobs()) {
      const auto id = static_cast<int32_t>(listed.job_id());
      const JobExtra* x = Extra(id);
      if (x == nullptr || IsEnded(id) || !x->proc.exists || !x->proc.On(a.id)) {
        continue;
      }
      History(id, "reach", true, 0, detail);
    }
  }

  // The checkpoints a registering agent holds of queued jobs that last ran
  // with their rank 0 on its server, which the daemon did not know of: a
  // job requeued when its server, or a server of its gang, was declared
  // down, its checkpoint kept here (by a gang's lead, or by an agent that
  // is back after all), and the daemon restarted since (where a checkpoint
  // is kept is not in the event log) or the agent was declared down
  // meanwhile. The job's next start goes on from it rather than from the
  // beginning. Only such jobs: a checkpoint of a job placed elsewhere (or
  // never) is not taken for theirs.
  void AdoptKeptCheckpoints(const AgentConn& a,
                            const rpc::RegisterAgentRequest& r) {
    for (int i = 0; i < r.checkpoints_size(); ++i) {
      const int64_t id64 = r.checkpoints(i);
      const auto id = static_cast<int32_t>(id64);
      if (id64 != id || ForeignCheckpoint(r, i) ||
          CheckpointOfOtherSubmission(r, i) || !LiveJob(id64) || IsEnded(id)) {
        continue;
      }
      JobExtra* x = Extra(id);
      if (x == nullptr || x->proc.exists || x->proc.checkpoint) continue;
      const core::Job& j = st().job(JobId(id));
      // Queued, its last placement (which the core keeps) with rank 0
      // here.
      if (j.state != JobState::kQueued || j.busy() || j.gpus.empty()) {
        continue;
      }
      const Part lead = Parts(j.gpus)[0];
      if (lead.server != a.id) continue;
      x->proc = Proc{a.id, lead.local, false, true};
      History(id, "reconcile", true, 0,
              "agent '" + a.name +
                  "' holds a checkpoint of it, saved where its rank 0 last "
                  "ran: its next start goes on from it");
    }
  }

  // A process an agent lists for a job the daemon believes has none, on the
  // one server where the core places the job and in the state the core
  // has it in: the job's own, which the daemon lost track of (a move that
  // failed before its checkpoint, replayed after a crash: the log does not
  // say how far it got). Not for a gang (every part would have to be
  // listed) nor while an action is under way (its outcome decides).
  bool Adoptable(int32_t id, const JobExtra& x, ServerId server,
                 rpc::JobState reported) const {
    if (IsEnded(id) || x.proc.exists || x.proc.checkpoint) return false;
    const core::Job& j = st().job(JobId(id));
    if (j.busy() || j.gpus.empty()) return false;
    const bool same_state =
        (j.state == JobState::kRunning && reported == rpc::RUNNING) ||
        (j.state == JobState::kSuspended && reported == rpc::SUSPENDED);
    const std::vector<Part> parts = Parts(j.gpus);
    return same_state && parts.size() == 1 && parts[0].server == server;
  }

  // Makes the daemon's view and the agent's agree after a (re-)registration.
  // The processes of `killed` are already dealt with (AdoptLostJobs).
  void Reconcile(AgentConn& a, const rpc::RegisterAgentRequest& r,
                 const std::set<int32_t>& killed) {
    std::map<int32_t, rpc::JobState> reported;
    for (const rpc::AgentJob& j : r.jobs()) {
      const int32_t id = static_cast<int32_t>(j.job_id());
      if (killed.contains(id)) continue;
      JobExtra* x = Extra(id);
      const bool other = OtherSubmission(id, j.submitted_us());
      const bool ours = !other && x != nullptr && !IsEnded(id) &&
                        x->proc.exists && x->proc.On(a.id);
      if (ours) {
        reported[id] = j.state();
        continue;
      }
      if (!other && x != nullptr && Adoptable(id, *x, a.id, j.state())) {
        x->proc = Proc::At(Parts(st().job(JobId(id)).gpus));
        History(id, "reconcile", true, 0,
                "kept its process on " + a.name +
                    ", where the job is placed (the daemon had lost track "
                    "of it)");
        reported[id] = j.state();
        continue;
      }
      if (other && x != nullptr && !IsEnded(id) && x->proc.exists &&
          x->proc.On(a.id)) {
        // This job's start there is under way (placed as the server came
        // up): it replaces the process (a start finding one kills it
        // first), which a kill sent now would reach after it.
        History(id, "reconcile", true, 0,
                "a process on " + a.name +
                    " of another job of this id (submitted before the store "
                    "was restored from a backup): this job's start there "
                    "replaces it");
        continue;
      }
      // A process the daemon does not want there (killed, requeued, or
      // moved while the daemon or the agent was away).
      Proc stray{a.id, {}, true};
      if (x != nullptr) ++x->ignore_exits[a.id.value];
      if (x != nullptr) {
        History(id, "kill", true, 0,
                "stray process on " + a.name +
                    (other ? " (of another job of this id, submitted before "
                             "the store was restored from a backup)"
                           : ""));
      }
      KillAt(id, stray, InternalActionId());
    }
    a.missing.clear();
    a.held.clear();
    for (int i = 0; i < r.checkpoints_size(); ++i) {
      const int64_t id64 = r.checkpoints(i);
      const auto id = static_cast<int32_t>(id64);
      if (id64 != id) continue;
      if (ForeignCheckpoint(r, i)) {
        // The agent drops it itself once it has this cluster's id.
        Log("job " + std::to_string(id64) + ": agent '" + a.name +
            "' holds a checkpoint saved in another cluster (" +
            r.checkpoint_clusters(i) + "): not this job's, ignored");
        continue;
      }
      if (CheckpointOfOtherSubmission(r, i)) {
        // Dropped, unless the job itself is there or on its way (a kill
        // would reach its process too): its own save replaces it, and the
        // agent refuses to start it from one of another job.
        const JobExtra* x = Extra(id);
        const bool there = x != nullptr &&
                           (x->proc.exists || x->proc.checkpoint) &&
                           x->proc.On(a.id);
        const bool dropped = x != nullptr && !there &&
                             (IsEnded(id) || !st().job(JobId(id)).busy());
        Log("job " + std::to_string(id64) + ": agent '" + a.name +
            "' holds a checkpoint of another job of this id (submitted at " +
            std::to_string(r.checkpoint_submitted_us(i)) +
            " us, before the store was restored from a backup; this one at " +
            std::to_string(SubmittedUs(id)) + " us): not this job's, " +
            (dropped ? "dropped" : "ignored"));
        if (dropped)
          KillAt(id, Proc{a.id, {}, false, true}, InternalActionId());
        continue;
      }
      if (LiveJob(id64) && !IsEnded(id)) {
        a.held.insert(id);
        continue;
      }
      // The checkpoint of a job that has ended (or that this daemon never
      // ran): nothing will start from it.
      Log("job " + std::to_string(id64) + ": dropping the checkpoint agent '" +
          a.name + "' keeps (the job has ended)");
      KillAt(id, Proc{a.id, {}, false, true}, InternalActionId());
    }
    for (auto [id, xp] : UnsettledJobs()) {
      JobExtra& x = *xp;
      if (!x.proc.exists || !x.proc.On(a.id) || IsEnded(id)) continue;
      x.dirty = true;
      auto rep = reported.find(id);
      if (rep == reported.end()) {
        // A start sent in this daemon's life may not have reached the
        // agent when it listed its jobs: its reply says what happened.
        const core::Job& cj = st().job(JobId(id));
        auto pit =
            cj.busy() ? pending.find(cj.in_flight_id.value) : pending.end();
        if (pit != pending.end() && pit->second.sent &&
            cj.in_flight != ActionKind::kSuspend &&
            cj.in_flight != ActionKind::kUnpack) {
          continue;
        }
        if (restarting.contains(id)) continue;
        a.missing.insert(id);
        continue;
      }
      const core::Job& j = st().job(JobId(id));
      // A gang's action is settled by its lead's state.
      if (!j.busy() || x.proc.server != a.id) continue;
      // One this daemon process sent may be under way in the agent still
      // (a call that waited in it while it was out of reach): what it
      // lists may be from before the call, whose reply settles it (every
      // call has a deadline). One replayed from the log is settled here.
      if (auto pit = pending.find(j.in_flight_id.value);
          pit != pending.end() && pit->second.sent) {
        continue;
      }
      bool ok = false;
      switch (j.in_flight) {
        case ActionKind::kStart:
          ok = true;
          break;
        case ActionKind::kResume:
        case ActionKind::kPack:
          ok = rep->second == rpc::RUNNING;
          break;
        case ActionKind::kSuspend:
        case ActionKind::kUnpack:
          ok = rep->second == rpc::SUSPENDED;
          break;
        default:
          continue;  // Migrate and others fail through their own reply
      }
      const std::string what(core::ActionKindName(j.in_flight));
      const std::string detail = "reconciled: agent reports it " +
                                 std::string(rpc::JobState_Name(rep->second));
      History(id, what, ok, 0, detail);
      if (ok) {
        (void)Feed(core::ActionDone{j.in_flight_id, JobId(id), {}});
      } else {
        (void)Feed(core::ActionFailed{j.in_flight_id, JobId(id), {}, detail});
      }
    }
    for (auto [id, xp] : UnsettledJobs()) {
      JobExtra& x = *xp;
      // Waiting for this agent, without processes, to go on from the
      // checkpoint it saved when the agent stopped (after the loop above:
      // a restart here makes it exist). A job spanning servers: from the
      // checkpoint at its lead's agent, every part, once none of its
      // agents is away.
      const bool gang = x.proc.gang();
      if (IsEnded(id) || x.proc.exists || !x.proc.checkpoint ||
          !(gang ? x.proc.On(a.id) : x.proc.server == a.id)) {
        continue;
      }
      x.dirty = true;
      const core::Job& j = st().job(JobId(id));
      const bool runs = j.state == JobState::kRunning && !j.busy();
      if (x.proc.server == a.id && !a.held.contains(id)) {
        x.proc.checkpoint = false;
        History(id, "lost", false, 0,
                "agent '" + a.name + "' is back without the checkpoint it " +
                    "kept; " + (gang ? "every part starts" : "the job starts") +
                    " again from the beginning");
        if (runs) gang ? RelaunchGang(id) : Relaunch(id);
        continue;
      }
      if (runs && !AnyPartAway(x.proc)) {
        const std::string why = "agent '" + a.name + "' is back";
        if (gang) {
          RestartGangAtSource(id, x.proc, why, x.kept_at, x.stopped_us);
        } else {
          RestartAtSource(id, x.proc, why, x.kept_at, x.stopped_us);
        }
        x.kept_at = -1;
        x.stopped_us = 0;
      }
    }
    a.reconcile_pending = true;
  }

  // A job the daemon placed on `a` that the agent no longer runs and whose
  // exit never came: its process is lost.
  void Lost(AgentConn& a, int32_t id) {
    JobExtra& x = *Extra(id);
    x.proc.exists = false;
    const core::Job& j = st().job(JobId(id));
    // Its agent keeps a checkpoint of it (saved as the agent stopped, its
    // exit not heard of; or one a move left there): it goes on from that.
    const bool held =
        !x.proc.gang() && x.proc.server == a.id && a.held.contains(id);
    if (held) {
      x.proc.checkpoint = true;
      History(id, "stop", true, 0,
              "agent '" + a.name +
                  "' no longer runs it but holds a checkpoint of it (the "
                  "agent stopped or restarted)");
    } else {
      History(id, "lost", false, 0, "agent '" + a.name + "' no longer runs it");
    }
    if (x.proc.gang()) {
      // Its other parts cannot train on without this one: they go too, and
      // the job starts afresh as a whole (their exits are not its end).
      KillAt(id, x.proc, InternalActionId());
    }
    if (j.busy()) {
      auto it = pending.find(j.in_flight_id.value);
      switch (j.in_flight) {
        case ActionKind::kResume:
          if (it != pending.end()) {
            if (held && !it->second.relocate) {
              it->second.relocate = true;
              // From the checkpoint, where the core resumes it.
              Proc from = x.proc;
              from.checkpoint = true;
              x.proc.exists = x.proc.leaving = true;
              x.proc.checkpoint = false;
              Move(it->second, from);
              return;
            }
            // Start it afresh where the core resumes it.
            it->second.relocate = true;
            x.proc.exists = true;
            Dispatch(it->second);
            return;
          }
          break;
        case ActionKind::kSuspend:
        case ActionKind::kUnpack:
          (void)Feed(core::ActionDone{j.in_flight_id, JobId(id), {}});
          return;
        default:
          break;
      }
      (void)Feed(
          core::ActionFailed{j.in_flight_id, JobId(id), {}, "process lost"});
      return;
    }
    // Suspended: it resumes from the checkpoint if there is one, else
    // afresh.
    if (j.state != JobState::kRunning) return;
    if (held) {
      RestartAtSource(id, x.proc, "agent '" + a.name + "' kept it");
      return;
    }
    Relaunch(id);
  }

  // A job the core believes runs, whose process is gone and of which no
  // checkpoint is kept: launched again from scratch where it is placed.
  void Relaunch(int32_t id) {
    JobExtra& x = *Extra(id);
    if (x.proc.gang()) {
      RelaunchGang(id);
      return;
    }
    auto stub = StubOf(x.proc.server);
    if (stub == nullptr) return;
    x.proc.exists = true;
    restarting.insert(id);
    rpc::StartJobRequest req;
    req.set_job_id(id);
    req.set_submitted_us(SubmittedUs(id));
    req.set_action_id(InternalActionId());
    *req.mutable_spec() = x.spec;
    for (int32_t g : x.proc.local) req.add_gpus(g);
    executor->Run(id, [=, this] {
      rpc::StartJobReply rep;
      auto ctx = Ctx();
      grpc::Status s = stub->StartJob(ctx.get(), req, &rep);
      Post([=, this] {
        restarting.erase(id);
        History(id, "restart", s.ok(), rep.took_us(),
                s.ok() ? "relaunched a lost process" : RpcError("StartJob", s));
        if (!s.ok() && !IsEnded(id)) {
          Extra(id)->proc.exists = false;
          (void)Feed(core::JobFinished{JobId(id), false});
        }
      });
    });
  }

  // The job ends with its process's exit: the history line and the event.
  // False when the event could not be logged: then, as if the exit had not
  // come, x is as it was (`was`, `was_code`) and the agent, which keeps the
  // exits it was not answered for, must report it again (ReportAgain).
  bool EndOnExit(int32_t id, JobExtra& x, const Proc& was,
                 std::optional<int32_t> was_code, bool ok,
                 const std::string& detail) {
    History(id, "exit", ok, 0, detail);
    (void)Feed(core::JobFinished{JobId(id), ok});
    if (!unlogged) return true;
    x.proc = was;
    x.exit_code = was_code;
    batch.history.pop_back();
    // Nor is the line a failure streak would count the next report against.
    std::lock_guard lock(streak_mu);
    streaks.erase(id);
    return false;
  }
  static grpc::Status ReportAgain(int32_t id) {
    return {grpc::StatusCode::ABORTED,
            "the scheduler cannot log the exit of job " + std::to_string(id) +
                " now: report it again"};
  }

  grpc::Status DoReport(const rpc::AgentReport& r) {
    auto it = agent_by_name.find(r.name());
    if (it == agent_by_name.end() ||
        agents[static_cast<size_t>(it->second)].link != AgentConn::Link::kUp) {
      return {grpc::StatusCode::FAILED_PRECONDITION,
              "agent '" + r.name() +
                  "' is not registered (new, timed out, or the scheduler "
                  "restarted): call RegisterAgent again"};
    }
    AgentConn& a = agents[static_cast<size_t>(it->second)];
    if (a.silent_since_us > 0) {
      // Back from out of reach: registering again says what it runs now
      // (Reconcile) and opens its server.
      return {grpc::StatusCode::FAILED_PRECONDITION,
              "agent '" + r.name() +
                  "' was out of reach (not heard of for more than " +
                  Seconds(opts.agent_timeout_s) +
                  "): call RegisterAgent again"};
    }
    Heard(a, Now());
    unlogged = false;
    for (const rpc::JobExit& e : r.exits()) {
      const int32_t id = static_cast<int32_t>(e.job_id());
      JobExtra* x = Extra(id);
      if (x == nullptr) continue;
      if (auto ig = x->ignore_exits.find(a.id.value);
          ig != x->ignore_exits.end() && ig->second > 0) {
        --ig->second;
        continue;
      }
      // The agent started it again since (a move within that server, whose
      // process left with 75 or 76 and whose report came late): the job is
      // in its new process.
      if (e.superseded()) continue;
      if (x->proc.leaving &&
          (e.exit_code() == 75 || e.exit_code() == 76 || e.exit_code() < 0)) {
        // It left to be moved or resized, as asked, or a process of the
        // move was stopped (a warm start abandoned): the move's outcome
        // says where the job is.
        continue;
      }
      if (x->proc.exists && x->proc.server != a.id &&
          x->proc.FollowerOn(a.id)) {
        // A gang's other part: the lead's exit is the job's; a part that
        // ends in failure (a rank crashed) ends the job with it.
        // (Killed as its agent stopped: the lead's agent decides, or the
        // server is declared down.)
        if (e.killed() || e.agent_stopped() || e.exit_code() == 0 ||
            IsEnded(id)) {
          continue;
        }
        const Proc was = x->proc;
        const std::optional<int32_t> was_code = x->exit_code;
        x->proc = Proc{};
        x->exit_code = e.exit_code();
        if (!EndOnExit(id, *x, was, was_code, false,
                       "exit code " + std::to_string(e.exit_code()) +
                           " of its part on " + a.name +
                           "; its other parts are stopped")) {
          return ReportAgain(id);
        }
        KillAt(id, was, InternalActionId());
        continue;
      }
      if (!x->proc.exists || x->proc.server != a.id) continue;
      if (e.checkpoint_kept() && !x->proc.gang()) {
        // The agent stopped; the job saved its state there first, and
        // waits for the agent to be back to go on from it (or, should it
        // stay away, for the server to be declared down and the job
        // placed again).
        if (IsEnded(id)) continue;
        const std::string& method = e.checkpoint_method();
        x->proc.exists = false;
        x->proc.checkpoint = true;
        // The mini-batch it goes on from: known for a library checkpoint
        // (the restart's history line waits for the one after it), not for
        // a CRIU dump or a job's own checkpoint.
        x->kept_at =
            method == "criu" || method == "restart" ? -1 : e.minibatches();
        x->stopped_us = Now();
        if (e.minibatches() > 0) x->progress.set_minibatches(e.minibatches());
        CopyMetric(e, &x->progress);
        x->progress.set_minibatch_rate(0);
        History(
            id, "stop", true, 0,
            "agent '" + a.name + "' stopped; " +
                (method == "criu" ? std::string("the job was dumped by CRIU")
                 : method == "restart"
                     ? std::string("the job saved its own checkpoint")
                     : "the job saved a checkpoint at mini-batch " +
                           std::to_string(e.minibatches())) +
                ", kept there: it goes on from it when the agent is back");
        continue;
      }
      if (e.agent_stopped() && !IsEnded(id)) {
        // Its agent stopped and killed it, unsaved: the job stays placed
        // there, as if its process ran on, until the agent registers again
        // without it (then Lost() starts it again) or is declared down.
        if (e.minibatches() > 0) x->progress.set_minibatches(e.minibatches());
        x->progress.set_minibatch_rate(0);
        History(id, "stop", true, 0,
                "agent '" + a.name + "' stopped and killed its process (exit " +
                    std::to_string(e.exit_code()) +
                    ") without a checkpoint: the job starts again when the "
                    "agent is back, from the beginning unless it keeps its "
                    "own checkpoints");
        continue;
      }
      // Killed at a daemon's request while the job goes on: that process
      // was being replaced (a restart, a move's fallback), the exit to
      // ignore perhaps counted by a daemon that has died since. Whatever
      // the daemon then did (or its successor decides at reconciliation)
      // says where the job runs.
      if (e.killed() && !IsEnded(id)) continue;
      const Proc was = x->proc;
      const std::optional<int32_t> was_code = x->exit_code;
      x->proc = Proc{};
      x->exit_code = e.exit_code();
      if (e.minibatches() > 0) x->progress.set_minibatches(e.minibatches());
      CopyMetric(e, &x->progress);
      if (IsEnded(id)) continue;
      if (!EndOnExit(id, *x, was, was_code, e.exit_code() == 0,
                     "exit code " + std::to_string(e.exit_code()))) {
        return ReportAgain(id);
      }
      // A gang's other parts end with their lead; any still running (a rank
      // hung) are stopped.
      if (was.gang()) {
        Proc rest = was;
        rest.server = ServerId();
        KillAt(id, rest, InternalActionId());
      }
    }
    const int64_t profile_now = Now();
    const int64_t every = static_cast<int64_t>(opts.profile_interval_s * 1e6);
    for (const rpc::JobProfile& p : r.profiles()) {
      const int32_t id = static_cast<int32_t>(p.job_id());
      JobExtra* x = Extra(id);
      if (x == nullptr || IsEnded(id) || x->proc.server != a.id) continue;
      // A new process (after a move, a restart) has reported no metric
      // yet: the job's last one stands.
      rpc::Progress next = p.progress();
      if (next.metric_reports() == 0) CopyMetric(x->progress, &next);
      // Nor has it counted a mini-batch before it has loaded its
      // checkpoint: the job's count stands until then.
      if (next.minibatches() == 0) {
        next.set_minibatches(x->progress.minibatches());
      }
      x->progress = std::move(next);
      CheckProbe(id, *x);
      StateCheck(a, id, *x, p.state());
      // Due on a grid of the interval, not an interval after the last one
      // fed: reports come at the agent's pace, a little early or late, and
      // the cadence must not fall to every other report.
      if (every > 0) {
        if (x->profile_due_us > profile_now) continue;  // shown by `ls`
        if (x->profile_due_us == 0) x->profile_due_us = profile_now;
        x->profile_due_us +=
            ((profile_now - x->profile_due_us) / every + 1) * every;
      }
      core::ProfileReport pr;
      pr.job = JobId(id);
      pr.minibatch_rate = p.progress().minibatch_rate();
      pr.minibatches = x->progress.minibatches();
      pr.gpu_memory_gb = static_cast<double>(p.progress().gpu_memory_bytes()) /
                         (1024.0 * 1024.0 * 1024.0);
      pr.gpu_utilization = p.progress().gpu_utilization();
      Defer(pr, opts.log_profile_reports_together);
    }
    if (a.reconcile_pending) {
      a.reconcile_pending = false;
      std::set<int32_t> missing;
      missing.swap(a.missing);
      // Its list at registration may predate a start that got there since:
      // a job this report shows running there is not lost.
      std::set<int32_t> running;
      for (const rpc::JobProfile& p : r.profiles()) {
        running.insert(static_cast<int32_t>(p.job_id()));
      }
      for (int32_t id : missing) {
        JobExtra* x = Extra(id);
        if (x != nullptr && x->proc.exists && x->proc.On(a.id) &&
            !IsEnded(id) && !running.contains(id) && !restarting.contains(id)) {
          Lost(a, id);
        }
      }
    }
    return grpc::Status::OK;
  }

  // A job's process that its agent reports in the other state than the
  // core has the job in (suspended while the core has it running, or
  // running while suspended), with no action of it under way, in two
  // reports in a row with no suspend or resume of it between: the daemon
  // and the agent parted ways (an action's outcome seen wrong, a call that
  // got there after its reply), and the job would stay so for good: shown
  // running with no progress, or training unseen on GPUs the core gives
  // others in their turn. The agent is told to set it right: to resume or
  // suspend the process, as the core has the job (history `reconcile`).
  // The second report is built after the first was handled: one that
  // predates an action's reply does not count twice.
  void StateCheck(const AgentConn& a, int32_t id, JobExtra& x,
                  rpc::JobState reported) {
    const core::Job& j = st().job(JobId(id));
    const bool wants_running = j.state == JobState::kRunning;
    const bool checkable =
        (reported == rpc::RUNNING || reported == rpc::SUSPENDED) &&
        (wants_running || j.state == JobState::kSuspended) && !j.busy() &&
        x.proc.exists && !x.proc.leaving && !x.proc.gang() &&
        x.proc.server == a.id && !restarting.contains(id) && Away(a.id).empty();
    if (!checkable || (reported == rpc::RUNNING) == wants_running) {
      x.mismatch = {};
      return;
    }
    if (x.mismatch.reports == 0 || x.mismatch.suspends != j.suspends ||
        x.mismatch.resumes != j.resumes) {
      x.mismatch = {1, j.suspends, j.resumes};
      return;
    }
    x.mismatch = {};
    auto stub = StubOf(a.id);
    if (stub == nullptr) return;
    const std::string detail =
        "agent '" + a.name + "' has its process " +
        (wants_running ? "suspended" : "running") +
        " while the scheduler has it " +
        (wants_running ? "running" : "suspended") +
        ", in two reports: " + (wants_running ? "resumed" : "suspended") +
        " it";
    Warn("job " + std::to_string(id) + ": " + detail);
    rpc::JobRequest req;
    req.set_job_id(id);
    req.set_action_id(InternalActionId());
    executor->Run(id, [=, this] {
      auto ctx = Ctx();
      int64_t took_us = 0;
      const grpc::Status s =
          SuspendOrResume(*stub, ctx.get(), req, !wants_running, &took_us);
      const std::string what = detail + (s.ok() ? "" : " failed: ") +
                               (s.ok() ? "" : s.error_message());
      Post([=, this] { History(id, "reconcile", s.ok(), took_us, what); });
    });
  }

  // An agent that stops says so first (its jobs are saving a checkpoint to
  // go on from when it is back): its server is cordoned, so that nothing
  // new is placed on GPUs no agent serves, and it is waited for
  // --agent-away-s before it is declared down.
  core::StatusOr<rpc::LeaveReply> Leave(const rpc::LeaveRequest& r) {
    auto it = agent_by_name.find(r.name());
    if (it == agent_by_name.end() ||
        agents[static_cast<size_t>(it->second)].link != AgentConn::Link::kUp) {
      return core::FailedPrecondition(
          "field 'name': agent '" + r.name() +
          "' is not registered (new, timed out, or the scheduler restarted)");
    }
    AgentConn& a = agents[static_cast<size_t>(it->second)];
    if (a.silent_since_us > 0) {
      // Its jobs' saves would be calls to an agent out of reach: it says
      // what it holds when it registers again.
      return core::FailedPrecondition(
          "field 'name': agent '" + r.name() +
          "' was out of reach (not heard of for more than " +
          Seconds(opts.agent_timeout_s) + "): register again first");
    }
    rpc::LeaveReply reply;
    reply.set_away_s(opts.agent_away_s);
    if (a.away_since_us == 0) {
      // Before it is away (calls to it then fail at once).
      for (auto [id, xp] : UnsettledJobs()) {
        JobExtra& x = *xp;
        if (x.proc.On(a.id)) x.dirty = true;
        // One being saved already (another of its agents stops too): this
        // agent waits for its part as well.
        if ((leave_saving.contains(id) && x.proc.On(a.id)) ||
            SaveGangForLeave(id, x, a)) {
          reply.add_saving(id);
        }
      }
      Leaving(a, Now());
      const core::Cluster& c = st().cluster();
      if (a.id.value < c.num_servers() && !c.server(a.id).cordoned) {
        GANDIVA_RETURN_IF_ERROR(Feed(core::CordonRequest{a.id, true}));
        a.away_cordon = true;
      }
      a.row_dirty = true;
      Log("agent '" + a.name + "' is stopping: server " +
          std::to_string(a.id.value) +
          (a.away_cordon ? " cordoned" : " (cordoned already)") +
          " until it is back, declared down if it is not within " +
          Seconds(opts.agent_away_s) +
          (reply.saving_size() > 0
               ? "; saving " + std::to_string(reply.saving_size()) +
                     " jobs spanning servers"
               : ""));
    }
    return reply;
  }

  static std::string Seconds(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%g s", s);
    return b;
  }

  LivenessLimits lim() const {
    return LivenessLimits::FromSeconds(opts.agent_timeout_s, opts.agent_grace_s,
                                       opts.agent_away_s);
  }
  // The out-of-reach agent of a server the job's process is on, if any.
  const AgentConn* OutOfReachAgentOf(const Proc& p) const {
    if (!p.exists) return nullptr;
    auto silent = [this](ServerId s) -> const AgentConn* {
      if (!s.valid() || static_cast<size_t>(s.value) >= agents.size()) {
        return nullptr;
      }
      const AgentConn& a = agents[static_cast<size_t>(s.value)];
      return a.silent_since_us > 0 ? &a : nullptr;
    };
    if (const AgentConn* a = silent(p.server)) return a;
    for (const Part& f : p.followers) {
      if (const AgentConn* a = silent(f.server)) return a;
    }
    return nullptr;
  }
  // Some part of the job is on a server whose agent is away.
  bool AnyPartAway(const Proc& p) const {
    const std::vector<Part> parts = p.parts();
    return std::any_of(parts.begin(), parts.end(), [&](const Part& part) {
      return !Away(part.server).empty();
    });
  }

  // Why calls to the agent of `s` would fail now ("": they may not): it
  // said it was stopping.
  std::string Away(ServerId s) const {
    if (!s.valid() || static_cast<size_t>(s.value) >= agents.size()) return "";
    const AgentConn& a = agents[static_cast<size_t>(s.value)];
    return UnreachableReason(a.name, a, NowConst());
  }

  void CheckAgents() {
    const int64_t now = Now();
    for (AgentConn& a : agents) {
      switch (CheckLiveness(a, lim(), now)) {
        case LivenessChange::kNone:
          continue;
        case LivenessChange::kOutOfReach:
          OutOfReach(a);
          continue;
        case LivenessChange::kDown:
          break;
      }
      a.reconcile_pending = false;
      a.missing.clear();
      const bool was_away = a.away();
      // Down now (its cordon, if the daemon's, still lifts when it is
      // back).
      MarkDown(a);
      Warn(was_away
               ? "agent '" + a.name + "' not back within " +
                     Seconds(opts.agent_away_s) +
                     " of its stop (--agent-away-s): server down"
               : "agent '" + a.name + "' not heard of for more than " +
                     Seconds(static_cast<double>(SilenceAllowedUs(a, lim())) /
                             1e6) +
                     " (--agent-timeout-s and --agent-grace-s): server down");
      a.row_dirty = true;
      if (a.id.value < st().cluster().num_servers() &&
          st().cluster().server(a.id).up) {
        (void)Feed(core::ServerDown{a.id});
      }
    }
  }

  // An agent not heard of for --agent-timeout-s: its server is cordoned
  // (the daemon's cordon, in its row before it is logged, lifted when it
  // registers again), calls to it fail at once, and its jobs stay placed
  // there, as they were: a network that parts for a while costs them
  // nothing. Declared down --agent-grace-s later (CheckAgents).
  void OutOfReach(AgentConn& a) {
    MarkOutOfReach(a, lim(), Now());
    a.row_dirty = true;
    const core::Cluster& c = st().cluster();
    const bool placed = a.id.value < c.num_servers() && c.server(a.id).up;
    bool cordoned = false;
    if (placed && !c.server(a.id).cordoned) {
      a.away_cordon = true;
      WriteBatch rows;
      rows.servers.push_back(ServerRowOf(a));
      if (store->Write(rows).ok()) {
        a.row_dirty = false;
        cordoned = Feed(core::CordonRequest{a.id, true}).ok();
      }
      if (!cordoned) {
        a.away_cordon = false;
        a.row_dirty = true;
      }
    }
    int jobs = 0;
    for (auto [id, xp] : UnsettledJobs()) {
      if (!xp->proc.On(a.id)) continue;
      xp->dirty = true;
      ++jobs;
    }
    Warn("agent '" + a.name + "' not heard of for more than " +
         Seconds(opts.agent_timeout_s) + ": out of reach, server " +
         std::to_string(a.id.value) +
         (cordoned                            ? " cordoned"
          : placed && c.server(a.id).cordoned ? " (cordoned already)"
                                              : " (not cordoned)") +
         "; its " + std::to_string(jobs) +
         (jobs == 1 ? " job stays" : " jobs stay") +
         " there until it is back, or it is declared down in " +
         Seconds(opts.agent_grace_s) + " (--agent-grace-s)");
  }

  // ------------------------------------------------------- user requests

  // Stores the jobs (durable before anything else), in order, then hands
  // them to the core, their arrivals logged in one append. When the store
  // fails part way (etcd writes a transaction per 99 jobs) the ones stored
  // go on, and the error names them.
  core::StatusOr<std::vector<int64_t>> Submit(
      std::span<const rpc::JobSpec* const> jobs) {
    std::vector<std::string> jsons;
    jsons.reserve(jobs.size());
    for (const rpc::JobSpec* spec : jobs) jsons.push_back(SpecToJson(*spec));
    const int64_t now = Now();
    const Store::Inserted in = store->InsertJobs(jsons, now);
    if (in.count == 0) {
      return in.status.ok() ? core::InvalidArgument("no jobs to submit")
                            : in.status;
    }
    const int64_t last = in.first_id + static_cast<int64_t>(in.count) - 1;
    if (last >= (int64_t{1} << 31)) {
      return core::Status(core::StatusCode::kInternal, "job ids exhausted");
    }
    std::vector<int64_t> ids;
    std::vector<core::EventBody> arrived;
    ids.reserve(in.count);
    arrived.reserve(in.count);
    for (size_t i = 0; i < in.count; ++i) {
      const auto id = static_cast<int32_t>(in.first_id + i);
      ids.push_back(id);
      AddExtra(id, *jobs[i], jsons[i]);
      arrived.push_back(core::JobArrived{JobId(id), ToCoreSpec(*jobs[i])});
    }
    (void)FeedTogether(std::move(arrived));
    if (!in.status.ok()) {
      return core::Status(
          in.status.code(),
          "stored " + std::to_string(in.count) + " of the " +
              std::to_string(jobs.size()) + " jobs (ids " +
              std::to_string(in.first_id) + "-" + std::to_string(last) +
              ", submitted), not the others: " + in.status.message());
    }
    return ids;
  }

  void AddExtra(int32_t id, const rpc::JobSpec& spec, const std::string& json) {
    JobExtra& x = extras[id];
    x.spec = spec;
    x.spec_json = json;
    unsettling.emplace_back(id, &x);
    std::lock_guard lock(settled_mu);
    specs[id] = std::make_shared<const rpc::JobSpec>(spec);
  }
  // Records the jobs' submission times as the core has them (SubmittedUs):
  // as each arrives (AfterHandle), and after a recovery (a snapshot
  // restores jobs without their arrival).
  template <typename Ids>
  void NoteSubmitted(const Ids& ids) {
    std::lock_guard lock(settled_mu);
    for (const auto id : ids) {
      const auto job = static_cast<int32_t>(id);
      if (!st().has_job(JobId(job))) continue;  // not arrived yet
      submitted_at[job] = st().job(JobId(job)).submitted.micros();
    }
  }

  core::Status CheckLiveJob(int64_t id) const {
    if (id > 0 && id < (int64_t{1} << 31) &&
        st().forgotten(JobId(static_cast<int32_t>(id)))) {
      return core::FailedPrecondition("job " + std::to_string(id) +
                                      " already ended (archived)");
    }
    if (!LiveJob(id)) return core::NotFound("no job " + std::to_string(id));
    const core::Job& j = st().job(JobId(static_cast<int32_t>(id)));
    if (core::IsTerminal(j.state)) {
      return core::FailedPrecondition(
          "job " + std::to_string(id) + " already ended (" +
          std::string(core::JobStateName(j.state)) + ")");
    }
    return core::Status::Ok();
  }

  // Kills (`kill`), or holds or releases (`hold`), the jobs `ids`, their
  // requests logged in one append: each one's outcome, in order (a job
  // named twice: the outcome of its first).
  std::vector<core::Status> ActOnJobs(std::span<const int64_t> ids, bool kill,
                                      bool hold, const std::string& reason) {
    std::vector<core::Status> out(ids.size());
    std::vector<core::EventBody> events;
    std::vector<size_t> fed;          // the index in `ids` of each event's job
    std::map<int64_t, size_t> first;  // by job id: its first index
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t id = ids[i];
      if (!first.emplace(id, i).second) continue;
      core::Status& result = out[i];
      result = CheckLiveJob(id);
      if (!result.ok()) continue;
      const JobId job(static_cast<int32_t>(id));
      if (kill) {
        events.push_back(
            core::KillRequest{job, reason.empty() ? "killed by user" : reason});
      } else {
        const core::Job& j = st().job(job);
        if (!hold && !j.held) {
          result = core::FailedPrecondition("job " + std::to_string(id) +
                                            " is not suspended by an operator");
          continue;
        }
        if (hold && j.held) continue;
        History(job.value, hold ? "hold" : "release", true, 0,
                hold ? "suspended by operator" : "resumed by operator");
        events.push_back(core::HoldRequest{job, hold});
      }
      fed.push_back(i);
    }
    const std::vector<core::Status> handled = FeedTogether(std::move(events));
    for (size_t k = 0; k < fed.size(); ++k) out[fed[k]] = handled[k];
    for (size_t i = 0; i < ids.size(); ++i) out[i] = out[first.at(ids[i])];
    return out;
  }

  // An operator's request for a mechanism: refused with the reason when the
  // job cannot be checkpointed or the core says it cannot be done now.
  core::Status Mechanism(const core::MechanismRequest& m,
                         const std::string& label) {
    GANDIVA_RETURN_IF_ERROR(CheckLiveJob(m.job.value));
    GANDIVA_RETURN_IF_ERROR(sched->Check(m));
    using K = core::MechanismRequest::Kind;
    const int32_t id = m.job.value;
    const JobExtra& x = *Extra(id);
    const core::Job& j = st().job(m.job);
    bool moves = m.kind == K::kMigrate || m.kind == K::kResize;
    if (m.kind == K::kPack && LiveJob(m.with.value)) {
      moves = j.gpus != st().job(m.with).gpus;
    }
    if (moves && j.launched && x.proc.gang() && !x.progress.uses_library()) {
      return core::FailedPrecondition(
          "cannot " + std::string(core::MechanismKindName(m.kind)) + " job " +
          std::to_string(id) +
          ": it spans servers and does not use the gandiva job-side "
          "library (a multi-server job moves by restarting every part from "
          "the checkpoint its rank 0 saves)");
    }
    if (moves && j.launched && x.proc.exists && !x.progress.uses_library() &&
        !x.spec.restartable()) {
      // Only CRIU can move it: it must work where the job is and where it
      // goes.
      const std::string head =
          "cannot " + std::string(core::MechanismKindName(m.kind)) + " job " +
          std::to_string(id) +
          ": it does not use the gandiva job-side library, is not "
          "declared restartable, and ";
      if (m.kind == K::kResize) {
        return core::FailedPrecondition(
            head + "CRIU can move a process but not change its world size");
      }
      std::vector<ServerId> ends = {x.proc.server};
      if (m.kind == K::kMigrate) ends.push_back(m.server);
      if (m.kind == K::kPack) {
        if (const JobExtra* w = Extra(m.with.value); w && w->proc.exists) {
          ends.push_back(w->proc.server);
        }
      }
      for (ServerId s : ends) {
        if (s.value < 0 || static_cast<size_t>(s.value) >= agents.size()) {
          continue;  // the core's check names a bad server
        }
        const AgentConn& a = agents[static_cast<size_t>(s.value)];
        if (!a.caps.criu()) {
          return core::FailedPrecondition(
              head + "CRIU is not usable on " + a.name + " (" +
              (a.caps.criu_detail().empty() ? "not checked"
                                            : a.caps.criu_detail()) +
              ")");
        }
      }
    }
    GANDIVA_RETURN_IF_ERROR(Feed(m));
    History(id, "request", true, 0, "operator: " + label);
    return core::Status::Ok();
  }

  // Cordons a server and migrates what is placed there to the open servers
  // with the most room first (each move as an operator's migrate: refused
  // with the reason when it cannot be done now); a packed pair is unpacked
  // first (a packed job cannot move), for a later drain to move; or opens
  // the server again.
  core::StatusOr<rpc::DrainReply> Drain(const rpc::DrainRequest& r) {
    auto it = agent_by_name.find(r.server());
    if (it == agent_by_name.end() ||
        it->second >= st().cluster().num_servers()) {
      return core::NotFound("field 'server': no server named '" + r.server() +
                            "'");
    }
    const ServerId sid(it->second);
    rpc::DrainReply reply;
    GANDIVA_RETURN_IF_ERROR(Feed(core::CordonRequest{sid, !r.undo()}));
    // The operator's from now on: it stays as they left it when an away
    // agent comes back.
    if (AgentConn& a = agents[static_cast<size_t>(sid.value)]; a.away_cordon) {
      a.away_cordon = false;
      a.row_dirty = true;
    }
    Log("server " + r.server() + (r.undo() ? " opened" : " cordoned"));
    if (r.undo() || r.cordon_only()) return reply;
    const core::Cluster& c = st().cluster();
    std::set<int32_t> placed;
    for (core::GpuId g : c.GpusOf(sid)) {
      for (JobId j : c.gpu(g).jobs) placed.insert(j.value);
    }
    std::set<int32_t> unpacking;
    for (int32_t id : placed) {
      rpc::DrainedJob* d = reply.add_jobs();
      d->set_job_id(id);
      if (const JobId peer = st().job(JobId(id)).packed_with; peer.valid()) {
        const std::string with =
            "packed with job " + std::to_string(peer.value);
        if (unpacking.count(peer.value)) {
          d->set_reason(with +
                        ", which this drain unpacks: drain again to "
                        "move it");
          continue;
        }
        core::MechanismRequest m;
        m.kind = core::MechanismRequest::Kind::kUnpack;
        m.job = JobId(id);
        const core::Status s = Mechanism(m, "drain " + r.server());
        if (!s.ok()) {
          d->set_reason(with + ": " + s.message());
          continue;
        }
        unpacking.insert(id);
        d->set_unpacking(true);
        d->set_reason(with + ": unpacking it; drain again to move them");
        continue;
      }
      // Open servers, the most room (GPUs no running job holds) first.
      std::vector<std::pair<int, int32_t>> targets;
      for (const core::Server& s : c.servers()) {
        if (s.id == sid || !s.up || s.cordoned) continue;
        int idle = 0;
        for (core::GpuId g : c.GpusOf(s.id)) idle += c.gpu(g).active == 0;
        targets.emplace_back(-idle, s.id.value);
      }
      std::sort(targets.begin(), targets.end());
      if (targets.empty()) {
        d->set_reason("no other server is up and open");
        continue;
      }
      for (const auto& target : targets) {
        const int32_t to = target.second;
        core::MechanismRequest m;
        m.kind = core::MechanismRequest::Kind::kMigrate;
        m.job = JobId(id);
        m.server = ServerId(to);
        const core::Status s = Mechanism(m, "drain " + r.server());
        if (s.ok()) {
          d->set_moved_to(agents[static_cast<size_t>(to)].name);
          d->clear_reason();
          break;
        }
        if (d->reason().empty()) d->set_reason(s.message());
      }
    }
    return reply;
  }

  // An operator's change of a live job's priority (history `priority`);
  // its priority before.
  core::StatusOr<int32_t> SetPriority(int64_t id, int32_t priority) {
    GANDIVA_RETURN_IF_ERROR(CheckLiveJob(id));
    const auto job = static_cast<int32_t>(id);
    const int32_t was = st().job(JobId(job)).spec.priority;
    if (was == priority) return was;
    GANDIVA_RETURN_IF_ERROR(Feed(core::PriorityRequest{JobId(job), priority}));
    History(job, "priority", true, 0,
            "priority " + std::to_string(was) + " -> " +
                std::to_string(priority) + ", set by an operator");
    return was;
  }

  // --------------------------------------------- persistence and snapshot

  ServerRow ServerRowOf(const AgentConn& a) const {
    ServerRow r;
    r.id = a.id.value;
    r.name = a.name;
    r.address = a.address;
    json g = json::array();
    for (const rpc::Gpu& gpu : a.gpus) {
      std::string s;
      (void)google::protobuf::util::MessageToJsonString(gpu, &s);
      g.push_back(json::parse(s));
    }
    r.gpus_json = g.dump();
    r.sockets = a.sockets;
    r.switches_per_socket = a.switches_per_socket;
    r.away_since_us = a.away_since_us;
    r.away_cordon = a.away_cordon;
    return r;
  }

  QueueView ViewQueue() {
    QueueView v;
    const auto& queued = st().queue();
    if (queue_order == nullptr ||
        queue_order->version != st().queue_version()) {
      auto order = std::make_shared<QueueView::Order>();
      order->version = st().queue_version();
      if (!queued.empty()) {
        int32_t lo = queued.begin()->id.value, hi = lo;
        for (const core::JobOrder& o : queued) {
          lo = std::min(lo, o.id.value);
          hi = std::max(hi, o.id.value);
        }
        order->first = lo;
        order->ahead.assign(static_cast<size_t>(hi - lo) + 1, -1);
        int32_t k = 0;
        for (const core::JobOrder& o : queued) {
          order->ahead[static_cast<size_t>(o.id.value - lo)] = k++;
        }
      }
      queue_order = std::move(order);
    }
    v.order = queue_order;
    for (const core::Server& s : st().cluster().servers()) {
      if (!s.up || s.cordoned) continue;
      v.open_gpus += s.spec.gpus;
      v.free_gpus += s.free_gpus;
      v.most_free_on_one = std::max(v.most_free_on_one, s.free_gpus);
      v.largest_server = std::max(v.largest_server, s.spec.gpus);
    }
    return v;
  }
  // The names of the servers `j`'s failed starts were on, "" if none.
  static std::string StartFailedOn(const core::Job& j,
                                   const core::Cluster& cluster) {
    std::string names;
    for (core::ServerId s : j.start_failed_on) {
      names += (names.empty() ? "" : ", ") + cluster.server(s).spec.name;
    }
    return names;
  }
  static constexpr const char* kHeldReason =
      "held by an operator (gandiva resume releases it)";
  // Why a queued job does not run yet when that is its own doing (held,
  // or waiting to try its start again); "" otherwise: its reason is then
  // the queue's (QueueWaitingReason), which readers compose.
  static std::string OwnWaitingReason(const core::Job& j,
                                      const core::Cluster& cluster,
                                      core::Time now) {
    if (j.held) return kHeldReason;
    if (!j.awaits_start_retry(now)) return "";
    const std::string where = StartFailedOn(j, cluster);
    return "its start failed " + std::to_string(j.start_failures) +
           (j.start_failures == 1 ? " time" : " times") + " in a row" +
           (where.empty() ? "" : " (on " + where + ")") +
           ": it waits before it is tried again" +
           (where.empty() ? "" : ", on another server if one has room");
  }

  // A hash of everything InfoOf(id, x) reads, so that a job whose
  // inputs are unchanged keeps its published info (at 10,000 queued jobs,
  // building every one's again for each request cost the daemon tens of
  // milliseconds a request). 0 (build it again): its waiting reason counts
  // down the time its agent has left.
  uint64_t PublishInputs(int32_t id, const JobExtra& x) const {
    InputsHash hash;
    auto mix = [&hash](uint64_t v) { hash.Mix(v); };
    auto mixd = [&mix](double d) { mix(std::bit_cast<uint64_t>(d)); };
    mix(x.exit_code.has_value() ? 1 : 0);
    mix(static_cast<uint64_t>(x.exit_code.value_or(0)));
    const rpc::Progress& p = x.progress;
    mix(static_cast<uint64_t>(p.minibatches()));
    mixd(p.minibatch_rate());
    mixd(p.gpu_utilization());
    mix(static_cast<uint64_t>(p.gpu_memory_bytes()));
    mix(p.uses_library() ? 1 : 0);
    mix(std::hash<std::string_view>{}(p.sharing()));
    mix(static_cast<uint64_t>(p.world_size()));
    mixd(p.metric());
    mix(static_cast<uint64_t>(p.metric_minibatches()));
    mix(static_cast<uint64_t>(p.metric_reports()));
    const bool in_core = st().has_job(JobId(id));
    mix(in_core ? 1 : 0);
    if (!in_core) return hash.value();
    const core::Job& j = st().job(JobId(id));
    if (j.state == core::JobState::kRunning && !j.busy() && !x.proc.exists &&
        x.proc.checkpoint) {
      return 0;
    }
    if (OutOfReachAgentOf(x.proc) != nullptr) return 0;  // counts down
    mix(static_cast<uint64_t>(j.state));
    mix((j.launched ? 1 : 0) | (j.busy() ? 2 : 0) | (j.held ? 4 : 0));
    mix(static_cast<uint64_t>(static_cast<int64_t>(j.spec.priority)));
    mix(static_cast<uint64_t>(j.submitted.micros()));
    mix(static_cast<uint64_t>(j.first_started.micros()));
    mix(static_cast<uint64_t>(j.ended.micros()));
    mix(static_cast<uint64_t>(j.suspends));
    mix(static_cast<uint64_t>(j.resumes));
    mix(static_cast<uint64_t>(j.start_failures));
    const bool retry = j.awaits_start_retry(st().now());
    mix(retry ? static_cast<uint64_t>(j.start_retry_at.micros()) : 0);
    mix(static_cast<uint64_t>(j.profile.minibatches));
    mix(j.gpus.size());
    for (core::GpuId g : j.gpus) mix(static_cast<uint64_t>(g.value));
    if (j.state == core::JobState::kQueued) {
      mix(j.start_failed_on.size());
      for (core::ServerId s : j.start_failed_on) {
        mix(static_cast<uint64_t>(s.value));
      }
    }
    return hash.value();
  }

  // What is published of the job (without its spec: see Snapshot::jobs).
  rpc::JobInfo InfoOf(int32_t id, const JobExtra& x) const {
    rpc::JobInfo info;
    info.set_id(id);
    *info.mutable_progress() = x.progress;
    info.set_uses_library(x.progress.uses_library());
    if (x.exit_code) info.set_exit_code(*x.exit_code);
    if (!st().has_job(JobId(id))) {
      info.set_state(rpc::QUEUED);
      info.set_priority(x.spec.priority());
      return info;
    }
    const core::Job& j = st().job(JobId(id));
    info.set_state(ToRpcState(j));
    info.set_priority(j.spec.priority);
    info.set_submitted_us(j.submitted.micros());
    if (j.first_started != core::Time::Never()) {
      info.set_started_us(j.first_started.micros());
    }
    if (j.ended != core::Time::Never()) info.set_ended_us(j.ended.micros());
    info.set_suspends(j.suspends);
    info.set_resumes(j.resumes);
    info.set_start_failures(j.start_failures);
    if (j.awaits_start_retry(st().now())) {
      info.set_start_retry_us(j.start_retry_at.micros());
    }
    if (j.state == core::JobState::kQueued) {
      info.set_waiting_reason(OwnWaitingReason(j, st().cluster(), st().now()));
    } else if (j.state == core::JobState::kSuspended && !j.busy()) {
      info.set_waiting_reason(
          j.held ? kHeldReason
          : j.launched
              ? "time-sliced: it waits for its next turn on its GPUs"
              : "time-sliced: it waits for its first turn on its GPUs");
    } else if (j.state == core::JobState::kRunning && !j.busy() &&
               !x.proc.exists && x.proc.checkpoint &&
               static_cast<size_t>(x.proc.server.value) < agents.size()) {
      const AgentConn& a = agents[static_cast<size_t>(x.proc.server.value)];
      std::string within;
      if (a.away_since_us > 0) {
        const double left =
            static_cast<double>(AwayUntilUs(a, lim()) - WallMicros()) / 1e6;
        char b[64];
        std::snprintf(b, sizeof b, "if it is not back within %.0f s,",
                      std::max(0.0, left));
        within = b;
      } else {
        within =
            "after " +
            Seconds(static_cast<double>(SilenceAllowedUs(a, lim())) / 1e6) +
            " without it";
      }
      info.set_waiting_reason(
          "agent '" + a.name +
          "' stopped: the job goes on from the checkpoint kept there when "
          "the agent is back (" +
          within +
          " the server is declared down and the job placed again, from the "
          "beginning)");
    }
    if (const AgentConn* a = OutOfReachAgentOf(x.proc);
        a != nullptr && !core::IsTerminal(j.state)) {
      char b[160];
      std::snprintf(
          b, sizeof b,
          " is out of reach (not heard of for %.0f s): the job is kept there "
          "as it was until the agent is back (if it is not within %.0f s, ",
          static_cast<double>(NowConst() - a->last_seen_us) / 1e6,
          std::max(0.0, static_cast<double>(a->silent_until_us - WallMicros()) /
                            1e6));
      info.set_waiting_reason(
          "agent '" + a->name + "'" + b +
          "the server is declared down and the job placed again)");
    }
    // Where it is placed, or last ran once it ended. A queued job: where
    // its process (or checkpoint) was left, requeued by the policy; none
    // after a failed start or a lost server (its GPUs are the last it was
    // placed on, which it no longer holds).
    if (!j.gpus.empty() && (j.state != core::JobState::kQueued || j.launched)) {
      const core::Cluster& c = st().cluster();
      const std::vector<Part> parts = Parts(j.gpus);
      info.set_server(c.server(parts[0].server).spec.name);
      for (int32_t g : parts[0].local) info.add_gpus(g);
      if (parts.size() > 1) {
        for (const Part& p : parts) {
          rpc::JobPart* jp = info.add_parts();
          jp->set_server(c.server(p.server).spec.name);
          for (int32_t g : p.local) jp->add_gpus(g);
        }
      }
    }
    if (info.progress().minibatches() == 0 && j.profile.minibatches > 0) {
      info.mutable_progress()->set_minibatches(j.profile.minibatches);
    }
    return info;
  }

  // A forgotten job's info, from its row (RowOf's inverse, as far as the
  // row goes).
  static rpc::JobInfo InfoOfArchived(const JobRow& r) {
    rpc::JobInfo i;
    i.set_id(r.id);
    (void)google::protobuf::util::JsonStringToMessage(r.spec_json,
                                                      i.mutable_spec());
    i.set_state(static_cast<rpc::JobState>(r.state));
    i.set_submitted_us(r.submitted_us);
    i.set_started_us(r.started_us);
    i.set_ended_us(r.ended_us);
    if (r.exit_code) i.set_exit_code(*r.exit_code);
    rpc::Progress* p = i.mutable_progress();
    p->set_minibatches(r.minibatches);
    p->set_minibatch_rate(r.minibatch_rate);
    p->set_metric(r.metric);
    p->set_metric_minibatches(r.metric_minibatches);
    p->set_metric_reports(r.metric_reports);
    p->set_uses_library(r.uses_library);
    i.set_uses_library(r.uses_library);
    i.set_server(r.server);
    try {
      for (int32_t g : json::parse(r.gpus_json).get<std::vector<int32_t>>()) {
        i.add_gpus(g);
      }
    } catch (const json::exception&) {
      // Left empty: the row's GPUs are not a list of indices.
    }
    i.set_suspends(r.suspends);
    i.set_resumes(r.resumes);
    i.set_priority(i.spec().priority());
    i.set_archived(true);
    return i;
  }

  static JobRow RowOf(const rpc::JobInfo& i, const JobExtra& x) {
    JobRow r;
    r.id = i.id();
    r.spec_json = x.spec_json;
    r.state = i.state();
    r.submitted_us = i.submitted_us();
    r.started_us = i.started_us();
    r.ended_us = i.ended_us();
    r.exit_code = x.exit_code;
    r.minibatches = i.progress().minibatches();
    r.minibatch_rate = i.progress().minibatch_rate();
    r.uses_library = i.uses_library();
    r.server = i.server();
    r.gpus_json =
        json(std::vector<int32_t>(i.gpus().begin(), i.gpus().end())).dump();
    r.suspends = i.suspends();
    r.resumes = i.resumes();
    r.metric = i.progress().metric();
    r.metric_minibatches = i.progress().metric_minibatches();
    r.metric_reports = i.progress().metric_reports();
    return r;
  }
  // Whether the row RowOf(i, x) would be is the one last written (without
  // building it).
  // Whether the row written last for the job is RowOf(i, x); with
  // `but_progress`, apart from the progress (mini-batches, rate, metric).
  static bool SameAsWritten(const rpc::JobInfo& i, const JobExtra& x,
                            bool but_progress = false) {
    const JobRow& w = x.written;
    if (x.exit_code != w.exit_code || i.state() != w.state ||
        i.started_us() != w.started_us || i.ended_us() != w.ended_us ||
        i.submitted_us() != w.submitted_us ||
        i.uses_library() != w.uses_library || i.server() != w.server ||
        i.suspends() != w.suspends || i.resumes() != w.resumes) {
      return false;
    }
    if (!but_progress &&
        (i.progress().minibatches() != w.minibatches ||
         i.progress().minibatch_rate() != w.minibatch_rate ||
         i.progress().metric() != w.metric ||
         i.progress().metric_minibatches() != w.metric_minibatches ||
         i.progress().metric_reports() != w.metric_reports)) {
      return false;
    }
    // The GPUs as RowOf writes them ("[0,1]"), compared in place.
    const std::string& g = w.gpus_json;
    size_t at = 0;
    auto take = [&](char c) { return at < g.size() && g[at++] == c; };
    if (!take('[')) return false;
    for (int k = 0; k < i.gpus_size(); ++k) {
      if (k > 0 && !take(',')) return false;
      char buf[16];
      const auto r = std::to_chars(buf, buf + sizeof buf, i.gpus(k));
      for (const char* c = buf; c != r.ptr; ++c) {
        if (!take(*c)) return false;
      }
    }
    return take(']') && at == g.size();
  }

  // verify_reused_job_info: the info a publication reuses is the one
  // InfoOf (ServerInfoOf) would build now; the daemon aborts if not.
  template <typename Info>
  void AbortUnlessSame(const std::string& what, const Info& reused,
                       const Info& fresh) {
    if (fresh.SerializeAsString() == reused.SerializeAsString()) return;
    Warn(what +
         ": the published info was reused, but its inputs changed: "
         "published " +
         reused.ShortDebugString() + ", now " + fresh.ShortDebugString());
    std::abort();
  }
  void VerifyReused(int32_t id, const JobExtra& x) {
    AbortUnlessSame("job " + std::to_string(id), *x.published, InfoOf(id, x));
  }

  // What ListServers shows of the server of `a`.
  rpc::ServerInfo ServerInfoOf(const AgentConn& a) {
    rpc::ServerInfo info;
    const core::Cluster& c = st().cluster();
    info.set_id(a.id.value);
    info.set_name(a.name);
    info.set_address(a.address);
    for (const rpc::Gpu& g : a.gpus) *info.add_gpus() = g;
    if (a.id.value >= c.num_servers()) return info;
    const core::Server& s = c.server(a.id);
    // Away, or not registered with this daemon yet: no agent serves it
    // (as far as the daemon knows), though its jobs stay placed there.
    info.set_up(s.up && a.link == AgentConn::Link::kUp &&
                a.away_since_us == 0 && a.silent_since_us == 0);
    info.set_cordoned(s.cordoned);
    if (a.away_since_us > 0) {
      info.set_away_since_us(a.away_since_us);
      info.set_away_until_us(AwayUntilUs(a, lim()));
    }
    if (a.silent_since_us > 0) {
      info.set_silent_since_us(a.silent_since_us);
      info.set_silent_until_us(a.silent_until_us);
    }
    if (a.link == AgentConn::Link::kAwaiting) {
      info.set_awaiting_until_us(AwaitingUntilUs(a, lim()));
    }
    info.set_height(s.height());
    info.set_affinity(s.affinity);
    info.set_free_gpus(s.free_gpus);
    *info.mutable_capabilities() = a.caps;
    for (core::GpuId g : c.GpusOf(a.id)) {
      rpc::GpuJobs* gj = info.add_gpu_jobs();
      for (JobId j : c.gpu(g).jobs) {
        if (st().job(j).state == JobState::kRunning) gj->add_running(j.value);
      }
      for (JobId j : c.gpu(g).jobs) {
        if (st().job(j).state != JobState::kRunning) gj->add_waiting(j.value);
      }
    }
    return info;
  }

  // A hash of everything ServerInfoOf(a) reads (its GPUs and capabilities
  // through the count of registrations), so that an unchanged server keeps
  // its published info: at 1,250 servers of 8 GPUs, building them all again
  // on each pass of the loop was most of the pass. 0 (build it again): an
  // agent awaited, whose deadline is computed from the clocks each time.
  uint64_t ServerInputs(const AgentConn& a) const {
    if (a.link == AgentConn::Link::kAwaiting) return 0;
    InputsHash hash;
    auto mix = [&hash](uint64_t v) { hash.Mix(v); };
    mix(a.registrations);
    mix(std::hash<std::string_view>{}(a.name));
    mix(std::hash<std::string_view>{}(a.address));
    mix(a.gpus.size());
    mix(static_cast<uint64_t>(a.link));
    mix(static_cast<uint64_t>(a.away_since_us));
    mix(static_cast<uint64_t>(a.silent_since_us));
    mix(static_cast<uint64_t>(a.silent_until_us));
    const core::Cluster& c = st().cluster();
    mix(a.id.value < c.num_servers() ? 1 : 0);
    if (a.id.value < c.num_servers()) {
      const core::Server& s = c.server(a.id);
      mix((s.up ? 1 : 0) | (s.cordoned ? 2 : 0));
      mix(static_cast<uint64_t>(s.height()));
      mix(static_cast<uint64_t>(s.affinity));
      mix(static_cast<uint64_t>(s.free_gpus));
      for (core::GpuId g : c.GpusOf(a.id)) {
        const auto& jobs = c.gpu(g).jobs;
        mix(jobs.size());
        for (JobId j : jobs) {
          mix(static_cast<uint64_t>(j.value) << 1 |
              (st().job(j).state == JobState::kRunning ? 1 : 0));
        }
      }
    }
    return hash.value();
  }

  void VerifyReused(const AgentConn& a) {
    AbortUnlessSame("server " + std::to_string(a.id.value), *a.published,
                    ServerInfoOf(a));
  }

  // The job's row, as `info` shows it, goes into this pass's batch.
  void WriteRow(const rpc::JobInfo& info, JobExtra& x) {
    JobRow row = RowOf(info, x);
    batch.jobs.push_back(row);
    x.written = std::move(row);
    x.has_written = true;
  }

  // `all_progress`: the rows of jobs whose progress alone changed are
  // written now, whenever they were last (a clean stop).
  void PersistAndPublish(bool all_progress = false) {
    // What is published has been logged: the events deferred are first.
    (void)FlushDeferred();
    auto next = std::make_shared<Snapshot>();
    const int64_t now = Now();
    const bool progress_due = all_progress || now >= progress_write_due_us;
    next->queue = std::make_shared<const QueueView>(ViewQueue());
    if (!unsettling.empty()) {
      std::sort(unsettling.begin(), unsettling.end());
      const auto was = static_cast<std::ptrdiff_t>(unsettled.size());
      unsettled.insert(unsettled.end(), unsettling.begin(), unsettling.end());
      std::inplace_merge(unsettled.begin(), unsettled.begin() + was,
                         unsettled.end());
      unsettling.clear();
    }
    next->jobs.reserve(unsettled.size());
    size_t kept = 0;
    for (size_t i = 0; i < unsettled.size(); ++i) {
      const int32_t id = unsettled[i].first;
      JobExtra& x = *unsettled[i].second;
      if (!x.dirty && !x.volatile_info && x.published != nullptr &&
          opts.reuse_unchanged_job_info) {
        // Nothing it is built from changed since it was published.
        if (opts.verify_reused_job_info) {
          if (PublishInputs(id, x) != x.published_inputs) {
            Warn("job " + std::to_string(id) +
                 ": its info's inputs changed, but it was not marked dirty");
            std::abort();
          }
          VerifyReused(id, x);
        }
        next->jobs.emplace_back(id, x.published);
        unsettled[kept++] = unsettled[i];
        continue;
      }
      x.dirty = false;
      const uint64_t inputs =
          opts.reuse_unchanged_job_info ? PublishInputs(id, x) : 0;
      x.volatile_info =
          inputs == 0 || (st().has_job(JobId(id)) &&
                          st().job(JobId(id)).awaits_start_retry(st().now()));
      if (inputs != 0 && x.published != nullptr &&
          inputs == x.published_inputs) {
        // Unchanged, and so is its row.
        if (opts.verify_reused_job_info) VerifyReused(id, x);
      } else {
        auto info = std::make_shared<const rpc::JobInfo>(InfoOf(id, x));
        if (st().has_job(JobId(id)) &&
            (!x.has_written || !SameAsWritten(*info, x))) {
          if (!progress_due && x.has_written &&
              SameAsWritten(*info, x, /*but_progress=*/true)) {
            // Only its progress changed: written with the others' at the
            // next --progress-write-interval-s.
            progress_behind.insert(id);
          } else {
            WriteRow(*info, x);
            progress_behind.erase(id);
          }
        }
        x.published = std::move(info);
        x.published_inputs = inputs;
      }
      if (IsEnded(id) && !x.proc.exists && !x.proc.checkpoint &&
          x.has_written) {
        x.settled = true;
        EndStreak(id);
        std::lock_guard lock(settled_mu);
        settled_jobs[id] = *x.published;
        x.published.reset();
        continue;
      }
      next->jobs.emplace_back(id, x.published);
      unsettled[kept++] = unsettled[i];
    }
    unsettled.resize(kept);
    if (progress_due) {
      for (int32_t id : progress_behind) {
        JobExtra* x = Extra(id);
        if (x == nullptr || x->published == nullptr || !st().has_job(JobId(id)))
          continue;
        WriteRow(*x->published, *x);
      }
      progress_behind.clear();
      progress_write_due_us =
          now + static_cast<int64_t>(opts.progress_write_interval_s * 1e6);
    }
    for (AgentConn& a : agents) {
      if (!a.row_dirty && !all_server_rows_dirty) continue;
      batch.servers.push_back(ServerRowOf(a));
      a.row_dirty = false;
    }
    all_server_rows_dirty = false;
    if (core::Status s = store->Write(batch); !s.ok()) {
      Warn("cannot write state: " + s.ToString());
    }
    batch = WriteBatch{};
    next->servers.reserve(agents.size());
    for (AgentConn& a : agents) {
      const uint64_t inputs =
          opts.reuse_unchanged_job_info ? ServerInputs(a) : 0;
      if (inputs != 0 && a.published != nullptr &&
          inputs == a.published_inputs) {
        if (opts.verify_reused_job_info) VerifyReused(a);
      } else {
        a.published = std::make_shared<const rpc::ServerInfo>(ServerInfoOf(a));
        a.published_inputs = inputs;
      }
      next->servers.push_back(a.published);
    }
    next->counters = st().counters();
    next->log_events = events_since_compaction;
    next->last_event_seq = store->LastEventSeq();
    next->log_appends = log_appends;
    next->compactions = compactions;
    next->jobs_archived = st().forgotten_jobs();
    next->archive_deleted = archive_pruned;
    next->job_id_limit = st().job_id_limit();
    next->lost_ids = lost_ids;
    next->last_compaction_s = last_compaction_s;
    std::lock_guard lock(snap_mu);
    snap = std::move(next);
  }

  // What the metrics export, from the last published snapshot.
  MetricsSample SampleMetrics() {
    const std::shared_ptr<const Snapshot> sn = Snap();
    MetricsSample s;
    auto name = [](rpc::JobState state) {
      std::string n = rpc::JobState_Name(state);
      for (char& ch : n) ch = static_cast<char>(std::tolower(ch));
      return n;
    };
    for (rpc::JobState state :
         {rpc::QUEUED, rpc::RUNNING, rpc::SUSPENDED, rpc::MIGRATING,
          rpc::FINISHED, rpc::FAILED, rpc::KILLED}) {
      s.jobs_by_state[name(state)] = 0;
    }
    std::lock_guard lock(settled_mu);
    for (const auto& [id, info] : settled_jobs) {
      if (sn->Find(id) == nullptr) ++s.jobs_by_state[name(info.state())];
    }
    for (const auto& [id, info_ptr] : sn->jobs) {
      const rpc::JobInfo& info = *info_ptr;
      ++s.jobs_by_state[name(info.state())];
      if (info.state() == rpc::RUNNING) {
        auto sp = specs.find(id);
        const std::string job_name =
            sp != specs.end() ? sp->second->name() : "";
        s.running.push_back({id, job_name, info.progress().minibatch_rate(),
                             info.progress().minibatches(),
                             info.progress().gpu_utilization(),
                             info.progress().gpu_memory_bytes()});
      }
    }
    for (const auto& server : sn->servers) {
      const rpc::ServerInfo& si = *server;
      const int64_t n = si.gpus_size();
      s.gpus += n;
      if (si.up()) {
        ++s.servers_up;
        if (si.cordoned()) ++s.servers_cordoned;
        s.gpus_up += n;
        if (!si.cordoned()) s.gpus_free += si.free_gpus();
      } else {
        ++s.servers_down;
        if (si.silent_since_us() > 0) ++s.servers_out_of_reach;
      }
      for (const rpc::GpuJobs& g : si.gpu_jobs()) {
        if (g.running_size() > 0) ++s.gpus_training;
      }
    }
    s.actions = sn->counters;
    s.log_events = sn->log_events;
    s.last_event_seq = sn->last_event_seq;
    s.log_appends = sn->log_appends;
    s.compactions = sn->compactions;
    s.jobs_archived = sn->jobs_archived;
    s.archive_deleted = sn->archive_deleted;
    s.last_compaction_seconds = sn->last_compaction_s;
    return s;
  }

  std::shared_ptr<const Snapshot> Snap() {
    std::lock_guard lock(snap_mu);
    return snap;
  }

  // ------------------------------------------------------------ the loop

  void LoopMain() {
    const auto tick = std::chrono::milliseconds(std::max(1, opts.tick_ms));
    auto next_tick = std::chrono::steady_clock::now() + tick;
    const auto retention =
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(opts.retention_check_s));
    next_retention_check = std::chrono::steady_clock::now() + retention;
    while (true) {
      std::deque<std::function<void()>> work;
      {
        std::unique_lock lock(mu);
        // Events or archived jobs left to delete: on without waiting.
        const bool more = compacted_events_left || archive_prune_left;
        cv.wait_until(lock, more ? std::chrono::steady_clock::now() : next_tick,
                      [&] { return stopping || !queue.empty(); });
        if (stopping) break;
        work.swap(queue);
      }
      for (auto& f : work) f();
      if (std::chrono::steady_clock::now() >= next_tick) {
        (void)Feed(core::Tick{});
        CheckAgents();
        next_tick = std::chrono::steady_clock::now() + tick;
      }
      PersistAndPublish();
      for (auto& answer : answers) answer();
      answers.clear();
      if (opts.snapshot_every_events > 0 &&
          events_since_compaction >= opts.snapshot_every_events) {
        CompactLog();
      }
      if (compacted_events_left) DeleteCompactedEvents(kCompactionChunk);
      if (std::chrono::steady_clock::now() >= next_retention_check) {
        CheckRetention();
        next_retention_check = std::chrono::steady_clock::now() + retention;
      }
      if (archive_prune_left) PruneArchive(store->PruneChunk());
    }
    // A clean stop leaves nothing to replay, nor a row behind.
    PersistAndPublish(/*all_progress=*/true);
    if (opts.snapshot_every_events > 0) CompactLog();
    while (compacted_events_left) DeleteCompactedEvents(kCompactionChunk);
  }

  static constexpr int64_t kCompactionChunk = 5000;

  // Applies the limits on ended jobs between compactions: compacts (which
  // forgets them) when some ended job is past --keep-ended-for, or the
  // ended jobs exceed --keep-ended-jobs by a tenth (fewer wait for the next
  // compaction); starts deleting the archived jobs past
  // --keep-archived-for.
  void CheckRetention() {
    if (opts.snapshot_every_events > 0 && ForgetsEndedJobs()) {
      const std::vector<std::pair<int64_t, int32_t>> ended = Forgettable();
      const auto keep = static_cast<size_t>(opts.keep_ended_jobs);
      if (BeyondKept(ended.size()) >= std::max<size_t>(1, keep / 10) ||
          PastAge(ended, Now()) > 0) {
        CompactLog();
      }
    }
    if (opts.keep_archived_for_s > 0) archive_prune_left = true;
  }

  void PruneArchive(int64_t limit) {
    const int64_t cutoff =
        Now() - static_cast<int64_t>(opts.keep_archived_for_s * 1e6);
    auto n = store->PruneArchive(cutoff, limit);
    if (!n.ok()) {
      Warn("cannot delete archived jobs: " + n.status().ToString());
      archive_prune_left = false;  // tried again at the next check
      archive_pruned_round = 0;
      return;
    }
    archive_pruned += *n;
    archive_pruned_round += *n;
    archive_prune_left = *n == limit;
    if (!archive_prune_left && archive_pruned_round > 0) {
      Log("deleted " + std::to_string(archive_pruned_round) +
          " archived jobs that ended more than " +
          DurationText(opts.keep_archived_for_s) + " ago");
      archive_pruned_round = 0;
    }
  }

  void DeleteCompactedEvents(int64_t limit) {
    auto n = store->DeleteCompactedEvents(limit);
    if (!n.ok()) {
      Warn("cannot delete compacted events: " + n.status().ToString());
      compacted_events_left = false;  // tried again at the next compaction
      return;
    }
    compacted_events_left = *n == limit;
  }

  // ------------------------------------------------------ log compaction

  // The daemon's bookkeeping that replaying events rebuilds (where each
  // job's process is, actions under way) and the exits it ignores, as JSON.
  json DaemonState() const {
    json jobs = json::object();
    for (const auto& [id, x] : extras) {
      const Proc& p = x.proc;
      const bool plain = !p.exists && !p.checkpoint && !p.leaving &&
                         !p.server.valid() && p.local.empty();
      if (plain && x.ignore_exits.empty()) continue;
      json j;
      j["proc"] = {{"server", p.server.value},
                   {"local", p.local},
                   {"exists", p.exists},
                   {"checkpoint", p.checkpoint},
                   {"leaving", p.leaving}};
      if (p.gang()) {
        json followers = json::array();
        for (const Part& f : p.followers) {
          followers.push_back({{"server", f.server.value}, {"local", f.local}});
        }
        j["proc"]["followers"] = std::move(followers);
      }
      json ignore = json::object();
      for (const auto& [server, n] : x.ignore_exits) {
        ignore[std::to_string(server)] = n;
      }
      j["ignore_exits"] = std::move(ignore);
      jobs[std::to_string(id)] = std::move(j);
    }
    json pend = json::array();
    for (const auto& [id, p] : pending) {
      const core::Action& a = p.action;
      json gpus = json::array();
      for (core::GpuId g : a.gpus) gpus.push_back(g.value);
      pend.push_back({{"id", a.id.value},
                      {"kind", static_cast<int>(a.kind)},
                      {"job", a.job.value},
                      {"gpus", std::move(gpus)},
                      {"peer", a.peer.value},
                      {"launch", a.launch},
                      {"priority", a.priority},
                      {"reason", a.reason},
                      {"dispatched_us", p.dispatched_us},
                      {"relocate", p.relocate},
                      {"rate_before", p.rate_before}});
    }
    return {{"version", 1},
            {"clock_us", clock_us},
            {"jobs", std::move(jobs)},
            {"pending", std::move(pend)}};
  }

  core::Status RestoreDaemonState(const std::string& text) {
    try {
      const json d = json::parse(text);
      if (d.at("version").get<int>() != 1) {
        return core::InvalidArgument("daemon state: version " +
                                     d.at("version").dump());
      }
      clock_us = std::max(clock_us, d.at("clock_us").get<int64_t>());
      for (const auto& [key, j] : d.at("jobs").items()) {
        JobExtra* x = Extra(std::stoi(key));
        if (x == nullptr) {
          return core::InvalidArgument("daemon state: job " + key +
                                       " is not in the jobs table");
        }
        const json& p = j.at("proc");
        x->proc.server = ServerId(p.at("server").get<int32_t>());
        x->proc.local = p.at("local").get<std::vector<int32_t>>();
        x->proc.exists = p.at("exists").get<bool>();
        x->proc.checkpoint = p.at("checkpoint").get<bool>();
        x->proc.leaving = p.at("leaving").get<bool>();
        if (p.contains("followers")) {
          for (const json& f : p.at("followers")) {
            x->proc.followers.push_back(
                Part{ServerId(f.at("server").get<int32_t>()),
                     f.at("local").get<std::vector<int32_t>>()});
          }
        }
        for (const auto& [server, n] : j.at("ignore_exits").items()) {
          x->ignore_exits[std::stoi(server)] = n.get<int>();
        }
      }
      for (const json& p : d.at("pending")) {
        PendingAction pa;
        core::Action& a = pa.action;
        a.id = core::ActionId(p.at("id").get<int64_t>());
        const int kind = p.at("kind").get<int>();
        if (kind < 0 || kind > static_cast<int>(ActionKind::kSetPriority)) {
          return core::InvalidArgument("daemon state: action kind " +
                                       std::to_string(kind));
        }
        a.kind = static_cast<ActionKind>(kind);
        a.job = JobId(p.at("job").get<int32_t>());
        for (const json& g : p.at("gpus")) {
          a.gpus.push_back(core::GpuId(g.get<int32_t>()));
        }
        a.peer = JobId(p.at("peer").get<int32_t>());
        a.launch = p.at("launch").get<bool>();
        a.priority = p.at("priority").get<int>();
        a.reason = p.at("reason").get<std::string>();
        pa.dispatched_us = p.at("dispatched_us").get<int64_t>();
        pa.relocate = p.at("relocate").get<bool>();
        pa.rate_before = p.at("rate_before").get<double>();
        pa.sent = false;  // as after a replay: its reply will not come
        pending[a.id.value] = std::move(pa);
      }
    } catch (const std::exception& e) {
      return core::InvalidArgument(std::string("daemon state: ") + e.what());
    }
    return core::Status::Ok();
  }

  // Snapshots the core and the bookkeeping after the last event logged, and
  // deletes the events it includes. On the loop, between events.
  void CompactLog() {
    events_since_compaction = 0;
    const int64_t seq = store->LastEventSeq();
    if (seq <= compacted_seq) return;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> forgotten = ForgetEndedJobs();
    SnapshotRow row{seq, clock_us, sched->Snapshot(), DaemonState().dump()};
    const core::Status s = store->WriteSnapshot(row);
    // Not archived if the snapshot was not written: after a restart the
    // older snapshot and the log bring them back, to be forgotten again.
    if (!forgotten.empty()) DropForgotten(forgotten, /*archive=*/s.ok());
    if (!s.ok()) {
      Warn("cannot compact the event log: " + s.ToString());
      return;
    }
    const int64_t before = compacted_seq;
    compacted_seq = seq;
    compacted_events_left = true;
    ++compactions;
    last_compaction_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    Log("event log compacted: snapshot after event " + std::to_string(seq) +
        " (" + std::to_string(row.core.size() + row.daemon.size()) +
        " bytes), " + std::to_string(seq - before) + " events to delete, " +
        std::to_string(forgotten.size()) + " ended jobs archived, " +
        std::to_string(static_cast<int64_t>(last_compaction_s * 1000)) + " ms");
  }

  bool ForgetsEndedJobs() const {
    return opts.keep_ended_jobs > 0 || opts.keep_ended_for_s > 0;
  }

  // The ended jobs that may be forgotten, as (ended_us, id): settled ones
  // only (nothing of them left on any agent, their rows written), with no
  // action or exit of theirs still awaited.
  std::vector<std::pair<int64_t, int32_t>> Forgettable() const {
    std::set<int32_t> busy(restarting.begin(), restarting.end());
    busy.insert(leave_saving.begin(), leave_saving.end());
    for (const auto& [aid, p] : pending) busy.insert(p.action.job.value);
    std::vector<std::pair<int64_t, int32_t>> ended;
    for (const auto& [id, x] : extras) {
      if (!x.settled || !x.has_written || !x.ignore_exits.empty() ||
          busy.contains(id) || !st().has_job(JobId(id))) {
        continue;
      }
      ended.emplace_back(x.written.ended_us, id);
    }
    return ended;
  }

  // Of `ended` ended jobs, how many are beyond --keep-ended-jobs.
  size_t BeyondKept(size_t ended) const {
    const auto keep = static_cast<size_t>(opts.keep_ended_jobs);
    return keep > 0 && ended > keep ? ended - keep : 0;
  }

  // How many of `ended` ended longer than --keep-ended-for before `now`.
  int64_t PastAge(std::span<const std::pair<int64_t, int32_t>> ended,
                  int64_t now) const {
    if (opts.keep_ended_for_s <= 0) return 0;
    const int64_t cutoff =
        now - static_cast<int64_t>(opts.keep_ended_for_s * 1e6);
    return std::count_if(ended.begin(), ended.end(),
                         [&](const auto& e) { return e.first < cutoff; });
  }

  // The Forgettable jobs beyond --keep-ended-jobs that ended last, and
  // those that ended longer than --keep-ended-for ago, forgotten by the
  // core (Scheduler::Forget), in no particular order. The daemon drops its
  // records of them once the snapshot is written (DropForgotten).
  std::vector<int32_t> ForgetEndedJobs() {
    if (!ForgetsEndedJobs()) return {};
    std::vector<std::pair<int64_t, int32_t>> ended = Forgettable();
    // Both pick those that ended first.
    const auto forget = static_cast<std::ptrdiff_t>(std::max<size_t>(
        BeyondKept(ended.size()), static_cast<size_t>(PastAge(ended, Now()))));
    if (forget == 0) return {};
    std::nth_element(ended.begin(), ended.begin() + forget - 1, ended.end());
    std::vector<core::JobId> ids;
    std::vector<int32_t> out;
    for (auto it = ended.begin(); it != ended.begin() + forget; ++it) {
      ids.emplace_back(it->second);
      out.push_back(it->second);
    }
    if (core::Status s = sched->Forget(ids); !s.ok()) {
      Warn("cannot forget ended jobs: " + s.ToString());
      return {};
    }
    return out;
  }

  // Drops the daemon's records of jobs the core forgot and, with
  // `archive`, archives their rows in the store (a failure is warned of:
  // the next start archives them).
  void DropForgotten(std::span<const int32_t> ids, bool archive) {
    if (archive) {
      std::vector<JobRow> rows;
      rows.reserve(ids.size());
      for (int32_t id : ids) rows.push_back(extras.at(id).written);
      if (core::Status s = store->ArchiveJobs(rows); !s.ok()) {
        Warn("cannot archive " + std::to_string(ids.size()) +
             " forgotten jobs: " + s.ToString());
      }
    }
    {
      std::lock_guard lock(settled_mu);
      for (int32_t id : ids) {
        settled_jobs.erase(id);
        specs.erase(id);
        submitted_at.erase(id);
      }
    }
    {
      std::lock_guard lock(streak_mu);
      for (int32_t id : ids) streaks.erase(id);
    }
    for (int32_t id : ids) {
      extras.erase(id);
      progress_behind.erase(id);
    }
    // Many small blocks freed: give the pages back to the system (the
    // allocator keeps them otherwise, and the daemon's size would not
    // shrink).
    if (ids.size() >= 1000) ::malloc_trim(0);
  }

  // ----------------------------------------------------------- startup

  // One daemon per database: a second one would interleave its events with
  // the first's. The kernel drops the lock when the process dies.
  core::Status LockDatabase() {
    auto fd = LockDatabaseFile(opts.db_path);
    if (!fd.ok()) return fd.status();
    lock_fd = *fd;
    return core::Status::Ok();
  }

  // The store, named in messages.
  std::string StoreName() const {
    if (opts.leadership) {
      return "etcd prefix '" + opts.leadership->prefix() + "'";
    }
    return "database '" + opts.db_path + "'";
  }

  core::Status Open() {
    if (opts.leadership) {
      // etcd: the election decided who writes (leadership.h).
      if (!opts.leadership->leading()) {
        return core::FailedPrecondition(
            "this daemon does not lead (Leadership::Campaign first)");
      }
      auto s = EtcdStore::Open(opts.leadership);
      if (!s.ok()) return s.status();
      store = std::move(*s);
    } else {
      GANDIVA_RETURN_IF_ERROR(LockDatabase());
      auto s = Store::Open(opts.db_path, opts.durable_sync);
      if (!s.ok()) return s.status();
      store = std::move(*s);
    }
    GANDIVA_RETURN_IF_ERROR(ResolvePolicy());
    GANDIVA_RETURN_IF_ERROR(ResolveClusterId());
    GANDIVA_RETURN_IF_ERROR(ResolveRestoreLost());
    return Recover();
  }

  // The cluster's id: made at the first start on a store, and stored.
  core::Status ResolveClusterId() {
    auto stored = store->GetMeta("cluster_id");
    if (!stored.ok()) return stored.status();
    if (stored->has_value() && !(*stored)->empty()) {
      cluster_id = **stored;
      return core::Status::Ok();
    }
    std::random_device rd;
    char buf[33];
    std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
    cluster_id = buf;
    return store->SetMeta("cluster_id", cluster_id);
  }

  core::Status ResolveRestoreLost() {
    auto lost = store->GetMeta(kRestoreLostJobsMeta);
    if (!lost.ok()) return lost.status();
    if (!lost->has_value()) return core::Status::Ok();
    auto ranges = ParseIdRanges(**lost);
    if (!ranges.ok()) {
      return core::InvalidArgument(StoreName() + ": meta '" +
                                   kRestoreLostJobsMeta +
                                   "': " + ranges.status().message());
    }
    lost_ids = std::make_shared<const IdRanges>(std::move(*ranges));
    if (lost_ids->empty()) return core::Status::Ok();  // all adopted
    Log("this store was restored from a backup: jobs " +
        FormatIdRanges(*lost_ids) +
        " were submitted after it and are lost; their ids are not given "
        "again");
    return core::Status::Ok();
  }

  // The highest id of a job a registering agent holds, as a process or a
  // checkpoint of this cluster, that the daemon has no record of (0: none):
  // one the store gave and forgot (an ended job, pruned), or one it never
  // gave.
  int64_t HighestUnknownId(const rpc::RegisterAgentRequest& r) {
    int64_t top = 0;
    auto unknown = [&](int64_t id) {  // looked up without Extra's marks
      return id > 0 && id <= std::numeric_limits<int32_t>::max() &&
             !extras.contains(static_cast<int32_t>(id));
    };
    // Processes this agent started for a daemon of this cluster.
    if (OfThisCluster(r)) {
      for (const rpc::AgentJob& j : r.jobs()) {
        if (unknown(j.job_id())) top = std::max(top, j.job_id());
      }
    }
    for (int i = 0; i < r.checkpoints_size(); ++i) {
      if (i < r.checkpoint_clusters_size() &&
          r.checkpoint_clusters(i) == cluster_id && unknown(r.checkpoints(i))) {
        top = std::max(top, r.checkpoints(i));
      }
    }
    return top;
  }

  // A registering agent holds jobs of this cluster that this store never
  // gave (HighestUnknownId past its last): the store was restored from a
  // backup older than they are (onto a new machine, where the database it
  // replaced is gone, or an etcd snapshot), and the database that gave them
  // is gone. Their ids are recorded as lost and never given (a job
  // submitted now must not take on their checkpoints); Reconcile then
  // kills their processes and drops their checkpoints, as of jobs this
  // daemon never ran.
  void MarkLostIds(const AgentConn& a, const rpc::RegisterAgentRequest& r) {
    const int64_t top = HighestUnknownId(r);
    if (top == 0) return;
    auto added = store->MarkJobIdsLost(top);
    if (!added.ok()) {
      Log("agent '" + a.name + "' holds job " + std::to_string(top) +
          ", which this store may never have given, and the store cannot "
          "record its id as lost: " +
          added.status().ToString());
      return;
    }
    if (added->second == 0) return;  // given, and forgotten since
    auto ranges = std::make_shared<IdRanges>(*lost_ids);
    AddIdRange(ranges.get(), added->first, added->second);
    lost_ids = std::move(ranges);
    Log("agent '" + a.name + "' holds job " + std::to_string(top) +
        ", which this store never gave: it was restored from an older "
        "backup, and jobs " +
        std::to_string(added->first) + "-" + std::to_string(added->second) +
        " are lost; their ids are not given again");
  }

  // A registering agent of this cluster (its processes and checkpoints
  // may be this store's jobs'): none is before the store has an id.
  bool OfThisCluster(const rpc::RegisterAgentRequest& r) const {
    return !cluster_id.empty() && r.cluster_id() == cluster_id;
  }

  // Whether a registering agent lists a process the daemon may keep
  // (AdoptQueuedJobsFound, AdoptLostJobs):
  // of this cluster, with its spec, of a job the core has queued or one
  // the daemon has no record of.
  bool MayAdopt(const rpc::RegisterAgentRequest& r) const {
    if (!OfThisCluster(r)) return false;
    for (const rpc::AgentJob& j : r.jobs()) {
      if (!j.has_spec() || j.job_id() <= 0 ||
          j.job_id() > std::numeric_limits<int32_t>::max()) {
        continue;
      }
      const auto id = static_cast<int32_t>(j.job_id());
      if (!extras.contains(id) ||
          (LiveJob(id) && st().job(JobId(id)).state == JobState::kQueued)) {
        return true;
      }
    }
    return false;
  }

  // The GPUs of cluster server `server` that the local indices `local`
  // name, or none when one is not the server's.
  std::vector<core::GpuId> ClusterGpus(
      ServerId server, const std::vector<int32_t>& local) const {
    const core::Server& s = st().cluster().server(server);
    std::vector<core::GpuId> gpus;
    for (int32_t g : local) {
      if (g < 0 || g >= s.spec.gpus) return {};
      gpus.emplace_back(s.first_gpu.value + g);
    }
    return gpus;
  }

  // The processes a registering agent of this cluster runs of jobs the
  // core has queued, started by this job's submission (the same
  // submission time) on this server alone: a store restored from a backup
  // taken before they started, or a job requeued while its agent was out
  // of reach and still running there. Each is kept where it runs, running
  // or suspended (JobFound), when its GPUs hold no other job; otherwise
  // Reconcile kills it as a stray, and the job starts when it is placed.
  void AdoptQueuedJobsFound(const AgentConn& a,
                            const rpc::RegisterAgentRequest& r) {
    if (!OfThisCluster(r)) return;
    for (const rpc::AgentJob& j : r.jobs()) {
      const int64_t id64 = j.job_id();
      if (!LiveJob(id64) || !j.has_spec() || j.submitted_us() == 0) continue;
      const auto id = static_cast<int32_t>(id64);
      const core::Job& cj = st().job(JobId(id));
      JobExtra* x = Extra(id);
      if (x == nullptr || cj.state != JobState::kQueued || cj.held ||
          cj.busy() || x->proc.exists || x->proc.checkpoint ||
          j.submitted_us() != SubmittedUs(id)) {
        continue;
      }
      const std::vector<int32_t> local(j.gpus().begin(), j.gpus().end());
      core::JobFound e{JobId(id), ClusterGpus(a.id, local),
                       j.state() == rpc::SUSPENDED};
      if (e.placed_on.empty() ||
          !sched->CheckAdoptable(e.job, cj.spec.gpus, e.placed_on).ok()) {
        continue;
      }
      const bool suspended = e.suspended;
      x->proc = Proc::At({Part{a.id, local}});
      if (core::Status fed = Feed(std::move(e)); !fed.ok()) {
        Log("job " + std::to_string(id) + ": its process on " + a.name +
            " could not be kept: " + fed.ToString());
        Extra(id)->proc = Proc{};
        continue;
      }
      x = Extra(id);
      x->progress = j.progress();
      History(id, "adopt", true, 0,
              "its process on " + a.name + " was kept, " +
                  (suspended ? "suspended" : "running") +
                  " (the store had it queued: it started after the backup "
                  "this store was restored from, or was requeued while its "
                  "agent was out of reach)");
    }
  }

  // The processes a registering agent runs, and the checkpoints it holds,
  // of jobs whose ids this store lost (MarkLostIds: it was restored from a
  // backup older than they are), each listed with the spec of the job:
  // adopted, with their own id and submission time, rather than killed or
  // dropped. A running (or suspended) job is kept where it is when its
  // GPUs hold no other job; otherwise its process is killed and it is
  // queued: it starts again from the beginning (the kill goes out before
  // any start). A job of which the agent holds only a checkpoint is queued
  // and goes on from it wherever it is placed. A part of a multi-server
  // job, listed without a spec, is not adopted (Reconcile kills it, its id
  // lost, as before). Returns the jobs whose process it killed.
  std::set<int32_t> AdoptLostJobs(const AgentConn& a,
                                  const rpc::RegisterAgentRequest& r) {
    std::set<int32_t> killed;
    if (!OfThisCluster(r) || lost_ids->empty()) {
      return killed;
    }
    const std::string lost_note =
        "submitted after the backup this store was restored from, its "
        "record lost";
    // Whether job `id64`, listed with `spec` and `submitted_us`, is a lost
    // one that can be adopted (a refusal is logged).
    auto adoptable = [&](int64_t id64, const rpc::JobSpec& spec,
                         int64_t submitted_us) {
      if (id64 <= 0 || id64 > std::numeric_limits<int32_t>::max() ||
          extras.contains(static_cast<int32_t>(id64)) ||
          !FindIdRange(*lost_ids, id64) || spec.command().empty()) {
        return false;
      }
      const std::string what = "agent '" + a.name + "' holds job " +
                               std::to_string(id64) +
                               ", which this store lost, but ";
      if (std::string bad = CheckSpec(spec); !bad.empty()) {
        Log(what + "its spec is refused (" + bad + "): not adopted");
        return false;
      }
      if (submitted_us <= 0 || submitted_us > Now()) {
        Log(what + "its submission time (" + std::to_string(submitted_us) +
            " us) is not before now: not adopted");
        return false;
      }
      return true;
    };
    // Stores it, and feeds its arrival `e` with its process (or
    // checkpoint) at `where`; its old process killed first with `kill`.
    auto adopt = [&](const rpc::JobSpec& spec, core::JobArrived e,
                     const Proc& where, bool kill) {
      const int32_t id = e.id.value;
      const std::string json = SpecToJson(spec);
      if (core::Status s = store->AdoptJob(id, json, e.submitted.micros());
          !s.ok()) {
        Log("agent '" + a.name + "' holds job " + std::to_string(id) +
            ", which this store lost, but the store cannot take it: " +
            s.ToString() + "; not adopted");
        return false;
      }
      auto ranges = std::make_shared<IdRanges>(*lost_ids);
      RemoveIdFromRanges(ranges.get(), id);
      lost_ids = std::move(ranges);
      AddExtra(id, spec, json);
      JobExtra& x = extras[id];
      x.proc = where;
      if (kill) {
        ++x.ignore_exits[a.id.value];
        KillAt(id, Proc{a.id, {}, true}, InternalActionId());
        killed.insert(id);
      }
      if (core::Status fed = Feed(std::move(e)); !fed.ok()) {
        // Stored: a restart hands it to the core (ArriveUnarrived).
        Log("job " + std::to_string(id) +
            ": its arrival failed: " + fed.ToString());
        return false;
      }
      return true;
    };
    for (const rpc::AgentJob& j : r.jobs()) {
      if (!adoptable(j.job_id(), j.spec(), j.submitted_us())) continue;
      const auto id = static_cast<int32_t>(j.job_id());
      core::JobArrived e{JobId(id), ToCoreSpec(j.spec())};
      e.submitted = core::Time::FromMicros(j.submitted_us());
      e.suspended = j.state() == rpc::SUSPENDED;
      const std::vector<int32_t> local(j.gpus().begin(), j.gpus().end());
      e.placed_on = ClusterGpus(a.id, local);
      std::string not_kept;
      if (e.placed_on.empty()) {
        not_kept = "its GPUs are not this server's";
      } else if (core::Status fits =
                     sched->CheckAdoptable(e.id, e.spec.gpus, e.placed_on);
                 !fits.ok()) {
        not_kept = fits.message();
      }
      if (!not_kept.empty()) e.placed_on.clear();
      const bool suspended = e.suspended;
      const Proc where =
          not_kept.empty() ? Proc::At({Part{a.id, local}}) : Proc{};
      if (!adopt(j.spec(), std::move(e), where, !not_kept.empty())) continue;
      Extra(id)->progress = j.progress();
      History(id, "adopt", true, 0,
              not_kept.empty()
                  ? "its process on " + a.name + " was kept, " +
                        (suspended ? "suspended" : "running") + " (" +
                        lost_note + ")"
                  : "queued (" + lost_note + "); its process on " + a.name +
                        " could not be kept (" + not_kept +
                        "): it starts again from the beginning");
      Log("agent '" + a.name + "' runs job " + std::to_string(id) +
          ", which this store lost: adopted, " +
          (not_kept.empty() ? "its process kept" : "queued"));
    }
    for (int i = 0; i < r.checkpoints_size(); ++i) {
      if (ForeignCheckpoint(r, i) || i >= r.checkpoint_specs_size() ||
          i >= r.checkpoint_submitted_us_size() ||
          !adoptable(r.checkpoints(i), r.checkpoint_specs(i),
                     r.checkpoint_submitted_us(i))) {
        continue;
      }
      const auto id = static_cast<int32_t>(r.checkpoints(i));
      core::JobArrived e{JobId(id), ToCoreSpec(r.checkpoint_specs(i))};
      e.submitted = core::Time::FromMicros(r.checkpoint_submitted_us(i));
      if (!adopt(r.checkpoint_specs(i), std::move(e),
                 Proc{a.id, {}, false, true}, false)) {
        continue;
      }
      History(id, "adopt", true, 0,
              "queued (" + lost_note + "); it goes on from the checkpoint " +
                  a.name + " holds");
      Log("agent '" + a.name + "' holds a checkpoint of job " +
          std::to_string(id) +
          ", which this store lost: adopted, to go on from it");
    }
    return killed;
  }

  // A process or a checkpoint an agent lists for job `id`, of the job
  // submitted at `submitted_us` (0: the agent does not say): another job
  // of that id where both times are known and differ (this cluster gave
  // the id twice: its store was restored from a backup older than the
  // other job, and the agent registered after the id was given again).
  bool OtherSubmission(int32_t id, int64_t submitted_us) {
    if (submitted_us == 0) return false;
    const int64_t ours = SubmittedUs(id);
    return ours != 0 && ours != submitted_us;
  }
  // The same, for a checkpoint a registering agent lists
  // (RegisterAgentRequest.checkpoint_submitted_us).
  bool CheckpointOfOtherSubmission(const rpc::RegisterAgentRequest& r, int i) {
    const int64_t id64 = r.checkpoints(i);
    return i < r.checkpoint_submitted_us_size() &&
           id64 == static_cast<int32_t>(id64) &&
           OtherSubmission(static_cast<int32_t>(id64),
                           r.checkpoint_submitted_us(i));
  }

  // A checkpoint a registering agent lists that was saved in another
  // cluster (RegisterAgentRequest.checkpoint_clusters): of another job that
  // has the same id.
  bool ForeignCheckpoint(const rpc::RegisterAgentRequest& r, int i) const {
    return i < r.checkpoint_clusters_size() &&
           !r.checkpoint_clusters(i).empty() &&
           r.checkpoint_clusters(i) != cluster_id;
  }

  core::Status ResolvePolicy() {
    auto stored = store->GetMeta("policy");
    if (!stored.ok()) return stored.status();
    json want = {{"policy", "gandiva"},
                 {"quantum_us", int64_t{60'000'000}},
                 {"max_height", 4}};
    if (stored->has_value()) {
      try {
        want = json::parse(**stored);
      } catch (const json::exception& e) {
        return core::IoError(std::string("stored policy options: ") + e.what());
      }
    }
    const json stored_options = want;
    std::string diff;
    auto check = [&](const char* flag, const char* key, const json& given) {
      if (stored->has_value() && want.at(key) != given) {
        diff += std::string(diff.empty() ? "" : "; ") + flag + " " +
                given.dump() + " (the database has " + want.at(key).dump() +
                ")";
      }
      want[key] = given;
    };
    if (opts.policy) check("--policy", "policy", *opts.policy);
    if (opts.quantum_s) {
      if (*opts.quantum_s <= 0) {
        return core::InvalidArgument("--quantum-s: must be positive");
      }
      check("--quantum-s", "quantum_us",
            core::Duration::FromSeconds(*opts.quantum_s).micros());
    }
    if (opts.max_height) {
      if (*opts.max_height < 0) {
        return core::InvalidArgument("--max-height: must not be negative");
      }
      check("--max-height", "max_height", *opts.max_height);
    }
    if (opts.pack_keep_above) {
      if (*opts.pack_keep_above <= 0) {
        return core::InvalidArgument("--pack-keep-above: must be positive");
      }
      if (stored->has_value() && !want.contains("pack_keep_above")) {
        want["pack_keep_above"] = 1.0;
      }
      check("--pack-keep-above", "pack_keep_above", *opts.pack_keep_above);
    }
    if (opts.pack_settle_s) {
      if (*opts.pack_settle_s <= 0) {
        return core::InvalidArgument("--pack-settle-s: must be positive");
      }
      if (stored->has_value() && !want.contains("pack_settle_us")) {
        want["pack_settle_us"] = core::Duration::Seconds(30).micros();
      }
      check("--pack-settle-s", "pack_settle_us",
            core::Duration::FromSeconds(*opts.pack_settle_s).micros());
    }
    // Options added after a database was made: the defaults, unless given.
    const json defaults = {
        {"start_attempts", core::SchedulerOptions().start_attempts},
        {"start_retry_us",
         core::SchedulerOptions().start_retry_delay.micros()}};
    for (const auto& [key, value] : defaults.items()) {
      if (!want.contains(key)) want[key] = value;
    }
    if (opts.start_attempts) {
      if (*opts.start_attempts < 0) {
        return core::InvalidArgument("--start-attempts: must not be negative");
      }
      check("--start-attempts", "start_attempts", *opts.start_attempts);
    }
    if (opts.start_retry_s) {
      if (!(*opts.start_retry_s > 0)) {
        return core::InvalidArgument("--start-retry-s: must be positive");
      }
      check("--start-retry-s", "start_retry_us",
            core::Duration::FromSeconds(*opts.start_retry_s).micros());
    }
    if (!diff.empty()) {
      return core::FailedPrecondition(
          StoreName() + " was created with other policy options: " + diff +
          ". Omit these flags to use the stored ones, or use a new " +
          (opts.leadership ? "--etcd-prefix" : "--db"));
    }
    core::PolicyOptions po;
    po.gandiva.quantum =
        core::Duration::Micros(want.at("quantum_us").get<int64_t>());
    po.gandiva.max_height = want.at("max_height").get<int>();
    if (want.contains("pack_keep_above")) {
      po.gandiva.pack_keep_above = want.at("pack_keep_above").get<double>();
    }
    if (want.contains("pack_settle_us")) {
      po.gandiva.pack_settle =
          core::Duration::Micros(want.at("pack_settle_us").get<int64_t>());
    }
    // Rates come every --profile-interval-s (2 s): judge them past a job's
    // warm-up.
    po.gandiva.pack_min_alone_reports = 5;
    // What agents cannot do: run one job across servers.
    po.gandiva.allow_split = false;
    po.fifo.relax_locality = false;
    policy_name = want.at("policy").get<std::string>();
    auto policy = core::MakePolicy(policy_name, po);
    if (!policy.ok()) return policy.status();
    core::SchedulerOptions so;
    so.start_attempts = want.at("start_attempts").get<int>();
    so.start_retry_delay =
        core::Duration::Micros(want.at("start_retry_us").get<int64_t>());
    sched = std::make_unique<core::Scheduler>(std::move(*policy), so);
    if (!stored->has_value() || stored_options != want) {
      GANDIVA_RETURN_IF_ERROR(store->SetMeta("policy", want.dump()));
    }
    return core::Status::Ok();
  }

  core::Status Recover() {
    auto jobs = store->LoadJobs();
    if (!jobs.ok()) return jobs.status();
    for (const JobRow& row : *jobs) {
      rpc::JobSpec spec;
      if (!google::protobuf::util::JsonStringToMessage(row.spec_json, &spec)
               .ok()) {
        return core::IoError("job " + std::to_string(row.id) +
                             ": stored spec is not valid JSON");
      }
      AddExtra(static_cast<int32_t>(row.id), spec, row.spec_json);
      JobExtra& x = extras[static_cast<int32_t>(row.id)];
      x.exit_code = row.exit_code;
      x.progress.set_minibatches(row.minibatches);
      x.progress.set_minibatch_rate(row.minibatch_rate);
      x.progress.set_metric(row.metric);
      x.progress.set_metric_minibatches(row.metric_minibatches);
      x.progress.set_metric_reports(row.metric_reports);
      x.progress.set_uses_library(row.uses_library);
      x.written = row;
      x.has_written = true;
      clock_us = std::max(clock_us, row.submitted_us);
    }
    auto servers = store->LoadServers();
    if (!servers.ok()) return servers.status();
    const int64_t now = WallMicros();
    for (const ServerRow& row : *servers) {
      if (row.id != static_cast<int32_t>(agents.size())) {
        return core::IoError("servers table: ids are not dense");
      }
      AgentConn a;
      a.id = ServerId(row.id);
      a.name = row.name;
      a.address = row.address;
      a.sockets = row.sockets;
      a.switches_per_socket = row.switches_per_socket;
      try {
        for (const json& g : json::parse(row.gpus_json)) {
          rpc::Gpu gpu;
          (void)google::protobuf::util::JsonStringToMessage(g.dump(), &gpu);
          a.gpus.push_back(gpu);
        }
      } catch (const json::exception& e) {
        return core::IoError("server '" + row.name + "': " + e.what());
      }
      a.stub = rpc::Agent::NewStub(MakeChannel(a.address, tls));
      Await(a, now, row.away_since_us);
      a.away_cordon = row.away_cordon;
      agent_by_name[a.name] = row.id;
      agents.push_back(std::move(a));
    }
    // The snapshot, if the log was compacted: the state after event
    // `compacted_seq`, whose events are gone.
    auto snapshot = store->LoadSnapshot();
    if (!snapshot.ok()) return snapshot.status();
    if (snapshot->has_value()) {
      const SnapshotRow& row = **snapshot;
      core::Status s = sched->Restore(row.core);
      if (s.ok()) s = RestoreDaemonState(row.daemon);
      if (!s.ok()) {
        return core::IoError(
            StoreName() + ": its snapshot (of events 1-" +
            std::to_string(row.seq) +
            ", which are no longer logged) cannot be restored: " + s.message() +
            ". A gandiva-scheduler that reads it is needed");
      }
      core::Status missing;
      st().ForEachJob([&](const core::Job& j) {
        if (missing.ok() && Extra(j.id.value) == nullptr) {
          missing = core::IoError(StoreName() + ": its snapshot holds job " +
                                  std::to_string(j.id.value) +
                                  ", which is not in the jobs table");
        }
      });
      GANDIVA_RETURN_IF_ERROR(missing);
      compacted_seq = row.seq;
      compacted_events_left = true;  // a crash may have left some
      clock_us = std::max(clock_us, row.time_us);
    }
    // Replay: the same events give the same state; the actions were carried
    // out (or were under way) before the restart.
    int64_t replayed = 0;
    GANDIVA_RETURN_IF_ERROR(store->ForEachEvent(
        [&](const EventRow& e) {
          auto body = DecodeEvent(e.json);
          if (!body.ok()) {
            return core::IoError("event log entry " + std::to_string(e.seq) +
                                 ": " + body.status().message());
          }
          if (const auto* arrived = std::get_if<core::JobArrived>(&*body)) {
            if (Extra(arrived->id.value) == nullptr) {
              return core::IoError("event log entry " + std::to_string(e.seq) +
                                   ": job " +
                                   std::to_string(arrived->id.value) +
                                   " is not in the jobs table");
            }
          }
          clock_us = std::max(clock_us, e.time_us);
          std::vector<core::Action> actions;
          (void)sched->Handle(
              core::Event{core::Time::FromMicros(e.time_us), *body}, actions);
          AfterHandle(*body, actions, /*live=*/false);
          ++replayed;
          return core::Status::Ok();
        },
        compacted_seq));
    events_since_compaction = replayed;
    // Jobs the core forgot whose rows are not archived yet (the daemon
    // stopped between writing the snapshot and archiving them).
    std::vector<int32_t> forgotten;
    for (const auto& [id, x] : extras) {
      if (st().forgotten(JobId(id))) forgotten.push_back(id);
    }
    if (!forgotten.empty()) {
      std::erase_if(unsettling, [&](const auto& e) {
        return st().forgotten(JobId(e.first));
      });
      DropForgotten(forgotten, /*archive=*/true);
    }
    std::vector<int32_t> ids;
    ids.reserve(extras.size());
    for (const auto& [id, x] : extras) ids.push_back(id);
    NoteSubmitted(ids);  // those the snapshot held
    // Every job is dirty (new records): from here on the core says which
    // it changes.
    sched->TrackChangedJobs();
    if (replayed > 0 || compacted_seq > 0) {
      Warn("recovered from " + StoreName() + ": " +
           (compacted_seq > 0 ? "a snapshot of events 1-" +
                                    std::to_string(compacted_seq) + ", then "
                              : std::string()) +
           "replayed " + std::to_string(replayed) + " events, " +
           std::to_string(extras.size()) + " jobs, " +
           std::to_string(agents.size()) +
           " servers; waiting for agents to register again");
    }
    return core::Status::Ok();
  }

  // Jobs stored but never handed to the core (the daemon died in between:
  // as many as a SubmitJobs request holds, or a job adopted from an
  // agent), in id order, logged in one append, each submitted when its
  // row says (so that an adopted job keeps its submission time, by which
  // its agent tells its process from another job's of that id).
  void ArriveUnarrived() {
    std::vector<core::EventBody> arrived;
    const int64_t now = Now();
    for (auto& [id, x] : extras) {
      if (!st().has_job(JobId(id))) {
        core::JobArrived e{JobId(id), ToCoreSpec(x.spec)};
        if (x.has_written && x.written.submitted_us > 0 &&
            x.written.submitted_us <= now) {
          e.submitted = core::Time::FromMicros(x.written.submitted_us);
        }
        arrived.push_back(std::move(e));
      }
    }
    (void)FeedTogether(std::move(arrived));
  }

  // After a restart (or a takeover) the servers whose agent has not
  // registered with this daemon yet are cordoned by it, as for an away
  // agent: a job placed there would be started through an address the
  // agent may no longer serve. Registration opens each again.
  // The cordons are logged in one append (a large cluster's 1,250 servers
  // would otherwise cost 1,250 transactions of etcd's at each start).
  void CordonAwaiting() {
    const core::Cluster& c = st().cluster();
    std::vector<AgentConn*> awaited;
    std::vector<core::EventBody> cordons;
    for (AgentConn& a : agents) {
      if (a.link != AgentConn::Link::kAwaiting ||
          a.id.value >= c.num_servers()) {
        continue;
      }
      const core::Server& s = c.server(a.id);
      if (!s.up || s.cordoned) continue;
      cordons.push_back(core::CordonRequest{a.id, true});
      awaited.push_back(&a);
    }
    (void)FeedTogether(std::move(cordons));
    std::string names;
    for (AgentConn* a : awaited) {
      // Not cordoned: its event could not be logged (and was not handled).
      if (!c.server(a->id).cordoned) continue;
      a->away_cordon = true;
      a->row_dirty = true;
      names += (names.empty() ? "'" : ", '") + a->name + "'";
    }
    if (!names.empty()) {
      Log("cordoned the servers of " + names +
          " until their agents register with this daemon (declared down if "
          "not within " +
          Seconds(opts.agent_timeout_s + opts.agent_grace_s) + ")");
    }
  }

  // ------------------------------------------------------ gRPC handlers

  grpc::Status RegisterAgent(grpc::ServerContext*,
                             const rpc::RegisterAgentRequest* req,
                             rpc::RegisterAgentReply* rep) override {
    auto r = Call<core::StatusOr<int32_t>>(
        [this, req] { return RegisterAgent(*req); });
    if (!r) return Unavailable();
    if (!r->ok()) return ToGrpc(r->status());
    rep->set_server_id(**r);
    rep->set_cluster_id(cluster_id);
    return grpc::Status::OK;
  }

  grpc::Status Report(grpc::ServerContext*, const rpc::AgentReport* req,
                      rpc::AgentReportReply*) override {
    auto r = Call<grpc::Status>([this, req] { return DoReport(*req); });
    return r ? *r : Unavailable();
  }

  grpc::Status Leave(grpc::ServerContext*, const rpc::LeaveRequest* req,
                     rpc::LeaveReply* rep) override {
    auto r = Call<core::StatusOr<rpc::LeaveReply>>(
        [this, req] { return Leave(*req); });
    if (!r) return Unavailable();
    if (!r->ok()) return ToGrpc(r->status());
    *rep = **r;
    return grpc::Status::OK;
  }

  // Why a submitted spec is refused (empty: it is not).
  static std::string CheckSpec(const rpc::JobSpec& spec) {
    std::string err = core::ValidateJobSpec(ToCoreSpec(spec));
    if (err.empty() && spec.command().empty()) {
      err = "field 'command': must not be empty";
    }
    if (err.empty() && !spec.workdir().empty() &&
        !std::filesystem::path(spec.workdir()).is_absolute()) {
      err = "field 'workdir': must be an absolute path, got '" +
            spec.workdir() + "'";
    }
    return err;
  }

  grpc::Status Submit(grpc::ServerContext*, const rpc::SubmitRequest* req,
                      rpc::SubmitReply* rep) override {
    if (std::string err = CheckSpec(req->spec()); !err.empty()) {
      return {grpc::StatusCode::INVALID_ARGUMENT, err};
    }
    auto r = Call<core::StatusOr<std::vector<int64_t>>>([this, req] {
      const rpc::JobSpec* spec = &req->spec();
      return Submit(std::span<const rpc::JobSpec* const>(&spec, 1));
    });
    if (!r) return Unavailable();
    if (!r->ok()) return ToGrpc(r->status());
    rep->set_job_id((**r)[0]);
    return grpc::Status::OK;
  }

  grpc::Status SubmitJobs(grpc::ServerContext*,
                          const rpc::SubmitJobsRequest* req,
                          rpc::SubmitJobsReply* rep) override {
    const int n = req->specs_size();
    if (n == 0) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "field 'specs': is empty"};
    }
    if (n > kMaxJobsPerSubmit) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "field 'specs': at most " + std::to_string(kMaxJobsPerSubmit) +
                  " jobs in one request, got " + std::to_string(n)};
    }
    for (int i = 0; i < n; ++i) {
      const rpc::JobSpec& spec = req->specs(i);
      if (std::string err = CheckSpec(spec); !err.empty()) {
        return {grpc::StatusCode::INVALID_ARGUMENT,
                "spec " + std::to_string(i + 1) + " of " + std::to_string(n) +
                    " ('" + spec.name() + "'): " + err +
                    "; no job was submitted"};
      }
    }
    auto r = Call<core::StatusOr<std::vector<int64_t>>>([this, req] {
      return Submit(std::span<const rpc::JobSpec* const>(
          req->specs().data(), static_cast<size_t>(req->specs_size())));
    });
    if (!r) return Unavailable();
    if (!r->ok()) return ToGrpc(r->status());
    for (int64_t id : **r) rep->add_job_ids(id);
    return grpc::Status::OK;
  }

  grpc::Status ListJobs(grpc::ServerContext*, const rpc::ListJobsRequest* req,
                        rpc::ListJobsReply* rep) override {
    for (int k = 0; k < req->states_size(); ++k) {
      if (!rpc::JobState_IsValid(req->states(k))) {
        return {grpc::StatusCode::INVALID_ARGUMENT,
                "field 'states': " + std::to_string(req->states(k)) +
                    " is not a job state"};
      }
    }
    if (req->max_jobs() < 0 || req->max_jobs() > kMaxJobsPerPage) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "field 'max_jobs': " + std::to_string(req->max_jobs()) +
                  " is not between 0 and " + std::to_string(kMaxJobsPerPage)};
    }
    if (req->after_id() == 0) {
      const std::shared_ptr<const Snapshot> sn = Snap();
      if (sn->lost_ids) rep->set_lost_jobs(FormatIdRanges(*sn->lost_ids));
    }
    const std::set<int> states(req->states().begin(), req->states().end());
    const bool ended_too =
        req->all() || std::any_of(states.begin(), states.end(), EndState);
    const int max_jobs =
        req->max_jobs() == 0 ? kDefaultJobsPerPage : req->max_jobs();
    auto matches = [&](const rpc::JobInfo& info, const rpc::JobSpec& sp) {
      if (EndState(info.state()) && !ended_too) return false;
      if (!states.empty() && !states.contains(info.state())) return false;
      if (!req->owner().empty() && sp.owner() != req->owner()) return false;
      return req->name().empty() ||
             ::fnmatch(req->name().c_str(), sp.name().c_str(), 0) == 0;
    };
    // The archived jobs that match, read first (and outside the lock): a
    // job archived meanwhile is in memory too until the loop drops it, and
    // the memory's wins. The page holds none past `bound`, the last id
    // read from the archive (the largest id: all of it).
    std::vector<rpc::JobInfo> archived;
    int64_t bound = std::numeric_limits<int64_t>::max();
    if (req->archived() && ended_too) {
      // A name without wildcards is looked up (SQLite: by an index).
      const std::optional<std::string> exact = LiteralPattern(req->name());
      int64_t cursor = req->after_id();
      int64_t read = 0;
      for (bool more = true; more;) {
        auto rows = store->LoadArchivedJobs(cursor, kArchivedReadChunk, exact);
        if (!rows.ok()) return ToGrpc(rows.status());
        for (const JobRow& row : *rows) {
          cursor = row.id;
          ++read;
          rpc::JobInfo info = InfoOfArchived(row);
          if (matches(info, info.spec())) archived.push_back(std::move(info));
          if (static_cast<int>(archived.size()) >= max_jobs ||
              read >= kMaxArchivedReadPerPage) {
            bound = cursor;
            more = false;
            break;
          }
        }
        if (static_cast<int>(rows->size()) < kArchivedReadChunk) more = false;
      }
    }
    auto s = Snap();
    std::lock_guard lock(settled_mu);
    size_t bytes = 0;
    // Adds a job that matches; false once the page is full (it is left
    // for the next page).
    auto put = [&](rpc::JobInfo out) {
      const size_t size = out.ByteSizeLong();
      if (rep->jobs_size() >= max_jobs ||
          (rep->jobs_size() > 0 && bytes + size > kMaxPageBytes)) {
        rep->set_next_after_id(rep->jobs(rep->jobs_size() - 1).id());
        return false;
      }
      bytes += size;
      *rep->add_jobs() = std::move(out);
      return true;
    };
    // The snapshot's jobs, the settled ones and the archived ones, each in
    // id order from after_id; a job in several is the snapshot's, else the
    // settled one.
    constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
    auto a = std::upper_bound(
        s->jobs.begin(), s->jobs.end(), req->after_id(),
        [](int64_t key, const auto& entry) { return key < entry.first; });
    auto b = ended_too ? settled_jobs.upper_bound(req->after_id())
                       : settled_jobs.end();
    auto c = archived.begin();
    for (;;) {
      const int64_t ia = a != s->jobs.end() ? a->first : kEnd;
      const int64_t ib = b != settled_jobs.end() ? b->first : kEnd;
      const int64_t ic = c != archived.end() ? c->id() : kEnd;
      const int64_t id = std::min({ia, ib, ic});
      if (id == kEnd || id > bound) {
        // All read; or more of the archive is to be read from `bound` on.
        if (bound != kEnd) rep->set_next_after_id(bound);
        break;
      }
      bool more = true;
      if (id == ia || id == ib) {
        const rpc::JobInfo& info = id == ia ? *a->second : b->second;
        auto spec = specs.find(id);
        const rpc::JobSpec& sp = spec != specs.end()
                                     ? *spec->second
                                     : rpc::JobSpec::default_instance();
        if (matches(info, sp)) more = put(WithSpec(info, s->queue.get()));
      } else {
        more = put(*c);
      }
      if (!more) break;
      if (ia == id) ++a;
      if (ib == id) ++b;
      if (ic == id) ++c;
    }
    return grpc::Status::OK;
  }

  grpc::Status GetJob(grpc::ServerContext*, const rpc::JobIdRequest* req,
                      rpc::JobInfo* rep) override {
    auto s = Snap();
    {
      std::lock_guard lock(settled_mu);
      if (const rpc::JobInfo* info = s->Find(req->job_id())) {
        *rep = WithSpec(*info, s->queue.get());
      } else {
        auto st = settled_jobs.find(req->job_id());
        if (st != settled_jobs.end()) *rep = WithSpec(st->second);
      }
    }
    if (rep->id() == 0) {
      // Forgotten (--keep-ended-jobs), or never submitted.
      auto row = store->LoadJob(req->job_id());
      if (!row.ok()) return ToGrpc(row.status());
      if (!row->has_value()) {
        const int64_t id = req->job_id();
        if (auto lost =
                s->lost_ids ? FindIdRange(*s->lost_ids, id) : std::nullopt) {
          return {grpc::StatusCode::NOT_FOUND,
                  "job " + std::to_string(id) +
                      " is not in this store: it was submitted after the "
                      "backup the store was restored from (" +
                      (lost->first == lost->second
                           ? std::string("its id is")
                           : "ids " + std::to_string(lost->first) + "-" +
                                 std::to_string(lost->second) + " are") +
                      " not given again)"};
        }
        // Ids are dense (but for those a restore lost, above): one handed
        // out and no longer stored was deleted.
        const bool deleted = id > 0 && id < s->job_id_limit;
        return {grpc::StatusCode::NOT_FOUND,
                deleted ? "job " + std::to_string(id) +
                              " ended and its record was deleted "
                              "(--keep-archived-for)"
                        : "no job " + std::to_string(id)};
      }
      *rep = InfoOfArchived(**row);
    }
    auto h = store->History(req->job_id());
    if (!h.ok()) return ToGrpc(h.status());
    for (const HistoryRow& row : *h) {
      rpc::HistoryEntry* e = rep->add_history();
      e->set_time_us(row.time_us);
      e->set_action(row.action);
      e->set_ok(row.ok);
      e->set_took_us(row.took_us);
      e->set_detail(row.detail);
    }
    {
      // The same failure still repeating: how often so far.
      std::lock_guard lock(streak_mu);
      auto it = streaks.find(static_cast<int32_t>(req->job_id()));
      if (it != streaks.end() && it->second.repeats > 0) {
        rpc::HistoryEntry* e = rep->add_history();
        e->set_time_us(it->second.last_us);
        e->set_action(it->second.action);
        e->set_ok(false);
        e->set_detail(StreakLine(it->second) + " (so far)");
      }
    }
    return grpc::Status::OK;
  }

  // Kill, Suspend and Resume: ActOnJobs of one job.
  grpc::Status ActOnJob(int64_t id, bool kill, bool hold,
                        const std::string& reason) {
    auto r = Call<core::Status>([this, id, kill, hold, &reason] {
      return ActOnJobs(std::span<const int64_t>(&id, 1), kill, hold, reason)[0];
    });
    return r ? ToGrpc(*r) : Unavailable();
  }
  grpc::Status Kill(grpc::ServerContext*, const rpc::KillRequest* req,
                    rpc::Empty*) override {
    return ActOnJob(req->job_id(), /*kill=*/true, false, req->reason());
  }
  grpc::Status Suspend(grpc::ServerContext*, const rpc::JobIdRequest* req,
                       rpc::Empty*) override {
    return ActOnJob(req->job_id(), /*kill=*/false, /*hold=*/true, "");
  }
  grpc::Status Resume(grpc::ServerContext*, const rpc::JobIdRequest* req,
                      rpc::Empty*) override {
    return ActOnJob(req->job_id(), /*kill=*/false, /*hold=*/false, "");
  }
  grpc::Status KillJobs(grpc::ServerContext*, const rpc::JobsRequest* req,
                        rpc::JobsReply* rep) override {
    return ActOnJobsRpc(*req, rep, /*kill=*/true, false);
  }
  grpc::Status SuspendJobs(grpc::ServerContext*, const rpc::JobsRequest* req,
                           rpc::JobsReply* rep) override {
    return ActOnJobsRpc(*req, rep, /*kill=*/false, /*hold=*/true);
  }
  grpc::Status ResumeJobs(grpc::ServerContext*, const rpc::JobsRequest* req,
                          rpc::JobsReply* rep) override {
    return ActOnJobsRpc(*req, rep, /*kill=*/false, /*hold=*/false);
  }
  grpc::Status ActOnJobsRpc(const rpc::JobsRequest& req, rpc::JobsReply* rep,
                            bool kill, bool hold) {
    if (req.job_ids_size() > kMaxJobsPerRequest) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "field 'job_ids': " + std::to_string(req.job_ids_size()) +
                  " jobs, at most " + std::to_string(kMaxJobsPerRequest) +
                  " a request"};
    }
    auto r = Call<std::vector<core::Status>>([this, &req, kill, hold] {
      return ActOnJobs(
          std::span<const int64_t>(req.job_ids().data(),
                                   static_cast<size_t>(req.job_ids_size())),
          kill, hold, req.reason());
    });
    if (!r) return Unavailable();
    for (int i = 0; i < req.job_ids_size(); ++i) {
      rpc::JobOutcome* o = rep->add_outcomes();
      o->set_job_id(req.job_ids(i));
      const grpc::Status g = ToGrpc((*r)[static_cast<size_t>(i)]);
      o->set_code(static_cast<int32_t>(g.error_code()));
      o->set_error(g.error_message());
    }
    return grpc::Status::OK;
  }
  grpc::Status SetPriority(grpc::ServerContext*,
                           const rpc::SetPriorityRequest* req,
                           rpc::SetPriorityReply* rep) override {
    auto r = Call<core::StatusOr<int32_t>>(
        [this, req] { return SetPriority(req->job_id(), req->priority()); });
    if (!r) return Unavailable();
    if (!r->ok()) return ToGrpc(r->status());
    rep->set_was(**r);
    return grpc::Status::OK;
  }
  grpc::Status Migrate(grpc::ServerContext*, const rpc::MigrateRequest* req,
                       rpc::Empty*) override {
    auto r = Call<core::Status>([this, req] {
      auto it = agent_by_name.find(req->server());
      if (it == agent_by_name.end()) {
        return core::NotFound("field 'server': no server named '" +
                              req->server() + "'");
      }
      core::MechanismRequest m;
      m.kind = core::MechanismRequest::Kind::kMigrate;
      m.job = JobId(static_cast<int32_t>(req->job_id()));
      m.server = ServerId(it->second);
      return Mechanism(m, "migrate to " + req->server());
    });
    return r ? ToGrpc(*r) : Unavailable();
  }
  grpc::Status Drain(grpc::ServerContext*, const rpc::DrainRequest* req,
                     rpc::DrainReply* rep) override {
    auto r = Call<core::StatusOr<rpc::DrainReply>>(
        [this, req] { return Drain(*req); });
    if (!r) return Unavailable();
    if (!r->ok()) return ToGrpc(r->status());
    *rep = std::move(**r);
    return grpc::Status::OK;
  }
  grpc::Status Pack(grpc::ServerContext*, const rpc::PackRequest* req,
                    rpc::Empty*) override {
    auto r = Call<core::Status>([this, req] {
      GANDIVA_RETURN_IF_ERROR(CheckLiveJob(req->with_job_id()));
      core::MechanismRequest m;
      m.kind = core::MechanismRequest::Kind::kPack;
      m.job = JobId(static_cast<int32_t>(req->job_id()));
      m.with = JobId(static_cast<int32_t>(req->with_job_id()));
      return Mechanism(m,
                       "pack with job " + std::to_string(req->with_job_id()));
    });
    return r ? ToGrpc(*r) : Unavailable();
  }
  grpc::Status Unpack(grpc::ServerContext*, const rpc::JobIdRequest* req,
                      rpc::Empty*) override {
    auto r = Call<core::Status>([this, req] {
      core::MechanismRequest m;
      m.kind = core::MechanismRequest::Kind::kUnpack;
      m.job = JobId(static_cast<int32_t>(req->job_id()));
      return Mechanism(m, "unpack");
    });
    return r ? ToGrpc(*r) : Unavailable();
  }
  grpc::Status Resize(grpc::ServerContext*, const rpc::ResizeRequest* req,
                      rpc::Empty*) override {
    auto r = Call<core::Status>([this, req] {
      core::MechanismRequest m;
      m.kind = core::MechanismRequest::Kind::kResize;
      m.job = JobId(static_cast<int32_t>(req->job_id()));
      m.gpus = req->gpus();
      return Mechanism(m, "resize to " + std::to_string(req->gpus()) + " GPUs");
    });
    return r ? ToGrpc(*r) : Unavailable();
  }
  grpc::Status ListServers(grpc::ServerContext*, const rpc::Empty*,
                           rpc::ListServersReply* rep) override {
    auto s = Snap();
    for (const auto& server : s->servers) *rep->add_servers() = *server;
    return grpc::Status::OK;
  }
  grpc::Status Ping(grpc::ServerContext*, const rpc::Empty*,
                    rpc::Empty*) override {
    return grpc::Status::OK;
  }
};

// -------------------------------------------------------- SchedulerServer

SchedulerServer::SchedulerServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

SchedulerServer::~SchedulerServer() { Shutdown(); }

core::StatusOr<std::unique_ptr<SchedulerServer>> SchedulerServer::Start(
    SchedulerOptions options) {
  if (options.tick_ms <= 0) {
    return core::InvalidArgument("--tick-ms: must be positive");
  }
  if (!(options.agent_timeout_s > 0) ||
      !std::isfinite(options.agent_timeout_s)) {
    return core::InvalidArgument("--agent-timeout-s: must be positive");
  }
  if (!(options.agent_grace_s >= 0) || !std::isfinite(options.agent_grace_s)) {
    return core::InvalidArgument(
        "--agent-grace-s: must be a number of seconds, 0 or more");
  }
  if (options.keep_ended_jobs < 0) {
    return core::InvalidArgument("--keep-ended-jobs: must not be negative");
  }
  if (!(options.keep_ended_for_s >= 0)) {
    return core::InvalidArgument("--keep-ended-for: must not be negative");
  }
  if (options.keep_ended_for_s > 0 && options.snapshot_every_events == 0) {
    return core::InvalidArgument(
        "--keep-ended-for: ended jobs are forgotten at compactions, which "
        "--snapshot-every 0 turns off");
  }
  if (!(options.keep_archived_for_s >= 0)) {
    return core::InvalidArgument("--keep-archived-for: must not be negative");
  }
  if (!(options.retention_check_s > 0)) {
    return core::InvalidArgument("--retention-check: must be positive");
  }
  if (!(options.agent_away_s >= 0)) {
    return core::InvalidArgument("--agent-away-s: must not be negative");
  }
  if (options.agent_rpc_timeout_s <= 0) {
    return core::InvalidArgument("--agent-rpc-timeout-s: must be positive");
  }
  if (!(options.profile_interval_s >= 0)) {
    return core::InvalidArgument("--profile-interval-s: must not be negative");
  }
  if (!(options.progress_write_interval_s >= 0)) {
    return core::InvalidArgument(
        "--progress-write-interval-s: must not be negative");
  }
  if (!options.metrics_listen.empty() &&
      options.metrics_listen.rfind(':') == std::string::npos) {
    return core::InvalidArgument("--metrics-listen: expected HOST:PORT, got '" +
                                 options.metrics_listen + "'");
  }
  if (options.snapshot_every_events < 0) {
    return core::InvalidArgument(
        "--snapshot-every: must not be negative, got " +
        std::to_string(options.snapshot_every_events));
  }
  if (options.executor_threads < 1) {
    return core::InvalidArgument("--executor-threads: must be at least 1");
  }
  if (options.listen.rfind(':') == std::string::npos) {
    return core::InvalidArgument("--listen: expected HOST:PORT, got '" +
                                 options.listen + "'");
  }
  auto impl = std::make_unique<Impl>();
  impl->opts = std::move(options);
  auto tls = LoadTls(impl->opts.tls, "--tls-");
  if (!tls.ok()) return tls.status();
  impl->tls = std::move(*tls);
  GANDIVA_RETURN_IF_ERROR(impl->Open());
  impl->executor = std::make_unique<Dispatcher>(impl->opts.executor_threads);

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(impl->opts.listen, ServerCredentials(impl->tls),
                           &port);
  builder.RegisterService(impl.get());
  impl->grpc_server = builder.BuildAndStart();
  if (impl->grpc_server == nullptr || port == 0) {
    return core::Status(core::StatusCode::kUnavailable,
                        "cannot listen on '" + impl->opts.listen + "'");
  }
  impl->address = HostPortForClients(impl->opts.listen, port);
  if (!impl->opts.metrics_listen.empty()) {
    Impl* p = impl.get();
    auto m = MetricsExporter::Start(impl->opts.metrics_listen,
                                    [p] { return p->SampleMetrics(); });
    if (!m.ok()) {
      impl->grpc_server->Shutdown();
      return m.status();
    }
    impl->metrics = std::move(*m);
  }

  Impl* p = impl.get();
  p->Post([p] {
    p->ArriveUnarrived();
    p->CordonAwaiting();
  });
  p->PersistAndPublish();
  p->loop = std::thread([p] { p->LoopMain(); });
  if (!p->opts.address_file.empty()) {
    const std::string tmp = p->opts.address_file + ".tmp";
    {
      std::ofstream f(tmp);
      f << p->address << "\n";
      if (!f) {
        std::unique_ptr<SchedulerServer> s(
            new SchedulerServer(std::move(impl)));
        s->Shutdown();
        return core::IoError("cannot write '" + tmp + "'");
      }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, p->opts.address_file, ec);
    if (ec) {
      std::unique_ptr<SchedulerServer> s(new SchedulerServer(std::move(impl)));
      s->Shutdown();
      return core::IoError("cannot write '" + p->opts.address_file +
                           "': " + ec.message());
    }
  }
  return std::unique_ptr<SchedulerServer>(new SchedulerServer(std::move(impl)));
}

const std::string& SchedulerServer::address() const { return impl_->address; }
int SchedulerServer::metrics_port() const {
  return impl_->metrics ? impl_->metrics->port() : 0;
}

const std::string& SchedulerServer::policy() const {
  return impl_->policy_name;
}

void SchedulerServer::Sync() {
  (void)impl_->Call<bool>([] { return true; });
}

void SchedulerServer::Shutdown() {
  Impl& m = *impl_;
  {
    // One caller stops it (a signal and a lost lead may come together);
    // the others wait for it.
    std::unique_lock lock(m.mu);
    if (m.shutdown_started) {
      m.stopped_cv.wait(lock, [&] { return m.stopped; });
      return;
    }
    m.shutdown_started = true;
  }
  m.metrics.reset();  // no scrape while the rest stops
  if (m.grpc_server) {
    m.grpc_server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::seconds(2));
  }
  {
    std::lock_guard lock(m.mu);
    m.stopping = true;
    m.queue.clear();
    m.cv.notify_all();
  }
  if (m.loop.joinable()) m.loop.join();
  if (m.executor) m.executor->Stop();
  if (m.grpc_server) m.grpc_server->Wait();
  {
    std::lock_guard lock(m.mu);
    m.stopped = true;
  }
  m.stopped_cv.notify_all();
}

void SchedulerServer::Wait() {
  std::unique_lock lock(impl_->mu);
  impl_->stopped_cv.wait(lock, [&] { return impl_->stopped; });
}

}  // namespace gandiva::runtime
