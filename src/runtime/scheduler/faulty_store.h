// FaultyStore: a Store that passes every call to another and fails the
// kinds of calls a test chooses (as LevelDB's fault-injection Env): for
// tests of what the daemon does when its store cannot be written, without
// holding a database's lock for its busy timeout. Inject it through
// SchedulerOptions::store_wrapper. A failed call does nothing (a batch's
// failure stores none of it). Thread-safe: the daemon's loop calls it while
// the test sets the faults.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "runtime/scheduler/store.h"

namespace gandiva::runtime {

class FaultyStore final : public Store {
 public:
  // The calls that write.
  enum class Op {
    kSetMeta,
    kInsertJobs,
    kMarkJobIdsLost,
    kAdoptJob,
    kArchiveJobs,
    kPruneArchive,
    kWrite,
    kAppendEvents,
    kWriteSnapshot,
    kDeleteCompactedEvents,
  };

  explicit FaultyStore(std::unique_ptr<Store> inner)
      : inner_(std::move(inner)) {}

  // From now on the calls of `op` fail with `error`; an Ok status lets
  // them through again.
  void Fail(Op op, core::Status error) {
    std::lock_guard lock(mu_);
    if (error.ok()) {
      errors_.erase(op);
    } else {
      errors_[op] = std::move(error);
    }
  }
  // How many calls of `op` failed so far.
  int failures(Op op) const {
    std::lock_guard lock(mu_);
    auto it = failed_.find(op);
    return it == failed_.end() ? 0 : it->second;
  }

  core::StatusOr<std::optional<std::string>> GetMeta(
      const std::string& key) override {
    return inner_->GetMeta(key);
  }
  core::Status SetMeta(const std::string& key,
                       const std::string& value) override {
    GANDIVA_RETURN_IF_ERROR(Check(Op::kSetMeta));
    return inner_->SetMeta(key, value);
  }
  Inserted InsertJobs(std::span<const std::string> specs_json,
                      int64_t submitted_us) override {
    if (core::Status s = Check(Op::kInsertJobs); !s.ok()) {
      return Inserted{0, 0, s};
    }
    return inner_->InsertJobs(specs_json, submitted_us);
  }
  core::StatusOr<std::pair<int64_t, int64_t>> MarkJobIdsLost(
      int64_t id) override {
    GANDIVA_RETURN_IF_ERROR(Check(Op::kMarkJobIdsLost));
    return inner_->MarkJobIdsLost(id);
  }
  core::Status AdoptJob(int64_t id, const std::string& spec_json,
                        int64_t submitted_us) override {
    GANDIVA_RETURN_IF_ERROR(Check(Op::kAdoptJob));
    return inner_->AdoptJob(id, spec_json, submitted_us);
  }
  core::StatusOr<std::vector<JobRow>> LoadJobs() override {
    return inner_->LoadJobs();
  }
  core::StatusOr<std::optional<JobRow>> LoadJob(int64_t id) override {
    return inner_->LoadJob(id);
  }
  core::Status ArchiveJobs(std::span<const JobRow> rows) override {
    GANDIVA_RETURN_IF_ERROR(Check(Op::kArchiveJobs));
    return inner_->ArchiveJobs(rows);
  }
  core::StatusOr<std::vector<JobRow>> LoadArchivedJobs(
      int64_t after_id, int limit,
      const std::optional<std::string>& name) override {
    return inner_->LoadArchivedJobs(after_id, limit, name);
  }
  core::StatusOr<int64_t> PruneArchive(int64_t ended_before_us,
                                       int64_t limit) override {
    GANDIVA_RETURN_IF_ERROR(Check(Op::kPruneArchive));
    return inner_->PruneArchive(ended_before_us, limit);
  }
  int64_t PruneChunk() const override { return inner_->PruneChunk(); }
  core::StatusOr<std::vector<ServerRow>> LoadServers() override {
    return inner_->LoadServers();
  }
  core::StatusOr<std::vector<HistoryRow>> History(int64_t job) override {
    return inner_->History(job);
  }
  core::Status Write(const WriteBatch& batch) override {
    GANDIVA_RETURN_IF_ERROR(Check(Op::kWrite));
    return inner_->Write(batch);
  }
  Appended AppendEvents(std::span<const EventRow> events) override {
    if (core::Status s = Check(Op::kAppendEvents); !s.ok()) {
      return Appended{0, 0, s};
    }
    return inner_->AppendEvents(events);
  }
  core::Status ForEachEvent(
      const std::function<core::Status(const EventRow&)>& f,
      int64_t after) override {
    return inner_->ForEachEvent(f, after);
  }
  core::StatusOr<std::optional<EventRow>> FirstEventOfKind(
      const std::string& kind, int64_t after) override {
    return inner_->FirstEventOfKind(kind, after);
  }
  core::StatusOr<int64_t> EventCount() override { return inner_->EventCount(); }
  int64_t LastEventSeq() override { return inner_->LastEventSeq(); }
  core::Status WriteSnapshot(const SnapshotRow& snap) override {
    GANDIVA_RETURN_IF_ERROR(Check(Op::kWriteSnapshot));
    return inner_->WriteSnapshot(snap);
  }
  core::StatusOr<int64_t> DeleteCompactedEvents(int64_t limit) override {
    GANDIVA_RETURN_IF_ERROR(Check(Op::kDeleteCompactedEvents));
    return inner_->DeleteCompactedEvents(limit);
  }
  core::StatusOr<std::optional<SnapshotRow>> LoadSnapshot() override {
    return inner_->LoadSnapshot();
  }

 private:
  core::Status Check(Op op) {
    std::lock_guard lock(mu_);
    auto it = errors_.find(op);
    if (it == errors_.end()) return core::Status::Ok();
    ++failed_[op];
    return it->second;
  }

  const std::unique_ptr<Store> inner_;
  mutable std::mutex mu_;
  std::map<Op, core::Status> errors_;  // guarded by mu_
  std::map<Op, int> failed_;           // guarded by mu_
};

}  // namespace gandiva::runtime
