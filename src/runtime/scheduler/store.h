// Store: the daemon's durable state. In SQLite (one file, WAL mode), these
// tables; etcd_store.h maps each to a range of keys.
//
//   meta(key, value)      settings that must not change across restarts
//                         (the policy and its options)
//   jobs                  one row per submitted job: its spec (JSON), state,
//                         timestamps, exit code, progress and the job's
//                         last reported metric; ids are dense from 1
//                         (SQLite rowids, never deleted), but for those a
//                         restore lost (RestoreDatabase: never given). An
//                         ended job the daemon forgot is archived: its row
//                         stays (LoadJob) but is no longer loaded at a
//                         start (LoadJobs), until PruneArchive deletes it
//                         with its history
//   servers               one row per registered agent: id (registration
//                         order, from 0), name, address, GPUs (JSON)
//   history               per job: action, ok, took_us, detail, time
//   events                the event log: every event fed to the core, in
//                         order, written before it is handled; `seq` numbers
//                         them from 1 and is never reused
//   snapshots             the latest snapshot of the core and of the
//                         daemon's bookkeeping, with the seq of the last
//                         event it includes: a recovery restores it and
//                         replays the events after it; the events up to it
//                         are deleted afterwards, a chunk at a time
//
// Each call is one transaction (WriteBatch groups several writes into one,
// AppendEvents several events).
// With WAL and synchronous=NORMAL a committed transaction survives the
// process being killed (SIGKILL); `durable_sync` (synchronous=FULL) makes it
// survive a power loss too, at the cost of an fsync per commit.
//
// Thread-safe: calls are serialized by an internal mutex (both
// implementations).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gandiva::runtime {

struct JobRow {
  int64_t id = 0;
  std::string spec_json;
  int state = 0;  // rpc::JobState
  int64_t submitted_us = 0;
  int64_t started_us = 0;  // 0 = never
  int64_t ended_us = 0;    // 0 = not ended
  std::optional<int32_t> exit_code;
  int64_t minibatches = 0;
  double minibatch_rate = 0;
  bool uses_library = false;
  std::string server;     // name of the server it is (was last) placed on
  std::string gpus_json;  // local GPU indices there, e.g. "[0,1]"
  int32_t suspends = 0;
  int32_t resumes = 0;
  // The job's last reported metric (rpc::Progress.metric*); reports 0: none.
  double metric = 0;
  int64_t metric_minibatches = 0;
  int64_t metric_reports = 0;
};

struct ServerRow {
  int32_t id = 0;
  std::string name;
  std::string address;
  std::string gpus_json;  // the rpc::Gpu list as JSON
  int32_t sockets = 1;
  int32_t switches_per_socket = 1;
  // Its agent said it was stopping and has not registered since (wall
  // clock; 0: not away), and whether the daemon cordoned the server for it.
  int64_t away_since_us = 0;
  bool away_cordon = false;
};

struct HistoryRow {
  int64_t job = 0;
  int64_t time_us = 0;
  std::string action;
  bool ok = true;
  int64_t took_us = 0;
  std::string detail;
};

struct EventRow {
  int64_t seq = 0;
  int64_t time_us = 0;
  std::string kind;
  std::string json;
};

struct SnapshotRow {
  int64_t seq = 0;  // the last event it includes
  int64_t time_us = 0;
  std::string core;    // core::Scheduler::Snapshot() bytes
  std::string daemon;  // the daemon's bookkeeping (JSON)
};

// Writes applied together in one transaction.
struct WriteBatch {
  std::vector<JobRow> jobs;  // full rows, replacing the stored ones
  std::vector<ServerRow> servers;
  std::vector<HistoryRow> history;
  bool empty() const {
    return jobs.empty() && servers.empty() && history.empty();
  }
};

// The daemon's durable state. Two implementations: SQLite in one file
// (Store::Open, below) and etcd, shared by a leader and its standbys
// (etcd_store.h). Each call is atomic, except that etcd writes a WriteBatch
// of more than a transaction's worth of rows in several transactions.
class Store {
 public:
  // Opens (creating if needed) the SQLite database at `path`.
  static core::StatusOr<std::unique_ptr<Store>> Open(const std::string& path,
                                                     bool durable_sync = false);
  virtual ~Store() = default;

  virtual core::StatusOr<std::optional<std::string>> GetMeta(
      const std::string& key) = 0;
  virtual core::Status SetMeta(const std::string& key,
                               const std::string& value) = 0;

  // Stores new jobs (state QUEUED), in order, with consecutive ids (the
  // next ones: 1, 2, ...), in one transaction where the store allows
  // (SQLite always; etcd: EtcdStore::kMaxOps - 1 jobs and kMaxBytes each).
  // Returns how many were stored: all of them, or on an error the ones
  // before the transaction that failed (a prefix), with it.
  struct Inserted {
    size_t count = 0;
    int64_t first_id = 0;  // the id of the first one stored (count > 0)
    core::Status status;
  };
  virtual Inserted InsertJobs(std::span<const std::string> specs_json,
                              int64_t submitted_us) = 0;
  // Records that job `id` was given by a store this one replaced (an agent
  // holds a process or a checkpoint of it, and this store was restored from
  // a backup older than the job): in one transaction, no id up to `id` is
  // given from now on, and those past the last this store gave are added
  // to the lost ones (kRestoreLostJobsMeta). Returns the ids newly lost
  // (first, last), or {0, 0} when `id` is not past the last given (a job
  // this store knows, or knew and pruned).
  virtual core::StatusOr<std::pair<int64_t, int64_t>> MarkJobIdsLost(
      int64_t id) = 0;
  // Stores a job that a store this one replaced gave and this one lost
  // (MarkJobIdsLost recorded its id), adopted from the agent that still
  // runs it: in one transaction, a row with that id (QUEUED, submitted at
  // `submitted_us`), and the id taken out of the lost ones. Fails
  // (kFailedPrecondition) when `id` is not a lost one.
  virtual core::Status AdoptJob(int64_t id, const std::string& spec_json,
                                int64_t submitted_us) = 0;
  // Stores one new job in its own transaction; returns its id.
  core::StatusOr<int64_t> InsertJob(const std::string& spec_json,
                                    int64_t submitted_us);
  // The jobs not archived, in id order.
  virtual core::StatusOr<std::vector<JobRow>> LoadJobs() = 0;
  // One job's row, archived or not (none: no such job).
  virtual core::StatusOr<std::optional<JobRow>> LoadJob(int64_t id) = 0;
  // Archives these jobs, whose rows are as given (as last written): LoadJobs
  // leaves them out from now on. Rows of jobs already archived, or never
  // stored, are passed by. etcd moves them in transactions of
  // EtcdStore::kMaxOps / 4.
  virtual core::Status ArchiveJobs(std::span<const JobRow> rows) = 0;
  // Archived jobs with ids above `after_id`, in id order, at most `limit`;
  // with `name`, only those whose spec has that name, through an index
  // (SQLite's on the spec's name; etcd's archive-name/ keys).
  virtual core::StatusOr<std::vector<JobRow>> LoadArchivedJobs(
      int64_t after_id, int limit, const std::optional<std::string>& name) = 0;
  // Deletes up to `limit` archived jobs that ended before `ended_before_us`
  // (those that ended first, first), their rows and their history, in one
  // transaction where the store allows (etcd: EtcdStore::kMaxOps / 4 jobs
  // each); returns how many it deleted (fewer than `limit`: none such is
  // left). Ids stay unique: a job stored later never gets a deleted one's
  // (SQLite keeps the row of the highest id for this, archived or not).
  virtual core::StatusOr<int64_t> PruneArchive(int64_t ended_before_us,
                                               int64_t limit) = 0;
  // How many archived jobs PruneArchive deletes in one transaction, at
  // most: the daemon deletes this many a pass of its loop, so that deleting
  // a large archive holds the loop for one transaction at a time.
  virtual int64_t PruneChunk() const = 0;
  virtual core::StatusOr<std::vector<ServerRow>> LoadServers() = 0;
  virtual core::StatusOr<std::vector<HistoryRow>> History(int64_t job) = 0;
  virtual core::Status Write(const WriteBatch& batch) = 0;

  // Appends `events` to the log in order (their `seq` is ignored: they
  // take the next ones), in one transaction where the store allows (SQLite
  // always; etcd: at most EtcdStore::kMaxOps events and kMaxBytes each).
  // Returns how many were logged: all of them, or on an error the ones
  // before the transaction that failed (a prefix, never a gap), with it.
  struct Appended {
    size_t count = 0;
    int64_t last_seq = 0;  // the seq of the last one logged (count > 0)
    core::Status status;
  };
  virtual Appended AppendEvents(std::span<const EventRow> events) = 0;
  // Appends one event in its own transaction; returns its seq.
  core::StatusOr<int64_t> AppendEvent(int64_t time_us, const std::string& kind,
                                      const std::string& json);
  // Calls `f` for every logged event after seq `after`, in order; stops at
  // its first error.
  virtual core::Status ForEachEvent(
      const std::function<core::Status(const EventRow&)>& f,
      int64_t after = 0) = 0;
  // The first logged event of `kind` after seq `after`, if any. This reads
  // the log up to it; SQLite finds a QueuesChanged by an index instead.
  // Defined here: an out-of-line virtual would make store.cc the only home
  // of Store's type information, which code holding a Store* without
  // linking store.cc (the request fuzzer) needs.
  virtual core::StatusOr<std::optional<EventRow>> FirstEventOfKind(
      const std::string& kind, int64_t after) {
    std::optional<EventRow> first;
    // Stops the read at the first found; the status is the read's own
    // unless it was this stop.
    const core::Status s = ForEachEvent(
        [&](const EventRow& e) -> core::Status {
          if (e.kind != kind) return core::Status::Ok();
          first = e;
          return core::AlreadyExists("found");
        },
        after);
    if (!s.ok() && !first) return s;
    return first;
  }
  // Events in the log (those compacted into a snapshot are gone).
  virtual core::StatusOr<int64_t> EventCount() = 0;
  // The seq of the last event logged (0: none ever).
  virtual int64_t LastEventSeq() = 0;

  // In one transaction: stores `snap` as the snapshot and deletes the older
  // one. The seq must be one logged. The events it includes (seq <=
  // snap.seq) are no longer read (ForEachEvent from snap.seq) and go with
  // DeleteCompactedEvents.
  virtual core::Status WriteSnapshot(const SnapshotRow& snap) = 0;
  // Deletes up to `limit` of the events the snapshot includes, oldest
  // first; returns how many it deleted (fewer than `limit`: none is left).
  virtual core::StatusOr<int64_t> DeleteCompactedEvents(int64_t limit) = 0;
  // The latest snapshot, if any.
  virtual core::StatusOr<std::optional<SnapshotRow>> LoadSnapshot() = 0;

 protected:
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
};

// Takes the lock that keeps a second gandiva-scheduler (or a restore) off
// the SQLite database at `db_path`: an exclusive flock of `db_path.lock`,
// which holds the holder's pid for the message another gets ("in use by
// another gandiva-scheduler (pid N)"). Returns the descriptor holding it;
// closing it (or the process ending) lets go.
core::StatusOr<int> LockDatabaseFile(const std::string& db_path);

// The meta key a restore leaves in the database when the database it
// replaced had given ids past the backup's, and Store::MarkJobIdsLost adds
// to: the ids of the jobs restores lost (never given again), as ranges
// "FIRST-LAST[,FIRST-LAST...]" (FormatIdRanges).
inline constexpr const char* kRestoreLostJobsMeta = "restore_lost_jobs";

// Ranges of job ids, ascending, neither overlapping nor adjacent.
using IdRanges = std::vector<std::pair<int64_t, int64_t>>;
// Parses "FIRST-LAST[,FIRST-LAST...]" (positive, FIRST <= LAST); "" is
// none. An error says what is wrong with which part.
core::StatusOr<IdRanges> ParseIdRanges(const std::string& text);
std::string FormatIdRanges(const IdRanges& ranges);
// Adds first..last, merged with the ranges it overlaps or touches.
void AddIdRange(IdRanges* ranges, int64_t first, int64_t last);
// Takes `id` out of `ranges` (the range holding it splits in two).
void RemoveIdFromRanges(IdRanges* ranges, int64_t id);
// The same for a job Store::AdoptJob stores: kFailedPrecondition, naming
// it, when `id` is in none of the ranges (not one a restore lost).
core::Status TakeLostId(IdRanges* ranges, int64_t id);
// The range of `ranges` holding `id`, if any.
std::optional<std::pair<int64_t, int64_t>> FindIdRange(const IdRanges& ranges,
                                                       int64_t id);

// What BackupDatabase copied.
struct BackupStats {
  int64_t bytes = 0;        // the backup file's size
  int64_t jobs = 0;         // job rows, archived ones included
  int64_t last_job_id = 0;  // the highest job id (0: none)
  int64_t events = 0;       // events in the log (not yet compacted)
};

// Copies the SQLite store at `db_path` into a new file at `to_path`, as it
// was at one moment (SQLite's online backup), while a daemon may be using
// it: the daemon goes on writing meanwhile (WAL). The copy is written
// beside `to_path` and renamed onto it once complete and synced, so a file
// already at `to_path` is replaced whole or not at all. Errors name the
// path: no database there, not a gandiva store, cannot write.
core::StatusOr<BackupStats> BackupDatabase(const std::string& db_path,
                                           const std::string& to_path);

// What RestoreDatabase restored.
struct RestoreStats {
  int64_t jobs = 0;         // job rows of the backup
  int64_t last_job_id = 0;  // the backup's highest job id
  // The ids the replaced database had given past the backup's (0, 0: none):
  // those jobs are lost, and their ids are not given again.
  int64_t lost_first = 0, lost_last = 0;
};

// Replaces the SQLite store at `db_path` (if there is one) with the backup
// at `from_path` (a BackupDatabase copy), through SQLite's backup API, so
// that the database's own WAL is dealt with. Takes the database's lock
// first: refused while a daemon uses it. The jobs the replaced database
// had stored past the backup's last id are lost; their ids are recorded
// (kRestoreLostJobsMeta) and never given again (Store::InsertJobs goes on
// after them). The backup and those ids are put together in a file beside
// the database (`db_path`.restore-PID, removed after), then copied into
// the database in one write transaction: it is restored whole, with its
// lost ids, or left as it was. A `from_path` that is not a gandiva store,
// or a `db_path` that is something else, is refused, naming it, and
// nothing changes.
core::StatusOr<RestoreStats> RestoreDatabase(const std::string& db_path,
                                             const std::string& from_path);

}  // namespace gandiva::runtime
