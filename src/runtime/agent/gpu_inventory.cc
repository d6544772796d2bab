#include "runtime/agent/gpu_inventory.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/cluster.h"

namespace gandiva::runtime {
namespace {

// The few NVML declarations we use, with their documented C signatures
// (nvml.h). The library is opened at run time; nothing links against it.
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlErrorInsufficientSize = 7;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
// nvmlProcessInfo_v2_t, the element type of the _v3 process queries.
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr unsigned long long kNvmlValueNotAvailable = ~0ULL;
constexpr unsigned int kNvmlDeviceNameBufferSize = 96;
constexpr unsigned int kNvmlDeviceUuidBufferSize = 96;

using InitFn = nvmlReturn_t (*)();
using ShutdownFn = nvmlReturn_t (*)();
using GetCountFn = nvmlReturn_t (*)(unsigned int*);
using GetHandleFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using GetStringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using GetMemoryFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using GetUtilFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);
using GetProcsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*,
                                    nvmlProcessInfo_t*);

template <typename Fn>
Fn Symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

}  // namespace

// An initialised NVML: the library handle, the function pointers and the
// device handles. Not thread-safe (GpuInventory serialises it).
class Nvml {
 public:
  static core::StatusOr<std::unique_ptr<Nvml>> Open(const std::string& path) {
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      return core::NotFound("NVML not loaded (" + path +
                            "): " + (err ? err : "unknown error"));
    }
    std::unique_ptr<Nvml> n(new Nvml(lib));
    n->init_ = Symbol<InitFn>(lib, "nvmlInit_v2");
    n->shutdown_ = Symbol<ShutdownFn>(lib, "nvmlShutdown");
    n->get_count_ = Symbol<GetCountFn>(lib, "nvmlDeviceGetCount_v2");
    n->get_handle_ = Symbol<GetHandleFn>(lib, "nvmlDeviceGetHandleByIndex_v2");
    n->get_name_ = Symbol<GetStringFn>(lib, "nvmlDeviceGetName");
    n->get_uuid_ = Symbol<GetStringFn>(lib, "nvmlDeviceGetUUID");
    n->get_memory_ = Symbol<GetMemoryFn>(lib, "nvmlDeviceGetMemoryInfo");
    n->get_util_ = Symbol<GetUtilFn>(lib, "nvmlDeviceGetUtilizationRates");
    // Optional: per-process memory.
    n->get_procs_ =
        Symbol<GetProcsFn>(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!n->init_ || !n->shutdown_ || !n->get_count_ || !n->get_handle_ ||
        !n->get_name_ || !n->get_uuid_ || !n->get_memory_ || !n->get_util_) {
      return core::NotFound("NVML at " + path + " lacks a needed function");
    }
    if (nvmlReturn_t rc = n->init_(); rc != kNvmlSuccess) {
      return core::NotFound("nvmlInit_v2 failed with NVML error " +
                            std::to_string(rc));
    }
    n->initialized_ = true;
    unsigned int count = 0;
    if (nvmlReturn_t rc = n->get_count_(&count); rc != kNvmlSuccess) {
      return core::NotFound("nvmlDeviceGetCount_v2 failed with NVML error " +
                            std::to_string(rc));
    }
    for (unsigned int i = 0; i < count; ++i) {
      nvmlDevice_t handle = nullptr;
      if (nvmlReturn_t rc = n->get_handle_(i, &handle); rc != kNvmlSuccess) {
        return core::NotFound("nvmlDeviceGetHandleByIndex_v2(" +
                              std::to_string(i) + ") failed with NVML error " +
                              std::to_string(rc));
      }
      n->devices_.push_back(handle);
    }
    return n;
  }

  ~Nvml() {
    if (initialized_) shutdown_();
    dlclose(lib_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  size_t count() const { return devices_.size(); }

  GpuInfo Describe(int index) const {
    nvmlDevice_t dev = devices_[static_cast<size_t>(index)];
    GpuInfo g;
    g.local = index;
    std::array<char, kNvmlDeviceNameBufferSize> name{};
    if (get_name_(dev, name.data(), kNvmlDeviceNameBufferSize) ==
        kNvmlSuccess) {
      g.name = name.data();
    }
    std::array<char, kNvmlDeviceUuidBufferSize> uuid{};
    if (get_uuid_(dev, uuid.data(), kNvmlDeviceUuidBufferSize) ==
        kNvmlSuccess) {
      g.uuid = uuid.data();
    }
    nvmlMemory_t mem{};
    if (get_memory_(dev, &mem) == kNvmlSuccess) {
      g.memory_bytes = static_cast<int64_t>(mem.total);
    }
    if (g.name.empty()) g.name = "gpu";
    if (g.uuid.empty()) g.uuid = "gpu-" + std::to_string(index);
    return g;
  }

  double Utilization(int index) const {
    if (index < 0 || static_cast<size_t>(index) >= devices_.size()) return 0;
    nvmlUtilization_t u{};
    if (get_util_(devices_[static_cast<size_t>(index)], &u) != kNvmlSuccess) {
      return 0;
    }
    return std::min(1.0, u.gpu / 100.0);
  }

  int64_t ProcessMemory(int index, const std::vector<pid_t>& pids) const {
    if (get_procs_ == nullptr || index < 0 ||
        static_cast<size_t>(index) >= devices_.size()) {
      return 0;
    }
    std::vector<nvmlProcessInfo_t> infos(16);
    unsigned int n = static_cast<unsigned int>(infos.size());
    nvmlDevice_t dev = devices_[static_cast<size_t>(index)];
    nvmlReturn_t rc = get_procs_(dev, &n, infos.data());
    if (rc == kNvmlErrorInsufficientSize) {
      infos.resize(n + 8);
      n = static_cast<unsigned int>(infos.size());
      rc = get_procs_(dev, &n, infos.data());
    }
    if (rc != kNvmlSuccess) return 0;
    int64_t total = 0;
    for (unsigned int i = 0; i < n && i < infos.size(); ++i) {
      const nvmlProcessInfo_t& p = infos[i];
      if (p.usedGpuMemory == kNvmlValueNotAvailable) continue;
      if (std::find(pids.begin(), pids.end(), static_cast<pid_t>(p.pid)) !=
          pids.end()) {
        total += static_cast<int64_t>(p.usedGpuMemory);
      }
    }
    return total;
  }

 private:
  explicit Nvml(void* lib) : lib_(lib) {}

  void* lib_;
  bool initialized_ = false;
  InitFn init_ = nullptr;
  ShutdownFn shutdown_ = nullptr;
  GetCountFn get_count_ = nullptr;
  GetHandleFn get_handle_ = nullptr;
  GetStringFn get_name_ = nullptr;
  GetStringFn get_uuid_ = nullptr;
  GetMemoryFn get_memory_ = nullptr;
  GetUtilFn get_util_ = nullptr;
  GetProcsFn get_procs_ = nullptr;
  std::vector<nvmlDevice_t> devices_;
};

void AssignTopology(std::vector<GpuInfo>& gpus, int sockets,
                    int switches_per_socket) {
  const int n = static_cast<int>(gpus.size());
  GANDIVA_CHECK(sockets >= 1 && switches_per_socket >= 1);
  const int per_socket = std::max(1, n / sockets);
  const int per_switch = std::max(1, per_socket / switches_per_socket);
  for (GpuInfo& g : gpus) {
    g.socket = std::min(sockets - 1, g.local / per_socket);
    g.pcie_switch =
        std::min(sockets * switches_per_socket - 1, g.local / per_switch);
  }
}

GpuInventory::~GpuInventory() = default;

core::StatusOr<std::unique_ptr<GpuInventory>> GpuInventory::Discover(
    const GpuInventoryOptions& options) {
  std::unique_ptr<GpuInventory> inv(new GpuInventory());
  if (options.virtual_only) {
    inv->nvml_note_ = "virtual GPUs forced (--virtual-only)";
  } else {
    auto nvml = Nvml::Open(options.nvml_library);
    if (!nvml.ok()) {
      inv->nvml_note_ = nvml.status().message();
    } else if ((*nvml)->count() == 0) {
      inv->nvml_note_ = "NVML found no GPU";
    } else {
      inv->nvml_ = std::move(*nvml);
      inv->virtual_ = false;
    }
  }
  int count = options.virtual_gpus;
  if (!inv->virtual_) count = static_cast<int>(inv->nvml_->count());
  if (count < 1) {
    return core::InvalidArgument(
        "--virtual-gpus: must be at least 1 when no real GPU is used (" +
        inv->nvml_note_ + "), got " + std::to_string(count));
  }
  core::ServerSpec spec;
  spec.gpus = count;
  spec.sockets = options.sockets;
  spec.switches_per_socket = options.switches_per_socket;
  if (std::string err = core::ValidateServerSpec(spec); !err.empty()) {
    if (inv->virtual_) {
      return core::InvalidArgument("topology of --virtual-gpus " +
                                   std::to_string(count) + ": " + err);
    }
    // Real GPUs: flags that do not fit the count fall back to one switch.
    spec.sockets = 1;
    spec.switches_per_socket = 1;
  }
  inv->sockets_ = spec.sockets;
  inv->switches_per_socket_ = spec.switches_per_socket;
  for (int i = 0; i < count; ++i) {
    if (inv->virtual_) {
      GpuInfo g;
      g.local = i;
      g.uuid = "virtual-" + std::to_string(i);
      g.name = "virtual";
      inv->gpus_.push_back(std::move(g));
    } else {
      inv->gpus_.push_back(inv->nvml_->Describe(i));
    }
  }
  AssignTopology(inv->gpus_, inv->sockets_, inv->switches_per_socket_);
  return inv;
}

double GpuInventory::Utilization(const std::vector<int>& local_gpus) const {
  if (virtual_ || local_gpus.empty()) return 0;
  std::lock_guard<std::mutex> lock(nvml_mu_);
  double sum = 0;
  for (int g : local_gpus) sum += nvml_->Utilization(g);
  return sum / static_cast<double>(local_gpus.size());
}

int64_t GpuInventory::ProcessMemory(const std::vector<int>& local_gpus,
                                    const std::vector<pid_t>& pids) const {
  if (virtual_ || pids.empty()) return 0;
  std::lock_guard<std::mutex> lock(nvml_mu_);
  int64_t total = 0;
  for (int g : local_gpus) total += nvml_->ProcessMemory(g, pids);
  return total;
}

}  // namespace gandiva::runtime
