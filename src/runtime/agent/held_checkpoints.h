// HeldCheckpointTable: the complete checkpoints a supervisor holds, by job,
// and the layout of its checkpoint root. For job J:
//   ROOT/jobs/J/checkpoint       what the job saves (GANDIVA_CHECKPOINT_DIR)
//   ROOT/jobs/J/incoming         a warm start's GANDIVA_RESUME_FROM
//   ROOT/jobs/J/held-checkpoint  while a checkpoint is held: its directory,
//                                on a second line the cluster it was saved
//                                in, on a third when its job was submitted
//   ROOT/jobs/J/held-spec        the held checkpoint's job spec (none when
//                                unknown)
// The records on disk let the next agent on the same root hold the
// checkpoints again (ReadRecord, Adopt). A checkpoint held is recorded with
// the cluster set last (SetCluster).
//
// Thread-safety: thread-safe. It has a mutex of its own and calls nothing
// outside while holding it, so it may be called with any other lock held
// (the supervisor calls it under its own where the job table is involved).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace gandiva::runtime {

class HeldCheckpointTable {
 public:
  // A checkpoint held for a job: where it is, the cluster it was saved in
  // ("" when the record predates clusters), when the job that saved it was
  // submitted (0 when unknown) and that job's spec ("" unknown).
  struct Held {
    std::string dir;
    std::string cluster;
    int64_t submitted_us = 0;
    std::string spec;
  };

  explicit HeldCheckpointTable(std::string root);
  HeldCheckpointTable(const HeldCheckpointTable&) = delete;
  HeldCheckpointTable& operator=(const HeldCheckpointTable&) = delete;

  const std::string& root() const { return root_; }
  std::string CheckpointDir(int64_t job_id) const;
  std::string IncomingDir(int64_t job_id) const;

  // The checkpoint held for the job; nullopt when none.
  std::optional<Held> Get(int64_t job_id) const;
  bool Contains(int64_t job_id) const;
  // The jobs whose checkpoint is held, by id.
  std::vector<int64_t> Ids() const;

  // Holds `dir` for the job, saved in cluster() by the job submitted at
  // `submitted_us` with `spec`, replacing what was held; writes its records
  // (best effort).
  void Hold(int64_t job_id, const std::string& dir, int64_t submitted_us,
            const std::string& spec);
  // Hold, keeping what the checkpoint held before says: its submitted_us
  // when `submitted_us` is 0, and its spec, else `spec`.
  void HoldAgain(int64_t job_id, const std::string& dir, int64_t submitted_us,
                 const std::string& spec);
  // A warm start of the job: a checkpoint held in IncomingDir (received
  // earlier) moves to CheckpointDir (replacing what is there), and is held
  // there from now on (in memory; its record on disk is not rewritten).
  void MoveIncomingAside(int64_t job_id);
  // Forgets the checkpoint held and removes its records. True if one was
  // held. Its files stay (RemoveFiles).
  bool Forget(int64_t job_id);
  // Deletes the job's checkpoint and incoming directories, and ROOT/jobs/J
  // when that leaves it empty (it also holds the job's log when the root
  // is the work dir). Touches no record.
  void RemoveFiles(int64_t job_id) const;

  // The jobs ROOT/jobs has a directory of (name "<id>", id > 0).
  std::vector<int64_t> JobsOnDisk() const;
  // What the job's records on disk say; nullopt when it has no
  // held-checkpoint record. Touches nothing held.
  std::optional<Held> ReadRecord(int64_t job_id) const;
  // Removes the job's records on disk (a checkpoint whose files are gone).
  void RemoveRecords(int64_t job_id) const;
  // Holds `held` (as read by ReadRecord) unless a checkpoint is held for
  // the job already; writes no record.
  void Adopt(int64_t job_id, Held held);

  // The cluster recorded with every checkpoint held from now on. Returns
  // the jobs whose held checkpoint was saved in another (known) cluster;
  // they are not dropped here.
  std::vector<int64_t> SetCluster(const std::string& cluster);
  std::string cluster() const;

 private:
  std::string JobRoot(int64_t job_id) const;
  std::string RecordPath(int64_t job_id) const;
  std::string SpecPath(int64_t job_id) const;
  // Requires mu_.
  void HoldLocked(int64_t job_id, const std::string& dir, int64_t submitted_us,
                  const std::string& spec);

  const std::string root_;
  mutable std::mutex mu_;
  std::map<int64_t, Held> held_;  // guarded by mu_
  std::string cluster_;           // guarded by mu_
};

}  // namespace gandiva::runtime
