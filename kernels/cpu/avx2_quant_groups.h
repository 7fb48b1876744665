#pragma once
// The AVX2 Q4_1 kernel for weights in row groups (row_groups.h), bit-identical to the file
// layout's tile (avx2_quant_gemm.cpp) and so to ggml's AVX2 vec_dot_q4_1_q8_1. (A grouped Q4_0
// matrix has 8k rows, so it takes llama.cpp's repacked order: avx2_q4_0_repacked.h.)
//
// One 256-bit load holds the quants of two rows of a group (BlockQ4_1x8: eight rows' 16 bytes
// side by side). Their low nibbles are elements 0-15 of both rows and pair with the token's
// elements 0-15 in both 128-bit lanes; the high nibbles are elements 16-31. Each 128-bit lane of
// the products is therefore ggml's lanes 0-3 (or 4-7) of one row, the same integers (vpmaddubsw:
// q <= 15, no saturation). Each row's lanes then get ggml's float step, one fmadd per block with
// d(row) * d(token) (rounded as the file layout's tile rounds it), in lanes that belong to that
// row alone, and the end sums them in hsum8's order, plus the minimum terms. Per two rows and one
// block that is about 15 instructions where the file layout's tile spends about 24, and a
// thread's rows are one stream.
//
// Every batch size runs this kernel token by token (Q4_1 has only the vec order): the group
// stays in L1/L2 across the tokens of a batch.
//
// Included by avx2_quant_gemm.cpp only (anonymous namespace, AVX2 flags: see
// x86_kquant_kernels.h, whose hsum8 it uses).

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_group_fallback.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu {
namespace {

// out[r] = row r's dot with one token (blocks blocks), as the file layout's tile computes it for
// that row alone. The minimum terms (m per block meets the token's s = d * sum(y)): fma(m, s,
// summs) per block for eight rows in one instruction, each lane the tile's lane 2r+1 for its row,
// added to the row's sum at the end.
inline void groupDotQ4_1Avx2(const BlockQ4_1x8* x, const BlockQ8_1* y, int64_t blocks, float* out) {
  const __m256i nibble = _mm256_set1_epi8(0x0f), ones16 = _mm256_set1_epi16(1);
  // Rows 2p and 2p+1: accLow[p] holds ggml's lanes 0-3 of row 2p (low 128 bits) and of row 2p+1
  // (high), accHigh[p] their lanes 4-7.
  __m256 accLow[kGroupRows / 2], accHigh[kGroupRows / 2];
  for (int p = 0; p < kGroupRows / 2; ++p) accLow[p] = accHigh[p] = _mm256_setzero_ps();
  __m256 summs = _mm256_setzero_ps();  // row r's minimum term in lane r
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockQ4_1x8& xb = x[b];
    const auto& yb = y[b];
    // d(row) * d(token) for rows 0-7 (the tile's mul of the two halves as floats).
    const __m256 dd =
        _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.d))),
                      _mm256_set1_ps(_cvtsh_ss(yb.d)));
    summs =
        _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.m))),
                        _mm256_set1_ps(_cvtsh_ss(yb.s)), summs);
    const __m256i tokenLow =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(yb.qs)));
    const __m256i tokenHigh =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(yb.qs + 16)));
    for (int p = 0; p < kGroupRows / 2; ++p) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs[2 * p]));
      const __m256i low = _mm256_and_si256(w, nibble);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble);
      const __m256i lanesLow = _mm256_madd_epi16(_mm256_maddubs_epi16(low, tokenLow), ones16);
      const __m256i lanesHigh = _mm256_madd_epi16(_mm256_maddubs_epi16(high, tokenHigh), ones16);
      const __m256 scale =
          _mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1,
                                                         2 * p + 1, 2 * p + 1, 2 * p + 1));
      accLow[p] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(lanesLow), accLow[p]);
      accHigh[p] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(lanesHigh), accHigh[p]);
    }
  }
  alignas(32) float mins[kGroupRows];
  _mm256_store_ps(mins, summs);
  for (int p = 0; p < kGroupRows / 2; ++p) {
    // Row 2p's eight lanes in ggml's order, then row 2p+1's.
    out[2 * p] = hsum8(_mm256_permute2f128_ps(accLow[p], accHigh[p], 0x20)) + mins[2 * p];
    out[2 * p + 1] = hsum8(_mm256_permute2f128_ps(accLow[p], accHigh[p], 0x31)) + mins[2 * p + 1];
  }
}

// Rows [rowBegin, rowEnd) of a grouped Q4_1 matrix; FileGemm is the level's file-layout kernel
// (rows outside whole groups).
template <void (*FileGemm)(const GemmArgs&, int64_t, int64_t)>
void gemmQ4_1GroupsAvx2(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  int64_t first = 0, last = 0;
  if (!ungroupedEdges<WeightKind::Q4_1, FileGemm>(g, rowBegin, rowEnd, first, last)) return;
  const int64_t blocks = g.cols / kQK;
  groupsTokenByToken<BlockQ4_1x8, BlockQ8_1>(
      g, first, last, [blocks](const BlockQ4_1x8* x, const BlockQ8_1* a, int64_t, float* out) {
        groupDotQ4_1Avx2(x, a, blocks, out);
      });
}

}  // namespace
}  // namespace shoal::cpu
