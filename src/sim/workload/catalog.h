// The model catalog: the deep-learning model types a simulated cluster runs
// and their performance model (isolated mini-batch rate by GPU count,
// placement-spread sensitivity, GPU memory and utilisation, and the rates of
// two jobs packed on one GPU).
//
// A Catalog is loaded once from <data_dir>/catalog/models.json (hand-written,
// every number with its source) and
// <data_dir>/gavel/simulation_throughputs.json (Gavel's measured throughputs
// and co-location rates). All tables the simulator's hot loop reads are
// precomputed at load: IsolatedRate, SpreadFactor and PackedRates are O(1),
// allocate nothing and do no string work. A loaded Catalog is immutable: its
// const methods are safe to call from many threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace gandiva::sim {

// Dense id of a catalog entry: 0 .. Catalog::size()-1, in file order.
using ModelId = int32_t;
inline constexpr ModelId kNoModel = -1;

// The GPU generation whose rates a catalog is loaded for.
enum class GpuType { kK80, kP100, kV100 };
const char* GpuTypeName(GpuType type);  // "k80", "p100", "v100"
core::StatusOr<GpuType> ParseGpuType(std::string_view name);

// How far apart the GPUs of one job sit; ordered from best to worst.
enum class Spread {
  kSameSwitch = 0,   // all GPUs on one PCIe switch (factor 1.0 by definition)
  kCrossSwitch = 1,  // several PCIe switches of one CPU socket
  kCrossSocket = 2,  // several CPU sockets of one server
  kCrossServer = 3,  // several servers (more than a job's size requires)
};
inline constexpr int kNumSpreads = 4;
const char* SpreadName(Spread spread);

// Where a PackedRates answer came from.
enum class PackSource {
  kMeasured,    // Gavel measured this pair space-shared on one GPU
  kModelled,    // from utilisation and memory (see models.json packing_model)
  kInfeasible,  // the pair does not fit on one GPU (measured or by memory)
};
const char* PackSourceName(PackSource source);

// Rates of two jobs space-shared on one GPU, each relative to its isolated
// 1-GPU rate (packed rate / isolated rate, 0 when infeasible).
struct PackOutcome {
  double factor_a = 0.0;
  double factor_b = 0.0;
  PackSource source = PackSource::kInfeasible;
};

// One catalog entry (a model type at one batch size).
struct ModelInfo {
  std::string name;    // e.g. "ResNet-50 (batch size 64)", as Gavel names it
  std::string family;  // e.g. "ResNet-50"
  bool family_default = false;  // the family's default variant
  bool multi_gpu = true;        // a plausible multi-GPU job (false: A3C)
  double memory_gb = 0.0;       // peak per-GPU memory
  double utilization = 0.0;     // GPU utilisation 0..1 when running alone
  // Isolated rate (mini-batches/s) at 1, 2, 4, 8 GPUs on the loaded GPU type
  // and whether each was measured (else extrapolated or estimated).
  std::array<double, 4> rates_1_to_8{};
  std::array<bool, 4> measured_1_to_8{};
  std::array<double, kNumSpreads> spread{};  // indexed by Spread
  std::string source;  // where each number came from ("estimate" marks guesses)
};

// Returns $GANDIVA_DATA_DIR if set and non-empty, else the data directory
// compiled in (GANDIVA_DEFAULT_DATA_DIR, <source tree>/data).
std::string DefaultDataDir();

class Catalog {
 public:
  // GPU counts the rate table covers: 1 .. kMaxGpus (powers of two stored,
  // others interpolated linearly between the neighbouring powers).
  static constexpr int kMaxGpus = 1024;

  // Loads <data_dir>/catalog/models.json and the Gavel throughput table it
  // names. Errors name the file and the field.
  static core::StatusOr<Catalog> Load(const std::string& data_dir,
                                      GpuType gpu_type = GpuType::kV100);

  int size() const { return static_cast<int>(models_.size()); }
  GpuType gpu_type() const { return gpu_type_; }
  double gpu_memory_gb() const { return gpu_memory_gb_; }
  const ModelInfo& model(ModelId id) const;
  const std::vector<ModelInfo>& models() const { return models_; }

  // Exact entry name ("ResNet-50 (batch size 64)"); nullopt if absent.
  std::optional<ModelId> Find(std::string_view name) const;
  // Default variant of a family ("ResNet-50"); nullopt if absent.
  std::optional<ModelId> FindFamily(std::string_view family) const;
  // The families' default variants, in file order.
  const std::vector<ModelId>& family_defaults() const {
    return family_defaults_;
  }

  // Isolated mini-batches/s of `id` on `gpus` GPUs (1..kMaxGpus) at ideal
  // placement. Above 8 GPUs the ideal placement spans servers and the rate
  // already includes that; apply SpreadFactor(kCrossServer) only to a job
  // spread over more servers than its size needs. O(1).
  double IsolatedRate(ModelId id, int gpus) const {
    CheckId(id);
    if (gpus <= 0 || gpus > kMaxGpus) BadGpus(gpus);
    const int lo = FloorLog2(gpus);
    const double* r = &rates_[static_cast<size_t>(id) * kRateSlots];
    const int lo_gpus = 1 << lo;
    if (lo_gpus == gpus) return r[lo];
    const double t = static_cast<double>(gpus - lo_gpus) / lo_gpus;
    return r[lo] + t * (r[lo + 1] - r[lo]);
  }
  // True when IsolatedRate(id, gpus) is Gavel's measurement (gpus 1/2/4/8).
  bool IsMeasured(ModelId id, int gpus) const;

  // Throughput factor (<= 1) of a job whose GPUs are spread as `spread`. O(1).
  double SpreadFactor(ModelId id, Spread spread) const {
    CheckId(id);
    return spread_[static_cast<size_t>(id) * kNumSpreads +
                   static_cast<size_t>(spread)];
  }

  // Rate factors of `a` and `b` packed on one GPU. O(1).
  PackOutcome PackedRates(ModelId a, ModelId b) const {
    CheckId(a);
    CheckId(b);
    return pack_[static_cast<size_t>(a) * models_.size() +
                 static_cast<size_t>(b)];
  }

  // One line per entry: name, rates, memory, utilisation, spread factors.
  std::string Describe() const;

 private:
  static constexpr int kRateSlots = 11;  // 1, 2, 4, ..., 1024 GPUs
  static int FloorLog2(int x) {
    return 31 - __builtin_clz(static_cast<unsigned>(x));
  }
  void CheckId(ModelId id) const {
    if (id < 0 || id >= static_cast<ModelId>(models_.size())) BadId(id);
  }
  [[noreturn]] void BadId(ModelId id) const;
  [[noreturn]] static void BadGpus(int gpus);

  friend class CatalogLoader;

  GpuType gpu_type_ = GpuType::kV100;
  double gpu_memory_gb_ = 0.0;
  std::vector<ModelInfo> models_;
  std::vector<ModelId> family_defaults_;
  std::vector<std::string> family_names_;  // parallel to family_defaults_
  std::vector<double> rates_;              // size() x kRateSlots
  std::vector<double> spread_;             // size() x kNumSpreads
  std::vector<PackOutcome> pack_;          // size() x size()
};

}  // namespace gandiva::sim
