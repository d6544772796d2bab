// The GPUs a node agent offers: real ones found through NVML (loaded at run
// time with dlopen("libnvidia-ml.so.1"), never a build or link dependency),
// or virtual ones ("virtual-N") when NVML or a GPU is missing, or when asked.
// Also samples per-GPU utilisation and per-process GPU memory for profiles.
//
// Thread-safety: a GpuInventory is immutable after Discover() except for the
// NVML handle, whose sampling calls (Utilization, ProcessMemory) are
// serialised by an internal mutex; all methods may be called concurrently.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"

namespace gandiva::runtime {

struct GpuInfo {
  int local = 0;  // index on this server (CUDA/NVML order)
  int socket = 0;
  int pcie_switch = 0;  // index inside the server
  std::string uuid;     // NVML UUID, or "virtual-N"
  std::string name;     // NVML name, or "virtual"
  int64_t memory_bytes = 0;
};

struct GpuInventoryOptions {
  int virtual_gpus = 4;       // offered when NVML finds none (or forced)
  bool virtual_only = false;  // never look for real GPUs
  int sockets = 1;            // topology of virtual GPUs (and real ones)
  int switches_per_socket = 1;
  // NVML library to load; tests point this at a missing file.
  std::string nvml_library = "libnvidia-ml.so.1";
};

class Nvml;  // the dlopen'ed library (gpu_inventory.cc)

class GpuInventory {
 public:
  // Finds real GPUs through NVML unless options say virtual-only; falls back
  // to `virtual_gpus` virtual ones. kInvalidArgument when the topology does
  // not fit the GPU count (names the flag) or no GPU would be offered.
  static core::StatusOr<std::unique_ptr<GpuInventory>> Discover(
      const GpuInventoryOptions& options);

  ~GpuInventory();
  GpuInventory(const GpuInventory&) = delete;
  GpuInventory& operator=(const GpuInventory&) = delete;

  bool is_virtual() const { return virtual_; }
  const std::vector<GpuInfo>& gpus() const { return gpus_; }
  int sockets() const { return sockets_; }
  int switches_per_socket() const { return switches_per_socket_; }
  // Why real GPUs were not used (empty when they are), for the log.
  const std::string& nvml_note() const { return nvml_note_; }

  // Mean utilisation (0..1) of the given local GPUs; 0 for virtual ones.
  double Utilization(const std::vector<int>& local_gpus) const;
  // GPU memory used by the given processes on the given GPUs (NVML
  // compute-process list); 0 for virtual GPUs or when NVML cannot tell.
  int64_t ProcessMemory(const std::vector<int>& local_gpus,
                        const std::vector<pid_t>& pids) const;

 private:
  GpuInventory() = default;

  bool virtual_ = true;
  std::vector<GpuInfo> gpus_;
  int sockets_ = 1;
  int switches_per_socket_ = 1;
  std::string nvml_note_;
  std::unique_ptr<Nvml> nvml_;
  mutable std::mutex nvml_mu_;
};

// Socket and switch of GPU `local` when `gpus` are split evenly over
// `sockets` and each socket's over `switches_per_socket` (the core's rule).
void AssignTopology(std::vector<GpuInfo>& gpus, int sockets,
                    int switches_per_socket);

}  // namespace gandiva::runtime
