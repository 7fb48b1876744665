#pragma once
// Writes GGUF v3 files: metadata in insertion order, tensors aligned to `general.alignment`
// (32 unless set). Used by tests and tools to write synthetic models, and by the LAN layer to
// cache weight shards.

#include <cstdint>
#include <filesystem>
#include <functional>
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

  // Produces rows of a streamed tensor: write `rowCount` rows starting at row `firstRow` into
  // `dst` (rowCount * rowBytes(type, dims[0]) bytes). Called in row order, in chunks of about
  // kStreamChunkBytes, once per toBytes()/write(); it must give the same bytes every time.
  using RowFiller = std::function<void(int64_t firstRow, int64_t rowCount, uint8_t* dst)>;
  static constexpr size_t kStreamChunkBytes = size_t{16} << 20;
  // Add a tensor whose bytes are generated while writing, so a multi-GB model never has to be
  // held in memory. Same validation as addTensor.
  void addTensorStreamed(const std::string& name, TensorType type, std::vector<int64_t> dims,
                         RowFiller fill);

  // Serialize everything; write() goes through a temporary file and a rename, so a crash never
  // leaves a half-written file under the final name.
  std::vector<uint8_t> toBytes() const;
  void write(const std::filesystem::path& path) const;

 private:
  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes;  // empty when `fill` produces the bytes
    RowFiller fill;
    size_t nbytes = 0;
  };
  using Sink = std::function<void(const uint8_t* data, size_t size)>;
  void checkNewTensor(const std::string& name, TensorType type,
                      const std::vector<int64_t>& dims) const;
  size_t alignment() const;
  void serialize(const Sink& sink) const;
  std::vector<std::pair<std::string, Value>> m_metadata;
  std::vector<PendingTensor> m_tensors;
};

}  // namespace shoal::gguf
