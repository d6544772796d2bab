// GangMoveSteps: the move of a job whose GPUs span servers (a gang), or of
// a job that becomes one or stops being one, as a step machine, like
// MoveSteps (move_steps.h): each step is one piece of work at the agents
// (some reach every part), the next decided from the last one's result
// alone. Pure: no I/O, no threads, no clock. The daemon's dispatcher thread
// drives it (SchedulerServer::Impl::MoveGang) and reports how it ended.
//
// A gang moves by restarting every part from the one checkpoint rank 0
// saves at the lead's agent:
//   1. a suspended gang's other parts are continued (rank 0's checkpoint
//      needs all its ranks);
//   2. checkpoint at the source's lead;
//   3. the source's other parts, which left with the lead, are stopped if
//      they linger;
//   4. each new part's agent receives the checkpoint from the lead's;
//   5. every part starts from it, the lead first;
//   6. for a checkpoint of known mini-batch, wait for the first one past it;
//   7. the source lead's copy goes, unless a new part is on its server.
// Only a job with the job-side library can do this: another fails a
// migration for good, and a resume or pack elsewhere starts it afresh. A
// failure after the checkpoint leaves it at the source's lead.
//
// Thread-compatible: one thread drives one machine.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "proto/gandiva.pb.h"
#include "runtime/scheduler/daemon_types.h"
#include "runtime/scheduler/move_steps.h"

namespace gandiva::runtime {

struct GangMovePlan {
  int32_t job = 0;
  int64_t action = 0;  // the checkpoint's action id
  // The parts the job's process (or kept checkpoint) is on, rank order;
  // empty: it has none (lost). The lead's holds the checkpoint.
  std::vector<ServerId> from;
  bool from_exists = false;  // a process (else a kept checkpoint)
  std::vector<ServerId> to;  // where the core wants its parts, rank order
  int32_t world = 0;         // its GPUs at `to`
  bool resize = false;
  bool was_suspended = false;  // a resume or pack: its other parts were
                               // stopped; it starts afresh if it cannot
                               // be checkpointed
  bool library = false;        // its reports show the job-side library
  int64_t kept_at = -1;        // a kept checkpoint's mini-batch
  std::string where;           // for the history
  std::string source_name;     // the source lead's agent, for the history
};

struct GangCall {
  enum class Kind {
    kFollowers,   // continue (`resume`) or stop again the source's parts
                  // but the lead
    kCheckpoint,  // CheckpointJob at the source's lead (`checkpoint`)
    kKillPart,    // stop part `part` of the source (`of_source`) or of the
                  // destination, keeping its checkpoint or not
    kDistribute,  // each destination part not on the lead's server
                  // receives the checkpoint
    kStartParts,  // start every destination part (`resume_local`: from the
                  // checkpoint each agent holds)
    kAwaitFirstMinibatch,  // at the destination's lead, past `saved`
  };
  Kind kind = Kind::kStartParts;
  bool resume = false;
  rpc::CheckpointRequest checkpoint;
  int64_t timeout_us = 0;  // kCheckpoint
  bool of_source = false;
  size_t part = 0;
  bool keep_checkpoint = false;
  bool resume_local = false;
  int64_t saved = -1;
  int64_t since_us = 0;
};

// A piece of work's outcome at `now_us`. kDistribute: the slowest
// transfer in `summary`; kStartParts, kDistribute: the first part's error
// in `error`.
struct GangResult {
  grpc::Status status;  // kCheckpoint
  bool ok = true;       // kDistribute, kStartParts
  std::string error;
  // kDistribute failed because the source holds no checkpoint of the job.
  bool checkpoint_gone = false;
  std::string summary;
  rpc::CheckpointReply checkpoint;
  int64_t first_us = -1;  // kAwaitFirstMinibatch
  int64_t now_us = 0;
};

class GangMoveSteps {
 public:
  using Step = std::variant<GangCall, MoveDone>;

  GangMoveSteps(GangMovePlan plan, int64_t now_us);
  Step Start();
  Step Next(const GangResult& result);

 private:
  enum class At {
    kFreshKills,  // the source's parts go, one by one, then a fresh start
    kFreshStart,
    kContinue,  // the followers continued, then the checkpoint
    kCheckpoint,
    kStopAgain,  // a failed checkpoint: the followers stop again
    kLeftovers,  // the source's other parts, one by one
    kDistribute,
    kDropCopies,  // a failed step's copies at the destination go
    kStartParts,
    kAwait,
    kDropSource,
  };
  GangCall KillPart(bool of_source, size_t part, bool keep) const;
  Step Done(bool ok, bool permanent, std::string detail, MovedTo moved,
            int64_t now_us) const;
  Step Fresh(std::string why);
  Step NextFreshKill();
  Step Checkpoint();
  Step NextLeftover(int64_t now_us);
  Step NextDropCopy(int64_t now_us);
  Step AfterStart(int64_t now_us);
  Step Finish(int64_t now_us);

  const GangMovePlan plan_;
  const int64_t t0_;
  At at_ = At::kFreshStart;
  size_t next_part_ = 0;
  std::string why_;  // a fresh start's reason
  int64_t t_checkpoint_ = 0;
  int64_t t_start_ = 0;
  int64_t restart_us_ = 0;
  int64_t first_us_ = -1;
  int64_t saved_ = -1;
  std::string phases_;
  std::string transfer_;
  MoveDone failed_;  // how it ends once the step undoing it is done
};

}  // namespace gandiva::runtime
