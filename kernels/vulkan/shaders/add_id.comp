#version 450
// y[i][c] += bias[ids[i]][c]: each (token, k) entry's expert bias row after its product
// (ggml_add_id), for entries x cols values.
#include "common.glsl"

layout(push_constant) uniform Push {
  Floats bias;  // experts x cols
  Ints ids;     // entries: the entry's expert
  Floats y;     // entries x cols
  uint entries;
  uint cols;
} p;

void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= p.entries * p.cols) return;
  const uint entry = i / p.cols, c = i % p.cols;
  p.y.v[i] += p.bias.v[uint(p.ids.v[entry]) * p.cols + c];
}
