#pragma once
// Read-only view of a GGUF file (v2 or v3) over a memory mapping.
//
// Layout (ggml/docs/gguf.md): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count,
// kv_count × {string key, u32 value type, value}, tensor_count × {string name, u32 n_dims,
// n_dims × u64 dims, u32 type, u64 offset}, padding to `general.alignment` (default 32), then the
// tensor data section; each tensor's offset is relative to that section and aligned. Strings are
// u64 length + bytes (no terminator). v1 (u32 counts) is refused. Little-endian only.
//
// Every size, count and offset is validated before use; a malformed file throws shoal::Error
// with the field and the numbers involved. Nothing reads past the end of the buffer.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/gguf_value.h"
#include "engine/gguf/tensor_type.h"

namespace shoal::gguf {

// Thrown by File::fromHeader when the prefix ends inside the header: more bytes are needed.
class HeaderIncomplete : public Error {
 public:
  using Error::Error;
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  TensorType type = TensorType::F32;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the row length (contiguous)
  uint64_t offset = 0;        // relative to the data section
  size_t nbytes = 0;          // validated to lie inside the file
  // Points into the mapping (or the caller's buffer); valid while the File lives. Its file
  // offset is a multiple of the file's alignment (32 by default), and an mmap starts on a page,
  // so for open() it is aligned to that; fromBuffer() data is only as aligned as the buffer.
  const uint8_t* data = nullptr;

  int64_t elementCount() const;
  int64_t rows() const;  // product of dims[1..]
};

class File {
 public:
  // Map and parse a file. Throws shoal::Error ("<path>: <what is wrong>").
  static File open(const std::filesystem::path& path);
  // Parse a caller-owned buffer (tests, fuzzing). The buffer must outlive the File.
  static File fromBuffer(std::span<const uint8_t> bytes, std::string displayName = "<buffer>");
  // Parse the first bytes of a file of `wholeFileSize` bytes (a header fetched by a Range
  // request): metadata and tensor table are read and validated as by open(), tensor extents
  // against `wholeFileSize`; every TensorInfo::data is nullptr. Throws HeaderIncomplete when
  // `prefix` ends before the tensor table does (fetch more and try again), shoal::Error for
  // anything else wrong. The buffer must outlive the File.
  static File fromHeader(std::span<const uint8_t> prefix, uint64_t wholeFileSize,
                         std::string displayName = "<header>");

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  uint32_t version() const;
  size_t alignment() const;
  size_t fileSize() const;
  const std::string& displayName() const;

  const std::vector<KeyValue>& metadata() const;
  const Value* find(std::string_view key) const;  // nullptr when absent

  // Typed getters: throw shoal::Error naming the key if present with the wrong type;
  // the `Or` forms return the fallback when the key is absent.
  std::string getString(std::string_view key) const;
  std::string getStringOr(std::string_view key, std::string fallback) const;
  int64_t getInt(std::string_view key) const;
  int64_t getIntOr(std::string_view key, int64_t fallback) const;
  double getFloat(std::string_view key) const;
  double getFloatOr(std::string_view key, double fallback) const;
  bool getBoolOr(std::string_view key, bool fallback) const;

  const std::vector<TensorInfo>& tensors() const;
  const TensorInfo* findTensor(std::string_view name) const;  // nullptr when absent

  // Drops the whole pages of [p, p + bytes) that lie in the file mapping from the process's
  // resident set (a backend that copied those bytes elsewhere no longer holds them twice). The
  // data stays readable: a later read faults it back in from the file. Does nothing for a
  // File over a caller's buffer (fromBuffer, fromHeader), whose memory is not a file mapping.
  void releasePages(const uint8_t* p, size_t bytes) const;

 private:
  struct Impl;
  explicit File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace shoal::gguf
