#include "sim/workload/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gandiva::sim {
namespace {

using core::Duration;
using core::InvalidArgument;
using core::Rng;
using core::Status;
using core::Time;

// Independent random streams per purpose, so that changing one aspect of
// the options does not reshuffle the others.
enum Stream : uint64_t {
  kStreamShape = 1,  // group sizes and GPU counts and models
  kStreamDuration = 2,
  kStreamArrival = 3,
  kStreamElastic = 4,
  kStreamTenant = 5,
};

size_t PickIndex(Rng& rng, const std::vector<double>& cum) {
  const double u = rng.Uniform() * cum.back();
  const auto it = std::upper_bound(cum.begin(), cum.end(), u);
  return std::min(static_cast<size_t>(it - cum.begin()), cum.size() - 1);
}

bool IsPowerOfTwo(int x) { return x > 0 && (x & (x - 1)) == 0; }

}  // namespace

std::vector<ModelShare> DefaultModelMix() {
  return {{"ResNet-50", 0.20},   {"ResNet-18", 0.10},      {"VGG16", 0.10},
          {"InceptionV3", 0.10}, {"Transformer", 0.10},    {"LM", 0.10},
          {"DeepSpeech", 0.10},  {"Recommendation", 0.05}, {"A3C", 0.05},
          {"CycleGAN", 0.10}};
}

core::StatusOr<ModelPicker> ModelPicker::Make(
    const Catalog& catalog, const std::vector<ModelShare>& mix) {
  ModelPicker p;
  double all = 0.0;
  double multi = 0.0;
  for (const ModelShare& s : mix) {
    const auto id = catalog.FindFamily(s.family);
    if (!id) {
      return InvalidArgument("model mix: family '" + s.family +
                             "' is not in the catalog");
    }
    if (!(s.weight > 0.0) || !std::isfinite(s.weight)) {
      return InvalidArgument("model mix: family '" + s.family +
                             "': weight must be positive");
    }
    p.ids_.push_back(*id);
    all += s.weight;
    if (catalog.model(*id).multi_gpu) multi += s.weight;
    p.cum_all_.push_back(all);
    p.cum_multi_.push_back(multi);
  }
  if (p.ids_.empty()) return InvalidArgument("model mix: empty");
  if (multi <= 0.0) {
    return InvalidArgument("model mix: no family can run multi-GPU jobs");
  }
  return p;
}

ModelId ModelPicker::Pick(Rng& rng, int gpus) const {
  return ids_[PickIndex(rng, gpus > 1 ? cum_multi_ : cum_all_)];
}

Duration EffectiveWindow(const SyntheticOptions& o) {
  if (o.window > Duration()) return o.window;
  const double s = 7200.0 * (o.jobs / 1000.0) / (o.total_gpus / 180.0);
  return Duration::FromSeconds(s);
}

Status ValidateSyntheticOptions(const Catalog& catalog,
                                const SyntheticOptions& o) {
  if (o.jobs <= 0) return InvalidArgument("synthetic: jobs must be positive");
  if (o.total_gpus <= 0) {
    return InvalidArgument("synthetic: total_gpus must be positive");
  }
  if (o.window < Duration()) {
    return InvalidArgument("synthetic: window must not be negative");
  }
  auto picker = ModelPicker::Make(catalog, o.model_mix);
  if (!picker.ok()) return picker.status();
  if (o.gpu_mix.empty()) return InvalidArgument("synthetic: gpu_mix empty");
  for (const GpuShare& g : o.gpu_mix) {
    if (!IsPowerOfTwo(g.gpus) || g.gpus > Catalog::kMaxGpus) {
      return InvalidArgument("synthetic: gpu_mix: " + std::to_string(g.gpus) +
                             " is not a power of two in [1, 1024]");
    }
    if (!(g.weight > 0.0) || !std::isfinite(g.weight)) {
      return InvalidArgument("synthetic: gpu_mix: weights must be positive");
    }
  }
  if (!(o.duration_median_s > 0) || !(o.duration_sigma >= 0) ||
      !(o.group_duration_sigma >= 0)) {
    return InvalidArgument(
        "synthetic: duration median must be positive, sigmas non-negative");
  }
  if (o.min_duration <= Duration() || o.max_duration < o.min_duration) {
    return InvalidArgument("synthetic: need 0 < min_duration <= max_duration");
  }
  if (!(o.multi_job_fraction >= 0 && o.multi_job_fraction <= 1) ||
      !(o.elastic_fraction >= 0 && o.elastic_fraction <= 1)) {
    return InvalidArgument("synthetic: fractions must be in [0, 1]");
  }
  if (o.tenants < 0 || o.tenants > 1000) {
    return InvalidArgument("synthetic: tenants must be in [0, 1000], got " +
                           std::to_string(o.tenants));
  }
  if (o.group_min < 2 || o.group_max < o.group_min) {
    return InvalidArgument("synthetic: need 2 <= group_min <= group_max");
  }
  return Status::Ok();
}

Workload GenerateSynthetic(const Catalog& catalog, const SyntheticOptions& o) {
  const Status valid = ValidateSyntheticOptions(catalog, o);
  GANDIVA_CHECK_MSG(valid.ok(), valid.ToString());
  const ModelPicker picker = *ModelPicker::Make(catalog, o.model_mix);
  std::vector<double> gpu_cum;
  double acc = 0.0;
  for (const GpuShare& g : o.gpu_mix) gpu_cum.push_back(acc += g.weight);

  Rng shape = Rng::Derive(o.seed, kStreamShape);
  Rng dur_rng = Rng::Derive(o.seed, kStreamDuration);
  Rng arrival = Rng::Derive(o.seed, kStreamArrival);
  Rng elastic = Rng::Derive(o.seed, kStreamElastic);
  Rng tenant = Rng::Derive(o.seed, kStreamTenant);
  std::vector<double> tenant_cum;
  for (int k = 0; k < (o.tenants >= 2 ? o.tenants : 0); ++k) {
    tenant_cum.push_back((tenant_cum.empty() ? 0.0 : tenant_cum.back()) +
                         1.0 / (k + 1));
  }
  const double mu = std::log(o.duration_median_s);
  auto clamp = [&](double s) {
    const Duration d = Duration::FromSeconds(s);
    return std::clamp(d, o.min_duration, o.max_duration);
  };

  // Arrival units: a single job or a whole multi-job. A unit is a multi-job
  // with probability chosen so that about multi_job_fraction of the jobs
  // are in multi-jobs: p / (p + (1 - p) / mean_group) = fraction.
  const double mean_group = (o.group_min + o.group_max) / 2.0;
  const double f = o.multi_job_fraction;
  const double p_group = f >= 1.0 ? 1.0 : f / (f + (1.0 - f) * mean_group);
  struct Unit {
    size_t first;
    size_t count;
  };
  std::vector<Unit> units;
  std::vector<TraceJob> jobs;
  jobs.reserve(static_cast<size_t>(o.jobs));
  int groups = 0;
  while (jobs.size() < static_cast<size_t>(o.jobs)) {
    const size_t left = static_cast<size_t>(o.jobs) - jobs.size();
    const bool is_group = f > 0.0 && shape.Bernoulli(p_group);
    size_t count = 1;
    if (is_group) {
      count = static_cast<size_t>(o.group_min) +
              shape.Below(static_cast<uint64_t>(o.group_max - o.group_min + 1));
      count = std::min(count, left);
    }
    const int gpus = o.gpu_mix[PickIndex(shape, gpu_cum)].gpus;
    const ModelId model = picker.Pick(shape, gpus);
    const double base = mu + o.duration_sigma * dur_rng.Normal();
    std::string group;
    if (is_group) group = "hp" + std::to_string(groups++);
    std::string vc;
    if (!tenant_cum.empty()) {
      vc = "tenant-" + std::to_string(PickIndex(tenant, tenant_cum));
    }
    units.push_back({jobs.size(), count});
    for (size_t k = 0; k < count; ++k) {
      TraceJob j;
      j.gpus = gpus;
      j.model = model;
      j.priority = o.priority;
      j.group = group;
      j.vc = vc;
      double log_s = base;
      if (is_group) log_s += o.group_duration_sigma * dur_rng.Normal();
      j.duration = clamp(std::exp(log_s));
      j.elastic = elastic.Bernoulli(o.elastic_fraction);
      jobs.push_back(std::move(j));
    }
  }

  const Duration window = EffectiveWindow(o);
  std::vector<int64_t> times(units.size());
  for (auto& t : times) {
    t = static_cast<int64_t>(arrival.Uniform() *
                             static_cast<double>(window.micros()));
  }
  std::sort(times.begin(), times.end());
  // Units arrive in generation order at the sorted times; names follow
  // submit order.
  for (size_t u = 0; u < units.size(); ++u) {
    for (size_t k = 0; k < units[u].count; ++k) {
      jobs[units[u].first + k].submit = Time::FromMicros(times[u]);
    }
  }
  Workload w;
  w.jobs = std::move(jobs);
  SortBySubmit(w.jobs);
  int elastic_jobs = 0;
  int in_groups = 0;
  int by_gpus[11] = {};
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    TraceJob& j = w.jobs[i];
    j.name = "job" + std::to_string(i);
    elastic_jobs += j.elastic ? 1 : 0;
    in_groups += j.group.empty() ? 0 : 1;
    ++by_gpus[31 - __builtin_clz(static_cast<unsigned>(j.gpus))];
  }
  const double demand = TotalGpuSeconds(w);
  const double capacity = o.total_gpus * window.seconds();
  char buf[512];
  std::snprintf(
      buf, sizeof(buf),
      "synthetic: %d jobs over %s for %d GPUs (seed %llu); %d multi-jobs "
      "holding %d jobs; %d elastic; GPUs 1:%d 2:%d 4:%d 8:%d other:%d; "
      "demand %.0f GPU-h = %.2fx the cluster's %.0f GPU-h in the window%s",
      o.jobs, core::FormatDuration(window).c_str(), o.total_gpus,
      static_cast<unsigned long long>(o.seed), groups, in_groups, elastic_jobs,
      by_gpus[0], by_gpus[1], by_gpus[2], by_gpus[3],
      static_cast<int>(w.jobs.size()) - by_gpus[0] - by_gpus[1] - by_gpus[2] -
          by_gpus[3],
      demand / 3600.0, demand / capacity, capacity / 3600.0,
      o.tenants >= 2 ? ("; " + std::to_string(o.tenants) + " tenants").c_str()
                     : "");
  w.description = buf;
  return w;
}

}  // namespace gandiva::sim
