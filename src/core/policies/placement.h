// Placement helpers shared by the policies: choosing GPUs inside a server and
// across servers with the best locality. Pure functions of the cluster.
#pragma once

#include <optional>
#include <vector>

#include "core/cluster.h"
#include "core/job.h"

namespace gandiva::core {

// `count` free GPUs of `server` (no job placed on them), nearest together:
// an aligned free block when there is one, else the free GPUs of the socket
// and PCIe switch with the most free first. Nothing if too few are free.
std::optional<std::vector<GpuId>> FreeGpusOn(const Cluster& cluster,
                                             const Server& server, int count);

// `count` GPUs of `server` to share by time-slicing: the aligned block whose
// GPUs carry the fewest placed jobs (ties: lowest index). Needs count <= the
// server's GPUs.
std::vector<GpuId> LeastLoadedBlock(const Cluster& cluster,
                                    const Server& server, int count);

// `count` free GPUs across the cluster on as few servers as possible (servers
// with the most free GPUs first). Nothing if fewer are free (outside the
// servers a Cluster::Avoiding scope names).
std::optional<std::vector<GpuId>> GatherFreeGpus(const Cluster& cluster,
                                                 int count);

// `count` free GPUs on the server whose free GPUs fit them most tightly
// (fewest free; FreeGpusOn within it), else, with `gather`, across servers
// (GatherFreeGpus). Nothing if neither finds them.
std::optional<std::vector<GpuId>> BestFitGpus(const Cluster& cluster, int count,
                                              bool gather);

// Runs `place()` (which returns something testable as bool: found or not)
// first with the servers `job`'s failed starts were on avoided
// (Job::start_failed_on), then, if that found nothing, with all servers.
template <typename F>
auto PlaceAvoidingFailedStarts(const Cluster& cluster, const Job& job,
                               F&& place) -> decltype(place()) {
  if (!job.start_failed_on.empty()) {
    Cluster::Avoiding avoid(cluster, job.start_failed_on);
    if (auto found = place()) return found;
  }
  return place();
}

}  // namespace gandiva::core
