#include "core/policies/placement.h"

#include <algorithm>

namespace gandiva::core {

std::optional<std::vector<GpuId>> FreeGpusOn(const Cluster& cluster,
                                             const Server& server, int count) {
  if (server.free_gpus < count || !server.up || server.cordoned) {
    return std::nullopt;
  }
  const int n = server.num_gpus();
  const int first = server.first_gpu.value;
  auto is_free = [&](int local) {
    return cluster.gpu(GpuId(first + local)).jobs.empty();
  };
  std::vector<GpuId> out;
  out.reserve(count);
  // An aligned block of `count` free GPUs is as close together as it gets.
  if (n % count == 0) {
    for (int b = 0; b + count <= n; b += count) {
      bool all = true;
      for (int i = b; i < b + count && all; ++i) all = is_free(i);
      if (all) {
        for (int i = b; i < b + count; ++i) out.push_back(GpuId(first + i));
        return out;
      }
    }
  }
  // Else fill from the socket, then the switch, with the most free GPUs.
  const int sockets = server.spec.sockets;
  const int switches = sockets * server.spec.switches_per_socket;
  std::vector<int> free_in_socket(sockets), free_in_switch(switches);
  std::vector<int> candidates;
  for (int i = 0; i < n; ++i) {
    if (!is_free(i)) continue;
    const Gpu& g = cluster.gpu(GpuId(first + i));
    ++free_in_socket[g.socket];
    ++free_in_switch[g.pcie_switch];
    candidates.push_back(i);
  }
  std::stable_sort(candidates.begin(), candidates.end(), [&](int a, int b) {
    const Gpu& ga = cluster.gpu(GpuId(first + a));
    const Gpu& gb = cluster.gpu(GpuId(first + b));
    if (free_in_socket[ga.socket] != free_in_socket[gb.socket]) {
      return free_in_socket[ga.socket] > free_in_socket[gb.socket];
    }
    if (ga.socket != gb.socket) return ga.socket < gb.socket;
    if (free_in_switch[ga.pcie_switch] != free_in_switch[gb.pcie_switch]) {
      return free_in_switch[ga.pcie_switch] > free_in_switch[gb.pcie_switch];
    }
    return a < b;
  });
  for (int i = 0; i < count; ++i) out.push_back(GpuId(first + candidates[i]));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<GpuId> LeastLoadedBlock(const Cluster& cluster,
                                    const Server& server, int count) {
  const int n = server.num_gpus();
  const int first = server.first_gpu.value;
  int best = 0;
  size_t best_max = SIZE_MAX, best_sum = SIZE_MAX;
  for (int b = 0; b + count <= n; b += count) {
    size_t mx = 0, sum = 0;
    for (int i = b; i < b + count; ++i) {
      const size_t load = cluster.gpu(GpuId(first + i)).jobs.size();
      mx = std::max(mx, load);
      sum += load;
    }
    if (mx < best_max || (mx == best_max && sum < best_sum)) {
      best = b;
      best_max = mx;
      best_sum = sum;
    }
  }
  std::vector<GpuId> out;
  out.reserve(count);
  for (int i = best; i < best + count; ++i) out.push_back(GpuId(first + i));
  return out;
}

std::optional<std::vector<GpuId>> BestFitGpus(const Cluster& cluster, int count,
                                              bool gather) {
  if (cluster.free_gpus() < count) return std::nullopt;
  std::optional<std::vector<GpuId>> gpus;
  cluster.ForEachWithFree(count, [&](const Server& s) {
    gpus = FreeGpusOn(cluster, s, count);
    return true;
  });
  if (!gpus && gather) gpus = GatherFreeGpus(cluster, count);
  return gpus;
}

std::optional<std::vector<GpuId>> GatherFreeGpus(const Cluster& cluster,
                                                 int count) {
  if (cluster.free_gpus() < count) return std::nullopt;
  std::vector<GpuId> out;
  out.reserve(count);
  cluster.ForEachWithFreeDescending([&](const Server& s) {
    const int take =
        std::min(s.free_gpus, count - static_cast<int>(out.size()));
    auto gpus = FreeGpusOn(cluster, s, take);
    out.insert(out.end(), gpus->begin(), gpus->end());
    return static_cast<int>(out.size()) == count;
  });
  // Short when a Cluster::Avoiding scope left out servers.
  if (static_cast<int>(out.size()) < count) return std::nullopt;
  return out;
}

}  // namespace gandiva::core
