// Readers for the public GPU-cluster traces shipped in data/: the Philly job
// summary (Pollux artifact), Gavel's per-VC Philly traces and the Tiresias
// sample. Each returns a Workload whose jobs are sorted by submit time, with
// submit times relative to the earliest kept job, or an error naming the
// file, the line, the field and the problem
// ("philly.csv:12: field 'num_gpus': expected a positive integer, got 'x'");
// nothing half-read is returned. Pure functions: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/time.h"
#include "sim/workload/catalog.h"
#include "sim/workload/synthetic.h"
#include "sim/workload/workload.h"

namespace gandiva::sim {

// The longest time a trace may give (a submit time from the trace's start,
// a duration): 10^9 s, about 31 years. A row past it is refused, naming it,
// rather than overflowing the simulator's clock (microseconds in 64 bits,
// which a job stretched by time-slicing must still fit in).
inline constexpr double kMaxTraceSeconds = 1e9;

// Philly (data/philly/philly_jobs_excl_6c71a0.csv): header
// "timestamp,duration,num_gpus,gpu_time,cluster"; timestamp
// "YYYY-MM-DD HH:MM:SS", duration in seconds (> 0), num_gpus a positive
// integer, gpu_time a number (checked, unused), cluster the VC hash.
//
// The file is not sorted; jobs are filtered, stable-sorted by timestamp
// (ties keep file order), cut to max_jobs, and re-based so the first is at 0.
// GPU counts that are not powers of two (12, 24) are rounded up to the next
// power of two and counted in the description.
//
// Philly has no model type. The i-th kept job (in sorted order) gets one
// drawn from Rng::Derive(seed, i) with ModelPicker over model_mix: the same
// seed and filters give the same types, independent of file order. Jobs on
// more than one GPU draw only multi_gpu families. Run times come from the
// trace, so the type only sets a job's rate, locality and packing behaviour.
struct PhillyOptions {
  std::string vc;  // keep only this virtual cluster; empty: all
  // Drop jobs that ran less than this. Default 0 (keep all). Pollux's
  // workload.py uses 60 s (7,305 rows are shorter).
  core::Duration min_duration = core::Duration();
  // Drop jobs with gpu_time at or above this many GPU-hours. Default 0 (no
  // limit). Pollux uses 1000.
  double max_gpu_hours = 0.0;
  size_t max_jobs = 0;  // first N by submit time after filtering; 0: all
  uint64_t seed = 1;    // model-type assignment
  std::vector<ModelShare> model_mix = DefaultModelMix();
};
core::StatusOr<Workload> ReadPhillyTrace(const std::string& path,
                                         const Catalog& catalog,
                                         const PhillyOptions& options = {});

// Gavel (data/gavel/seed0/<vc>.trace): 7 tab-separated columns, no header:
// job_type, command, num_steps_arg, needs_data_dir (0/1), total_steps (> 0),
// arrival_time (s, >= 0), scale_factor (#GPUs). job_type is the catalog
// entry of the same name; duration = total_steps / IsolatedRate(type, scale)
// (Gavel's steps are mini-batches). A (type, scale) pair Gavel did not
// measure (1,485 of the 13,264 shipped rows) is an error unless skip_unknown,
// which drops the row and counts it in the description. vc = the file name
// without directory and ".trace". Submit = arrival_time, re-based to the
// earliest kept job.
struct GavelOptions {
  bool skip_unknown = false;
};
core::StatusOr<Workload> ReadGavelTrace(const std::string& path,
                                        const Catalog& catalog,
                                        const GavelOptions& options = {});

// Tiresias (data/tiresias/60_job.csv): header
// "job_id,num_gpu,submit_time,iterations,model_name,duration,interval".
// Model names map to the nearest catalog family by architecture: vgg*,
// alexnet -> VGG16 (large fully-connected layers, communication-heavy);
// resnet18/resnet34 -> ResNet-18; other resnet* -> ResNet-50;
// inception*, googlenet -> InceptionV3 (GoogLeNet is Inception v1). The
// duration column is the run time; iterations and interval are checked and
// unused. Job names are "tiresias-<job_id>".
core::StatusOr<Workload> ReadTiresiasTrace(const std::string& path,
                                           const Catalog& catalog);

// The Tiresias name mapping above; empty if the name is not recognised.
std::string TiresiasFamily(const std::string& model_name);

}  // namespace gandiva::sim
