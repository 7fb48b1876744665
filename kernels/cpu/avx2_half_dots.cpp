// AVX2 batches of f16 dot products (KernelTable::dotsF16): attention's K·q over the cached
// positions and V·p over the value dimensions, for several heads and tokens at once. The AVX2
// counterpart of avx512_half_dots.cpp, for CPUs without AVX-512 (Zen 2 and 3, Intel's client
// cores), which otherwise took one dotF16 call per dot: each call converted its key or value row
// and its query again, and reduced its lanes alone.
//
// Each dot keeps exactly dotF16's arithmetic (avx2_ops.cpp: 16 lanes as two ymm, lo = lanes
// 0-7, hi = 8-15), so the results are bit-identical to one call per dot:
//  - short rows (K·q, n = 64 or 128): each row converted to f32 once for all queries, each
//    query's products summed per lane, and 8 rows' lanes then reduced together by a transposing
//    tree that adds the same lane pairs as dotF16's reduce16 (i + i+8, i + i+4, then
//    (i + i+2) + (i+1 + i+3)) does for each row alone;
//  - long rows (V·p, n = the visible positions): a value row converted once for a tile of
//    queries, whose probabilities are read as floats (y32); the vec order's four accumulator
//    chains run one after the other, each dot one pair of ymm per chain, and the first pass
//    over a row prefetches the next.
//
// Compiled for AVX2/FMA/F16C; reached only through the AVX2 table.

#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/half_dots_dispatch.h"
#include "kernels/cpu/simd_kernels.h"

namespace shoal::cpu::avx2 {
namespace {

// 16 lanes of a dot: lo = lanes 0-7, hi = lanes 8-15.
struct Lanes {
  __m256 lo, hi;
};

inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline Lanes add(Lanes a, Lanes b) {
  return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
}

// dotF16's reduce16: hsum8(hi + lo), i.e. lanes i + i+8, then i + i+4, (i + i+2), (i+1 + i+3),
// and the last two added.
inline float reduce16(Lanes x) {
  const __m256 s = _mm256_add_ps(x.hi, x.lo);
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(s, 1), _mm256_castps256_ps128(s));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// The 8 sums reduce16(r[0..7]) as lanes 0-7, pairing the same partial sums as reduce16 does
// for each row (IEEE addition is commutative, so only the pairing matters).
inline __m256 reduce16x8(const Lanes r[8]) {
  // Lanes i + i+8 of each row.
  __m256 s[8];
  for (int k = 0; k < 8; ++k) s[k] = _mm256_add_ps(r[k].hi, r[k].lo);
  // i + i+4: 128-bit half 0 of b[m] holds row 2m's four sums, half 1 row 2m+1's.
  __m256 b[4];
  for (int m = 0; m < 4; ++m) {
    b[m] = _mm256_add_ps(_mm256_permute2f128_ps(s[2 * m], s[2 * m + 1], 0x31),
                         _mm256_permute2f128_ps(s[2 * m], s[2 * m + 1], 0x20));
  }
  // (i + i+2) in element 0 and (i+1 + i+3) in element 1 of each row's pair: c[0] holds rows 0
  // and 2 in half 0, 1 and 3 in half 1; c[1] rows 4 and 6, 5 and 7.
  __m256 c[2];
  for (int m = 0; m < 2; ++m) {
    const __m256d lo = _mm256_castps_pd(b[2 * m]), hi = _mm256_castps_pd(b[2 * m + 1]);
    c[m] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(lo, hi)),
                         _mm256_castpd_ps(_mm256_unpackhi_pd(lo, hi)));
  }
  // The last pair: half 0 holds rows 0, 2, 4, 6 and half 1 rows 1, 3, 5, 7; put row r in lane r.
  const __m256 t =
      _mm256_add_ps(_mm256_shuffle_ps(c[0], c[1], 0x88), _mm256_shuffle_ps(c[0], c[1], 0xDD));
  return _mm256_permutevar8x32_ps(t, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One dot's 16 lanes before the final reduction, x's N / 8 vectors (converted once for all
// queries) times y's: Tiled, one accumulator over steps of 16; Vec, four over steps of 64,
// folded ((acc0 + acc2) + (acc1 + acc3)). For N = 64 the Vec accumulators hold one exact
// product each (f16 x f16 fits a float), so the first fold is an fma of the third product onto
// the first, with the same bits (avx512_half_dots.cpp, rowLanes).
template <DotOrder Order, int N>
inline Lanes rowLanes(const __m256* x, const float* y) {
  auto fma = [&](int i, __m256 acc) {
    return _mm256_fmadd_ps(x[i], _mm256_loadu_ps(y + 8 * i), acc);
  };
  const __m256 zero = _mm256_setzero_ps();
  if constexpr (Order == DotOrder::Tiled) {
    Lanes acc{zero, zero};
    for (int i = 0; i < N / 8; i += 2) acc = {fma(i, acc.lo), fma(i + 1, acc.hi)};
    return acc;
  } else if constexpr (N == 64) {
    Lanes even{fma(0, zero), fma(1, zero)}, odd{fma(2, zero), fma(3, zero)};
    even = {fma(4, even.lo), fma(5, even.hi)};
    odd = {fma(6, odd.lo), fma(7, odd.hi)};
    return add(even, odd);
  } else {
    Lanes acc[4];
    for (Lanes& a : acc) a = {zero, zero};
    for (int i = 0; i < N / 8; i += 2) {
      Lanes& a = acc[(i / 2) % 4];
      a = {fma(i, a.lo), fma(i + 1, a.hi)};
    }
    return add(add(acc[0], acc[2]), add(acc[1], acc[3]));
  }
}

// Short rows of N halfs (K·q): in blocks of 8 rows, each row converted once into registers and
// multiplied by up to kQueryChunk queries, whose lanes wait in `lanes` for the block's reduction.
constexpr int kQueryChunk = 8;

template <DotOrder Order, int N>
void shortRows(const HalfDots& d) {
  Lanes lanes[kQueryChunk][8];
  for (int32_t q0 = 0; q0 < d.queries; q0 += kQueryChunk) {
    const int qc = d.queries - q0 < kQueryChunk ? d.queries - q0 : kQueryChunk;
    for (int64_t j = 0; j < d.count; j += 8) {
      const int64_t m = d.count - j < 8 ? d.count - j : 8;
      for (int64_t r = 0; r < m; ++r) {
        const uint16_t* row = d.rows + (j + r) * d.rowStride;
        __m256 x[N / 8];
        for (int i = 0; i < N / 8; ++i) x[i] = load8(row + 8 * i);
        for (int q = 0; q < qc; ++q)
          lanes[q][r] = rowLanes<Order, N>(x, d.y32 + (q0 + q) * d.yStride);
      }
      for (int q = 0; q < qc; ++q) {
        for (int64_t r = m; r < 8; ++r) lanes[q][r] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        const __m256 sums = reduce16x8(lanes[q]);
        float* out = d.out + (q0 + q) * d.outStride + j;
        if (m == 8) {
          _mm256_storeu_ps(out, sums);
        } else {
          alignas(32) float all[8];
          _mm256_store_ps(all, sums);
          for (int64_t r = 0; r < m; ++r) out[r] = all[r];
        }
      }
    }
  }
}

// QC queries of one long row (V·p), from the row's step at `first`, every `step` halfs: each
// step's 16 values converted once for the QC queries, summed into acc (one pair per query).
// With `next`, each step at a multiple of 64 also prefetches those 128 bytes of the next row: a
// tile of one row is one stream, and without this the conversions waited on memory (a third of the
// kernel's samples on the Zen 4 VM).
template <int QC>
inline void longChain(const uint16_t* row, const uint16_t* next, const float* ys, int64_t yStride,
                      int64_t first, int64_t n, int64_t step, Lanes (&acc)[QC]) {
  for (int64_t i = first; i < n; i += step) {
    if (next && i % 64 == 0) {
      _mm_prefetch(reinterpret_cast<const char*>(next + i), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(next + i + 32), _MM_HINT_T0);
    }
    const __m256 xlo = load8(row + i), xhi = load8(row + i + 8);
    for (int q = 0; q < QC; ++q) {
      const float* y = ys + q * yStride + i;
      acc[q] = {_mm256_fmadd_ps(xlo, _mm256_loadu_ps(y), acc[q].lo),
                _mm256_fmadd_ps(xhi, _mm256_loadu_ps(y + 8), acc[q].hi)};
    }
  }
}

// Row r of a long V·p for queries q0..q0+QC: Tiled, one chain over steps of 16; Vec, the four
// chains of steps of 64 one after the other (chain a from 16a), folded as dotF16 folds them.
// The first pass over the row (the first chain; every fourth step in the tiled order)
// prefetches the next row.
template <DotOrder Order, int QC>
void longRow(const HalfDots& d, int64_t q0, int64_t r) {
  const uint16_t* row = d.rows + r * d.rowStride;
  const uint16_t* next = r + 1 < d.count ? row + d.rowStride : nullptr;
  const float* ys = d.y32 + q0 * d.yStride;
  const __m256 zero = _mm256_setzero_ps();
  Lanes sums[QC];
  if constexpr (Order == DotOrder::Tiled) {
    for (Lanes& s : sums) s = {zero, zero};
    longChain<QC>(row, next, ys, d.yStride, 0, d.n, 16, sums);
  } else {
    Lanes chains[4][QC];
    for (int a = 0; a < 4; ++a) {
      for (Lanes& c : chains[a]) c = {zero, zero};
      longChain<QC>(row, a == 0 ? next : nullptr, ys, d.yStride, 16 * a, d.n, 64, chains[a]);
    }
    for (int q = 0; q < QC; ++q)
      sums[q] = add(add(chains[0][q], chains[2][q]), add(chains[1][q], chains[3][q]));
  }
  for (int q = 0; q < QC; ++q) d.out[(q0 + q) * d.outStride + r] = reduce16(sums[q]);
}

// Tiles of up to 3 queries per row. Each row reads its queries' probabilities again, so they
// should stay in L1: at SmolLM2's 9 heads and a 1628-position depth, tiles of 6 (12 of the 16
// registers) read them from L2 and ran slower (attention_bench --rows 5: 17.6 ms, 3: 15.8 ms).
template <DotOrder Order>
void longRows(const HalfDots& d) {
  auto rows = [&](auto qc, int64_t q0) {
    for (int64_t r = 0; r < d.count; ++r) longRow<Order, decltype(qc)::value>(d, q0, r);
  };
  int64_t q = 0;
  for (; q + 3 <= d.queries; q += 3) rows(std::integral_constant<int, 3>{}, q);
  if (d.queries - q == 2) rows(std::integral_constant<int, 2>{}, q);
  if (d.queries - q == 1) rows(std::integral_constant<int, 1>{}, q);
}

// This level's kernels, for dispatchHalfDots.
struct Kernels {
  template <DotOrder Order, int N>
  static void shortRows(const HalfDots& d) {
    avx2::shortRows<Order, N>(d);
  }
  template <DotOrder Order>
  static void longRows(const HalfDots& d) {
    avx2::longRows<Order>(d);
  }
};

}  // namespace

void dotsHalf(const HalfDots& d) { dispatchHalfDots<Kernels>(d); }

}  // namespace shoal::cpu::avx2
