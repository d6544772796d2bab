// FifoPolicy: the baseline Gandiva is compared against, like the YARN
// capacity scheduler: each job gets exclusive GPUs from start to finish, in
// strict arrival order (a job that does not fit blocks those behind it), with
// no preemption, no sharing and no migration.
//
// Placement of the job at the head: the server whose free GPUs fit it most
// tightly; else, when `relax_locality` (default), free GPUs across servers on
// as few servers as possible; else it waits.
#pragma once

#include "core/policy.h"

namespace gandiva::core {

struct FifoOptions {
  // Place a job across servers when no single server has room (true), or
  // wait for one that has (false). Default true.
  bool relax_locality = true;
};

class FifoPolicy final : public Policy {
 public:
  explicit FifoPolicy(FifoOptions options = {}) : options_(options) {}
  std::string_view name() const override { return "fifo"; }
  void decide(const ClusterState& state, const Event& event,
              Actions& out) override;

 private:
  FifoOptions options_;
};

}  // namespace gandiva::core
