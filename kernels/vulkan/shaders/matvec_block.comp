#version 450
// The decode mat-vec of every weight type (a WTYPE_<type> define): y = W x for a few tokens, in
// the device's own arithmetic. Up to three matrices of one type and width
// share the dispatch (a layer's Q, K and V projections, or its FFN gate and up), and an epilogue
// folds in the op that follows:
//   epilogue 0  y_m[t][r] = dot(W_m row r, x[t])                for each matrix m
//   epilogue 1  y_m[t][r] += ...                                (the residual add after Wo, Wdown)
//   epilogue 2  y_0[t][r] = silu(dot(W_0 row r, x[t])) * dot(W_1 row r, x[t])   (SwiGLU)
// and in epilogues 0 and 1 a matrix's bias (when its address is not 0) is added to its sums:
// the AddBias ops after a projection (qwen2's Q, K and V biases).
//
// Activations are f32, except with Q4_0, Q4_1 and Q8_0 weights (chunks.glsl Q8_ACTIVATIONS):
// those take each 32-element block of x quantized to 8 bits as quantize_q8.comp does it, here in
// the invocation that needs it, and integer dot products with the weights' quants, as
// matvec_q8.comp (and the CPU backend, and llama.cpp) compute them: the decode products of these
// types round as the CPU's without a quantizing dispatch of their own, and as matvec_q8.comp's
// bit for bit (a decode row equals the same row of a prefill batch).
//
// A slot of LANES invocations (specialization constant 1, a power of two of at least TOKENS:
// short rows get fewer, by matvec_q8.comp's rule) takes ROWS consecutive rows (constant 2); a
// workgroup holds group size / LANES slots. The LANES invocations take the rows' 32-element
// chunks in turn (chunks.glsl: a block, or a K-quant's sub-block, decoded in one go from word
// loads), so neighbouring invocations read neighbouring blocks and each row streams through
// memory once. An invocation loads (or quantizes) an activation chunk once for its ROWS rows:
// the quantizing costs ALU per chunk, which ROWS rows share. Each row's lanes then add their
// partial sums: subgroupAdd where a slot spans whole subgroups (USE_SUBGROUP), else a
// shared-memory tree. Groups stride over the rows beyond the dispatch's width; the second
// dispatch dimension runs over tiles of TOKENS tokens.
#extension GL_EXT_buffer_reference_uvec2 : require
#ifdef USE_INT_DOT
#extension GL_EXT_spirv_intrinsics : require
#endif
#include "common.glsl"
#include "blocks.glsl"
#include "chunks.glsl"
#include "math.glsl"

#define TOKENS 4u
layout(constant_id = 1) const uint LANES = 64;  // invocations per row; divides the group size
layout(constant_id = 2) const uint ROWS = 1;    // consecutive rows per slot of LANES invocations

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Vec4s { vec4 v[]; };

#ifdef EXPERTS
// A mixture of experts' product (mul_mat_id): the second dispatch dimension runs over (token, k)
// entries, one per workgroup; entry i multiplies expert ids[i]'s matrix with x row i
// (xPerEntry) or i / used (its token's row), into y row i. No epilogue.
layout(push_constant) uniform Push {
  uvec2 w;           // every expert's matrix, one after another
  uvec2 y;           // entries x rows
  uvec2 x;           // input rows, 16-byte aligned
  uvec2 ids;         // per entry: its expert
  uint rows;         // rows per expert
  uint cols;         // a multiple of 32
  uint rowBytes;
  uint matrixBytes;  // one expert's matrix
  uint used;         // entries per token
  uint xPerEntry;
} p;
#else
layout(push_constant) uniform Push {
  uvec2 w[3];     // the matrices (device addresses; unused ones 0)
  uvec2 y[3];     // their outputs, rows[m] floats per token
  uvec2 x;        // tokens x cols floats, 16-byte aligned
  uvec2 bias[3];  // per matrix: rows[m] floats added to every token's row, or 0
  uint rows[3];   // rows of each matrix (0: absent); in epilogue 2 rows[0] == rows[1]
  uint cols;      // a multiple of 32
  uint rowBytes;  // of every matrix
  uint tokens;
  uint epilogue;
} p;
#endif

// Where a product's parts are, for the plain and the experts' variant: the matrix (and its
// output) of matrix index m, the byte offset of row r in it, the activation row of token t, and
// the output index of (m, t, r).
#ifdef EXPERTS
uint expertBase() { return uint(Ints(p.ids).v[gl_WorkGroupID.y]) * p.matrixBytes; }
uvec2 matrixOf(uint m) { return p.w; }
uvec2 outputOf(uint m) { return p.y; }
uint rowOffset(uint m, uint r) { return expertBase() + r * p.rowBytes; }
uint xRowOf(uint t) { return p.xPerEntry != 0u ? t : t / p.used; }
uint outputIndex(uint m, uint t, uint r) { return t * p.rows + r; }
#else
uvec2 matrixOf(uint m) { return p.w[m]; }
uvec2 outputOf(uint m) { return p.y[m]; }
uint rowOffset(uint m, uint r) { return r * p.rowBytes; }
uint xRowOf(uint t) { return t; }
uint outputIndex(uint m, uint t, uint r) { return t * p.rows[m] + r; }
#endif

// Per (row of the slot, value, token), one sum per invocation: value 1 is the up projection of
// epilogue 2.
shared float partial[ROWS * 2u * TOKENS * gl_WorkGroupSize.x];

#ifdef Q8_ACTIVATIONS
#ifdef USE_INT_DOT
// OpSDot of two words of four signed bytes (SPV_KHR_integer_dot_product; format 0 is
// PackedVectorFormat4x8Bit): this glslang has no GL_EXT_integer_dot_product, so the instruction
// is declared by its opcode.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450) int sdot4x8(int a, int b, spirv_literal int format);
#endif

// The 32 activations from vec4 xAt on as quantize_q8.comp quantizes them: quants qx, the
// f16-rounded scale d and (Q8_1's extra) s = d * sum of the quants, f16-rounded.
void quantizeBlock(uint xAt, out ivec4 qx[8], out float d, out float s) {
  Vec4s x = Vec4s(p.x);
  vec4 v[8];
  float amax = 0.0;
  for (uint k = 0; k < 8u; ++k) {
    v[k] = x.v[xAt + k];
    const vec4 a = abs(v[k]);
    amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
  }
  const float scale = mathDiv(amax, 127.0);
  const float inverse = amax != 0.0 ? mathDiv(127.0, amax) : 0.0;
  int sum = 0;
  for (uint k = 0; k < 8u; ++k) {
    precise vec4 scaled = v[k] * inverse;
    qx[k] = ivec4(roundEven(scaled));
    sum += qx[k].x + qx[k].y + qx[k].z + qx[k].w;
  }
  d = roundHalf(scale);
  precise float ds = scale * float(sum);
  s = roundHalf(ds);
}

// acc plus a weight block (quants q, scale dw, Q4_1's minimum mw) times a quantized activation
// block, rounded as matvec_q8.comp rounds it: with the same lanes per row and the same
// reduction, a row's result does not depend on whether the batch went here or there.
float addDot(float acc, ivec4 q[8], float dw, float mw, ivec4 qx[8], float dx, float sx) {
  int sum = 0;
  for (uint k = 0; k < 8u; ++k) {
#ifdef USE_INT_DOT
    // The exact integer sum either way: packed dot products where the device has them.
    sum += sdot4x8(pack32(i8vec4(q[k])), pack32(i8vec4(qx[k])), 0);
#else
    const ivec4 m = q[k] * qx[k];
    sum += m.x + m.y + m.z + m.w;
#endif
  }
  acc = fma(dw * dx, float(sum), acc);
#if defined(WTYPE_Q4_1)
  acc = fma(mw, sx, acc);
#endif
  return acc;
}
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x, group = gl_WorkGroupSize.x;
  const uint lane = tid % LANES, slot = tid / LANES, slots = group / LANES;
  const uint rowsPerGroup = slots * ROWS;
  const uint chunks = p.cols / 32u;
#ifdef EXPERTS
  // One entry per workgroup: its "token" is the entry.
  const bool swiglu = false;
  const uint total = p.rows;
  const uint t0 = gl_WorkGroupID.y, tileTokens = 1u;
#else
  const bool swiglu = p.epilogue == 2u;
  const uint total = swiglu ? p.rows[0] : p.rows[0] + p.rows[1] + p.rows[2];
  const uint t0 = gl_WorkGroupID.y * TOKENS;
  const uint tileTokens = min(TOKENS, p.tokens - t0);
#endif
  const uint values = swiglu ? 2u : 1u;  // sums per (row, token)
  // Every invocation runs the same number of iterations (barriers stay in uniform control flow);
  // a row past the last one computes nothing and writes nothing.
  for (uint first = gl_WorkGroupID.x * rowsPerGroup; first < total;
       first += gl_NumWorkGroups.x * rowsPerGroup) {
    // This slot's rows first + slot * ROWS + j: row r[j] of matrix m[j] (the matrices' rows one
    // after another).
    uint m[ROWS], r[ROWS];
    for (uint j = 0; j < ROWS; ++j) {
      m[j] = 0u;
      r[j] = first + slot * ROWS + j;
#ifndef EXPERTS
      if (!swiglu && r[j] >= p.rows[0]) {
        r[j] -= p.rows[0];
        m[j] = 1u;
        if (r[j] >= p.rows[1]) {
          r[j] -= p.rows[1];
          m[j] = 2u;
        }
      }
#endif
    }
    // acc[(j * 2 + v) * TOKENS + t]: row j, value v, token t.
    float acc[ROWS * 2u * TOKENS];
    for (uint i = 0; i < ROWS * 2u * TOKENS; ++i) acc[i] = 0.0;
    for (uint c = lane; c < chunks; c += LANES) {
      for (uint t = 0; t < tileTokens; ++t) {
        const uint xAt = (xRowOf(t0 + t) * p.cols + 32u * c) / 4u;
        // The activations' chunk once for the slot's rows: quantized, or as loaded.
#ifdef Q8_ACTIVATIONS
        ivec4 qx[8];
        float dx, sx;
        quantizeBlock(xAt, qx, dx, sx);
#else
        vec4 xv[8];
        for (uint k = 0; k < 8u; ++k) xv[k] = Vec4s(p.x).v[xAt + k];
#endif
        for (uint j = 0; j < ROWS; ++j) {
          if (first + slot * ROWS + j >= total) break;
          const uint row = rowOffset(m[j], r[j]);
          for (uint v = 0; v < values; ++v) {
            const uvec2 w = matrixOf(v == 0u ? m[j] : 1u);
            const uint at = (j * 2u + v) * TOKENS + t;
#ifdef Q8_ACTIVATIONS
            ivec4 q[8];
            float dw, mw;
            quants32(Halves(w), row, c, q, dw, mw);
            acc[at] = addDot(acc[at], q, dw, mw, qx, dx, sx);
#else
            vec4 wv[8];
            chunk32(Bytes(w), Halves(w), row, c, wv);
            for (uint k = 0; k < 8u; ++k) acc[at] += dot(wv[k], xv[k]);
#endif
          }
        }
      }
    }
    // Each row's LANES partial sums, added: within subgroups, then their sums (a row of whole
    // subgroups); or a tree over the row's lanes in shared memory. Entry e = (j * 2 + v) *
    // TOKENS + t of slot `slot`, lane i, lives at e * group + slot * width + i.
    uint width = LANES;
#ifdef USE_SUBGROUP
    if (LANES >= gl_SubgroupSize) {
      for (uint e = 0; e < ROWS * 2u * TOKENS; ++e) {
        if (e % TOKENS >= tileTokens || (e / TOKENS) % 2u >= values) continue;  // uniform
        const float s = subgroupAdd(acc[e]);
        if (gl_SubgroupInvocationID == 0u) partial[e * group + gl_SubgroupID] = s;
      }
      barrier();
      // Slot `slot`'s subgroup sums are entries slot * width .. (subgroups hold consecutive
      // invocations, as every driver assigns them).
      width = LANES / gl_SubgroupSize;
      if (lane < width) {
        for (uint e = 0; e < ROWS * 2u * TOKENS; ++e) {
          if (e % TOKENS < tileTokens && (e / TOKENS) % 2u < values) {
            acc[e] = partial[e * group + slot * width + lane];
          }
        }
      }
      barrier();
    }
#endif
    if (lane < width) {
      for (uint e = 0; e < ROWS * 2u * TOKENS; ++e) {
        if (e % TOKENS < tileTokens && (e / TOKENS) % 2u < values) {
          partial[e * group + slot * width + lane] = acc[e];
        }
      }
    }
    barrier();
    for (uint stride = width / 2u; stride > 0u; stride >>= 1) {
      if (lane < stride) {
        for (uint e = 0; e < ROWS * 2u * TOKENS; ++e) {
          if (e % TOKENS < tileTokens && (e / TOKENS) % 2u < values) {
            const uint at = e * group + slot * width + lane;
            partial[at] += partial[at + stride];
          }
        }
      }
      barrier();
    }
    // Lane t writes token t of each of the slot's rows.
    if (lane < tileTokens) {
      for (uint j = 0; j < ROWS; ++j) {
        if (first + slot * ROWS + j >= total) break;
        const uint t = t0 + lane;
        const float v = partial[((j * 2u) * TOKENS + lane) * group + slot * width];
        Floats y = Floats(outputOf(m[j]));
        const uint at = outputIndex(m[j], t, r[j]);
#ifdef EXPERTS
        y.v[at] = v;
#else
        if (swiglu) {
          const float up = partial[((j * 2u + 1u) * TOKENS + lane) * group + slot * width];
          y.v[at] = v / (1.0 + exp(-v)) * up;
        } else {
          const uvec2 biasAt = p.bias[m[j]];
          float sum = v;
          if (biasAt != uvec2(0u)) {
            Floats b = Floats(biasAt);
            sum += b.v[r[j]];
          }
          if (p.epilogue == 1u) {
            y.v[at] += sum;
          } else {
            y.v[at] = sum;
          }
        }
#endif
      }
    }
    barrier();  // partial is reused by the next rows
  }
}
