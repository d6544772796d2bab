// Policies by name, for the CLI, the simulator and the daemon.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/policies/drf_reclaim.h"
#include "core/policies/fifo.h"
#include "core/policies/gandiva.h"
#include "core/policies/gandiva_fair.h"
#include "core/policies/tiresias.h"
#include "core/policy.h"
#include "core/status.h"

namespace gandiva::core {

struct PolicyOptions {
  FifoOptions fifo;
  GandivaOptions gandiva;
  TiresiasOptions tiresias;
  // Queues (teams), for the queue-aware policies (gandiva-fair,
  // drf-reclaim; see QueueQuotas).
  std::vector<QueueConfig> queues;
  // gandiva-fair: how fast what a queue is owed fades (its half-life).
  Duration share_half_life = Duration::Seconds(3600);
};

// The names MakePolicy knows, with a line about each.
struct PolicyInfo {
  std::string name;
  std::string summary;
  // Takes actions only a simulated world carries out (Actions::Preempt):
  // the runtime refuses it.
  bool simulator_only = false;
};
std::vector<PolicyInfo> KnownPolicies();

// "fifo", "gandiva" (every mechanism: time-slicing, packing, migration),
// "gandiva-timeslice" (no packing), "gandiva-reactive" (Algorithm 1 without
// time-slicing), "tiresias-las", "gandiva-fair" (queues' fair shares;
// its quantum is options.gandiva.quantum, the one every time-slicing
// policy shares), "drf-reclaim" (queues' quotas, reclaim by killing). The
// gandiva variants set the options that
// define them over `options.gandiva`. Unknown names are an
// InvalidArgument error that lists the known ones.
StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name,
                                             const PolicyOptions& options = {});

}  // namespace gandiva::core
