#pragma once
// gpt-oss's clamped SwiGLU (model::Activation::SwigluOai) as ggml_compute_forward_swiglu_oai_f32
// computes it, element by element in scalar float with libm's expf:
//   x = min(gate, limit), y = clamp(up, -limit, limit), out = x / (1 + exp(alpha * -x)) * (y + 1)
// with llama.cpp's alpha 1.702 and limit 7.

#include <cstdint>

namespace shoal::cpu {

inline constexpr float kSwigluOaiAlpha = 1.702f;
inline constexpr float kSwigluOaiLimit = 7.0f;

// y[i] from gate[i] and up[i]; y may alias gate.
void swigluOai(const float* gate, const float* up, float* y, int64_t n);

}  // namespace shoal::cpu
