#version 450
// gpt-oss's clamped SwiGLU over n elements, as the CPU backend's (kernels/cpu/swiglu_oai.cpp,
// ggml's swiglu_oai with alpha 1.702 and limit 7): x = min(gate, 7), u = clamp(up, -7, 7),
// gate = x / (1 + exp(-1.702 x)) * (u + 1). The exp is the driver's: close to the CPU's expf,
// not bit-identical.
#include "common.glsl"

layout(push_constant) uniform Push {
  Floats gate;
  Floats up;
  uint n;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.n) return;
  const float x = min(p.gate.v[i], 7.0);
  const float u = clamp(p.up.v[i], -7.0, 7.0);
  precise float glu = x / (1.0 + exp(1.702 * (-x)));
  precise float y = glu * (u + 1.0);
  p.gate.v[i] = y;
}
