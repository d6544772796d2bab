// Placement helpers shared by the policies: choosing GPUs inside a server and
// across servers with the best locality. Pure functions of the cluster.
#pragma once

#include <optional>
#include <vector>

#include "core/cluster.h"

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
// with the most free GPUs first). Nothing if fewer are free.
std::optional<std::vector<GpuId>> GatherFreeGpus(const Cluster& cluster,
                                                 int count);

}  // namespace gandiva::core
