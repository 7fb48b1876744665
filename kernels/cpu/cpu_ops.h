#pragma once
// Element-wise and small ops of the transformer layer program on the CPU, f32 throughout.
// Reductions accumulate in double, as ggml's CPU ops do, so results track llama.cpp's closely.

#include <cstdint>

#include "engine/model/model_config.h"

namespace shoal::cpu {

// y = x / rms(x) * weight, for one row of n.
void rmsNorm(const float* x, const float* weight, float* y, int64_t n, float eps);

// Precomputed rotation angles of RoPE for one position: cos/sin per dimension pair.
// The angle of pair i is pos * base^(-2i/nRot) * freqScale / freqFactor[i]; computed the way
// ggml does (float, multiplying by the per-pair ratio in turn) so angles agree bit for bit.
void ropeAngles(int32_t position, const model::ModelConfig& config, const float* freqFactors,
                float* cosOut, float* sinOut);

// Rotate the first nRot dims of each of `heads` heads (headDim apart) in place.
void applyRope(float* x, int32_t heads, int32_t headDim, int32_t nRot, model::RopeStyle style,
               const float* cosv, const float* sinv);

// gate = silu(gate) * up, n elements.
void siluMul(float* gate, const float* up, int64_t n);

// Softmax of n values in place (max-subtracted).
void softmax(float* x, int64_t n);

}  // namespace shoal::cpu
