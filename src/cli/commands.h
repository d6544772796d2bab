// Subcommands of the `gandiva` command line. Each Add* registers its
// subcommand and options on the app; the subcommand's callback runs it and
// sets the process exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace gandiva::cli {

void AddSimCommand(CLI::App& app, int& exit_code);

}  // namespace gandiva::cli
