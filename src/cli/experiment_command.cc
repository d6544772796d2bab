// `gandiva experiment NAME`: run one of the named experiments that reproduce
// the paper's cluster results (sim/experiments/experiments.h) and write its
// report, plots and raw JSON under --out.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "sim/experiments/experiments.h"

namespace gandiva::cli {
namespace {

struct ExperimentFlags {
  std::string name;
  std::string out = "experiments";
  uint64_t seed = 1;
  bool quick = false;
  std::string data_dir;
};

int RunExperimentCommand(const ExperimentFlags& f) {
  sim::experiments::ExperimentOptions o;
  o.name = f.name;
  o.out_dir = f.out;
  o.seed = f.seed;
  o.quick = f.quick;
  o.data_dir = f.data_dir;
  o.log = [&f](const std::string& line) {
    std::fprintf(stderr, "%s: %s\n", f.name.c_str(), line.c_str());
  };
  auto out = sim::experiments::RunExperiment(o);
  if (!out.ok()) {
    std::fprintf(stderr, "gandiva experiment: %s\n",
                 out.status().ToString().c_str());
    return out.status().code() == core::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::printf("%s\n", out->summary.c_str());
  return 0;
}

}  // namespace

void AddExperimentCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ExperimentFlags>();
  std::string help =
      "Run a named experiment that compares policies and "
      "writes a report. Experiments:";
  std::vector<std::string> names;
  for (const auto& e : sim::experiments::KnownExperiments()) {
    help += "\n  " + e.name + ": " + e.summary;
    names.push_back(e.name);
  }
  CLI::App* cmd = app.add_subcommand("experiment", help);
  cmd->add_option("name", flags->name, "Experiment to run")
      ->required()
      ->check(CLI::IsMember(names));
  cmd->add_option("--out", flags->out,
                  "Output directory (the experiment writes OUT/NAME/)")
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Seed for every random choice")
      ->capture_default_str();
  cmd->add_flag("--quick", flags->quick,
                "A smaller version of the experiment (seconds)");
  cmd->add_option("--data-dir", flags->data_dir,
                  "Where the catalog and traces are (default: "
                  "$GANDIVA_DATA_DIR or the built-in path)");
  cmd->callback(
      [flags, &exit_code] { exit_code = RunExperimentCommand(*flags); });
}

}  // namespace gandiva::cli
