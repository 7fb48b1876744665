#version 450
// Causal attention of count new tokens over the f16 KV cache, one workgroup per (head, token),
// evaluated as the CPU backend does (llama.cpp without flash attention): q rounded to f16,
// scores = K.q * scale over positions 0..params[0]+t, softmax, probabilities rounded to f16,
// out = V.probs. Scores live in shared memory: specialization constant 1 is the context length
// the stage was built for (the host checks it fits maxComputeSharedMemorySize).
#include "common.glsl"

layout(constant_id = 1) const uint MAX_CTX = 2048;

layout(push_constant) uniform Push {
  Floats q;
  F16s keyCache;
  F16s valueCache;
  Floats y;
  Ints params;
  uint heads;
  uint kvHeads;
  uint headDim;
  float scale;
} p;

shared float scores[MAX_CTX];
shared float qh[256];
shared float red[gl_WorkGroupSize.x];

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

float reduceSum(float v) {
  const uint tid = gl_LocalInvocationID.x;
  red[tid] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (tid < s) red[tid] += red[tid + s];
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
  for (uint i = tid; i < hd; i += WG) qh[i] = float(float16_t(p.q.v[qBase + i]));
  barrier();

  float localMax = -1.0 / 0.0;
  for (uint pos = tid; pos < visible; pos += WG) {
    float dot = 0.0;
    for (uint i = 0; i < hd; ++i) dot += float(p.keyCache.v[pos * kvDim + kvOff + i]) * qh[i];
    scores[pos] = dot * p.scale;
    localMax = max(localMax, scores[pos]);
  }
  const float m = reduceMax(localMax);
  float localSum = 0.0;
  for (uint pos = tid; pos < visible; pos += WG) {
    const float e = exp(scores[pos] - m);
    scores[pos] = e;
    localSum += e;
  }
  const float inv = 1.0 / reduceSum(localSum);
  for (uint pos = tid; pos < visible; pos += WG) scores[pos] = float(float16_t(scores[pos] * inv));
  barrier();
  for (uint i = tid; i < hd; i += WG) {
    float o = 0.0;
    for (uint pos = 0; pos < visible; ++pos) {
      o += scores[pos] * float(p.valueCache.v[pos * kvDim + kvOff + i]);
    }
    p.y.v[qBase + i] = o;
  }
}
