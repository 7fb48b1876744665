#pragma once
// Reference (scalar) conversion of a row of any supported tensor type to f32, and the inverse
// for the types Shoal writes (tests and the synthetic-model writer quantize random weights).
// These are the correctness reference every SIMD/GPU kernel is checked against.

#include <cstdint>

#include "engine/gguf/tensor_type.h"

namespace shoal::gguf {

// Decode n elements (a multiple of the type's block size) from src into dst.
// Supported: F32, F16, BF16, F64, Q8_0, Q8_1, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, Q8_K (the types whose TypeTraits::dequantizable is true). src needs no alignment.
void dequantizeRow(TensorType type, const void* src, float* dst, int64_t n);

// Encode n f32 values (a multiple of the block size) into dst (rowBytes(type, n) bytes), with the
// same rounding rules as ggml's reference quantizers so files we write load in llama.cpp.
// Supported: the same set as dequantizeRow except F64 (see quantizable() in tensor_type.h).
// Each type's bytes equal those of ggml's quantize_row_<type>_ref for the same input.
void quantizeRow(TensorType type, const float* src, void* dst, int64_t n);

// IEEE half / bfloat16 helpers (round-to-nearest-even on the way in).
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t b);
uint16_t floatToBf16(float f);

}  // namespace shoal::gguf
