#pragma once
// GeGLU as ggml-cpu computes it (gemma's FFN activation).

#include <cstdint>

namespace shoal::cpu {

// y[i] = gelu(gate[i]) * up[i] as ggml_vec_geglu_f32 computes it (GGML_GELU_FP16): 0 for
// gate <= -10, gate * up for gate >= 10, otherwise gelu from a table over the gate
// rounded to f16 (the tanh approximation, evaluated in float and stored as f16). y may be gate.
void geglu(const float* gate, const float* up, float* y, int64_t n);

}  // namespace shoal::cpu
