#version 450
// Causal attention of count new tokens over the f16 KV cache, one workgroup per (head, token),
// rounded as the CPU backend's attention (kernels/cpu/attention.cpp, llama.cpp without flash
// attention): q rounded to f16; score = (K.q) * scale over positions 0..params[0]+t; softmax
// with ggml's exp, the exponentials summed in groups of 16 (reduce16) into a double; the
// probabilities scaled by 1/sum and rounded to f16; out = V.probs. The two dot products use the
// CPU's orders: ggml's vec_dot_f16 order (4 x 16 lanes over steps of 64, V rows zero-padded to
// 64 positions) for one token, llamafile tinyBLAS's (16 lanes) for a batch. Scores live in
// shared memory: specialization constant 1 is the context length the stage was built for (the
// host checks it fits maxComputeSharedMemorySize).
// As the CPU's, three options of the layer program: a sliding window (positions before the
// last `window` get probability 0), soft-capping (score = cap * tanh(K.q / cap) before the
// scale) and attention sinks (the head's sink logit joins the max and the sum, and attends to
// nothing). tanh and the sink's exp are the driver's, so those models are close to the CPU, not
// bit-identical.
#include "common.glsl"
#include "math.glsl"

layout(constant_id = 1) const uint MAX_CTX = 2048;

layout(push_constant) uniform Push {
  Floats q;
  Halves keyCache;
  Halves valueCache;
  Floats y;
  Ints params;
  Floats sinks;  // one logit per query head, when hasSinks
  uint heads;
  uint kvHeads;
  uint headDim;
  float scale;
  uint window;    // 0: every position
  float softcap;  // 0: none
  uint hasSinks;
  uint ring;  // > 0: the cache is a ring of this many positions (slot = position mod ring)
} p;

shared float scores[MAX_CTX];
shared float qh[256];
shared float red[gl_WorkGroupSize.x];
shared float invSum;

uint slotOf(uint pos) { return p.ring > 0u ? pos % p.ring : pos; }

float keyAt(uint pos, uint kvDim, uint kvOff, uint i) {
  return halfValue(uint(p.keyCache.v[slotOf(pos) * kvDim + kvOff + i]));
}

// K row `pos` . q over hd elements.
float dotKq(uint pos, uint kvDim, uint kvOff, uint hd, bool tiled) {
  float u[16];
  if (tiled) {
    for (uint l = 0; l < 16u; ++l) {
      float a = 0.0;
      for (uint i = 0; i < hd; i += 16u) a = mathFma(keyAt(pos, kvDim, kvOff, i + l), qh[i + l], a);
      u[l] = a;
    }
    return reduce16(u);
  }
  const uint full = hd & ~63u;
  for (uint l = 0; l < 16u; ++l) {
    float a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    for (uint i = 0; i < full; i += 64u) {
      a0 = mathFma(keyAt(pos, kvDim, kvOff, i + l), qh[i + l], a0);
      a1 = mathFma(keyAt(pos, kvDim, kvOff, i + 16u + l), qh[i + 16u + l], a1);
      a2 = mathFma(keyAt(pos, kvDim, kvOff, i + 32u + l), qh[i + 32u + l], a2);
      a3 = mathFma(keyAt(pos, kvDim, kvOff, i + 48u + l), qh[i + 48u + l], a3);
    }
    precise float s02 = a0 + a2;
    precise float s13 = a1 + a3;
    precise float s = s02 + s13;
    u[l] = s;
  }
  const float r = reduce16(u);
  if (full == hd) return r;
  // ggml_vec_dot_f16's leftover elements: products rounded to float, summed in double.
  Acc sum = accFrom(r);
  for (uint i = full; i < hd; ++i) {
    precise float prod = keyAt(pos, kvDim, kvOff, i) * qh[i];
    sum = accAdd(sum, prod);
  }
  return accToFloat(sum);
}

// Dimension i of V . probs over the visible positions; positions past them (the zero padding of
// the CPU's rows) have probability 0 and leave every lane unchanged.
float dotKqv(uint i, uint kvDim, uint kvOff, uint visible, bool tiled) {
  float u[16];
  const uint step = tiled ? 16u : 64u;
  const uint padded = (visible + step - 1u) / step * step;
  for (uint l = 0; l < 16u; ++l) {
    float a[4] = float[4](0.0, 0.0, 0.0, 0.0);
    for (uint c = 0; c < padded; c += step) {
      for (uint j = 0; j < step / 16u; ++j) {
        const uint pos = c + 16u * j + l;
        if (pos < visible) {
          const float v = halfValue(uint(p.valueCache.v[slotOf(pos) * kvDim + kvOff + i]));
          a[j] = mathFma(v, scores[pos], a[j]);
        }
      }
    }
    precise float s02 = a[0] + a[2];
    precise float s13 = a[1] + a[3];
    precise float s = s02 + s13;
    u[l] = tiled ? a[0] : s;
  }
  return reduce16(u);
}

float reduceMax(float v) {
  const uint tid = gl_LocalInvocationID.x;
  red[tid] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] = max(red[tid], red[tid + s]);
    barrier();
  }
  const float r = red[0];
  barrier();
  return r;
}

void main() {
  const uint head = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
  const uint WG = gl_WorkGroupSize.x;
  const uint hd = p.headDim, kvDim = p.kvHeads * hd;
  const uint kvOff = (head / (p.heads / p.kvHeads)) * hd;
  const uint visible = uint(p.params.v[0]) + t + 1;
  const uint qBase = (t * p.heads + head) * hd;
  // ggml sends a one-token product through vec_dot and a batch through tinyBLAS when the row
  // length allows (kq: headDim % 16, kqv: headDim % 4).
  const bool batch = gl_NumWorkGroups.y >= 2u;
  const bool kqTiled = batch && hd % 16u == 0u;
  const bool kqvTiled = batch && hd % 4u == 0u;
  for (uint i = tid; i < hd; i += WG) qh[i] = roundHalf(p.q.v[qBase + i]);
  barrier();

  const uint first = p.window > 0u && visible > p.window ? visible - p.window : 0u;
  float localMax = -1.0 / 0.0;
  for (uint pos = tid; pos < visible; pos += WG) {
    if (pos < first) continue;
    float dot = dotKq(pos, kvDim, kvOff, hd, kqTiled);
    if (p.softcap > 0.0) {
      precise float capped = tanh(dot * (1.0 / p.softcap)) * p.softcap;
      dot = capped;
    }
    precise float s = dot * p.scale;
    scores[pos] = s;
    localMax = max(localMax, s);
  }
  float m = reduceMax(localMax);
  const float sink = p.hasSinks != 0u ? p.sinks.v[head] : 0.0;
  if (p.hasSinks != 0u) m = max(m, sink);
  for (uint pos = tid; pos < visible; pos += WG) {
    precise float shifted = scores[pos] - m;
    scores[pos] = pos < first ? 0.0 : expGgml(shifted);
  }
  barrier();
  if (tid == 0u) {
    Acc sum = accFrom(0.0);
    for (uint g = 0; g < visible; g += 16u) {
      float group[16];
      for (uint l = 0; l < 16u; ++l) group[l] = g + l < visible ? scores[g + l] : 0.0;
      sum = accAdd(sum, reduce16(group));
    }
    if (p.hasSinks != 0u) sum = accAdd(sum, exp(sink - m));
    invSum = accRecipToFloat(sum);
  }
  barrier();
  const float inv = invSum;
  for (uint pos = tid; pos < visible; pos += WG) {
    precise float prob = scores[pos] * inv;
    scores[pos] = roundHalf(prob);
  }
  barrier();
  for (uint i = tid; i < hd; i += WG) p.y.v[qBase + i] = dotKqv(i, kvDim, kvOff, visible, kqvTiled);
}
