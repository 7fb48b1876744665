#pragma once
// The AVX2 Q4_0 kernel of DotOrder::Repacked (kernel_table.h), bit-identical to the scalar
// reference: per row and block the exact integer total of the 32 products, then
// acc = fma(total, d_w * d_a, acc). The AVX-512 kernel's plan (avx512_q4_0_repacked.h) with eight
// rows per ymm: per block the rows' quants are transposed once for the pass's tokens (register
// k: bytes 4k..4k+3 of every row; lane p holds row 2 * (p % 4) + p / 4), and per token eight
// vpmaddubsw against broadcast activation words are added as 16-bit sums (at most
// 8 x 2 x 15 x 127 = 30480, so exact), then one vpmaddwd makes each row's 32-bit total.
//
// Included by avx2_quant_gemm.cpp only (anonymous namespace, AVX2 flags).

#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

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

struct RepackedBlock8 {
  __m256i lo[4];  // low nibbles, bytes 4k..4k+3 of each row's quants
  __m256i hi[4];  // high nibbles
  __m256 d;       // the rows' scales, in lane order
};

// Four registers of two rows each (register q, 128-bit lane j: row 2q + j) into the block.
inline void transposeRows8(__m256i r0, __m256i r1, __m256i r2, __m256i r3, __m128i halfScales,
                           RepackedBlock8& w) {
  const __m256i t0 = _mm256_unpacklo_epi32(r0, r1);
  const __m256i t1 = _mm256_unpackhi_epi32(r0, r1);
  const __m256i t2 = _mm256_unpacklo_epi32(r2, r3);
  const __m256i t3 = _mm256_unpackhi_epi32(r2, r3);
  const __m256i c[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                        _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int k = 0; k < 4; ++k) {
    w.lo[k] = _mm256_and_si256(c[k], nibble);
    w.hi[k] = _mm256_and_si256(_mm256_srli_epi16(c[k], 4), nibble);
  }
  w.d = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(halfScales), rowsToLanes());
}

inline __m128i loadRow128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

struct GroupSource8 {
  const BlockQ4_0x8* x;
  void load(int64_t blk, RepackedBlock8& w) const {
    const BlockQ4_0x8& b = x[blk];
    auto two = [&](int r) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs[r])); };
    transposeRows8(two(0), two(2), two(4), two(6), loadRow128(b.d), w);
  }
  void prefetch(int64_t) const {}  // one stream: the hardware prefetchers follow it
};

// Eight rows side by side are eight short streams, which the hardware prefetchers follow at
// about half the rate of one: the next eight rows, one run of memory, are prefetched front to
// back at the pace these are read (the file layout's tiles in avx2_quant_gemm.cpp do the same;
// from DRAM on one core, one token: 6.7 GB/s without).
struct FileRowsSource8 {
  const BlockQ4_0* row[kGroupRows];
  const char* next;  // the byte after the eighth row
  void prefetch(int64_t b) const {
    const char* p = next + static_cast<size_t>(b) * kGroupRows * sizeof(BlockQ4_0);
    for (size_t o = 0; o < kGroupRows * sizeof(BlockQ4_0); o += 64)
      _mm_prefetch(p + o, _MM_HINT_T2);
  }
  __m256i two(int64_t blk, int r) const {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(loadRow128(row[r][blk].qs)),
                                   loadRow128(row[r + 1][blk].qs), 1);
  }
  void load(int64_t blk, RepackedBlock8& w) const {
    alignas(16) uint16_t d[kGroupRows];
    for (int i = 0; i < kGroupRows; ++i) d[i] = row[i][blk].d;
    transposeRows8(two(blk, 0), two(blk, 2), two(blk, 4), two(blk, 6),
                   _mm_load_si128(reinterpret_cast<const __m128i*>(d)), w);
  }
};

inline __m256i broadcastWord8(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// Tokens [t0, t0 + T) against 8 rows of `src`; writes `valid` rows from r0 of each token's y.
template <int T, class Src>
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
      __m256i sum16 = _mm256_maddubs_epi16(w.lo[0], broadcastWord8(q));
      sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(w.hi[0], broadcastWord8(q + 16)));
      for (int k = 1; k < 4; ++k) {
        sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(w.lo[k], broadcastWord8(q + 4 * k)));
        sum16 =
            _mm256_add_epi16(sum16, _mm256_maddubs_epi16(w.hi[k], broadcastWord8(q + 16 + 4 * k)));
      }
      const __m256i total =
          _mm256_add_epi32(_mm256_madd_epi16(sum16, ones), _mm256_set1_epi32(s[t][b].start));
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

template <class Src>
void repackedRows8(const GemmArgs& g, const RepackedQ4_0Act* acts, int64_t actsStride,
                   const Src& src, int64_t r0, int valid) {
  int64_t t0 = 0;
  for (; t0 + kRepackedTokensAvx2 <= g.tokens; t0 += kRepackedTokensAvx2) {
    repackedPass8<kRepackedTokensAvx2>(g, acts, actsStride, src, t0, r0, valid);
  }
  switch (g.tokens - t0) {
    case 3:
      repackedPass8<3>(g, acts, actsStride, src, t0, r0, valid);
      break;
    case 2:
      repackedPass8<2>(g, acts, actsStride, src, t0, r0, valid);
      break;
    case 1:
      repackedPass8<1>(g, acts, actsStride, src, t0, r0, valid);
      break;
    default:
      break;
  }
}

// Rows [rowBegin, rowEnd) in file layout.
void gemmQ4_0RepackedFile(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  int64_t stride;
  RepackedQ4_0Act* owned;
  const RepackedQ4_0Act* acts = repackedActs(g, stride, owned);
  for (int64_t r = rowBegin; r < rowEnd; r += kGroupRows) {
    const int valid = static_cast<int>(rowEnd - r < kGroupRows ? rowEnd - r : kGroupRows);
    auto rowPtr = [&](int64_t row) {
      return g.weights + static_cast<size_t>(row) * g.weightStride;
    };
    FileRowsSource8 src;
    for (int i = 0; i < kGroupRows; ++i) {
      src.row[i] = reinterpret_cast<const BlockQ4_0*>(rowPtr(r + (i < valid ? i : valid - 1)));
    }
    src.next = reinterpret_cast<const char*>(rowPtr(r + kGroupRows));
    repackedRows8(g, acts, stride, src, r, valid);
  }
  std::free(owned);
}

// Rows [rowBegin, rowEnd), in row groups or file layout (g.rowGroups).
void gemmQ4_0Repacked(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  if (!g.rowGroups) {
    gemmQ4_0RepackedFile(g, rowBegin, rowEnd);
    return;
  }
  int64_t first, last;
  if (!ungroupedEdges<WeightKind::Q4_0, gemmQ4_0RepackedFile>(g, rowBegin, rowEnd, first, last)) {
    return;
  }
  int64_t stride;
  RepackedQ4_0Act* owned;
  const RepackedQ4_0Act* acts = repackedActs(g, stride, owned);
  for (int64_t r = first; r < last; r += kGroupRows) {
    const GroupSource8 src{
        reinterpret_cast<const BlockQ4_0x8*>(g.weights + static_cast<size_t>(r) * g.weightStride)};
    repackedRows8(g, acts, stride, src, r, kGroupRows);
  }
  std::free(owned);
}

}  // namespace
}  // namespace shoal::cpu
