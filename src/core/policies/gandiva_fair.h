// GandivaFairPolicy ("gandiva-fair"): the cluster shared fairly among
// queues (teams), each getting its quota and lending what it leaves idle,
// with reclaim that loses nothing: a borrower is suspended at a mini-batch
// boundary, never killed, and goes on from where it stopped.
//
// Queues: `queues`, a tree (QueueQuotas). A job's queue is the leaf its
// virtual cluster (JobSpec::vc) names; one of a VC that names no leaf is
// in the queue "" (quota 0 unless named there).
//
// Shares over time. A leaf's fair share at each instant is
// QueueQuotas::Shares of the GPUs up, for the GPUs its live jobs ask for
// (held ones aside): down the tree, each queue up to its quota first, then
// idle GPUs lent by weight, max-min, none past its limit. The policy
// keeps each queue's credit: its fair share minus the GPUs its running
// jobs hold, integrated over time (GPU-seconds) and halved every
// `half_life`. Borrowing GPUs no one else asks for costs nothing (the
// fair share is then all of them); a queue that got less than its share
// is owed, one that got more owes.
//
// The desired set, taken at each decision: the GPUs of the servers up are
// dealt to the queues' jobs, gang-wise (a job gets all its GPUs or none),
// turn by turn: of the queues whose next job fits in what is left (and in
// the limits of its queue and the queues above it), the
// one with the largest claim takes it, where a queue's claim is its fair
// share now + its credit / quantum - the GPUs dealt to it so far (what it
// is owed is made up within a quantum); ties to the queue first by name.
// So a queue owed its quota takes it back at the next Tick, and a queue
// whose jobs are bigger than its share runs them in turn, a quantum at a
// time, as often as its share pays for (stride scheduling, gang-aware).
// A queue's order: higher JobSpec::priority first; then running jobs that
// have run less than a quantum since they last started or resumed (their
// slice is not over); then the jobs taking turns by when they began to
// wait, a running job whose slice is over as if it began now (round
// robin: each job taking turns gets a quantum in turn); then the jobs
// waiting to take turns, in arrival order; ties by id. Within each of
// these (and a priority), the queue's users take turns by claim, as the
// queues do: each user (a job's owner) is owed their part of the queue's
// share (split among its users asking, max-min) with a credit kept like a
// queue's, and the user with the largest claim (their part + credit /
// quantum - the GPUs dealt to them, jobs already starting first) takes
// their next job, in that order; ties to the job first in the order. So
// users of equal standing take turns job by job, and one owed GPU time in
// the queue goes first. Jobs
// that ran before take turns, and a job not run yet joins them while they are
// fewer than `rotation_per_gpu` per GPU of the queue's fair share (as
// gandiva caps the jobs time-sharing a GPU): so each job gets feedback
// early and short jobs end early, and none starves (a job's turn comes
// once those before it ended). A job waiting out a failed start, or held, is
// not dealt GPUs.
//
// Carrying it out. At each Tick (every quantum at most), running jobs
// outside the desired set are suspended: their slice is over, or their
// queue is lent GPUs another queue is now owed (reclaim, so within one
// quantum of a queue's job coming within its quota); a job in its first
// half quantum is kept unless its queue is over its quota or a job of its
// queue of higher priority was dealt its place. A suspended
// job gives its GPUs back (Actions::Requeue) unless it is chosen again
// and its GPUs are idle, when it runs there again. At every decision, the
// chosen queued jobs start where GPUs are free, in the order dealt: the
// server whose free GPUs fit the job most tightly, else across servers on
// as few as possible. A job requeued and placed elsewhere resumes from
// its saved state there (Action::relocates).
//
// Cost: a decision at which GPUs are free, or at a Tick, sorts the live
// jobs (O(n log n)); every other event (but a profile report) costs
// O(log n) per job it changed and O(queues^2) to bring the credits up to
// date.
//
// Deterministic; not thread-safe (see Policy).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/policies/queues.h"
#include "core/policy.h"

namespace gandiva::core {

struct GandivaFairOptions {
  // The queues (QueueQuotas). Default empty: every job in one queue, the
  // GPUs dealt round robin.
  std::vector<QueueConfig> queues;
  // Time-slice length. Default 60 s.
  Duration quantum = Duration::Seconds(60);
  // How fast a queue's credit (owed or owing) fades. Default 1 hour.
  Duration half_life = Duration::Seconds(3600);
  // The most jobs of a queue taking turns, per GPU of its fair share (at
  // least one GPU); 0: no cap. Default 4.
  int rotation_per_gpu = 4;
};

class GandivaFairPolicy final : public Policy {
 public:
  explicit GandivaFairPolicy(GandivaFairOptions options = {});
  std::string_view name() const override { return "gandiva-fair"; }
  void decide(const ClusterState& state, const Event& event,
              Actions& out) override;
  void SaveState(SnapshotWriter& w) const override;
  void LoadState(SnapshotReader& r) override;
  void Forget(const ClusterState& state, std::span<const JobId> jobs) override;
  std::shared_ptr<const QueueReasons> ExplainQueue(
      const ClusterState& state, const QueueReasons* previous) const override;

 private:
  struct Deal {
    std::set<JobId> chosen;
    std::vector<JobId> order;  // the chosen, in the order dealt
    std::vector<int> taken;    // GPUs taken, by queue
  };
  // A user's within their queue, like a queue's: their part of its share
  // (split among its users asking, max-min), the GPUs their jobs hold, and
  // the difference integrated and fading alike.
  struct UserCredit {
    double credit = 0;  // GPU-seconds
    double share = 0;   // GPUs at `at`
    double holds = 0;   // GPUs running at `at`
  };
  // (queue, owner).
  using UserKey = std::pair<size_t, std::string>;
  // Each queue's credit, shares and holdings, as of `now`.
  struct Credits {
    Time at = Time::Never();
    std::vector<double> credit;  // GPU-seconds, by queue
    std::vector<double> share;   // fair share at `at`, GPUs
    std::vector<double> holds;   // GPUs running at `at`
    // Users with a job live, or owed or owing still.
    std::map<UserKey, UserCredit> users;
  };
  // The queues from now on (QueuesChanged): each queue's credit carries
  // over to the queue of its name, if any; a new queue starts at 0.
  void TakeQueues(const std::vector<QueueConfig>& queues);
  // `c.credit` brought up to `now` under c's shares and holdings.
  void Integrate(Credits& c, Time now) const;
  // Job `id`'s part of its queue's demand and holdings made current.
  void Retally(const ClusterState& state, JobId id);
  // credits_'s shares and holdings from the tallies, as of now.
  void Refresh(const ClusterState& state);
  void Act(const ClusterState& state, const Event& event, Actions& out);
  Deal DealGpus(const ClusterState& state, const std::set<JobId>& live,
                const Credits& credits) const;

  GandivaFairOptions options_;
  QueueQuotas queues_;
  LiveJobs live_;
  Credits credits_;
  // Each live job's part of its queue's demand (GPUs asked, held jobs
  // aside) and holdings (GPUs running), and their sums by queue.
  struct Part {
    size_t queue = 0;
    std::string owner;
    int demand = 0;
    int holds = 0;
  };
  // A job's part taken out of the tallies.
  void Untally(const Part& part);
  std::map<JobId, Part> parts_;
  std::vector<int> demand_, holds_;
  // The same by user within their queue: (demand, holds); users with none
  // are left out.
  std::map<UserKey, std::pair<int, int>> users_;
  // The tallies are taken afresh at the next decision (at first, and
  // after LoadState).
  bool tally_stale_ = true;
};

}  // namespace gandiva::core
