#version 450
// The steps between a layer's Q/K/V projection and its attention in one dispatch: RoPE of the
// queries in place, RoPE of the keys straight into the f16 key cache, and the values into the
// value cache, for count tokens at positions params[0] + t. The same rotation as rope.comp and
// the same f16 rounding as kv_store.comp (math.glsl halfBits), so the result equals those three
// dispatches'. The queries are then multiplied by qScale (phi3's Scale op between RoPE and
// attention: the same product, so still equal). Per token the invocations cover qHeads *
// headDim/2 query slots (a rotated pair, or two dimensions past nRot that only the scale
// touches), then kvDim key and value elements; a key element computes its own rotated value
// from its pair (the keys are read, never written, so no invocation waits for another).
#include "common.glsl"
#include "math.glsl"

layout(push_constant) uniform Push {
  Floats q;
  Floats k;
  Floats v;
  Halves keyCache;
  Halves valueCache;
  Floats cosTable;
  Floats sinTable;
  Ints params;
  uint qHeads;
  uint kvHeads;
  uint headDim;
  uint nRot;
  uint neox;
  uint count;
  float qScale;
  uint ring;  // > 0: the cache is a ring of this many positions (kv_ring.h)
} p;

// The rotated pair (x0, x1) by angle (c, s), as rope.comp rounds it.
vec2 rotate(float x0, float x1, float c, float s) {
  precise float x1s = x1 * s;
  precise float x1c = x1 * c;
  return vec2(mathFma(x0, c, -x1s), mathFma(x0, s, x1c));
}

void main() {
  const uint half_ = p.nRot / 2u, kvDim = p.kvHeads * p.headDim;
  const uint qSlots = p.qHeads * (p.headDim / 2u), perToken = qSlots + kvDim;
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.count * perToken) return;
  const uint t = i / perToken, j = i % perToken;
  const uint pos = uint(p.params.v[0]) + t;
  if (j < qSlots) {
    const uint slot = j % (p.headDim / 2u), head = j / (p.headDim / 2u);
    const uint base = (t * p.qHeads + head) * p.headDim;
    if (slot >= half_) {
      // Two dimensions past nRot: unrotated, scaled.
      if (p.qScale != 1.0) {
        const uint a = base + p.nRot + 2u * (slot - half_);
        p.q.v[a] *= p.qScale;
        p.q.v[a + 1u] *= p.qScale;
      }
      return;
    }
    const uint a = base + (p.neox != 0u ? slot : 2u * slot);
    const uint b = a + (p.neox != 0u ? half_ : 1u);
    const vec2 r = rotate(p.q.v[a], p.q.v[b], p.cosTable.v[pos * half_ + slot],
                          p.sinTable.v[pos * half_ + slot]);
    p.q.v[a] = r.x * p.qScale;
    p.q.v[b] = r.y * p.qScale;
    return;
  }
  const uint d = j - qSlots, e = d % p.headDim, headBase = t * kvDim + d - e;
  float key = p.k.v[t * kvDim + d];
  if (e < p.nRot) {
    // Element e is the first or the second of its pair.
    const uint pair = p.neox != 0u ? e % half_ : e / 2u;
    const bool second = p.neox != 0u ? e >= half_ : (e & 1u) != 0u;
    const uint a = headBase + (p.neox != 0u ? pair : 2u * pair);
    const uint b = a + (p.neox != 0u ? half_ : 1u);
    const vec2 r = rotate(p.k.v[a], p.k.v[b], p.cosTable.v[pos * half_ + pair],
                          p.sinTable.v[pos * half_ + pair]);
    key = second ? r.y : r.x;
  }
  const uint at = (p.ring > 0u ? pos % p.ring : pos) * kvDim + d;
  p.keyCache.v[at] = uint16_t(halfBits(key));
  p.valueCache.v[at] = uint16_t(halfBits(p.v.v[t * kvDim + d]));
}
