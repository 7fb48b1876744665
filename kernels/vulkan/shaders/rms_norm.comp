#version 450
// y[t] = (x[firstRow + t] * 1/sqrt(mean(x^2) + eps)) * weight, one workgroup per row (ggml's
// order: scale first, then the weight multiply).
#include "common.glsl"

layout(push_constant) uniform Push {
  Floats x;
  Floats weight;
  Floats y;
  uint n;
  uint firstRow;
  float eps;
} p;

shared float partial[gl_WorkGroupSize.x];

void main() {
  const uint t = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
  const uint xBase = (p.firstRow + t) * p.n, yBase = t * p.n;
  float sum = 0.0;
  for (uint i = tid; i < p.n; i += gl_WorkGroupSize.x) {
    const float v = p.x.v[xBase + i];
    sum += v * v;
  }
  partial[tid] = sum;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    barrier();
  }
  const float scale = 1.0 / sqrt(partial[0] / float(p.n) + p.eps);
  for (uint i = tid; i < p.n; i += gl_WorkGroupSize.x) {
    p.y.v[yBase + i] = (p.x.v[xBase + i] * scale) * p.weight.v[i];
  }
}
