// Named experiments that reproduce the Gandiva paper's cluster results in the
// simulator: each runs several policies on one workload, in one process, and
// writes <out_dir>/<name>/ with report.md (tables, the comparison with the
// paper's number, the exact command and seed), SVG plots and one raw JSON
// summary per policy (the `gandiva sim --json` format).
//
//   cluster-180   1,000 synthetic jobs over 2 h on 180 GPUs: fifo,
//                 gandiva-timeslice, gandiva; utilisation (paper: +26%),
//                 JCT, time to first feedback.
//   trace-replay  the Philly VC 0e4a51 trace on 100 GPUs: fifo, gandiva;
//                 JCT, utilisation, migrations per hour (paper: 470, one
//                 every ~20 min).
//   automl        two Hyperband-style searches in a shared 100-GPU cluster
//                 with background load: fifo, gandiva-timeslice, gandiva;
//                 time until a configuration reaches 90% accuracy (paper:
//                 13.6x and 12.9x faster, 7x from time-slicing alone).
//
// A policy the registry does not know (one still being written) is skipped
// and named in the report. The same options give the same files, byte for
// byte. Not thread-safe with respect to the output directory; otherwise
// independent calls may run concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace gandiva::sim::experiments {

struct ExperimentInfo {
  std::string name;
  std::string summary;
};
std::vector<ExperimentInfo> KnownExperiments();

struct ExperimentOptions {
  std::string name;                     // one of KnownExperiments()
  std::string out_dir = "experiments";  // files go to out_dir/name/
  uint64_t seed = 1;
  // A smaller version of each experiment (seconds, for tests).
  bool quick = false;
  std::string data_dir;  // catalog and traces; empty: DefaultDataDir()
  // The command line that reproduces this run, quoted in the report. Empty:
  // the canonical `gandiva experiment ...` form of these options.
  std::string command;
  // Progress lines (one per policy run); may be empty.
  std::function<void(const std::string&)> log;
};

struct ExperimentOutput {
  std::string dir;                 // out_dir/name
  std::vector<std::string> files;  // written, relative to dir
  std::string report;              // the text of report.md
  std::string summary;             // a few lines for the terminal
};

// The canonical command line for `options`.
std::string CanonicalCommand(const ExperimentOptions& options);

core::StatusOr<ExperimentOutput> RunExperiment(
    const ExperimentOptions& options);

}  // namespace gandiva::sim::experiments
