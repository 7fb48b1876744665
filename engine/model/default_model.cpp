#include "engine/model/default_model.h"

#include <cstdlib>
#include <filesystem>

#ifndef SHOAL_SOURCE_MODELS_DIR
#define SHOAL_SOURCE_MODELS_DIR "models"
#endif

namespace shoal::model {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string();
}

}  // namespace

std::vector<std::string> defaultModelDirs() {
  std::vector<std::string> dirs;
  if (auto d = env("SHOAL_MODELS_DIR"); !d.empty()) dirs.push_back(d);
  dirs.emplace_back(SHOAL_SOURCE_MODELS_DIR);
  if (auto xdg = env("XDG_DATA_HOME"); !xdg.empty()) {
    dirs.push_back(xdg + "/shoal/models");
  } else if (auto home = env("HOME"); !home.empty()) {
    dirs.push_back(home + "/.local/share/shoal/models");
  }
  dirs.emplace_back("/var/lib/shoal/models");
  return dirs;
}

std::string defaultModelPath() {
  if (auto m = env("SHOAL_MODEL"); !m.empty()) return m;
  const auto dirs = defaultModelDirs();
  for (const auto& d : dirs) {
    const auto p = std::filesystem::path(d) / kDefaultModelFile;
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  return (std::filesystem::path(dirs.front()) / kDefaultModelFile).string();
}

}  // namespace shoal::model
