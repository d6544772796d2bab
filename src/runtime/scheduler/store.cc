#include "runtime/scheduler/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>

namespace gandiva::runtime {

namespace {

constexpr const char* kJobIdFloor = "job_id_floor";

// The highest job id a gandiva store has given, and the ids restores lost
// (below).
core::StatusOr<int64_t> IdsGiven(sqlite3* db);
core::StatusOr<IdRanges> LostIds(sqlite3* db);

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs(
  id INTEGER PRIMARY KEY,
  spec TEXT NOT NULL,
  state INTEGER NOT NULL,
  submitted_us INTEGER NOT NULL,
  started_us INTEGER NOT NULL DEFAULT 0,
  ended_us INTEGER NOT NULL DEFAULT 0,
  exit_code INTEGER,
  minibatches INTEGER NOT NULL DEFAULT 0,
  minibatch_rate REAL NOT NULL DEFAULT 0,
  uses_library INTEGER NOT NULL DEFAULT 0,
  server TEXT NOT NULL DEFAULT '',
  gpus TEXT NOT NULL DEFAULT '[]',
  suspends INTEGER NOT NULL DEFAULT 0,
  resumes INTEGER NOT NULL DEFAULT 0,
  metric REAL NOT NULL DEFAULT 0,
  metric_minibatches INTEGER NOT NULL DEFAULT 0,
  metric_reports INTEGER NOT NULL DEFAULT 0,
  archived INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS servers(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  address TEXT NOT NULL,
  gpus TEXT NOT NULL,
  sockets INTEGER NOT NULL,
  switches_per_socket INTEGER NOT NULL,
  away_since_us INTEGER NOT NULL DEFAULT 0,
  away_cordon INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS history(
  seq INTEGER PRIMARY KEY,
  job INTEGER NOT NULL,
  time_us INTEGER NOT NULL,
  action TEXT NOT NULL,
  ok INTEGER NOT NULL,
  took_us INTEGER NOT NULL,
  detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS history_by_job ON history(job, seq);
CREATE TABLE IF NOT EXISTS events(
  seq INTEGER PRIMARY KEY,
  time_us INTEGER NOT NULL,
  kind TEXT NOT NULL,
  body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots(
  seq INTEGER PRIMARY KEY,
  time_us INTEGER NOT NULL,
  core BLOB NOT NULL,
  daemon TEXT NOT NULL);
)sql";

// A job's name, from its spec (JSON), as the index of archived jobs by
// name has it: queries must spell it the same to use the index.
constexpr const char* kSpecName =
    "(CASE WHEN json_valid(spec) THEN json_extract(spec, '$.name') END)";

// A prepared statement, finalized on scope exit.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  core::Status prepared() const {
    if (rc_ == SQLITE_OK) return core::Status::Ok();
    return core::IoError(std::string("sqlite prepare: ") + sqlite3_errmsg(db_));
  }
  Stmt& Bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& Bind(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Stmt& Bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()),
                      SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& BindBlob(int i, const std::string& v) {
    sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()),
                      SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& BindNull(int i) {
    sqlite3_bind_null(s_, i);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(s_); }
  // Ready to run again (the bindings stay until bound anew).
  void Reset() { sqlite3_reset(s_); }
  core::Status Run() {
    GANDIVA_RETURN_IF_ERROR(prepared());
    const int rc = Step();
    if (rc == SQLITE_DONE || rc == SQLITE_ROW) return core::Status::Ok();
    return core::IoError(std::string("sqlite: ") + sqlite3_errmsg(db_));
  }
  core::Status StepError() const {
    return core::IoError(std::string("sqlite: ") + sqlite3_errmsg(db_));
  }
  int64_t Int(int c) const { return sqlite3_column_int64(s_, c); }
  double Real(int c) const { return sqlite3_column_double(s_, c); }
  bool IsNull(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
  std::string Blob(int c) const {
    const auto* p = sqlite3_column_blob(s_, c);
    return p == nullptr
               ? std::string()
               : std::string(static_cast<const char*>(p),
                             static_cast<size_t>(sqlite3_column_bytes(s_, c)));
  }
  std::string Text(int c) const {
    const auto* p = sqlite3_column_text(s_, c);
    return p == nullptr
               ? std::string()
               : std::string(reinterpret_cast<const char*>(p),
                             static_cast<size_t>(sqlite3_column_bytes(s_, c)));
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_OK;
};

// The SQLite implementation.
class SqliteStore final : public Store {
 public:
  explicit SqliteStore(sqlite3* db) : db_(db) {}
  ~SqliteStore() override { sqlite3_close(db_); }

  core::Status Exec(const char* sql);
  core::StatusOr<std::optional<std::string>> GetMeta(
      const std::string& key) override;
  core::Status SetMeta(const std::string& key,
                       const std::string& value) override;
  Inserted InsertJobs(std::span<const std::string> specs_json,
                      int64_t submitted_us) override;
  core::StatusOr<std::pair<int64_t, int64_t>> MarkJobIdsLost(
      int64_t id) override;
  core::Status AdoptJob(int64_t id, const std::string& spec_json,
                        int64_t submitted_us) override;
  core::StatusOr<std::vector<JobRow>> LoadJobs() override;
  core::StatusOr<std::optional<JobRow>> LoadJob(int64_t id) override;
  core::Status ArchiveJobs(std::span<const JobRow> rows) override;
  core::StatusOr<std::vector<JobRow>> LoadArchivedJobs(
      int64_t after_id, int limit,
      const std::optional<std::string>& name) override;
  core::StatusOr<int64_t> PruneArchive(int64_t ended_before_us,
                                       int64_t limit) override;
  // One transaction deletes any number; this many take about 3 ms.
  int64_t PruneChunk() const override { return 500; }
  core::StatusOr<std::vector<ServerRow>> LoadServers() override;
  core::StatusOr<std::vector<HistoryRow>> History(int64_t job) override;
  core::Status Write(const WriteBatch& batch) override;
  Appended AppendEvents(std::span<const EventRow> events) override;
  core::Status ForEachEvent(
      const std::function<core::Status(const EventRow&)>& f,
      int64_t after) override;
  core::StatusOr<std::optional<EventRow>> FirstEventOfKind(
      const std::string& kind, int64_t after) override;
  core::StatusOr<int64_t> EventCount() override;
  int64_t LastEventSeq() override {
    std::lock_guard lock(mu_);
    return last_seq_;
  }
  core::Status WriteSnapshot(const SnapshotRow& snap) override;
  core::StatusOr<int64_t> DeleteCompactedEvents(int64_t limit) override;
  core::StatusOr<std::optional<SnapshotRow>> LoadSnapshot() override;

  int64_t last_seq_ = 0;  // set by Open
  // Job ids up to this one are not given (meta kJobIdFloor: the ids of
  // jobs a restore lost); set by Open.
  int64_t job_id_floor_ = 0;

 private:
  core::Status WriteLocked(const WriteBatch& batch);
  // Runs `f` in one transaction, rolled back when it fails; mu_ held.
  core::Status InTransaction(const std::function<core::Status()>& f);

  std::mutex mu_;
  sqlite3* db_;
};

// A database from before `table` had `column` gets it (and the columns
// added with it) by `alter`; its rows keep their values.
core::Status AddColumnsIfMissing(sqlite3* db, SqliteStore& store,
                                 const std::string& table,
                                 const std::string& column, const char* alter) {
  const std::string query = "SELECT COUNT(*) FROM pragma_table_info('" + table +
                            "') WHERE name = '" + column + "'";
  Stmt cols(db, query.c_str());
  GANDIVA_RETURN_IF_ERROR(cols.prepared());
  if (cols.Step() != SQLITE_ROW) return cols.StepError();
  if (cols.Int(0) != 0) return core::Status::Ok();
  return store.Exec(alter);
}

}  // namespace

core::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path,
                                                   bool durable_sync) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return core::IoError("cannot open database '" + path + "': " + msg);
  }
  sqlite3_busy_timeout(db, 5000);
  auto store = std::make_unique<SqliteStore>(db);
  GANDIVA_RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
  GANDIVA_RETURN_IF_ERROR(store->Exec(
      durable_sync ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
  GANDIVA_RETURN_IF_ERROR(store->Exec(kSchema));
  // A database from before the jobs' metric: its columns added.
  GANDIVA_RETURN_IF_ERROR(AddColumnsIfMissing(
      db, *store, "jobs", "metric",
      "ALTER TABLE jobs ADD COLUMN metric REAL NOT NULL DEFAULT 0;"
      "ALTER TABLE jobs ADD COLUMN metric_minibatches INTEGER NOT NULL "
      "DEFAULT 0;"
      "ALTER TABLE jobs ADD COLUMN metric_reports INTEGER NOT NULL "
      "DEFAULT 0;"));
  // A database from before agents said they were stopping.
  GANDIVA_RETURN_IF_ERROR(AddColumnsIfMissing(
      db, *store, "servers", "away_since_us",
      "ALTER TABLE servers ADD COLUMN away_since_us INTEGER NOT NULL "
      "DEFAULT 0;"
      "ALTER TABLE servers ADD COLUMN away_cordon INTEGER NOT NULL "
      "DEFAULT 0;"));
  // A database from before jobs were archived.
  GANDIVA_RETURN_IF_ERROR(AddColumnsIfMissing(
      db, *store, "jobs", "archived",
      "ALTER TABLE jobs ADD COLUMN archived INTEGER NOT NULL DEFAULT 0;"));
  const std::string indexes =
      "CREATE INDEX IF NOT EXISTS jobs_not_archived ON jobs(id) "
      "WHERE archived = 0;"
      "CREATE INDEX IF NOT EXISTS jobs_archived_by_end ON jobs(ended_us) "
      "WHERE archived = 1;"
      "CREATE INDEX IF NOT EXISTS jobs_archived_by_name ON jobs(" +
      std::string(kSpecName) +
      ", id) WHERE archived = 1;"
      // A change of the queues is looked for at every start
      // (FirstEventOfKind); the index holds those events alone.
      "CREATE INDEX IF NOT EXISTS events_queues_changed ON events(seq) "
      "WHERE kind = 'QueuesChanged'";
  GANDIVA_RETURN_IF_ERROR(store->Exec(indexes.c_str()));
  // Events are numbered on from the last one logged or compacted away.
  Stmt s(db,
         "SELECT MAX(IFNULL((SELECT MAX(seq) FROM events), 0), "
         "IFNULL((SELECT MAX(seq) FROM snapshots), 0))");
  GANDIVA_RETURN_IF_ERROR(s.prepared());
  if (s.Step() != SQLITE_ROW) return s.StepError();
  store->last_seq_ = s.Int(0);
  auto floor = store->GetMeta(kJobIdFloor);
  if (!floor.ok()) return floor.status();
  if (floor->has_value()) {
    try {
      store->job_id_floor_ = std::stoll(**floor);
    } catch (const std::exception&) {
      return core::IoError("database '" + path + "': meta '" + kJobIdFloor +
                           "' is not a number: '" + **floor + "'");
    }
  }
  return std::unique_ptr<Store>(std::move(store));
}

core::Status SqliteStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err != nullptr ? err : "unknown error";
    sqlite3_free(err);
    return core::IoError("sqlite: " + msg);
  }
  return core::Status::Ok();
}

core::StatusOr<std::optional<std::string>> SqliteStore::GetMeta(
    const std::string& key) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "SELECT value FROM meta WHERE key = ?");
  GANDIVA_RETURN_IF_ERROR(s.prepared());
  s.Bind(1, key);
  const int rc = s.Step();
  if (rc == SQLITE_ROW) return std::optional<std::string>(s.Text(0));
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  return s.StepError();
}

core::Status SqliteStore::SetMeta(const std::string& key,
                                  const std::string& value) {
  std::lock_guard lock(mu_);
  Stmt s(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
  s.Bind(1, key).Bind(2, value);
  return s.Run();
}

core::StatusOr<int64_t> Store::InsertJob(const std::string& spec_json,
                                         int64_t submitted_us) {
  Inserted i =
      InsertJobs(std::span<const std::string>(&spec_json, 1), submitted_us);
  if (!i.status.ok()) return i.status;
  return i.first_id;
}

Store::Inserted SqliteStore::InsertJobs(std::span<const std::string> specs_json,
                                        int64_t submitted_us) {
  if (specs_json.empty()) return {};
  std::lock_guard lock(mu_);
  int64_t first = 0;
  auto insert = [&]() -> core::Status {
    // The first job goes past the floor, if ids have not already; the
    // others (and all of them without a floor) take the next rowid.
    int64_t past_floor = 0;
    if (job_id_floor_ > 0) {
      Stmt max(db_, "SELECT IFNULL(MAX(id), 0) FROM jobs");
      GANDIVA_RETURN_IF_ERROR(max.prepared());
      if (max.Step() != SQLITE_ROW) return max.StepError();
      if (max.Int(0) >= job_id_floor_) {
        job_id_floor_ = 0;  // passed for good: rows past it stay
      } else {
        past_floor = job_id_floor_ + 1;
      }
    }
    Stmt s(
        db_,
        "INSERT INTO jobs(id, spec, state, submitted_us) VALUES(?, ?, 1, ?)");
    GANDIVA_RETURN_IF_ERROR(s.prepared());
    for (const std::string& spec : specs_json) {
      if (past_floor > 0 && &spec == specs_json.data()) {
        s.Bind(1, past_floor);
      } else {
        s.BindNull(1);
      }
      s.Bind(2, spec).Bind(3, submitted_us);
      GANDIVA_RETURN_IF_ERROR(s.Run());
      s.Reset();
      const auto id = static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
      if (first == 0) {
        first = id;
      } else if (id != first + (&spec - specs_json.data())) {
        // The reply hands out first_id + i: they must be consecutive.
        return core::Status(core::StatusCode::kInternal,
                            "job ids not consecutive: " + std::to_string(id) +
                                " after " + std::to_string(first));
      }
    }
    return core::Status::Ok();
  };
  // One statement is a transaction by itself.
  core::Status st = specs_json.size() == 1 ? insert() : InTransaction(insert);
  if (!st.ok()) return {0, 0, std::move(st)};
  return {specs_json.size(), first, core::Status::Ok()};
}

core::StatusOr<std::pair<int64_t, int64_t>> SqliteStore::MarkJobIdsLost(
    int64_t id) {
  std::lock_guard lock(mu_);
  std::pair<int64_t, int64_t> added{0, 0};
  core::Status st = InTransaction([&]() -> core::Status {
    auto given = IdsGiven(db_);
    if (!given.ok()) return given.status();
    const int64_t last = *given;
    if (id <= last) return core::Status::Ok();
    auto read = LostIds(db_);
    if (!read.ok()) return read.status();
    IdRanges lost = std::move(*read);
    AddIdRange(&lost, last + 1, id);
    Stmt put(db_,
             "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?), (?, ?)");
    GANDIVA_RETURN_IF_ERROR(put.prepared());
    put.Bind(1, std::string(kJobIdFloor))
        .Bind(2, std::to_string(id))
        .Bind(3, std::string(kRestoreLostJobsMeta))
        .Bind(4, FormatIdRanges(lost));
    GANDIVA_RETURN_IF_ERROR(put.Run());
    added = {last + 1, id};
    return core::Status::Ok();
  });
  if (!st.ok()) return st;
  if (added.second > 0) job_id_floor_ = id;
  return added;
}

core::Status SqliteStore::AdoptJob(int64_t id, const std::string& spec_json,
                                   int64_t submitted_us) {
  std::lock_guard lock(mu_);
  return InTransaction([&]() -> core::Status {
    auto read = LostIds(db_);
    if (!read.ok()) return read.status();
    IdRanges lost = std::move(*read);
    GANDIVA_RETURN_IF_ERROR(TakeLostId(&lost, id));
    Stmt row(db_,
             "INSERT INTO jobs(id, spec, state, submitted_us) "
             "VALUES(?, ?, 1, ?)");
    GANDIVA_RETURN_IF_ERROR(row.prepared());
    row.Bind(1, id).Bind(2, spec_json).Bind(3, submitted_us);
    GANDIVA_RETURN_IF_ERROR(row.Run());
    Stmt put(db_, "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
    GANDIVA_RETURN_IF_ERROR(put.prepared());
    put.Bind(1, std::string(kRestoreLostJobsMeta))
        .Bind(2, FormatIdRanges(lost));
    return put.Run();
  });
}

namespace {

constexpr const char* kJobColumns =
    "SELECT id, spec, state, submitted_us, started_us, ended_us, exit_code, "
    "minibatches, minibatch_rate, uses_library, server, gpus, suspends, "
    "resumes, metric, metric_minibatches, metric_reports FROM jobs ";

JobRow JobRowOf(Stmt& s) {
  JobRow r;
  r.id = s.Int(0);
  r.spec_json = s.Text(1);
  r.state = static_cast<int>(s.Int(2));
  r.submitted_us = s.Int(3);
  r.started_us = s.Int(4);
  r.ended_us = s.Int(5);
  if (!s.IsNull(6)) r.exit_code = static_cast<int32_t>(s.Int(6));
  r.minibatches = s.Int(7);
  r.minibatch_rate = s.Real(8);
  r.uses_library = s.Int(9) != 0;
  r.server = s.Text(10);
  r.gpus_json = s.Text(11);
  r.suspends = static_cast<int32_t>(s.Int(12));
  r.resumes = static_cast<int32_t>(s.Int(13));
  r.metric = s.Real(14);
  r.metric_minibatches = s.Int(15);
  r.metric_reports = s.Int(16);
  return r;
}

}  // namespace

core::StatusOr<std::vector<JobRow>> SqliteStore::LoadJobs() {
  std::lock_guard lock(mu_);
  Stmt s(db_,
         (std::string(kJobColumns) + "WHERE archived = 0 ORDER BY id").c_str());
  GANDIVA_RETURN_IF_ERROR(s.prepared());
  std::vector<JobRow> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) out.push_back(JobRowOf(s));
  if (rc != SQLITE_DONE) return s.StepError();
  return out;
}

core::StatusOr<std::optional<JobRow>> SqliteStore::LoadJob(int64_t id) {
  std::lock_guard lock(mu_);
  Stmt s(db_, (std::string(kJobColumns) + "WHERE id = ?").c_str());
  GANDIVA_RETURN_IF_ERROR(s.prepared());
  s.Bind(1, id);
  const int rc = s.Step();
  if (rc == SQLITE_ROW) return std::optional<JobRow>(JobRowOf(s));
  if (rc != SQLITE_DONE) return s.StepError();
  return std::optional<JobRow>();
}

core::StatusOr<std::vector<JobRow>> SqliteStore::LoadArchivedJobs(
    int64_t after_id, int limit, const std::optional<std::string>& name) {
  std::lock_guard lock(mu_);
  Stmt s(db_, (std::string(kJobColumns) + "WHERE id > ? AND archived = 1 " +
               (name ? "AND " + std::string(kSpecName) + " = ? " : "") +
               "ORDER BY id LIMIT ?")
                  .c_str());
  GANDIVA_RETURN_IF_ERROR(s.prepared());
  int i = 1;
  s.Bind(i++, after_id);
  if (name) s.Bind(i++, *name);
  s.Bind(i, static_cast<int64_t>(limit));
  std::vector<JobRow> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) out.push_back(JobRowOf(s));
  if (rc != SQLITE_DONE) return s.StepError();
  return out;
}

core::Status SqliteStore::ArchiveJobs(std::span<const JobRow> rows) {
  std::lock_guard lock(mu_);
  return InTransaction([&]() -> core::Status {
    Stmt s(db_, "UPDATE jobs SET archived = 1 WHERE id = ?");
    GANDIVA_RETURN_IF_ERROR(s.prepared());
    for (const JobRow& r : rows) {
      s.Reset();
      s.Bind(1, r.id);
      if (s.Step() != SQLITE_DONE) return s.StepError();
    }
    return core::Status::Ok();
  });
}

core::StatusOr<int64_t> SqliteStore::PruneArchive(int64_t ended_before_us,
                                                  int64_t limit) {
  std::lock_guard lock(mu_);
  int64_t deleted = 0;
  core::Status done = InTransaction([&]() -> core::Status {
    // A new row's id is one past the highest: that row stays, so that no
    // id is handed out twice.
    Stmt pick(db_,
              "SELECT id FROM jobs WHERE archived = 1 AND ended_us < ? AND "
              "id < (SELECT MAX(id) FROM jobs) ORDER BY ended_us LIMIT ?");
    GANDIVA_RETURN_IF_ERROR(pick.prepared());
    pick.Bind(1, ended_before_us).Bind(2, limit);
    std::vector<int64_t> ids;
    int rc;
    while ((rc = pick.Step()) == SQLITE_ROW) ids.push_back(pick.Int(0));
    if (rc != SQLITE_DONE) return pick.StepError();
    Stmt history(db_, "DELETE FROM history WHERE job = ?");
    GANDIVA_RETURN_IF_ERROR(history.prepared());
    Stmt job(db_, "DELETE FROM jobs WHERE id = ?");
    GANDIVA_RETURN_IF_ERROR(job.prepared());
    for (int64_t id : ids) {
      history.Reset();
      history.Bind(1, id);
      if (history.Step() != SQLITE_DONE) return history.StepError();
      job.Reset();
      job.Bind(1, id);
      if (job.Step() != SQLITE_DONE) return job.StepError();
    }
    deleted = static_cast<int64_t>(ids.size());
    return core::Status::Ok();
  });
  if (!done.ok()) return done;
  return deleted;
}

core::StatusOr<std::vector<ServerRow>> SqliteStore::LoadServers() {
  std::lock_guard lock(mu_);
  Stmt s(db_,
         "SELECT id, name, address, gpus, sockets, switches_per_socket, "
         "away_since_us, away_cordon FROM servers ORDER BY id");
  GANDIVA_RETURN_IF_ERROR(s.prepared());
  std::vector<ServerRow> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    ServerRow r;
    r.id = static_cast<int32_t>(s.Int(0));
    r.name = s.Text(1);
    r.address = s.Text(2);
    r.gpus_json = s.Text(3);
    r.sockets = static_cast<int32_t>(s.Int(4));
    r.switches_per_socket = static_cast<int32_t>(s.Int(5));
    r.away_since_us = s.Int(6);
    r.away_cordon = s.Int(7) != 0;
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return s.StepError();
  return out;
}

core::StatusOr<std::vector<HistoryRow>> SqliteStore::History(int64_t job) {
  std::lock_guard lock(mu_);
  Stmt s(db_,
         "SELECT job, time_us, action, ok, took_us, detail FROM history "
         "WHERE job = ? ORDER BY seq");
  GANDIVA_RETURN_IF_ERROR(s.prepared());
  s.Bind(1, job);
  std::vector<HistoryRow> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    HistoryRow r;
    r.job = s.Int(0);
    r.time_us = s.Int(1);
    r.action = s.Text(2);
    r.ok = s.Int(3) != 0;
    r.took_us = s.Int(4);
    r.detail = s.Text(5);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return s.StepError();
  return out;
}

core::Status SqliteStore::Write(const WriteBatch& batch) {
  if (batch.empty()) return core::Status::Ok();
  std::lock_guard lock(mu_);
  return InTransaction([&] { return WriteLocked(batch); });
}

core::Status SqliteStore::InTransaction(
    const std::function<core::Status()>& f) {
  GANDIVA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  core::Status st = f();
  if (!st.ok()) {
    (void)Exec("ROLLBACK");
    return st;
  }
  return Exec("COMMIT");
}

core::Status SqliteStore::WriteLocked(const WriteBatch& batch) {
  for (const JobRow& r : batch.jobs) {
    Stmt s(db_,
           "INSERT OR REPLACE INTO jobs(id, spec, state, submitted_us, "
           "started_us, ended_us, exit_code, minibatches, minibatch_rate, "
           "uses_library, server, gpus, suspends, resumes, metric, "
           "metric_minibatches, metric_reports) "
           "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    s.Bind(1, r.id).Bind(2, r.spec_json).Bind(3, int64_t{r.state});
    s.Bind(4, r.submitted_us).Bind(5, r.started_us).Bind(6, r.ended_us);
    if (r.exit_code) {
      s.Bind(7, int64_t{*r.exit_code});
    } else {
      s.BindNull(7);
    }
    s.Bind(8, r.minibatches).Bind(9, r.minibatch_rate);
    s.Bind(10, int64_t{r.uses_library ? 1 : 0}).Bind(11, r.server);
    s.Bind(12, r.gpus_json).Bind(13, int64_t{r.suspends});
    s.Bind(14, int64_t{r.resumes}).Bind(15, r.metric);
    s.Bind(16, r.metric_minibatches).Bind(17, r.metric_reports);
    GANDIVA_RETURN_IF_ERROR(s.Run());
  }
  for (const ServerRow& r : batch.servers) {
    Stmt s(db_,
           "INSERT OR REPLACE INTO servers(id, name, address, gpus, sockets, "
           "switches_per_socket, away_since_us, away_cordon) "
           "VALUES(?,?,?,?,?,?,?,?)");
    s.Bind(1, int64_t{r.id}).Bind(2, r.name).Bind(3, r.address);
    s.Bind(4, r.gpus_json).Bind(5, int64_t{r.sockets});
    s.Bind(6, int64_t{r.switches_per_socket}).Bind(7, r.away_since_us);
    s.Bind(8, int64_t{r.away_cordon ? 1 : 0});
    GANDIVA_RETURN_IF_ERROR(s.Run());
  }
  for (const HistoryRow& r : batch.history) {
    Stmt s(db_,
           "INSERT INTO history(job, time_us, action, ok, took_us, detail) "
           "VALUES(?,?,?,?,?,?)");
    s.Bind(1, r.job).Bind(2, r.time_us).Bind(3, r.action);
    s.Bind(4, int64_t{r.ok ? 1 : 0}).Bind(5, r.took_us).Bind(6, r.detail);
    GANDIVA_RETURN_IF_ERROR(s.Run());
  }
  return core::Status::Ok();
}

core::StatusOr<int64_t> Store::AppendEvent(int64_t time_us,
                                           const std::string& kind,
                                           const std::string& json) {
  const EventRow e{0, time_us, kind, json};
  Appended a = AppendEvents(std::span<const EventRow>(&e, 1));
  if (!a.status.ok()) return a.status;
  return a.last_seq;
}

Store::Appended SqliteStore::AppendEvents(std::span<const EventRow> events) {
  if (events.empty()) return {};
  std::lock_guard lock(mu_);
  auto insert = [&]() -> core::Status {
    Stmt s(db_,
           "INSERT INTO events(seq, time_us, kind, body) VALUES(?, ?, ?, ?)");
    GANDIVA_RETURN_IF_ERROR(s.prepared());
    int64_t seq = last_seq_;
    for (const EventRow& e : events) {
      s.Bind(1, ++seq).Bind(2, e.time_us).Bind(3, e.kind).Bind(4, e.json);
      GANDIVA_RETURN_IF_ERROR(s.Run());
      s.Reset();
    }
    return core::Status::Ok();
  };
  // One statement is a transaction by itself.
  core::Status st = events.size() == 1 ? insert() : InTransaction(insert);
  if (!st.ok()) return {0, 0, std::move(st)};
  last_seq_ += static_cast<int64_t>(events.size());
  return {events.size(), last_seq_, core::Status::Ok()};
}

core::Status SqliteStore::ForEachEvent(
    const std::function<core::Status(const EventRow&)>& f, int64_t after) {
  std::lock_guard lock(mu_);
  Stmt s(db_,
         "SELECT seq, time_us, kind, body FROM events WHERE seq > ? "
         "ORDER BY seq");
  GANDIVA_RETURN_IF_ERROR(s.prepared());
  s.Bind(1, after);
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    EventRow r{s.Int(0), s.Int(1), s.Text(2), s.Text(3)};
    GANDIVA_RETURN_IF_ERROR(f(r));
  }
  if (rc != SQLITE_DONE) return s.StepError();
  return core::Status::Ok();
}

core::StatusOr<std::optional<EventRow>> SqliteStore::FirstEventOfKind(
    const std::string& kind, int64_t after) {
  // The kind as a literal, so that the partial index on it is used: the
  // kinds are the codec's names, letters alone.
  if (kind.empty() || !std::all_of(kind.begin(), kind.end(), [](char c) {
        return std::isalpha(static_cast<unsigned char>(c)) != 0;
      })) {
    return core::InvalidArgument("event kind '" + kind +
                                 "': not a name of letters");
  }
  std::lock_guard lock(mu_);
  const std::string sql =
      "SELECT seq, time_us, kind, body FROM events WHERE kind = '" + kind +
      "' AND seq > ? ORDER BY seq LIMIT 1";
  Stmt s(db_, sql.c_str());
  GANDIVA_RETURN_IF_ERROR(s.prepared());
  s.Bind(1, after);
  const int rc = s.Step();
  if (rc == SQLITE_ROW) {
    return std::optional<EventRow>(
        EventRow{s.Int(0), s.Int(1), s.Text(2), s.Text(3)});
  }
  if (rc != SQLITE_DONE) return s.StepError();
  return std::optional<EventRow>();
}

core::Status SqliteStore::WriteSnapshot(const SnapshotRow& snap) {
  std::lock_guard lock(mu_);
  if (snap.seq < 0 || snap.seq > last_seq_) {
    return core::InvalidArgument(
        "snapshot after event " + std::to_string(snap.seq) +
        ", but the last event logged is " + std::to_string(last_seq_));
  }
  return InTransaction([&]() -> core::Status {
    Stmt ins(db_,
             "INSERT OR REPLACE INTO snapshots(seq, time_us, core, daemon) "
             "VALUES(?, ?, ?, ?)");
    ins.Bind(1, snap.seq).Bind(2, snap.time_us);
    ins.BindBlob(3, snap.core).Bind(4, snap.daemon);
    GANDIVA_RETURN_IF_ERROR(ins.Run());
    Stmt old(db_, "DELETE FROM snapshots WHERE seq < ?");
    old.Bind(1, snap.seq);
    return old.Run();
  });
}

core::StatusOr<int64_t> SqliteStore::DeleteCompactedEvents(int64_t limit) {
  std::lock_guard lock(mu_);
  Stmt s(db_,
         "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE seq <= "
         "(SELECT IFNULL(MAX(seq), 0) FROM snapshots) ORDER BY seq LIMIT ?)");
  s.Bind(1, limit);
  GANDIVA_RETURN_IF_ERROR(s.Run());
  return static_cast<int64_t>(sqlite3_changes(db_));
}

core::StatusOr<std::optional<SnapshotRow>> SqliteStore::LoadSnapshot() {
  std::lock_guard lock(mu_);
  Stmt s(db_,
         "SELECT seq, time_us, core, daemon FROM snapshots "
         "ORDER BY seq DESC LIMIT 1");
  GANDIVA_RETURN_IF_ERROR(s.prepared());
  const int rc = s.Step();
  if (rc == SQLITE_DONE) return std::optional<SnapshotRow>();
  if (rc != SQLITE_ROW) return s.StepError();
  return std::optional<SnapshotRow>(
      SnapshotRow{s.Int(0), s.Int(1), s.Blob(2), s.Text(3)});
}

core::StatusOr<int64_t> SqliteStore::EventCount() {
  std::lock_guard lock(mu_);
  Stmt s(db_, "SELECT COUNT(*) FROM events");
  GANDIVA_RETURN_IF_ERROR(s.prepared());
  if (s.Step() != SQLITE_ROW) return s.StepError();
  return s.Int(0);
}

namespace {

// Closes a connection (and a backup) when it goes out of scope.
struct Db {
  sqlite3* db = nullptr;
  Db() = default;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db() { sqlite3_close(db); }
};

// One row of integers from `sql` (a single-row query).
core::StatusOr<std::vector<int64_t>> IntRow(sqlite3* db, const char* sql,
                                            int columns) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK) {
    return core::IoError(std::string("sqlite: ") + sqlite3_errmsg(db));
  }
  std::vector<int64_t> out;
  if (sqlite3_step(st) == SQLITE_ROW) {
    for (int i = 0; i < columns; ++i)
      out.push_back(sqlite3_column_int64(st, i));
  }
  const std::string err = sqlite3_errmsg(db);
  sqlite3_finalize(st);
  if (static_cast<int>(out.size()) != columns) {
    return core::IoError("sqlite: " + err);
  }
  return out;
}

// Syncs a file or directory to disk.
core::Status SyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const std::string err = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return core::IoError("cannot sync '" + path + "': " + err);
  }
  ::close(fd);
  return core::Status::Ok();
}

// Removes an SQLite database file and what SQLite keeps beside it.
void RemoveDatabaseFiles(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-journal", "-wal", "-shm"}) {
    std::filesystem::remove(path + suffix, ec);
  }
}

// The highest job id a gandiva store has given: its last job's, or the
// floor a restore left past the jobs it lost, whichever is higher.
core::StatusOr<int64_t> IdsGiven(sqlite3* db) {
  const std::string sql =
      "SELECT MAX(IFNULL((SELECT MAX(id) FROM jobs), 0), IFNULL((SELECT "
      "CAST(value AS INTEGER) FROM meta WHERE key = '" +
      std::string(kJobIdFloor) + "'), 0))";
  auto row = IntRow(db, sql.c_str(), 1);
  if (!row.ok()) return row.status();
  return (*row)[0];
}

// The ids restores lost (meta kRestoreLostJobsMeta; none without it).
core::StatusOr<IdRanges> LostIds(sqlite3* db) {
  Stmt get(db, "SELECT value FROM meta WHERE key = ?");
  GANDIVA_RETURN_IF_ERROR(get.prepared());
  get.Bind(1, std::string(kRestoreLostJobsMeta));
  const int rc = get.Step();
  if (rc == SQLITE_DONE) return IdRanges{};
  if (rc != SQLITE_ROW) return get.StepError();
  auto parsed = ParseIdRanges(get.Text(0));
  if (!parsed.ok()) {
    return core::IoError(std::string("meta '") + kRestoreLostJobsMeta +
                         "': " + parsed.status().message());
  }
  return parsed;
}

// Copies every page of `src` into `dst` (SQLite's backup API) in one step:
// one read transaction of `src`, so one moment's state, and one write
// transaction of `dst`, so `dst` is its old self or the copy, never part.
core::Status CopyPages(sqlite3* src, sqlite3* dst) {
  sqlite3_backup* b = sqlite3_backup_init(dst, "main", src, "main");
  if (b == nullptr) return core::IoError(sqlite3_errmsg(dst));
  const int rc = sqlite3_backup_step(b, -1);
  sqlite3_backup_finish(b);
  if (rc == SQLITE_DONE) return core::Status::Ok();
  return core::IoError(rc == SQLITE_BUSY || rc == SQLITE_LOCKED
                           ? "the database stayed locked"
                           : sqlite3_errstr(rc));
}

// Opens the gandiva store at `path` read-only into `*db` (closed by the
// caller, even on an error).
core::Status OpenGandivaStore(const std::string& path, sqlite3** db) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return core::NotFound("no database at '" + path + "'");
  }
  if (sqlite3_open_v2(path.c_str(), db, SQLITE_OPEN_READONLY, nullptr) !=
      SQLITE_OK) {
    return core::IoError("cannot open database '" + path +
                         "': " + sqlite3_errmsg(*db));
  }
  sqlite3_busy_timeout(*db, 5000);
  auto tables = IntRow(*db,
                       "SELECT COUNT(*) FROM sqlite_master WHERE type = "
                       "'table' AND name IN ('meta', 'jobs', 'events')",
                       1);
  if (!tables.ok()) {
    return core::InvalidArgument("'" + path + "' is not a gandiva store (" +
                                 tables.status().message() + ")");
  }
  if ((*tables)[0] != 3) {
    return core::InvalidArgument(
        "'" + path +
        "' is not a gandiva store (no meta, jobs and events "
        "tables)");
  }
  return core::Status::Ok();
}

}  // namespace

core::StatusOr<IdRanges> ParseIdRanges(const std::string& text) {
  IdRanges out;
  if (text.empty()) return out;
  for (size_t at = 0; at <= text.size();) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(at, end - at);
    long long first = 0, last = 0;
    int used = 0;
    if (std::sscanf(part.c_str(), "%lld-%lld%n", &first, &last, &used) != 2 ||
        used != static_cast<int>(part.size()) || first < 1 || last < first) {
      return core::InvalidArgument("'" + text + "': '" + part +
                                   "' is not FIRST-LAST (ids, FIRST <= LAST)");
    }
    AddIdRange(&out, first, last);
    at = end + 1;  // past the text after its last part
  }
  return out;
}

std::string FormatIdRanges(const IdRanges& ranges) {
  std::string out;
  for (const auto& [first, last] : ranges) {
    if (!out.empty()) out += ",";
    out += std::to_string(first) + "-" + std::to_string(last);
  }
  return out;
}

void AddIdRange(IdRanges* ranges, int64_t first, int64_t last) {
  IdRanges out;
  for (const auto& r : *ranges) {
    if (r.second + 1 < first || last + 1 < r.first) {
      out.push_back(r);  // apart
    } else {
      first = std::min(first, r.first);
      last = std::max(last, r.second);
    }
  }
  out.emplace_back(first, last);
  std::sort(out.begin(), out.end());
  *ranges = std::move(out);
}

void RemoveIdFromRanges(IdRanges* ranges, int64_t id) {
  IdRanges out;
  for (const auto& [first, last] : *ranges) {
    if (id < first || id > last) {
      out.emplace_back(first, last);
      continue;
    }
    if (first < id) out.emplace_back(first, id - 1);
    if (id < last) out.emplace_back(id + 1, last);
  }
  *ranges = std::move(out);
}

core::Status TakeLostId(IdRanges* ranges, int64_t id) {
  if (!FindIdRange(*ranges, id)) {
    return core::FailedPrecondition("job " + std::to_string(id) +
                                    " is not one a restore lost");
  }
  RemoveIdFromRanges(ranges, id);
  return core::Status::Ok();
}

std::optional<std::pair<int64_t, int64_t>> FindIdRange(const IdRanges& ranges,
                                                       int64_t id) {
  for (const auto& r : ranges) {
    if (id >= r.first && id <= r.second) return r;
  }
  return std::nullopt;
}

core::StatusOr<BackupStats> BackupDatabase(const std::string& db_path,
                                           const std::string& to_path) {
  Db src;
  GANDIVA_RETURN_IF_ERROR(OpenGandivaStore(db_path, &src.db));

  // Written beside the target, then renamed onto it.
  const std::string partial =
      to_path + ".partial-" + std::to_string(::getpid());
  ::unlink(partial.c_str());
  auto fail = [&](const std::string& what) {
    RemoveDatabaseFiles(partial);
    return core::IoError("cannot write the backup '" + to_path + "': " + what);
  };
  BackupStats stats;
  {
    Db dst;
    if (sqlite3_open_v2(partial.c_str(), &dst.db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                        nullptr) != SQLITE_OK) {
      return fail(dst.db != nullptr ? sqlite3_errmsg(dst.db) : "out of memory");
    }
    if (core::Status s = CopyPages(src.db, dst.db); !s.ok()) {
      return fail(s.message());
    }
    // One self-contained file (no -wal beside it), synced.
    if (sqlite3_exec(dst.db,
                     "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL",
                     nullptr, nullptr, nullptr) != SQLITE_OK) {
      return fail(sqlite3_errmsg(dst.db));
    }
    auto jobs =
        IntRow(dst.db, "SELECT COUNT(*), IFNULL(MAX(id), 0) FROM jobs", 2);
    auto events = IntRow(dst.db, "SELECT COUNT(*) FROM events", 1);
    if (!jobs.ok()) return fail(jobs.status().message());
    if (!events.ok()) return fail(events.status().message());
    stats.jobs = (*jobs)[0];
    stats.last_job_id = (*jobs)[1];
    stats.events = (*events)[0];
  }
  if (core::Status s = SyncPath(partial); !s.ok()) return fail(s.message());
  if (::rename(partial.c_str(), to_path.c_str()) != 0) {
    return fail(std::strerror(errno));
  }
  const std::filesystem::path parent =
      std::filesystem::path(to_path).parent_path();
  GANDIVA_RETURN_IF_ERROR(SyncPath(parent.empty() ? "." : parent.string()));
  struct stat info {};
  if (::stat(to_path.c_str(), &info) == 0) stats.bytes = info.st_size;
  return stats;
}

core::StatusOr<int> LockDatabaseFile(const std::string& db_path) {
  const std::string path = db_path + ".lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return core::IoError("cannot open '" + path + "': " + std::strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) {
      holder.pop_back();
    }
    ::close(fd);
    if (err != EWOULDBLOCK) {
      return core::IoError("cannot lock '" + path + "': " + std::strerror(err));
    }
    return core::FailedPrecondition(
        "database '" + db_path + "' is in use by another gandiva-scheduler" +
        (holder.empty() ? std::string() : " (pid " + holder + ")") +
        ": stop it first, or use another --db");
  }
  // Who holds it, for the message above (best effort).
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    (void)!::pwrite(fd, pid.data(), pid.size(), 0);
  }
  return fd;
}

core::StatusOr<RestoreStats> RestoreDatabase(const std::string& db_path,
                                             const std::string& from_path) {
  auto lock = LockDatabaseFile(db_path);
  if (!lock.ok()) return lock.status();
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }
  } unlock{*lock};
  Db src;
  GANDIVA_RETURN_IF_ERROR(OpenGandivaStore(from_path, &src.db));
  RestoreStats stats;
  auto from_jobs =
      IntRow(src.db, "SELECT COUNT(*), IFNULL(MAX(id), 0) FROM jobs", 2);
  if (!from_jobs.ok()) return from_jobs.status();
  stats.jobs = (*from_jobs)[0];
  stats.last_job_id = (*from_jobs)[1];
  auto given = IdsGiven(src.db);
  if (!given.ok()) return given.status();

  // The ids the database being replaced gave: those past the backup's are
  // never given again.
  int64_t replaced_last = 0;
  struct stat info {};
  if (::stat(db_path.c_str(), &info) == 0) {
    Db old;
    if (!OpenGandivaStore(db_path, &old.db).ok()) {
      return core::FailedPrecondition(
          "database '" + db_path +
          "' is not a gandiva store: it is not replaced (move it away first)");
    }
    auto last = IdsGiven(old.db);
    if (!last.ok()) return last.status();
    replaced_last = *last;
  }
  if (replaced_last > *given) {
    stats.lost_first = *given + 1;
    stats.lost_last = replaced_last;
  }

  // The backup and the ids it must not give again are first made into one
  // file beside the database, which is then copied into it in one write
  // transaction: the database is left as it was or restored whole, never
  // restored without the ids it lost.
  const std::string staged = db_path + ".restore-" + std::to_string(::getpid());
  struct Cleanup {
    const std::string& path;
    ~Cleanup() { RemoveDatabaseFiles(path); }
  } cleanup{staged};
  RemoveDatabaseFiles(staged);
  auto fail = [&](const std::string& what) {
    return core::IoError("cannot restore into '" + db_path + "': " + what);
  };
  {
    Db stage;
    if (sqlite3_open_v2(staged.c_str(), &stage.db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                        nullptr) != SQLITE_OK) {
      return fail(
          "cannot make '" + staged + "': " +
          (stage.db != nullptr ? sqlite3_errmsg(stage.db) : "out of memory"));
    }
    if (core::Status s = CopyPages(src.db, stage.db); !s.ok()) {
      return fail("copying '" + from_path + "': " + s.message());
    }
  }
  if (stats.lost_last > 0) {
    // Added to those the backup's own restores lost.
    auto store = Store::Open(staged);
    if (!store.ok()) return fail(store.status().message());
    auto added = (*store)->MarkJobIdsLost(stats.lost_last);
    if (!added.ok()) {
      return fail("recording the ids of the jobs it loses: " +
                  added.status().message());
    }
  }
  Db stage;
  if (sqlite3_open_v2(staged.c_str(), &stage.db, SQLITE_OPEN_READWRITE,
                      nullptr) != SQLITE_OK) {
    return fail("cannot read '" + staged + "': " + sqlite3_errmsg(stage.db));
  }

  Db dst;
  if (sqlite3_open_v2(db_path.c_str(), &dst.db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                      nullptr) != SQLITE_OK) {
    return core::IoError("cannot open database '" + db_path +
                         "': " + sqlite3_errmsg(dst.db));
  }
  sqlite3_busy_timeout(dst.db, 5000);
  if (core::Status s = CopyPages(stage.db, dst.db); !s.ok()) {
    return fail(s.message());
  }
  return stats;
}

}  // namespace gandiva::runtime
