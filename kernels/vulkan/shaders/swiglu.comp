#version 450
// gate[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + exp(-x)).
#include "common.glsl"

layout(push_constant) uniform Push {
  Floats gate;
  Floats up;
  uint n;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.n) return;
  const float g = p.gate.v[i];
  p.gate.v[i] = (g / (1.0 + exp(-g))) * p.up.v[i];
}
