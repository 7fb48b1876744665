#pragma once
// The CUDA kernels' per-sub-block math (block_math.cuh) built for the host, so a unit test can
// hold it to the engine's reference decoders on a machine without a GPU (no CUDA call is made).
// A row is in its GGUF block format; sub-block s is its elements 32s .. 32s + 31.

#include <cstdint>

#include "engine/gguf/tensor_type.h"

namespace shoal::cuda {

// Whether the mat-vec multiplies this type with int8 activations (hostSubBlockDot applies);
// false for the float types, which it reads against float activations.
bool hostHasSubBlockDot(gguf::TensorType type);

// Sub-block s of row times 32 activations quantized as quantizeActivations does: xq32 the int8
// quants, d their scale and dSum = d * sum(xq32). Throws shoal::Error for a type without one.
float hostSubBlockDot(gguf::TensorType type, const uint8_t* row, int64_t s, const int8_t* xq32,
                      float d, float dSum);

// Sub-block s of row as 32 floats (what gatherRows writes) and as 32 f16 bit patterns (what
// dequantizeToHalf writes). Throws shoal::Error for a type the kernels do not handle.
void hostDequantSubBlock(gguf::TensorType type, const uint8_t* row, int64_t s, float* y32);
void hostDequantSubBlockHalf(gguf::TensorType type, const uint8_t* row, int64_t s, uint16_t* y32);

}  // namespace shoal::cuda
