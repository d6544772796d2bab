// Why queued jobs wait: what a policy says of its queue (Policy::
// ExplainQueue), taken once from the state and read afterwards by any
// thread, and the rules most policies share.
//
// A world that shows a queued job's reason (the daemon, with each job's
// published info) takes one QueueReasons per publication
// (Scheduler::ExplainQueue) and composes a job's reason from it when a
// reader asks. The reason is not kept in each job's record: killing the
// job at the head of a queue of 10,000 changes one shared summary, not
// the records of the 9,999 others.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/ids.h"
#include "core/state.h"
#include "core/time.h"

namespace gandiva::core {

// The open servers' GPUs (up and not cordoned: where new jobs go), which a
// queued job's reason is judged against.
struct OpenGpus {
  int total = 0;             // on the open servers
  int free = 0;              // of those, with no job placed on them
  int most_free_on_one = 0;  // the most one open server has free
  int largest_server = 0;    // the most one open server has
  static OpenGpus Of(const Cluster& cluster);
};

// How the default rules word a reason, for a policy that shares them.
struct WaitRules {
  // A job that fits on one server waits for one with room for it (rather
  // than being spread across servers). Default true.
  bool keeps_to_one_server = true;
  // Where the jobs ahead of it wait: "in the queue" by default; a policy
  // with several queues names the job's.
  std::string queue = "in the queue";
};

// The default rules: why a queued job asking for `need` GPUs, with `ahead`
// jobs ahead of it (-1: not in the queue), does not run, judged against
// `gpus`; the first that holds:
//  1. it needs more than the open servers have in all: it waits for
//     servers to join (or cordoned ones to open); a job is not refused for
//     that, as servers may join later;
//  2. more than are free;
//  3. with keeps_to_one_server, more than any one server has free, for a
//     job that fits on one;
//  4. the jobs ahead of it (a FIFO queue starts none before its head);
//  5. none ahead: "placed at the next scheduling pass".
// Rules 2 and 3 say how many jobs are ahead of it, if any.
std::string DefaultWaitReason(int need, int ahead, const OpenGpus& gpus,
                              const WaitRules& rules = {});

// "; 3 jobs are ahead of it in the queue" ("" for none): the tail of a
// reason.
std::string AheadText(int ahead, const std::string& queue = "in the queue");

// "300 s": a wait, in whole seconds, for a reason's text.
std::string SecondsText(Duration d);

// A held job's reason.
inline constexpr const char kHeldReason[] =
    "held by an operator (gandiva resume releases it)";

// The names of the servers job `j`'s failed starts in a row were on
// (Job::start_failed_on), ", " between them; "" if none.
std::string StartFailedOn(const Job& j, const Cluster& cluster);

// Why a queued job does not run when that is its own state rather than
// its policy's choice: held by an operator, or waiting out failed starts
// before it is tried again (on another server if one has room); for a
// suspended job, waiting out failed resumes; "" for any other job, whose
// reason is its policy's (QueueReasons::Why).
std::string OwnWaitReason(const Job& j, const Cluster& cluster, Time now);

// Why the jobs of the queue do not run. Immutable once made: any thread may
// call Why at any time, while the scheduler goes on.
class QueueReasons {
 public:
  virtual ~QueueReasons() = default;
  // Why job `job`, which asks for `gpus` GPUs, does not run yet, when it is
  // queued, neither held nor waiting to try its start again (those reasons
  // are the job's own). A job that was not in the queue when this was
  // taken gets the default rules' reason for its size.
  virtual std::string Why(JobId job, int gpus) const = 0;
};

// Something of each job in the queue (ClusterState::queue), by job id:
// built once per queue (ClusterState::queue_version) and shared by the
// summaries taken while the queue stays the same. Immutable.
template <typename Row>
class QueuedJobTable {
 public:
  // A row for each job in `state`'s queue, row(job) for each in queue
  // order; or `previous` when it was built from the same queue.
  template <typename MakeRow>
  static std::shared_ptr<const QueuedJobTable> Of(
      const ClusterState& state, std::shared_ptr<const QueuedJobTable> previous,
      MakeRow&& row) {
    if (previous != nullptr && previous->version_ == state.queue_version()) {
      return previous;
    }
    auto t = std::make_shared<QueuedJobTable>();
    t->version_ = state.queue_version();
    const auto& queue = state.queue();
    if (queue.empty()) return t;
    int32_t lo = queue.begin()->id.value, hi = lo;
    for (const JobOrder& o : queue) {
      lo = std::min(lo, o.id.value);
      hi = std::max(hi, o.id.value);
    }
    t->first_ = lo;
    t->index_.assign(static_cast<size_t>(hi - lo) + 1, -1);
    t->rows_.reserve(queue.size());
    for (const JobOrder& o : queue) {
      t->index_[static_cast<size_t>(o.id.value - lo)] =
          static_cast<int32_t>(t->rows_.size());
      t->rows_.push_back(row(state.job(o.id)));
    }
    return t;
  }
  // The job's row; null for a job that was not in the queue.
  const Row* Find(JobId job) const {
    const int64_t k = static_cast<int64_t>(job.value) - first_;
    if (k < 0 || static_cast<uint64_t>(k) >= index_.size()) return nullptr;
    const int32_t i = index_[static_cast<size_t>(k)];
    return i < 0 ? nullptr : &rows_[static_cast<size_t>(i)];
  }
  uint64_t queue_version() const { return version_; }

 private:
  uint64_t version_ = 0;
  int32_t first_ = 0;           // the lowest job id in the queue
  std::vector<int32_t> index_;  // by job id - first_: its row, -1 none
  std::vector<Row> rows_;       // in queue order
};

// The default rules (DefaultWaitReason), with each job's count of jobs
// ahead of it in the queue: what Policy::ExplainQueue gives unless a
// policy says otherwise.
class DefaultQueueReasons final : public QueueReasons {
 public:
  // Shares the queue's order with `previous` (a DefaultQueueReasons taken
  // from the same queue), if any.
  static std::shared_ptr<const DefaultQueueReasons> Make(
      const ClusterState& state, const QueueReasons* previous,
      WaitRules rules = {});
  std::string Why(JobId job, int gpus) const override;

 private:
  std::shared_ptr<const QueuedJobTable<int32_t>> ahead_;
  OpenGpus gpus_;
  WaitRules rules_;
};

}  // namespace gandiva::core
