#version 450
// y[t][r] = dot(W row r, x[t]) for a prefill batch of a 32-element block type (Q4_0, Q4_1, Q8_0:
// a WTYPE_<type> define) against activations quantized to 8 bits by quantize_q8.comp: the tiled
// integer matmul (the idea of ggml-vulkan's mul_mmq), in the device's own arithmetic.
//
// A workgroup of 128 invocations computes a tile of BM = 64 rows x BN = 32 tokens, so each weight
// block is read from memory once per 32 tokens and each activation block once per 64 rows
// (matvec_q8.comp reads every weight once per 8 tokens). The blocks go through shared memory
// two at a time (one per invocation for the weights, unpacked there into signed 8-bit words),
// and each invocation keeps a register tile of 4 rows x 4 tokens: per block, 16 exact integer
// dot products of 32 elements (8 packed dot products each where the device has them,
// USE_INT_DOT), each scaled by d_w * d_x into its float sum (plus m_w * s_x for Q4_1). The rows
// and tokens of an invocation are strided (16 and 8 apart), and the shared rows padded by one
// word, so that the invocations of a subgroup read distinct banks or one broadcast word.
//
// Rows, tokens and blocks past the matrix are zeros in shared memory and never written. Groups
// stride over row tiles past the dispatch's width (Vulkan guarantees 65535 groups in x); the
// second dispatch dimension runs over tiles of BN tokens.
#ifdef USE_INT_DOT
#extension GL_EXT_spirv_intrinsics : require
#endif
#include "common.glsl"

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
#elif defined(WTYPE_Q4_1)
#define BLOCK_BYTES 20u
#define QUANTS_AT 4u
#elif defined(WTYPE_Q8_0)
#define BLOCK_BYTES 34u
#define QUANTS_AT 2u
#else
#error "define WTYPE_Q4_0, WTYPE_Q4_1 or WTYPE_Q8_0"
#endif

const uint BM = 64u, BN = 32u;  // rows and tokens of a workgroup's tile
const uint BB = 2u;             // blocks per pass through shared memory
const uint TM = 4u, TN = 4u;    // rows and tokens of an invocation's tile
const uint WORDS = BB * 8u + 1u;  // words per shared row: 8 per block, padded by one

shared uint wq[BM * WORDS];  // weights, signed 8-bit, 4 per word
shared float wd[BM * BB];
#if defined(WTYPE_Q4_1)
shared float wm[BM * BB];
#endif
shared uint xq[BN * WORDS];  // activations, as quantize_q8 wrote them
shared float xd[BN * BB];
#if defined(WTYPE_Q4_1)
shared float xs[BN * BB];
#endif

uint halfAt(uint byteOffset) { return uint(p.w.v[byteOffset >> 1]); }
uint wordAt(uint byteOffset) { return halfAt(byteOffset) | (halfAt(byteOffset + 2u) << 16); }

#ifdef USE_INT_DOT
// OpSDot of two words of four signed bytes (SPV_KHR_integer_dot_product, format 0 =
// PackedVectorFormat4x8Bit), declared by its opcode: Debian's glslang has no
// GL_EXT_integer_dot_product.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450) int sdot4x8(int a, int b, spirv_literal int format);
#endif

// The exact sum of the products of two words' four signed bytes.
int dot4(uint a, uint b) {
#ifdef USE_INT_DOT
  return sdot4x8(int(a), int(b), 0);
#else
  const ivec4 m = ivec4(unpack8(int(a))) * ivec4(unpack8(int(b)));
  return m.x + m.y + m.z + m.w;
#endif
}

void main() {
  const uint tid = gl_LocalInvocationID.x;  // 128 invocations
  const uint tx = tid % 8u, ty = tid / 8u;  // tokens tx + 8j, rows ty + 16i of the tile
  const uint nb = p.cols / 32u;
  const uint t0 = gl_WorkGroupID.y * BN;
  const uint rowTiles = (p.rows + BM - 1u) / BM;
  for (uint tile = gl_WorkGroupID.x; tile < rowTiles; tile += gl_NumWorkGroups.x) {
    const uint r0 = tile * BM;
    float acc[TM][TN];
    for (uint i = 0; i < TM; ++i)
      for (uint j = 0; j < TN; ++j) acc[i][j] = 0.0;
    for (uint b0 = 0; b0 < nb; b0 += BB) {
      // Weights: invocation tid unpacks block b0 + tid % BB of tile row tid / BB.
      {
        const uint r = tid / BB, k = tid % BB, row = r0 + r, b = b0 + k;
        const uint at = r * WORDS + k * 8u;
        if (row < p.rows && b < nb) {
          const uint base = row * p.rowBytes + b * BLOCK_BYTES;
          wd[r * BB + k] = unpackHalf2x16(halfAt(base)).x;
#if defined(WTYPE_Q4_1)
          wm[r * BB + k] = unpackHalf2x16(halfAt(base + 2u)).x;
#endif
#if defined(WTYPE_Q8_0)
          for (uint q = 0; q < 8u; ++q) wq[at + q] = wordAt(base + QUANTS_AT + 4u * q);
#else
          // Elements 0..15 are the low nibbles of quant bytes 0..15, elements 16..31 the high
          // ones. Q4_0 stores q + 8: 8 is taken off each byte with its top bit set first, so no
          // borrow crosses into the next byte, and the top bit flipped back.
          for (uint q = 0; q < 4u; ++q) {
            const uint word = wordAt(base + QUANTS_AT + 4u * q);
#if defined(WTYPE_Q4_0)
            wq[at + q] = (((word & 0x0f0f0f0fu) | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
            wq[at + q + 4u] =
                ((((word >> 4) & 0x0f0f0f0fu) | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
#else
            wq[at + q] = word & 0x0f0f0f0fu;
            wq[at + q + 4u] = (word >> 4) & 0x0f0f0f0fu;
#endif
          }
#endif
        } else {
          wd[r * BB + k] = 0.0;
#if defined(WTYPE_Q4_1)
          wm[r * BB + k] = 0.0;
#endif
          for (uint q = 0; q < 8u; ++q) wq[at + q] = 0u;
        }
      }
      // Activations: BN tokens x BB blocks x 8 words, 4 words per invocation; the first BN * BB
      // invocations also take one block's scale (and sum).
      for (uint i = tid; i < BN * BB * 8u; i += 128u) {
        const uint t = i / (BB * 8u), k = (i / 8u) % BB, q = i % 8u;
        const uint tok = t0 + t, b = b0 + k;
        xq[t * WORDS + k * 8u + q] = (tok < p.tokens && b < nb) ? p.qs.v[(tok * nb + b) * 8u + q] : 0u;
      }
      if (tid < BN * BB) {
        const uint t = tid / BB, k = tid % BB, tok = t0 + t, b = b0 + k;
        const bool live = tok < p.tokens && b < nb;
        xd[tid] = live ? p.d.v[tok * nb + b] : 0.0;
#if defined(WTYPE_Q4_1)
        xs[tid] = live ? p.s.v[tok * nb + b] : 0.0;
#endif
      }
      barrier();
      for (uint k = 0; k < BB; ++k) {
        int sum[TM][TN];
        for (uint i = 0; i < TM; ++i)
          for (uint j = 0; j < TN; ++j) sum[i][j] = 0;
        for (uint q = 0; q < 8u; ++q) {
          uint a[TM], x[TN];
          for (uint i = 0; i < TM; ++i) a[i] = wq[(ty + 16u * i) * WORDS + k * 8u + q];
          for (uint j = 0; j < TN; ++j) x[j] = xq[(tx + 8u * j) * WORDS + k * 8u + q];
          for (uint i = 0; i < TM; ++i)
            for (uint j = 0; j < TN; ++j) sum[i][j] += dot4(a[i], x[j]);
        }
        for (uint i = 0; i < TM; ++i) {
          const uint r = ty + 16u * i;
          const float dw = wd[r * BB + k];
          for (uint j = 0; j < TN; ++j) {
            const uint t = tx + 8u * j;
            acc[i][j] = fma(dw * xd[t * BB + k], float(sum[i][j]), acc[i][j]);
#if defined(WTYPE_Q4_1)
            acc[i][j] = fma(wm[r * BB + k], xs[t * BB + k], acc[i][j]);
#endif
          }
        }
      }
      barrier();  // the next pass overwrites the shared tiles
    }
    for (uint i = 0; i < TM; ++i) {
      const uint row = r0 + ty + 16u * i;
      for (uint j = 0; j < TN; ++j) {
        const uint tok = t0 + tx + 8u * j;
        if (row < p.rows && tok < p.tokens) p.y.v[tok * p.rows + row] = acc[i][j];
      }
    }
  }
}
