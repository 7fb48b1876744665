#version 450
// y[t][r] = dot(W row r, x[t]) for a batch (prefill) of any weight type (a WTYPE_<type> define,
// blocks.glsl) against f32 activations: the tiled float matmul.
//
// A workgroup of 128 invocations computes a tile of BM = 64 rows x BN = 32 tokens, so each weight
// is decoded once per 32 tokens and each activation read once per 64 rows. The columns go
// through shared memory BK = 32 at a time: each invocation decodes 16 consecutive weights of one
// row and loads 8 activations (a tile row's 32 consecutive floats per 32 invocations:
// coalesced); each invocation then keeps a register tile
// of 4 rows x 4 tokens, 16 fmas per 8 shared loads. The rows and tokens of an invocation are
// strided (16 and 8 apart) and the shared rows padded to 33 floats, so that the invocations of
// a subgroup read distinct banks or one broadcast word.
//
// Rows, tokens and columns past the matrix are zeros in shared memory and never written. Groups
// stride over row tiles past the dispatch's width (Vulkan guarantees 65535 groups in x); the
// second dispatch dimension runs over tiles of BN tokens.
#include "common.glsl"
#include "blocks.glsl"

layout(push_constant) uniform Push {
  Bytes w;
  Halves wh;
  Floats x;
  Floats y;
  uint rows;
  uint cols;
  uint rowBytes;
  uint tokens;
} p;

const uint BM = 64u, BN = 32u, BK = 32u;  // the workgroup's tile, the columns of one pass
const uint TM = 4u, TN = 4u;              // rows and tokens of an invocation's tile
const uint STRIDE = BK + 1u;              // floats per shared row, padded by one
shared float wTile[BM * STRIDE];
shared float xTile[BN * STRIDE];

void main() {
  const uint tid = gl_LocalInvocationID.x;  // 128 invocations
  const uint tx = tid % 8u, ty = tid / 8u;  // tokens tx + 8j, rows ty + 16i of the tile
  const uint t0 = gl_WorkGroupID.y * BN;
  const uint rowTiles = (p.rows + BM - 1u) / BM;
  for (uint tile = gl_WorkGroupID.x; tile < rowTiles; tile += gl_NumWorkGroups.x) {
    const uint r0 = tile * BM;
    float acc[TM][TN];
    for (uint i = 0; i < TM; ++i)
      for (uint j = 0; j < TN; ++j) acc[i][j] = 0.0;
    for (uint k0 = 0; k0 < p.cols; k0 += BK) {
      {
        // Weights 16 * (tid % 2) .. + 15 of this pass in tile row tid / 2.
        const uint r = tid / 2u, first = 16u * (tid % 2u), row = r0 + r;
        for (uint k = first; k < first + 16u; ++k) {
          const uint e = k0 + k;
          wTile[r * STRIDE + k] =
              (row < p.rows && e < p.cols)
                  ? dq(p.w, p.wh, row * p.rowBytes + (e / QK) * BLOCK_BYTES, e % QK)
                  : 0.0;
        }
      }
      for (uint i = tid; i < BN * BK; i += 128u) {
        const uint t = i / BK, k = i % BK, tok = t0 + t, e = k0 + k;
        xTile[t * STRIDE + k] = (tok < p.tokens && e < p.cols) ? p.x.v[tok * p.cols + e] : 0.0;
      }
      barrier();
      for (uint k = 0; k < BK; ++k) {
        float a[TM], b[TN];
        for (uint i = 0; i < TM; ++i) a[i] = wTile[(ty + 16u * i) * STRIDE + k];
        for (uint j = 0; j < TN; ++j) b[j] = xTile[(tx + 8u * j) * STRIDE + k];
        for (uint i = 0; i < TM; ++i)
          for (uint j = 0; j < TN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
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
