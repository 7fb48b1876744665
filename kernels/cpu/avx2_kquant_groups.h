#pragma once
// The AVX2 Q4_K and Q6_K decode kernels for weights in row groups (row_groups.h), bit-identical
// to the file layout's dotQ4K and dotQ6K (x86_kquant_kernels.h) and so to the scalar reference.
//
// Why at AVX2: on an AVX2-only CPU (Zen 2/3, Intel client cores) llama.cpp reads Q4_K repacked
// eight rows at a time, and the file layout's row-by-row kernel decoded a 1B Q4_K model at
// 0.95x its speed (Zen 4 VM, both built for AVX2 only, bench/compare_llamacpp.py --level avx2).
// Per super-block the file layout pays, for every row, the unpacking of its scales and
// minimums, two half conversions and its minimum products; reading four file-layout rows at
// once to share the rest lost the hardware prefetchers' streams (x86_kquant_kernels.h). In a
// group the eight rows' blocks are one stream, d and dmin of all eight rows take one vcvtph2ps
// each, and two rows' scales and minimums unpack in one 256-bit pass (scalesAndMins's in-lane
// steps on both 128-bit lanes).
//
// Q4_K's quants are in pair lanes (row_groups.h), and the token's activations are reordered to
// match once per call: a row's chunk m meets one scale pick for both nibble steps (four byte
// shuffles per row and super-block where the file layout's nibble order needs eight). On one
// core of the Zen 4 VM (cpu_kernels_bench --isa avx2 --rows 512 --cols 2048 --type q4_K) that
// ran at 25.5 GB/s against 24.1.
//
// Each row's arithmetic is dotQ4K's: its eight integer lanes per super-block (exact), its
// float accumulator fed by one fmadd per super-block with y.d * d, and its four minimum lanes by
// one fnmadd with y.d * dmin, summed at the end as dotQ4K sums them. The accumulators of eight
// rows do not fit AVX2's sixteen registers beside the unpacking, so the float ones live in a
// small array (one load and one store per row and super-block, from L1).
//
// The tiled order (prefill) takes each group's rows out into a buffer and runs the file
// layout's kernel on it (row_group_fallback.h): the copy (ungroupRows) was 2-3% of a 1B Q4_K
// prefill's profile, against the tiles' arithmetic.
//
// Included by avx2_quant_gemm.cpp only, after x86_kquant_kernels.h (anonymous namespace, AVX2
// flags: see x86_kquant_kernels.h).

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_group_fallback.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu {
namespace {

// Group blocks ahead of the one in hand that the decode kernel prefetches into L2 (as the
// AVX-512 group kernels do; the file layout's kernels prefetch the row two ahead).
constexpr int64_t kAvx2GroupPrefetchBlocks = 8;

// Rows 2p and 2p+1 of a Q4_K group: 128-bit lane k holds row 2p+k's [8 scale bytes | 8 minimum
// bytes] (scalesAndMins's steps on both lanes; each row's 16-byte read ends inside the group).
inline __m256i pairScalesAndMins(const BlockQ4_Kx8& x, int p) {
  const __m256i u = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(x.scales[2 * p + 1]),
                                        reinterpret_cast<const __m128i*>(x.scales[2 * p]));
  const __m256i low6 = _mm256_and_si256(u, _mm256_set1_epi8(0x3f));
  const __m256i word2 = _mm256_shuffle_epi32(u, _MM_SHUFFLE(2, 2, 2, 2));
  const __m256i low4 = _mm256_and_si256(
      _mm256_srlv_epi32(word2, _mm256_setr_epi32(0, 4, 0, 0, 0, 4, 0, 0)), _mm256_set1_epi8(0x0f));
  const __m256i top2 =
      _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u, 6), _mm256_set1_epi8(0x03)), 4);
  return _mm256_unpacklo_epi32(low6, _mm256_or_si256(low4, top2));
}

// out[r] = row r's dot with one token in the vec order, as dotQ4K computes it for that row
// alone. lanes: the token's activations in pair lanes (pairLaneActivations); pairs: its
// bsumPairs per super-block (gemmK's table), or null to form them. Per row and chunk m of pair
// lanes, one byte shuffle picks the alternating (scale 2m, scale 2m+1) pairs that both nibble
// steps multiply (row_groups.h): four per row and super-block, where the file layout's order of
// nibbles needs eight.
//
// kRepacked: DotOrder::Repacked instead, as dotQ4K computes it: per super-block the rows' exact
// totals (rowTotals8, and the minimum products' by three vphaddd) fused into two accumulators of
// all eight rows with y.d * d and y.d * dmin; the result their difference.
template <bool kRepacked = false>
inline void groupDotQ4KAvx2(const BlockQ4_Kx8* x, const BlockQ8_K* y, const PairLaneBlock* lanes,
                            const __m128i* pairs, int64_t blocks, float* out) {
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  // Byte-shuffle indices that put int32 m of the row's int16 scales (scales 2m, 2m+1) in every
  // 32-bit lane.
  __m256i scalePair[4];
  for (int m = 0; m < 4; ++m) {
    scalePair[m] = _mm256_set1_epi32(static_cast<int32_t>(0x03020100u + 0x04040404u * m));
  }
  alignas(32) float acc[kGroupRows][8] = {};
  __m256 accMin[kGroupRows / 2];  // row 2p's four lanes low, row 2p+1's high
  for (__m256& a : accMin) a = _mm256_setzero_ps();
  // kRepacked: row r in lane r.
  __m256 accRows = _mm256_setzero_ps(), accRowsMin = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockQ4_Kx8& xb = x[b];
    const BlockQ8_K& yb = y[b];
    {
      // Past the group's last block: the next group's, which follows in memory.
      const auto* ahead = reinterpret_cast<const char*>(x + b + kAvx2GroupPrefetchBlocks);
      for (size_t i = 0; i < sizeof(BlockQ4_Kx8); i += 64) _mm_prefetch(ahead + i, _MM_HINT_T2);
    }
    // y.d * d and y.d * dmin of rows 0-7, rounded as scalePair rounds them.
    const __m256 yd = _mm256_set1_ps(yb.d);
    const __m256 d =
        _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.d))), yd);
    const __m256 dmin = _mm256_mul_ps(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.dmin))), yd);
    const __m256i sums = _mm256_broadcastsi128_si256(pairs ? pairs[b] : bsumPairs(yb));
    // The activations of chunk m's low nibbles (2m) and high nibbles (2m + 1).
    __m256i a[8];
    for (int k = 0; k < 8; ++k) {
      a[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lanes[b].qs[k / 2][k % 2]));
    }
    __m256i rowLanes[kGroupRows], minProds[kGroupRows / 2];  // kRepacked
    for (int p = 0; p < kGroupRows / 2; ++p) {
      const __m256i both = pairScalesAndMins(xb, p);
      const __m256i scales = _mm256_unpacklo_epi8(both, _mm256_setzero_si256());
      const __m256i mins = _mm256_unpackhi_epi8(both, _mm256_setzero_si256());
      if constexpr (kRepacked) {
        minProds[p] = _mm256_madd_epi16(mins, sums);
      } else {
        // dotQ4K's minimum step for both rows: fnmadd(y.d * dmin, prod, accMin), lane by lane.
        const __m256 dminPair =
            _mm256_permutevar8x32_ps(dmin, _mm256_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1,
                                                             2 * p + 1, 2 * p + 1, 2 * p + 1));
        accMin[p] = _mm256_fnmadd_ps(dminPair, _mm256_cvtepi32_ps(_mm256_madd_epi16(mins, sums)),
                                     accMin[p]);
      }
      for (int i = 0; i < 2; ++i) {
        const int r = 2 * p + i;
        // The row's eight scales in both halves (Q4KTraits::Context).
        // (Two calls: the immediate must be a constant even where the loop is not unrolled.)
        const __m256i s = i == 0 ? _mm256_permute2x128_si256(scales, scales, 0x00)
                                 : _mm256_permute2x128_si256(scales, scales, 0x11);
        __m256i lanes8 = _mm256_setzero_si256();
        for (int m = 0; m < 4; ++m) {
          const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qs[p][m][i]));
          const __m256i scale = _mm256_shuffle_epi8(s, scalePair[m]);
          const __m256i lo = _mm256_and_si256(bits, nibble);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), nibble);
          lanes8 = _mm256_add_epi32(
              lanes8,
              _mm256_add_epi32(_mm256_madd_epi16(scale, _mm256_maddubs_epi16(lo, a[2 * m])),
                               _mm256_madd_epi16(scale, _mm256_maddubs_epi16(hi, a[2 * m + 1]))));
        }
        if constexpr (kRepacked) {
          rowLanes[r] = lanes8;
          continue;
        }
        const __m256 dr = _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(r));
        _mm256_store_ps(acc[r],
                        _mm256_fmadd_ps(dr, _mm256_cvtepi32_ps(lanes8), _mm256_load_ps(acc[r])));
      }
    }
    if constexpr (kRepacked) {
      accRows = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rowTotals8(rowLanes)), d, accRows);
      // [rows 0, 2, 4, 6 | 1, 3, 5, 7] by three rounds of pairwise adds, then in row order.
      const __m256i mt = _mm256_hadd_epi32(_mm256_hadd_epi32(minProds[0], minProds[1]),
                                           _mm256_hadd_epi32(minProds[2], minProds[3]));
      const __m256i minTotals =
          _mm256_permutevar8x32_epi32(mt, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      accRowsMin = _mm256_fmadd_ps(_mm256_cvtepi32_ps(minTotals), dmin, accRowsMin);
    }
  }
  if constexpr (kRepacked) {
    _mm256_storeu_ps(out, _mm256_sub_ps(accRows, accRowsMin));
    return;
  }
  for (int r = 0; r < kGroupRows; ++r) {
    __m128 m =
        (r % 2) ? _mm256_extractf128_ps(accMin[r / 2], 1) : _mm256_castps256_ps128(accMin[r / 2]);
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    out[r] = hsum8(_mm256_load_ps(acc[r])) + _mm_cvtss_f32(m);
  }
}

// out[r] = row r's dot with one token in the vec order, as dotQ6K computes it for that row
// alone: per step Q6KTraits::unpack's quants (the top two bits shifted straight to bits 4-5:
// one shift and one mask), its scales picked from the row's sixteen by one byte shuffle, the
// -32 bias taken off the lanes by the bsums (Q6KTraits::offset), d = y.d * d of all eight rows
// in one conversion.
inline void groupDotQ6KAvx2(const BlockQ6_Kx8* x, const BlockQ8_K* y, int64_t blocks, float* out) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
  // Step p of a half: scale 2p in the low 128 bits, 2p + 1 in the high ones (of the half's eight
  // scales, which are in both lanes).
  __m256i scaleBytes[4];
  for (int p = 0; p < 4; ++p) {
    auto word = [](int w) { return static_cast<int16_t>(((2 * w + 1) << 8) | (2 * w)); };
    scaleBytes[p] = _mm256_set_m128i(_mm_set1_epi16(word(2 * p + 1)), _mm_set1_epi16(word(2 * p)));
  }
  alignas(32) float acc[kGroupRows][8] = {};
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockQ6_Kx8& xb = x[b];
    const BlockQ8_K& yb = y[b];
    {
      const auto* ahead = reinterpret_cast<const char*>(x + b + kAvx2GroupPrefetchBlocks);
      for (size_t i = 0; i < sizeof(BlockQ6_Kx8); i += 64) _mm_prefetch(ahead + i, _MM_HINT_T2);
    }
    const __m256 d =
        _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.d))),
                      _mm256_set1_ps(yb.d));
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb.bsums));
    for (int r = 0; r < kGroupRows; ++r) {
      const __m256i scales16 =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.scales[r])));
      __m256i lanes = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i s = h == 0 ? _mm256_permute2x128_si256(scales16, scales16, 0x00)
                                 : _mm256_permute2x128_si256(scales16, scales16, 0x11);
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qh[r] + 32 * h));
        // Bits 2p, 2p+1 of each qh byte to bits 4-5 (16-bit shifts: the bits kept never cross
        // a byte).
        const __m256i top[4] = {_mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45),
                                _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45),
                                _mm256_and_si256(qh, bits45),
                                _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)};
        for (int p = 0; p < 4; ++p) {
          const __m256i src = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(xb.ql[r] + 64 * h + 32 * (p % 2)));
          const __m256i nib = _mm256_and_si256(p < 2 ? src : _mm256_srli_epi16(src, 4), low4);
          const __m256i q = _mm256_or_si256(nib, top[p]);
          const __m256i a =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb.qs + 32 * (4 * h + p)));
          lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_shuffle_epi8(s, scaleBytes[p]),
                                                            _mm256_maddubs_epi16(q, a)));
        }
      }
      lanes = _mm256_sub_epi32(lanes, _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales16), 5));
      const __m256 dr = _mm256_permutevar8x32_ps(d, _mm256_set1_epi32(r));
      _mm256_store_ps(acc[r],
                      _mm256_fmadd_ps(dr, _mm256_cvtepi32_ps(lanes), _mm256_load_ps(acc[r])));
    }
  }
  for (int r = 0; r < kGroupRows; ++r) out[r] = hsum8(_mm256_load_ps(acc[r]));
}

// Rows [rowBegin, rowEnd) of a grouped Q4_K or Q6_K matrix (Group: BlockQ4_Kx8, BlockQ6_Kx8);
// FileGemm is the level's file-layout kernel.
template <class Group, void (*FileGemm)(const GemmArgs&, int64_t, int64_t)>
void gemmKGroupsAvx2(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  constexpr bool kQ4K = std::is_same_v<Group, BlockQ4_Kx8>;
  constexpr WeightKind kKind = kQ4K ? WeightKind::Q4_K : WeightKind::Q6_K;
  int64_t first = 0, last = 0;
  if (!ungroupedEdges<kKind, FileGemm>(g, rowBegin, rowEnd, first, last)) return;
  if ((g.order == DotOrder::Tiled && g.tokens >= 2) || g.order == DotOrder::RepackedGemm ||
      (g.order == DotOrder::Repacked && g.tokens >= kRepackedPrefillTokens)) {
    for (int64_t r = first; r < last; r += kGroupRows) {
      ungroupedRows<kKind, FileGemm>(g, r, r, r + kGroupRows);
    }
    return;
  }
  const int64_t blocks = g.cols / kQKK;
  // Q4_K: each token's bsumPairs once per call, as gemmK tables them, and its activations in
  // pair lanes.
  __m128i pairs[kQ4K ? kPairTokens * kPairBlocks : 1];
  [[maybe_unused]] const bool tabled = kQ4K && tableBsumPairs(g, blocks, pairs);
  [[maybe_unused]] const PairLaneBlock* lanes = kQ4K ? pairLaneRows(g, blocks) : nullptr;
  groupsTokenByToken<Group, BlockQ8_K>(
      g, first, last, [&](const Group* x, const BlockQ8_K* a, int64_t t, float* out) {
        if constexpr (kQ4K) {
          const __m128i* p = tabled ? pairs + t * kPairBlocks : nullptr;
          if (g.order == DotOrder::Repacked) {
            groupDotQ4KAvx2<true>(x, a, lanes + t * blocks, p, blocks, out);
          } else {
            groupDotQ4KAvx2(x, a, lanes + t * blocks, p, blocks, out);
          }
        } else {
          groupDotQ6KAvx2(x, a, blocks, out);
        }
      });
}

}  // namespace
}  // namespace shoal::cpu
