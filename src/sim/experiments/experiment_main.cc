// `gandiva-experiment`: the `gandiva experiment` subcommand on its own, for
// running the experiments without the full `gandiva` command.
#include <CLI/CLI.hpp>

namespace gandiva::cli {
void AddExperimentCommand(CLI::App& app, int& exit_code);
}  // namespace gandiva::cli

int main(int argc, char** argv) {
  CLI::App app{"gandiva-experiment: reproduce the Gandiva paper's experiments"};
  app.require_subcommand(1);
  int exit_code = 0;
  gandiva::cli::AddExperimentCommand(app, exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
