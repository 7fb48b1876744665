#version 450
// In place over n floats: mode 0 scales (x *= factor: gemma's embedding scale, phi3's query
// scale; one rounding, as the CPU's ggml_scale), mode 1 soft-caps (x = factor * tanh(x / factor),
// as the CPU's ggml_scale(1 / cap), ggml_tanh, ggml_scale(cap); tanh is the driver's, so a capped
// value is close to the CPU's, not bit-identical).
#include "common.glsl"

layout(push_constant) uniform Push {
  Floats x;
  uint n;
  float factor;
  uint mode;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.n) return;
  if (p.mode == 0u) {
    precise float y = p.x.v[i] * p.factor;
    p.x.v[i] = y;
  } else {
    precise float inv = 1.0 / p.factor;
    precise float scaled = p.x.v[i] * inv;
    precise float y = tanh(scaled) * p.factor;
    p.x.v[i] = y;
  }
}
