// GandivaPolicy::ExplainQueue: why queued jobs wait under Algorithm 1
// (see gandiva.h).
#include <array>
#include <bit>
#include <memory>
#include <string>

#include "core/policies/gandiva.h"

namespace gandiva::core {

namespace {

// What Algorithm 1 finds for the queued jobs of one size.
struct SizeFacts {
  bool known = false;       // looked at: some job of this size is queued
  bool free_place = false;  // steps 1-3 find free GPUs
  bool shares = false;      // step 4 finds a server of its affinity to share
  bool any_below = false;   // a starving job finds any server to share
  int same_affinity = 0;    // open servers hosting jobs of its size
  int fits_on = 0;          // open servers it fits on (whole servers: all)
};

class GandivaQueueReasons final : public QueueReasons {
 public:
  // A queued job: the jobs of its size ahead of it, and since when it
  // waits (for the starvation timeout).
  struct Row {
    int32_t ahead = 0;
    Time waiting_since = Time::Zero();
  };
  std::shared_ptr<const QueuedJobTable<Row>> rows;
  std::array<SizeFacts, kMaxLog2Gpus> sizes{};
  OpenGpus gpus;
  int max_server_gpus = 0;
  Time now = Time::Zero();
  GandivaOptions options;

  std::string Why(JobId job, int need) const override {
    const Row* row = rows->Find(job);
    const int k = std::countr_zero(static_cast<unsigned>(need));
    if (row == nullptr || need > gpus.total || k >= kMaxLog2Gpus ||
        !sizes[static_cast<size_t>(k)].known) {
      return DefaultWaitReason(need, -1, gpus);
    }
    const SizeFacts& f = sizes[static_cast<size_t>(k)];
    const Duration timeout = options.starvation_timeout;
    const Duration waited = now - row->waiting_since;
    const bool starving = !timeout.is_infinite() && waited >= timeout;
    if (f.free_place ||
        (options.time_slicing && (f.shares || (starving && f.any_below)))) {
      return "placed at the next scheduling pass";
    }
    const std::string n = std::to_string(need);
    const std::string free =
        std::to_string(gpus.free) + (gpus.free == 1 ? " is" : " are");
    std::string why;
    if (need <= max_server_gpus) {
      why = "it needs " + n + " GPUs and no server has " + n + " free";
      if (!options.allow_split && gpus.free >= need) {
        why += " (" + free +
               " free on several servers; it is not split "
               "across them)";
      }
    } else {
      why = "it needs " + n + " GPUs, more than one server has; " + free +
            " free";
    }
    const std::string ahead =
        AheadText(row->ahead, "among the queued jobs of its size");
    if (!options.time_slicing) {
      return why + ": it waits for GPUs to free up (time-slicing is off)" +
             ahead;
    }
    const bool capped = options.max_height > 0;
    const std::string limit = "the height limit (max height " +
                              std::to_string(options.max_height) + ")";
    if (f.same_affinity == 0) {
      why += ", and no server hosts " + n + "-GPU jobs to time-slice with";
    } else {
      const bool one = f.same_affinity == 1;
      why += ", and time-slicing is capped: the " +
             std::to_string(f.same_affinity) +
             (one ? " server hosting " : " servers hosting ") + n +
             "-GPU jobs " + (one ? "is" : "are") + " at " + limit;
    }
    if (!timeout.is_infinite()) {
      if (!f.any_below) {
        if (capped && f.same_affinity == 0) {
          why += "; every server it fits on is at " + limit;
        } else if (capped && f.same_affinity < f.fits_on) {
          why += "; so is every other server it fits on";
        }
      } else if (!starving) {
        why += "; once it has waited " + SecondsText(timeout) + " (in " +
               SecondsText(timeout - waited) + ") it may share any server" +
               (capped ? " below the limit" : "");
      }
    }
    return why + ahead;
  }
};

}  // namespace

std::shared_ptr<const QueueReasons> GandivaPolicy::ExplainQueue(
    const ClusterState& state, const QueueReasons* previous) const {
  const Cluster& cluster = state.cluster();
  auto r = std::make_shared<GandivaQueueReasons>();
  const auto* before = dynamic_cast<const GandivaQueueReasons*>(previous);
  std::array<int32_t, kMaxLog2Gpus> seen{};
  r->rows = QueuedJobTable<GandivaQueueReasons::Row>::Of(
      state, before == nullptr ? nullptr : before->rows, [&](const Job& j) {
        const auto k = static_cast<size_t>(
            std::countr_zero(static_cast<unsigned>(j.spec.gpus)));
        return GandivaQueueReasons::Row{seen[k]++, j.waiting_since};
      });
  // Each size queued, as FindPlace looks at it.
  for (int k = 0; k < kMaxLog2Gpus; ++k) {
    if (state.queue_by_size()[static_cast<size_t>(k)].empty()) continue;
    SizeFacts& f = r->sizes[static_cast<size_t>(k)];
    f.known = true;
    const int d = 1 << k;
    if (d <= cluster.max_server_gpus()) {
      f.free_place = FindFree(cluster, d, options_.allow_split).has_value();
      auto fits_below = [&](const Server& s) {
        return s.num_gpus() >= d && UnderCap(s, d);
      };
      cluster.ForEachWithAffinity(d, [&](const Server& s) {
        if (s.num_gpus() >= d) ++f.same_affinity;
        f.shares = f.shares || fits_below(s);
        return false;
      });
      cluster.ForEachByDemand([&](const Server& s) {
        if (s.num_gpus() >= d) ++f.fits_on;
        f.any_below = f.any_below || fits_below(s);
        return false;
      });
    } else {
      // Whole servers.
      int empty = 0, same = 0, below = 0;
      cluster.ForEachWithAffinity(0, [&](const Server& s) {
        empty += s.num_gpus();
        return false;
      });
      cluster.ForEachWithAffinity(d, [&](const Server& s) {
        ++f.same_affinity;
        if (UnderCap(s, s.num_gpus())) same += s.num_gpus();
        return false;
      });
      cluster.ForEachByDemand([&](const Server& s) {
        ++f.fits_on;
        if (UnderCap(s, s.num_gpus())) below += s.num_gpus();
        return false;
      });
      f.free_place = empty >= d || cluster.free_gpus() >= d;
      f.shares = same >= d;
      f.any_below = below >= d;
    }
  }
  r->gpus = OpenGpus::Of(cluster);
  r->max_server_gpus = cluster.max_server_gpus();
  r->now = state.now();
  r->options = options_;
  return r;
}

}  // namespace gandiva::core
