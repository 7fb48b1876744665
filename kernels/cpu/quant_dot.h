#pragma once
// Dot products between a row of weights (kept in their file's quantized format) and a row of
// activations converted to the format that weight type pairs with — the same pairing ggml uses
// (its `vec_dot_type`), so Shoal's arithmetic and llama.cpp's agree closely:
//   Q4_0, Q5_0, Q8_0 -> Q8_0;  Q4_1, Q5_1 -> Q8_1;  Q4_K, Q5_K, Q6_K -> Q8_K;
//   F16 -> F16;  BF16 -> BF16;  F32 -> F32.
// The scalar versions here are the reference every SIMD kernel is tested against.

#include <cstdint>

#include "engine/gguf/tensor_type.h"

namespace shoal::cpu {

using DotFn = float (*)(const void* weights, const void* activations, int64_t n);

// The activation format that `weight` pairs with; throws shoal::Error for unsupported types.
gguf::TensorType activationType(gguf::TensorType weight);

// Convert n f32 activations into `type` (rowBytes(type, n) bytes at dst).
void quantizeActivations(gguf::TensorType type, const float* x, void* dst, int64_t n);

// Reference (scalar) dot product for a weight type; throws shoal::Error for unsupported types.
DotFn referenceDot(gguf::TensorType weight);

}  // namespace shoal::cpu
