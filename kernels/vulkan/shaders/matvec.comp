#version 450
// y[t][r] = dot(W row r, x[t]) for decode: one workgroup per (row, token), the threads striding
// over the row's elements, then a reduction: subgroupAdd where the device has it
// (USE_SUBGROUP), else a shared-memory tree. The weight type is a WTYPE_<type> define.
// With EXPERTS (a mixture of experts' mul_mat_id), w holds one matrix per expert and the
// second dimension runs over (token, k) entries: entry i multiplies expert ids[i]'s matrix with
// x row i (xPerEntry) or i / used (the token's own row), into y row i.
#include "common.glsl"
#include "blocks.glsl"

layout(push_constant) uniform Push {
  Bytes w;
  Halves wh;  // the same address as w
  Floats x;
  Floats y;
#ifdef EXPERTS
  Ints ids;
#endif
  uint rows;
  uint cols;
  uint rowBytes;
#ifdef EXPERTS
  uint matrixBytes;  // one expert's matrix
  uint used;         // entries per token
  uint xPerEntry;
#endif
} p;

shared float partial[gl_WorkGroupSize.x];

void main() {
  const uint row = gl_WorkGroupID.x, token = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
#ifdef EXPERTS
  const uint rowBase = uint(p.ids.v[token]) * p.matrixBytes + row * p.rowBytes;
  const uint xBase = (p.xPerEntry != 0u ? token : token / p.used) * p.cols;
#else
  const uint rowBase = row * p.rowBytes, xBase = token * p.cols;
#endif
  float sum = 0.0;
  for (uint e = tid; e < p.cols; e += gl_WorkGroupSize.x) {
    sum += dq(p.w, p.wh, rowBase + (e / QK) * BLOCK_BYTES, e % QK) * p.x.v[xBase + e];
  }
#ifdef USE_SUBGROUP
  sum = subgroupAdd(sum);
  if (gl_SubgroupInvocationID == 0) partial[gl_SubgroupID] = sum;
  barrier();
  if (tid == 0) {
    float total = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; ++i) total += partial[i];
    p.y.v[token * p.rows + row] = total;
  }
#else
  partial[tid] = sum;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (tid < s) partial[tid] += partial[tid + s];
    barrier();
  }
  if (tid == 0) p.y.v[token * p.rows + row] = partial[0];
#endif
}
