// shoal-cli: run, inspect and benchmark models from the terminal.
// Exit codes: 0 success, 1 runtime failure, 2 bad input (unknown option, bad file, bad value).
// Compiled twice: shoal-cli (SHOAL_CLI_NET_HELPER: `pool` and `models` exec the helper) and the
// helper shoal-cli-net (SHOAL_CLI_NET_MAIN: only those two commands), see net_helper.h.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "app/cli/commands.h"
#include "app/cli/net_helper.h"
#include "engine/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "Shoal command-line tool: generate, chat, tokenize, logits, bench, info, plan, devices",
      "shoal-cli"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shoal-cli 0.1.0");
#ifndef SHOAL_CLI_NET_MAIN
  shoal::cli::registerGenerateCommand(app);
  shoal::cli::registerChatCommand(app);
  shoal::cli::registerTokenizeCommand(app);
  shoal::cli::registerLogitsCommand(app);
  shoal::cli::registerBenchCommand(app);
  shoal::cli::registerInfoCommand(app);
  shoal::cli::registerDevicesCommand(app);
  shoal::cli::registerPlanCommand(app);
#endif
#ifdef SHOAL_CLI_NET_HELPER
  if (argc > 1 && shoal::cli::isNetCommand(argv[1])) {
    const std::string why = shoal::cli::execNetHelper(argv);  // returns only on failure
    std::fprintf(stderr, "shoal-cli: error: %s\n", why.c_str());
    return 1;
  }
  shoal::cli::registerNetCommandNames(app);
#endif
#ifdef SHOAL_CLI_POOL
  shoal::cli::registerPoolCommand(app);
#endif
#ifdef SHOAL_CLI_MODELS
  shoal::cli::registerModelsCommand(app);
#endif
  // CLI11 reports an unknown first word as "a subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) known = known || sub->get_name() == argv[1];
    if (!known) {
      std::fprintf(stderr, "shoal-cli: error: unknown command '%s' (see --help)\n", argv[1]);
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "shoal-cli: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const shoal::cli::CliExit& e) {
    if (!e.message.empty()) std::fprintf(stderr, "shoal-cli: error: %s\n", e.message.c_str());
    return e.code;
  } catch (const shoal::Error& e) {
    std::fprintf(stderr, "shoal-cli: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shoal-cli: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
