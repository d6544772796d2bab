// Policies by name, for the CLI, the simulator and the daemon.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/policies/fifo.h"
#include "core/policies/gandiva.h"
#include "core/policies/tiresias.h"
#include "core/policy.h"
#include "core/status.h"

namespace gandiva::core {

struct PolicyOptions {
  FifoOptions fifo;
  GandivaOptions gandiva;
  TiresiasOptions tiresias;
};

// The names MakePolicy knows, with a line about each.
struct PolicyInfo {
  std::string name;
  std::string summary;
};
std::vector<PolicyInfo> KnownPolicies();

// "fifo", "gandiva" (every mechanism: time-slicing, packing, migration),
// "gandiva-timeslice" (no packing), "gandiva-reactive" (Algorithm 1 without
// time-slicing), "tiresias-las". The gandiva variants set the options that
// define them over `options.gandiva`. Unknown names are an
// InvalidArgument error that lists the known ones.
StatusOr<std::unique_ptr<Policy>> MakePolicy(std::string_view name,
                                             const PolicyOptions& options = {});

}  // namespace gandiva::core
