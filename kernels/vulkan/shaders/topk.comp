#version 450
// Top-k selection on the device, so that a sampled token reads back k candidates instead of the
// vocabulary's logits. One level: workgroup (c, r) takes entries [c * CHUNK, (c + 1) * CHUNK) of
// row r of the input and writes their best k (value and id, best first) as chunk c of row r of
// the output; the host repeats levels over the candidates until one chunk remains, whose k
// entries are the row's top k. Level 0 reads logits (ids are the positions); later levels read
// the candidates (ids carried).
//
// "Best" is the CPU sampler's order (engine/runtime/sampler.h): higher logit first, lower id on
// ties, NaN as -inf and +inf as the largest float. Entries become 32-bit keys that compare as
// the floats do (sign-flipped bits, -0 as +0); key 0 (below -inf's key) marks a taken entry. Each of the k
// rounds picks the best (key, id) of the chunk with a tree over the invocations' own bests, and
// only the invocation whose entry was taken looks at its entries again.
#include "common.glsl"

#define CHUNK 1024u
layout(constant_id = 1) const uint K = 64;  // candidates kept per chunk (<= CHUNK / 4)

layout(push_constant) uniform Push {
  Floats values;     // input values: rows x width
  Ints ids;          // input ids: rows x width (level 0: unused, the position is the id)
  Floats outValues;  // rows x chunks x K
  Ints outIds;       // rows x chunks x K
  uint width;        // input entries per row
  uint level;        // 0: the input is logits
} p;

shared uint keys[CHUNK];
shared uint entryIds[CHUNK];
shared uint bestKey[gl_WorkGroupSize.x];
shared uint bestAt[gl_WorkGroupSize.x];  // index into keys of the invocation's best

uint keyOf(float v) {
  if (isnan(v)) v = -1.0 / 0.0;
  if (v == 0.0) v = 0.0;  // -0 equals +0 (then the lower id goes first)
  if (isinf(v) && v > 0.0) v = uintBitsToFloat(0x7f7fffffu);  // FLT_MAX
  const uint bits = floatBitsToUint(v);
  return (bits & 0x80000000u) != 0u ? ~bits : bits | 0x80000000u;
}
float valueOf(uint key) {
  return uintBitsToFloat((key & 0x80000000u) != 0u ? key & 0x7fffffffu : ~key);
}
// Whether entry a comes before entry b.
bool before(uint keyA, uint idA, uint keyB, uint idB) {
  return keyA > keyB || (keyA == keyB && idA < idB);
}

void main() {
  const uint chunk = gl_WorkGroupID.x, row = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint WG = gl_WorkGroupSize.x;
  const uint first = chunk * CHUNK, count = min(CHUNK, p.width - first);
  for (uint i = tid; i < CHUNK; i += WG) {
    const uint at = row * p.width + first + i;
    keys[i] = i < count ? keyOf(p.values.v[at]) : 0u;
    entryIds[i] = i < count ? (p.level == 0u ? first + i : uint(p.ids.v[at])) : 0xffffffffu;
  }
  barrier();
  // Each invocation's best among its entries i = tid, tid + WG, ...
  uint mine = 0xffffffffu;
  for (uint i = tid; i < CHUNK; i += WG) {
    if (keys[i] != 0u && (mine == 0xffffffffu ||
                          before(keys[i], entryIds[i], keys[mine], entryIds[mine]))) {
      mine = i;
    }
  }
  const uint outBase = (row * gl_NumWorkGroups.x + chunk) * K;
  for (uint round = 0; round < K; ++round) {
    bestKey[tid] = mine == 0xffffffffu ? 0u : keys[mine];
    bestAt[tid] = mine;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
      if (tid < s) {
        const uint a = bestAt[tid], b = bestAt[tid + s];
        const bool takeB = b != 0xffffffffu &&
                           (a == 0xffffffffu ||
                            before(bestKey[tid + s], entryIds[b], bestKey[tid], entryIds[a]));
        if (takeB) {
          bestKey[tid] = bestKey[tid + s];
          bestAt[tid] = b;
        }
      }
      barrier();
    }
    const uint won = bestAt[0];
    if (tid == 0u) {
      // Fewer than K live entries (a short last chunk): the rest are -inf with no token.
      p.outValues.v[outBase + round] = won == 0xffffffffu ? -1.0 / 0.0 : valueOf(keys[won]);
      p.outIds.v[outBase + round] = won == 0xffffffffu ? -1 : int(entryIds[won]);
    }
    barrier();
    // The winner's owner takes it out and looks again.
    if (won != 0xffffffffu && won % WG == tid) {
      keys[won] = 0u;
      mine = 0xffffffffu;
      for (uint i = tid; i < CHUNK; i += WG) {
        if (keys[i] != 0u && (mine == 0xffffffffu ||
                              before(keys[i], entryIds[i], keys[mine], entryIds[mine]))) {
          mine = i;
        }
      }
    }
    barrier();
  }
}
