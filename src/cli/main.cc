// `gandiva`: the command line of the gandiva scheduler.
#include <cstdio>

#include "cli/commands.h"
#include "core/policies/registry.h"

int main(int argc, char** argv) {
  CLI::App app{
      "gandiva: introspective cluster scheduling for deep-learning training"};
  app.require_subcommand(1);
  int exit_code = 0;
  gandiva::cli::AddSimCommand(app, exit_code);
  gandiva::cli::AddExperimentCommand(app, exit_code);
#ifdef GANDIVA_WITH_RUNTIME
  gandiva::cli::AddClusterCommands(app, exit_code);
  gandiva::cli::AddJobCommands(app, exit_code);
  gandiva::cli::AddQueueCommands(app, exit_code);
  gandiva::cli::AddUserCommands(app, exit_code);
  gandiva::cli::AddCertsCommand(app, exit_code);
#endif
  auto* policies = app.add_subcommand("policies", "List the known policies");
  policies->callback([] {
    for (const auto& p : gandiva::core::KnownPolicies()) {
      std::printf("%-18s %s%s\n", p.name.c_str(), p.summary.c_str(),
                  p.simulator_only ? " (simulator only)" : "");
    }
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and succeeds; a usage error (an unknown flag, a missing
    // or malformed argument) prints why and exits 2, whichever it is.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}
