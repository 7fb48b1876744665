#version 450
// y[i] += x[i % period]: the residual add (period = n) and a bias added to every row
// (period = row length).
#include "common.glsl"

layout(push_constant) uniform Push {
  Floats x;
  Floats y;
  uint n;
  uint period;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.n) return;
  p.y.v[i] += p.x.v[i % p.period];
}
