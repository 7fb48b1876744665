// AVX-512 (VNNI) matrix kernels for Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 weights, bit-identical to
// the scalar reference (reference_dots.cpp).
//
// One zmm holds the eight ggml lanes of two weight rows at once: bytes [row A elements 0..15,
// row B 0..15, A 16..31, B 16..31] against the activation block laid out [0..15, 0..15, 16..31,
// 16..31], so a single vpdpbusd yields both rows' lane sums (A's ggml lanes 0-3 in lanes 0-3
// and 4-7 in lanes 8-11; B's in 4-7 and 12-15). Lane sums are exact integers as in ggml:
// signed weights are stored biased (w + bias, unsigned) and the bias is taken off by starting
// the vpdpbusd accumulation at -bias * (sum of the 4 activations of the lane).
//
// Compiled with AVX-512 F/BW/VL/DQ/VNNI; reached only through the AVX-512 table. No standard
// library templates or std:: math here (see avx2_ops.cpp).

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx512_q4_0_repacked.h"
#include "kernels/cpu/avx512_quant_bands.h"
#include "kernels/cpu/avx512_quant_groups.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/simd_kernels.h"

namespace shoal::cpu::avx512 {
namespace {

// 32 bits as unsigned (load32 of avx512_tile_helpers.h reads them as int32).
inline uint64_t load32u(const void* p) { return static_cast<uint32_t>(load32(p)); }

// Two rows' 16 bytes of nibbles -> [A low nibbles, B low, A high, B high] as bytes 0..15:
// [A, B, A, B] from two broadcast loads (the second masked), then a shift of the upper half only.
inline __m512i nibblePair(const uint8_t* a, const uint8_t* b) {
  const __m512i aaaa = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  const __m512i abab = _mm512_mask_broadcast_i32x4(
      aaaa, 0xF0F0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  const __m512i shifted = _mm512_mask_srli_epi16(abab, 0xFFFF0000u, abab, 4);
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0xF));
}

// The fifth bits of two Q5 blocks as a byte mask in nibblePair's layout.
inline __mmask64 fifthBitPair(const uint8_t* qhA, const uint8_t* qhB) {
  const uint64_t a = load32u(qhA), b = load32u(qhB);
  return (a & 0xFFFF) | ((b & 0xFFFF) << 16) | ((a >> 16) << 32) | ((b >> 16) << 48);
}

struct Q4_0 {
  using W = BlockQ4_0;
  static constexpr bool kBands = true;  // prefill in bands (avx512_quant_bands.h)
  using A = BlockQ8_0;
  static constexpr int kBiasShift = 3;  // stored q + 8
  static constexpr bool kMin = false;
  static __m512i load(const W& a, const W& b) { return nibblePair(a.qs, b.qs); }
};
struct Q4_1 {
  using W = BlockQ4_1;
  static constexpr bool kBands = false;  // prefill in bands (avx512_quant_bands.h)
  using A = BlockQ8_1;
  static constexpr int kBiasShift = -1;  // unsigned already
  static constexpr bool kMin = true;
  static __m512i load(const W& a, const W& b) { return nibblePair(a.qs, b.qs); }
};
struct Q5_0 {
  using W = BlockQ5_0;
  static constexpr bool kBands = false;  // prefill in bands (avx512_quant_bands.h)
  using A = BlockQ8_0;
  static constexpr int kBiasShift = 4;  // stored q + 16
  static constexpr bool kMin = false;
  static __m512i load(const W& a, const W& b) {
    return _mm512_or_si512(nibblePair(a.qs, b.qs),
                           _mm512_maskz_mov_epi8(fifthBitPair(a.qh, b.qh), _mm512_set1_epi8(0x10)));
  }
};
struct Q5_1 {
  using W = BlockQ5_1;
  static constexpr bool kBands = false;  // prefill in bands (avx512_quant_bands.h)
  using A = BlockQ8_1;
  static constexpr int kBiasShift = -1;
  static constexpr bool kMin = true;
  static __m512i load(const W& a, const W& b) {
    return _mm512_or_si512(nibblePair(a.qs, b.qs),
                           _mm512_maskz_mov_epi8(fifthBitPair(a.qh, b.qh), _mm512_set1_epi8(0x10)));
  }
};
struct Q8_0 {
  using W = BlockQ8_0;
  static constexpr bool kBands = true;  // prefill in bands (avx512_quant_bands.h)
  using A = BlockQ8_0;
  static constexpr int kBiasShift = 7;  // stored q + 128 (q ^ 0x80)
  static constexpr bool kMin = false;
  static __m512i load(const W& a, const W& b) {
    const __m512i ab = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)), 1);
    // [A 0..15, A 16..31, B 0..15, B 16..31] -> [A 0..15, B 0..15, A 16..31, B 16..31]
    const __m512i pair = _mm512_shuffle_i64x2(ab, ab, _MM_SHUFFLE(3, 1, 2, 0));
    return _mm512_xor_si512(pair, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
};

// Scales of two blocks as floats: [dA, mA, dB, mB] (with a minimum) or [dA, dB, 0, 0].
template <class Q>
inline __m128 scalePair(const typename Q::W& a, const typename Q::W& b) {
  if constexpr (Q::kMin) {
    const uint64_t v = load32u(&a.d) | (load32u(&b.d) << 32);
    return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(v)));
  } else {
    const uint32_t v = static_cast<uint32_t>(a.d) | (static_cast<uint32_t>(b.d) << 16);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(v)));
  }
}

// One activation block prepared for the pair layout.
struct ActBlock {
  __m512i y;     // [0..15, 0..15, 16..31, 16..31]
  __m512i init;  // -bias * (sum of each lane's 4 activations), or 0
  float d, s;
};

template <class Q>
inline ActBlock prepare(const typename Q::A& a) {
  ActBlock p;
  const __m512i y4 =
      _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.qs)));
  p.y = _mm512_shuffle_i64x2(y4, y4, _MM_SHUFFLE(1, 1, 0, 0));
  if constexpr (Q::kBiasShift >= 0) {
    const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), p.y);
    p.init = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, Q::kBiasShift));
  } else {
    p.init = _mm512_setzero_si512();
  }
  p.d = _cvtsh_ss(a.d);
  if constexpr (Q::kMin) {
    p.s = _cvtsh_ss(a.s);
  } else {
    p.s = 0;
  }
  return p;
}

// hsum_float_8 of each row of a pair accumulator: (lane i + lane i+8) first, then pairs.
inline void finishPair(__m512 acc, float& a, float& b) {
  const __m512 folded = _mm512_add_ps(acc, _mm512_shuffle_f32x4(acc, acc, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m256 v = _mm512_castps512_ps256(folded);  // [A v0..v3, B v0..v3]
  __m128 va = _mm256_castps256_ps128(v), vb = _mm256_extractf128_ps(v, 1);
  va = _mm_add_ps(va, _mm_movehl_ps(va, va));
  vb = _mm_add_ps(vb, _mm_movehl_ps(vb, vb));
  va = _mm_add_ss(va, _mm_movehdup_ps(va));
  vb = _mm_add_ss(vb, _mm_movehdup_ps(vb));
  a = _mm_cvtss_f32(va);
  b = _mm_cvtss_f32(vb);
}

// Decode streams the weights once, and a tile reads its 2-8 rows side by side: on the Zen 5
// development VM the hardware prefetchers follow such short interleaved streams at about half
// the rate of one sequential stream (9-14 against 26 GB/s on one core). The kernel therefore
// walks the next tile's rows, one contiguous run, front to back as a prefetch stream of its
// own, which brings interleaved reads to 17-25 GB/s (a C++ test of the access pattern alone).
// The hint is L2: a tile of Q8_0 rows of 4096 is 35 KiB, and prefetched into L1 it evicted the
// tile being read (Q8_0 decode fell from 16 to 11.5 GB/s; into L2 it rose to 26-28 GB/s,
// cpu_kernels_bench --rows 32768 --cols 4096 --tokens 1, one core).
constexpr auto kPrefetchHint = _MM_HINT_T2;
constexpr int kPrefillPairs = 4;
// Batches from which Q4_0 and Q8_0 run in bands of 32 rows (avx512_quant_bands.h). Weights in
// row groups go to the bands later (kMaxSideTokens, kernel_table.h): each band first takes its
// rows out of their groups, and the grouped passes were faster below 32 tokens (one core, a
// 32768 x 2048 matrix from DRAM, ns per row, block and token, grouped against the file layout's
// bands without the copy out of the groups: Q4_0 at 16 tokens 0.44 vs 0.55, at 32 0.43 vs 0.44,
// at 64 0.43 vs 0.39; Q8_0 at 16 0.51 vs 0.55, at 32 0.47 vs 0.44).
constexpr int kQ0BandTokens = 8;
constexpr int kQ0GroupBandTokens = static_cast<int>(kMaxSideTokens);

// P row pairs x T tokens (T <= 4). Rows r0 + 2p and r0 + 2p + 1 form pair p, except that a
// tile of one row (single) pairs the row with itself and stores one result.
template <class Q, int P, int T>
void tile(const GemmArgs& g, int64_t r0, int64_t t0, bool single) {
  static_assert(T >= 1 && T <= 4);
  using W = typename Q::W;
  using A = typename Q::A;
  const int64_t blocks = g.cols / kQK;
  const W* w[2 * P];
  for (int i = 0; i < 2 * P; ++i) {
    const int64_t r = single ? r0 : r0 + i;
    w[i] = reinterpret_cast<const W*>(g.weights + static_cast<size_t>(r) * g.weightStride);
  }
  const int rowsInTile = single ? 1 : 2 * P;
  const size_t stepBytes = static_cast<size_t>(rowsInTile) * sizeof(W);
  const char* nextTile =
      reinterpret_cast<const char*>(w[0]) + static_cast<size_t>(rowsInTile) * g.weightStride;
  const A* a[T];
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const A*>(g.act + static_cast<size_t>(t0 + t) * g.actStride);
  }
  // Lane l of a pair's expanded scales takes row A's or row B's scale from scalePair.
  const __m512i spread = Q::kMin ? _mm512_set_epi32(2, 2, 2, 2, 0, 0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0)
                                 : _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
  __m512 acc[P][T];
  // Minimum terms of pair p, lane t for (row A, token t) and 4 + t for (row B, token t) (one
  // token: lanes 1 and 3): one fused multiply-add per lane per block, in block order, as
  // ggml's scalar summs.
  __m256 summs[P];
  for (int p = 0; p < P; ++p) {
    summs[p] = _mm256_setzero_ps();
    for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    ActBlock act[T];
    __m512 dy[T];
    for (int t = 0; t < T; ++t) {
      act[t] = prepare<Q>(a[t][b]);
      dy[t] = _mm512_set1_ps(act[t].d);
    }
    __m256 sums = _mm256_setzero_ps();
    if constexpr (Q::kMin && T == 1) {
      sums = _mm256_set1_ps(act[0].s);
    } else if constexpr (Q::kMin) {
      alignas(16) uint16_t s[8] = {};
      for (int t = 0; t < T; ++t) s[t] = s[4 + t] = a[t][b].s;
      sums = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(s)));
    }
    // The next tile's rows, which lie in one run of memory after this tile's, read front to
    // back at the pace this tile is read (see kPrefetchHint).
    for (size_t o = 0; o < stepBytes; o += 64) {
      _mm_prefetch(nextTile + static_cast<size_t>(b) * stepBytes + o, kPrefetchHint);
    }
    for (int p = 0; p < P; ++p) {
      const W& wa = w[2 * p][b];
      const W& wb = w[2 * p + 1][b];
      const __m512i q = Q::load(wa, wb);
      const __m128 scales = scalePair<Q>(wa, wb);
      const __m512 scaleLanes = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(scales));
      if constexpr (Q::kMin && T == 1) {
        // One token: the scales' lanes 1 and 3 (mA, mB) serve as they are; the sums are read
        // from lanes 1 and 3 instead of 0 and 4.
        summs[p] = _mm256_castps128_ps256(
            _mm_fmadd_ps(scales, _mm256_castps256_ps128(sums), _mm256_castps256_ps128(summs[p])));
      } else if constexpr (Q::kMin) {
        const __m256 mins = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(scales),
                                                     _mm256_set_epi32(3, 3, 3, 3, 1, 1, 1, 1));
        summs[p] = _mm256_fmadd_ps(mins, sums, summs[p]);
      }
      for (int t = 0; t < T; ++t) {
        const __m512 lanes = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(act[t].init, q, act[t].y));
        acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(scaleLanes, dy[t]), lanes, acc[p][t]);
      }
    }
  }
  for (int p = 0; p < P; ++p) {
    alignas(32) float m[8];
    _mm256_store_ps(m, summs[p]);
    for (int t = 0; t < T; ++t) {
      float ra, rb;
      finishPair(acc[p][t], ra, rb);
      float* y = g.y + (t0 + t) * g.ldy + r0;
      const int laneA = T == 1 ? 1 : t, laneB = T == 1 ? 3 : 4 + t;
      y[2 * p] = Q::kMin ? ra + m[laneA] : ra;
      if (!single) y[2 * p + 1] = Q::kMin ? rb + m[laneB] : rb;
    }
  }
}

// Tokens four at a time, the last 1-3 in one tile too: each weight block is unpacked once per
// tile, so a batch of 2 or 3 decode rows reads the weights once, not once per token.
template <class Q, int P>
void rowTile(const GemmArgs& g, int64_t r0, bool single) {
  int64_t t = 0;
  for (; t + 4 <= g.tokens; t += 4) tile<Q, P, 4>(g, r0, t, single);
  switch (g.tokens - t) {
    case 3:
      tile<Q, P, 3>(g, r0, t, single);
      break;
    case 2:
      tile<Q, P, 2>(g, r0, t, single);
      break;
    case 1:
      tile<Q, P, 1>(g, r0, t, single);
      break;
    default:
      break;
  }
}

template <class Q>
void gemm(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  int64_t r = rowBegin;
  if constexpr (Q::kBands) {
    // Prefill: bands of 32 rows; the pair tiles below take the last rows.
    if (g.tokens >= kQ0BandTokens) {
      for (; r + 32 <= rowEnd; r += 32) q0Bands<typename Q::W>(g, r);
    }
  }
  if (g.tokens == 1) {
    for (; r + 8 <= rowEnd; r += 8) tile<Q, 4, 1>(g, r, 0, false);
  } else {
    for (; r + 2 * kPrefillPairs <= rowEnd; r += 2 * kPrefillPairs)
      rowTile<Q, kPrefillPairs>(g, r, false);
  }
  for (; r + 2 <= rowEnd; r += 2) rowTile<Q, 1>(g, r, false);
  if (r < rowEnd) rowTile<Q, 1>(g, r, true);
}

}  // namespace

void gemmQ4_0(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.order == DotOrder::Repacked) {
    gemmQ4_0Repacked(g, b, e);
    return;
  }
  if (g.rowGroups) {
    // The vec order on a grouped matrix: not a shape the CPU stage makes (a grouped Q4_0 matrix
    // has 8k rows, so the repacked order), but still the same bits, from the rows taken out.
    ungroupedRows<WeightKind::Q4_0, gemmQ4_0>(g, b / kGroupRows * kGroupRows, b, e);
    return;
  }
  gemm<Q4_0>(g, b, e);
}
// IQ4_NL: its repacked order is Q4_0's arithmetic with the level table (llama.cpp's
// gemv/gemm_q4_b32_8x8_q8_0_lut_avx), so Q4_0's kernel with codes level + 128 and a start of
// -128 x the activations' sum; the vec and tiled orders (rows not a multiple of 8) as at the
// AVX2 level.
void gemmIQ4_NL(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.order == DotOrder::Repacked) {
    gemmQ4_0Repacked<IQ4NLWeights>(g, b, e);
    return;
  }
  if (g.rowGroups) {
    // The vec and tiled orders on a grouped matrix (not a shape the CPU stage makes, as Q4_0's),
    // from the rows taken out.
    ungroupedRows<WeightKind::IQ4_NL, gemmIQ4_NL>(g, b / kGroupRows * kGroupRows, b, e);
    return;
  }
  avx2::gemmIQ4_NL(g, b, e);
}
// MXFP4: the same template in llama.cpp (block_mxfp4x8), so the same kernel with its levels and
// E8M0 scales; its vec order (rows not a multiple of 8) as at the AVX2 level.
void gemmMXFP4(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.order == DotOrder::Repacked) {
    gemmQ4_0Repacked<MXFP4Weights>(g, b, e);
    return;
  }
  if (g.rowGroups) {
    ungroupedRows<WeightKind::MXFP4, gemmMXFP4>(g, b / kGroupRows * kGroupRows, b, e);
    return;
  }
  avx2::gemmMXFP4(g, b, e);
}
void gemmQ4_1(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.rowGroups) {
    gemmQ0Groups<BlockQ4_1x8, gemmQ4_1, 0>(g, b, e);  // no bands: all in the grouped tiles
    return;
  }
  gemm<Q4_1>(g, b, e);
}
void gemmQ5_0(const GemmArgs& g, int64_t b, int64_t e) { gemm<Q5_0>(g, b, e); }
void gemmQ5_1(const GemmArgs& g, int64_t b, int64_t e) { gemm<Q5_1>(g, b, e); }
void gemmQ8_0(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.rowGroups) {
    gemmQ0Groups<BlockQ8_0x8, gemmQ8_0, kQ0GroupBandTokens>(g, b, e);
    return;
  }
  gemm<Q8_0>(g, b, e);
}

size_t actSideBytes(ActKind kind, int64_t cols) { return q0SideBytes(kind, cols); }
void actSide(ActKind kind, const void* actRow, int64_t cols, void* sideRow) {
  q0Side(kind, actRow, cols, sideRow);
}

}  // namespace shoal::cpu::avx512
