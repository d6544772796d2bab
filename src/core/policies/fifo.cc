#include "core/policies/fifo.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>

#include "core/policies/placement.h"

namespace gandiva::core {

namespace {

// Free GPUs for `need`: best fit on one server, else across servers when
// allowed (always for jobs larger than any server).
std::optional<std::vector<GpuId>> FindGpus(const Cluster& cluster, int need,
                                           bool relax_locality) {
  return BestFitGpus(cluster, need,
                     relax_locality || need > cluster.max_server_gpus());
}

// Why the jobs of VC queues wait (FifoPolicy with vc_quotas).
class VcQueueReasons final : public QueueReasons {
 public:
  // A queued job: its VC's queue, and the jobs of that queue ahead of it.
  struct Row {
    int32_t queue = 0;
    int32_t ahead = 0;
  };
  struct Vc {
    std::string name;  // empty for the shared queue of the other VCs
    int quota = 0;
    int used = 0;  // GPUs its jobs hold (borrowed ones included)
  };
  std::shared_ptr<const QueuedJobTable<Row>> rows;
  std::vector<Vc> vcs;  // by queue
  OpenGpus gpus;
  bool relax_locality = true;
  bool allow_borrowing = false;

  std::string Why(JobId job, int need) const override {
    const Row* row = rows->Find(job);
    if (row == nullptr) {
      return DefaultWaitReason(need, -1, gpus, WaitRules{!relax_locality});
    }
    const Vc& vc = vcs[static_cast<size_t>(row->queue)];
    const std::string who =
        vc.name.empty() ? "the shared queue (jobs of no virtual cluster named "
                          "in the quotas)"
                        : "virtual cluster '" + vc.name + "'";
    WaitRules rules{!relax_locality, vc.name.empty()
                                         ? "in the shared queue"
                                         : "in the queue of " + who};
    if (vc.used + need <= vc.quota) {
      return DefaultWaitReason(need, row->ahead, gpus, rules);
    }
    std::string why;
    if (need > vc.quota) {
      why = "it needs " + std::to_string(need) +
            " GPUs, more than the quota of " + who + " (" +
            std::to_string(vc.quota) + ")" +
            (allow_borrowing ? ": it runs only on borrowed GPUs, idle while "
                               "no virtual cluster's job within its quota "
                               "waits"
                             : ", and borrowing is off: it cannot start");
    } else {
      why = who + " holds " + std::to_string(vc.used) + " of its quota of " +
            std::to_string(vc.quota) + " GPUs and it needs " +
            std::to_string(need) + ": it waits for jobs of its queue to end" +
            (allow_borrowing ? ", or to borrow idle GPUs (while no virtual "
                               "cluster's job within its quota waits)"
                             : "");
    }
    return why + AheadText(row->ahead, rules.queue);
  }
};

}  // namespace

std::map<std::string, int> ProportionalVcQuotas(
    const std::vector<std::pair<std::string, double>>& demand,
    int cluster_gpus) {
  std::map<std::string, double> by_vc;
  for (const auto& [vc, amount] : demand) {
    by_vc[vc] += std::isfinite(amount) && amount > 0 ? amount : 0.0;
  }
  std::map<std::string, int> quotas;
  if (by_vc.empty()) return quotas;
  const int vcs = static_cast<int>(by_vc.size());
  int left = std::max(0, cluster_gpus);
  const int base = left >= vcs ? 1 : 0;
  left -= base * vcs;
  double total = 0;
  for (const auto& [vc, d] : by_vc) total += d;
  // Shares of `left`, rounded down; the remainders decide the rest.
  struct Part {
    double remainder;
    std::string vc;
  };
  std::vector<Part> parts;
  int given = 0;
  for (const auto& [vc, d] : by_vc) {
    const double share =
        total > 0 ? left * (d / total) : static_cast<double>(left) / vcs;
    const int whole = std::min(left, static_cast<int>(std::floor(share)));
    quotas[vc] = base + whole;
    given += whole;
    parts.push_back({share - whole, vc});
  }
  // Map order is name order, so a stable sort breaks ties by name.
  std::stable_sort(
      parts.begin(), parts.end(),
      [](const Part& a, const Part& b) { return a.remainder > b.remainder; });
  for (size_t i = 0; given < left; i = (i + 1) % parts.size(), ++given) {
    ++quotas[parts[i].vc];
  }
  return quotas;
}

FifoPolicy::FifoPolicy(FifoOptions options) : options_(std::move(options)) {
  for (const auto& [vc, quota] : options_.vc_quotas) {
    index_.emplace(vc, static_cast<int>(index_.size()));
    named_total_ += std::max(0, quota);
  }
  used_.assign(index_.size() + 1, 0);
}

int FifoPolicy::QueueOf(const Job& job) const {
  auto it = index_.find(job.spec.vc);
  return it == index_.end() ? static_cast<int>(index_.size()) : it->second;
}

int FifoPolicy::QuotaOf(const ClusterState& state, int queue) const {
  if (queue == static_cast<int>(index_.size())) {
    return std::max(0, state.cluster().up_gpus() - named_total_);
  }
  auto it = options_.vc_quotas.begin();
  std::advance(it, queue);
  return it->second;
}

void FifoPolicy::RunWaiting(const ClusterState& state, Actions& out) {
  const Cluster& cluster = state.cluster();
  std::vector<JobId> order;
  for (const JobOrder& w : state.waiting()) order.push_back(w.id);
  for (JobId id : order) {
    const Job& j = state.job(id);
    if (j.state != JobState::kSuspended || j.busy() || j.held) continue;
    // Its GPUs stay placed while it is suspended, so no queued job took
    // them; only an operator's pack can have one running there.
    bool idle = true;
    for (GpuId g : j.gpus) idle = idle && cluster.gpu(g).active == 0;
    if (idle) out.Run(id);
  }
}

void FifoPolicy::decide(const ClusterState& state, const Event& event,
                        Actions& out) {
  // FIFO suspends nothing itself: a job an operator suspended runs again on
  // its GPUs once released (at once, or when its suspend completes).
  if (!state.waiting().empty()) RunWaiting(state, out);
  // Only arrivals and departures (and jobs back from a start's retry wait)
  // can let the head of the queue start.
  const bool may_fit = state.start_retries_released() ||
                       std::holds_alternative<JobArrived>(event.body) ||
                       std::holds_alternative<JobFinished>(event.body) ||
                       std::holds_alternative<KillRequest>(event.body) ||
                       std::holds_alternative<HoldRequest>(event.body) ||
                       std::holds_alternative<MechanismRequest>(event.body) ||
                       std::holds_alternative<ActionFailed>(event.body) ||
                       std::holds_alternative<ServerUp>(event.body) ||
                       std::holds_alternative<CordonRequest>(event.body) ||
                       std::holds_alternative<DrainRequest>(event.body) ||
                       std::holds_alternative<JobFound>(event.body) ||
                       std::holds_alternative<ServerDown>(event.body);
  if (!may_fit) return;
  if (!options_.vc_quotas.empty()) {
    DecideByVc(state, out);
    return;
  }
  const Cluster& cluster = state.cluster();
  auto it = state.queue().begin();
  while (it != state.queue().end()) {
    const Job& head = state.job(it->id);
    if (head.spec.gpus > cluster.up_gpus()) {
      // More than all the GPUs up: it could not start whatever ended, so
      // it holds back no one (it is first again once servers join).
      ++it;
      continue;
    }
    auto gpus = PlaceAvoidingFailedStarts(cluster, head, [&] {
      return FindGpus(cluster, head.spec.gpus, options_.relax_locality);
    });
    if (!gpus) return;
    out.Start(head.id, std::move(*gpus));
    it = state.queue().begin();  // the start left the queue
  }
}

void FifoPolicy::DecideByVc(const ClusterState& state, Actions& out) {
  // Forget the jobs that hold no GPUs any more (ended, or requeued after a
  // failed start or a lost server).
  for (auto it = started_.begin(); it != started_.end();) {
    const Job& j = state.job(it->first);
    if (j.placed()) {
      ++it;
      continue;
    }
    used_[it->second] -= j.spec.gpus;
    it = started_.erase(it);
  }
  const Cluster& cluster = state.cluster();
  const int queues = static_cast<int>(used_.size());
  std::vector<int> quota(queues);
  for (int q = 0; q < queues; ++q) quota[q] = QuotaOf(state, q);
  auto try_start = [&](const Job& j, int q) {
    auto gpus = PlaceAvoidingFailedStarts(cluster, j, [&] {
      return FindGpus(cluster, j.spec.gpus, options_.relax_locality);
    });
    if (!gpus) return false;
    out.Start(j.id, std::move(*gpus));
    started_[j.id] = q;
    used_[q] += j.spec.gpus;
    return true;
  };
  // Walks the queue in order, each VC's jobs until its head is blocked. A
  // started job leaves the queue, so step on before starting it.
  auto walk = [&](auto&& visit) {
    std::vector<bool> blocked(queues, false);
    int open = queues;
    const auto& queue = state.queue();
    for (auto it = queue.begin();
         it != queue.end() && open > 0 && cluster.free_gpus() > 0;) {
      const Job& j = state.job(it->id);
      ++it;
      const int q = QueueOf(j);
      if (blocked[q]) continue;
      if (!visit(j, q)) {
        blocked[q] = true;
        --open;
      }
    }
  };
  // Within quotas.
  bool owner_waiting = false;
  std::vector<bool> borrower(queues, false);
  walk([&](const Job& j, int q) {
    if (used_[q] + j.spec.gpus > quota[q]) {
      borrower[q] = true;
      return false;
    }
    if (try_start(j, q)) return true;
    owner_waiting = true;
    return false;
  });
  if (!options_.allow_borrowing || owner_waiting) return;
  // Idle GPUs for the VCs at their quota.
  walk([&](const Job& j, int q) { return borrower[q] && try_start(j, q); });
}

std::shared_ptr<const QueueReasons> FifoPolicy::ExplainQueue(
    const ClusterState& state, const QueueReasons* previous) const {
  if (options_.vc_quotas.empty()) {
    return DefaultQueueReasons::Make(state, previous,
                                     WaitRules{!options_.relax_locality});
  }
  auto r = std::make_shared<VcQueueReasons>();
  const auto* before = dynamic_cast<const VcQueueReasons*>(previous);
  std::vector<int32_t> ahead(used_.size(), 0);
  r->rows = QueuedJobTable<VcQueueReasons::Row>::Of(
      state, before == nullptr ? nullptr : before->rows, [&](const Job& j) {
        const int q = QueueOf(j);
        return VcQueueReasons::Row{q, ahead[static_cast<size_t>(q)]++};
      });
  for (const auto& [vc, quota] : options_.vc_quotas) {
    r->vcs.push_back({vc, quota, 0});
  }
  r->vcs.push_back({"", 0, 0});
  for (size_t q = 0; q < r->vcs.size(); ++q) {
    r->vcs[q].quota = QuotaOf(state, static_cast<int>(q));
  }
  // As DecideByVc counts them: the jobs it started that still hold GPUs.
  for (const auto& [id, q] : started_) {
    if (state.has_job(id) && state.job(id).placed()) {
      r->vcs[static_cast<size_t>(q)].used += state.job(id).spec.gpus;
    }
  }
  r->gpus = OpenGpus::Of(state.cluster());
  r->relax_locality = options_.relax_locality;
  r->allow_borrowing = options_.allow_borrowing;
  return r;
}

void FifoPolicy::Forget(const ClusterState& state,
                        std::span<const JobId> jobs) {
  // As DecideByVc would before its next decision: an ended job holds no
  // GPUs of its queue.
  for (JobId id : jobs) {
    auto it = started_.find(id);
    if (it == started_.end()) continue;
    used_[it->second] -= state.job(id).spec.gpus;
    started_.erase(it);
  }
}

void FifoPolicy::SaveState(SnapshotWriter& w) const {
  w.I64(static_cast<int64_t>(started_.size()));
  for (const auto& [job, queue] : started_) {
    w.Id(job);
    w.I32(queue);
  }
  w.I64(static_cast<int64_t>(used_.size()));
  for (int u : used_) w.I32(u);
}

void FifoPolicy::LoadState(SnapshotReader& r) {
  std::map<JobId, int> started;
  const int64_t n = r.Count(12);
  for (int64_t i = 0; i < n && r.ok(); ++i) {
    const JobId job = r.Id<JobId>();
    started[job] = r.I32();
  }
  std::vector<int> used(static_cast<size_t>(r.Count(4)));
  for (int& u : used) u = r.I32();
  if (!r.ok() || !r.at_end()) return;
  if (used.size() != used_.size()) {
    r.Fail("fifo: " + std::to_string(used.size()) +
           " virtual-cluster queues, these options make " +
           std::to_string(used_.size()));
    return;
  }
  for (const auto& [job, queue] : started) {
    if (queue < 0 || queue >= static_cast<int>(used_.size())) {
      r.Fail("fifo: job " + std::to_string(job.value) + " is in queue " +
             std::to_string(queue));
      return;
    }
  }
  started_ = std::move(started);
  used_ = std::move(used);
}

}  // namespace gandiva::core
