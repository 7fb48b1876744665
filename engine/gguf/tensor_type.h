#pragma once
// ggml tensor element types as stored in GGUF files, and their block layouts.
//
// The numeric values are ggml's `enum ggml_type` (ggml/include/ggml.h); they are what a GGUF
// tensor-info record stores, so they must never be renumbered. Quantized types store rows as a
// sequence of fixed-size blocks of `blockSize` elements; a row of n elements takes
// n / blockSize * typeSize bytes (n must be a multiple of blockSize). Each block layout is
// documented next to its dequantizer in dequantize.cpp.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace shoal::gguf {

enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

struct TypeTraits {
  std::string_view name;  // "q4_K" style, as ggml names it
  int64_t blockSize;      // elements per block (1 for plain types)
  size_t typeSize;        // bytes per block
  bool dequantizable;     // Shoal can turn it into f32 (dequantizeRow supports it)
};

// Traits of a type Shoal knows, or nullopt for a value no GGUF type has (e.g. 4, 5, 31+).
std::optional<TypeTraits> typeTraits(uint32_t rawType);
TypeTraits typeTraits(TensorType type);  // throws shoal::Error for unknown types

// Bytes taken by a row of n elements; throws if n is not a multiple of the block size.
size_t rowBytes(TensorType type, int64_t n);

}  // namespace shoal::gguf
