// EtcdStore: the daemon's state (store.h) in etcd, shared by a leader and
// its standbys (leadership.h), so that a standby on another machine can
// take over from what the leader committed.
//
// Keys, under the cluster's prefix P (values JSON unless said):
//   P/leader                      who leads (leadership.h)
//   P/meta/KEY                    the meta table's rows (raw values)
//   P/jobs/ID                     one job row; P/counters/job: the last id
//   P/archive/ID                  an archived job's row (moved from jobs/)
//   P/archive-ended/ENDED/ID      one per archived job, by the time it
//                                 ended (PruneArchive's order); its value:
//                                 the job's archive-name/ key (raw)
//   P/archive-name/NAME/ID        empty, one per archived job, by its
//                                 spec's name (hex; "" none): the archived
//                                 jobs of a name without reading the rest;
//                                 P/counters/archive-ended and
//                                 P/counters/archive-name: "1" once every
//                                 archived job has its keys in both
//   P/servers/ID                  one server row
//   P/history/JOB/N               a job's history, N from 1 across jobs;
//                                 P/counters/history: the last N
//   P/events/SEQ                  the event log; P/counters/event: the last
//                                 SEQ logged (it outlives the events)
//   P/snapshot                    the latest snapshot's seq, time, and
//                                 where its bytes are:
//   P/snapshot-data/GEN/core/I,   the core's and the daemon's snapshot in
//   P/snapshot-data/GEN/daemon/I  chunks of 1 MiB (etcd refuses requests
//                                 over 1.5 MiB); GEN counts snapshots
// Numbers in keys are zero-padded to 20 digits, so that key order is
// numeric order.
//
// Every write is an etcd transaction conditioned on the leader key being
// the one `leadership` holds (fencing); a refusal marks the lead lost and
// fails with FailedPrecondition. etcd allows 128 operations in one
// transaction: a WriteBatch of more rows is written in several (each row
// whole; a crash between them leaves some rows newer than others, which
// the next write after a recovery brings level). A snapshot's chunks are
// written before the key that names them, so a crash leaves the previous
// snapshot whole. Once the events a snapshot includes are all deleted, the
// store compacts etcd's history of old revisions (etcd keeps every
// version of every key until then); defragmenting etcd's database file is
// left to its operator.
//
// Thread-safe: calls are serialized by an internal mutex.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "runtime/scheduler/etcd_client.h"
#include "runtime/scheduler/leadership.h"
#include "runtime/scheduler/store.h"

namespace gandiva::runtime {

class EtcdStore final : public Store {
 public:
  // Reads the counters. `leadership` must lead (its fence conditions the
  // writes) and outlive the store.
  static core::StatusOr<std::unique_ptr<EtcdStore>> Open(
      std::shared_ptr<Leadership> leadership);

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
  // Three deletes a job (its row, its history, its archive-ended key).
  int64_t PruneChunk() const override { return kMaxOps / 4; }
  core::StatusOr<std::vector<ServerRow>> LoadServers() override;
  core::StatusOr<std::vector<HistoryRow>> History(int64_t job) override;
  core::Status Write(const WriteBatch& batch) override;
  Appended AppendEvents(std::span<const EventRow> events) override;
  core::Status ForEachEvent(
      const std::function<core::Status(const EventRow&)>& f,
      int64_t after) override;
  core::StatusOr<int64_t> EventCount() override;
  int64_t LastEventSeq() override;
  core::Status WriteSnapshot(const SnapshotRow& snap) override;
  core::StatusOr<int64_t> DeleteCompactedEvents(int64_t limit) override;
  core::StatusOr<std::optional<SnapshotRow>> LoadSnapshot() override;

  // Operations in one transaction at most (etcd's default limit is 128).
  static constexpr int kMaxOps = 100;
  // Bytes of values in one transaction at most (etcd's default request
  // limit is 1.5 MiB).
  static constexpr size_t kMaxBytes = 1 << 20;

 private:
  explicit EtcdStore(std::shared_ptr<Leadership> leadership);
  std::string Key(const std::string& table, int64_t n) const;
  // archive-ended/ENDED_US/ID.
  std::string EndedKey(int64_t ended_us, int64_t id) const;
  // archive-name/HEX(name)/ID, and its prefix for every id.
  std::string NameKey(const std::string& name, int64_t id) const;
  std::string NamePrefix(const std::string& name) const;
  // Puts the archive-ended/ and archive-name/ keys of every archived job,
  // unless counters/archive-ended and counters/archive-name say it was
  // done (a store archived to before those keys existed); at Open.
  core::Status IndexArchive();
  // The ids restores lost (meta/restore_lost_jobs). Requires mu_.
  core::StatusOr<IdRanges> LostIdsLocked();
  // One fenced transaction of `ops`.
  core::StatusOr<etcdserverpb::TxnResponse> Fenced(
      std::vector<etcdserverpb::RequestOp> ops);
  // Every key-value under `prefix` from `from` on, in key order, a page at
  // a time.
  core::Status Scan(
      const std::string& from, const std::string& end, int64_t page,
      const std::function<core::Status(const etcdserverpb::KeyValue&)>& f);
  core::StatusOr<int64_t> Counter(const std::string& name);
  // Puts `n` rows numbered *last + 1, *last + 2, ... (value(i): the i-th's)
  // under Key(table, number), in order, in transactions of at most
  // kMaxOps - 1 rows and kMaxBytes, each also setting counters/`counter`
  // to its last number; *last follows what was put. How many were put: all,
  // or those before the transaction that failed, with its error. With mu_
  // held.
  std::pair<size_t, core::Status> PutNumbered(
      const std::string& table, const std::string& counter, size_t n,
      const std::function<std::string(size_t)>& value, int64_t* last);
  core::StatusOr<std::string> ReadChunks(int64_t gen, const std::string& part,
                                         int64_t chunks);

  std::shared_ptr<Leadership> lead_;
  EtcdClient& etcd_;
  const std::string p_;
  std::mutex mu_;
  int64_t last_job_ = 0;
  int64_t last_history_ = 0;
  int64_t last_seq_ = 0;
  int64_t snapshot_seq_ = 0;
  int64_t snapshot_gen_ = 0;
};

}  // namespace gandiva::runtime
