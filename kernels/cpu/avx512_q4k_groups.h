#pragma once
// The AVX-512 Q4_K kernels for weights in row groups (row_groups.h), bit-identical to the file
// layout's kernels (x86_kquant_kernels.h, avx512_kquant_bands.h) and so to the scalar reference.
//
// Decode (the vec order) takes a group's eight rows in one pass over its super-blocks. Per
// super-block, shared by the eight rows: the activations' four 64-byte loads, rearranged once
// (below), and the sums of their sub-block pairs; in 512-bit registers of four rows each: the
// scales and minimums unpacked (scalesAndMins on four 128-bit lanes), the minimum products and
// their float terms; d and dmin of all eight rows in one vcvtph2ps. Per row: two 64-byte weight
// loads, the nibbles of each split into two 64-element steps (one AND, one shift and AND: each
// step pairs the low or the high nibbles of 64 bytes, i.e. sub-blocks 0 and 2, 1 and 3, 4 and 6,
// 5 and 7, with the activations rearranged to match), four vpmaddubsw + vpdpwssd with the scales
// picked by one in-lane byte shuffle each, and half of a two-row float epilogue. The integer lanes
// are exact, and each row's float terms are added in the vec order's sequence (dotQ4K): the same
// bits. On one core of the Zen 4 VM, with a 295 KB matrix in cache, it ran at 30-31 GB/s against
// the file layout's 17-21 (cpu_kernels_bench --rows 256 --cols 2048 --type q4_K).
//
// Prefetch: a thread's rows are one front-to-back stream here, which the hardware prefetchers of
// the Zen 4 VM follow well: one core read a 75 MB matrix at 27.1-28.0 GB/s without software
// prefetches (the file layout's kernel: 14.3-19.8), 25.6-27.1 prefetching eight group blocks
// ahead into L2, and 14.6-21.5 prefetching into L1 (which evicts what is being read). The L2
// prefetch is kept for CPUs whose hardware prefetchers fall behind: on the Intel Xeon VM the file
// layout's kernels ran at half speed without theirs (x86_kquant_kernels.h; this kernel has not
// been measured there).
//
// Prefill (the tiled order) runs the file layout's bands of 16 rows (two groups) on a row source
// that takes each row's super-block out of its group; the other cases (rows not in whole groups,
// a tiled order over a last lone group) take the rows out of their groups into a buffer and run
// the file layout's kernel on it.
//
// Included by avx512_kquant_gemm.cpp only, after x86_kquant_kernels.h and avx512_kquant_bands.h
// (anonymous namespace, AVX-512 flags: see x86_kquant_kernels.h).

#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu {
namespace {

// Super-blocks ahead of the one in hand whose group block the decode kernel prefetches into L2.
constexpr int64_t kGroupPrefetchBlocks = 8;

// The 6-bit scales and minimums of four rows of a group (rows 4h .. 4h+3): 128-bit lane k holds
// row 4h+k's [8 scale bytes | 8 minimum bytes], as scalesAndMins unpacks them.
inline __m512i groupScalesAndMins(const BlockQ4_Kx8& x, int h) {
  // 16 bytes from each row's 12: the 4 after the last row's are the first of the quants.
  __m512i u =
      _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[4 * h])));
  u = _mm512_inserti32x4(u, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[4 * h + 1])),
                         1);
  u = _mm512_inserti32x4(u, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[4 * h + 2])),
                         2);
  u = _mm512_inserti32x4(u, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales[4 * h + 3])),
                         3);
  const __m512i low6 = _mm512_and_si512(u, _mm512_set1_epi8(0x3f));
  const __m512i word2 = _mm512_shuffle_epi32(u, _MM_PERM_CCCC);
  const __m512i low4 =
      _mm512_and_si512(_mm512_srlv_epi32(word2, _mm512_broadcast_i32x4(_mm_setr_epi32(0, 4, 0, 0))),
                       _mm512_set1_epi8(0x0f));
  const __m512i top2 =
      _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 6), _mm512_set1_epi8(0x03)), 4);
  return _mm512_unpacklo_epi32(low6, _mm512_or_si512(low4, top2));
}

// Byte-shuffle indices that widen scale a (of the 8 scale bytes) to the int16 lanes 0-15 and
// scale b to lanes 16-31.
inline __m512i scalePick(int a, int b) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_set1_epi16(static_cast<int16_t>(0x8000 | a))),
      _mm256_set1_epi16(static_cast<int16_t>(0x8000 | b)), 1);
}

// The vec order (dotQ4K) for the eight rows of one group and one token: out[r] = row r's dot.
inline void groupDotQ4K(const BlockQ4_Kx8* x, const BlockQ8_K* y, int64_t blocks, float* out) {
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  // Steps 0-3 take scales (0, 2), (1, 3), (4, 6), (5, 7): the low and high nibbles of quant
  // bytes 0-63 and 64-127.
  const __m512i pick[4] = {scalePick(0, 2), scalePick(1, 3), scalePick(4, 6), scalePick(5, 7)};
  const __m512i pickMins = _mm512_broadcast_i32x4(
      _mm_setr_epi8(8, -128, 9, -128, 10, -128, 11, -128, 12, -128, 13, -128, 14, -128, 15, -128));
  // From [d0..d7 | dmin0..dmin7]: dmin of rows 4h+k in lanes 4k..4k+3; d of rows 2p, 2p+1 in
  // lanes 0-7 and 8-15.
  const __m512i dminOf[2] = {
      _mm512_set_epi32(11, 11, 11, 11, 10, 10, 10, 10, 9, 9, 9, 9, 8, 8, 8, 8),
      _mm512_set_epi32(15, 15, 15, 15, 14, 14, 14, 14, 13, 13, 13, 13, 12, 12, 12, 12)};
  // 128-bit lane k of four in every lane (a row's scale bytes to all four).
  const __m512i laneOf[4] = {_mm512_broadcast_i32x4(_mm_setr_epi32(0, 1, 2, 3)),
                             _mm512_broadcast_i32x4(_mm_setr_epi32(4, 5, 6, 7)),
                             _mm512_broadcast_i32x4(_mm_setr_epi32(8, 9, 10, 11)),
                             _mm512_broadcast_i32x4(_mm_setr_epi32(12, 13, 14, 15))};
  __m512 acc[4], accMin[2];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (__m512& a : accMin) a = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockQ4_Kx8& xb = x[b];
    const BlockQ8_K& yb = y[b];
    {
      // Past the group's last block: the next group's, which follows in memory.
      const auto* ahead = reinterpret_cast<const char*>(x + b + kGroupPrefetchBlocks);
      for (size_t i = 0; i < sizeof(BlockQ4_Kx8); i += 64) _mm_prefetch(ahead + i, _MM_HINT_T2);
    }
    // The activations of sub-blocks [0 | 2], [1 | 3], [4 | 6], [5 | 7].
    __m512i act[4];
    for (int i = 0; i < 2; ++i) {
      const __m512i lo = _mm512_loadu_si512(yb.qs + 128 * i);
      const __m512i hi = _mm512_loadu_si512(yb.qs + 128 * i + 64);
      act[2 * i] = _mm512_shuffle_i64x2(lo, hi, 0x44);
      act[2 * i + 1] = _mm512_shuffle_i64x2(lo, hi, 0xEE);
    }
    // [y.d * d of rows 0-7 | y.d * dmin of rows 0-7], rounded as scalePair rounds them.
    const __m512 scales =
        _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.d))),
                      _mm512_set1_ps(yb.d));
    const __m512i pairs = _mm512_broadcast_i32x4(bsumPairs(yb));
    __m512i rowScales[2];
    for (int h = 0; h < 2; ++h) {
      rowScales[h] = groupScalesAndMins(xb, h);
      const __m512i prod = _mm512_madd_epi16(_mm512_shuffle_epi8(rowScales[h], pickMins), pairs);
      accMin[h] = _mm512_fnmadd_ps(_mm512_permutexvar_ps(dminOf[h], scales),
                                   _mm512_cvtepi32_ps(prod), accMin[h]);
    }
    for (int p = 0; p < 4; ++p) {
      __m512i sums[2];
      for (int i = 0; i < 2; ++i) {
        const int r = 2 * p + i;
        const __m512i s = _mm512_permutexvar_epi32(laneOf[r % 4], rowScales[r / 4]);
        const __m512i w0 = _mm512_loadu_si512(xb.qs[r]);
        const __m512i w1 = _mm512_loadu_si512(xb.qs[r] + 64);
        const __m512i q[4] = {
            _mm512_and_si512(w0, nibble), _mm512_and_si512(_mm512_srli_epi16(w0, 4), nibble),
            _mm512_and_si512(w1, nibble), _mm512_and_si512(_mm512_srli_epi16(w1, 4), nibble)};
        __m512i sum = _mm512_setzero_si512();
        for (int k = 0; k < 4; ++k) {
          sum = _mm512_dpwssd_epi32(sum, _mm512_shuffle_epi8(s, pick[k]),
                                    _mm512_maddubs_epi16(q[k], act[k]));
        }
        sums[i] = sum;
      }
      // Each row's two halves added: lanes 0-7 row 2p's eight ggml lanes, 8-15 row 2p+1's.
      const __m512i lanes = _mm512_add_epi32(_mm512_shuffle_i64x2(sums[0], sums[1], 0x44),
                                             _mm512_shuffle_i64x2(sums[0], sums[1], 0xEE));
      const __m512 d =
          _mm512_permutexvar_ps(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * p)),
                                                   _mm256_set1_epi32(2 * p + 1), 1),
                                scales);
      acc[p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lanes), acc[p]);
    }
  }
  for (int r = 0; r < kGroupRows; ++r) {
    const __m256 lanes =
        (r % 2) ? _mm512_extractf32x8_ps(acc[r / 2], 1) : _mm512_castps512_ps256(acc[r / 2]);
    __m128 m = _mm512_extractf32x4_ps(accMin[r / 4], 0);
    switch (r % 4) {
      case 1:
        m = _mm512_extractf32x4_ps(accMin[r / 4], 1);
        break;
      case 2:
        m = _mm512_extractf32x4_ps(accMin[r / 4], 2);
        break;
      case 3:
        m = _mm512_extractf32x4_ps(accMin[r / 4], 3);
        break;
      default:
        break;
    }
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    out[r] = hsum8(lanes) + _mm_cvtss_f32(m);
  }
}

// The 16 rows from r0 (a multiple of 16 past a group boundary) of a grouped matrix, each
// super-block taken out of its group as the bands read it.
struct GroupedRowsQ4K {
  const BlockQ4_Kx8* groups[2];
  const BlockQ4_K& block(int r, int64_t b, BlockQ4_K& scratch) const {
    ungroupBlock(groups[r / kGroupRows][b], r % kGroupRows, scratch);
    return scratch;
  }
  void prefetch(int r, int64_t b) const {
    if (r % kGroupRows != 0) return;  // a group's super-block is one prefetch run
    const auto* p = reinterpret_cast<const char*>(&groups[r / kGroupRows][b]);
    for (size_t i = 0; i < sizeof(BlockQ4_Kx8); i += 64) _mm_prefetch(p + i, _MM_HINT_T0);
  }
};

inline GroupedRowsQ4K groupedRowsQ4K(const GemmArgs& g, int64_t r0) {
  GroupedRowsQ4K rows;
  for (int i = 0; i < 2; ++i) {
    rows.groups[i] = reinterpret_cast<const BlockQ4_Kx8*>(
        g.weights + static_cast<size_t>(r0 + kGroupRows * i) * g.weightStride);
  }
  return rows;
}

// Rows [rowBegin, rowEnd) of one group (group starts at row g0) by the file layout's kernel, on
// the rows taken out of the group.
template <void (*FileGemm)(const GemmArgs&, int64_t, int64_t)>
void ungroupedQ4K(const GemmArgs& g, int64_t g0, int64_t rowBegin, int64_t rowEnd) {
  const size_t groupBytes = g.weightStride * kGroupRows;
  auto* buffer = static_cast<uint8_t*>(std::malloc(groupBytes));
  if (buffer == nullptr) std::abort();  // as operator new would fail: nothing to compute with
  const uint8_t* group = g.weights + static_cast<size_t>(g0) * g.weightStride;
  for (int64_t r = rowBegin; r < rowEnd; ++r) {
    ungroupRow(WeightKind::Q4_K, group, g.cols, r - g0, buffer + (r - g0) * g.weightStride);
  }
  GemmArgs a = g;
  a.weights = buffer;
  a.rowGroups = false;
  a.y = g.y + g0;
  FileGemm(a, rowBegin - g0, rowEnd - g0);
  std::free(buffer);
}

// Rows [rowBegin, rowEnd) of a grouped Q4_K matrix; FileGemm is the level's file-layout kernel.
template <class K, void (*FileGemm)(const GemmArgs&, int64_t, int64_t)>
void gemmQ4KGroups(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  const int64_t blocks = g.cols / kQKK;
  int64_t r = rowBegin;
  // Rows before the first whole group and after the last one.
  const int64_t first = (rowBegin + kGroupRows - 1) / kGroupRows * kGroupRows;
  const int64_t last = rowEnd / kGroupRows * kGroupRows;
  if (first > last) {  // inside one group
    ungroupedQ4K<FileGemm>(g, last, rowBegin, rowEnd);
    return;
  }
  if (r < first) ungroupedQ4K<FileGemm>(g, first - kGroupRows, r, first);
  r = first;
  if (g.order == DotOrder::Tiled && g.tokens >= 2) {
    r = gemmKBands<K>(g, r, last, groupedRowsQ4K);
    for (; r < last; r += kGroupRows) ungroupedQ4K<FileGemm>(g, r, r, r + kGroupRows);
  } else {
    alignas(32) float out[kGroupRows];
    for (; r < last; r += kGroupRows) {
      const auto* x =
          reinterpret_cast<const BlockQ4_Kx8*>(g.weights + static_cast<size_t>(r) * g.weightStride);
      for (int64_t t = 0; t < g.tokens; ++t) {
        const auto* a =
            reinterpret_cast<const BlockQ8_K*>(g.act + static_cast<size_t>(t) * g.actStride);
        groupDotQ4K(x, a, blocks, out);
        std::memcpy(g.y + t * g.ldy + r, out, sizeof out);
      }
    }
  }
  if (last < rowEnd) ungroupedQ4K<FileGemm>(g, last, last, rowEnd);
}

}  // namespace
}  // namespace shoal::cpu
