#version 450
// y[t][r] = dot(W row r, x[t]) for weights of a 32-element block type (Q4_0, Q4_1, Q8_0: a
// WTYPE_<type> define) and activations quantized by quantize_q8.comp, in the CPU backend's order
// (kernels/cpu/reference_dots.cpp, ggml's AVX2 vec_dot): one invocation per (row, token) walks
// the row's blocks in order, keeping eight float lanes; lane k takes the exact integer dot of
// elements 4k..4k+3 of each block, lane = fma(d_w * d_x, dot, lane) once per block; the lanes are
// summed as hsum_float_8, then (Q4_1) the minimum term m_w * s_x accumulated by fma per block.
// Used for any token count: the CPU uses the same order for a batch. The exact-math variant only
// (SHOAL_VULKAN_MATH=exact: bit-identical to the CPU backend); matvec_q8.comp is the default.
#include "common.glsl"
#include "math.glsl"

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Words { uint v[]; };

layout(push_constant) uniform Push {
  Words w;  // the weights, read as 32-bit words (blocks are only 2-byte aligned)
  Words qs;
  Floats d;
  Floats s;
  Floats y;
  uint rows;
  uint cols;
  uint rowBytes;
  uint tokens;
} p;

#if defined(WTYPE_Q4_0)
#define BLOCK_BYTES 18u
#define QS_HALF 1u  // first 16-bit half of the quants
#elif defined(WTYPE_Q4_1)
#define BLOCK_BYTES 20u
#define QS_HALF 2u
#elif defined(WTYPE_Q8_0)
#define BLOCK_BYTES 34u
#define QS_HALF 1u
#else
#error "define WTYPE_Q4_0, WTYPE_Q4_1 or WTYPE_Q8_0"
#endif

// One block as the 32-bit words that cover it, loaded once (wide loads are much cheaper than
// 8/16-bit ones on some drivers); `shift` is 1 when the block starts in the middle of a word.
#define RAW_WORDS ((BLOCK_BYTES + 2u + 3u) / 4u)
uint raw[RAW_WORDS];
uint shift;

uint half16(uint i) { return (raw[(shift + i) >> 1] >> (16u * ((shift + i) & 1u))) & 0xffffu; }
// Bytes 4k..4k+3 of the block's quants.
uint weightWord(uint k) { return half16(QS_HALF + 2u * k) | (half16(QS_HALF + 2u * k + 1u) << 16); }

int sbyte(uint word, uint e) { return int(word << (24u - 8u * e)) >> 24; }

// Dot of four weights (nibbles at bit offset `shift` of each byte, minus `offset`) with four
// signed activation bytes.
int dot4Nibbles(uint wword, uint shift, int offset, uint xword) {
  int sum = 0;
  for (uint e = 0; e < 4u; ++e) {
    sum += (int((wword >> (8u * e + shift)) & 15u) - offset) * sbyte(xword, e);
  }
  return sum;
}
int dot4Bytes(uint wword, uint xword) {
  int sum = 0;
  for (uint e = 0; e < 4u; ++e) sum += sbyte(wword, e) * sbyte(xword, e);
  return sum;
}

void main() {
  const uint row = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
  if (row >= p.rows || t >= p.tokens) return;
  const uint nb = p.cols / 32u;
  float acc[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
  float summs = 0.0;
  for (uint b = 0; b < nb; ++b) {
    const uint byteOffset = row * p.rowBytes + b * BLOCK_BYTES;
    shift = (byteOffset >> 1) & 1u;
    const uint firstWord = byteOffset >> 2;
    for (uint i = 0; i < RAW_WORDS; ++i) {
      if (i < RAW_WORDS - 1u || shift != 0u || (BLOCK_BYTES % 4u) != 0u) raw[i] = p.w.v[firstWord + i];
    }
    const uint xb = t * nb + b;
    const float dw = halfValue(half16(0u));
    precise float scale = dw * p.d.v[xb];
    int lanes[8];
#if defined(WTYPE_Q8_0)
    for (uint k = 0; k < 8u; ++k) lanes[k] = dot4Bytes(weightWord(k), p.qs.v[xb * 8u + k]);
#else
#if defined(WTYPE_Q4_0)
    const int offset = 8;
#else
    const int offset = 0;
    summs = mathFma(halfValue(half16(1u)), p.s.v[xb], summs);
#endif
    // Elements 0..15 are the low nibbles of quant bytes 0..15, elements 16..31 the high ones.
    for (uint k = 0; k < 4u; ++k) {
      const uint ww = weightWord(k);
      lanes[k] = dot4Nibbles(ww, 0u, offset, p.qs.v[xb * 8u + k]);
      lanes[k + 4u] = dot4Nibbles(ww, 4u, offset, p.qs.v[xb * 8u + k + 4u]);
    }
#endif
    for (uint k = 0; k < 8u; ++k) acc[k] = mathFma(scale, float(lanes[k]), acc[k]);
  }
#if defined(WTYPE_Q4_1)
  precise float total = hsum8(acc) + summs;
#else
  const float total = hsum8(acc);
#endif
  p.y.v[t * p.rows + row] = total;
}
