#pragma once
// The AVX-512 Q4_K and Q5_K kernels for weights in row groups (row_groups.h), bit-identical to the
// file layout's kernels (x86_kquant_kernels.h, avx512_kquant_bands.h) and so to the scalar
// reference.
//
// Decode (the vec order) takes a group's eight rows in one pass over its super-blocks, the rows
// in pairs. Per super-block, shared by the eight rows: the scales and minimums unpacked in
// 512-bit registers of four rows each (scalesAndMins on four 128-bit lanes), the minimum
// products and their float terms, d and dmin of all eight rows in one vcvtph2ps. Per pair of
// rows and chunk m (sub-blocks 2m, 2m+1) of their quants in pair lanes (row_groups.h): one
// 64-byte load holds both rows' chunk, one AND and one shift and AND give the low and high
// nibbles, one in-lane byte shuffle picks the (scale 2m, scale 2m+1) pairs both multiply, and
// per token two vpmaddubsw + vpdpwssd (two chains) against the token's activations in pair
// lanes (pairLaneActivations, built once per call, each 32-byte step stored twice so that a plain
// 64-byte load serves both rows: a broadcast load takes an ALU slot on Zen 4); the pair's int32
// lanes are then ggml's eight of each row side by side, for one float epilogue. Q5_K adds its
// fifth bits: the pair's 64 qh bytes in one zmm, and per nibble step one vptestmb and one
// masked add of 16 (with GFNI one affine op and a ternary op instead of the AND). The integer
// lanes are exact, and each row's float terms are added in the vec order's sequence (dotQ4K,
// dotQ5K: Q4_K keeps four minimum lanes per row, Q5_K one sum per row): the same bits.
//
// One core of the Zen 4 VM, a 590 KB matrix in cache (cpu_kernels_bench --vec-order --rows 512
// --cols 2048, 64-byte-aligned buffers), GB/s of weights x tokens: Q4_K 37.8 at one token and
// 45.3 at four, Q5_K (GFNI) 36.0 and 47.5; in the file layout's nibble order (a byte shuffle per
// row and 32-element step, a fold of each row's two register halves, the activations rearranged
// per group) 31.0, 42.9, 28.7 and 45.2; the file layout's own kernel 20.7 (Q4_K, one token).
// Q5_K's and Q6_K's kernels take a kGfni flag: with it they place their high bits by
// GF2P8AFFINEQB (avx512_gfni_groups.h, the one file built with GFNI); without it, by mask tests
// and shifts (CPUs without GFNI). Q4_K's high nibbles by GF2P8AFFINEQB (one op for a shift and an
// AND) ran no faster.
//
// Prefetch: a thread's rows are one front-to-back stream here, which the hardware prefetchers of
// the Zen 4 VM follow well: one core read a 75 MB matrix at 27.1-28.0 GB/s without software
// prefetches (the file layout's kernel: 14.3-19.8), 25.6-27.1 prefetching eight group blocks
// ahead into L2, and 14.6-21.5 prefetching into L1 (which evicts what is being read). The L2
// prefetch is kept for CPUs whose hardware prefetchers fall behind: on the Intel Xeon VM the file
// layout's kernels ran at half speed without theirs (x86_kquant_kernels.h; this kernel has not
// been measured there). In a whole model's decode (a 75 MB stand-alone matrix partly stays in
// the 32 MB L3 between repetitions) it pays for Q4_K on one thread and for Q6_K (33.8 tok/s with
// it, 19.7 without, two threads), and costs Q5_K 11% on two threads: Q5_K's one-token passes run
// without it (GroupOf::kPrefetch).
//
// Q4_K in the repacked order (DotOrder::Repacked, llama.cpp's gemv) takes the same passes with
// another epilogue (kRepacked): the four row pairs' lanes reduced to the eight rows' totals in one
// zmm (repackedTotals), one fma per token and block for them and one per 4-row half for the
// minimums. One core, cache-resident (--rows 512 --cols 2048): 0.50 ns per row, 32 weights and
// token at one token against the vec order's 0.48, 0.42 at four against 0.39.
//
// Prefill (the tiled order; Q4_K's RepackedGemm, and Repacked batches of kRepackedPrefillTokens+)
// runs the file layout's bands of 16 rows (two groups) on a row source that takes each row's
// super-block out of its group; the other cases (rows not in whole groups,
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
// kPrefetch: whether groupDotKT prefetches ahead in a pass of one token (see the top; passes of
// several tokens, which are compute-bound, always do, as before). The 1B models' decode (shoal-cli
// bench -p 0 -n 64, medians of 6-8 alternated runs): Q4_K 42.8 tok/s with it against 38.1
// without on one thread, 54.2 and 51.2 on two; Q5_K 38.4 with it against 43.0 without on two
// threads, 30.8 and 31.4 on one.
template <>
struct GroupOf<BlockQ4_Kx8> {
  using Block = BlockQ4_K;
  static constexpr WeightKind kKind = WeightKind::Q4_K;
  static constexpr bool kFifthBits = false;
  static constexpr bool kPrefetch = true;
};
template <>
struct GroupOf<BlockQ5_Kx8> {
  using Block = BlockQ5_K;
  static constexpr WeightKind kKind = WeightKind::Q5_K;
  static constexpr bool kFifthBits = true;
  static constexpr bool kPrefetch = false;
};
template <>
struct GroupOf<BlockQ6_Kx8> {
  using Block = BlockQ6_K;
  static constexpr WeightKind kKind = WeightKind::Q6_K;
  static constexpr bool kFifthBits = false;
};

// The eight rows' totals from the four pairs' lanes (pair p: row 2p in lanes 0-7, row 2p+1 in
// 8-15): row 2i in lane i, row 2i+1 in lane 8 + i, the same again in lanes 4-7 and 12-15 (exact:
// integer adds). Per 128-bit lane: the pairs' four values summed (two rounds of unpack and add),
// then the two 128-bit lanes of each row added.
inline __m512i repackedTotals(const __m512i p[4]) {
  const __m512i u01 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
  const __m512i u23 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
  // 128-bit lane k: [pair 0's, 1's, 2's, 3's sum of its lanes 4k .. 4k+3].
  const __m512i v =
      _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23), _mm512_unpackhi_epi64(u01, u23));
  return _mm512_add_epi32(v, _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
}

// The vec order for the eight rows of one group and T tokens: out[t][r] = row r's dot with token
// t, as dotQ4K (Q4_K) or dotQ5K (Q5_K) computes it for that row alone. y[t]: token t's blocks (d,
// bsums); lanes[t]: its activations in pair lanes (pairLaneActivations). With several tokens (a
// decode step of several sequences) each pair of rows' quants is unpacked and its scales picked
// once for all of them: per token remain the products, the minimum terms and the float steps.
//
// kRepacked (Q4_K): DotOrder::Repacked instead, as dotQ4K computes it: per super-block each row's
// exact totals, s1 from its eight lanes and s2 from its four minimum products, fused into
// acc and accMin (y.d * d and y.d * dmin), the result acc - accMin. The four pairs' lanes are
// reduced to the eight rows' totals in one zmm (repackedTotals) for one fma per token and block.
template <class Group, bool kGfni, int T, bool kRepacked = false>
inline void groupDotKT(const Group* x, const BlockQ8_K* const* y, const PairLaneBlock* const* lanes,
                       int64_t blocks, float (*out)[kGroupRows]) {
  constexpr bool kQ5 = GroupOf<Group>::kFifthBits;
  static_assert(!(kQ5 && kRepacked));
  // Repacked: rows 2i at lane i, rows 2i+1 at lane 8 + i of repackedTotals, repeated in lanes
  // 4-7 and 12-15; these pick their scales.
  const __m512i rowOfLane = _mm512_set_epi32(7, 5, 3, 1, 7, 5, 3, 1, 6, 4, 2, 0, 6, 4, 2, 0);
  __m512 accRows[T];
  for (int t = 0; t < T; ++t) accRows[t] = _mm512_setzero_ps();
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  // Chunk m: int16 lanes alternate scale 2m and scale 2m+1 (of the 8 scale bytes in each row's
  // 128-bit lane), the pair-lane order of the chunk's int16 products.
  __m512i pick[4];
  for (int m = 0; m < 4; ++m) {
    pick[m] =
        _mm512_set1_epi32(static_cast<int32_t>(0x80008000u | ((2u * m + 1) << 16) | (2u * m)));
  }
  // Q5_K: chunk m's fifth bits, bit 2m (low nibbles) and 2m+1 (high nibbles) of each qh byte, and
  // with GFNI the GF(2) bit matrices (gfBitsTo4) that move them to bit 4.
  __m512i fifth[4][2], fifthTo4[4][2];
  for (int m = 0; m < 4; ++m) {
    for (int n = 0; n < 2; ++n) {
      fifth[m][n] = _mm512_set1_epi8(static_cast<char>(1 << (2 * m + n)));
      fifthTo4[m][n] = gfBitsTo4(2 * m + n, 2 * m + n, 1);
    }
  }
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i pickMins = _mm512_broadcast_i32x4(
      _mm_setr_epi8(8, -128, 9, -128, 10, -128, 11, -128, 12, -128, 13, -128, 14, -128, 15, -128));
  // From [d0..d7 | dmin0..dmin7]: dmin of rows 4h+k in lanes 4k..4k+3; d of rows 2p, 2p+1 in
  // lanes 0-7 and 8-15.
  const __m512i dminOf[2] = {
      _mm512_set_epi32(11, 11, 11, 11, 10, 10, 10, 10, 9, 9, 9, 9, 8, 8, 8, 8),
      _mm512_set_epi32(15, 15, 15, 15, 14, 14, 14, 14, 13, 13, 13, 13, 12, 12, 12, 12)};
  // accMin[t][h], 128-bit lane k: row 4h+k's minimum term. Q4_K: four lanes per row, added at
  // the end (dotQ4K's accMin); Q5_K: the row's one running sum in every lane (dotQ5K's summs).
  // acc[t][p]: rows 2p (lanes 0-7) and 2p+1 (8-15), ggml's eight float lanes each.
  __m512 acc[T][4], accMin[T][2];
  for (int t = 0; t < T; ++t) {
    for (__m512& a : acc[t]) a = _mm512_setzero_ps();
    for (__m512& a : accMin[t]) a = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const Group& xb = x[b];
    if constexpr (GroupOf<Group>::kPrefetch || T > 1) {
      // Past the group's last block: the next group's, which follows in memory.
      const auto* ahead = reinterpret_cast<const char*>(x + b + kGroupPrefetchBlocks);
      for (size_t i = 0; i < sizeof(Group); i += 64) _mm_prefetch(ahead + i, _MM_HINT_T2);
    }
    // Per token: [y.d * d of rows 0-7 | y.d * dmin of rows 0-7], rounded as scalePair rounds
    // them.
    __m512 scales[T];
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.d)));
    for (int t = 0; t < T; ++t) scales[t] = _mm512_mul_ps(dw, _mm512_set1_ps(y[t][b].d));
    __m512i rowScales[2];
    for (int h = 0; h < 2; ++h) rowScales[h] = groupScalesAndMins(xb, h);
    for (int t = 0; t < T; ++t) {
      const __m512i pairs = _mm512_broadcast_i32x4(bsumPairs(y[t][b]));
      for (int h = 0; h < 2; ++h) {
        __m512i prod = _mm512_madd_epi16(_mm512_shuffle_epi8(rowScales[h], pickMins), pairs);
        if constexpr (kQ5 || kRepacked) {
          // Each row's four products added (integer adds: exact), in all four of its lanes.
          prod = _mm512_add_epi32(prod, _mm512_shuffle_epi32(prod, _MM_PERM_BADC));
          prod = _mm512_add_epi32(prod, _mm512_shuffle_epi32(prod, _MM_PERM_CDAB));
        }
        const __m512 dmin = _mm512_permutexvar_ps(dminOf[h], scales[t]);
        if constexpr (kRepacked) {
          accMin[t][h] = _mm512_fmadd_ps(dmin, _mm512_cvtepi32_ps(prod), accMin[t][h]);
        } else {
          accMin[t][h] = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(prod), accMin[t][h]);
        }
      }
    }
    __m512i pairSums[T][4];  // kRepacked: each pair's lanes, reduced after the last pair
    for (int p = 0; p < 4; ++p) {
      // Rows 2p, 2p+1: [scales | minimums] of row 2p in 128-bit lanes 0-1, of row 2p+1 in 2-3.
      const __m512i s = (p % 2) ? _mm512_shuffle_i64x2(rowScales[p / 2], rowScales[p / 2], 0xFA)
                                : _mm512_shuffle_i64x2(rowScales[p / 2], rowScales[p / 2], 0x50);
      __m512i qh = _mm512_setzero_si512();
      if constexpr (kQ5) qh = _mm512_loadu_si512(xb.qh[p]);
      __m512i sums[T], sums2[T][2];
      for (int t = 0; t < T; ++t) sums2[t][0] = sums2[t][1] = _mm512_setzero_si512();
      for (int m = 0; m < 4; ++m) {
        // Chunk m of both rows: the low nibbles, then the high ones (shifted down; the low
        // ones' bits above them are masked).
        const __m512i w = _mm512_loadu_si512(xb.qs[p][m]);
        const __m512i src[2] = {w, _mm512_srli_epi16(w, 4)};
        __m512i q[2];
        for (int n = 0; n < 2; ++n) {
          if constexpr (kQ5 && kGfni) {
            // One affine op puts each byte's fifth bit at bit 4, one ternary op ORs it onto the
            // masked nibble.
            q[n] = _mm512_ternarylogic_epi32(
                src[n], nibble, _mm512_gf2p8affine_epi64_epi8(qh, fifthTo4[m][n], 0), kMaskOr);
          } else {
            q[n] = _mm512_and_si512(src[n], nibble);
            if constexpr (kQ5) {
              q[n] =
                  _mm512_mask_add_epi8(q[n], _mm512_test_epi8_mask(qh, fifth[m][n]), q[n], sixteen);
            }
          }
        }
        const __m512i scale = _mm512_shuffle_epi8(s, pick[m]);
        for (int t = 0; t < T; ++t) {
          for (int n = 0; n < 2; ++n) {
            const __m512i a = _mm512_load_si512(lanes[t][b].qs[m][n]);
            sums2[t][n] = _mm512_dpwssd_epi32(sums2[t][n], scale, _mm512_maddubs_epi16(q[n], a));
          }
        }
      }
      const __m512i dOf = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * p)),
                                             _mm256_set1_epi32(2 * p + 1), 1);
      for (int t = 0; t < T; ++t) sums[t] = _mm512_add_epi32(sums2[t][0], sums2[t][1]);
      if constexpr (kRepacked) {
        for (int t = 0; t < T; ++t) pairSums[t][p] = sums[t];
        continue;
      }
      for (int t = 0; t < T; ++t) {
        acc[t][p] = _mm512_fmadd_ps(_mm512_permutexvar_ps(dOf, scales[t]),
                                    _mm512_cvtepi32_ps(sums[t]), acc[t][p]);
      }
    }
    if constexpr (kRepacked) {
      for (int t = 0; t < T; ++t) {
        accRows[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(repackedTotals(pairSums[t])),
                                     _mm512_permutexvar_ps(rowOfLane, scales[t]), accRows[t]);
      }
    }
  }
  if constexpr (kRepacked) {
    for (int t = 0; t < T; ++t) {
      alignas(64) float rows[16], mins[2][16];
      _mm512_store_ps(rows, accRows[t]);
      _mm512_store_ps(mins[0], accMin[t][0]);
      _mm512_store_ps(mins[1], accMin[t][1]);
      for (int r = 0; r < kGroupRows; ++r) {
        out[t][r] = rows[(r % 2) * 8 + r / 2] - mins[r / 4][4 * (r % 4)];
      }
    }
    return;
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < kGroupRows; ++r) {
      const __m256 lanes8 = (r % 2) ? _mm512_extractf32x8_ps(acc[t][r / 2], 1)
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
      out[t][r] = hsum8(lanes8) + _mm_cvtss_f32(m);
    }
  }
}

// Tokens per pass of the grouped Q4_K/Q5_K decode kernels: one group's Q4_K from L3, ns per
// 32 weights and token at 1/2/3/4 per pass: 0.60, 0.48, 0.44, 0.42 (cpu_kernels_bench
// --vec-order --rows 4096 --cols 2048 --tokens 8; before pair lanes).
constexpr int kKGroupTokens = 4;

// groupDotKT for n (1 to kKGroupTokens) tokens.
template <class Group, bool kGfni, bool kRepacked = false>
inline void groupDotKN(const Group* x, const BlockQ8_K* const* y, const PairLaneBlock* const* lanes,
                       int n, int64_t blocks, float (*out)[kGroupRows]) {
  withTokenCount(n, [&](auto pass) {
    groupDotKT<Group, kGfni, decltype(pass)::value, kRepacked>(x, y, lanes, blocks, out);
  });
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
  // RepackedGemm (a prompt's whole fours of tokens) always: the decode kernels fuse per block.
  const bool bandsOrder = (g.order == DotOrder::Tiled && g.tokens >= 2) ||
                          (g.order == DotOrder::Repacked && g.tokens >= kRepackedPrefillTokens) ||
                          g.order == DotOrder::RepackedGemm;
  if (bandsOrder) {
    r = gemmKBands<K>(g, r, last, groupedRows<Group>);
    for (; r < last; r += kGroupRows) ungroupedRows<kKind, FileGemm>(g, r, r, r + kGroupRows);
  } else {
    // Up to kKGroupTokens tokens per pass (a decode step of several sequences). Q4_K and Q5_K
    // read each token's activations in pair lanes, built here per call: 4 shifts and blends per
    // 64 activations, against every row of the call's groups.
    constexpr bool kPairLanes = kKind != WeightKind::Q6_K;
    const PairLaneBlock* pairLanes = kPairLanes ? pairLaneRows(g, blocks) : nullptr;
    const bool gfni = useGfni();
    for (; r < last; r += kGroupRows) {
      const auto* x =
          reinterpret_cast<const Group*>(g.weights + static_cast<size_t>(r) * g.weightStride);
      for (int64_t t = 0; t < g.tokens;) {
        const int n = static_cast<int>(std::min<int64_t>(kKGroupTokens, g.tokens - t));
        const BlockQ8_K* a[kKGroupTokens] = {};
        const PairLaneBlock* lanes[kKGroupTokens] = {};
        for (int i = 0; i < n; ++i) {
          a[i] =
              reinterpret_cast<const BlockQ8_K*>(g.act + static_cast<size_t>(t + i) * g.actStride);
          if constexpr (kPairLanes) lanes[i] = pairLanes + (t + i) * blocks;
        }
        alignas(32) float out[kKGroupTokens][kGroupRows];
        if constexpr (kKind == WeightKind::Q6_K) {
          gfni ? avx512::groupDotQ6KGfni(x, a, n, blocks, out)
               : groupDotQ6KN<false>(x, a, n, blocks, out);
        } else if constexpr (kKind == WeightKind::Q5_K) {
          gfni ? avx512::groupDotQ5KGfni(x, a, lanes, n, blocks, out)
               : groupDotKN<Group, false>(x, a, lanes, n, blocks, out);
        } else if (g.order == DotOrder::Repacked) {
          groupDotKN<Group, false, true>(x, a, lanes, n, blocks, out);
        } else {
          groupDotKN<Group, false>(x, a, lanes, n, blocks, out);
        }
        for (int i = 0; i < n; ++i) std::memcpy(g.y + (t + i) * g.ldy + r, out[i], sizeof out[i]);
        t += n;
      }
    }
  }
}

}  // namespace
}  // namespace shoal::cpu
