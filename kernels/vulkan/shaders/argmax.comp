#version 450
// Greedy sampling on the device: the index of the largest logit of each row (the lowest index
// among equal maxima, as std::max_element and the CPU sampler's greedy pick; NaN never wins),
// one workgroup per row, so that a decoded token reads back 4 bytes instead of the vocabulary.
#include "common.glsl"

layout(push_constant) uniform Push {
  Floats logits;  // rows x vocab
  Ints tokens;    // one per row
  uint vocab;
} p;

shared float bestValue[gl_WorkGroupSize.x];
shared uint bestIndex[gl_WorkGroupSize.x];

void main() {
  const uint row = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
  const uint WG = gl_WorkGroupSize.x;
  const uint base = row * p.vocab;
  float best = -1.0 / 0.0;
  uint index = 0xffffffffu;
  for (uint i = tid; i < p.vocab; i += WG) {
    const float v = p.logits.v[base + i];
    if (v > best || (index == 0xffffffffu && v == best)) {  // first pass: -inf logits count too
      best = v;
      index = i;
    }
  }
  bestValue[tid] = best;
  bestIndex[tid] = index;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (tid < s) {
      const float v = bestValue[tid + s];
      const uint i = bestIndex[tid + s];
      if (v > bestValue[tid] || (v == bestValue[tid] && i < bestIndex[tid])) {
        bestValue[tid] = v;
        bestIndex[tid] = i;
      }
    }
    barrier();
  }
  if (tid == 0u) p.tokens.v[row] = int(bestIndex[0] == 0xffffffffu ? 0u : bestIndex[0]);
}
