#include "core/policies/registry.h"

#include "core/policies/tiresias.h"

namespace gandiva::core {

std::vector<PolicyInfo> KnownPolicies() {
  return {
      {"fifo", "exclusive GPUs in arrival order, no preemption (YARN-like)"},
      {"gandiva",
       "Algorithm 1 placement, time-slicing, introspective packing, "
       "migration, grow-shrink"},
      {"gandiva-timeslice",
       "Algorithm 1 placement, time-slicing and migration to idle GPUs; no "
       "packing"},
      {"gandiva-reactive", "Algorithm 1 placement, no time-slicing"},
      {"tiresias-las",
       "Tiresias 2D-LAS: least attained GPU-time first, exclusive GPUs, "
       "preemption"},
      {"gandiva-fair",
       "queues (teams) get their GPU quotas and share idle GPUs by quota; "
       "time-slicing, reclaim by suspend (nothing lost)"},
      {"drf-reclaim",
       "queues get their GPU quotas and borrow idle GPUs (DRF); reclaim "
       "kills borrowers, which restart from their last checkpoint",
       /*simulator_only=*/true},
  };
}

StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name,
                                             const PolicyOptions& options) {
  if (name == "fifo")
    return std::unique_ptr<Policy>(new FifoPolicy(options.fifo));
  if (name == "gandiva") {
    GandivaOptions o = options.gandiva;
    o.packing = true;
    o.grow_shrink = true;
    o.consolidate = true;
    o.defrag = true;
    return std::unique_ptr<Policy>(new GandivaPolicy(o));
  }
  if (name == "gandiva-timeslice") {
    GandivaOptions o = options.gandiva;
    o.packing = false;
    o.grow_shrink = false;
    o.consolidate = false;
    o.defrag = false;
    return std::unique_ptr<Policy>(new GandivaPolicy(o, "gandiva-timeslice"));
  }
  if (name == "gandiva-reactive") {
    GandivaOptions o = options.gandiva;
    o.time_slicing = false;
    return std::unique_ptr<Policy>(new GandivaPolicy(o, "gandiva-reactive"));
  }
  if (name == "tiresias-las") {
    return std::unique_ptr<Policy>(new TiresiasPolicy(options.tiresias));
  }
  if (name == "gandiva-fair") {
    GandivaFairOptions o;
    o.queues = options.queues;
    o.quantum = options.gandiva.quantum;
    o.half_life = options.share_half_life;
    o.rotation_per_gpu = options.gandiva.max_height;
    return std::unique_ptr<Policy>(new GandivaFairPolicy(o));
  }
  if (name == "drf-reclaim") {
    return std::unique_ptr<Policy>(
        new DrfReclaimPolicy({.queues = options.queues}));
  }
  std::string known;
  for (const PolicyInfo& p : KnownPolicies()) {
    known += (known.empty() ? "" : ", ") + p.name;
  }
  return InvalidArgument("unknown policy '" + std::string(name) +
                         "' (known: " + known + ")");
}

}  // namespace gandiva::core
