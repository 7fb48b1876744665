#pragma once
// The AVX2 Q4_0 and Q4_1 kernels for weights in row groups (row_groups.h), bit-identical to the
// file layout's tile (avx2_quant_gemm.cpp) and so to ggml's AVX2 vec_dot_q4_0_q8_0 and
// vec_dot_q4_1_q8_1.
//
// One 256-bit load holds the quants of two rows of a group (BlockQ4_0x8: eight rows' 16 bytes
// side by side). Their low nibbles are elements 0-15 of both rows and pair with the token's
// elements 0-15 in both 128-bit lanes; the high nibbles are elements 16-31. Each 128-bit lane of
// the products is therefore ggml's lanes 0-3 (or 4-7) of one row, the same integers: ggml
// forms sum((q - 8) * y) over four elements with sign tricks, here it is sum(q * y) from
// vpmaddubsw (q <= 15: no saturation) less 8 * sum(y), the token's four-element sums formed
// once per block for all eight rows. Each row's lanes then get ggml's float step, one fmadd per
// block with d(row) * d(token) (rounded as the file layout's tile rounds it), in lanes that
// belong to that row alone, and the end sums them in hsum8's order. Per two rows and one block
// that is about 15 instructions where the file layout's tile spends about 24, and a thread's
// rows are one stream.
//
// Q4_1 is the same without the offset (its quants are unsigned), plus its minimum terms.
//
// Every batch size runs this kernel token by token (Q4_0 and Q4_1 have only the vec order): the
// group stays in L1/L2 across the tokens of a batch.
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

// The group and activation blocks of Q4_0 (signed: q - 8) and Q4_1 (unsigned q, a minimum m per
// block that meets the token's s = d * sum(y)).
template <class Group>
struct Q4GroupOf;
template <>
struct Q4GroupOf<BlockQ4_0x8> {
  using Act = BlockQ8_0;
  static constexpr WeightKind kKind = WeightKind::Q4_0;
  static constexpr bool kMin = false;
};
template <>
struct Q4GroupOf<BlockQ4_1x8> {
  using Act = BlockQ8_1;
  static constexpr WeightKind kKind = WeightKind::Q4_1;
  static constexpr bool kMin = true;
};

// out[r] = row r's dot with one token (blocks blocks), as the file layout's tile computes it for
// that row alone. Q4_1's minimum terms: fma(m, s, summs) per block for eight rows in one
// instruction, each lane the tile's lane 2r+1 for its row, added to the row's sum at the end.
template <class Group>
inline void groupDotQ4Avx2(const Group* x, const typename Q4GroupOf<Group>::Act* y, int64_t blocks,
                           float* out) {
  constexpr bool kMin = Q4GroupOf<Group>::kMin;
  const __m256i nibble = _mm256_set1_epi8(0x0f), ones16 = _mm256_set1_epi16(1);
  const __m256i ones8 = _mm256_set1_epi8(1);
  // Rows 2p and 2p+1: accLow[p] holds ggml's lanes 0-3 of row 2p (low 128 bits) and of row 2p+1
  // (high), accHigh[p] their lanes 4-7.
  __m256 accLow[kGroupRows / 2], accHigh[kGroupRows / 2];
  for (int p = 0; p < kGroupRows / 2; ++p) accLow[p] = accHigh[p] = _mm256_setzero_ps();
  __m256 summs = _mm256_setzero_ps();  // Q4_1: row r's minimum term in lane r
  for (int64_t b = 0; b < blocks; ++b) {
    const Group& xb = x[b];
    const auto& yb = y[b];
    // d(row) * d(token) for rows 0-7 (the tile's mul of the two halves as floats).
    const __m256 dd =
        _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.d))),
                      _mm256_set1_ps(_cvtsh_ss(yb.d)));
    if constexpr (kMin) {
      summs =
          _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.m))),
                          _mm256_set1_ps(_cvtsh_ss(yb.s)), summs);
    }
    const __m256i tokenLow =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(yb.qs)));
    const __m256i tokenHigh =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(yb.qs + 16)));
    // Q4_0: 8 * (the token's sum over elements 4k..4k+3), lane k: the -8 offset of every row's
    // lanes.
    __m256i offsetLow = _mm256_setzero_si256(), offsetHigh = _mm256_setzero_si256();
    if constexpr (!kMin) {
      const __m256i sums8 = _mm256_slli_epi32(
          _mm256_madd_epi16(_mm256_maddubs_epi16(
                                ones8, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb.qs))),
                            ones16),
          3);
      offsetLow = _mm256_permute2x128_si256(sums8, sums8, 0x00);
      offsetHigh = _mm256_permute2x128_si256(sums8, sums8, 0x11);
    }
    for (int p = 0; p < kGroupRows / 2; ++p) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs[2 * p]));
      const __m256i low = _mm256_and_si256(w, nibble);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble);
      __m256i lanesLow = _mm256_madd_epi16(_mm256_maddubs_epi16(low, tokenLow), ones16);
      __m256i lanesHigh = _mm256_madd_epi16(_mm256_maddubs_epi16(high, tokenHigh), ones16);
      if constexpr (!kMin) {
        lanesLow = _mm256_sub_epi32(lanesLow, offsetLow);
        lanesHigh = _mm256_sub_epi32(lanesHigh, offsetHigh);
      }
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
    out[2 * p] = hsum8(_mm256_permute2f128_ps(accLow[p], accHigh[p], 0x20));
    out[2 * p + 1] = hsum8(_mm256_permute2f128_ps(accLow[p], accHigh[p], 0x31));
    if constexpr (kMin) {
      out[2 * p] += mins[2 * p];
      out[2 * p + 1] += mins[2 * p + 1];
    }
  }
}

// Rows [rowBegin, rowEnd) of a grouped Q4_0 or Q4_1 matrix; FileGemm is the level's file-layout
// kernel (rows outside whole groups).
template <class Group, void (*FileGemm)(const GemmArgs&, int64_t, int64_t)>
void gemmQ4GroupsAvx2(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  using Act = typename Q4GroupOf<Group>::Act;
  int64_t first = 0, last = 0;
  if (!ungroupedEdges<Q4GroupOf<Group>::kKind, FileGemm>(g, rowBegin, rowEnd, first, last)) {
    return;
  }
  const int64_t blocks = g.cols / kQK;
  groupsTokenByToken<Group, Act>(g, first, last,
                                 [blocks](const Group* x, const Act* a, int64_t, float* out) {
                                   groupDotQ4Avx2(x, a, blocks, out);
                                 });
}

}  // namespace
}  // namespace shoal::cpu
