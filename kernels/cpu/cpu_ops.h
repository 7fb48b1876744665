#pragma once
// Row ops of the transformer layer program on the CPU, f32 throughout, rounding as ggml-cpu's
// ops.cpp does (the order matters: see ggml_order.h). The SIMD-defined ops (softmax, SwiGLU)
// live in the kernel tables.

#include <cstdint>

#include "engine/model/layer_program.h"

namespace shoal::cpu {

// y = x * (1 / sqrt(mean(x^2) + eps)) * weight, for one row of n (ggml_compute_forward_rms_norm:
// squares rounded to float, summed in double). y may be x.
void rmsNorm(const float* x, const float* weight, float* y, int64_t n, float eps);

// Precomputed rotation angles of RoPE for one position: cos/sin per dimension pair
// (rope.nRot / 2 of each). The angle of pair i is pos * base^(-2i/nRot) * freqScale /
// freqFactor[i]; computed the way ggml does (float, multiplying by the per-pair ratio in turn)
// so angles agree bit for bit. freqFactors: nRot / 2 values, or nullptr for none.
void ropeAngles(int32_t position, const model::RopeParams& rope, const float* freqFactors,
                float* cosOut, float* sinOut);

// Rotate the first rope.nRot dims of each of `heads` heads (headDim apart) in place, pairing
// dimensions as rope.style says.
void applyRope(float* x, int32_t heads, int32_t headDim, const model::RopeParams& rope,
               const float* cosv, const float* sinv);

}  // namespace shoal::cpu
