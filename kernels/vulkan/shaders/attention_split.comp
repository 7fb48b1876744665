#version 450
// Causal attention over the f16 KV cache, split along the positions (flash-decoding): the
// default-math kernel of any context length. A workgroup takes the query rows that share one KV
// head -- GROUP query heads of TOKENS consecutive tokens -- and one split of the positions, so
// each key and value it reads serves every one of those rows (the heads of a KV head in decode,
// also several tokens in prefill). Split s of SPLITS covers an equal share of the positions the
// rows see, walked in tiles of one position per invocation with an online softmax (running max
// m, running sum l, unnormalized output o per row). With one split the workgroup writes the
// normalized output itself; with several it writes (o, m, l) per row and split, and
// attention_merge.comp combines them. Nothing is kept per position, so no shared-memory limit
// bounds the context.
//
// Specialization constants: 0 the workgroup size, 1 GROUP (query heads per workgroup, a divisor
// of heads / kvHeads), 2 TOKENS (tokens per workgroup); GROUP * TOKENS rows at most 8. Head
// size: a multiple of 4, at most 256. As the CPU's attention: q rounded to f16; a sliding
// window, soft-capping (score = cap * tanh(K.q / cap) before the scale) and attention sinks (one
// logit per query head that joins the max and the sum and attends to nothing; with several
// splits the merge adds it).
#include "common.glsl"
#include "math.glsl"
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#endif

layout(constant_id = 1) const uint GROUP = 1;
layout(constant_id = 2) const uint TOKENS = 1;

// Four f16 keys (rows are 8-byte aligned: the head size is a multiple of 4).
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Quads { uvec2 v[]; };

layout(push_constant) uniform Push {
  Floats q;           // tokens x heads x headDim
  Quads keyCache;     // position-major, kvDim per position
  Halves valueCache;  // the same layout
  Floats y;           // tokens x heads x headDim (one split) or the partial outputs (several)
  Floats ml;          // several splits: (m, l) per (token, head, split)
  Ints params;        // [0]: position of the first token
  Floats sinks;       // one logit per query head, when hasSinks
  uint heads;
  uint kvHeads;
  uint headDim;
  float scale;
  uint window;    // 0: every position
  float softcap;  // 0: none
  uint hasSinks;
  uint splits;
  uint firstToken;  // of this pass: token t of q and y is at position params[0] + firstToken + t
  uint count;       // tokens of this pass
  uint ring;        // > 0: the cache is a ring of this many positions (slot = position mod ring)
} p;

const uint WG = gl_WorkGroupSize.x;
const uint ROWS = GROUP * TOKENS;
const uint MAX_QUADS = 64u;  // head size 256
const uint DIMS_PER_INVOCATION = (256u + WG - 1u) / WG;
const float NEG_INF = -1.0 / 0.0;

shared vec4 qs[ROWS * MAX_QUADS];
shared float tile[ROWS * WG];  // scores, then probabilities, of the tile's positions
shared float red[ROWS * WG];   // USE_SUBGROUP: each subgroup's max per row; then the sums

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint groupsPerKv = p.heads / p.kvHeads / GROUP;
  const uint kvHead = gl_WorkGroupID.x / groupsPerKv;
  const uint head0 = kvHead * (p.heads / p.kvHeads) + (gl_WorkGroupID.x % groupsPerKv) * GROUP;
  const uint split = gl_WorkGroupID.y, t0 = gl_WorkGroupID.z * TOKENS;
  const uint tokens = min(TOKENS, p.count - t0);
  const uint hd = p.headDim, quads = hd / 4u, kvDim = p.kvHeads * hd;
  const uint kvQuads = kvDim / 4u, kvQuadOff = kvHead * quads, kvOff = kvHead * hd;

  // Row r is query head head0 + r % GROUP of token t0 + r / GROUP; it sees [rowFirst, rowEnd).
  const uint position0 = uint(p.params.v[0]) + p.firstToken + t0;
  uint rowFirst[ROWS], rowEnd[ROWS];
  for (uint r = 0; r < ROWS; ++r) {
    const uint tt = r / GROUP;
    rowEnd[r] = tt < tokens ? position0 + tt + 1u : 0u;
    rowFirst[r] = p.window > 0u && rowEnd[r] > p.window ? rowEnd[r] - p.window : 0u;
  }
  // The split's share of the positions any row sees.
  const uint lo = rowFirst[0], hi = position0 + tokens;
  const uint share = (hi - lo + p.splits - 1u) / p.splits;
  const uint from = min(lo + split * share, hi), to = min(from + share, hi);

  for (uint i = tid; i < ROWS * quads; i += WG) {
    const uint r = i / quads, c = i % quads, tt = r / GROUP;
    vec4 v = vec4(0.0);
    if (tt < tokens) {
      const uint base = ((t0 + tt) * p.heads + head0 + r % GROUP) * hd + c * 4u;
      v = vec4(roundHalf(p.q.v[base]), roundHalf(p.q.v[base + 1u]), roundHalf(p.q.v[base + 2u]),
               roundHalf(p.q.v[base + 3u]));
    }
    qs[r * MAX_QUADS + c] = v;
  }
  barrier();

  float m[ROWS], lPart[ROWS];
  float o[ROWS][DIMS_PER_INVOCATION];
  for (uint r = 0; r < ROWS; ++r) {
    m[r] = NEG_INF;
    lPart[r] = 0.0;
    for (uint j = 0; j < DIMS_PER_INVOCATION; ++j) o[r][j] = 0.0;
  }

  for (uint base = from; base < to; base += WG) {
    // Scores: one position per invocation, every row.
    const uint pos = base + tid;
    float s[ROWS];
    for (uint r = 0; r < ROWS; ++r) s[r] = 0.0;
    if (pos < to) {
      const uint row = (p.ring > 0u ? pos % p.ring : pos) * kvQuads + kvQuadOff;
      for (uint c = 0; c < quads; ++c) {
        const uvec2 bits = p.keyCache.v[row + c];
        const vec4 k = vec4(unpackHalf2x16(bits.x), unpackHalf2x16(bits.y));
        for (uint r = 0; r < ROWS; ++r) s[r] += dot(k, qs[r * MAX_QUADS + c]);
      }
    }
    for (uint r = 0; r < ROWS; ++r) {
      float v = s[r];
      if (p.softcap > 0.0) v = tanh(v * (1.0 / p.softcap)) * p.softcap;
      const bool seen = pos >= rowFirst[r] && pos < rowEnd[r] && pos < to;
      v = seen ? v * p.scale : NEG_INF;
      tile[r * WG + tid] = v;
#ifdef USE_SUBGROUP
      const float most = subgroupMax(v);
      if (subgroupElect()) red[r * WG + gl_SubgroupID] = most;
#endif
    }
    barrier();

    // Online softmax: each invocation takes the tile's max per row itself (from the subgroups'
    // maxima, or else a loop over the tile: either costs less than a reduction's barriers), then
    // rescales what the earlier tiles gave by exp(old max - new max) and turns its own
    // position's score into a probability.
    const uint count = min(WG, to - base);
    float alpha[ROWS], prob[ROWS];
    for (uint r = 0; r < ROWS; ++r) {
      float tileMax = NEG_INF;
#ifdef USE_SUBGROUP
      for (uint i = 0; i < gl_NumSubgroups; ++i) tileMax = max(tileMax, red[r * WG + i]);
#else
      for (uint i = 0; i < count; ++i) tileMax = max(tileMax, tile[r * WG + i]);
#endif
      const float mNew = max(m[r], tileMax);
      alpha[r] = m[r] == NEG_INF ? 0.0 : exp(m[r] - mNew);
      m[r] = mNew;
      const float score = tile[r * WG + tid];
      prob[r] = score == NEG_INF ? 0.0 : exp(score - mNew);
      lPart[r] = lPart[r] * alpha[r] + prob[r];
    }
    barrier();
    for (uint r = 0; r < ROWS; ++r) tile[r * WG + tid] = prob[r];
    barrier();

    // Values: one dimension per invocation (consecutive invocations read consecutive halves).
    for (uint j = 0; j < DIMS_PER_INVOCATION; ++j) {
      const uint d = tid + j * WG;
      if (d >= hd) break;
      float acc[ROWS];
      for (uint r = 0; r < ROWS; ++r) acc[r] = 0.0;
      for (uint i = 0; i < count; ++i) {
        const uint at = p.ring > 0u ? (base + i) % p.ring : base + i;
        const float v = halfValue(uint(p.valueCache.v[at * kvDim + kvOff + d]));
        for (uint r = 0; r < ROWS; ++r) acc[r] += tile[r * WG + i] * v;
      }
      for (uint r = 0; r < ROWS; ++r) o[r][j] = o[r][j] * alpha[r] + acc[r];
    }
    barrier();
  }

  for (uint r = 0; r < ROWS; ++r) {
    const uint tt = r / GROUP;
    if (tt >= tokens) break;
    // The sum of the row's probabilities over the whole split (a tree over the invocations).
    red[tid] = lPart[r];
    barrier();
    for (uint step = WG / 2u; step > 0u; step >>= 1) {
      if (tid < step) red[tid] += red[tid + step];
      barrier();
    }
    float l = red[0];
    barrier();

    const uint head = head0 + r % GROUP;
    const uint row = (t0 + tt) * p.heads + head;
    if (p.splits == 1u) {
      // The whole softmax is here: add the sink and normalize.
      float rescale = 1.0;
      if (p.hasSinks != 0u) {
        const float sink = p.sinks.v[head];
        const float mAll = max(m[r], sink);
        rescale = m[r] == NEG_INF ? 0.0 : exp(m[r] - mAll);
        l = l * rescale + exp(sink - mAll);
      }
      const float factor = l > 0.0 ? rescale / l : 0.0;
      for (uint j = 0; j < DIMS_PER_INVOCATION; ++j) {
        const uint d = tid + j * WG;
        if (d < hd) p.y.v[row * hd + d] = o[r][j] * factor;
      }
    } else {
      const uint part = row * p.splits + split;
      for (uint j = 0; j < DIMS_PER_INVOCATION; ++j) {
        const uint d = tid + j * WG;
        if (d < hd) p.y.v[part * hd + d] = o[r][j];
      }
      if (tid == 0u) {
        p.ml.v[part * 2u] = m[r];
        p.ml.v[part * 2u + 1u] = l;
      }
    }
  }
}
