#version 450
// Rotary position embedding in place on count tokens x heads x headDim. The angles come from
// tables (contextLength x nRot/2 cos and sin) the host computes once with the CPU backend's
// ropeAngles, so both backends rotate by identical angles; the rotation rounds as the CPU's
// applyRope (ggml's rotate_pairs with each expression contracted into one fma). Position of
// token t: params[0] (the batch's first position, written by the host before each submit) + t.
// Normal style rotates pairs (2i, 2i+1), NeoX style pairs (i, i + nRot/2).
#include "common.glsl"
#include "math.glsl"

layout(push_constant) uniform Push {
  Floats x;
  Floats cosTable;
  Floats sinTable;
  Ints params;
  uint heads;
  uint headDim;
  uint nRot;
  uint neox;
  uint count;
} p;

void main() {
  const uint half_ = p.nRot / 2;
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.count * p.heads * half_) return;
  const uint pair = i % half_, head = (i / half_) % p.heads, t = i / (half_ * p.heads);
  const uint pos = uint(p.params.v[0]) + t;
  const float c = p.cosTable.v[pos * half_ + pair], s = p.sinTable.v[pos * half_ + pair];
  const uint base = (t * p.heads + head) * p.headDim;
  const uint a = base + (p.neox != 0 ? pair : 2 * pair);
  const uint b = a + (p.neox != 0 ? half_ : 1);
  const float x0 = p.x.v[a], x1 = p.x.v[b];
  precise float x1s = x1 * s;
  precise float x1c = x1 * c;
  p.x.v[a] = mathFma(x0, c, -x1s);
  p.x.v[b] = mathFma(x0, s, x1c);
}
