#include "lan/node/model_catalog.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lan/pool/sha256.h"

namespace shoal::lan {
namespace {

int64_t mtimeTicks(const std::filesystem::path& p) {
  return static_cast<int64_t>(std::filesystem::last_write_time(p).time_since_epoch().count());
}

nlohmann::json readCache(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return nlohmann::json::object();
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  // A damaged cache only costs a re-hash.
  return j.is_object() ? j : nlohmann::json::object();
}

void writeCache(const std::filesystem::path& file, const nlohmann::json& cache) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  const auto tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return;  // a cache we cannot write only slows the next start
    out << cache.dump(1);
  }
  std::filesystem::rename(tmp, file, ec);
}

}  // namespace

ModelCatalog::ModelCatalog(const std::filesystem::path& modelsDir,
                           const std::filesystem::path& configDir) {
  std::error_code ec;
  if (modelsDir.empty() || !std::filesystem::is_directory(modelsDir, ec)) return;
  const auto cacheFile = configDir / "model_hashes.json";
  nlohmann::json cache = readCache(cacheFile);
  bool changed = false;
  for (const auto& entry : std::filesystem::directory_iterator(modelsDir, ec)) {
    if (!entry.is_regular_file(ec) || entry.path().extension() != ".gguf") continue;
    LocalModel m;
    m.path = std::filesystem::absolute(entry.path(), ec);
    m.file = entry.path().filename().string();
    try {
      m.size = static_cast<uint64_t>(std::filesystem::file_size(m.path));
      const int64_t mtime = mtimeTicks(m.path);
      const std::string key = m.path.string();
      const auto it = cache.find(key);
      if (it != cache.end() && it->is_object() && it->value("size", uint64_t{0}) == m.size &&
          it->value("mtime", int64_t{0}) == mtime && it->value("sha256", "").size() == 64) {
        m.sha256 = (*it)["sha256"].get<std::string>();
      } else {
        m.sha256 = sha256FileHex(m.path);
        cache[key] = {{"size", m.size}, {"mtime", mtime}, {"sha256", m.sha256}};
        changed = true;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shoal-node: skipping model %s: %s\n", m.path.string().c_str(),
                   e.what());
      continue;
    }
    m_models.push_back(std::move(m));
  }
  std::sort(m_models.begin(), m_models.end(),
            [](const LocalModel& a, const LocalModel& b) { return a.file < b.file; });
  if (changed) writeCache(cacheFile, cache);
}

std::optional<LocalModel> ModelCatalog::findBySha256(const std::string& sha256) const {
  for (const auto& m : m_models) {
    if (m.sha256 == sha256) return m;
  }
  return std::nullopt;
}

}  // namespace shoal::lan
