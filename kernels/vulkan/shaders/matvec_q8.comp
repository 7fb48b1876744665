#version 450
// y[t][r] = dot(W row r, x[t]) for weights of a 32-element block type (Q4_0, Q4_1, Q8_0: a
// WTYPE_<type> define) and activations quantized to 8 bits by quantize_q8.comp, in the device's
// own arithmetic (the default variant; matvec_q8_exact.comp keeps the CPU backend's order).
//
// A workgroup takes ROWS = group size / LANES weight rows (LANES, specialization constant 1, a
// power of two: the host gives short rows fewer lanes, so that a head of 49152 rows of 18 blocks
// is 6144 workgroups of 8 rows, not 49152 of one). The LANES invocations of a row take its
// blocks in turn, so neighbouring invocations read neighbouring blocks and the row streams
// through memory once, coalesced. Each invocation unpacks a block's weights once and multiplies
// them with up to TOKENS activation rows: exact integer dot products per block, scaled by
// d_w * d_x (plus m_w * s_x for Q4_1), so a prefill batch reads each weight once per TOKENS
// tokens instead of once per token. Each row's lanes then add their partial sums (subgroupAdd
// where a row spans whole subgroups, USE_SUBGROUP; else a shared-memory tree). Blocks are 2-byte
// aligned, so weights are read as 16-bit halves combined into words: no dynamically indexed
// local array, no byte loads.
// Groups stride over the rows beyond the dispatch's width (Vulkan guarantees 65535 groups in x);
// the second dispatch dimension runs over tiles of TOKENS tokens.
#ifdef USE_INT_DOT
#extension GL_EXT_spirv_intrinsics : require
#endif
#include "common.glsl"

#define TOKENS 8u
layout(constant_id = 1) const uint LANES = 64;  // invocations per row; divides the group size

layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Words { uint v[]; };

layout(push_constant) uniform Push {
  Halves w;  // the weights as 16-bit halves
  Words qs;  // activation quants, 8 words (32 int8) per block
  Floats d;  // per activation block: its scale
  Floats s;  // per activation block: d * sum of its quants (Q8_1's extra, read by Q4_1)
  Floats y;
  uint rows;
  uint cols;
  uint rowBytes;
  uint tokens;
} p;

#if defined(WTYPE_Q4_0)
#define BLOCK_BYTES 18u
#define QUANTS_AT 2u  // byte offset of the quants in a block
#define QUANT_WORDS 4u
#elif defined(WTYPE_Q4_1)
#define BLOCK_BYTES 20u
#define QUANTS_AT 4u
#define QUANT_WORDS 4u
#elif defined(WTYPE_Q8_0)
#define BLOCK_BYTES 34u
#define QUANTS_AT 2u
#define QUANT_WORDS 8u
#else
#error "define WTYPE_Q4_0, WTYPE_Q4_1 or WTYPE_Q8_0"
#endif

shared float partial[TOKENS * gl_WorkGroupSize.x];  // per token, one sum per invocation

uint halfAt(uint byteOffset) { return uint(p.w.v[byteOffset >> 1]); }
uint wordAt(uint byteOffset) { return halfAt(byteOffset) | (halfAt(byteOffset + 2u) << 16); }

#ifdef USE_INT_DOT
// OpSDot of two words of four signed bytes (SPV_KHR_integer_dot_product, format 0 =
// PackedVectorFormat4x8Bit), declared by its opcode: Debian's glslang has no
// GL_EXT_integer_dot_product.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450) int sdot4x8(int a, int b, spirv_literal int format);
#endif

// Sum of the products of four signed bytes with four bytes (weights: signed, or unsigned nibbles
// already offset into ivec4): the exact integer sum, by a packed dot product where the device has
// one (USE_INT_DOT).
int dot4(ivec4 a, uint xword) {
#ifdef USE_INT_DOT
  return sdot4x8(pack32(i8vec4(a)), int(xword), 0);
#else
  const ivec4 b = ivec4(unpack8(int(xword)));
  const ivec4 m = a * b;
  return m.x + m.y + m.z + m.w;
#endif
}

void main() {
  const uint tid = gl_LocalInvocationID.x, group = gl_WorkGroupSize.x;
  const uint lane = tid % LANES, slot = tid / LANES, rowsPerGroup = group / LANES;
  const uint nb = p.cols / 32u;
  const uint t0 = gl_WorkGroupID.y * TOKENS;
  const uint tileTokens = min(TOKENS, p.tokens - t0);
  // Every invocation runs the same number of iterations (barriers stay in uniform control flow);
  // a slot past the last row computes nothing and writes nothing.
  for (uint first = gl_WorkGroupID.x * rowsPerGroup; first < p.rows;
       first += gl_NumWorkGroups.x * rowsPerGroup) {
    const uint row = first + slot;
    float acc[TOKENS];
    for (uint t = 0; t < TOKENS; ++t) acc[t] = 0.0;
    for (uint b = lane; b < nb && row < p.rows; b += LANES) {
      const uint base = row * p.rowBytes + b * BLOCK_BYTES;
      const float dw = unpackHalf2x16(halfAt(base)).x;
#if defined(WTYPE_Q4_1)
      const float mw = unpackHalf2x16(halfAt(base + 2u)).x;
#endif
      // The block's 32 weights as signed values, four per ivec4, in element order.
      ivec4 q[8];
#if defined(WTYPE_Q8_0)
      for (uint k = 0; k < 8u; ++k) q[k] = ivec4(unpack8(int(wordAt(base + QUANTS_AT + 4u * k))));
#else
      // Elements 0..15 are the low nibbles of quant bytes 0..15, elements 16..31 the high ones.
#if defined(WTYPE_Q4_0)
      const ivec4 offset = ivec4(8);
#else
      const ivec4 offset = ivec4(0);
#endif
      for (uint k = 0; k < 4u; ++k) {
        const uint word = wordAt(base + QUANTS_AT + 4u * k);
        q[k] = ivec4(unpack8(word & 0x0f0f0f0fu)) - offset;
        q[k + 4u] = ivec4(unpack8((word >> 4) & 0x0f0f0f0fu)) - offset;
      }
#endif
      for (uint t = 0; t < TOKENS; ++t) {
        if (t >= tileTokens) break;
        const uint xb = (t0 + t) * nb + b;
        int sum = 0;
        for (uint k = 0; k < 8u; ++k) sum += dot4(q[k], p.qs.v[xb * 8u + k]);
        acc[t] = fma(dw * p.d.v[xb], float(sum), acc[t]);
#if defined(WTYPE_Q4_1)
        acc[t] = fma(mw, p.s.v[xb], acc[t]);
#endif
      }
    }
    // The row's LANES partial sums, added: within subgroups, then their sums (a row of whole
    // subgroups); or a tree over the row's lanes in shared memory.
    uint width = LANES;
#ifdef USE_SUBGROUP
    if (LANES >= gl_SubgroupSize) {
      for (uint t = 0; t < TOKENS; ++t) {
        if (t >= tileTokens) break;  // uniform: the whole group stops together
        const float v = subgroupAdd(acc[t]);
        if (gl_SubgroupInvocationID == 0u) partial[t * group + gl_SubgroupID] = v;
      }
      barrier();
      // Row `slot`'s subgroup sums are entries slot * width .. of each token's part (subgroups
      // hold consecutive invocations, as every driver assigns them).
      width = LANES / gl_SubgroupSize;
      if (lane < width) {
        for (uint t = 0; t < TOKENS; ++t) {
          if (t < tileTokens) acc[t] = partial[t * group + slot * width + lane];
        }
      }
      barrier();
    }
#endif
    if (lane < width) {
      for (uint t = 0; t < TOKENS; ++t) {
        if (t < tileTokens) partial[t * group + slot * width + lane] = acc[t];
      }
    }
    barrier();
    for (uint stride = width / 2u; stride > 0u; stride >>= 1) {
      if (lane < stride) {
        for (uint t = 0; t < TOKENS; ++t) {
          if (t >= tileTokens) break;
          partial[t * group + slot * width + lane] += partial[t * group + slot * width + lane + stride];
        }
      }
      barrier();
    }
    if (row < p.rows && lane < tileTokens) {
      p.y.v[(t0 + lane) * p.rows + row] = partial[lane * group + slot * width];
    }
    barrier();  // partial is reused by the next rows
  }
}
