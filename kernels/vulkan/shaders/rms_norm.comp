#version 450
// y[t] = (x[firstRow + t] * scale) * weight with scale = 1 / sqrt(mean(x^2) + eps), one
// workgroup per row. Default: each invocation sums the squares of a strided share of the row,
// then a shared-memory tree adds the shares. Exact math (SHOAL_EXACT_MATH): rounded as the CPU
// backend's rmsNorm (ggml_compute_forward_rms_norm), the squares rounded to float and summed in
// double in element order (by one invocation: the order is the point), the mean rounded to
// float, then float sqrt and division.
#include "common.glsl"
#include "math.glsl"

layout(push_constant) uniform Push {
  Floats x;
  Floats weight;
  Floats y;
  uint n;
  uint firstRow;
  float eps;
} p;

shared float rowScale;
#ifndef SHOAL_EXACT_MATH
shared float shares[gl_WorkGroupSize.x];
#endif

void main() {
  const uint t = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
  const uint xBase = (p.firstRow + t) * p.n, yBase = t * p.n;
#ifndef SHOAL_EXACT_MATH
  float share = 0.0;
  for (uint i = tid; i < p.n; i += gl_WorkGroupSize.x) {
    share = fma(p.x.v[xBase + i], p.x.v[xBase + i], share);
  }
  shares[tid] = share;
  barrier();
  for (uint stride = gl_WorkGroupSize.x / 2u; stride > 0u; stride >>= 1) {
    if (tid < stride) shares[tid] += shares[tid + stride];
    barrier();
  }
  if (tid == 0u) rowScale = inversesqrt(shares[0] / float(p.n) + p.eps);
#else
  if (tid == 0u) {
    Acc sum = accFrom(0.0);
    for (uint i = 0; i < p.n; ++i) {
      precise float sq = p.x.v[xBase + i] * p.x.v[xBase + i];
      sum = accAdd(sum, sq);
    }
    precise float shifted = accDivToFloat(sum, float(p.n)) + p.eps;
    rowScale = mathDiv(1.0, mathSqrt(shifted));
  }
#endif
  barrier();
  const float scale = rowScale;
  for (uint i = tid; i < p.n; i += gl_WorkGroupSize.x) {
    precise float v = (p.x.v[xBase + i] * scale) * p.weight.v[i];
    p.y.v[yBase + i] = v;
  }
}
