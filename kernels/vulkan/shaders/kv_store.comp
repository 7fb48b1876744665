#version 450
// Append count tokens' keys and values to an f16 cache (position-major, kvDim per position) at
// positions params[0] + t, rounding to f16 as the CPU backend's cache does.
#include "common.glsl"

layout(push_constant) uniform Push {
  Floats k;
  Floats v;
  F16s keyCache;
  F16s valueCache;
  Ints params;
  uint kvDim;
  uint count;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.count * p.kvDim) return;
  const uint t = i / p.kvDim, d = i % p.kvDim;
  const uint at = (uint(p.params.v[0]) + t) * p.kvDim + d;
  p.keyCache.v[at] = float16_t(p.k.v[i]);
  p.valueCache.v[at] = float16_t(p.v.v[i]);
}
