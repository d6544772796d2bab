#include "core/policies/fifo.h"

#include "core/policies/placement.h"

namespace gandiva::core {

void FifoPolicy::decide(const ClusterState& state, const Event& event,
                        Actions& out) {
  // Only arrivals and departures can let the head of the queue start.
  const bool may_fit = std::holds_alternative<JobArrived>(event.body) ||
                       std::holds_alternative<JobFinished>(event.body) ||
                       std::holds_alternative<KillRequest>(event.body) ||
                       std::holds_alternative<ActionFailed>(event.body) ||
                       std::holds_alternative<ServerUp>(event.body) ||
                       std::holds_alternative<ServerDown>(event.body);
  if (!may_fit) return;
  const Cluster& cluster = state.cluster();
  while (!state.queue().empty()) {
    const Job& head = state.job(state.queue().begin()->id);
    const int need = head.spec.gpus;
    if (cluster.free_gpus() < need) return;
    std::optional<std::vector<GpuId>> gpus;
    cluster.ForEachWithFree(need, [&](const Server& s) {
      gpus = FreeGpusOn(cluster, s, need);
      return true;
    });
    if (!gpus &&
        (options_.relax_locality || need > cluster.max_server_gpus())) {
      gpus = GatherFreeGpus(cluster, need);
    }
    if (!gpus) return;
    out.Start(head.id, std::move(*gpus));
  }
}

}  // namespace gandiva::core
