#pragma once
// The AVX-512 Q4_1 and Q8_0 kernels for weights in row groups (row_groups.h), bit-identical to
// the file layout's kernels (avx512_quant_gemm.cpp) and so to the scalar reference. (A grouped
// Q4_0 matrix has 8k rows, so it takes llama.cpp's repacked order: avx512_q4_0_repacked.h.)
//
// ggml's vec order keeps, per row and token, eight float lanes: lane k gets fma(d_w * d_a, exact
// dot of elements 4k..4k+3 of the block, lane), block by block, and the eight are summed as
// hsum_float_8 at the end. The file layout's kernel holds two rows' lanes per zmm, and per pair
// of rows and block pays two 16-byte loads and a masked broadcast to interleave them, the
// nibble split, and a conversion and spread of the two scales. In a group, one 64-byte load is
// four rows' Q4_1 quants (or two rows' Q8_0): the low nibbles are elements 0-15 of four rows,
// one per 128-bit lane, against the token's elements 0-15 broadcast to the four lanes (one
// vpdpbusd gives ggml lanes 0-3 of four rows), the high nibbles lanes 4-7; Q8_0's two rows sit in
// the two halves against the token's 32 activations in both. The eight rows' scales are one
// vcvtph2ps per block, spread to their lanes by one vpermps per load. Each lane's sequence of
// fmas is ggml's, and the eight lanes of a row are added in hsum_float_8's order: the same bits.
// Q4_1's codes are unsigned (no bias); its minimum term m_w * s_a, eight rows in one vfmadd per
// block and token, is fused-accumulated as the file layout's summs.
//
// Decode and small batches run here, up to four tokens per pass over a group (more would spill
// the accumulators): a batch of several sequences' decode rows must keep each token's vec order
// (batch invariance), so this kernel is what such a step costs. Per block and pass the weights
// are split into nibbles and their scales spread once for all its tokens; per token what does
// not depend on the rows (Q8_0's starting sums that take the codes' bias off, the scale spread
// to a register, the activations spread for vpdpbusd: a plain load instead of a broadcast) comes
// from side rows (actSide below) that matmul() builds once per call. Computed per group and
// token instead, they took 6 of a pass's ~15 instructions per token and four rows, and a
// broadcast load costs an ALU slot on Zen 4 where a plain load does not (one core, 8192 x 2048
// from L3, ns per row, block and token, when Q4_0 ran here in the vec order: 4 tokens 0.555 ->
// 0.38-0.40; Q4_1 0.48 -> 0.39, with its activations from the side rows too 0.355 at 8 tokens;
// Q8_0 0.40 -> 0.367). A pass of one token (decode) is memory-bound and computes these itself:
// reading side rows there cost more than it saved (the 1B Q4_0 model's decode, two threads:
// 50-55 -> 37-40 tok/s).
//
// Prefetching: a single pass (decode) runs without software prefetch: a thread's groups are one
// front-to-back stream, which the hardware prefetchers follow, and prefetching ahead into L2 was
// slower (one core, 65536 x 2048 from DRAM, Q4_0 in the vec order: 24.6-26.0 GB/s without,
// 14.3-25.1 with; two threads decoding the 1B Q4_0 model: 55 tok/s without, 50 with). With two
// or more tokens the pass is compute-bound and the prefetchers fall behind it; there, the last
// pass over a group prefetches the next group into L2 block by block (Q4_0 from DRAM at 8
// tokens: 0.56 -> 0.41 ns, at 2 tokens 1.14 -> 0.47).
//
// Batches that the file layout runs in bands (Q8_0 from kQ0GroupBandTokens,
// avx512_quant_bands.h) take 32 rows at a time out of their groups into a buffer
// (row_group_fallback.h), as do rows not in whole groups. Q4_1 has no bands: all its batches run
// here, faster than the file layout's tiles.
//
// Included by avx512_quant_gemm.cpp only (anonymous namespace, AVX-512 flags).

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_group_fallback.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu {
namespace {

constexpr int kQ0GroupTokens = 4;  // tokens per pass over a group

// A zmm's worth of lanes in memory: a plain load, where a broadcast load would take an ALU slot.
struct alignas(64) Zmm {
  int32_t lanes[16];
};

// The side row of a Q8_0 activation row (Q8_0 weights), per block. The starting sums are
// -bias x the sum of each ggml lane's four activations, where a dot product's vpdpbusd starts,
// which takes the stored codes' bias off exactly.
struct Q8_0Side {
  Zmm start;  // codes q + 128: lanes 0-7, in both halves
  Zmm d;      // the block's scale as a float, 16 times
  Zmm y;      // the 32 activations in both halves
};

// The side row of a Q8_1 activation row (Q4_1 weights), per block.
struct Q8_1Side {
  Zmm d;      // the block's scale, 16 times
  Zmm s;      // its d x sum(qs) as a float, 16 times
  Zmm y4[2];  // the activations 0-15 and 16-31, each in the four 128-bit lanes
};

inline __m512i broadcast128(const void* p) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}

inline void sideRow(const BlockQ8_0* y, int64_t blocks, Q8_0Side* out) {
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < blocks; ++b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs));
    const __m256i sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, q);
    const __m256i start = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums, 7));
    _mm512_store_si512(out[b].start.lanes, _mm512_broadcast_i64x4(start));
    _mm512_store_ps(out[b].d.lanes, _mm512_set1_ps(_cvtsh_ss(y[b].d)));
    _mm512_store_si512(out[b].y.lanes, _mm512_broadcast_i64x4(q));
  }
}

inline void sideRow(const BlockQ8_1* y, int64_t blocks, Q8_1Side* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    _mm512_store_ps(out[b].d.lanes, _mm512_set1_ps(_cvtsh_ss(y[b].d)));
    _mm512_store_ps(out[b].s.lanes, _mm512_set1_ps(_cvtsh_ss(y[b].s)));
    _mm512_store_si512(out[b].y4[0].lanes, broadcast128(y[b].qs));
    _mm512_store_si512(out[b].y4[1].lanes, broadcast128(y[b].qs + 16));
  }
}

// -bias * (sum of each int32 lane's four activations), from the activations themselves: the
// side rows' starting sums (kShift 7: Q8_0) for a pass of one token.
template <int kShift>
inline __m512i biasStart(__m512i y) {
  const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), y);
  return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, kShift));
}

// One token of a pass: its activation blocks and side row (unused by one-token passes).
template <class Act, class Side>
struct Q0Token {
  const Act* y = nullptr;
  const Side* side = nullptr;
};

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

// Block b of the next group, to L2, while this group is read from cache (see the top).
template <class Group>
inline void prefetchBlock(const Group* block) {
  const char* p = reinterpret_cast<const char*>(block);
  for (size_t o = 0; o < sizeof(Group); o += 64) _mm_prefetch(p + o, _MM_HINT_T1);
  _mm_prefetch(p + sizeof(Group) - 1, _MM_HINT_T1);
}

// The eight rows of one Q4_1 group (BlockQ4_1x8, Q8_1 activations) against T tokens: out[t][r].
// Its codes are unsigned (no bias), and its minimum term m_w * s_a is fused-accumulated per block
// and row as the file layout's summs. next: the group to prefetch, or nullptr.
template <int T>
void groupTileQ4_1(const BlockQ4_1x8* x, const Q0Token<BlockQ8_1, Q8_1Side>* tok, int64_t blocks,
                   float (*out)[kGroupRows], const BlockQ4_1x8* next) {
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  // Row 4h + k's scale to 128-bit lane k.
  const __m512i rowsOf[2] = {_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                             _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4)};
  __m512 acc[T][2][2];  // [token][rows 4h..4h+3][ggml lanes 0-3, 4-7]
  __m256 summs[T];      // row r's minimum term in lane r
  for (auto& t : acc) {
    for (auto& h : t) {
      for (__m512& v : h) v = _mm512_setzero_ps();
    }
  }
  for (__m256& v : summs) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    if (next != nullptr) prefetchBlock(next + b);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].d)));
    const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].m)));
    for (int t = 0; t < T; ++t) {
      const __m256 sy =
          T == 1 ? _mm256_set1_ps(_cvtsh_ss(tok[t].y[b].s))
                 : _mm256_load_ps(reinterpret_cast<const float*>(tok[t].side[b].s.lanes));
      summs[t] = _mm256_fmadd_ps(mw, sy, summs[t]);
    }
    __m512i lo[2], hi[2];
    for (int h = 0; h < 2; ++h) {
      const __m512i w = _mm512_loadu_si512(x[b].qs[4 * h]);
      lo[h] = _mm512_and_si512(w, nibble);
      hi[h] = _mm512_and_si512(_mm512_srli_epi16(w, 4), nibble);
    }
    for (int t = 0; t < T; ++t) {
      __m512i yLo, yHi;
      __m256 dy;
      if constexpr (T > 1) {  // from side rows (see the top)
        yLo = _mm512_load_si512(tok[t].side[b].y4[0].lanes);
        yHi = _mm512_load_si512(tok[t].side[b].y4[1].lanes);
        dy = _mm256_load_ps(reinterpret_cast<const float*>(tok[t].side[b].d.lanes));
      } else {  // memory-bound: computed here rather than read (see the top)
        yLo = broadcast128(tok[t].y[b].qs);
        yHi = broadcast128(tok[t].y[b].qs + 16);
        dy = _mm256_set1_ps(_cvtsh_ss(tok[t].y[b].d));
      }
      const __m512i zero = _mm512_setzero_si512();
      // d_w * d_a of the eight rows, as ggml rounds it, in one 256-bit multiply; spread to the
      // rows' lanes by permutes, which run beside the multiplies and fmas on Zen 4 where a
      // second multiply would take their slot.
      const __m512 d8 = _mm512_castps256_ps512(_mm256_mul_ps(dw, dy));
      for (int h = 0; h < 2; ++h) {
        const __m512 d = _mm512_permutexvar_ps(rowsOf[h], d8);
        acc[t][h][0] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, lo[h], yLo)),
                                       acc[t][h][0]);
        acc[t][h][1] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, hi[h], yHi)),
                                       acc[t][h][1]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(32) float m[kGroupRows];
    _mm256_store_ps(m, summs[t]);
    for (int r = 0; r < kGroupRows; ++r) {
      const float dot = hsumLanes(laneOf(acc[t][r / 4][0], r % 4), laneOf(acc[t][r / 4][1], r % 4));
      out[t][r] = dot + m[r];
    }
  }
}

// The eight rows of one Q8_0 group against T tokens: out[t][r]. next: as above.
template <int T>
void groupTileQ8_0(const BlockQ8_0x8* x, const Q0Token<BlockQ8_0, Q8_0Side>* tok, int64_t blocks,
                   float (*out)[kGroupRows], const BlockQ8_0x8* next) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));  // q -> q + 128, unsigned
  // Rows 2p and 2p+1's scales to the low and high halves.
  __m512i pairOf[4];
  for (int p = 0; p < 4; ++p) {
    pairOf[p] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(2 * p)),
                                   _mm256_set1_epi32(2 * p + 1), 1);
  }
  __m512 acc[T][4];  // [token][rows 2p, 2p+1]
  for (auto& t : acc) {
    for (__m512& v : t) v = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    if (next != nullptr) prefetchBlock(next + b);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].d)));
    __m512i q[4];
    for (int p = 0; p < 4; ++p) q[p] = _mm512_xor_si512(_mm512_loadu_si512(x[b].qs[2 * p]), flip);
    for (int t = 0; t < T; ++t) {
      const __m512i y = T == 1 ? _mm512_broadcast_i64x4(_mm256_loadu_si256(
                                     reinterpret_cast<const __m256i*>(tok[t].y[b].qs)))
                               : _mm512_load_si512(tok[t].side[b].y.lanes);
      __m512i start;
      __m256 dy;
      if constexpr (T == 1) {  // memory-bound: computed here rather than read (see the top)
        start = biasStart<7>(y);
        dy = _mm256_set1_ps(_cvtsh_ss(tok[t].y[b].d));
      } else {
        start = _mm512_load_si512(tok[t].side[b].start.lanes);
        dy = _mm256_load_ps(reinterpret_cast<const float*>(tok[t].side[b].d.lanes));
      }
      const __m512 d8 = _mm512_castps256_ps512(_mm256_mul_ps(dw, dy));  // as in the Q4_1 kernel
      for (int p = 0; p < 4; ++p) {
        acc[t][p] =
            _mm512_fmadd_ps(_mm512_permutexvar_ps(pairOf[p], d8),
                            _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, q[p], y)), acc[t][p]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int p = 0; p < 4; ++p) {
      const __m256 rowA = _mm512_castps512_ps256(acc[t][p]);
      const __m256 rowB = _mm512_extractf32x8_ps(acc[t][p], 1);
      out[t][2 * p] = hsumLanes(_mm256_castps256_ps128(rowA), _mm256_extractf128_ps(rowA, 1));
      out[t][2 * p + 1] = hsumLanes(_mm256_castps256_ps128(rowB), _mm256_extractf128_ps(rowB, 1));
    }
  }
}

template <class Group>
struct Q0GroupOf;
template <>
struct Q0GroupOf<BlockQ4_1x8> {
  static constexpr WeightKind kKind = WeightKind::Q4_1;
  using Act = BlockQ8_1;
  using Side = Q8_1Side;
  template <int T>
  static void tile(const BlockQ4_1x8* x, const Q0Token<Act, Side>* tok, int64_t blocks,
                   float (*out)[kGroupRows], const BlockQ4_1x8* next) {
    groupTileQ4_1<T>(x, tok, blocks, out, next);
  }
};
template <>
struct Q0GroupOf<BlockQ8_0x8> {
  static constexpr WeightKind kKind = WeightKind::Q8_0;
  using Act = BlockQ8_0;
  using Side = Q8_0Side;
  template <int T>
  static void tile(const BlockQ8_0x8* x, const Q0Token<Act, Side>* tok, int64_t blocks,
                   float (*out)[kGroupRows], const BlockQ8_0x8* next) {
    groupTileQ8_0<T>(x, tok, blocks, out, next);
  }
};

// The side rows of tokens [t0, t0 + count) of g for the weights of Traits, and their stride in
// Sides: the caller's (GemmArgs::actSide), or built here into a buffer of the calling thread's
// (callers that give none: tests, benches, the mixture-of-experts path, batches above
// kMaxSideTokens).
template <class Traits>
std::pair<const typename Traits::Side*, size_t> sideRows(const GemmArgs& g, int64_t t0,
                                                         int64_t count, int64_t blocks) {
  using Side = typename Traits::Side;
  using Act = typename Traits::Act;
  if (g.actSide != nullptr) {
    return {reinterpret_cast<const Side*>(g.actSide + static_cast<size_t>(t0) * g.actSideStride),
            g.actSideStride / sizeof(Side)};
  }
  thread_local std::vector<Side> own;
  own.resize(static_cast<size_t>(count * blocks));
  for (int64_t i = 0; i < count; ++i) {
    sideRow(reinterpret_cast<const Act*>(g.act + static_cast<size_t>(t0 + i) * g.actStride), blocks,
            own.data() + i * blocks);
  }
  return {own.data(), static_cast<size_t>(blocks)};
}

// Rows [rowBegin, rowEnd) of a grouped Q4_1 or Q8_0 matrix (Group: BlockQ4_1x8, BlockQ8_0x8);
// FileGemm is the level's file-layout kernel, kBandTokens the batch from which it runs bands (0:
// it has none).
template <class Group, void (*FileGemm)(const GemmArgs&, int64_t, int64_t), int kBandTokens>
void gemmQ0Groups(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  using Traits = Q0GroupOf<Group>;
  using Act = typename Traits::Act;
  using Side = typename Traits::Side;
  constexpr WeightKind kKind = Traits::kKind;
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
  // Tokens kMaxSideTokens at a time (one set of side rows), each group in passes of up to
  // kQ0GroupTokens.
  for (int64_t t0 = 0; t0 < g.tokens && r < last; t0 += kMaxSideTokens) {
    const int64_t count = std::min(kMaxSideTokens, g.tokens - t0);
    const auto [sides, sideStride] =
        count > 1 ? sideRows<Traits>(g, t0, count, blocks) : std::pair<const Side*, size_t>{};
    for (int64_t gr = r; gr < last; gr += kGroupRows) {
      const auto* x =
          reinterpret_cast<const Group*>(g.weights + static_cast<size_t>(gr) * g.weightStride);
      for (int64_t t = 0; t < count;) {
        const int n = static_cast<int>(std::min<int64_t>(kQ0GroupTokens, count - t));
        Q0Token<Act, Side> tok[kQ0GroupTokens];
        for (int i = 0; i < n; ++i) {
          tok[i].y =
              reinterpret_cast<const Act*>(g.act + static_cast<size_t>(t0 + t + i) * g.actStride);
          if (sides != nullptr) tok[i].side = sides + static_cast<size_t>(t + i) * sideStride;
        }
        // A group's first pass reads it from memory, the others from cache; with two or more
        // tokens the last pass prefetches the next group (see the top).
        const Group* next =
            count > 1 && t + n == count && gr + kGroupRows < last ? x + blocks : nullptr;
        alignas(32) float out[kQ0GroupTokens][kGroupRows];
        withTokenCount(n, [&](auto pass) {
          Traits::template tile<decltype(pass)::value>(x, tok, blocks, out, next);
        });
        for (int i = 0; i < n; ++i) {
          std::memcpy(g.y + (t0 + t + i) * g.ldy + gr, out[i], sizeof out[i]);
        }
        t += n;
      }
    }
  }
}

// KernelTable::actSideBytes and actSide of the AVX-512 level.
inline size_t q0SideBytes(ActKind kind, int64_t cols) {
  switch (kind) {
    case ActKind::Q8_0:
      return sizeof(Q8_0Side) * static_cast<size_t>(cols / kQK);
    case ActKind::Q8_1:
      return sizeof(Q8_1Side) * static_cast<size_t>(cols / kQK);
    default:
      return 0;
  }
}
inline void q0Side(ActKind kind, const void* actRow, int64_t cols, void* sideRow_) {
  const int64_t blocks = cols / kQK;
  if (kind == ActKind::Q8_0) {
    sideRow(static_cast<const BlockQ8_0*>(actRow), blocks, static_cast<Q8_0Side*>(sideRow_));
  } else if (kind == ActKind::Q8_1) {
    sideRow(static_cast<const BlockQ8_1*>(actRow), blocks, static_cast<Q8_1Side*>(sideRow_));
  }
}

}  // namespace
}  // namespace shoal::cpu
