#pragma once
// The AVX-512 Q4_K and Q5_K kernels for weights in row groups (row_groups.h), bit-identical to the
// file layout's kernels (x86_kquant_kernels.h, avx512_kquant_bands.h) and so to the scalar
// reference.
//
// Decode (the vec order) takes a group's eight rows in one pass over its super-blocks. Per
// super-block, shared by the eight rows: the activations' four 64-byte loads, rearranged once
// (below), and the sums of their sub-block pairs; in 512-bit registers of four rows each: the
// scales and minimums unpacked (scalesAndMins on four 128-bit lanes), the minimum products and
// their float terms; d and dmin of all eight rows in one vcvtph2ps. Per row: two 64-byte weight
// loads, the nibbles of each split into two 64-element steps (one AND, one shift and AND: each
// step pairs the low or the high nibbles of 64 bytes, i.e. sub-blocks 0 and 2, 1 and 3, 4 and 6,
// 5 and 7, with the activations rearranged to match), four vpmaddubsw + vpdpwssd with the scales
// picked by one in-lane byte shuffle each, and half of a two-row float epilogue. Q5_K adds its
// fifth bits: the row's 32 qh bytes in both halves of a zmm, and per step one vptestmb (bit s of
// qh[l] is element l of sub-block s) and one masked add of 16. The integer lanes are exact, and
// each row's float terms are added in the vec order's sequence (dotQ4K, dotQ5K: Q4_K keeps four
// minimum lanes per row, Q5_K one sum per row): the same bits. On one core of the Zen 4 VM, with
// a 295 KB Q4_K matrix in cache, it ran at 30-31 GB/s against the file layout's 17-21
// (cpu_kernels_bench --rows 256 --cols 2048 --type q4_K). Q5_K's and Q6_K's kernels take a kGfni
// flag: with it they place their high bits by GF2P8AFFINEQB (avx512_gfni_groups.h, the one file
// built with GFNI); without it, by mask tests and shifts (CPUs without GFNI).
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

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/avx512_gfni_groups.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_group_fallback.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu {
namespace {

// Super-blocks ahead of the one in hand whose group block the decode kernel prefetches into L2.
constexpr int64_t kGroupPrefetchBlocks = 8;

// The 6-bit scales and minimums of four rows of a Q4_K or Q5_K group (rows 4h .. 4h+3): 128-bit
// lane k holds row 4h+k's [8 scale bytes | 8 minimum bytes], as scalesAndMins unpacks them.
template <class Group>
inline __m512i groupScalesAndMins(const Group& x, int h) {
  // 16 bytes from each row's 12: the 4 after the last row's are the
  // first of the next field (qs, Q5_K's qh).
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

// GF2P8AFFINEQB matrices (one per 64-bit lane) that copy n consecutive bits of each byte, from
// bit a in the low 256 bits and from bit b in the high ones, to bits 4 .. 4+n-1 and clear the
// others: output bit i is the parity of matrix byte 7-i AND the input byte (Intel SDM,
// GF2P8AFFINEQB), so byte 3-j selects input bit a+j (or b+j).
inline __m512i gfBitsTo4(int a, int b, int n) {
  auto matrix = [n](int from) {
    uint64_t m = 0;
    for (int j = 0; j < n; ++j) m |= uint64_t{1u << (from + j)} << (8 * (3 - j));
    return static_cast<long long>(m);
  };
  const long long lo = matrix(a), hi = matrix(b);
  return _mm512_set_epi64(hi, hi, hi, hi, lo, lo, lo, lo);
}

// vpternlogd's truth table for (a & b) | c: mask a by b, then OR in c.
constexpr int kMaskOr = 0xEA;

// The file-layout block a group of each kind interleaves, and whether it carries fifth bits.
template <class Group>
struct GroupOf;
template <>
struct GroupOf<BlockQ4_Kx8> {
  using Block = BlockQ4_K;
  static constexpr WeightKind kKind = WeightKind::Q4_K;
  static constexpr bool kFifthBits = false;
};
template <>
struct GroupOf<BlockQ5_Kx8> {
  using Block = BlockQ5_K;
  static constexpr WeightKind kKind = WeightKind::Q5_K;
  static constexpr bool kFifthBits = true;
};
template <>
struct GroupOf<BlockQ6_Kx8> {
  using Block = BlockQ6_K;
  static constexpr WeightKind kKind = WeightKind::Q6_K;
  static constexpr bool kFifthBits = false;
};

// The vec order for the eight rows of one group and T tokens: out[t][r] = row r's dot with token
// t, as dotQ4K (Q4_K) or dotQ5K (Q5_K) computes it for that row alone. With two tokens (a decode
// step of several sequences) each row's quants are unpacked and its scales picked once for both:
// the per-token work is the products, the minimum terms and the float steps.
template <class Group, bool kGfni, int T>
inline void groupDotKT(const Group* x, const BlockQ8_K* const* y, int64_t blocks,
                       float (*out)[kGroupRows]) {
  constexpr bool kQ5 = GroupOf<Group>::kFifthBits;
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  // Steps 0-3 take scales (0, 2), (1, 3), (4, 6), (5, 7): the low and high nibbles of quant
  // bytes 0-63 and 64-127.
  const __m512i pick[4] = {scalePick(0, 2), scalePick(1, 3), scalePick(4, 6), scalePick(5, 7)};
  // Q5_K: step k's fifth bits, bit s of qh[l] for sub-block s (lower half: the first of the
  // step's two sub-blocks, upper half: the second).
  auto bitPair = [](int a, int b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << a))),
                              _mm256_set1_epi8(static_cast<char>(1 << b)), 1);
  };
  const __m512i fifth[4] = {bitPair(0, 2), bitPair(1, 3), bitPair(4, 6), bitPair(5, 7)};
  const __m512i sixteen = _mm512_set1_epi8(16);
  // With GFNI: step k's GF(2) bit matrices (gfBitsTo4) that move those bits to bit 4.
  const __m512i fifthTo4[4] = {gfBitsTo4(0, 2, 1), gfBitsTo4(1, 3, 1), gfBitsTo4(4, 6, 1),
                               gfBitsTo4(5, 7, 1)};
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
  // accMin[t][h], 128-bit lane k: row 4h+k's minimum term. Q4_K: four lanes per row, added at
  // the end (dotQ4K's accMin); Q5_K: the row's one running sum in every lane (dotQ5K's summs).
  __m512 acc[T][4], accMin[T][2];
  for (int t = 0; t < T; ++t) {
    for (__m512& a : acc[t]) a = _mm512_setzero_ps();
    for (__m512& a : accMin[t]) a = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const Group& xb = x[b];
    {
      // Past the group's last block: the next group's, which follows in memory.
      const auto* ahead = reinterpret_cast<const char*>(x + b + kGroupPrefetchBlocks);
      for (size_t i = 0; i < sizeof(Group); i += 64) _mm_prefetch(ahead + i, _MM_HINT_T2);
    }
    // Per token: the activations of sub-blocks [0 | 2], [1 | 3], [4 | 6], [5 | 7], and
    // [y.d * d of rows 0-7 | y.d * dmin of rows 0-7], rounded as scalePair rounds them.
    __m512i act[T][4];
    __m512 scales[T];
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.d)));
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& yb = y[t][b];
      for (int i = 0; i < 2; ++i) {
        const __m512i lo = _mm512_loadu_si512(yb.qs + 128 * i);
        const __m512i hi = _mm512_loadu_si512(yb.qs + 128 * i + 64);
        act[t][2 * i] = _mm512_shuffle_i64x2(lo, hi, 0x44);
        act[t][2 * i + 1] = _mm512_shuffle_i64x2(lo, hi, 0xEE);
      }
      scales[t] = _mm512_mul_ps(dw, _mm512_set1_ps(yb.d));
    }
    __m512i rowScales[2];
    for (int h = 0; h < 2; ++h) rowScales[h] = groupScalesAndMins(xb, h);
    for (int t = 0; t < T; ++t) {
      const __m512i pairs = _mm512_broadcast_i32x4(bsumPairs(y[t][b]));
      for (int h = 0; h < 2; ++h) {
        __m512i prod = _mm512_madd_epi16(_mm512_shuffle_epi8(rowScales[h], pickMins), pairs);
        if constexpr (kQ5) {
          // Each row's four products added (integer adds: exact), in all four of its lanes.
          prod = _mm512_add_epi32(prod, _mm512_shuffle_epi32(prod, _MM_PERM_BADC));
          prod = _mm512_add_epi32(prod, _mm512_shuffle_epi32(prod, _MM_PERM_CDAB));
        }
        accMin[t][h] = _mm512_fnmadd_ps(_mm512_permutexvar_ps(dminOf[h], scales[t]),
                                        _mm512_cvtepi32_ps(prod), accMin[t][h]);
      }
    }
    for (int p = 0; p < 4; ++p) {
      __m512i sums[T][2];
      for (int i = 0; i < 2; ++i) {
        const int r = 2 * p + i;
        const __m512i s = _mm512_permutexvar_epi32(laneOf[r % 4], rowScales[r / 4]);
        const __m512i w0 = _mm512_loadu_si512(xb.qs[r]);
        const __m512i w1 = _mm512_loadu_si512(xb.qs[r] + 64);
        // The nibbles in the low four bits of each byte (the high ones shifted down, with the
        // low ones' bits above them, masked below).
        const __m512i src[4] = {w0, _mm512_srli_epi16(w0, 4), w1, _mm512_srli_epi16(w1, 4)};
        __m512i q[4];
        if constexpr (kQ5 && kGfni) {
          // One affine op puts each byte's fifth bit at bit 4, one ternary op ORs it onto the
          // masked nibble: two ops per step where the mask test and masked add take three.
          const __m512i qh = _mm512_broadcast_i64x4(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qh[r])));
          for (int k = 0; k < 4; ++k) {
            q[k] = _mm512_ternarylogic_epi32(
                src[k], nibble, _mm512_gf2p8affine_epi64_epi8(qh, fifthTo4[k], 0), kMaskOr);
          }
        } else {
          for (int k = 0; k < 4; ++k) q[k] = _mm512_and_si512(src[k], nibble);
          if constexpr (kQ5) {
            const __m512i qh = _mm512_broadcast_i64x4(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qh[r])));
            for (int k = 0; k < 4; ++k) {
              q[k] = _mm512_mask_add_epi8(q[k], _mm512_test_epi8_mask(qh, fifth[k]), q[k], sixteen);
            }
          }
        }
        __m512i picked[4];
        for (int k = 0; k < 4; ++k) picked[k] = _mm512_shuffle_epi8(s, pick[k]);
        for (int t = 0; t < T; ++t) {
          __m512i sum = _mm512_setzero_si512();
          for (int k = 0; k < 4; ++k) {
            sum = _mm512_dpwssd_epi32(sum, picked[k], _mm512_maddubs_epi16(q[k], act[t][k]));
          }
          sums[t][i] = sum;
        }
      }
      const __m512i dOf = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * p)),
                                             _mm256_set1_epi32(2 * p + 1), 1);
      for (int t = 0; t < T; ++t) {
        // Each row's two halves added: lanes 0-7 row 2p's eight ggml lanes, 8-15 row 2p+1's.
        const __m512i lanes = _mm512_add_epi32(_mm512_shuffle_i64x2(sums[t][0], sums[t][1], 0x44),
                                               _mm512_shuffle_i64x2(sums[t][0], sums[t][1], 0xEE));
        acc[t][p] = _mm512_fmadd_ps(_mm512_permutexvar_ps(dOf, scales[t]),
                                    _mm512_cvtepi32_ps(lanes), acc[t][p]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < kGroupRows; ++r) {
      const __m256 lanes = (r % 2) ? _mm512_extractf32x8_ps(acc[t][r / 2], 1)
                                   : _mm512_castps512_ps256(acc[t][r / 2]);
      __m128 m = _mm512_extractf32x4_ps(accMin[t][r / 4], 0);
      switch (r % 4) {
        case 1:
          m = _mm512_extractf32x4_ps(accMin[t][r / 4], 1);
          break;
        case 2:
          m = _mm512_extractf32x4_ps(accMin[t][r / 4], 2);
          break;
        case 3:
          m = _mm512_extractf32x4_ps(accMin[t][r / 4], 3);
          break;
        default:
          break;
      }
      if constexpr (!kQ5) {
        m = _mm_add_ps(m, _mm_movehl_ps(m, m));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
      }
      out[t][r] = hsum8(lanes) + _mm_cvtss_f32(m);
    }
  }
}

// Tokens per pass of the grouped Q4_K/Q5_K decode kernels: one group's Q4_K from L3, ns per
// 32 weights and token at 1/2/3/4 per pass: 0.60, 0.48, 0.44, 0.42 (cpu_kernels_bench
// --vec-order --rows 4096 --cols 2048 --tokens 8).
constexpr int kKGroupTokens = 4;

// groupDotKT for n (1 to kKGroupTokens) tokens.
template <class Group, bool kGfni>
inline void groupDotKN(const Group* x, const BlockQ8_K* const* y, int n, int64_t blocks,
                       float (*out)[kGroupRows]) {
  withTokenCount(
      n, [&](auto pass) { groupDotKT<Group, kGfni, decltype(pass)::value>(x, y, blocks, out); });
}

// One token (decode): out[r] = row r's dot.
template <class Group, bool kGfni>
inline void groupDotK(const Group* x, const BlockQ8_K* y, int64_t blocks, float* out) {
  groupDotKT<Group, kGfni, 1>(x, &y, blocks, reinterpret_cast<float(*)[kGroupRows]>(out));
}

// The vec order (dotQ6K) for the eight rows of one Q6_K group and one token. Per super-block,
// shared by the eight rows: the four 64-byte activation loads, the bsums, d of all eight rows
// in one vcvtph2ps; per row: Avx512KSteps' four steps as Q6KTraits::unpack forms them (low
// nibbles from ql, the top two bits from qh, scales 4k .. 4k+3 by vpermw); per pair of rows in
// one zmm: the folded lanes, the -32 bias taken off them (Q6KTraits::offset), the float
// epilogue. Each row's lanes are the file layout's exact integers and its float terms are added
// in dotQ6K's sequence: the same bits.
//
// For T tokens (a decode step of several sequences) each row's quants and scales are unpacked
// once per step k for all of them: per token remain the products and the epilogue.
template <bool kGfni, int T>
inline void groupDotQ6KT(const BlockQ6_Kx8* x, const BlockQ8_K* const* y, int64_t blocks,
                         float (*out)[kGroupRows]) {
  const __m512i low4 = _mm512_set1_epi8(0x0f), low2 = _mm512_set1_epi8(3);
  // int16 lane l (of 32) of step k takes scale 4k + l / 8.
  __m512i scaleIndex[4];
  for (int k = 0; k < 4; ++k) {
    scaleIndex[k] =
        _mm512_add_epi16(_mm512_set1_epi16(static_cast<int16_t>(4 * k)),
                         _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22,
                                                            21, 20, 19, 18, 17, 16, 15, 14, 13, 12,
                                                            11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           3));
  }
  // Shift counts of the top bits: even steps bits 0-1 | 2-3 of qh, odd steps 4-5 | 6-7.
  const __m512i topShift[2] = {
      _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(0)), _mm256_set1_epi16(2), 1),
      _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(4)), _mm256_set1_epi16(6), 1)};
  // With GFNI: the GF(2) bit matrices (gfBitsTo4) that move those two bits to bits 4-5.
  const __m512i topTo4[2] = {gfBitsTo4(0, 2, 2), gfBitsTo4(4, 6, 2)};
  __m512 acc[T][4];
  for (auto& t : acc) {
    for (__m512& a : t) a = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const BlockQ6_Kx8& xb = x[b];
    {
      const auto* ahead = reinterpret_cast<const char*>(x + b + kGroupPrefetchBlocks);
      for (size_t i = 0; i < sizeof(BlockQ6_Kx8); i += 64) _mm_prefetch(ahead + i, _MM_HINT_T2);
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.d)));
    for (int p = 0; p < 4; ++p) {
      __m512i sums[T][2], scales16[2];
      for (int i = 0; i < 2; ++i) {
        const int r = 2 * p + i;
        scales16[i] = _mm512_castsi256_si512(
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb.scales[r]))));
        for (int t = 0; t < T; ++t) sums[t][i] = _mm512_setzero_si512();
        for (int k = 0; k < 4; ++k) {
          const int h = k / 2, odd = k % 2;
          const __m512i src = _mm512_loadu_si512(xb.ql[r] + 64 * h);
          const __m512i nibbles = odd ? _mm512_srli_epi16(src, 4) : src;  // masked below
          const __m512i qh = _mm512_broadcast_i64x4(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.qh[r] + 32 * h)));
          __m512i q;
          if constexpr (kGfni) {
            // The two top bits to bits 4-5 in one affine op, ORed onto the masked nibble in one
            // ternary op (two ops where the shifts, masks and OR take five).
            q = _mm512_ternarylogic_epi32(
                nibbles, low4, _mm512_gf2p8affine_epi64_epi8(qh, topTo4[odd], 0), kMaskOr);
          } else {
            const __m512i top = _mm512_and_si512(_mm512_srlv_epi16(qh, topShift[odd]), low2);
            q = _mm512_or_si512(_mm512_and_si512(nibbles, low4), _mm512_slli_epi16(top, 4));
          }
          const __m512i scale = _mm512_permutexvar_epi16(scaleIndex[k], scales16[i]);
          for (int t = 0; t < T; ++t) {
            const __m512i act = _mm512_loadu_si512(y[t][b].qs + 64 * k);
            sums[t][i] = _mm512_dpwssd_epi32(sums[t][i], scale, _mm512_maddubs_epi16(q, act));
          }
        }
      }
      const __m512i pairScales =
          _mm512_inserti64x4(scales16[0], _mm512_castsi512_si256(scales16[1]), 1);
      const __m512i dOf = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * p)),
                                             _mm256_set1_epi32(2 * p + 1), 1);
      for (int t = 0; t < T; ++t) {
        const BlockQ8_K& yb = y[t][b];
        // Each row's two halves added: lanes 0-7 row 2p's eight ggml lanes, 8-15 row 2p+1's;
        // less 32 * scale * bsum per pair of 16-element groups, as Q6KTraits::offset.
        const __m512i lanes = _mm512_add_epi32(_mm512_shuffle_i64x2(sums[t][0], sums[t][1], 0x44),
                                               _mm512_shuffle_i64x2(sums[t][0], sums[t][1], 0xEE));
        const __m512i bsums =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb.bsums)));
        const __m512i offset = _mm512_slli_epi32(_mm512_madd_epi16(bsums, pairScales), 5);
        // y.d * d of rows 0-7, rounded as dotQ6K's y.d * half(x.d).
        const __m512 ds = _mm512_castps256_ps512(_mm256_mul_ps(dw, _mm256_set1_ps(yb.d)));
        acc[t][p] = _mm512_fmadd_ps(_mm512_permutexvar_ps(dOf, ds),
                                    _mm512_cvtepi32_ps(_mm512_sub_epi32(lanes, offset)), acc[t][p]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < kGroupRows; ++r) {
      const __m256 lanes = (r % 2) ? _mm512_extractf32x8_ps(acc[t][r / 2], 1)
                                   : _mm512_castps512_ps256(acc[t][r / 2]);
      out[t][r] = hsum8(lanes);
    }
  }
}

template <bool kGfni>
inline void groupDotQ6KN(const BlockQ6_Kx8* x, const BlockQ8_K* const* y, int n, int64_t blocks,
                         float (*out)[kGroupRows]) {
  withTokenCount(n,
                 [&](auto pass) { groupDotQ6KT<kGfni, decltype(pass)::value>(x, y, blocks, out); });
}

// One token (decode): out[r] = row r's dot.
template <bool kGfni>
inline void groupDotQ6K(const BlockQ6_Kx8* x, const BlockQ8_K* y, int64_t blocks, float* out) {
  groupDotQ6KT<kGfni, 1>(x, &y, blocks, reinterpret_cast<float(*)[kGroupRows]>(out));
}

// The 16 rows from r0 (a multiple of 16 past a group boundary) of a grouped matrix, each
// super-block taken out of its group as the bands read it.
template <class Group>
struct GroupedRows {
  using Block = typename GroupOf<Group>::Block;
  const Group* groups[2];
  const Block& block(int r, int64_t b, Block& scratch) const {
    ungroupBlock(groups[r / kGroupRows][b], r % kGroupRows, scratch);
    return scratch;
  }
  void prefetch(int r, int64_t b) const {
    if (r % kGroupRows != 0) return;  // a group's super-block is one prefetch run
    const auto* p = reinterpret_cast<const char*>(&groups[r / kGroupRows][b]);
    for (size_t i = 0; i < sizeof(Group); i += 64) _mm_prefetch(p + i, _MM_HINT_T0);
  }
};

template <class Group>
GroupedRows<Group> groupedRows(const GemmArgs& g, int64_t r0) {
  GroupedRows<Group> rows;
  for (int i = 0; i < 2; ++i) {
    rows.groups[i] = reinterpret_cast<const Group*>(
        g.weights + static_cast<size_t>(r0 + kGroupRows * i) * g.weightStride);
  }
  return rows;
}

// Rows [rowBegin, rowEnd) of a grouped K-quant matrix (Group: BlockQ4_Kx8, BlockQ5_Kx8,
// BlockQ6_Kx8); K is the kind's traits, FileGemm the level's file-layout kernel.
template <class Group, class K, void (*FileGemm)(const GemmArgs&, int64_t, int64_t)>
void gemmKGroups(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  constexpr WeightKind kKind = GroupOf<Group>::kKind;
  const int64_t blocks = g.cols / kQKK;
  int64_t first = 0, last = 0;
  if (!ungroupedEdges<kKind, FileGemm>(g, rowBegin, rowEnd, first, last)) return;
  int64_t r = first;
  if (g.order == DotOrder::Tiled && g.tokens >= 2) {
    r = gemmKBands<K>(g, r, last, groupedRows<Group>);
    for (; r < last; r += kGroupRows) ungroupedRows<kKind, FileGemm>(g, r, r, r + kGroupRows);
  } else {
    // Up to kKGroupTokens tokens per pass (a decode step of several sequences).
    const bool gfni = useGfni();
    for (; r < last; r += kGroupRows) {
      const auto* x =
          reinterpret_cast<const Group*>(g.weights + static_cast<size_t>(r) * g.weightStride);
      for (int64_t t = 0; t < g.tokens;) {
        const int n = static_cast<int>(std::min<int64_t>(kKGroupTokens, g.tokens - t));
        const BlockQ8_K* a[kKGroupTokens] = {};
        for (int i = 0; i < n; ++i) {
          a[i] =
              reinterpret_cast<const BlockQ8_K*>(g.act + static_cast<size_t>(t + i) * g.actStride);
        }
        alignas(32) float out[kKGroupTokens][kGroupRows];
        if constexpr (kKind == WeightKind::Q6_K) {
          gfni ? avx512::groupDotQ6KGfni(x, a, n, blocks, out)
               : groupDotQ6KN<false>(x, a, n, blocks, out);
        } else if constexpr (kKind == WeightKind::Q5_K) {
          gfni ? avx512::groupDotQ5KGfni(x, a, n, blocks, out)
               : groupDotKN<Group, false>(x, a, n, blocks, out);
        } else {
          groupDotKN<Group, false>(x, a, n, blocks, out);
        }
        for (int i = 0; i < n; ++i) std::memcpy(g.y + (t + i) * g.ldy + r, out[i], sizeof out[i]);
        t += n;
      }
    }
  }
}

}  // namespace
}  // namespace shoal::cpu
