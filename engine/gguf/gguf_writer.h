#pragma once
// Writes GGUF v3 files: metadata in insertion order, tensors aligned to `general.alignment`
// (32 unless set). Used by tests and tools to write synthetic models, and by the LAN layer to
// cache weight shards.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/gguf/gguf_value.h"
#include "engine/gguf/tensor_type.h"

namespace shoal::gguf {

class Writer {
 public:
  // Set (or replace) a metadata key.
  void set(const std::string& key, Value value);
  // Add a tensor; `bytes` must be exactly rowBytes(type, dims[0]) * rows. Throws otherwise.
  void addTensor(const std::string& name, TensorType type, std::vector<int64_t> dims,
                 std::vector<uint8_t> bytes);

  // Serialize everything; write() goes through a temporary file and a rename, so a crash never
  // leaves a half-written file under the final name.
  std::vector<uint8_t> toBytes() const;
  void write(const std::filesystem::path& path) const;

 private:
  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes;
  };
  std::vector<std::pair<std::string, Value>> m_metadata;
  std::vector<PendingTensor> m_tensors;
};

}  // namespace shoal::gguf
