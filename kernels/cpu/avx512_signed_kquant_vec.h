#pragma once
// The AVX-512 VNNI decode kernel (DotOrder::Vec) for the K-quant types with signed values and
// Q8_K activations, Q3_K and IQ4_XS, in file layout, and Q2_K's in the repacked gemv's order:
// bit-identical to the AVX2 kernels (avx2_quant_gemm.cpp) and so to the scalar reference.
//
// Why: the AVX2 kernels make each value signed and multiply it by its activation with
// vpmaddubsw (IQ4_XS: two vpsignb first; Q3_K: a second vpmaddubsw for its -4), then apply the
// scale with vpmaddwd, 32 elements per step; one core ran them at 6-10 GB/s of weights from
// cache, so a model's decode was bound by them (IQ4_XS at 36% of the DRAM bandwidth, two
// threads). Here one vpdpbusd multiplies 64 unsigned codes (value + offset: Q3_K's + 4,
// IQ4_XS's level + 128, as in the bands, avx512_kquant_bands.h) with 64 activations, starting
// from -offset times each group of four activations' sum (computed once per call and token,
// startValues), so that each int32 lane is the exact dot of four elements; one vpmulld applies
// the lane's sub-block scale. Lane j of a 64-element step holds elements 4j .. 4j+3, i.e.
// ggml's lane j % 8 (where a lane's dot fits 16 bits, Q2_K's and Q3_K's, one vpdpwssd against
// the scale in the low half of each lane, zero in the high one, multiplies and adds instead:
// scaledAdd): the step's two halves added (integers, exact) are the AVX2 kernel's lanes,
// and the float epilogue per super-block (one fma of d_w * d_a into eight lanes) and the final
// hsum8 are its own.
//
// Included by avx512_kquant_gemm.cpp only, after its traits (anonymous namespace, AVX-512 flags:
// see x86_kquant_kernels.h). A traits type K adds:
//   kOffset              what the codes add to the values (Q2_K: 0, its values are unsigned)
//   kSmallDots           whether a dot of four values and activations always fits int16
//   minTotal(x, y)       kHasMin (Q2_K): the block's minimums times the activations' sums
//   scales(x)            the block's sub-block scales as int32 (sub-block s in lane s)
//   scaleIndex(i)        per lane of step i, the lane of scales(x) that holds its sub-block's

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {
namespace {

// lanes + dots * scale per int32 lane. kSmallDots: every dot fits int16 (|dot| <= 2048 for Q2_K,
// Q3_K) and scale is masked to its low 16 bits (scaleWords), so vpdpwssd's high-half product is
// zero: one instruction for vpmulld and vpaddd.
template <bool kSmallDots>
inline __m512i scaledAdd(__m512i lanes, __m512i dots, __m512i scale) {
  if constexpr (kSmallDots) {
    return _mm512_dpwssd_epi32(lanes, dots, scale);
  } else {
    return _mm512_add_epi32(lanes, _mm512_mullo_epi32(dots, scale));
  }
}

// The scales as scaledAdd takes them.
template <bool kSmallDots>
inline __m512i scaleWords(__m512i scales) {
  return kSmallDots ? _mm512_and_si512(scales, _mm512_set1_epi32(0xFFFF)) : scales;
}

constexpr int kSignedVecTokens = 4;  // tokens per pass over a row (a decode step of sequences)

// One 64-element step's start values (a struct: a vector type itself is no template argument).
struct StepStarts {
  __m512i lanes;
};

// For every token of g and every 64-element step of its blocks: -offset times the sum of each
// group of four activations (the step's int32 lanes), token t's steps from the result + 4 * t *
// blocks; in the calling thread's buffer.
template <int kOffset>
const StepStarts* startValues(const GemmArgs& g, int64_t blocks) {
  static_assert(kOffset == 4 || kOffset == 128);  // Q3_K's, IQ4_XS's
  constexpr int kShift = kOffset == 4 ? 2 : 7;
  thread_local AlignedScratch<StepStarts> scratch;
  StepStarts* out = scratch.reserve(static_cast<size_t>(4 * g.tokens * blocks));
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t t = 0; t < g.tokens; ++t) {
    const auto* y =
        reinterpret_cast<const BlockQ8_K*>(g.act + static_cast<size_t>(t) * g.actStride);
    for (int64_t b = 0; b < blocks; ++b) {
      for (int i = 0; i < 4; ++i) {
        const __m512i sums =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(y[b].qs + 64 * i));
        out[(t * blocks + b) * 4 + i].lanes =
            _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, kShift));
      }
    }
  }
  return out;
}

// R rows against T tokens in the vec order: out[r * T + t] = row r's dot with token t. Several
// rows per pass (decode: four) give the core independent chains to overlap; one row and token
// ran at about the AVX2 kernel's speed, bound by each block's chain of unpacking, products and
// epilogue. start[t]: the token's startValues; ahead: the rows after these, prefetched block by
// block (nullptr: none).
//
// Q2_K (kHasMin) takes the repacked gemv's order instead (DotOrder::Repacked, kernel_table.h):
// per block the lanes' exact total s1 and the minimums' s2, acc = fma(s1, d_w * d_a, acc) and
// accMin = fma(s2, dmin_w * d_a, accMin), the result acc - accMin.
template <class K, int R, int T>
void signedVecRows(const typename K::Block* const* x, const BlockQ8_K* const* y,
                   const StepStarts* const* start, int64_t blocks, const uint8_t* const* ahead,
                   float* out) {
  __m256 acc[R][T];
  for (auto& row : acc) {
    for (__m256& a : row) a = _mm256_setzero_ps();
  }
  float accTotal[R][T] = {}, accMin[R][T] = {};  // kHasMin
  for (int64_t b = 0; b < blocks; ++b) {
    for (int r = 0; r < R; ++r) {
      if (ahead != nullptr) prefetchBlock<typename K::Block>(ahead[r], b);
    }
    for (int r = 0; r < R; ++r) {
      const typename K::Block& xb = x[r][b];
      typename K::Context c;
      __m128i unusedMins;
      K::prepare(xb, c, unusedMins);
      const __m512i scales = scaleWords<K::kSmallDots>(K::scales(xb));
      __m512i lanes[T];
      for (__m512i& l : lanes) l = _mm512_setzero_si512();
      for (int i = 0; i < 4; ++i) {
        __m512i q, unusedScale;
        K::unpack(xb, c, i, q, unusedScale);
        const __m512i scale = _mm512_permutexvar_epi32(K::scaleIndex(i), scales);
        for (int t = 0; t < T; ++t) {
          const __m512i from = K::kOffset != 0 ? start[t][4 * b + i].lanes : _mm512_setzero_si512();
          const __m512i dots =
              _mm512_dpbusd_epi32(from, q, _mm512_loadu_si512(y[t][b].qs + 64 * i));
          lanes[t] = scaledAdd<K::kSmallDots>(lanes[t], dots, scale);
        }
      }
      const float dw = half(xb.d);
      if constexpr (K::kHasMin) {
        const float dmin = half(xb.dmin);
        for (int t = 0; t < T; ++t) {
          const float da = y[t][b].d;
          accTotal[r][t] = fmaSingle(static_cast<float>(_mm512_reduce_add_epi32(lanes[t])), dw * da,
                                     accTotal[r][t]);
          accMin[r][t] =
              fmaSingle(static_cast<float>(K::minTotal(xb, y[t][b])), dmin * da, accMin[r][t]);
        }
        continue;
      }
      for (int t = 0; t < T; ++t) {
        const __m256i folded = _mm256_add_epi32(_mm512_castsi512_si256(lanes[t]),
                                                _mm512_extracti64x4_epi64(lanes[t], 1));
        acc[r][t] =
            _mm256_fmadd_ps(_mm256_set1_ps(dw * y[t][b].d), _mm256_cvtepi32_ps(folded), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      out[r * T + t] = K::kHasMin ? accTotal[r][t] - accMin[r][t] : hsum8(acc[r][t]);
    }
  }
}

// [total of a, of b, of c, of d] (exact: integer adds): per 128-bit lane the four rows' sums
// side by side (two rounds of unpack and add), then the four 128-bit lanes added.
inline __m128i rowTotals4(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  const __m512i v = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// Four rows and one token in the repacked gemv's order (kHasMin: Q2_K), as signedVecRows with
// the epilogue four rows at a time: the rows' totals s1 and s2 reduced together (rowTotals4)
// and fused in four float lanes; signedVecRows's row by row reductions cost more than the
// block's products.
template <class K>
void repackedMinRows4(const typename K::Block* const* x, const BlockQ8_K* y, int64_t blocks,
                      const uint8_t* const* ahead, float* out) {
  __m128 acc = _mm_setzero_ps(), accMin = _mm_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i lanes[4], mins[4];
    alignas(16) uint16_t d[8];
    for (int r = 0; r < 4; ++r) {
      if (ahead != nullptr) prefetchBlock<typename K::Block>(ahead[r], b);
      const typename K::Block& xb = x[r][b];
      const __m512i scales = scaleWords<K::kSmallDots>(K::scales(xb));
      lanes[r] = _mm512_setzero_si512();
      for (int i = 0; i < 4; ++i) {
        typename K::Context c;
        __m512i q, unusedScale;
        K::unpack(xb, c, i, q, unusedScale);
        const __m512i dots =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, _mm512_loadu_si512(y[b].qs + 64 * i));
        lanes[r] = scaledAdd<K::kSmallDots>(lanes[r], dots,
                                            _mm512_permutexvar_epi32(K::scaleIndex(i), scales));
      }
      mins[r] = _mm512_zextsi256_si512(K::minProducts(xb, y[b]));
      d[r] = xb.d;
      d[4 + r] = xb.dmin;
    }
    const __m128i s1 = rowTotals4(lanes[0], lanes[1], lanes[2], lanes[3]);
    const __m128i s2 = rowTotals4(mins[0], mins[1], mins[2], mins[3]);
    const __m256 dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d)));
    const __m256 scaled = _mm256_mul_ps(dw, _mm256_set1_ps(y[b].d));  // [d * da | dmin * da]
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(s1), _mm256_castps256_ps128(scaled), acc);
    accMin = _mm_fmadd_ps(_mm_cvtepi32_ps(s2), _mm256_extractf128_ps(scaled, 1), accMin);
  }
  _mm_storeu_ps(out, _mm_sub_ps(acc, accMin));
}

// Rows [rowBegin, rowEnd) of g in the vec order: four rows per pass for one token, two for two,
// one row for more (up to kSignedVecTokens tokens per pass); while a pass's first tokens run, the
// rows kRowsAhead passes on are prefetched at its pace (as gemmK).
template <class K>
void gemmSignedVec(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  const int64_t blocks = g.cols / kQKK;
  const StepStarts* starts = nullptr;
  if constexpr (K::kOffset != 0) starts = startValues<K::kOffset>(g, blocks);
  auto rowAt = [&](int64_t r) {
    return reinterpret_cast<const typename K::Block*>(g.weights +
                                                      static_cast<size_t>(r) * g.weightStride);
  };
  const int64_t rowsPerPass = g.tokens == 1 ? 4 : g.tokens == 2 ? 2 : 1;
  for (int64_t r = rowBegin; r < rowEnd;) {
    const int64_t rows = std::min(rowsPerPass, rowEnd - r);
    const typename K::Block* x[4] = {};
    const uint8_t* ahead[4] = {};
    for (int64_t i = 0; i < rows; ++i) {
      x[i] = rowAt(r + i);
      ahead[i] = g.weights + static_cast<size_t>(r + i + kRowsAhead * rows) * g.weightStride;
    }
    for (int64_t t0 = 0; t0 < g.tokens; t0 += kSignedVecTokens) {
      const int n = static_cast<int>(std::min<int64_t>(kSignedVecTokens, g.tokens - t0));
      const BlockQ8_K* y[kSignedVecTokens] = {};
      const StepStarts* start[kSignedVecTokens] = {};
      for (int i = 0; i < n; ++i) {
        y[i] =
            reinterpret_cast<const BlockQ8_K*>(g.act + static_cast<size_t>(t0 + i) * g.actStride);
        if (starts != nullptr) start[i] = starts + (t0 + i) * blocks * 4;
      }
      float out[4 * kSignedVecTokens];
      const uint8_t* const* pf = t0 == 0 ? ahead : nullptr;
      if (rows == 4) {
        if constexpr (K::kHasMin) {
          repackedMinRows4<K>(x, y[0], blocks, pf, out);
        } else {
          signedVecRows<K, 4, 1>(x, y, start, blocks, pf, out);
        }
      } else if (rows == 2 && n == 2) {
        signedVecRows<K, 2, 2>(x, y, start, blocks, pf, out);
      } else {
        // One row at a time (the last rows of a pass of four or two, or 3+ tokens).
        for (int64_t i = 0; i < rows; ++i) {
          const uint8_t* const* pfRow = pf ? ahead + i : nullptr;
          float* o = out + i * n;
          switch (n) {
            case 1:
              signedVecRows<K, 1, 1>(x + i, y, start, blocks, pfRow, o);
              break;
            case 2:
              signedVecRows<K, 1, 2>(x + i, y, start, blocks, pfRow, o);
              break;
            case 3:
              signedVecRows<K, 1, 3>(x + i, y, start, blocks, pfRow, o);
              break;
            default:
              signedVecRows<K, 1, 4>(x + i, y, start, blocks, pfRow, o);
              break;
          }
        }
      }
      for (int64_t i = 0; i < rows; ++i) {
        for (int t = 0; t < n; ++t) g.y[(t0 + t) * g.ldy + r + i] = out[i * n + t];
      }
    }
    r += rows;
  }
}

}  // namespace
}  // namespace shoal::cpu
