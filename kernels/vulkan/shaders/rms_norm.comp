#version 450
// y[t] = (x[firstRow + t] * scale) * weight with scale = 1 / sqrt(mean(x^2) + eps), one
// workgroup per row. The workgroups from `rows` on normalize a second set of rows instead (x2,
// weight2, y2, rows of n2, no firstRow): a layer's per-head Q and K norms in one dispatch. Default: each invocation sums the squares of a strided share of the row,
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
  Floats x2;
  Floats weight2;
  Floats y2;
  uint n;
  uint firstRow;
  float eps;
  uint rows;  // workgroups of the first set
  uint n2;
} p;

shared float rowScale;
#ifndef SHOAL_EXACT_MATH
shared float shares[gl_WorkGroupSize.x];
#endif

void main() {
  const bool second = gl_WorkGroupID.x >= p.rows;
  const uint t = second ? gl_WorkGroupID.x - p.rows : gl_WorkGroupID.x;
  const uint tid = gl_LocalInvocationID.x, n = second ? p.n2 : p.n;
  const uint xBase = second ? t * n : (p.firstRow + t) * n, yBase = t * n;
  Floats x = second ? p.x2 : p.x, weight = second ? p.weight2 : p.weight, y = second ? p.y2 : p.y;
#ifndef SHOAL_EXACT_MATH
  float share = 0.0;
  for (uint i = tid; i < n; i += gl_WorkGroupSize.x) {
    share = fma(x.v[xBase + i], x.v[xBase + i], share);
  }
  shares[tid] = share;
  barrier();
  for (uint stride = gl_WorkGroupSize.x / 2u; stride > 0u; stride >>= 1) {
    if (tid < stride) shares[tid] += shares[tid + stride];
    barrier();
  }
  if (tid == 0u) rowScale = inversesqrt(shares[0] / float(n) + p.eps);
#else
  if (tid == 0u) {
    Acc sum = accFrom(0.0);
    for (uint i = 0; i < n; ++i) {
      precise float sq = x.v[xBase + i] * x.v[xBase + i];
      sum = accAdd(sum, sq);
    }
    precise float shifted = accDivToFloat(sum, float(n)) + p.eps;
    rowScale = mathDiv(1.0, mathSqrt(shifted));
  }
#endif
  barrier();
  const float scale = rowScale;
  for (uint i = tid; i < n; i += gl_WorkGroupSize.x) {
    precise float v = (x.v[xBase + i] * scale) * weight.v[i];
    y.v[yBase + i] = v;
  }
}
