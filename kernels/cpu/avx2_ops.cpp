// AVX2 versions of the float kernels (F32/F16/BF16 matrix kernels, half conversion, the
// activation quantizers, the softmax numerator and SwiGLU), bit-identical to the scalar
// reference; and the AVX2 kernel table.
//
// Compiled with -mavx2 -mfma -mf16c; reached only through the AVX2 table. No standard library
// templates or std:: math here (an out-of-line copy built for AVX2 could be linked into code
// that runs on any CPU); scalar fallbacks call the reference kernels instead.

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/ggml_order.h"
#include "kernels/cpu/reference_kernels.h"
#include "kernels/cpu/simd_kernels.h"

namespace shoal::cpu::avx2 {
namespace {

inline float hsum8(__m256 x) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// reduce16 of the 16 lanes lo (0..7), hi (8..15).
inline float reduce16(__m256 lo, __m256 hi) { return hsum8(_mm256_add_ps(hi, lo)); }

inline float fmaSingle(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// ---- element loaders: 8 consecutive elements as floats ----------------------------------------

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// ---- F32 / F16: the two orders ------------------------------------------------------------------

// DotOrder::Vec: 4 accumulators of 16 lanes over steps of 64 (each 16 lanes as two ymm).
template <typename T>
float vecOrderFull(const T* x, const T* y, int64_t full) {
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t i = 0; i < full; i += 64) {
    for (int j = 0; j < 8; ++j)
      acc[j] = _mm256_fmadd_ps(load8(x + i + 8 * j), load8(y + i + 8 * j), acc[j]);
  }
  // acc[2j], acc[2j+1] are lanes 0..7 and 8..15 of accumulator j.
  for (int h = 0; h < 2; ++h) {
    acc[h] = _mm256_add_ps(acc[h], acc[4 + h]);
    acc[2 + h] = _mm256_add_ps(acc[2 + h], acc[6 + h]);
    acc[h] = _mm256_add_ps(acc[h], acc[2 + h]);
  }
  return reduce16(acc[0], acc[1]);
}

// DotOrder::Tiled: one accumulator of 16 lanes, n % 16 == 0.
template <typename T>
float tiledOrder(const T* x, const T* y, int64_t n) {
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    lo = _mm256_fmadd_ps(load8(x + i), load8(y + i), lo);
    hi = _mm256_fmadd_ps(load8(x + i + 8), load8(y + i + 8), hi);
  }
  return reduce16(lo, hi);
}

float dotF32(const float* x, const float* y, int64_t n, DotOrder order) {
  if (order == DotOrder::Tiled) return tiledOrder(x, y, n);
  const int64_t full = n & ~int64_t{63};
  float sum = vecOrderFull(x, y, full);
  for (int64_t i = full; i < n; ++i) sum = fmaSingle(x[i], y[i], sum);
  return sum;
}

float dotHalf(const uint16_t* x, const uint16_t* y, int64_t n, DotOrder order) {
  if (order == DotOrder::Tiled) return tiledOrder(x, y, n);
  const int64_t full = n & ~int64_t{63};
  double sum = static_cast<double>(vecOrderFull(x, y, full));
  for (int64_t i = full; i < n; ++i) sum += static_cast<double>(_cvtsh_ss(x[i]) * _cvtsh_ss(y[i]));
  return static_cast<float>(sum);
}

// ---- BF16: vdpbf16ps pairs, emulated --------------------------------------------------------

// Lanes 8h..8h+7 of a vdpbf16ps step over 16 bf16 at p: dword j holds elements 2j (low half)
// and 2j+1 (high half); the odd product is added first.
inline __m256 dpbf16(const uint16_t* x, const uint16_t* y, __m256 acc) {
  const __m256i vx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i vy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y));
  const __m256i highMask = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m256 xOdd = _mm256_castsi256_ps(_mm256_and_si256(vx, highMask));
  const __m256 yOdd = _mm256_castsi256_ps(_mm256_and_si256(vy, highMask));
  const __m256 xEven = _mm256_castsi256_ps(_mm256_slli_epi32(vx, 16));
  const __m256 yEven = _mm256_castsi256_ps(_mm256_slli_epi32(vy, 16));
  acc = _mm256_fmadd_ps(xOdd, yOdd, acc);
  return _mm256_fmadd_ps(xEven, yEven, acc);
}

inline float bf16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float dotBF16(const uint16_t* x, const uint16_t* y, int64_t n, DotOrder order) {
  if (order == DotOrder::Tiled) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 32) {
      lo = dpbf16(x + i, y + i, lo);
      hi = dpbf16(x + i + 16, y + i + 16, hi);
    }
    return reduce16(lo, hi);
  }
  __m256 c1lo = _mm256_setzero_ps(), c1hi = _mm256_setzero_ps();
  __m256 c2lo = _mm256_setzero_ps(), c2hi = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    c1lo = dpbf16(x + i, y + i, c1lo);
    c1hi = dpbf16(x + i + 16, y + i + 16, c1hi);
    c2lo = dpbf16(x + i + 32, y + i + 32, c2lo);
    c2hi = dpbf16(x + i + 48, y + i + 48, c2hi);
  }
  double sum = 0;
  sum += static_cast<double>(reduce16(c1lo, c1hi));
  sum += static_cast<double>(reduce16(c2lo, c2hi));
  for (; i < n; ++i) sum += static_cast<double>(bf16(x[i]) * bf16(y[i]));
  return static_cast<float>(sum);
}

template <typename T, float (*Dot)(const T*, const T*, int64_t, DotOrder)>
void gemmFloat(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  for (int64_t r = rowBegin; r < rowEnd; ++r) {
    // Two rows ahead, into L2, in one burst per row. (The K-quant rows now spread theirs over
    // the row, which was faster: gemmK in x86_kquant_kernels.h. Not measured here yet.)
    const uint8_t* ahead = g.weights + static_cast<size_t>(r + 2) * g.weightStride;
    for (size_t i = 0; i < g.weightStride; i += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + i), _MM_HINT_T2);
    }
    const auto* w = reinterpret_cast<const T*>(g.weights + static_cast<size_t>(r) * g.weightStride);
    for (int64_t t = 0; t < g.tokens; ++t) {
      const auto* a = reinterpret_cast<const T*>(g.act + static_cast<size_t>(t) * g.actStride);
      g.y[t * g.ldy + r] = Dot(w, a, g.cols, g.order);
    }
  }
}

// ---- conversions --------------------------------------------------------------------------

void halfToFloat(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load8(x + i));
  for (; i < n; ++i) y[i] = _cvtsh_ss(x[i]);
}

void floatToHalf(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

void convertF16(const float* x, void* dst, int64_t n) {
  floatToHalf(x, static_cast<uint16_t*>(dst), n);
}

// ggml's x86 quantize_row_q8_0/q8_1 (see reference_convert.cpp): 32 quants of one block, their
// sum, and the block scale d.
inline __m256i quantizeBlock(const float* x, float& d, int32_t& sum) {
  const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
  const __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1));
  m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v2));
  m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v3));
  __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  d = amax / 127.0f;
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), kRound));
  const __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), kRound));
  const __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), kRound));
  const __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), kRound));
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
  __m128i s4 = _mm_add_epi32(_mm256_extracti128_si256(s, 1), _mm256_castsi256_si128(s));
  s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
  sum = _mm_cvtsi128_si32(s4);
  // Packing interleaves the 128-bit halves; the permute puts the 32 bytes back in order.
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void quantizeQ8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float d;
    int32_t sum;
    const __m256i q = quantizeBlock(x + b * kQK, d, sum);
    y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), q);
  }
}

void quantizeQ8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float d;
    int32_t sum;
    const __m256i q = quantizeBlock(x + b * kQK, d, sum);
    y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    y[b].s = _cvtss_sh(d * static_cast<float>(sum), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), q);
  }
}

// ggml's quantize_row_q8_K_ref, which its x86 build runs for Q8_K (engine/gguf/quantize.cpp
// reproduces it in scalar): per 256 elements the signed value of largest magnitude (the first
// on ties; NaN never), iscale = -127 / it, q = min(127, nearest_int(iscale * x)) kept as its
// low byte, the sums of each 16 quants, d = 1 / iscale. nearest_int is ggml's rounding trick
// (add 1.5 * 2^23, keep the mantissa bits), done here in the same float and integer steps: it
// rounds half to even for ordinary products, and for the infinities and NaNs that a block of
// magnitudes below 127 / FLT_MAX produces (iscale overflows) it gives the same odd values as
// the scalar code, whose low bytes are what ggml stores.
void quantizeQ8_K(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 256; ++b, x += 256) {
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < 256; j += 8) {
      m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), m);  // NaN: keeps m
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (amax == 0.0f) {
      std::memset(&y[b], 0, sizeof y[b]);
      continue;
    }
    int first = 0;
    for (int j = 0; j < 256; j += 8) {
      const __m256 ax = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j));
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(ax, _mm256_set1_ps(amax), _CMP_EQ_OQ));
      if (hit != 0) {
        first = j + __builtin_ctz(static_cast<unsigned>(hit));
        break;
      }
    }
    const float iscale = -127.f / x[first];
    const __m256 is = _mm256_set1_ps(iscale);
    for (int c = 0; c < 8; ++c) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 v = _mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * c + 8 * k));
        const __m256i bits = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.f)));
        const __m256i rounded = _mm256_sub_epi32(
            _mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
        // The low byte, sign-extended (what the scalar code stores and sums), so that packing
        // below saturates nothing.
        q[k] = _mm256_srai_epi32(
            _mm256_slli_epi32(_mm256_min_epi32(rounded, _mm256_set1_epi32(127)), 24), 24);
      }
      const __m256i packed =
          _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(y[b].qs + 32 * c),
          _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
      // bsums 2c and 2c+1: the sums of q[0] + q[1] and of q[2] + q[3].
      const __m256i h =
          _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
      const __m128i h4 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
      const __m128i h2 = _mm_hadd_epi32(h4, h4);  // [bsum 2c, bsum 2c+1, ..]
      y[b].bsums[2 * c] = static_cast<int16_t>(_mm_cvtsi128_si32(h2));
      y[b].bsums[2 * c + 1] = static_cast<int16_t>(_mm_extract_epi32(h2, 1));
    }
    y[b].d = 1 / iscale;
  }
}

// ---- exp, softmax, SwiGLU -------------------------------------------------------------------

// ggml_v_expf's AVX-512 arithmetic (ggml_order.h) on 8 lanes. The final scalef by 2^n is exact
// as a multiply by a constructed power of two while n stays in [-126, 127]; otherwise (inputs
// beyond about +-87) the lanes are redone in scalar. Returns false in that case, leaving out
// untouched.
inline bool exp8(__m256 x, __m256& out) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 inRange = _mm256_and_ps(_mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_GE_OQ),
                                       _mm256_cmp_ps(n, _mm256_set1_ps(127.0f), _CMP_LE_OQ));
  if (_mm256_movemask_ps(inRange) != 0xFF) return false;
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(
          _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
          _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
  const __m256i exponent =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  out = _mm256_mul_ps(j, _mm256_castsi256_ps(exponent));
  return true;
}

inline __m256 exp8OrScalar(__m256 x) {
  __m256 out;
  if (exp8(x, out)) return out;
  alignas(32) float v[8];
  _mm256_store_ps(v, x);
  for (float& e : v) e = order::exp(e);
  return _mm256_load_ps(v);
}

double softmaxExp(const float* x, float max, float* y, int64_t n) {
  const __m256 m = _mm256_set1_ps(max);
  double sum = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 lo = exp8OrScalar(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    const __m256 hi = exp8OrScalar(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m));
    _mm256_storeu_ps(y + i, lo);
    _mm256_storeu_ps(y + i + 8, hi);
    sum += static_cast<double>(reduce16(lo, hi));
  }
  if (i < n) sum += ref::softmaxExp(x + i, max, y + i, n - i);
  return sum;
}

inline __m256 silu8(__m256 x) {
  const __m256 e = exp8OrScalar(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
  const int64_t full = n - n % 16;
  for (int64_t i = 0; i < full; i += 8) {
    _mm256_storeu_ps(y + i,
                     _mm256_mul_ps(silu8(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  }
  if (full < n) ref::swiglu(gate + full, up + full, y + full, n - full);
}

KernelTable makeTable() {
  KernelTable t = referenceKernels();
  t.isa = Isa::Avx2;
  auto set = [&t](WeightKind k, GemmFn fn) { t.gemm[static_cast<int>(k)] = fn; };
  set(WeightKind::F32, gemmFloat<float, dotF32>);
  set(WeightKind::F16, gemmFloat<uint16_t, dotHalf>);
  set(WeightKind::BF16, gemmFloat<uint16_t, dotBF16>);
  set(WeightKind::Q4_0, gemmQ4_0);
  set(WeightKind::Q4_1, gemmQ4_1);
  set(WeightKind::Q5_0, gemmQ5_0);
  set(WeightKind::Q5_1, gemmQ5_1);
  set(WeightKind::Q8_0, gemmQ8_0);
  set(WeightKind::Q4_K, gemmQ4_K);
  set(WeightKind::Q5_K, gemmQ5_K);
  set(WeightKind::Q6_K, gemmQ6_K);
  set(WeightKind::IQ4_NL, gemmIQ4_NL);
  set(WeightKind::MXFP4, gemmMXFP4);
  set(WeightKind::Q2_K, gemmQ2_K);
  set(WeightKind::Q3_K, gemmQ3_K);
  set(WeightKind::IQ4_XS, gemmIQ4_XS);
  t.rowGroups[static_cast<int>(WeightKind::Q4_0)] = true;  // avx2_quant_groups.h
  t.rowGroups[static_cast<int>(WeightKind::Q4_1)] = true;
  t.rowGroups[static_cast<int>(WeightKind::MXFP4)] = true;   // avx2_q4_0_repacked.h
  t.rowGroups[static_cast<int>(WeightKind::IQ4_NL)] = true;  // Q4_0's groups, that kernel
  t.rowGroups[static_cast<int>(WeightKind::Q4_K)] = true;    // avx2_kquant_groups.h
  t.rowGroups[static_cast<int>(WeightKind::Q6_K)] = true;
  t.convert[static_cast<int>(ActKind::F16)] = convertF16;
  t.convert[static_cast<int>(ActKind::Q8_0)] = quantizeQ8_0;
  t.convert[static_cast<int>(ActKind::Q8_1)] = quantizeQ8_1;
  t.convert[static_cast<int>(ActKind::Q8_K)] = quantizeQ8_K;
  t.halfToFloat = halfToFloat;
  t.floatToHalf = floatToHalf;
  t.dotF16 = dotHalf;
  t.dotsF16 = dotsHalf;
  t.softmaxExp = softmaxExp;
  t.swiglu = swiglu;
  return t;
}

}  // namespace
}  // namespace shoal::cpu::avx2

namespace shoal::cpu {

const KernelTable* avx2Kernels() {
  static const KernelTable table = avx2::makeTable();
  return &table;
}

}  // namespace shoal::cpu
