#pragma once
// shoal-cli subcommands. Each lives in its own cmd_<name>.cpp and registers itself on the CLI11
// app; its callback does the work and returns through CliExit on failure.

#include <CLI/CLI.hpp>
#include <string>

namespace shoal::cli {

// Thrown by a command to end the program with a one-line message and an exit code
// (2 for bad input: unknown option, bad file; 1 for a runtime failure).
struct CliExit {
  int code;
  std::string message;
};

// The default model path (engine/model/default_model.h).
std::string defaultModelPath();

void registerGenerateCommand(CLI::App& app);
void registerChatCommand(CLI::App& app);
void registerTokenizeCommand(CLI::App& app);
void registerLogitsCommand(CLI::App& app);
void registerBenchCommand(CLI::App& app);
void registerInfoCommand(CLI::App& app);
void registerPlanCommand(CLI::App& app);
void registerDevicesCommand(CLI::App& app);
void registerPoolCommand(CLI::App& app);    // only in builds with lan/ (SHOAL_CLI_POOL)
void registerModelsCommand(CLI::App& app);  // only in builds with lan/hub (SHOAL_CLI_MODELS)

}  // namespace shoal::cli
