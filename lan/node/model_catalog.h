#pragma once
// The GGUF models a node can load from its own disk, named by the SHA-256 of the file (how the
// coordinator names a model on the wire). Hashes are cached in <configDir>/model_hashes.json
// keyed by absolute path, size and modification time, so a restart does not re-read every file.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace shoal::lan {

struct LocalModel {
  std::filesystem::path path;
  std::string file;    // file name, as node_info reports it
  std::string sha256;  // lowercase hex of the whole file
  uint64_t size = 0;
};

class ModelCatalog {
 public:
  // Scan `modelsDir` (not recursive) for *.gguf files now, hashing the ones the cache does not
  // know. An empty or missing directory gives an empty catalog. Unreadable files are skipped
  // with a line on stderr. The cache file is rewritten (temp + rename) when it changed.
  ModelCatalog(const std::filesystem::path& modelsDir, const std::filesystem::path& configDir);

  const std::vector<LocalModel>& models() const { return m_models; }
  std::optional<LocalModel> findBySha256(const std::string& sha256) const;

 private:
  std::vector<LocalModel> m_models;
};

}  // namespace shoal::lan
