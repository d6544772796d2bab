#include "sim/workload/catalog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#ifndef GANDIVA_DEFAULT_DATA_DIR
#define GANDIVA_DEFAULT_DATA_DIR "data"
#endif

namespace gandiva::sim {
namespace {

using core::InvalidArgument;
using core::Status;
using core::StatusOr;
using Json = nlohmann::json;

StatusOr<Json> ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return core::IoError(path + ": cannot open");
  try {
    return Json::parse(in);
  } catch (const Json::exception& e) {
    return InvalidArgument(path + ": not valid JSON: " + e.what());
  }
}

std::string Shown(const Json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Field access with errors naming the file and the field's path.
class Fields {
 public:
  explicit Fields(std::string file) : file_(std::move(file)) {}

  Status Error(const std::string& field, const std::string& what) const {
    return InvalidArgument(file_ + ": field '" + field + "': " + what);
  }

  StatusOr<const Json*> Get(const Json& obj, const std::string& key,
                            const std::string& path) const {
    if (!obj.is_object() || !obj.contains(key)) {
      return Error(path + key, "missing");
    }
    return &obj.at(key);
  }

  StatusOr<double> Number(const Json& obj, const std::string& key,
                          const std::string& path, double lo, double hi,
                          bool lo_open) const {
    auto v = Get(obj, key, path);
    if (!v.ok()) return v.status();
    const Json& j = **v;
    char range[96];
    std::snprintf(range, sizeof(range), "expected a number in %c%g, %g]",
                  lo_open ? '(' : '[', lo, hi);
    if (!j.is_number()) return Error(path + key, range + (", got " + Shown(j)));
    const double x = j.get<double>();
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi)) {
      return Error(path + key, range + (", got " + Shown(j)));
    }
    return x;
  }

  StatusOr<std::string> String(const Json& obj, const std::string& key,
                               const std::string& path) const {
    auto v = Get(obj, key, path);
    if (!v.ok()) return v.status();
    if (!(*v)->is_string() || (*v)->get<std::string>().empty()) {
      return Error(path + key,
                   "expected a non-empty string, got " + Shown(**v));
    }
    return (*v)->get<std::string>();
  }

  StatusOr<bool> Bool(const Json& obj, const std::string& key,
                      const std::string& path) const {
    auto v = Get(obj, key, path);
    if (!v.ok()) return v.status();
    if (!(*v)->is_boolean()) {
      return Error(path + key, "expected true or false, got " + Shown(**v));
    }
    return (*v)->get<bool>();
  }

 private:
  std::string file_;
};

#define ASSIGN_OR_RETURN_IMPL(var, expr, tmp) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  var = std::move(tmp).value()
#define ASSIGN_CAT2(a, b) a##b
#define ASSIGN_CAT(a, b) ASSIGN_CAT2(a, b)
#define ASSIGN_OR_RETURN(var, expr) \
  ASSIGN_OR_RETURN_IMPL(var, expr, ASSIGN_CAT(status_or_, __LINE__))

std::string GavelKey(const std::string& name, int gpus) {
  return "('" + name + "', " + std::to_string(gpus) + ")";
}

constexpr const char* kSpreadKeys[kNumSpreads] = {
    "same_switch", "cross_switch", "cross_socket", "cross_server"};

}  // namespace

const char* GpuTypeName(GpuType type) {
  switch (type) {
    case GpuType::kK80:
      return "k80";
    case GpuType::kP100:
      return "p100";
    case GpuType::kV100:
      return "v100";
  }
  return "?";
}

core::StatusOr<GpuType> ParseGpuType(std::string_view name) {
  if (name == "k80") return GpuType::kK80;
  if (name == "p100") return GpuType::kP100;
  if (name == "v100") return GpuType::kV100;
  return InvalidArgument("unknown GPU type '" + std::string(name) +
                         "' (expected k80, p100 or v100)");
}

const char* SpreadName(Spread spread) {
  return kSpreadKeys[static_cast<int>(spread)];
}

const char* PackSourceName(PackSource source) {
  switch (source) {
    case PackSource::kMeasured:
      return "measured";
    case PackSource::kModelled:
      return "modelled";
    case PackSource::kInfeasible:
      return "infeasible";
  }
  return "?";
}

std::string DefaultDataDir() {
  const char* env = std::getenv("GANDIVA_DATA_DIR");
  if (env != nullptr && env[0] != '\0') return env;
  return GANDIVA_DEFAULT_DATA_DIR;
}

// Builds a Catalog from the two JSON documents.
class CatalogLoader {
 public:
  static StatusOr<Catalog> Load(const std::string& data_dir, GpuType gpu) {
    const std::string cat_path = data_dir + "/catalog/models.json";
    ASSIGN_OR_RETURN(Json cat, ReadJson(cat_path));
    const Fields f(cat_path);
    if (!cat.is_object()) return f.Error("", "expected a JSON object");
    ASSIGN_OR_RETURN(std::string format, f.String(cat, "format", ""));
    if (format != "gandiva-catalog-1") {
      return f.Error("format",
                     "expected \"gandiva-catalog-1\", got \"" + format + "\"");
    }
    ASSIGN_OR_RETURN(std::string gavel_rel,
                     f.String(cat, "gavel_throughputs", ""));
    const std::string gavel_path = data_dir + "/" + gavel_rel;
    ASSIGN_OR_RETURN(Json gavel_all, ReadJson(gavel_path));
    const char* gpu_name = GpuTypeName(gpu);
    if (!gavel_all.is_object() || !gavel_all.contains(gpu_name) ||
        !gavel_all.at(gpu_name).is_object()) {
      return InvalidArgument(gavel_path + ": field '" + gpu_name +
                             "': missing or not an object");
    }
    const Json& gavel = gavel_all.at(gpu_name);

    Catalog c;
    c.gpu_type_ = gpu;
    ASSIGN_OR_RETURN(const Json* mem, f.Get(cat, "gpu_memory_gb", ""));
    ASSIGN_OR_RETURN(c.gpu_memory_gb_,
                     f.Number(*mem, gpu_name, "gpu_memory_gb.", 0, 1000, true));
    ASSIGN_OR_RETURN(const Json* beyond, f.Get(cat, "beyond_server", ""));
    ASSIGN_OR_RETURN(
        double per_server,
        f.Number(*beyond, "gpus_per_server", "beyond_server.", 8, 8, false));
    (void)per_server;  // the table's measured part ends at 8 GPUs
    ASSIGN_OR_RETURN(std::string beyond_src,
                     f.String(*beyond, "source", "beyond_server."));
    ASSIGN_OR_RETURN(const Json* pm, f.Get(cat, "packing_model", ""));
    ASSIGN_OR_RETURN(double penalty, f.Number(*pm, "interference_penalty",
                                              "packing_model.", 0, 0.9, false));

    ASSIGN_OR_RETURN(const Json* fams, f.Get(cat, "families", ""));
    if (!fams->is_array() || fams->empty()) {
      return f.Error("families", "expected a non-empty array");
    }
    std::set<std::string> names;
    std::vector<bool> from_gavel;
    for (size_t fi = 0; fi < fams->size(); ++fi) {
      const Json& fam = (*fams)[fi];
      const std::string fp = "families[" + std::to_string(fi) + "].";
      ASSIGN_OR_RETURN(std::string family, f.String(fam, "family", fp));
      ASSIGN_OR_RETURN(std::string def, f.String(fam, "default_variant", fp));
      ASSIGN_OR_RETURN(bool multi, f.Bool(fam, "multi_gpu", fp));
      ASSIGN_OR_RETURN(double eff,
                       f.Number(fam, "scaling_efficiency", fp, 0.5, 1, true));
      ASSIGN_OR_RETURN(std::string scaling_src,
                       f.String(fam, "scaling_source", fp));
      ASSIGN_OR_RETURN(const Json* sp, f.Get(fam, "spread", fp));
      std::array<double, kNumSpreads> spread{};
      for (int s = 0; s < kNumSpreads; ++s) {
        ASSIGN_OR_RETURN(
            spread[static_cast<size_t>(s)],
            f.Number(*sp, kSpreadKeys[s], fp + "spread.", 0, 1, true));
        if (s == 0 && spread[0] != 1.0) {
          return f.Error(fp + "spread.same_switch",
                         "must be 1.0 (the reference placement)");
        }
        if (s > 0 && spread[static_cast<size_t>(s)] >
                         spread[static_cast<size_t>(s - 1)]) {
          return f.Error(fp + "spread." + kSpreadKeys[s],
                         std::string("must not exceed ") + kSpreadKeys[s - 1]);
        }
      }
      ASSIGN_OR_RETURN(std::string spread_src,
                       f.String(fam, "spread_source", fp));
      ASSIGN_OR_RETURN(const Json* vars, f.Get(fam, "variants", fp));
      if (!vars->is_array() || vars->empty()) {
        return f.Error(fp + "variants", "expected a non-empty array");
      }
      ModelId default_id = kNoModel;
      for (size_t vi = 0; vi < vars->size(); ++vi) {
        const Json& v = (*vars)[vi];
        const std::string vp = fp + "variants[" + std::to_string(vi) + "].";
        ModelInfo m;
        m.family = family;
        m.multi_gpu = multi;
        m.spread = spread;
        ASSIGN_OR_RETURN(m.name, f.String(v, "name", vp));
        if (!names.insert(m.name).second) {
          return f.Error(vp + "name", "duplicate name \"" + m.name + "\"");
        }
        ASSIGN_OR_RETURN(m.memory_gb,
                         f.Number(v, "memory_gb", vp, 0, 80, true));
        ASSIGN_OR_RETURN(m.utilization,
                         f.Number(v, "utilization", vp, 0, 1, true));
        ASSIGN_OR_RETURN(std::string src, f.String(v, "source", vp));
        ASSIGN_OR_RETURN(const Json* rates, f.Get(v, "rates", vp));
        const bool is_gavel = rates->is_string();
        if (is_gavel) {
          if (rates->get<std::string>() != "gavel") {
            return f.Error(vp + "rates",
                           "expected \"gavel\" or an object of per-GPU-type "
                           "1-GPU rates, got " +
                               Shown(*rates));
          }
          for (int k = 0; k < 4; ++k) {
            const std::string key = GavelKey(m.name, 1 << k);
            if (gavel.contains(key) && gavel.at(key).is_object() &&
                gavel.at(key).contains("null") &&
                gavel.at(key).at("null").is_number() &&
                gavel.at(key).at("null").get<double>() > 0) {
              m.rates_1_to_8[static_cast<size_t>(k)] =
                  gavel.at(key).at("null").get<double>();
              m.measured_1_to_8[static_cast<size_t>(k)] = true;
            } else if (k == 0) {
              return InvalidArgument(
                  gavel_path + ": field '" + std::string(gpu_name) + "." + key +
                  ".null': missing or not a positive number (" + cat_path +
                  " " + vp + "rates says \"gavel\")");
            } else {
              m.rates_1_to_8[static_cast<size_t>(k)] =
                  m.rates_1_to_8[static_cast<size_t>(k - 1)] * 2 * eff;
            }
          }
        } else {
          if (!rates->is_object()) {
            return f.Error(vp + "rates",
                           "expected \"gavel\" or an object of per-GPU-type "
                           "1-GPU rates, got " +
                               Shown(*rates));
          }
          ASSIGN_OR_RETURN(
              m.rates_1_to_8[0],
              f.Number(*rates, gpu_name, vp + "rates.", 0, 1e6, true));
          for (size_t k = 1; k < 4; ++k) {
            m.rates_1_to_8[k] = m.rates_1_to_8[k - 1] * 2 * eff;
          }
        }
        if (m.name == def) {
          m.family_default = true;
          default_id = static_cast<ModelId>(c.models_.size());
        }
        m.source = src + "; scaling: " + scaling_src +
                   " Above 8 GPUs: " + beyond_src + "; spread: " + spread_src;
        c.models_.push_back(std::move(m));
        from_gavel.push_back(is_gavel);
      }
      if (default_id == kNoModel) {
        return f.Error(fp + "default_variant",
                       "\"" + def + "\" is not one of the family's variants");
      }
      if (std::find(c.family_names_.begin(), c.family_names_.end(), family) !=
          c.family_names_.end()) {
        return f.Error(fp + "family", "duplicate family \"" + family + "\"");
      }
      c.family_names_.push_back(family);
      c.family_defaults_.push_back(default_id);
    }

    // Rate table: 1..8 from above, then each doubling keeps
    // (1 + cross_server) / 2 of linear scaling.
    const size_t n = c.models_.size();
    c.rates_.assign(n * Catalog::kRateSlots, 0.0);
    c.spread_.assign(n * kNumSpreads, 0.0);
    for (size_t i = 0; i < n; ++i) {
      const ModelInfo& m = c.models_[i];
      double* r = &c.rates_[i * Catalog::kRateSlots];
      for (size_t k = 0; k < 4; ++k) r[k] = m.rates_1_to_8[k];
      const double keep = (1.0 + m.spread[kNumSpreads - 1]) / 2.0;
      for (size_t k = 4; k < Catalog::kRateSlots; ++k) {
        r[k] = r[k - 1] * 2 * keep;
      }
      for (size_t s = 0; s < kNumSpreads; ++s) {
        c.spread_[i * kNumSpreads + s] = m.spread[s];
      }
    }

    // Packing table.
    c.pack_.assign(n * n, PackOutcome{});
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = 0; b < n; ++b) {
        const ModelInfo& ma = c.models_[a];
        const ModelInfo& mb = c.models_[b];
        PackOutcome& out = c.pack_[a * n + b];
        if (from_gavel[a] && from_gavel[b]) {
          const Json& ea = gavel.at(GavelKey(ma.name, 1));
          const std::string kb = GavelKey(mb.name, 1);
          if (ea.contains(kb)) {
            const Json& pair = ea.at(kb);
            if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number() ||
                !pair[1].is_number()) {
              return InvalidArgument(
                  gavel_path + ": field '" + std::string(gpu_name) + "." +
                  GavelKey(ma.name, 1) + "." + kb +
                  "': expected [self, other] rates, got " + Shown(pair));
            }
            const double ra = pair[0].get<double>();
            const double rb = pair[1].get<double>();
            if (ra <= 0 || rb <= 0) {
              out = {0.0, 0.0, PackSource::kInfeasible};
            } else {
              out = {ra / ma.rates_1_to_8[0], rb / mb.rates_1_to_8[0],
                     PackSource::kMeasured};
            }
            continue;
          }
        }
        if (ma.memory_gb + mb.memory_gb > c.gpu_memory_gb_) {
          out = {0.0, 0.0, PackSource::kInfeasible};
        } else {
          const double fct =
              std::min(1.0, 1.0 / (ma.utilization + mb.utilization)) *
              (1.0 - penalty);
          out = {fct, fct, PackSource::kModelled};
        }
      }
    }
    return c;
  }
};

core::StatusOr<Catalog> Catalog::Load(const std::string& data_dir,
                                      GpuType gpu_type) {
  return CatalogLoader::Load(data_dir, gpu_type);
}

const ModelInfo& Catalog::model(ModelId id) const {
  CheckId(id);
  return models_[static_cast<size_t>(id)];
}

std::optional<ModelId> Catalog::Find(std::string_view name) const {
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].name == name) return static_cast<ModelId>(i);
  }
  return std::nullopt;
}

std::optional<ModelId> Catalog::FindFamily(std::string_view family) const {
  for (size_t i = 0; i < family_names_.size(); ++i) {
    if (family_names_[i] == family) return family_defaults_[i];
  }
  return std::nullopt;
}

bool Catalog::IsMeasured(ModelId id, int gpus) const {
  CheckId(id);
  if (gpus <= 0 || gpus > 8 || (gpus & (gpus - 1)) != 0) return false;
  return models_[static_cast<size_t>(id)]
      .measured_1_to_8[static_cast<size_t>(FloorLog2(gpus))];
}

std::string Catalog::Describe() const {
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "catalog (%s, %.0f GB): %d models\n",
                GpuTypeName(gpu_type_), gpu_memory_gb_, size());
  os << buf;
  for (int i = 0; i < size(); ++i) {
    const ModelInfo& m = models_[static_cast<size_t>(i)];
    std::snprintf(buf, sizeof(buf),
                  "%2d %-34s%s rate/s 1:%.3g%s 2:%.3g%s 4:%.3g%s 8:%.3g%s "
                  "mem %.1fGB util %.2f spread %.2f/%.2f/%.2f/%.2f\n",
                  i, m.name.c_str(), m.family_default ? "*" : " ",
                  m.rates_1_to_8[0], m.measured_1_to_8[0] ? "" : "~",
                  m.rates_1_to_8[1], m.measured_1_to_8[1] ? "" : "~",
                  m.rates_1_to_8[2], m.measured_1_to_8[2] ? "" : "~",
                  m.rates_1_to_8[3], m.measured_1_to_8[3] ? "" : "~",
                  m.memory_gb, m.utilization, m.spread[0], m.spread[1],
                  m.spread[2], m.spread[3]);
    os << buf;
  }
  os << "(* family default; ~ extrapolated or estimated)\n";
  return os.str();
}

void Catalog::BadId(ModelId id) const {
  core::CheckFailed(__FILE__, __LINE__, "valid ModelId",
                    "model id " + std::to_string(id) + " not in [0, " +
                        std::to_string(models_.size()) + ")");
}

void Catalog::BadGpus(int gpus) {
  core::CheckFailed(__FILE__, __LINE__, "1 <= gpus <= kMaxGpus",
                    "gpus = " + std::to_string(gpus));
}

}  // namespace gandiva::sim
