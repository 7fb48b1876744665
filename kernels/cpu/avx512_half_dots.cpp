// AVX-512 batches of f16 dot products (KernelTable::dotsF16): attention's K·q over the cached
// positions and V·p over the value dimensions, for several heads and tokens at once.
//
// Each dot keeps exactly the arithmetic of dotF16 in its order (the AVX2 kernel's two ymm halves
// are one zmm here, lane for lane), so the results are bit-identical to one call per dot; what
// changes is how the work overlaps:
//  - short rows (K·q, n = a head dimension of 64 or 128): each row is converted to f32 once for
//    all queries, each query's products are summed per lane, and 16 rows' lanes are then reduced
//    together by a transposing tree that adds the same lane pairs as _mm512_reduce_add_ps does
//    for each row alone;
//  - long rows (V·p, n = the visible positions): a tile of rows and queries streams side by
//    side, so one conversion of a value row feeds several queries' probabilities (already f32),
//    and the accumulator chains of the tile's dots overlap (the tiled order has one chain per
//    dot, the vec order four, run one after the other: longTileVec).
//
// Compiled for AVX-512; reached only through the AVX-512 table.

#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/half_dots_dispatch.h"
#include "kernels/cpu/simd_kernels.h"

namespace shoal::cpu::avx512 {
namespace {

inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// _mm512_reduce_add_ps's tree (lanes i + i+8, then i + i+4, i + i+2, i + i+1), written out so
// the order does not depend on a compiler's expansion of the intrinsic.
inline float reduce16(__m512 x) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// The 16 lane sums of r[0..15] as lane j = reduce16(r[j]): every addition pairs the same two
// partial sums as reduce16 does (IEEE addition is commutative, so only the pairing matters).
inline __m512 reduce16x16(const __m512 r[16]) {
  // Lanes i and i+8: rows 2k (lanes 0-7) and 2k+1 (lanes 8-15).
  __m512 a[8];
  for (int k = 0; k < 8; ++k)
    a[k] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * k], r[2 * k + 1], 0x44),
                         _mm512_shuffle_f32x4(r[2 * k], r[2 * k + 1], 0xEE));
  // i and i+4: 128-bit lane j of b[m] holds row 4m+j's four partial sums.
  __m512 b[4];
  for (int m = 0; m < 4; ++m)
    b[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x88),
                         _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xDD));
  // i and i+2: lane j of c[0] holds rows j and 4+j (two sums each), c[1] rows 8+j and 12+j.
  __m512 c[2];
  for (int m = 0; m < 2; ++m) {
    const __m512d lo = _mm512_castps_pd(b[2 * m]), hi = _mm512_castps_pd(b[2 * m + 1]);
    c[m] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi)));
  }
  // i and i+1: element e of 128-bit lane j is row 4e+j's sum; put row r in lane r.
  const __m512 s =
      _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x88), _mm512_shuffle_ps(c[0], c[1], 0xDD));
  const __m512i toRow = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(toRow, s);
}

// One dot's 16 lanes before the final reduction: x's N / 16 vectors (converted once for all
// queries) times y's. Tiled: one accumulator over steps of 16. Vec: four accumulators over steps
// of 64, folded as ggml's GGML_F32x16_REDUCE ((acc0 + acc2) + (acc1 + acc3)).
//
// For N = 64 each Vec accumulator holds one product (fma with +0), which is exact (f16 x f16
// fits a float's mantissa): so acc0 + acc2 is one fma of the third product onto the first, with
// the same bits, zeros' signs included (a product fma'd onto +0 never gives -0, and +0 plus a
// -0 product is +0 either way). Five operations per dot instead of seven.
template <DotOrder Order, int N>
inline __m512 rowLanes(const __m512* x, const float* y) {
  if constexpr (Order == DotOrder::Tiled) {
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < N / 16; ++i) acc = _mm512_fmadd_ps(x[i], _mm512_loadu_ps(y + 16 * i), acc);
    return acc;
  } else if constexpr (N == 64) {
    const __m512 zero = _mm512_setzero_ps();
    __m512 even = _mm512_fmadd_ps(x[0], _mm512_loadu_ps(y), zero);
    __m512 odd = _mm512_fmadd_ps(x[1], _mm512_loadu_ps(y + 16), zero);
    even = _mm512_fmadd_ps(x[2], _mm512_loadu_ps(y + 32), even);
    odd = _mm512_fmadd_ps(x[3], _mm512_loadu_ps(y + 48), odd);
    return _mm512_add_ps(even, odd);
  } else {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    for (int i = 0; i < N / 16; ++i)
      acc[i % 4] = _mm512_fmadd_ps(x[i], _mm512_loadu_ps(y + 16 * i), acc[i % 4]);
    acc[0] = _mm512_add_ps(acc[0], acc[2]);
    acc[1] = _mm512_add_ps(acc[1], acc[3]);
    return _mm512_add_ps(acc[0], acc[1]);
  }
}

// Short rows of N halfs (K·q): in blocks of 16 rows, each row converted once into registers and
// multiplied by up to kQueryChunk queries, whose lanes wait in `lanes` for the block's reduction.
constexpr int kQueryChunk = 8;

template <DotOrder Order, int N>
void shortRows(const HalfDots& d) {
  __m512 lanes[kQueryChunk][16];
  for (int32_t q0 = 0; q0 < d.queries; q0 += kQueryChunk) {
    const int qc = d.queries - q0 < kQueryChunk ? d.queries - q0 : kQueryChunk;
    for (int64_t j = 0; j < d.count; j += 16) {
      const int64_t m = d.count - j < 16 ? d.count - j : 16;
      for (int64_t r = 0; r < m; ++r) {
        const uint16_t* row = d.rows + (j + r) * d.rowStride;
        __m512 x[N / 16];
        for (int i = 0; i < N / 16; ++i) x[i] = load16(row + 16 * i);
        for (int q = 0; q < qc; ++q)
          lanes[q][r] = rowLanes<Order, N>(x, d.y32 + (q0 + q) * d.yStride);
      }
      for (int q = 0; q < qc; ++q) {
        for (int64_t r = m; r < 16; ++r) lanes[q][r] = _mm512_setzero_ps();
        _mm512_mask_storeu_ps(d.out + (q0 + q) * d.outStride + j,
                              static_cast<__mmask16>((1u << m) - 1), reduce16x16(lanes[q]));
      }
    }
  }
}

// RD rows times QC queries over long n in the tiled order: each value row's step is converted
// once for the QC queries, whose probabilities are read as floats; one accumulator per dot.
template <int QC, int RD>
void longTileTiled(const HalfDots& d, int64_t q0, int64_t r0) {
  __m512 acc[RD][QC];
  for (auto& row : acc)
    for (auto& dot : row) dot = _mm512_setzero_ps();
  const uint16_t* rows = d.rows + r0 * d.rowStride;
  const float* ys = d.y32 + q0 * d.yStride;
  for (int64_t i = 0; i < d.n; i += 16) {
    for (int r = 0; r < RD; ++r) {
      const __m512 x = load16(rows + r * d.rowStride + i);
      for (int q = 0; q < QC; ++q)
        acc[r][q] = _mm512_fmadd_ps(x, _mm512_loadu_ps(ys + q * d.yStride + i), acc[r][q]);
    }
  }
  for (int r = 0; r < RD; ++r)
    for (int q = 0; q < QC; ++q) d.out[(q0 + q) * d.outStride + r0 + r] = reduce16(acc[r][q]);
}

// The vec order over long n: a dot's four accumulators are four independent chains (chain a
// takes the steps of 16 at 16a, 16a + 64, ...), folded at the end. Holding all four per dot in
// registers allowed only four dots at a time (V·p then ran at ~3.5 cycles per fma on Zen 4:
// each step's 16 fmas waited on 4 value conversions and 16 probability loads). Here the chains
// run one after the other, so a tile is RD rows x QC queries of single accumulators (up to 24
// fmas per step for RD conversions and QC loads), each chain's sums parked in memory. (Taking
// the positions a block at a time, so that the values the first chain fetches are in L1 for the
// other three, measured no faster.) Every chain adds the same products in the same sequence,
// and the fold is ggml's: the bits of dotF16.
template <int QC, int RD>
void longTileVec(const HalfDots& d, int64_t q0, int64_t r0) {
  __m512 chains[4][RD][QC];
  const uint16_t* rows = d.rows + r0 * d.rowStride;
  const float* ys = d.y32 + q0 * d.yStride;
  for (int a = 0; a < 4; ++a) {
    __m512 acc[RD][QC];
    for (auto& row : acc)
      for (auto& dot : row) dot = _mm512_setzero_ps();
    for (int64_t i = 16 * a; i < d.n; i += 64) {
      __m512 x[RD];
      for (int r = 0; r < RD; ++r) x[r] = load16(rows + r * d.rowStride + i);
      for (int q = 0; q < QC; ++q) {
        const __m512 y = _mm512_loadu_ps(ys + q * d.yStride + i);
        for (int r = 0; r < RD; ++r) acc[r][q] = _mm512_fmadd_ps(x[r], y, acc[r][q]);
      }
    }
    for (int r = 0; r < RD; ++r)
      for (int q = 0; q < QC; ++q) chains[a][r][q] = acc[r][q];
  }
  for (int r = 0; r < RD; ++r) {
    for (int q = 0; q < QC; ++q) {
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(chains[0][r][q], chains[2][r][q]),
                                       _mm512_add_ps(chains[1][r][q], chains[3][r][q]));
      d.out[(q0 + q) * d.outStride + r0 + r] = reduce16(sum);
    }
  }
}

// Every row for queries q0..q0+QC: tiles of RD rows, then of 4, then single rows.
template <DotOrder Order, int QC, int RD>
void longQueries(const HalfDots& d, int64_t q0) {
  auto tile = [&](auto rows, int64_t r) {
    if constexpr (Order == DotOrder::Vec)
      longTileVec<QC, decltype(rows)::value>(d, q0, r);
    else
      longTileTiled<QC, decltype(rows)::value>(d, q0, r);
  };
  int64_t r = 0;
  for (; r + RD <= d.count; r += RD) tile(std::integral_constant<int, RD>{}, r);
  if constexpr (RD > 4) {
    for (; r + 4 <= d.count; r += 4) tile(std::integral_constant<int, 4>{}, r);
  }
  for (; r < d.count; ++r) tile(std::integral_constant<int, 1>{}, r);
}

// Vec tiles: RD x QC accumulators plus RD converted rows and one probability vector within the
// 32 registers (6 x 4, 5 x 4, 4 x 4, 3 x 6, 2 x 8, 1 x 8).
void longRowsVec(const HalfDots& d) {
  int64_t q = 0;
  for (; q + 6 <= d.queries; q += 6) longQueries<DotOrder::Vec, 6, 4>(d, q);
  switch (d.queries - q) {
    case 5:
      longQueries<DotOrder::Vec, 5, 4>(d, q);
      break;
    case 4:
      longQueries<DotOrder::Vec, 4, 4>(d, q);
      break;
    case 3:
      longQueries<DotOrder::Vec, 3, 6>(d, q);
      break;
    case 2:
      longQueries<DotOrder::Vec, 2, 8>(d, q);
      break;
    case 1:
      longQueries<DotOrder::Vec, 1, 8>(d, q);
      break;
    default:
      break;
  }
}

void longRowsTiled(const HalfDots& d) {
  int64_t q = 0;
  for (; q + 8 <= d.queries; q += 8) longQueries<DotOrder::Tiled, 8, 2>(d, q);
  if (q + 4 <= d.queries) {
    longQueries<DotOrder::Tiled, 4, 4>(d, q);
    q += 4;
  }
  if (q + 2 <= d.queries) {
    longQueries<DotOrder::Tiled, 2, 8>(d, q);
    q += 2;
  }
  if (q < d.queries) longQueries<DotOrder::Tiled, 1, 8>(d, q);
}

// This level's kernels, for dispatchHalfDots.
struct Kernels {
  template <DotOrder Order, int N>
  static void shortRows(const HalfDots& d) {
    avx512::shortRows<Order, N>(d);
  }
  template <DotOrder Order>
  static void longRows(const HalfDots& d) {
    Order == DotOrder::Tiled ? longRowsTiled(d) : longRowsVec(d);
  }
};

}  // namespace

void dotsHalf(const HalfDots& d) { dispatchHalfDots<Kernels>(d); }

}  // namespace shoal::cpu::avx512
