#pragma once
// The row test_gguf_quantize quantizes, and the hash it compares bytes by. Plain C++ with no
// project headers: tools/llamacpp/quant_hashes.cpp includes it too, to hash ggml's reference
// quantizers' bytes for the very same input.

#include <cmath>
#include <cstdint>
#include <vector>

namespace shoal::quant_test {

inline constexpr int64_t kRowLength = 256 * 16;

// Deterministic input whose every value is exact in binary (integers times powers of two), so
// it is the same on every compiler: uniform values in [-1, 1), a magnitude that changes from
// block to block (2^-6 .. 2^2), outliers, and two all-zero 256-blocks.
inline std::vector<float> testRow() {
  std::vector<float> x(kRowLength);
  uint32_t s = 0x12345678u;
  for (int64_t i = 0; i < kRowLength; ++i) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    float v = std::ldexp(static_cast<float>(static_cast<int32_t>(s) >> 8), -23);
    v = std::ldexp(v, static_cast<int>((i / 32) % 9) - 6);
    if (i % 97 == 0) v *= 8;
    if (i / 256 == 3 || i / 256 == 11) v = 0;
    x[static_cast<size_t>(i)] = v;
  }
  return x;
}

// FNV-1a 64 of a byte string.
inline uint64_t fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace shoal::quant_test
