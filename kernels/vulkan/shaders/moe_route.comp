#version 450
// The router's choice for each token of a mixture-of-experts FFN (llama.cpp's build_moe_ffn
// gating, as the CPU backend's LayerRunner::moeFfn), one invocation per row of logits:
//   gating 0 (Softmax):       p = softmax(logits) in place; E = the top `used` by p; w = p_E
//   gating 1 (SoftmaxWeight): E = the top `used` by logit; w = softmax over E's logits
// E most probable first (ties to the lower expert id); with `normalize`, w is divided by its
// sum, clamped below at 2^-14 (ggml_clamp). Experts up to 256 (the host checks).
#include "common.glsl"
#include "math.glsl"

layout(push_constant) uniform Push {
  Floats logits;   // rows x experts
  Ints ids;        // rows x used: the chosen experts
  Floats weights;  // rows x used: their weights
  uint rows;
  uint experts;
  uint used;
  uint gating;
  uint normalize;
} p;

// softmax of n values in place from `base` of `v`: ggml's exp, the sum in double.
void softmaxInPlace(Floats v, uint base, uint n) {
  float m = -1.0 / 0.0;
  for (uint i = 0; i < n; ++i) m = max(m, v.v[base + i]);
  Acc sum = accFrom(0.0);
  for (uint i = 0; i < n; ++i) {
    precise float shifted = v.v[base + i] - m;
    const float e = expGgml(shifted);
    v.v[base + i] = e;
    sum = accAdd(sum, e);
  }
  const float inv = accRecipToFloat(sum);
  for (uint i = 0; i < n; ++i) {
    precise float q = v.v[base + i] * inv;
    v.v[base + i] = q;
  }
}

void main() {
  const uint t = gl_GlobalInvocationID.x;
  if (t >= p.rows) return;
  const uint base = t * p.experts, first = t * p.used;
  if (p.gating == 0u) softmaxInPlace(p.logits, base, p.experts);
  uint taken[8] = uint[8](0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u);
  for (uint k = 0; k < p.used; ++k) {
    uint best = 0u;
    float bestValue = 0.0;
    bool found = false;
    for (uint e = 0; e < p.experts; ++e) {
      if ((taken[e >> 5] & (1u << (e & 31u))) != 0u) continue;
      const float v = p.logits.v[base + e];
      if (!found || v > bestValue) {
        best = e;
        bestValue = v;
        found = true;
      }
    }
    taken[best >> 5] |= 1u << (best & 31u);
    p.ids.v[first + k] = int(best);
    p.weights.v[first + k] = bestValue;
  }
  if (p.gating == 1u) softmaxInPlace(p.weights, first, p.used);
  if (p.normalize != 0u) {
    Acc total = accFrom(0.0);
    for (uint k = 0; k < p.used; ++k) total = accAdd(total, p.weights.v[first + k]);
    const float sum = max(accToFloat(total), 6.103515625e-5);
    for (uint k = 0; k < p.used; ++k) p.weights.v[first + k] = mathDiv(p.weights.v[first + k], sum);
  }
}
