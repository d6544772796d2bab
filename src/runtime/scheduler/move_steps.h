// MoveSteps: the move of a job's process, or of the checkpoint an agent
// keeps for it, to other GPUs (a migration, a resize, a resume or pack
// elsewhere, a start from a kept checkpoint), as a step machine: each step
// is one call to an agent, and the next is decided from the last one's
// result alone. Pure: no I/O, no threads, no clock (each result brings the
// time it came). The daemon's dispatcher thread drives it
// (SchedulerServer::Impl::Move): it makes each call, feeds back the result,
// and reports how the move ended (FinishMove).
//
// The steps, for a job running on one server moving to another:
//   1. warm start at the destination (a job with the job-side library):
//      its new process builds its model while the source trains on;
//   2. checkpoint at the source, at a mini-batch boundary (the reply comes
//      once it is saved);
//   3. the destination receives the checkpoint from the source's agent;
//   4. start from it at the destination (not after a warm start: the
//      waiting process loads it itself);
//   5. kill at the source (which drops its copy of the checkpoint).
// On its own server (a resize): checkpoint, then start from it there, and
// for a job with the library wait for its first mini-batch past it. Of a
// kept checkpoint without a process: steps 3 to 5. Without either (its
// process lost): a fresh start at the destination.
//
// A failure undoes what it must (a new process goes; the checkpoint stays
// where it is) and the move ends saying where it left the job (MovedTo).
// A job that cannot be checkpointed fails a migration for good; a resume
// or pack elsewhere starts it afresh instead.
//
// Thread-compatible: one thread drives one machine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "proto/gandiva.pb.h"
#include "runtime/scheduler/daemon_types.h"

namespace gandiva::runtime {

// What the move is, as the loop planned it.
struct MovePlan {
  int32_t job = 0;
  int64_t submitted_us = 0;  // the job's, sent with each start and receive
  rpc::JobSpec spec;
  Proc from;  // where its process, or kept checkpoint, is (neither: lost)
  Proc to;    // where the core wants it
  bool resize = false;          // a Grow or Shrink: restarts at `to`'s size
  bool fresh_fallback = false;  // a Resume or Pack: started afresh if it
                                // cannot be checkpointed
  bool warm = false;            // warm start at the destination first
  int64_t kept_at = -1;         // a kept checkpoint's mini-batch (-1: unknown)
  std::string source_address;   // the source agent's (for the receive)
  std::string fetch_ticket;     // the receive's (Impl::FetchTicket)
  std::string where;            // "from a to gpus [0] on b", for the history
  int64_t warm_ready_timeout_us = 60'000'000;
  int64_t rpc_timeout_us = 120'000'000;  // --agent-rpc-timeout-s
  // Each call of the move has its own action id (agents answer a repeated
  // id with the first call's result); the checkpoint's is the action's.
  struct Ids {
    int64_t action = 0, warm = 0, start = 0, receive = 0, back = 0,
            kill_source = 0, kill_destination = 0;
  } ids;
};

// One call to an agent.
struct MoveCall {
  enum class Kind {
    kStart,       // StartJob (`start`)
    kCheckpoint,  // CheckpointJob (`checkpoint`)
    kReceive,     // ReceiveCheckpoint (`receive`)
    kKill,        // KillJob (`kill`); with `ignore_exit`, the daemon is
                  // told first to ignore the process's exit
    kAwaitFirstMinibatch,  // poll the agent until the job trains past
                           // `saved` (a minute at most)
  };
  Kind kind = Kind::kStart;
  // The agent called: the source's (`from`) or the destination's (`to`).
  bool at_source = false;
  rpc::StartJobRequest start;
  rpc::CheckpointRequest checkpoint;
  rpc::ReceiveCheckpointRequest receive;
  rpc::JobRequest kill;
  bool ignore_exit = false;
  int64_t saved = -1;    // kAwaitFirstMinibatch
  int64_t since_us = 0;  // kAwaitFirstMinibatch: its result counts from it
  // The call's deadline; 0: the daemon's --agent-rpc-timeout-s.
  int64_t timeout_us = 0;
};

// A call's outcome, with the time (the daemon env's SteadyMicros) at which
// it came.
struct MoveResult {
  grpc::Status status;
  int64_t now_us = 0;
  rpc::StartJobReply start;
  rpc::CheckpointReply checkpoint;
  rpc::ReceiveCheckpointReply receive;
  // kAwaitFirstMinibatch: the time from `since_us` to the first mini-batch
  // past `saved`; -1 when there was none within a minute.
  int64_t first_us = -1;
};

// How the move ended: its history line and where it left the job.
struct MoveDone {
  bool ok = false;
  bool permanent = false;  // it cannot be done (not checkpointable)
  int64_t took_us = 0;
  std::string detail;
  MovedTo moved = MovedTo::kAsBefore;
  // Done by starting the job from the beginning (nothing to carry over).
  bool afresh = false;
};

class MoveSteps {
 public:
  using Step = std::variant<MoveCall, MoveDone>;

  MoveSteps(MovePlan plan, int64_t now_us);
  // The first step.
  Step Start();
  // The step after the last call's `result`.
  Step Next(const MoveResult& result);

 private:
  enum class At {
    kFreshStart,  // a start with nothing to carry over
    kWarmStart,
    kCheckpoint,
    kRestartHere,  // on the same server, from the checkpoint
    kRestartBack,  // a resize that could not restart: back as it was
    kAwaitHere,    // its first mini-batch on the same server
    kReceive,
    kStartReceived,
    kKillSource,
    kAwaitThere,    // its first mini-batch after a kept checkpoint
    kUndo,          // a kill that undoes a step, then `then_`
    kFallbackKill,  // the source's process goes before a fresh start
  };

  bool HasSource() const { return plan_.from.exists || plan_.from.checkpoint; }
  bool SameServer() const {
    return HasSource() && plan_.from.server == plan_.to.server;
  }
  MoveCall StartAt(bool at_source, bool warm, bool resume_local,
                   int64_t id) const;
  MoveCall Kill(bool at_source, int64_t id) const;
  MoveCall Await(int64_t saved, int64_t since_us) const;
  Step Done(bool ok, bool permanent, std::string detail, MovedTo moved,
            int64_t now_us) const;
  // Kills `at_source`'s new process, then ends as `then`.
  Step Undo(bool at_source, MoveDone then);
  // The job cannot be carried over (`why`): whatever is left of it goes,
  // and it starts from the beginning at the destination (a resume's or a
  // pack's fallback).
  Step StartAfresh(std::string why);
  Step CheckpointOrOn(int64_t now_us);
  Step AfterCheckpoint(int64_t now_us);
  Step Finish(int64_t now_us);
  std::string RestartPhase(int64_t us) const;

  const MovePlan plan_;
  const int64_t t0_;
  At at_ = At::kFreshStart;
  int64_t t_checkpoint_ = 0;  // from the checkpoint on, the job trains
                              // nowhere
  int64_t t_start_ = 0;
  int64_t restart_us_ = 0;
  rpc::StartJobReply warm_reply_;
  rpc::ReceiveCheckpointReply received_;
  std::string phases_;        // warm start and checkpoint, for the history
  std::string method_;        // how the source checkpointed the job
  int64_t saved_ = -1;        // a library checkpoint's mini-batch
  std::string detail_;        // after the same server's restart
  std::string error_;         // a failed fresh start's or restart's
  MoveDone then_;             // kUndo: how it ends after the kill
  std::string fallback_why_;  // why it starts afresh
  bool fallback_killed_source_ = false;
};

}  // namespace gandiva::runtime
