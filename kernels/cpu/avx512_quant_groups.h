#pragma once
// The AVX-512 Q4_0, Q4_1 and Q8_0 kernels for weights in row groups (row_groups.h), bit-identical
// to the file layout's kernels (avx512_quant_gemm.cpp) and so to the scalar reference.
//
// ggml's vec order keeps, per row and token, eight float lanes: lane k gets fma(d_w * d_a, exact
// dot of elements 4k..4k+3 of the block, lane), block by block, and the eight are summed as
// hsum_float_8 at the end. The file layout's kernel holds two rows' lanes per zmm, and per pair
// of rows and block pays two 16-byte loads and a masked broadcast to interleave them, the
// nibble split, and a conversion and spread of the two scales. In a group, one 64-byte load is
// four rows' Q4_0 quants (or two rows' Q8_0): Q4_0's low nibbles are elements 0-15 of four rows,
// one per 128-bit lane, against the token's elements 0-15 broadcast to the four lanes (one
// vpdpbusd gives ggml lanes 0-3 of four rows), the high nibbles lanes 4-7; Q8_0's two rows sit in
// the two halves against the token's 32 activations in both. The eight rows' scales are one
// vcvtph2ps per block, spread to their lanes by one vpermps per load. Each lane's sequence of
// fmas is ggml's, and the eight lanes of a row are added in hsum_float_8's order: the same bits.
//
// No software prefetch: a thread's groups are one front-to-back stream, which the hardware
// prefetchers follow. On one core of the Zen 4 VM, reading a 65536 x 2048 matrix from DRAM
// (cpu_kernels_bench --rows 65536 --cols 2048), Q4_0 ran at 24.6-26.0 GB/s without one and
// 14.3-25.1 prefetching 2-16 KiB ahead into L2, Q8_0 at 25.2-27.8 against 18.4-25.5 (the file
// layout's kernels: 14.6-16.0 and 21.8-28.0).
//
// Q4_1 is Q4_0's kernel with unsigned codes (no bias) and its minimum term m_w * s_a, which
// eight rows take in one vfmadd per block and token, fused-accumulated as the file layout's summs.
//
// Decode and small batches (the vec order's tiles) run here, two tokens per pass over a group
// (more would spill the accumulators); batches that the file layout runs in bands (Q4_0 and Q8_0,
// 8 tokens or more, avx512_quant_bands.h) take 32 rows at a time out of their groups into a
// buffer (row_group_fallback.h), as do rows not in whole groups. Q4_1 has no bands: all its
// batches run here, faster than the file layout's tiles.
//
// Included by avx512_quant_gemm.cpp only (anonymous namespace, AVX-512 flags).

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_group_fallback.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu {
namespace {

constexpr int kQ0GroupTokens = 2;  // tokens per pass over a group

// hsum_float_8 of [lo | hi] (lo: ggml lanes 0-3, hi: lanes 4-7).
inline float hsumLanes(__m128 lo, __m128 hi) {
  __m128 v = _mm_add_ps(hi, lo);
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

// 128-bit lane k of a zmm.
inline __m128 laneOf(__m512 v, int k) {
  switch (k) {
    case 1:
      return _mm512_extractf32x4_ps(v, 1);
    case 2:
      return _mm512_extractf32x4_ps(v, 2);
    case 3:
      return _mm512_extractf32x4_ps(v, 3);
    default:
      return _mm512_castps512_ps128(v);
  }
}

// -bias * (sum of each int32 lane's four activations): where each vpdpbusd starts, which takes
// the stored codes' bias (Q4_0: q + 8, shift 3; Q8_0: q + 128, shift 7) off exactly.
template <int kShift>
inline __m512i biasStart(__m512i y) {
  const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), y);
  return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, kShift));
}

// The eight rows of one Q4_0 (BlockQ4_0x8, Q8_0 activations) or Q4_1 (BlockQ4_1x8, Q8_1
// activations, kMin) group against T tokens: out[t][r]. Q4_1's codes are unsigned (no bias), and
// its minimum term m_w * s_a is fused-accumulated per block and row as the file layout's summs.
template <class Group, class Act, bool kMin, int T>
void groupTileNibbles(const Group* x, const Act* const* a, int64_t blocks,
                      float (*out)[kGroupRows]) {
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  // Row 4h + k's scale to 128-bit lane k.
  const __m512i rowsOf[2] = {_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                             _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4)};
  __m512 acc[2][2][T];  // [rows 4h..4h+3][ggml lanes 0-3, 4-7][token]
  __m256 summs[T];      // Q4_1: row r's minimum term in lane r
  for (auto& h : acc) {
    for (auto& half : h) {
      for (__m512& v : half) v = _mm512_setzero_ps();
    }
  }
  for (__m256& v : summs) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i yLo[T], yHi[T], startLo[T], startHi[T];
    __m512 dy[T];
    for (int t = 0; t < T; ++t) {
      const Act& y = a[t][b];
      yLo[t] = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y.qs)));
      yHi[t] = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y.qs + 16)));
      if constexpr (kMin) {
        startLo[t] = startHi[t] = _mm512_setzero_si512();
      } else {
        startLo[t] = biasStart<3>(yLo[t]);
        startHi[t] = biasStart<3>(yHi[t]);
      }
      dy[t] = _mm512_set1_ps(_cvtsh_ss(y.d));
    }
    const __m512 dw = _mm512_castps256_ps512(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].d))));
    if constexpr (kMin) {
      const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].m)));
      for (int t = 0; t < T; ++t) {
        summs[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(_cvtsh_ss(a[t][b].s)), summs[t]);
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m512i w = _mm512_loadu_si512(x[b].qs[4 * h]);
      const __m512i lo = _mm512_and_si512(w, nibble);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), nibble);
      const __m512 rowScales = _mm512_permutexvar_ps(rowsOf[h], dw);
      for (int t = 0; t < T; ++t) {
        const __m512 d = _mm512_mul_ps(rowScales, dy[t]);  // d_w * d_a, as ggml rounds it
        acc[h][0][t] = _mm512_fmadd_ps(
            d, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(startLo[t], lo, yLo[t])), acc[h][0][t]);
        acc[h][1][t] = _mm512_fmadd_ps(
            d, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(startHi[t], hi, yHi[t])), acc[h][1][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(32) float m[kGroupRows];
    _mm256_store_ps(m, summs[t]);
    for (int r = 0; r < kGroupRows; ++r) {
      const float dot = hsumLanes(laneOf(acc[r / 4][0][t], r % 4), laneOf(acc[r / 4][1][t], r % 4));
      out[t][r] = kMin ? dot + m[r] : dot;
    }
  }
}

// The eight rows of one Q8_0 group against T tokens: out[t][r].
template <int T>
void groupTileQ8_0(const BlockQ8_0x8* x, const BlockQ8_0* const* a, int64_t blocks,
                   float (*out)[kGroupRows]) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));  // q -> q + 128, unsigned
  // Rows 2p and 2p+1's scales to the low and high halves.
  __m512i pairOf[4];
  for (int p = 0; p < 4; ++p) {
    pairOf[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * p)),
                                   _mm256_set1_epi32(2 * p + 1), 1);
  }
  __m512 acc[4][T];  // [rows 2p, 2p+1][token]
  for (auto& p : acc) {
    for (__m512& v : p) v = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i y[T], start[T];
    __m512 dy[T];
    for (int t = 0; t < T; ++t) {
      y[t] =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t][b].qs)));
      start[t] = biasStart<7>(y[t]);
      dy[t] = _mm512_set1_ps(_cvtsh_ss(a[t][b].d));
    }
    const __m512 dw = _mm512_castps256_ps512(
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].d))));
    for (int p = 0; p < 4; ++p) {
      const __m512i q = _mm512_xor_si512(_mm512_loadu_si512(x[b].qs[2 * p]), flip);
      const __m512 rowScales = _mm512_permutexvar_ps(pairOf[p], dw);
      for (int t = 0; t < T; ++t) {
        acc[p][t] =
            _mm512_fmadd_ps(_mm512_mul_ps(rowScales, dy[t]),
                            _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start[t], q, y[t])), acc[p][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int p = 0; p < 4; ++p) {
      const __m256 rowA = _mm512_castps512_ps256(acc[p][t]);
      const __m256 rowB = _mm512_extractf32x8_ps(acc[p][t], 1);
      out[t][2 * p] = hsumLanes(_mm256_castps256_ps128(rowA), _mm256_extractf128_ps(rowA, 1));
      out[t][2 * p + 1] = hsumLanes(_mm256_castps256_ps128(rowB), _mm256_extractf128_ps(rowB, 1));
    }
  }
}

template <class Group>
struct Q0GroupOf;
template <>
struct Q0GroupOf<BlockQ4_0x8> {
  static constexpr WeightKind kKind = WeightKind::Q4_0;
  using Act = BlockQ8_0;
  template <int T>
  static void tile(const BlockQ4_0x8* x, const Act* const* a, int64_t blocks,
                   float (*out)[kGroupRows]) {
    groupTileNibbles<BlockQ4_0x8, Act, false, T>(x, a, blocks, out);
  }
};
template <>
struct Q0GroupOf<BlockQ4_1x8> {
  static constexpr WeightKind kKind = WeightKind::Q4_1;
  using Act = BlockQ8_1;
  template <int T>
  static void tile(const BlockQ4_1x8* x, const Act* const* a, int64_t blocks,
                   float (*out)[kGroupRows]) {
    groupTileNibbles<BlockQ4_1x8, Act, true, T>(x, a, blocks, out);
  }
};
template <>
struct Q0GroupOf<BlockQ8_0x8> {
  static constexpr WeightKind kKind = WeightKind::Q8_0;
  using Act = BlockQ8_0;
  template <int T>
  static void tile(const BlockQ8_0x8* x, const BlockQ8_0* const* a, int64_t blocks,
                   float (*out)[kGroupRows]) {
    groupTileQ8_0<T>(x, a, blocks, out);
  }
};

// Rows [rowBegin, rowEnd) of a grouped Q4_0, Q4_1 or Q8_0 matrix (Group: BlockQ4_0x8,
// BlockQ4_1x8, BlockQ8_0x8); FileGemm is the level's file-layout kernel, kBandTokens the batch
// from which it runs bands (0: it has none).
template <class Group, void (*FileGemm)(const GemmArgs&, int64_t, int64_t), int kBandTokens>
void gemmQ0Groups(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  constexpr WeightKind kKind = Q0GroupOf<Group>::kKind;
  constexpr int64_t kBandSpan = 32;  // rows the file layout's bands take at a time
  const int64_t blocks = g.cols / kQK;
  int64_t first = 0, last = 0;
  if (!ungroupedEdges<kKind, FileGemm>(g, rowBegin, rowEnd, first, last)) return;
  int64_t r = first;
  if (kBandTokens > 0 && g.tokens >= kBandTokens) {
    for (; r + kBandSpan <= last; r += kBandSpan) {
      ungroupedRows<kKind, FileGemm>(g, r, r, r + kBandSpan);
    }
  }
  for (; r < last; r += kGroupRows) {
    const auto* x =
        reinterpret_cast<const Group*>(g.weights + static_cast<size_t>(r) * g.weightStride);
    for (int64_t t = 0; t < g.tokens;) {
      const int n = g.tokens - t >= kQ0GroupTokens ? kQ0GroupTokens : 1;
      using Act = typename Q0GroupOf<Group>::Act;
      const Act* a[kQ0GroupTokens] = {};
      for (int i = 0; i < n; ++i) {
        a[i] = reinterpret_cast<const Act*>(g.act + static_cast<size_t>(t + i) * g.actStride);
      }
      alignas(32) float out[kQ0GroupTokens][kGroupRows];
      if (n == 2) {
        Q0GroupOf<Group>::template tile<2>(x, a, blocks, out);
      } else {
        Q0GroupOf<Group>::template tile<1>(x, a, blocks, out);
      }
      for (int i = 0; i < n; ++i) {
        std::memcpy(g.y + (t + i) * g.ldy + r, out[i], sizeof out[i]);
      }
      t += n;
    }
  }
}

}  // namespace
}  // namespace shoal::cpu
