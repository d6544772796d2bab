// The synthetic workload of the Gandiva paper's cluster experiment (1,000
// jobs arriving over 2 hours on 180 GPUs, ten model types, heavy-tailed run
// times, hyper-parameter-search multi-jobs), generated deterministically from
// a seed. Also the model mix the Philly reader uses to give trace jobs a model
// type. Pure functions of their arguments: thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/status.h"
#include "core/time.h"
#include "sim/workload/catalog.h"
#include "sim/workload/workload.h"

namespace gandiva::sim {

// A model family (its catalog default variant) and its share of jobs.
struct ModelShare {
  std::string family;
  double weight = 0.0;
};

// The ten families of the paper's experiment and their shares (sum 1):
// ResNet-50 0.20 (the paper's running example); ResNet-18, VGG16,
// InceptionV3, Transformer, LM, DeepSpeech, CycleGAN 0.10 each;
// Recommendation, A3C 0.05 each (the least common in a vision- and
// language-heavy 2018 cluster). A judgement call, not a measurement.
std::vector<ModelShare> DefaultModelMix();

// Draws a family default by weight. A job on more than one GPU draws only
// among families marked multi_gpu in the catalog (all but A3C, whose
// CPU-bound rollouts make it a single-GPU job in practice), with the weights
// renormalised.
class ModelPicker {
 public:
  static core::StatusOr<ModelPicker> Make(const Catalog& catalog,
                                          const std::vector<ModelShare>& mix);
  ModelId Pick(core::Rng& rng, int gpus) const;

 private:
  std::vector<ModelId> ids_;
  std::vector<double> cum_all_;    // cumulative weights, all families
  std::vector<double> cum_multi_;  // cumulative weights, multi_gpu only
};

// A GPU count and its share of jobs.
struct GpuShare {
  int gpus = 1;
  double weight = 0.0;
};

struct SyntheticOptions {
  // Number of jobs. Default 1000 (the paper's experiment).
  int jobs = 1000;
  // GPUs of the cluster the workload is sized for. Default 180 (the paper's).
  int total_gpus = 180;
  // Arrival window. Default (zero): 2 h x (jobs / 1000) / (total_gpus / 180),
  // so the offered load per GPU is that of the paper's 1,000 jobs in 2 h on
  // 180 GPUs. Set it to override.
  core::Duration window = core::Duration();
  // Arrivals are a Poisson process over the window: each arrival (a single
  // job, or a whole multi-job) at a uniform time, sorted.
  //
  // Model families and their shares. Default DefaultModelMix().
  std::vector<ModelShare> model_mix = DefaultModelMix();
  // GPU counts (powers of two, at most one 8-GPU server) and their shares.
  // Default 1: 0.75, 2: 0.12, 4: 0.08, 8: 0.05: mostly 1 GPU as in Philly
  // (93% there), with more multi-GPU jobs so that locality matters.
  std::vector<GpuShare> gpu_mix = {{1, 0.75}, {2, 0.12}, {4, 0.08}, {8, 0.05}};
  // Run time (isolated, ideal placement): lognormal with this median and
  // log-space sigma, fitted to the Philly trace (data/philly: median 1,092 s;
  // p10 59 s and p90 10,503 s give sigma = ln(10503/59) / 2.563 = 2.0),
  // clamped to [min_duration, max_duration]. The 8 h cap cuts the top ~5%
  // (Philly's p99 is 70 h) so the default run ends within about a day.
  double duration_median_s = 1092.0;
  double duration_sigma = 2.0;
  core::Duration min_duration = core::Duration::Seconds(60);  // Pollux's rule
  core::Duration max_duration = core::Duration::Seconds(8 * 3600);
  // Fraction of jobs that arrive as hyper-parameter-search multi-jobs.
  // Default 0.2. A multi-job is group_min..group_max (uniform, default 4..16)
  // configurations of one model and GPU count, submitted together with a
  // shared `group`; each configuration's run time is the group's draw times
  // a lognormal(0, group_duration_sigma = 0.5) jitter, clamped as above.
  double multi_job_fraction = 0.2;
  int group_min = 4;
  int group_max = 16;
  double group_duration_sigma = 0.5;
  // Fraction of jobs that opt in to grow-shrink. Default 0.2.
  double elastic_fraction = 0.2;
  // Priority of every job. Default 0.
  int priority = 0;
  // Teams submitting: with 2 or more, each arrival (a job, or a whole
  // multi-job) is of team k (its vc "tenant-k", k from 0) with weight
  // 1 / (k + 1), so teams differ in size as they do in a shared cluster.
  // Default 0: no teams (vc empty). At most 1000.
  int tenants = 0;
  // Same seed, same options, same catalog: identical workload.
  uint64_t seed = 1;
};

// The window GenerateSynthetic uses for these options.
core::Duration EffectiveWindow(const SyntheticOptions& options);

// Checks options against the catalog (families exist, shares positive, GPU
// counts powers of two, ranges sensible). For options from user input.
core::Status ValidateSyntheticOptions(const Catalog& catalog,
                                      const SyntheticOptions& options);

// Generates the workload. Options must be valid (a failed
// ValidateSyntheticOptions is a program bug here and aborts). The
// description states the window, the mix and the oversubscription ratio
// (GPU-seconds demanded / (total_gpus x window)).
Workload GenerateSynthetic(const Catalog& catalog,
                           const SyntheticOptions& options);

}  // namespace gandiva::sim
