#include "engine/model/default_model.h"

#include <cstdlib>
#include <filesystem>
#include <string_view>

// Both are compiled in by engine/model/CMakeLists.txt; the fallbacks keep other builds working
// (no source models dir: a build path can never match a real executable's path).
#ifndef SHOAL_SOURCE_MODELS_DIR
#define SHOAL_SOURCE_MODELS_DIR ""
#endif
#ifndef SHOAL_BUILD_DIR
#define SHOAL_BUILD_DIR ""
#endif

namespace shoal::model {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string();
}

// The XDG Base Directory spec: relative paths in these variables are invalid and ignored.
bool absolute(const std::string& p) { return !p.empty() && p.front() == '/'; }

// "/usr/share/" -> "/usr/share", so that appending "/shoal/models" gives one clean path.
std::string withoutTrailingSlash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// Whether `inner` is `outer` or lies below it, comparing whole path components.
bool isWithin(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

}  // namespace

bool runsFromBuildTree() {
  const std::string_view build = SHOAL_BUILD_DIR;
  if (build.empty()) return false;
  std::error_code ec;
  const fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (ec) return false;
  const fs::path root = fs::weakly_canonical(fs::path(build), ec);
  if (ec) return false;
  return isWithin(exe, root);
}

std::string userModelsDir() {
  if (auto xdg = env("XDG_DATA_HOME"); absolute(xdg)) {
    return withoutTrailingSlash(xdg) + "/shoal/models";
  }
  if (auto home = env("HOME"); !home.empty()) return home + "/.local/share/shoal/models";
  return {};
}

std::vector<std::string> defaultModelDirs() {
  std::vector<std::string> dirs;
  if (auto d = env("SHOAL_MODELS_DIR"); !d.empty()) dirs.push_back(d);
  // The source tree's models/ is a path on the machine that built this binary. A .deb built
  // there and installed in /usr/bin still carries the string, and on that machine (or any with
  // the same path) the installed program would quietly use the developer's model instead of
  // the user's: the packaging test could never see a first run. So it counts only for the
  // binaries of a build tree, run from there (ctest, ./build/app/cli/shoal-cli).
  if (const std::string_view src = SHOAL_SOURCE_MODELS_DIR; !src.empty() && runsFromBuildTree()) {
    dirs.emplace_back(src);
  }
  if (auto user = userModelsDir(); !user.empty()) dirs.push_back(user);
  std::string dataDirs = env("XDG_DATA_DIRS");
  if (dataDirs.empty()) dataDirs = "/usr/local/share:/usr/share";
  for (size_t begin = 0; begin <= dataDirs.size();) {
    size_t end = dataDirs.find(':', begin);
    if (end == std::string::npos) end = dataDirs.size();
    const std::string d = dataDirs.substr(begin, end - begin);
    if (absolute(d)) dirs.push_back(withoutTrailingSlash(d) + "/shoal/models");
    begin = end + 1;
  }
  dirs.emplace_back("/var/lib/shoal/models");
  return dirs;
}

std::string defaultModelPath() {
  if (auto m = env("SHOAL_MODEL"); !m.empty()) return m;
  const auto dirs = defaultModelDirs();
  for (const auto& d : dirs) {
    const auto p = fs::path(d) / kDefaultModelFile;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return (fs::path(dirs.front()) / kDefaultModelFile).string();
}

}  // namespace shoal::model
