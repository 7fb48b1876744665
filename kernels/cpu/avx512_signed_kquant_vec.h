#pragma once
// The AVX-512 VNNI decode kernel (DotOrder::Vec) for the K-quant types with signed values and
// Q8_K activations, Q3_K and IQ4_XS, in file layout: bit-identical to the AVX2 kernels
// (avx2_quant_gemm.cpp) and so to the scalar reference.
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
// ggml's lane j % 8: the step's two halves added (integers, exact) are the AVX2 kernel's lanes,
// and the float epilogue per super-block (one fma of d_w * d_a into eight lanes) and the final
// hsum8 are its own.
//
// Included by avx512_kquant_gemm.cpp only, after its traits (anonymous namespace, AVX-512 flags:
// see x86_kquant_kernels.h). A traits type K adds:
//   kOffset              what the codes add to the values
//   scales(x)            the block's sub-block scales as int32 (sub-block s in lane s)
//   scaleIndex(i)        per lane of step i, the lane of scales(x) that holds its sub-block's

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <new>

#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {
namespace {

constexpr int kSignedVecTokens = 4;  // tokens per pass over a row (a decode step of sequences)

// A thread's buffer of start values, grown as needed (a plain allocation: see PairLaneScratch).
struct StartScratch {
  __m512i* data = nullptr;
  size_t capacity = 0;
  StartScratch() = default;
  StartScratch(const StartScratch&) = delete;
  StartScratch& operator=(const StartScratch&) = delete;
  ~StartScratch() { std::free(data); }
  __m512i* reserve(size_t n) {
    if (n > capacity) {
      std::free(data);
      data = static_cast<__m512i*>(std::aligned_alloc(64, n * sizeof(__m512i)));
      capacity = data ? n : 0;
      if (!data) throw std::bad_alloc();
    }
    return data;
  }
};

// For every token of g and every 64-element step of its blocks: -offset times the sum of each
// group of four activations (the step's int32 lanes), token t's steps from the result + 4 * t *
// blocks; in the calling thread's buffer.
template <int kOffset>
const __m512i* startValues(const GemmArgs& g, int64_t blocks) {
  static_assert(kOffset == 4 || kOffset == 128);
  constexpr int kShift = kOffset == 4 ? 2 : 7;
  thread_local StartScratch scratch;
  __m512i* out = scratch.reserve(static_cast<size_t>(4 * g.tokens * blocks));
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t t = 0; t < g.tokens; ++t) {
    const auto* y =
        reinterpret_cast<const BlockQ8_K*>(g.act + static_cast<size_t>(t) * g.actStride);
    for (int64_t b = 0; b < blocks; ++b) {
      for (int i = 0; i < 4; ++i) {
        const __m512i sums =
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(y[b].qs + 64 * i));
        out[(t * blocks + b) * 4 + i] =
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
template <class K, int R, int T>
void signedVecRows(const typename K::Block* const* x, const BlockQ8_K* const* y,
                   const __m512i* const* start, int64_t blocks, const uint8_t* const* ahead,
                   float* out) {
  __m256 acc[R][T];
  for (auto& row : acc) {
    for (__m256& a : row) a = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    for (int r = 0; r < R; ++r) {
      if (ahead != nullptr) prefetchBlock<typename K::Block>(ahead[r], b);
    }
    for (int r = 0; r < R; ++r) {
      const typename K::Block& xb = x[r][b];
      typename K::Context c;
      __m128i unusedMins;
      K::prepare(xb, c, unusedMins);
      const __m512i scales = K::scales(xb);
      __m512i lanes[T];
      for (__m512i& l : lanes) l = _mm512_setzero_si512();
      for (int i = 0; i < 4; ++i) {
        __m512i q, unusedScale;
        K::unpack(xb, c, i, q, unusedScale);
        const __m512i scale = _mm512_permutexvar_epi32(K::scaleIndex(i), scales);
        for (int t = 0; t < T; ++t) {
          const __m512i dots =
              _mm512_dpbusd_epi32(start[t][4 * b + i], q, _mm512_loadu_si512(y[t][b].qs + 64 * i));
          lanes[t] = _mm512_add_epi32(lanes[t], _mm512_mullo_epi32(dots, scale));
        }
      }
      const float dw = half(xb.d);
      for (int t = 0; t < T; ++t) {
        const __m256i folded = _mm256_add_epi32(_mm512_castsi512_si256(lanes[t]),
                                                _mm512_extracti64x4_epi64(lanes[t], 1));
        acc[r][t] =
            _mm256_fmadd_ps(_mm256_set1_ps(dw * y[t][b].d), _mm256_cvtepi32_ps(folded), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum8(acc[r][t]);
  }
}

// Rows [rowBegin, rowEnd) of g in the vec order: four rows per pass for one token, two for two,
// one row for more (up to kSignedVecTokens tokens per pass); while a pass's first tokens run, the
// rows kRowsAhead passes on are prefetched at its pace (as gemmK).
template <class K>
void gemmSignedVec(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  const int64_t blocks = g.cols / kQKK;
  const __m512i* starts = startValues<K::kOffset>(g, blocks);
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
      const __m512i* start[kSignedVecTokens] = {};
      for (int i = 0; i < n; ++i) {
        y[i] =
            reinterpret_cast<const BlockQ8_K*>(g.act + static_cast<size_t>(t0 + i) * g.actStride);
        start[i] = starts + (t0 + i) * blocks * 4;
      }
      float out[4 * kSignedVecTokens];
      const uint8_t* const* pf = t0 == 0 ? ahead : nullptr;
      if (rows == 4) {
        signedVecRows<K, 4, 1>(x, y, start, blocks, pf, out);
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
