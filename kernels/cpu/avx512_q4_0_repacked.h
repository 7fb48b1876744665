#pragma once
// The AVX-512 VNNI Q4_0 kernel of DotOrder::Repacked (kernel_table.h): llama.cpp's x86 repacked
// arithmetic, per row and block the exact integer total of the 32 products and one
// acc = fma(total, d_w * d_a, acc), bit-identical to the scalar reference.
//
// Why a kernel of its own: the vec order keeps eight float lanes per row and token, and a batch
// of several tokens was bound by their conversions, spreads and fmas (0.37-0.42 ns per row, block
// and token at 4-8 tokens on Zen 4, its floor ~0.36). Exact block totals allow one lane per row:
// 16 rows side by side in a zmm, each 32-bit lane the dot of four of a row's bytes with four
// activations, so that a block of 16 rows and one token is eight vpdpbusd against broadcast
// activation words, one conversion, one multiply and one fma for all 16 rows: 0.20-0.22 ns at 4
// to 128 tokens (one core, 2048 x 2048 from cache, cpu_kernels_bench).
//
// Batches (2+ tokens): per block the 16 rows' quants (two groups, four rows per 64-byte load,
// BlockQ4_0x8) are transposed once for all the pass's tokens: register k holds bytes 4k..4k+3
// of every row (low nibbles: elements 4k..4k+3, high nibbles: 16+4k..16+4k+3). The transposes
// leave row 4 * (p % 4) + p / 4 in lane p, and the scales and results are permuted with the same
// index (its own inverse). The last pass over two groups prefetches the next two into L2.
// One token (decode) is memory-bound and reads one group at a time instead (repackedOneToken).
// Codes stay unsigned (q + 8); each token's dot starts at -8 x the sum of its activations
// (RepackedQ4_0Act, which matmul() computes once per call).
//
// IQ4_NL and MXFP4 share this arithmetic in llama.cpp (gemv/gemm_q4_b32_8x8_q8_0_lut_avx, one
// template for block_q4_0x8, block_iq4_nlx8 and block_mxfp4x8): only a nibble's value (a level
// from a table) and the block's scale (IQ4_NL an f16 as Q4_0's, MXFP4 an E8M0 exponent) differ,
// which the weight traits below (Q4_0Weights, IQ4NLWeights, MXFP4Weights) supply.
//
// Rows in file layout (a matrix not in groups yet, rows not in whole groups) are gathered the
// same way from 16 (one token: 8) row pointers; a last run of fewer rows repeats its last row and
// stores only its own.
//
// Included by avx512_quant_gemm.cpp only (anonymous namespace, AVX-512 flags).

#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "engine/gguf/quant_common.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/repacked_q4_0_acts.h"
#include "kernels/cpu/row_group_fallback.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu {
namespace {

constexpr int kRepackedRows = 16;
constexpr int kRepackedTokens = 16;  // tokens per pass: 16 accumulators beside 8 weight registers

// Lane p <-> row 4 * (p % 4) + p / 4 (an involution: the same permutation both ways).
inline __m512i repackedLaneRows() {
  return _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
}

// One block of 16 rows, ready for every token of a pass.
struct RepackedBlock {
  __m512i lo[4];  // low nibbles, bytes 4k..4k+3 of each row's quants
  __m512i hi[4];  // high nibbles
  __m512 d;       // the rows' scales, in lane order
};

// A 16-entry level table + 128 (the codes, all in 1..255 for IQ4_NL's and MXFP4's levels), in
// every 128-bit lane.
inline __m512i levelCodes(const int8_t* levels) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(levels));
  return _mm512_broadcast_i32x4(_mm_xor_si128(table, _mm_set1_epi8(-128)));  // + 128 mod 256
}

inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m128i load64(const void* p) { return _mm_loadl_epi64(static_cast<const __m128i*>(p)); }

// E8M0 exponents (one per 32-bit lane) as gguf::e8m0Half's floats: the exponent field e - 1, or
// the subnormals 2^-128 and 2^-127 for e = 0 and 1.
inline __m512 e8m0Halves(__m512i e) {
  const __mmask16 tiny = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(tiny, normal, subnormal));
}

// The weight types of one block shape (32 nibbles and a scale) that share these kernels:
//  * Block, Group: the file layout's block and the row groups' (row_groups.h);
//  * codes(nibbles): the unsigned code each nibble multiplies (Q4_0: the nibble, q + 8; the
//    table types: level + 128);
//  * start(s): where a block's dot starts, minus the codes' offset times the activations' sum;
//  * Raw, raw(block): a block's scale field; scales16/scales8(raw): 16 or 8 of them as floats.
struct Q4_0Weights {
  using Block = BlockQ4_0;
  using Group = BlockQ4_0x8;
  using Raw = uint16_t;
  static constexpr WeightKind kKind = WeightKind::Q4_0;
  static __m512i codes(__m512i nibbles) { return nibbles; }
  static int32_t start(const RepackedQ4_0Act& s) { return s.start; }
  static Raw raw(const Block& b) { return b.d; }
  static const Raw* raws(const Group& x) { return x.d; }
  static __m512 scales16(const Raw* lo, const Raw* hi) {
    return _mm512_cvtph_ps(
        _mm256_inserti128_si256(_mm256_castsi128_si256(load128(lo)), load128(hi), 1));
  }
  static __m256 scales8(const Raw* p) { return _mm256_cvtph_ps(load128(p)); }
};
// IQ4_NL: Q4_0's blocks, nibbles index its levels.
struct IQ4NLWeights : Q4_0Weights {
  static constexpr WeightKind kKind = WeightKind::IQ4_NL;
  static __m512i codes(__m512i nibbles) {
    return _mm512_shuffle_epi8(levelCodes(gguf::kIq4NlValues), nibbles);
  }
  static int32_t start(const RepackedQ4_0Act& s) { return s.start * 16; }  // -128 x the sum
};
// MXFP4: the doubled E2M1 levels, an E8M0 exponent for the scale (halved: e8m0Half).
struct MXFP4Weights {
  using Block = BlockMXFP4;
  using Group = BlockMXFP4x8;
  using Raw = uint8_t;
  static constexpr WeightKind kKind = WeightKind::MXFP4;
  static __m512i codes(__m512i nibbles) {
    return _mm512_shuffle_epi8(levelCodes(gguf::kMxfp4Values), nibbles);
  }
  static int32_t start(const RepackedQ4_0Act& s) { return s.start * 16; }
  static Raw raw(const Block& b) { return b.e; }
  static const Raw* raws(const Group& x) { return x.e; }
  static __m512 scales16(const Raw* lo, const Raw* hi) {
    return e8m0Halves(_mm512_cvtepu8_epi32(_mm_unpacklo_epi64(load64(lo), load64(hi))));
  }
  static __m256 scales8(const Raw* p) {
    return _mm512_castps512_ps256(e8m0Halves(_mm512_cvtepu8_epi32(load64(p))));
  }
};

// Four registers of four rows each (register q, 128-bit lane j: row 4q + j) into the block.
// scales: the 16 rows' scales in row order.
template <class W>
inline void transposeRows(__m512i r0, __m512i r1, __m512i r2, __m512i r3, __m512 scales,
                          RepackedBlock& w) {
  const __m512i t0 = _mm512_unpacklo_epi32(r0, r1);
  const __m512i t1 = _mm512_unpackhi_epi32(r0, r1);
  const __m512i t2 = _mm512_unpacklo_epi32(r2, r3);
  const __m512i t3 = _mm512_unpackhi_epi32(r2, r3);
  const __m512i c[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                        _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (int k = 0; k < 4; ++k) {
    w.lo[k] = W::codes(_mm512_and_si512(c[k], nibble));
    w.hi[k] = W::codes(_mm512_and_si512(_mm512_srli_epi16(c[k], 4), nibble));
  }
  w.d = _mm512_permutexvar_ps(repackedLaneRows(), scales);
}

// Two groups of eight rows (the second may be the first again).
template <class W>
struct GroupPairSource {
  const typename W::Group* a;
  const typename W::Group* b;
  void load(int64_t blk, RepackedBlock& w) const {
    const typename W::Group& x = a[blk];
    const typename W::Group& y = b[blk];
    transposeRows<W>(_mm512_loadu_si512(x.qs[0]), _mm512_loadu_si512(x.qs[4]),
                     _mm512_loadu_si512(y.qs[0]), _mm512_loadu_si512(y.qs[4]),
                     W::scales16(W::raws(x), W::raws(y)), w);
  }
};

// Block blk of four rows in file layout, one row per 128-bit lane.
template <class Block>
inline __m512i fourFileRows(const Block* const* row, int64_t blk) {
  const __m512i r = _mm512_castsi128_si512(load128(row[0][blk].qs));
  const __m512i r1 = _mm512_inserti32x4(r, load128(row[1][blk].qs), 1);
  const __m512i r2 = _mm512_inserti32x4(r1, load128(row[2][blk].qs), 2);
  return _mm512_inserti32x4(r2, load128(row[3][blk].qs), 3);
}

// Sixteen rows in file layout.
template <class W>
struct FileRowsSource {
  const typename W::Block* row[kRepackedRows];
  __m512i four(int64_t blk, int q) const { return fourFileRows(row + 4 * q, blk); }
  void load(int64_t blk, RepackedBlock& w) const {
    typename W::Raw d[kRepackedRows];
    for (int i = 0; i < kRepackedRows; ++i) d[i] = W::raw(row[i][blk]);
    transposeRows<W>(four(blk, 0), four(blk, 1), four(blk, 2), four(blk, 3),
                     W::scales16(d, d + kGroupRows), w);
  }
};

inline __m512i broadcastWord(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// Tokens [t0, t0 + T) against 16 rows of `src`; writes `valid` rows from r0 of each token's y.
// prefetch: the next two groups, brought into L2 block by block (nullptr: none; passes of
// several tokens are compute-bound, and the hardware prefetchers fall behind them).
template <int T, class W, class Src>
void repackedPass(const GemmArgs& g, const RepackedQ4_0Act* acts, int64_t actsStride,
                  const Src& src, int64_t t0, int64_t r0, int valid,
                  const typename W::Group* const* prefetch) {
  const int64_t blocks = g.cols / kQK;
  const BlockQ8_0* a[T];
  const RepackedQ4_0Act* s[T];
  __m512 acc[T];
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_0*>(g.act + static_cast<size_t>(t0 + t) * g.actStride);
    s[t] = acts + (t0 + t) * actsStride;
    acc[t] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    if (prefetch != nullptr) {
      for (int i = 0; i < 2; ++i) {
        const char* p = reinterpret_cast<const char*>(prefetch[i] + b);
        for (size_t o = 0; o < sizeof(typename W::Group); o += 64) {
          _mm_prefetch(p + o, _MM_HINT_T1);
        }
      }
    }
    RepackedBlock w;
    src.load(b, w);
    for (int t = 0; t < T; ++t) {
      const int8_t* q = a[t][b].qs;
      __m512i x = _mm512_set1_epi32(W::start(s[t][b]));
      __m512i y = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k) {
        x = _mm512_dpbusd_epi32(x, w.lo[k], broadcastWord(q + 4 * k));
        y = _mm512_dpbusd_epi32(y, w.hi[k], broadcastWord(q + 16 + 4 * k));
      }
      const __m512 total = _mm512_cvtepi32_ps(_mm512_add_epi32(x, y));
      acc[t] = _mm512_fmadd_ps(total, _mm512_mul_ps(w.d, _mm512_set1_ps(s[t][b].d)), acc[t]);
    }
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << valid) - 1u);
  for (int t = 0; t < T; ++t) {
    const __m512 rows = _mm512_permutexvar_ps(repackedLaneRows(), acc[t]);
    _mm512_mask_storeu_ps(g.y + (t0 + t) * g.ldy + r0, keep, rows);
  }
}

// repackedPass<n> for a pass of n (1 to T) tokens (its accumulators are registers).
template <int T, class W, class Src>
void repackedPassOf(int64_t n, const GemmArgs& g, const RepackedQ4_0Act* acts, int64_t actsStride,
                    const Src& src, int64_t t0, int64_t r0, int valid,
                    const typename W::Group* const* prefetch) {
  if constexpr (T > 1) {
    if (n < T) {
      repackedPassOf<T - 1, W>(n, g, acts, actsStride, src, t0, r0, valid, prefetch);
      return;
    }
  }
  repackedPass<T, W>(g, acts, actsStride, src, t0, r0, valid, prefetch);
}

// Every token of the job against 16 rows of `src`, kRepackedTokens per pass.
template <class W, class Src>
void repackedRows(const GemmArgs& g, const RepackedQ4_0Act* acts, int64_t actsStride,
                  const Src& src, int64_t r0, int valid, const typename W::Group* const* prefetch) {
  for (int64_t t0 = 0; t0 < g.tokens; t0 += kRepackedTokens) {
    const int64_t n = g.tokens - t0 < kRepackedTokens ? g.tokens - t0 : kRepackedTokens;
    const typename W::Group* const* pf = g.tokens > 1 && t0 + n == g.tokens ? prefetch : nullptr;
    repackedPassOf<kRepackedTokens, W>(n, g, acts, actsStride, src, t0, r0, valid, pf);
  }
}

// One group against one token (decode), which is memory-bound: the 16-row passes read two
// groups at once, two streams 8 rows apart that the hardware prefetchers followed at half the
// rate of one (a 65536 x 2048 matrix from DRAM on one core: 13 against 26 GB/s). Here a group is
// read front to back without the transposes: lane (4j + k) of a register of four rows holds row
// j's dot of bytes 4k..4k+3 against the token's 16 activations of that nibble half (broadcast to
// the four 128-bit lanes), and two unpacks, a shuffle and two adds reduce each row's four lanes;
// row j's total ends in lane 4j of the first four rows' register, row 4 + j's in lane 4j + 1.
// Eight rows' block b for repackedOneToken: four rows' quants per register, the eight scales.
template <class W>
struct OneGroupSource {
  const typename W::Group* x;
  __m512i four(int64_t b, int q) const { return _mm512_loadu_si512(x[b].qs[4 * q]); }
  __m256 scales(int64_t b) const { return W::scales8(W::raws(x[b])); }
  void prefetch(int64_t) const {}  // one stream: the hardware prefetchers follow it
};
// Eight rows side by side are eight short streams, which the hardware prefetchers follow at
// about half the rate of one: as the file layout's decode tile (avx512_quant_gemm.cpp), the next
// eight rows, one run of memory, are prefetched front to back at the pace these are read
// (from DRAM on one core: 8 against 15 GB/s without).
template <class W>
struct EightFileRowsSource {
  using Block = typename W::Block;
  const Block* row[kGroupRows];
  const char* next;  // the byte after the eighth row
  void prefetch(int64_t b) const {
    const char* p = next + static_cast<size_t>(b) * kGroupRows * sizeof(Block);
    for (size_t o = 0; o < kGroupRows * sizeof(Block); o += 64) _mm_prefetch(p + o, _MM_HINT_T2);
  }
  __m512i four(int64_t b, int q) const { return fourFileRows(row + 4 * q, b); }
  __m256 scales(int64_t b) const {
    typename W::Raw d[kGroupRows];
    for (int i = 0; i < kGroupRows; ++i) d[i] = W::raw(row[i][b]);
    return W::scales8(d);
  }
};

template <class W, class Src>
void repackedOneToken(const Src& x, const BlockQ8_0* a, const RepackedQ4_0Act* s, int64_t blocks,
                      float* y, int valid) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  // Lane p takes the scale of row (p odd ? 4 : 0) + p / 4; rows come back from lanes 4r and
  // 4(r - 4) + 1.
  const __m512i scaleLanes = _mm512_set_epi32(7, 3, 7, 3, 6, 2, 6, 2, 5, 1, 5, 1, 4, 0, 4, 0);
  const __m512i rowLanes = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 13, 9, 5, 1, 12, 8, 4, 0);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    x.prefetch(b);
    const __m512i r0 = x.four(b, 0);  // rows 0-3, one per 128-bit lane
    const __m512i r1 = x.four(b, 1);  // rows 4-7
    const __m512i lo = _mm512_broadcast_i32x4(load128(a[b].qs));
    const __m512i hi = _mm512_broadcast_i32x4(load128(a[b].qs + 16));
    __m512i s0 =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), W::codes(_mm512_and_si512(r0, nibble)), lo);
    s0 = _mm512_dpbusd_epi32(s0, W::codes(_mm512_and_si512(_mm512_srli_epi16(r0, 4), nibble)), hi);
    __m512i s1 =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), W::codes(_mm512_and_si512(r1, nibble)), lo);
    s1 = _mm512_dpbusd_epi32(s1, W::codes(_mm512_and_si512(_mm512_srli_epi16(r1, 4), nibble)), hi);
    // Per 128-bit lane j: [s0 k0 + k2, s1 k0 + k2, s0 k1 + k3, s1 k1 + k3], then the halves.
    const __m512i t =
        _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
    const __m512i u = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
    const __m512i total = _mm512_add_epi32(u, _mm512_set1_epi32(W::start(s[b])));
    const __m512 d = _mm512_permutexvar_ps(scaleLanes, _mm512_castps256_ps512(x.scales(b)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(d, _mm512_set1_ps(s[b].d)), acc);
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << valid) - 1u);
  _mm512_mask_storeu_ps(y, keep, _mm512_permutexvar_ps(rowLanes, acc));
}

// Rows [rowBegin, rowEnd) in file layout, of weight type W (Q4_0Weights, IQ4NLWeights,
// MXFP4Weights).
template <class W>
void gemmQ4_0RepackedFile(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  using Block = typename W::Block;
  int64_t stride;
  RepackedQ4_0Act* owned;
  const RepackedQ4_0Act* acts = repackedActs(g, stride, owned);
  auto rowPtr = [&](int64_t r) {
    return reinterpret_cast<const Block*>(g.weights + static_cast<size_t>(r) * g.weightStride);
  };
  if (g.tokens == 1) {
    const auto* a = reinterpret_cast<const BlockQ8_0*>(g.act);
    for (int64_t r = rowBegin; r < rowEnd; r += kGroupRows) {
      const int valid = static_cast<int>(rowEnd - r < kGroupRows ? rowEnd - r : kGroupRows);
      EightFileRowsSource<W> src;
      for (int i = 0; i < kGroupRows; ++i) src.row[i] = rowPtr(r + (i < valid ? i : valid - 1));
      src.next = reinterpret_cast<const char*>(rowPtr(r + kGroupRows));
      repackedOneToken<W>(src, a, acts, g.cols / kQK, g.y + r, valid);
    }
    std::free(owned);
    return;
  }
  for (int64_t r = rowBegin; r < rowEnd; r += kRepackedRows) {
    const int valid = static_cast<int>(rowEnd - r < kRepackedRows ? rowEnd - r : kRepackedRows);
    FileRowsSource<W> src;
    for (int i = 0; i < kRepackedRows; ++i) src.row[i] = rowPtr(r + (i < valid ? i : valid - 1));
    repackedRows<W>(g, acts, stride, src, r, valid, nullptr);
  }
  std::free(owned);
}

// Rows [rowBegin, rowEnd), in row groups or file layout (g.rowGroups), of weight type W.
template <class W = Q4_0Weights>
void gemmQ4_0Repacked(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  using Group = typename W::Group;
  if (!g.rowGroups) {
    gemmQ4_0RepackedFile<W>(g, rowBegin, rowEnd);
    return;
  }
  int64_t first, last;
  if (!ungroupedEdges<W::kKind, gemmQ4_0RepackedFile<W>>(g, rowBegin, rowEnd, first, last)) {
    return;
  }
  int64_t stride;
  RepackedQ4_0Act* owned;
  const RepackedQ4_0Act* acts = repackedActs(g, stride, owned);
  const size_t groupBytes = g.weightStride * kGroupRows;
  auto group = [&](int64_t r) {
    return reinterpret_cast<const Group*>(g.weights +
                                          static_cast<size_t>(r / kGroupRows) * groupBytes);
  };
  if (g.tokens == 1) {
    const auto* a = reinterpret_cast<const BlockQ8_0*>(g.act);
    for (int64_t r = first; r < last; r += kGroupRows) {
      repackedOneToken<W>(OneGroupSource<W>{group(r)}, a, acts, g.cols / kQK, g.y + r, kGroupRows);
    }
    std::free(owned);
    return;
  }
  for (int64_t r = first; r < last; r += kRepackedRows) {
    const bool pair = r + kRepackedRows <= last;
    const GroupPairSource<W> src{group(r), pair ? group(r + kGroupRows) : group(r)};
    const Group* next[2] = {group(r + kRepackedRows), group(r + kRepackedRows + kGroupRows)};
    const bool nextPair = r + 2 * kRepackedRows <= last;
    repackedRows<W>(g, acts, stride, src, r, pair ? kRepackedRows : kGroupRows,
                    nextPair ? next : nullptr);
  }
  std::free(owned);
}

}  // namespace
}  // namespace shoal::cpu
