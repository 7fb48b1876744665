#version 450
// Append count tokens' keys and values to an f16 cache (position-major, kvDim per position) at
// positions params[0] + t, rounded to nearest even as the CPU backend's cache (math.glsl
// halfBits: the driver's own f16 conversion may round otherwise).
#include "common.glsl"
#include "math.glsl"

layout(push_constant) uniform Push {
  Floats k;
  Floats v;
  Halves keyCache;
  Halves valueCache;
  Ints params;
  uint kvDim;
  uint count;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.count * p.kvDim) return;
  const uint t = i / p.kvDim, d = i % p.kvDim;
  const uint at = (uint(p.params.v[0]) + t) * p.kvDim + d;
  p.keyCache.v[at] = uint16_t(halfBits(p.k.v[i]));
  p.valueCache.v[at] = uint16_t(halfBits(p.v.v[i]));
}
