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

// IQ4_NL's 16 levels + 128 (its codes, 1..241), in every 128-bit lane.
inline __m512i iq4NlCodes() {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(gguf::kIq4NlValues));
  return _mm512_broadcast_i32x4(_mm_xor_si128(table, _mm_set1_epi8(-128)));  // + 128 mod 256
}

// kLevels (IQ4_NL): a nibble's code is its level + 128 instead of q + 8 (Q4_0's stored nibble).
template <bool kLevels>
inline __m512i codesOf(__m512i nibbles) {
  return kLevels ? _mm512_shuffle_epi8(iq4NlCodes(), nibbles) : nibbles;
}

// The start of a block's dot: -8 (Q4_0) or -128 (IQ4_NL) times its activations' sum.
template <bool kLevels>
inline int32_t startOf(const RepackedQ4_0Act& s) {
  return kLevels ? s.start * 16 : s.start;
}

// Four registers of four rows each (register q, 128-bit lane j: row 4q + j) into the block.
template <bool kLevels = false>
inline void transposeRows(__m512i r0, __m512i r1, __m512i r2, __m512i r3, __m256i halfScales,
                          RepackedBlock& w) {
  const __m512i t0 = _mm512_unpacklo_epi32(r0, r1);
  const __m512i t1 = _mm512_unpackhi_epi32(r0, r1);
  const __m512i t2 = _mm512_unpacklo_epi32(r2, r3);
  const __m512i t3 = _mm512_unpackhi_epi32(r2, r3);
  const __m512i c[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                        _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (int k = 0; k < 4; ++k) {
    w.lo[k] = codesOf<kLevels>(_mm512_and_si512(c[k], nibble));
    w.hi[k] = codesOf<kLevels>(_mm512_and_si512(_mm512_srli_epi16(c[k], 4), nibble));
  }
  w.d = _mm512_permutexvar_ps(repackedLaneRows(), _mm512_cvtph_ps(halfScales));
}

inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Two groups of eight rows (the second may be the first again).
struct GroupPairSource {
  const BlockQ4_0x8* a;
  const BlockQ4_0x8* b;
  template <bool kLevels = false>
  void load(int64_t blk, RepackedBlock& w) const {
    const BlockQ4_0x8& x = a[blk];
    const BlockQ4_0x8& y = b[blk];
    const __m256i d =
        _mm256_inserti128_si256(_mm256_castsi128_si256(load128(x.d)), load128(y.d), 1);
    transposeRows<kLevels>(_mm512_loadu_si512(x.qs[0]), _mm512_loadu_si512(x.qs[4]),
                           _mm512_loadu_si512(y.qs[0]), _mm512_loadu_si512(y.qs[4]), d, w);
  }
};

// Block blk of four rows in file layout, one row per 128-bit lane.
inline __m512i fourFileRows(const BlockQ4_0* const* row, int64_t blk) {
  const __m512i r = _mm512_castsi128_si512(load128(row[0][blk].qs));
  const __m512i r1 = _mm512_inserti32x4(r, load128(row[1][blk].qs), 1);
  const __m512i r2 = _mm512_inserti32x4(r1, load128(row[2][blk].qs), 2);
  return _mm512_inserti32x4(r2, load128(row[3][blk].qs), 3);
}

// Sixteen rows in file layout.
struct FileRowsSource {
  const BlockQ4_0* row[kRepackedRows];
  __m512i four(int64_t blk, int q) const { return fourFileRows(row + 4 * q, blk); }
  template <bool kLevels = false>
  void load(int64_t blk, RepackedBlock& w) const {
    alignas(32) uint16_t d[kRepackedRows];
    for (int i = 0; i < kRepackedRows; ++i) d[i] = row[i][blk].d;
    transposeRows<kLevels>(four(blk, 0), four(blk, 1), four(blk, 2), four(blk, 3),
                           _mm256_load_si256(reinterpret_cast<const __m256i*>(d)), w);
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
template <int T, bool kLevels, class Src>
void repackedPass(const GemmArgs& g, const RepackedQ4_0Act* acts, int64_t actsStride,
                  const Src& src, int64_t t0, int64_t r0, int valid,
                  const BlockQ4_0x8* const* prefetch) {
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
        for (size_t o = 0; o < sizeof(BlockQ4_0x8); o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
      }
    }
    RepackedBlock w;
    src.template load<kLevels>(b, w);
    for (int t = 0; t < T; ++t) {
      const int8_t* q = a[t][b].qs;
      __m512i x = _mm512_set1_epi32(startOf<kLevels>(s[t][b]));
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
template <int T, bool kLevels, class Src>
void repackedPassOf(int64_t n, const GemmArgs& g, const RepackedQ4_0Act* acts, int64_t actsStride,
                    const Src& src, int64_t t0, int64_t r0, int valid,
                    const BlockQ4_0x8* const* prefetch) {
  if constexpr (T > 1) {
    if (n < T) {
      repackedPassOf<T - 1, kLevels>(n, g, acts, actsStride, src, t0, r0, valid, prefetch);
      return;
    }
  }
  repackedPass<T, kLevels>(g, acts, actsStride, src, t0, r0, valid, prefetch);
}

// Every token of the job against 16 rows of `src`, kRepackedTokens per pass.
template <bool kLevels = false, class Src>
void repackedRows(const GemmArgs& g, const RepackedQ4_0Act* acts, int64_t actsStride,
                  const Src& src, int64_t r0, int valid, const BlockQ4_0x8* const* prefetch) {
  for (int64_t t0 = 0; t0 < g.tokens; t0 += kRepackedTokens) {
    const int64_t n = g.tokens - t0 < kRepackedTokens ? g.tokens - t0 : kRepackedTokens;
    const BlockQ4_0x8* const* pf = g.tokens > 1 && t0 + n == g.tokens ? prefetch : nullptr;
    repackedPassOf<kRepackedTokens, kLevels>(n, g, acts, actsStride, src, t0, r0, valid, pf);
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
struct OneGroupSource {
  const BlockQ4_0x8* x;
  __m512i four(int64_t b, int q) const { return _mm512_loadu_si512(x[b].qs[4 * q]); }
  __m128i halfScales(int64_t b) const { return load128(x[b].d); }
  void prefetch(int64_t) const {}  // one stream: the hardware prefetchers follow it
};
// Eight rows side by side are eight short streams, which the hardware prefetchers follow at
// about half the rate of one: as the file layout's decode tile (avx512_quant_gemm.cpp), the next
// eight rows, one run of memory, are prefetched front to back at the pace these are read
// (from DRAM on one core: 8 against 15 GB/s without).
struct EightFileRowsSource {
  const BlockQ4_0* row[kGroupRows];
  const char* next;  // the byte after the eighth row
  void prefetch(int64_t b) const {
    const char* p = next + static_cast<size_t>(b) * kGroupRows * sizeof(BlockQ4_0);
    for (size_t o = 0; o < kGroupRows * sizeof(BlockQ4_0); o += 64)
      _mm_prefetch(p + o, _MM_HINT_T2);
  }
  __m512i four(int64_t b, int q) const { return fourFileRows(row + 4 * q, b); }
  __m128i halfScales(int64_t b) const {
    alignas(16) uint16_t d[kGroupRows];
    for (int i = 0; i < kGroupRows; ++i) d[i] = row[i][b].d;
    return _mm_load_si128(reinterpret_cast<const __m128i*>(d));
  }
};

template <bool kLevels = false, class Src>
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
    __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                     codesOf<kLevels>(_mm512_and_si512(r0, nibble)), lo);
    s0 = _mm512_dpbusd_epi32(
        s0, codesOf<kLevels>(_mm512_and_si512(_mm512_srli_epi16(r0, 4), nibble)), hi);
    __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                     codesOf<kLevels>(_mm512_and_si512(r1, nibble)), lo);
    s1 = _mm512_dpbusd_epi32(
        s1, codesOf<kLevels>(_mm512_and_si512(_mm512_srli_epi16(r1, 4), nibble)), hi);
    // Per 128-bit lane j: [s0 k0 + k2, s1 k0 + k2, s0 k1 + k3, s1 k1 + k3], then the halves.
    const __m512i t =
        _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
    const __m512i u = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
    const __m512i total = _mm512_add_epi32(u, _mm512_set1_epi32(startOf<kLevels>(s[b])));
    const __m512 d =
        _mm512_permutexvar_ps(scaleLanes, _mm512_castps256_ps512(_mm256_cvtph_ps(x.halfScales(b))));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(d, _mm512_set1_ps(s[b].d)), acc);
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << valid) - 1u);
  _mm512_mask_storeu_ps(y, keep, _mm512_permutexvar_ps(rowLanes, acc));
}

// Rows [rowBegin, rowEnd) in file layout (kLevels: IQ4_NL's rows, whose blocks have Q4_0's
// shape: a half scale, then 16 bytes of nibbles in the same order).
template <bool kLevels = false>
void gemmQ4_0RepackedFile(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  int64_t stride;
  RepackedQ4_0Act* owned;
  const RepackedQ4_0Act* acts = repackedActs(g, stride, owned);
  auto rowPtr = [&](int64_t r) {
    return reinterpret_cast<const BlockQ4_0*>(g.weights + static_cast<size_t>(r) * g.weightStride);
  };
  if (g.tokens == 1) {
    const auto* a = reinterpret_cast<const BlockQ8_0*>(g.act);
    for (int64_t r = rowBegin; r < rowEnd; r += kGroupRows) {
      const int valid = static_cast<int>(rowEnd - r < kGroupRows ? rowEnd - r : kGroupRows);
      EightFileRowsSource src;
      for (int i = 0; i < kGroupRows; ++i) src.row[i] = rowPtr(r + (i < valid ? i : valid - 1));
      src.next = reinterpret_cast<const char*>(rowPtr(r + kGroupRows));
      repackedOneToken<kLevels>(src, a, acts, g.cols / kQK, g.y + r, valid);
    }
    std::free(owned);
    return;
  }
  for (int64_t r = rowBegin; r < rowEnd; r += kRepackedRows) {
    const int valid = static_cast<int>(rowEnd - r < kRepackedRows ? rowEnd - r : kRepackedRows);
    FileRowsSource src;
    for (int i = 0; i < kRepackedRows; ++i) src.row[i] = rowPtr(r + (i < valid ? i : valid - 1));
    repackedRows<kLevels>(g, acts, stride, src, r, valid, nullptr);
  }
  std::free(owned);
}

// Rows [rowBegin, rowEnd), in row groups or file layout (g.rowGroups); kLevels: IQ4_NL's.
template <bool kLevels = false>
void gemmQ4_0Repacked(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  if (!g.rowGroups) {
    gemmQ4_0RepackedFile<kLevels>(g, rowBegin, rowEnd);
    return;
  }
  constexpr WeightKind kKind = kLevels ? WeightKind::IQ4_NL : WeightKind::Q4_0;
  int64_t first, last;
  if (!ungroupedEdges<kKind, gemmQ4_0RepackedFile<kLevels>>(g, rowBegin, rowEnd, first, last)) {
    return;
  }
  int64_t stride;
  RepackedQ4_0Act* owned;
  const RepackedQ4_0Act* acts = repackedActs(g, stride, owned);
  const size_t groupBytes = g.weightStride * kGroupRows;
  auto group = [&](int64_t r) {
    return reinterpret_cast<const BlockQ4_0x8*>(g.weights +
                                                static_cast<size_t>(r / kGroupRows) * groupBytes);
  };
  if (g.tokens == 1) {
    const auto* a = reinterpret_cast<const BlockQ8_0*>(g.act);
    for (int64_t r = first; r < last; r += kGroupRows) {
      repackedOneToken<kLevels>(OneGroupSource{group(r)}, a, acts, g.cols / kQK, g.y + r,
                                kGroupRows);
    }
    std::free(owned);
    return;
  }
  for (int64_t r = first; r < last; r += kRepackedRows) {
    const bool pair = r + kRepackedRows <= last;
    const GroupPairSource src{group(r), pair ? group(r + kGroupRows) : group(r)};
    const BlockQ4_0x8* next[2] = {group(r + kRepackedRows), group(r + kRepackedRows + kGroupRows)};
    const bool nextPair = r + 2 * kRepackedRows <= last;
    repackedRows<kLevels>(g, acts, stride, src, r, pair ? kRepackedRows : kGroupRows,
                          nextPair ? next : nullptr);
  }
  std::free(owned);
}

}  // namespace
}  // namespace shoal::cpu
