#version 450
// out[t][e] = row tokens[t] of the embedding matrix, decoded to f32 (type: WTYPE_<type>).
#include "common.glsl"
#include "blocks.glsl"

layout(push_constant) uniform Push {
  Bytes w;
  Halves wh;
  Ints tokens;
  Floats y;
  uint cols;
  uint rowBytes;
  uint count;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.count * p.cols) return;
  const uint t = i / p.cols, e = i % p.cols;
  const uint base = uint(p.tokens.v[t]) * p.rowBytes + (e / QK) * BLOCK_BYTES;
  p.y.v[i] = dq(p.w, p.wh, base, e % QK);
}
