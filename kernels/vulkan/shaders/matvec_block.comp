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
// matvec_q8.comp (and the CPU backend, and llama.cpp) compute them; so the decode products of
// these types round as the CPU's without a quantizing dispatch of their own (and as
// matvec_q8.comp's, bit for bit: a decode row equals the same row of a prefill batch). The rows of a
// workgroup quantize the same blocks again; x is a few KB in cache, the weights stream from
// memory once.
//
// A workgroup takes ROWS = group size / LANES rows (LANES, specialization constant 1, a power of
// two of at least TOKENS: the host gives short rows fewer lanes, by matvec_q8.comp's rule). The LANES invocations of a row
// take its 32-element chunks in turn (chunks.glsl: a block, or a K-quant's sub-block, decoded in
// one go from word loads), so neighbouring invocations read neighbouring blocks and the row
// streams through memory once. Each decoded chunk meets up to TOKENS activation rows (16-byte
// loads). The row's lanes then add their partial sums: subgroupAdd where a row spans whole
// subgroups (USE_SUBGROUP), else a shared-memory tree. Groups stride over the rows beyond the
// dispatch's width; the second dispatch dimension runs over tiles of TOKENS tokens.
#extension GL_EXT_buffer_reference_uvec2 : require
#include "common.glsl"
#include "blocks.glsl"
#include "chunks.glsl"
#include "math.glsl"

#define TOKENS 4u
layout(constant_id = 1) const uint LANES = 64;  // invocations per row; divides the group size

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Vec4s { vec4 v[]; };

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

// Per (value, token), one sum per invocation: value 1 is the up projection of epilogue 2.
shared float partial[2u * TOKENS * gl_WorkGroupSize.x];

#ifdef Q8_ACTIVATIONS
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
    const ivec4 m = q[k] * qx[k];
    sum += m.x + m.y + m.z + m.w;
  }
  acc = fma(dw * dx, float(sum), acc);
#if defined(WTYPE_Q4_1)
  acc = fma(mw, sx, acc);
#endif
  return acc;
}
#else
float dotChunk(vec4 w[8], uint xAt) {
  Vec4s x = Vec4s(p.x);
  float s = 0.0;
  for (uint k = 0; k < 8u; ++k) s += dot(w[k], x.v[xAt + k]);
  return s;
}
#endif

void main() {
  const uint tid = gl_LocalInvocationID.x, group = gl_WorkGroupSize.x;
  const uint lane = tid % LANES, slot = tid / LANES, rowsPerGroup = group / LANES;
  const uint chunks = p.cols / 32u;
  const bool swiglu = p.epilogue == 2u;
  const uint values = swiglu ? 2u : 1u;  // sums per (row, token)
  const uint total = swiglu ? p.rows[0] : p.rows[0] + p.rows[1] + p.rows[2];
  const uint t0 = gl_WorkGroupID.y * TOKENS;
  const uint tileTokens = min(TOKENS, p.tokens - t0);
  // Every invocation runs the same number of iterations (barriers stay in uniform control flow);
  // a slot past the last row computes nothing and writes nothing.
  for (uint first = gl_WorkGroupID.x * rowsPerGroup; first < total;
       first += gl_NumWorkGroups.x * rowsPerGroup) {
    // This slot's row: row r of matrix m (the matrices' rows one after another).
    uint m = 0u, r = first + slot;
    if (!swiglu && r >= p.rows[0]) {
      r -= p.rows[0];
      m = 1u;
      if (r >= p.rows[1]) {
        r -= p.rows[1];
        m = 2u;
      }
    }
    float acc[2u * TOKENS];
    for (uint i = 0; i < 2u * TOKENS; ++i) acc[i] = 0.0;
    if (first + slot < total) {
      const uint row = r * p.rowBytes;
      for (uint c = lane; c < chunks; c += LANES) {
#ifdef Q8_ACTIVATIONS
        ivec4 q[8], q1[8];
        float dw, mw, dw1 = 0.0, mw1 = 0.0;
        quants32(Halves(p.w[m]), row, c, q, dw, mw);
        if (swiglu) quants32(Halves(p.w[1]), row, c, q1, dw1, mw1);
        for (uint t = 0; t < tileTokens; ++t) {
          ivec4 qx[8];
          float dx, sx;
          quantizeBlock(((t0 + t) * p.cols + 32u * c) / 4u, qx, dx, sx);
          acc[t] = addDot(acc[t], q, dw, mw, qx, dx, sx);
          if (swiglu) acc[TOKENS + t] = addDot(acc[TOKENS + t], q1, dw1, mw1, qx, dx, sx);
        }
#else
        vec4 wv[8];
        chunk32(Bytes(p.w[m]), Halves(p.w[m]), row, c, wv);
        for (uint t = 0; t < tileTokens; ++t) {
          acc[t] += dotChunk(wv, ((t0 + t) * p.cols + 32u * c) / 4u);
        }
        if (swiglu) {
          chunk32(Bytes(p.w[1]), Halves(p.w[1]), row, c, wv);
          for (uint t = 0; t < tileTokens; ++t) {
            acc[TOKENS + t] += dotChunk(wv, ((t0 + t) * p.cols + 32u * c) / 4u);
          }
        }
#endif
      }
    }
    // The row's LANES partial sums, added: within subgroups, then their sums (a row of whole
    // subgroups); or a tree over the row's lanes in shared memory. Entry (v, t) of slot `slot`
    // lane `i` lives at ((v * TOKENS + t) * group + slot * width + i).
    uint width = LANES;
#ifdef USE_SUBGROUP
    if (LANES >= gl_SubgroupSize) {
      for (uint v = 0; v < values; ++v) {
        for (uint t = 0; t < tileTokens; ++t) {
          const float s = subgroupAdd(acc[v * TOKENS + t]);
          if (gl_SubgroupInvocationID == 0u) partial[(v * TOKENS + t) * group + gl_SubgroupID] = s;
        }
      }
      barrier();
      // Row `slot`'s subgroup sums are entries slot * width .. (subgroups hold consecutive
      // invocations, as every driver assigns them).
      width = LANES / gl_SubgroupSize;
      if (lane < width) {
        for (uint v = 0; v < values; ++v) {
          for (uint t = 0; t < tileTokens; ++t) {
            acc[v * TOKENS + t] = partial[(v * TOKENS + t) * group + slot * width + lane];
          }
        }
      }
      barrier();
    }
#endif
    if (lane < width) {
      for (uint v = 0; v < values; ++v) {
        for (uint t = 0; t < tileTokens; ++t) {
          partial[(v * TOKENS + t) * group + slot * width + lane] = acc[v * TOKENS + t];
        }
      }
    }
    barrier();
    for (uint stride = width / 2u; stride > 0u; stride >>= 1) {
      if (lane < stride) {
        for (uint v = 0; v < values; ++v) {
          for (uint t = 0; t < tileTokens; ++t) {
            const uint at = (v * TOKENS + t) * group + slot * width + lane;
            partial[at] += partial[at + stride];
          }
        }
      }
      barrier();
    }
    // Lane t writes token t of the row.
    if (first + slot < total && lane < tileTokens) {
      const uint t = t0 + lane;
      const float v = partial[lane * group + slot * width];
      Floats y = Floats(p.y[m]);
      const uint at = t * p.rows[m] + r;
      if (swiglu) {
        const float up = partial[(TOKENS + lane) * group + slot * width];
        y.v[at] = v / (1.0 + exp(-v)) * up;
      } else {
        const uvec2 biasAt = p.bias[m];
        float sum = v;
        if (biasAt != uvec2(0u)) {
          Floats b = Floats(biasAt);
          sum += b.v[r];
        }
        if (p.epilogue == 1u) {
          y.v[at] += sum;
        } else {
          y.v[at] = sum;
        }
      }
    }
    barrier();  // partial is reused by the next rows
  }
}
