#version 450
// Activations quantized to 8 bits per 32-element block, as the CPU backend's Q8_0/Q8_1
// quantizer does (kernels/cpu/reference_convert.cpp, ggml's x86 quantize_row_q8_1): d = amax/127
// rounded to f16, quants = roundEven(x * (127/amax)), and s = d * sum(quants) rounded to f16
// (the Q8_1 extra; Q8_0 consumers ignore it). One invocation per block. Output layout (not
// ggml's interleaved blocks: the integer kernels read quants as aligned words):
//   qs[tokens * cols] int8, four per word; d[tokens * cols / 32] and s[...] as the f16 values in
//   f32.
#include "common.glsl"
#include "math.glsl"

layout(buffer_reference, std430, buffer_reference_align = 4) writeonly buffer OutWords {
  uint v[];
};

layout(push_constant) uniform Push {
  Floats x;
  OutWords qs;
  Floats d;
  Floats s;
  uint blocks;  // tokens * cols / 32
} p;

void main() {
  const uint b = gl_GlobalInvocationID.x;
  if (b >= p.blocks) return;
  const uint base = b * 32u;
  float amax = 0.0;
  for (uint j = 0; j < 32u; ++j) amax = max(amax, abs(p.x.v[base + j]));
  const float d = mathDiv(amax, 127.0);
  const float id = amax != 0.0 ? mathDiv(127.0, amax) : 0.0;
  int sum = 0;
  for (uint w = 0; w < 8u; ++w) {
    uint word = 0u;
    for (uint e = 0; e < 4u; ++e) {
      precise float scaled = p.x.v[base + 4u * w + e] * id;
      const int q = int(roundEven(scaled));
      sum += q;
      word |= (uint(q) & 0xffu) << (8u * e);
    }
    p.qs.v[b * 8u + w] = word;
  }
  p.d.v[b] = roundHalf(d);
  precise float ds = d * float(sum);
  p.s.v[b] = roundHalf(ds);
}
