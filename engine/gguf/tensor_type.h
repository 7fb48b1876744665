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
#include <string>
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
  // Types Shoal can parse and size but not convert (dequantizable == false).
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
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

// The ggml name of a type ("q4_K"), or "type#<n>" for a value with no traits.
std::string typeName(TensorType type);
// Parse a ggml type name, case-insensitively ("q4_k", "Q8_0", "f16"); nullopt if unknown.
std::optional<TensorType> typeFromName(std::string_view name);
// Whether quantizeRow (dequantize.h) can write this type.
bool quantizable(TensorType type);

}  // namespace shoal::gguf
