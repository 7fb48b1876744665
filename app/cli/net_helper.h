#pragma once
// `shoal-cli pool` and `shoal-cli models` run in a helper executable, shoal-cli-net, that
// shoal-cli execs. Why: those two commands need TLS (OpenSSL), the HTTP server and the Hub client
// (libcurl with its ~25 dependencies); linked into shoal-cli they were loaded by every command,
// and a plain `shoal-cli generate` started with 13.6 MB resident before reading the model
// (llama-completion: 7.6 MB), which put its peak RSS on the 135 MB default model above
// llama.cpp's. The helper holds only these commands and shares the rest of the CLI's code.

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace shoal::cli {

// The commands the helper runs, with their one-line help (the helper registers the same text).
struct NetCommand {
  const char* name;
  const char* help;
};
inline constexpr NetCommand kNetCommands[] = {
    {"pool", "Coordinate a pool of LAN nodes"},
    {"models", "search, download and manage models (Hugging Face Hub)"},
};

// Whether argv[1] names one of kNetCommands.
bool isNetCommand(const char* word);

// The help line of the kNetCommands entry `name` (the helper's commands register it).
const char* netCommandHelp(const char* name);

// Where shoal-cli looks for the helper, in order: SHOAL_CLI_NET when set, then next to this
// executable (the build tree), then ../lib/shoal/ from it (an installed tree: /usr/lib/shoal).
std::vector<std::string> netHelperCandidates();

// Replaces this process with the helper, same arguments. Returns only on failure, with the
// one-line reason (no helper found where it looked, or the exec's error).
std::string execNetHelper(char** argv);

// Adds kNetCommands to shoal-cli's help as commands without options of their own (main execs the
// helper before parsing whenever one of them is asked for, so these never run).
void registerNetCommandNames(CLI::App& app);

}  // namespace shoal::cli
