#pragma once
// Builds GGUF bytes field by field, so tests can write files the Writer would refuse to produce
// (wrong counts, bad offsets, unknown types...). Little-endian, like the format.

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace shoal::gguf::test {

class GgufBytes {
 public:
  GgufBytes& u8(uint8_t v) { return raw(&v, 1); }
  GgufBytes& u32(uint32_t v) { return raw(&v, 4); }
  GgufBytes& u64(uint64_t v) { return raw(&v, 8); }
  GgufBytes& str(std::string_view s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  GgufBytes& raw(const void* data, size_t size) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes.insert(bytes.end(), p, p + size);
    return *this;
  }
  GgufBytes& zeros(size_t n) {
    bytes.resize(bytes.size() + n, 0);
    return *this;
  }
  GgufBytes& alignTo(size_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
    return *this;
  }

  // "GGUF", version, tensor count, kv count.
  GgufBytes& header(uint32_t version, uint64_t tensorCount, uint64_t kvCount) {
    return u32(0x46554747).u32(version).u64(tensorCount).u64(kvCount);
  }
  // A u32 metadata entry (value type 4).
  GgufBytes& kvU32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  // A string metadata entry (value type 8).
  GgufBytes& kvString(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  // A tensor info with the given raw dims (n_dims = dims.size()).
  GgufBytes& tensorInfo(std::string_view name, std::vector<uint64_t> dims, uint32_t type,
                        uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }

  std::vector<uint8_t> bytes;
};

}  // namespace shoal::gguf::test
