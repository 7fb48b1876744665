#version 450
// The experts' outputs of a mixture-of-experts FFN combined per token, as the CPU backend
// (ggml_mul, then ggml_add in rank order, one rounding each):
//   dst[t][c] = src[t * used][c] * w[t][0] + ... + src[t * used + used - 1][c] * w[t][used - 1]
#include "common.glsl"

layout(push_constant) uniform Push {
  Floats src;      // (rows x used) x cols: each (token, k) entry's expert output
  Floats weights;  // rows x used
  Floats dst;      // rows x cols
  uint rows;
  uint cols;
  uint used;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.rows * p.cols) return;
  const uint t = i / p.cols, c = i % p.cols, first = t * p.used;
  precise float acc = p.src.v[first * p.cols + c] * p.weights.v[first];
  for (uint k = 1u; k < p.used; ++k) {
    precise float weighted = p.src.v[(first + k) * p.cols + c] * p.weights.v[first + k];
    precise float sum = acc + weighted;
    acc = sum;
  }
  p.dst.v[i] = acc;
}
