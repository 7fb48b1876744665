#pragma once
// The AVX2 Q4_0 kernel of DotOrder::Repacked (kernel_table.h), bit-identical to the scalar
// reference: per row and block the exact integer total of the 32 products, then
// acc = fma(total, d_w * d_a, acc). The AVX-512 kernel's plan (avx512_q4_0_repacked.h) with eight
// rows per ymm: per block the rows' quants are transposed once for the pass's tokens (register
// k: bytes 4k..4k+3 of every row; lane p holds row 2 * (p % 4) + p / 4), and per token eight
// vpmaddubsw against broadcast activation words are added as 16-bit sums (at most
// 8 x 2 x 15 x 127 = 30480, so exact), then one vpmaddwd makes each row's 32-bit total.
//
// MXFP4's repacked order is the same arithmetic in llama.cpp (block_mxfp4x8 shares the template
// of block_q4_0x8): its nibbles index the doubled E2M1 levels, -12..12, whose codes level + 12
// (0..24) stay unsigned with a start of -12 x the activations' sum; 16-bit sums of four
// vpmaddubsw (at most 4 x 2 x 24 x 127 = 24384) are widened twice per token and block.
// IQ4_NL's (same template again) has levels -127..113, whose codes level + 128 (1..241) would
// overflow vpmaddubsw's 16-bit pairs; each code is split into its two nibbles instead,
// code = 16 c1 + c0, so a block is two Q4_0-sized dots, 16 dot(c1, a) + dot(c0, a), and a start
// of -128 x the activations' sum.
//
// Included by avx2_quant_gemm.cpp only (anonymous namespace, AVX2 flags).

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

constexpr int kRepackedTokensAvx2 = 4;  // tokens per pass: 16 ymm registers

// Lane p holds row 2 * (p % 4) + p / 4; rowsToLanes gathers rows into lanes, lanesToRows back.
inline __m256i rowsToLanes() { return _mm256_set_epi32(7, 5, 3, 1, 6, 4, 2, 0); }
inline __m256i lanesToRows() { return _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0); }

inline __m128i loadRow128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// The weight types of one block shape (32 nibbles and a scale) that share this kernel:
//  * Block, Group: the file layout's block and the row groups' (row_groups.h);
//  * codes(nibbles): the unsigned code each nibble multiplies (kSplit: its low nibble c0);
//  * kSplit, codesHigh(nibbles): codes of 8 bits, whose high nibbles c1 are a second dot;
//  * kHalves: whether the 16-bit sums are widened after four vpmaddubsw instead of eight;
//  * start(s): where a block's dot starts, minus the codes' offset times the activations' sum;
//  * Raw, raw(block), raws(group): the scale field; scales8(raw): eight of them as floats.
struct Q4_0Weights8 {
  using Block = BlockQ4_0;
  using Group = BlockQ4_0x8;
  using Raw = uint16_t;
  static constexpr WeightKind kKind = WeightKind::Q4_0;
  static constexpr bool kHalves = false, kSplit = false;
  static __m256i codes(__m256i nibbles) { return nibbles; }
  static __m256i codesHigh(__m256i) { return _mm256_setzero_si256(); }
  static int32_t start(const RepackedQ4_0Act& s) { return s.start; }
  static Raw raw(const Block& b) { return b.d; }
  static const Raw* raws(const Group& x) { return x.d; }
  static __m256 scales8(const Raw* p) { return _mm256_cvtph_ps(loadRow128(p)); }
};
struct MXFP4Weights8 {
  using Block = BlockMXFP4;
  using Group = BlockMXFP4x8;
  using Raw = uint8_t;
  static constexpr WeightKind kKind = WeightKind::MXFP4;
  static constexpr bool kHalves = true, kSplit = false;
  static __m256i codes(__m256i nibbles) {
    const __m128i levels = loadRow128(gguf::kMxfp4Values);
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_add_epi8(levels, _mm_set1_epi8(12))),
                               nibbles);
  }
  static __m256i codesHigh(__m256i) { return _mm256_setzero_si256(); }
  // -12 x the sum: the start's -8 x the sum times 3 / 2 (exact: it is a multiple of 8).
  static int32_t start(const RepackedQ4_0Act& s) { return s.start / 2 * 3; }
  static Raw raw(const Block& b) { return b.e; }
  static const Raw* raws(const Group& x) { return x.e; }
  // gguf::e8m0Half of each: the exponent field e - 1, or the subnormals for e = 0 and 1.
  static __m256 scales8(const Raw* p) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i tiny = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, tiny));
  }
};

// IQ4_NL: Q4_0's blocks; each nibble's code, level + 128, split into its nibbles c0 and c1.
struct IQ4NLWeights8 : Q4_0Weights8 {
  static constexpr WeightKind kKind = WeightKind::IQ4_NL;
  static constexpr bool kHalves = false, kSplit = true;
  static __m128i table() {
    return _mm_xor_si128(loadRow128(gguf::kIq4NlValues), _mm_set1_epi8(-128));  // + 128
  }
  static __m256i codes(__m256i nibbles) {
    const __m128i low = _mm_and_si128(table(), _mm_set1_epi8(0x0F));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(low), nibbles);
  }
  static __m256i codesHigh(__m256i nibbles) {
    const __m128i high = _mm_and_si128(_mm_srli_epi16(table(), 4), _mm_set1_epi8(0x0F));
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(high), nibbles);
  }
  static int32_t start(const RepackedQ4_0Act& s) { return s.start * 16; }  // -128 x the sum
};

struct RepackedBlock8 {
  __m256i lo[4];   // low nibbles' codes, bytes 4k..4k+3 of each row's quants (kSplit: c0)
  __m256i hi[4];   // high nibbles' codes
  __m256i lo1[4];  // kSplit: the codes' high nibbles c1, of the low and the high nibbles
  __m256i hi1[4];
  __m256 d;  // the rows' scales, in lane order
};

// Four registers of two rows each (register q, 128-bit lane j: row 2q + j) into the block;
// scales: the eight rows' scales in row order.
template <class W>
inline void transposeRows8(__m256i r0, __m256i r1, __m256i r2, __m256i r3, __m256 scales,
                           RepackedBlock8& w) {
  const __m256i t0 = _mm256_unpacklo_epi32(r0, r1);
  const __m256i t1 = _mm256_unpackhi_epi32(r0, r1);
  const __m256i t2 = _mm256_unpacklo_epi32(r2, r3);
  const __m256i t3 = _mm256_unpackhi_epi32(r2, r3);
  const __m256i c[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                        _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int k = 0; k < 4; ++k) {
    const __m256i low = _mm256_and_si256(c[k], nibble);
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(c[k], 4), nibble);
    w.lo[k] = W::codes(low);
    w.hi[k] = W::codes(high);
    if constexpr (W::kSplit) {
      w.lo1[k] = W::codesHigh(low);
      w.hi1[k] = W::codesHigh(high);
    }
  }
  w.d = _mm256_permutevar8x32_ps(scales, rowsToLanes());
}

template <class W>
struct GroupSource8 {
  const typename W::Group* x;
  void load(int64_t blk, RepackedBlock8& w) const {
    const typename W::Group& b = x[blk];
    auto two = [&](int r) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs[r])); };
    transposeRows8<W>(two(0), two(2), two(4), two(6), W::scales8(W::raws(b)), w);
  }
  void prefetch(int64_t) const {}  // one stream: the hardware prefetchers follow it
};

// Eight rows side by side are eight short streams, which the hardware prefetchers follow at
// about half the rate of one: the next eight rows, one run of memory, are prefetched front to
// back at the pace these are read (the file layout's tiles in avx2_quant_gemm.cpp do the same;
// from DRAM on one core, one token: 6.7 GB/s without).
template <class W>
struct FileRowsSource8 {
  using Block = typename W::Block;
  const Block* row[kGroupRows];
  const char* next;  // the byte after the eighth row
  void prefetch(int64_t b) const {
    const char* p = next + static_cast<size_t>(b) * kGroupRows * sizeof(Block);
    for (size_t o = 0; o < kGroupRows * sizeof(Block); o += 64) _mm_prefetch(p + o, _MM_HINT_T2);
  }
  __m256i two(int64_t blk, int r) const {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(loadRow128(row[r][blk].qs)),
                                   loadRow128(row[r + 1][blk].qs), 1);
  }
  void load(int64_t blk, RepackedBlock8& w) const {
    typename W::Raw d[kGroupRows];
    for (int i = 0; i < kGroupRows; ++i) d[i] = W::raw(row[i][blk]);
    transposeRows8<W>(two(blk, 0), two(blk, 2), two(blk, 4), two(blk, 6), W::scales8(d), w);
  }
};

inline __m256i broadcastWord8(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// Tokens [t0, t0 + T) against 8 rows of `src`; writes `valid` rows from r0 of each token's y.
template <int T, class W, class Src>
void repackedPass8(const GemmArgs& g, const RepackedQ4_0Act* acts, int64_t actsStride,
                   const Src& src, int64_t t0, int64_t r0, int valid) {
  const int64_t blocks = g.cols / kQK;
  const BlockQ8_0* a[T];
  const RepackedQ4_0Act* s[T];
  __m256 acc[T];
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_0*>(g.act + static_cast<size_t>(t0 + t) * g.actStride);
    s[t] = acts + (t0 + t) * actsStride;
    acc[t] = _mm256_setzero_ps();
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < blocks; ++b) {
    if (t0 == 0) src.prefetch(b);
    RepackedBlock8 w;
    src.load(b, w);
    for (int t = 0; t < T; ++t) {
      const int8_t* q = a[t][b].qs;
      __m256i total = _mm256_set1_epi32(W::start(s[t][b]));
      if constexpr (W::kHalves) {
        __m256i lo16 = _mm256_maddubs_epi16(w.lo[0], broadcastWord8(q));
        __m256i hi16 = _mm256_maddubs_epi16(w.hi[0], broadcastWord8(q + 16));
        for (int k = 1; k < 4; ++k) {
          lo16 = _mm256_add_epi16(lo16, _mm256_maddubs_epi16(w.lo[k], broadcastWord8(q + 4 * k)));
          hi16 =
              _mm256_add_epi16(hi16, _mm256_maddubs_epi16(w.hi[k], broadcastWord8(q + 16 + 4 * k)));
        }
        total = _mm256_add_epi32(total, _mm256_madd_epi16(lo16, ones));
        total = _mm256_add_epi32(total, _mm256_madd_epi16(hi16, ones));
      } else {
        __m256i sum16 = _mm256_maddubs_epi16(w.lo[0], broadcastWord8(q));
        sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(w.hi[0], broadcastWord8(q + 16)));
        for (int k = 1; k < 4; ++k) {
          sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(w.lo[k], broadcastWord8(q + 4 * k)));
          sum16 = _mm256_add_epi16(sum16,
                                   _mm256_maddubs_epi16(w.hi[k], broadcastWord8(q + 16 + 4 * k)));
        }
        total = _mm256_add_epi32(total, _mm256_madd_epi16(sum16, ones));
        if constexpr (W::kSplit) {
          __m256i high16 = _mm256_maddubs_epi16(w.lo1[0], broadcastWord8(q));
          high16 = _mm256_add_epi16(high16, _mm256_maddubs_epi16(w.hi1[0], broadcastWord8(q + 16)));
          for (int k = 1; k < 4; ++k) {
            high16 =
                _mm256_add_epi16(high16, _mm256_maddubs_epi16(w.lo1[k], broadcastWord8(q + 4 * k)));
            high16 = _mm256_add_epi16(
                high16, _mm256_maddubs_epi16(w.hi1[k], broadcastWord8(q + 16 + 4 * k)));
          }
          total = _mm256_add_epi32(total, _mm256_slli_epi32(_mm256_madd_epi16(high16, ones), 4));
        }
      }
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total),
                               _mm256_mul_ps(w.d, _mm256_set1_ps(s[t][b].d)), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(32) float out[kGroupRows];
    _mm256_store_ps(out, _mm256_permutevar8x32_ps(acc[t], lanesToRows()));
    float* y = g.y + (t0 + t) * g.ldy + r0;
    for (int i = 0; i < valid; ++i) y[i] = out[i];
  }
}

template <class W, class Src>
void repackedRows8(const GemmArgs& g, const RepackedQ4_0Act* acts, int64_t actsStride,
                   const Src& src, int64_t r0, int valid) {
  int64_t t0 = 0;
  for (; t0 + kRepackedTokensAvx2 <= g.tokens; t0 += kRepackedTokensAvx2) {
    repackedPass8<kRepackedTokensAvx2, W>(g, acts, actsStride, src, t0, r0, valid);
  }
  switch (g.tokens - t0) {
    case 3:
      repackedPass8<3, W>(g, acts, actsStride, src, t0, r0, valid);
      break;
    case 2:
      repackedPass8<2, W>(g, acts, actsStride, src, t0, r0, valid);
      break;
    case 1:
      repackedPass8<1, W>(g, acts, actsStride, src, t0, r0, valid);
      break;
    default:
      break;
  }
}

// Rows [rowBegin, rowEnd) in file layout, of weight type W (Q4_0Weights8, MXFP4Weights8,
// IQ4NLWeights8).
template <class W>
void gemmQ4_0RepackedFile(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  int64_t stride;
  RepackedQ4_0Act* owned;
  const RepackedQ4_0Act* acts = repackedActs(g, stride, owned);
  for (int64_t r = rowBegin; r < rowEnd; r += kGroupRows) {
    const int valid = static_cast<int>(rowEnd - r < kGroupRows ? rowEnd - r : kGroupRows);
    auto rowPtr = [&](int64_t row) {
      return g.weights + static_cast<size_t>(row) * g.weightStride;
    };
    FileRowsSource8<W> src;
    for (int i = 0; i < kGroupRows; ++i) {
      src.row[i] =
          reinterpret_cast<const typename W::Block*>(rowPtr(r + (i < valid ? i : valid - 1)));
    }
    src.next = reinterpret_cast<const char*>(rowPtr(r + kGroupRows));
    repackedRows8<W>(g, acts, stride, src, r, valid);
  }
  std::free(owned);
}

// Rows [rowBegin, rowEnd), in row groups or file layout (g.rowGroups), of weight type W.
template <class W = Q4_0Weights8>
void gemmQ4_0Repacked(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
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
  for (int64_t r = first; r < last; r += kGroupRows) {
    const GroupSource8<W> src{reinterpret_cast<const typename W::Group*>(
        g.weights + static_cast<size_t>(r) * g.weightStride)};
    repackedRows8<W>(g, acts, stride, src, r, kGroupRows);
  }
  std::free(owned);
}

}  // namespace
}  // namespace shoal::cpu
