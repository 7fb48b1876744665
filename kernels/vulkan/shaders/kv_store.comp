#version 450
// Append count tokens' keys and values to an f16 cache (position-major, kvDim per position) at
// positions params[0] + t (a sliding-window ring: in slot position mod ring), rounded to nearest even as the CPU backend's cache (math.glsl
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
  uint ring;  // > 0: the cache is a ring of this many positions (kv_ring.h)
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.count * p.kvDim) return;
  const uint t = i / p.kvDim, d = i % p.kvDim;
  const uint pos = uint(p.params.v[0]) + t;
  const uint at = (p.ring > 0u ? pos % p.ring : pos) * p.kvDim + d;
  p.keyCache.v[at] = uint16_t(halfBits(p.k.v[i]));
  p.valueCache.v[at] = uint16_t(halfBits(p.v.v[i]));
}
