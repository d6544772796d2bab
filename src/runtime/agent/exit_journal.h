// ExitJournal: the supervisor's record of its jobs' exits, kept until the
// agent acknowledges them (once a report carrying them reached the daemon),
// in the order the exits happened, each numbered (ExitRecord::seq,
// increasing per journal). What is left unacknowledged when the agent stops
// can be written to a file (SaveUnreported) for the next agent on the same
// work dir to take up (RecoverUnreported). With a records directory, each
// exit is also written there as it is kept, one file each, until it is
// acknowledged (or superseded, or its checkpoint kept at the agent's stop):
// an agent killed before it reported an exit leaves it there for the next,
// which takes it up too (RecoverUnreported).
//
// Thread-safety: thread-safe. It has a mutex of its own and calls nothing
// outside while holding it, so it may be called with any other lock held
// (the supervisor calls it under its own).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "client/page_io.h"

namespace gandiva::runtime {

struct ExitRecord {
  uint64_t seq = 0;  // increasing per supervisor; AckExits takes it
  int64_t job_id = 0;
  int exit_code = 0;  // -N: killed by signal N
  int64_t minibatches = 0;
  // The job was started here again after this process ended (a move or
  // resize within this server, a restart): this exit is not the job's end.
  bool superseded = false;
  // It ended because Kill() was called while it ran (the daemon's KillJob),
  // not by itself nor when the agent stopped (KillAll).
  bool killed = false;
  // It ended because the agent stopped (CheckpointForStop), having saved its
  // checkpoint, which is held here (HeldCheckpoint): not the job's end; it
  // goes on from there when an agent on this checkpoint root runs it again.
  bool checkpoint_kept = false;
  std::string checkpoint_method;  // with checkpoint_kept: CheckpointResult's
  // Where the journal keeps it until acknowledged ("" when it does not).
  std::string file;
  // It was killed by KillAll(agent_stopping) (it had not saved a
  // checkpoint), and did not exit with 0 meanwhile: not the job's end.
  bool agent_stopping = false;
  client::Metric metric;  // the job's last reported one (its final one)
};

class ExitJournal {
 public:
  // `unreported_path`: the file of SaveUnreported and RecoverUnreported
  // (the supervisor's WORK_DIR/unreported-exits). One exit per line: job
  // exit_code minibatches metric_value metric_minibatches metric_reports,
  // then "periodic" for a failure whose periodic checkpoint is kept.
  // `records_dir` (the supervisor's WORK_DIR/exits; empty: none): where
  // each kept exit is written until it is acknowledged.
  explicit ExitJournal(std::string unreported_path,
                       std::string records_dir = "");
  ExitJournal(const ExitJournal&) = delete;
  ExitJournal& operator=(const ExitJournal&) = delete;

  // Keeps `exit`, numbered with the next seq (its own seq is ignored);
  // returns it as kept.
  ExitRecord Add(ExitRecord exit);
  // The records not acknowledged yet, oldest first.
  std::vector<ExitRecord> Pending() const;
  // Drops the records with seq <= `up_to_seq`.
  void Ack(uint64_t up_to_seq);
  // Marks every kept record of `job_id` superseded (a new process of the
  // job starts).
  void Supersede(int64_t job_id);
  // Marks the latest kept record of `job_id` checkpoint_kept, saved by
  // `method`; nothing when none is kept.
  void MarkCheckpointKept(int64_t job_id, const std::string& method);
  // Writes the kept records that are a job's end or may be (not
  // superseded, killed, agent_stopping or checkpoint_kept other than
  // "periodic") to the file, whole or not at all.
  // Returns how many; 0 also when writing failed. No file when none.
  size_t SaveUnreported() const;
  // Keeps what SaveUnreported wrote (numbered anew, in order) and removes
  // the file; then the exits an earlier journal left in the records
  // directory that SaveUnreported would have written (in the order they
  // were kept), their files kept until acknowledged. Returns how many; an
  // unreadable line or file is skipped.
  size_t RecoverUnreported();

 private:
  // The record's file in records_dir_ ("" without one), written whole.
  std::string WriteRecord(const ExitRecord& e);
  void RemoveRecord(ExitRecord& e);

  const std::string unreported_path_;
  const std::string records_dir_;
  mutable std::mutex mu_;
  std::vector<ExitRecord> exits_;  // guarded by mu_
  uint64_t next_seq_ = 1;          // guarded by mu_
};

}  // namespace gandiva::runtime
