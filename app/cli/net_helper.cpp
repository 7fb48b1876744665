#include "app/cli/net_helper.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace shoal::cli {
namespace fs = std::filesystem;

namespace {
constexpr const char* kHelperName = "shoal-cli-net";
}  // namespace

bool isNetCommand(const char* word) {
  for (const NetCommand& c : kNetCommands) {
    if (std::strcmp(word, c.name) == 0) return true;
  }
  return false;
}

const char* netCommandHelp(const char* name) {
  for (const NetCommand& c : kNetCommands) {
    if (std::strcmp(name, c.name) == 0) return c.help;
  }
  return "";
}

std::vector<std::string> netHelperCandidates() {
  if (const char* env = std::getenv("SHOAL_CLI_NET"); env && *env) return {env};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const fs::path dir = exe.parent_path();
  return {(dir / kHelperName).string(),
          (dir / ".." / "lib" / "shoal" / kHelperName).lexically_normal().string()};
}

std::string execNetHelper(char** argv) {
  std::string tried;
  for (const std::string& path : netHelperCandidates()) {
    if (::access(path.c_str(), X_OK) != 0) {
      tried += (tried.empty() ? "" : ", ") + path;
      continue;
    }
    ::execv(path.c_str(), argv);
    return "cannot run " + path + ": " + std::strerror(errno);
  }
  return std::string("'") + argv[1] + "' needs " + kHelperName + ", not found (looked for " +
         (tried.empty() ? std::string("it next to shoal-cli") : tried) + ")";
}

void registerNetCommandNames(CLI::App& app) {
  for (const NetCommand& c : kNetCommands) {
    app.add_subcommand(c.name, c.help)->allow_extras();
  }
}

}  // namespace shoal::cli
