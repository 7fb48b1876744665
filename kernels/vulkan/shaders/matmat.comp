#version 450
// y[t][r] = dot(W row r, x[t]) for a batch (prefill): each workgroup of 64 threads computes an
// 8-row x 8-token tile, staging 32-column slices of dequantized weights and activations in
// shared memory so each weight is decoded once per 8 tokens. Rows, tokens and columns that do
// not fill a tile are guarded (zeros in the slices).
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

const uint TR = 8, TT = 8, TK = 32;
shared float wTile[TR][TK];
shared float xTile[TT][TK];

void main() {
  const uint tid = gl_LocalInvocationID.x;  // 64 threads: (tid / 8) row, (tid % 8) token
  const uint row0 = gl_WorkGroupID.x * TR, tok0 = gl_WorkGroupID.y * TT;
  const uint myRow = tid / TT, myTok = tid % TT;
  float sum = 0.0;
  for (uint k0 = 0; k0 < p.cols; k0 += TK) {
    for (uint i = tid; i < TR * TK; i += 64) {
      const uint r = i / TK, k = i % TK, e = k0 + k, gr = row0 + r;
      wTile[r][k] = (gr < p.rows && e < p.cols)
                        ? dq(p.w, p.wh, gr * p.rowBytes + (e / QK) * BLOCK_BYTES, e % QK)
                        : 0.0;
      const uint gt = tok0 + r;
      xTile[r][k] = (gt < p.tokens && e < p.cols) ? p.x.v[gt * p.cols + e] : 0.0;
    }
    barrier();
    for (uint k = 0; k < TK; ++k) sum += wTile[myRow][k] * xTile[myTok][k];
    barrier();
  }
  const uint gr = row0 + myRow, gt = tok0 + myTok;
  if (gr < p.rows && gt < p.tokens) p.y.v[gt * p.rows + gr] = sum;
}
