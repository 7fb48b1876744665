// AVX-512 f16 dot products that share one argument (KernelTable::dotsF16): attention's K·q over
// the cached positions and V·p over the value dimensions.
//
// Each dot keeps exactly the arithmetic of dotF16 in its order (the AVX2 kernel's two ymm halves
// are one zmm here, lane for lane), so the results are bit-identical to one call per row; what
// changes is how the work overlaps:
//  - short rows (K·q, n = head dimension): the shared query is converted to f32 once, each row's
//    products are summed per lane, and 16 rows' lanes are then reduced together by a transposing
//    tree that adds the same lane pairs as _mm512_reduce_add_ps does for each row alone;
//  - long rows (V·p, n = the visible positions): several rows stream side by side, so one load
//    and conversion of the shared probabilities feeds all of them, and their accumulator chains
//    (one per row in the tiled order, whose single chain made V·p latency-bound) overlap.
//
// Compiled for AVX-512; reached only through the AVX-512 table.

#include <immintrin.h>

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

// One row's 16 lanes before the final reduction, y already in f32. Tiled: one accumulator over
// steps of 16. Vec: four accumulators over steps of 64, folded as ggml's GGML_F32x16_REDUCE.
template <DotOrder Order>
inline __m512 rowLanes(const uint16_t* x, const float* y, int64_t n) {
  if constexpr (Order == DotOrder::Tiled) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16)
      acc = _mm512_fmadd_ps(load16(x + i), _mm512_loadu_ps(y + i), acc);
    return acc;
  } else {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    for (int64_t i = 0; i < n; i += 64)
      for (int j = 0; j < 4; ++j)
        acc[j] = _mm512_fmadd_ps(load16(x + i + 16 * j), _mm512_loadu_ps(y + i + 16 * j), acc[j]);
    acc[0] = _mm512_add_ps(acc[0], acc[2]);
    acc[1] = _mm512_add_ps(acc[1], acc[3]);
    return _mm512_add_ps(acc[0], acc[1]);
  }
}

constexpr int64_t kShortRow = 256;  // longest n whose shared argument is held as f32

template <DotOrder Order>
void shortRows(const uint16_t* rows, int64_t stride, const uint16_t* y, int64_t n, int64_t count,
               float* out) {
  alignas(64) float yf[kShortRow];
  for (int64_t i = 0; i < n; i += 16) _mm512_store_ps(yf + i, load16(y + i));
  __m512 lanes[16];
  for (int64_t j = 0; j < count; j += 16) {
    const int64_t m = count - j < 16 ? count - j : 16;
    for (int64_t r = 0; r < m; ++r) lanes[r] = rowLanes<Order>(rows + (j + r) * stride, yf, n);
    for (int64_t r = m; r < 16; ++r) lanes[r] = _mm512_setzero_ps();
    _mm512_mask_storeu_ps(out + j, static_cast<__mmask16>((1u << m) - 1), reduce16x16(lanes));
  }
}

// R rows side by side over long n, each with its own accumulators.
template <int R>
void longRowsTiled(const uint16_t* rows, int64_t stride, const uint16_t* y, int64_t n, float* out) {
  __m512 acc[R];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 yv = load16(y + i);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(load16(rows + r * stride + i), yv, acc[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = reduce16(acc[r]);
}

template <int R>
void longRowsVec(const uint16_t* rows, int64_t stride, const uint16_t* y, int64_t n, float* out) {
  __m512 acc[R][4];
  for (auto& row : acc)
    for (auto& a : row) a = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 64) {
    __m512 yv[4];
    for (int j = 0; j < 4; ++j) yv[j] = load16(y + i + 16 * j);
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 4; ++j)
        acc[r][j] = _mm512_fmadd_ps(load16(rows + r * stride + i + 16 * j), yv[j], acc[r][j]);
  }
  for (int r = 0; r < R; ++r) {
    const __m512 a = _mm512_add_ps(acc[r][0], acc[r][2]), b = _mm512_add_ps(acc[r][1], acc[r][3]);
    out[r] = reduce16(_mm512_add_ps(a, b));
  }
}

}  // namespace

void dotsHalf(const uint16_t* rows, int64_t stride, const uint16_t* y, int64_t n, int64_t count,
              DotOrder order, float* out) {
  const bool tiled = order == DotOrder::Tiled;
  if (n % (tiled ? 16 : 64) != 0 || n == 0) {
    // A ragged Vec tail is summed in double one element at a time: the one-row kernel does that.
    const auto dot = avx2Kernels()->dotF16;
    for (int64_t j = 0; j < count; ++j) out[j] = dot(rows + j * stride, y, n, order);
    return;
  }
  if (n <= kShortRow) {
    if (tiled)
      shortRows<DotOrder::Tiled>(rows, stride, y, n, count, out);
    else
      shortRows<DotOrder::Vec>(rows, stride, y, n, count, out);
    return;
  }
  int64_t j = 0;
  if (tiled) {
    for (; j + 8 <= count; j += 8) longRowsTiled<8>(rows + j * stride, stride, y, n, out + j);
    for (; j < count; ++j) longRowsTiled<1>(rows + j * stride, stride, y, n, out + j);
  } else {
    for (; j + 4 <= count; j += 4) longRowsVec<4>(rows + j * stride, stride, y, n, out + j);
    for (; j < count; ++j) longRowsVec<1>(rows + j * stride, stride, y, n, out + j);
  }
}

}  // namespace shoal::cpu::avx512
