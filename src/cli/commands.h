// Subcommands of the `gandiva` command line. Each Add* registers its
// subcommand(s) and options on the app; a subcommand's callback runs it and
// sets the process exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace gandiva::cli {

// `gandiva sim`: the simulator.
void AddSimCommand(CLI::App& app, int& exit_code);
// `gandiva experiment NAME`: the paper's experiments in the simulator.
void AddExperimentCommand(CLI::App& app, int& exit_code);

#ifdef GANDIVA_WITH_RUNTIME
// `gandiva submit|ls|show|logs|kill|suspend|resume|servers`: clients of the
// scheduler daemon (job_commands.cc).
void AddJobCommands(CLI::App& app, int& exit_code);
// `gandiva up|down`: a local cluster of background daemons
// (cluster_commands.cc).
void AddClusterCommands(CLI::App& app, int& exit_code);
// `gandiva user add|ls|rm|whoami`: the cluster's users (user_commands.cc).
void AddUserCommands(CLI::App& app, int& exit_code);
// `gandiva queues|usage`: how the cluster is shared (queue_commands.cc).
void AddQueueCommands(CLI::App& app, int& exit_code);
// `gandiva certs ca|issue`: certificates for mutual TLS (certs_command.cc).
void AddCertsCommand(CLI::App& app, int& exit_code);
#endif

}  // namespace gandiva::cli
