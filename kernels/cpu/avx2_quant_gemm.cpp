// AVX2 matrix kernels for the quantized weight types, bit-identical to the scalar reference
// (reference_dots.cpp): the same integer lanes (vpmaddubsw + vpmaddwd, exact), the same fused
// per-block accumulation and the same horizontal sum as ggml's AVX2 vec_dot kernels.
//
// Compiled with -mavx2 -mfma -mf16c; reached only through the AVX2 kernel table. No standard
// library templates here: a weak instantiation compiled for AVX2 could be picked by the linker
// for code that runs on any CPU.

#include <immintrin.h>

#include <cstring>

#include "engine/gguf/quant_common.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/cpu/x86_kquant_kernels.h"
// After x86_kquant_kernels.h, whose helpers it uses.
#include "kernels/cpu/avx2_kquant_groups.h"
#include "kernels/cpu/avx2_q4_0_repacked.h"
#include "kernels/cpu/avx2_quant_groups.h"

namespace shoal::cpu::avx2 {
namespace {

// The 32 nibbles of a Q4/Q5 block as bytes in element order (low nibbles are elements 0..15).
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  return _mm256_and_si256(both, _mm256_set1_epi8(0xF));
}

// 0x10 in byte j where bit j of the 32-bit qh is set (Q5 fifth bits).
inline __m256i fifthBits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  // Byte j takes byte j/8 of `bits`, then is tested against bit j%8.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i select = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Lane k (of 8) = the integer dot of elements 4k..4k+3; u unsigned (<= 31), s signed.
inline __m256i dotUnsigned(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
// Both signed: move the sign of x onto y (ggml does the same; products are unchanged).
inline __m256i dotSigned(__m256i x, __m256i y) {
  return dotUnsigned(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// Per weight type: how a block unpacks into 32 bytes, whether they are signed, and whether the
// block has a minimum (then the activation block carries s = d * sum(q)).
struct Q4_0 {
  using W = BlockQ4_0;
  using A = BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static __m256i load(const W& b) { return _mm256_sub_epi8(nibbles(b.qs), _mm256_set1_epi8(8)); }
};
struct Q4_1 {
  using W = BlockQ4_1;
  using A = BlockQ8_1;
  static constexpr bool kSigned = false, kMin = true;
  static __m256i load(const W& b) { return nibbles(b.qs); }
};
struct Q5_0 {
  using W = BlockQ5_0;
  using A = BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static __m256i load(const W& b) {
    return _mm256_sub_epi8(_mm256_or_si256(nibbles(b.qs), fifthBits(b.qh)), _mm256_set1_epi8(16));
  }
};
struct Q5_1 {
  using W = BlockQ5_1;
  using A = BlockQ8_1;
  static constexpr bool kSigned = false, kMin = true;
  static __m256i load(const W& b) { return _mm256_or_si256(nibbles(b.qs), fifthBits(b.qh)); }
};
struct Q8_0 {
  using W = BlockQ8_0;
  using A = BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static __m256i load(const W& b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
  }
};

// IQ4_NL: the nibbles index a 16-level table (vpshufb), signed. Its block has Q4_0's layout.
struct IQ4NL {
  using W = BlockQ4_0;
  using A = BlockQ8_0;
  static constexpr bool kSigned = true, kMin = false;
  static __m256i load(const W& b) {
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
    return _mm256_shuffle_epi8(table, nibbles(b.qs));
  }
};

// Four 32-bit words (two f16 each) as 8 floats: [lo0, hi0, lo1, hi1, ...].
inline __m256 halfPairs(const void* p0, const void* p1, const void* p2, const void* p3) {
  uint32_t v[4];
  std::memcpy(&v[0], p0, 4);
  std::memcpy(&v[1], p1, 4);
  std::memcpy(&v[2], p2, 4);
  std::memcpy(&v[3], p3, 4);
  return _mm256_cvtph_ps(_mm_set_epi32(static_cast<int>(v[3]), static_cast<int>(v[2]),
                                       static_cast<int>(v[1]), static_cast<int>(v[0])));
}

inline __m256 lane(__m256 v, int i) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(i)); }

// R weight rows x T tokens at once (T == 1, or R <= 2 and T <= 4): every weight block is
// unpacked once per T tokens, every activation block loaded once per R rows. Each (row, token)
// keeps its own accumulator and sums blocks in order, so the tile shape does not change any
// result.
template <class Q, int R, int T>
void tile(const GemmArgs& g, int64_t r0, int64_t t0) {
  static_assert(T == 1 ? R <= 4 : (R <= 2 && T <= 4));
  using W = typename Q::W;
  using A = typename Q::A;
  const int64_t blocks = g.cols / kQK;
  const W* w[R];
  const A* a[T];
  for (int r = 0; r < R; ++r) {
    w[r] = reinterpret_cast<const W*>(g.weights + static_cast<size_t>(r0 + r) * g.weightStride);
  }
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const A*>(g.act + static_cast<size_t>(t0 + t) * g.actStride);
  }
  const size_t stepBytes = R * sizeof(W);
  const char* nextTile = reinterpret_cast<const char*>(w[0]) + R * g.weightStride;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  // Minimum terms, one lane per (row, token): lane 2r + 1 with one token (where the row's m
  // sits among its scales), lane 4r + t otherwise. One fused multiply-add per lane per block,
  // in block order, as ggml's scalar summs.
  __m256 summs = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    // The next tile's rows as one stream, front to back (see avx512_quant_gemm.cpp).
    for (size_t o = 0; o < stepBytes; o += 64) {
      _mm_prefetch(nextTile + static_cast<size_t>(b) * stepBytes + o, _MM_HINT_T2);
    }
    __m256i y[T];
    for (int t = 0; t < T; ++t)
      y[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[t][b].qs));
    // [d0, m0, d1, m1, ...] of the rows and [d0, s0, d1, s1, ...] of the tokens (32-bit reads
    // at d: without a minimum the odd lanes hold the first quants, and go unused).
    const __m256 dm = halfPairs(&w[0][b].d, &w[R > 1 ? 1 : 0][b].d, &w[R > 2 ? 2 : 0][b].d,
                                &w[R > 3 ? 3 : 0][b].d);
    const __m256 ds = halfPairs(&a[0][b].d, &a[T > 1 ? 1 : 0][b].d, &a[T > 2 ? 2 : 0][b].d,
                                &a[T > 3 ? 3 : 0][b].d);
    __m256 dw[R], dy[T];
    for (int r = 0; r < R; ++r) dw[r] = lane(dm, 2 * r);
    for (int t = 0; t < T; ++t) dy[t] = lane(ds, 2 * t);
    if constexpr (Q::kMin && T == 1) {
      summs = _mm256_fmadd_ps(dm, lane(ds, 1), summs);
    } else if constexpr (Q::kMin) {
      const __m256 mins = _mm256_permutevar8x32_ps(dm, _mm256_set_epi32(3, 3, 3, 3, 1, 1, 1, 1));
      const __m256 sums = _mm256_permutevar8x32_ps(ds, _mm256_set_epi32(7, 5, 3, 1, 7, 5, 3, 1));
      summs = _mm256_fmadd_ps(mins, sums, summs);
    }
    for (int r = 0; r < R; ++r) {
      const __m256i q = Q::load(w[r][b]);
      const __m256i qAbs = Q::kSigned ? _mm256_sign_epi8(q, q) : q;
      for (int t = 0; t < T; ++t) {
        const __m256i lanes =
            Q::kSigned ? dotUnsigned(qAbs, _mm256_sign_epi8(y[t], q)) : dotUnsigned(q, y[t]);
        acc[r][t] =
            _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dy[t]), _mm256_cvtepi32_ps(lanes), acc[r][t]);
      }
    }
  }
  alignas(32) float m[8];
  _mm256_store_ps(m, summs);
  for (int t = 0; t < T; ++t) {
    float* out = g.y + (t0 + t) * g.ldy + r0;
    for (int r = 0; r < R; ++r) {
      const float minTerm = m[T == 1 ? 2 * r + 1 : 4 * r + t];
      out[r] = Q::kMin ? hsum8(acc[r][t]) + minTerm : hsum8(acc[r][t]);
    }
  }
}

// Tokens four at a time, the last 1-3 in one tile too (one weight unpack per tile).
template <class Q, int R>
void rowTile(const GemmArgs& g, int64_t r0) {
  int64_t t = 0;
  for (; t + 4 <= g.tokens; t += 4) tile<Q, R, 4>(g, r0, t);
  switch (g.tokens - t) {
    case 3:
      tile<Q, R, 3>(g, r0, t);
      break;
    case 2:
      tile<Q, R, 2>(g, r0, t);
      break;
    case 1:
      tile<Q, R, 1>(g, r0, t);
      break;
    default:
      break;
  }
}

template <class Q>
void gemm(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  int64_t r = rowBegin;
  if (g.tokens == 1) {
    for (; r + 4 <= rowEnd; r += 4) tile<Q, 4, 1>(g, r, 0);
  } else {
    for (; r + 2 <= rowEnd; r += 2) rowTile<Q, 2>(g, r);
  }
  for (; r < rowEnd; ++r) rowTile<Q, 1>(g, r);
}

// MXFP4: the nibbles index the doubled E2M1 levels (vpshufb), signed; the block's scale is an
// E8M0 exponent.
struct MXFP4 {
  using W = BlockMXFP4;
  static __m256i load(const W& b) {
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    return _mm256_shuffle_epi8(table, nibbles(b.qs));
  }
  // gguf::e8m0Half's bits, here: an inline function from a header compiled for AVX2 could be
  // the copy the linker keeps for every caller.
  static float scale(const W& b) {
    const uint32_t bits = b.e < 2 ? 0x00200000u << b.e : static_cast<uint32_t>(b.e - 1) << 23;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  static int8_t level(int nibble) { return gguf::kMxfp4Values[nibble]; }
};

// IQ4_NL's table-level view for the vec order below (the tiles use IQ4NL above).
struct IQ4NLVec {
  using W = BlockQ4_0;
  static __m256i load(const W& b) { return IQ4NL::load(b); }
  static float scale(const W& b) { return half(b.d); }
  static int8_t level(int nibble) { return gguf::kIq4NlValues[nibble]; }
};

// ggml_vec_dot_iq4_nl_q8_0 and ggml_vec_dot_mxfp4_q8_0 (AVX2): even and odd blocks in two
// accumulators, added before the horizontal sum; an odd last block fused into the total in
// scalar.
template <typename T>
float dotTableVec(const typename T::W* x, const BlockQ8_0* y, int64_t blocks) {
  __m256 even = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
  int64_t b = 0;
  auto step = [&](int64_t i, __m256 acc) {
    const __m256i q = T::load(x[i]);
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    const __m256i lanes = dotUnsigned(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a, q));
    return _mm256_fmadd_ps(_mm256_set1_ps(half(y[i].d) * T::scale(x[i])), _mm256_cvtepi32_ps(lanes),
                           acc);
  };
  for (; b + 1 < blocks; b += 2) {
    even = step(b, even);
    odd = step(b + 1, odd);
  }
  float sum = hsum8(_mm256_add_ps(even, odd));
  for (; b < blocks; ++b) {
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) {
      s += y[b].qs[j] * T::level(x[b].qs[j] & 0xF);
      s += y[b].qs[j + 16] * T::level(x[b].qs[j] >> 4);
    }
    sum = fmaSingle(half(y[b].d) * T::scale(x[b]), static_cast<float>(s), sum);
  }
  return sum;
}

// The vec order row by row, for every token.
template <typename T>
void gemmTableVec(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  const int64_t blocks = g.cols / kQK;
  for (int64_t r = rowBegin; r < rowEnd; ++r) {
    const auto* x =
        reinterpret_cast<const typename T::W*>(g.weights + static_cast<size_t>(r) * g.weightStride);
    for (int64_t t = 0; t < g.tokens; ++t) {
      const auto* y =
          reinterpret_cast<const BlockQ8_0*>(g.act + static_cast<size_t>(t) * g.actStride);
      g.y[t * g.ldy + r] = dotTableVec<T>(x, y, blocks);
    }
  }
}

// IQ4_NL: the repacked order (tensors of 8k rows) through Q4_0's repacked kernel
// (avx2_q4_0_repacked.h), in row groups or the file layout; the tiles (tinyBLAS's one
// accumulator) for DotOrder::Tiled, the two-accumulator vec order row by row otherwise.
void gemmIQ4NL(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  if (g.order == DotOrder::Repacked) {
    gemmQ4_0Repacked<IQ4NLWeights8>(g, rowBegin, rowEnd);
    return;
  }
  if (g.rowGroups) {
    // The other orders on a grouped matrix (not a shape the CPU stage makes: a grouped matrix
    // has 8k rows), from the rows taken out.
    ungroupedRows<WeightKind::IQ4_NL, gemmIQ4NL>(g, rowBegin / kGroupRows * kGroupRows, rowBegin,
                                                 rowEnd);
    return;
  }
  if (g.order == DotOrder::Tiled) return gemm<IQ4NL>(g, rowBegin, rowEnd);
  gemmTableVec<IQ4NLVec>(g, rowBegin, rowEnd);
}

// ---- K-quants (ggml_vec_dot_q{4,5,6}_K_q8_K, AVX2) -------------------------------------------

// The K-quant traits of this level (x86_kquant_kernels.h): one 32-element part per step, the
// lanes of ggml's AVX2 kernels for the block being sum_i madd(scale_i, maddubs(q_i, a_i)) -
// offset.
struct Avx2KSteps {
  static constexpr int kSteps = 8, kStepBytes = 32;
  using Acc = __m256i;
  static Acc zero() { return _mm256_setzero_si256(); }
  static Acc accumulate(Acc sum, Acc q, Acc scale, const int8_t* a) {
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    return _mm256_add_epi32(sum, _mm256_madd_epi16(scale, _mm256_maddubs_epi16(q, y)));
  }
  static __m256i fold(Acc sum) { return sum; }
};

// int16 j of scales16 in all 16 lanes (one byte shuffle: bytes 2j, 2j+1 everywhere).
inline __m256i broadcastScale(__m256i scales16BothHalves, int j) {
  return _mm256_shuffle_epi8(scales16BothHalves,
                             _mm256_set1_epi16(static_cast<int16_t>(((2 * j + 1) << 8) | (2 * j))));
}

struct Q4KTraits : Avx2KSteps {
  static constexpr int kTokens = 4;
  using Block = BlockQ4_K;
  static constexpr bool kHasMin = true, kHasOffset = false;
  struct Context {
    __m256i scales;  // the 8 scales as int16, in both 128-bit halves
  };
  static void prepare(const Block& x, Context& c, __m128i& mins) {
    __m128i scales;
    scalesAndMins(x.scales, scales, mins);
    c.scales = _mm256_broadcastsi128_si256(scales);
  }
  // Parts 2j and 2j+1 are the low and high nibbles of qs[32j..32j+31].
  static void unpack(const Block& x, const Context& c, int i, __m256i& q, __m256i& scale) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * (i / 2)));
    q = _mm256_and_si256(i % 2 == 0 ? bits : _mm256_srli_epi16(bits, 4), _mm256_set1_epi8(0xF));
    scale = broadcastScale(c.scales, i);
  }
  static float d(const Block& x) { return half(x.d); }
  static float dmin(const Block& x) { return half(x.dmin); }
};

struct Q5KTraits : Avx2KSteps {
  static constexpr int kTokens = 4;
  using Block = BlockQ5_K;
  static constexpr bool kHasMin = true, kHasOffset = false;
  struct Context {
    __m256i scales;
    __m256i high;  // qh: bit i of byte l is the fifth bit of element l of part i
  };
  static void prepare(const Block& x, Context& c, __m128i& mins) {
    __m128i scales;
    scalesAndMins(x.scales, scales, mins);
    c.scales = _mm256_broadcastsi128_si256(scales);
    c.high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh));
  }
  static void unpack(const Block& x, const Context& c, int i, __m256i& q, __m256i& scale) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * (i / 2)));
    const __m256i nib =
        _mm256_and_si256(i % 2 == 0 ? bits : _mm256_srli_epi16(bits, 4), _mm256_set1_epi8(0xF));
    const __m256i fifth = _mm256_and_si256(_mm256_srli_epi16(c.high, i), _mm256_set1_epi8(1));
    q = _mm256_or_si256(nib, _mm256_slli_epi16(fifth, 4));
    scale = broadcastScale(c.scales, i);
  }
  static float d(const Block& x) { return half(x.d); }
  static float dmin(const Block& x) { return half(x.dmin); }
};

// Q6_K: part i = 4h + p (h: which 128 elements) holds 6-bit quants (0..63): the low 4 bits from
// ql[64h + 32(p&1) ..] (high nibbles for p >= 2), the top 2 from bits 2p..2p+1 of qh[32h ..];
// two int8 scales per part, one per 16 elements (the two 128-bit halves). The -32 bias enters
// as 32 * sum(scale * bsum) per block and token.
struct Q6KTraits : Avx2KSteps {
  static constexpr int kTokens = 8;
  using Block = BlockQ6_K;
  static constexpr bool kHasMin = false, kHasOffset = true;
  struct Context {
    __m256i scales16;  // the 16 scales as int16, against the token's 16 bsums
  };
  static void prepare(const Block& x, Context& c, __m128i& /*mins*/) {
    c.scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
  }
  static void unpack(const Block& x, const Context&, int i, __m256i& q, __m256i& scale) {
    const int h = i / 4, p = i % 4;
    const __m256i src =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.ql + 64 * h + 32 * (p % 2)));
    const __m256i nib =
        _mm256_and_si256(p < 2 ? src : _mm256_srli_epi16(src, 4), _mm256_set1_epi8(0xF));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh + 32 * h));
    const __m256i top = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), _mm256_set1_epi8(3));
    q = _mm256_or_si256(nib, _mm256_slli_epi16(top, 4));
    const int sc = 8 * h + 2 * p;
    scale = _mm256_set_m128i(_mm_set1_epi16(x.scales[sc + 1]), _mm_set1_epi16(x.scales[sc]));
  }
  static __m256i offset(const Context& c, const BlockQ8_K& y) {
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
    return _mm256_slli_epi32(_mm256_madd_epi16(bsums, c.scales16), 5);
  }
  static __m256i subtractOffset(__m256i sum, const Context& c, const BlockQ8_K& y) {
    return _mm256_sub_epi32(sum, offset(c, y));
  }
  static float d(const Block& x) { return half(x.d); }
  static float dmin(const Block&) { return 0.0f; }
};

// ---- Q2_K, Q3_K, IQ4_XS (ggml_vec_dot_{q2_K,q3_K,iq4_xs}_q8_K, AVX2) -------------------------
// Each block's eight integer lanes as ggml's kernels form them (lane k: elements 4k..4k+3 of
// every 32, times their scale); the vec order scales them per block into eight float lanes, the
// tiled order takes their total (tiledStep). Row by row (gemmK) for the vec order, and for
// Q2_K's repacked ones; Q3_K's and IQ4_XS's tiled order in eight-row tiles (Q3KTraits,
// IQ4XSTraits below).

// The scales of 32-element part i of a Q2_K/Q3_K block, sub-blocks 2i (elements 0..15) and
// 2i+1, from the block's 16 scales in one register (s0..s7 | s8..s15): one byte shuffle per part
// (two broadcasts and an insert before; ggml's AVX2 kernels pick their scales by shuffles too).
// Part i takes word 2(i % 4) of its half into the low 128-bit lane, word 2(i % 4) + 1 into
// the high one.
struct PartScales {
  __m256i low, high;  // [s0..s7 | s0..s7], [s8..s15 | s8..s15]
  PartScales() = default;
  explicit PartScales(__m256i scales)
      : low(_mm256_permute4x64_epi64(scales, 0x44)), high(_mm256_permute4x64_epi64(scales, 0xEE)) {}
  __m256i part(int i) const {
    const int w = 2 * (i % 4);  // word w to the low lane, w + 1 to the high one
    const __m256i pick =
        _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(0x0202 * w + 0x0302)),
                         _mm_set1_epi16(static_cast<int16_t>(0x0202 * w + 0x0100)));
    return _mm256_shuffle_epi8(i < 4 ? low : high, pick);
  }
};

float dotQ2_K(const BlockQ2_K* x, const BlockQ8_K* y, int64_t blocks, DotOrder order,
              const uint8_t* ahead, const __m128i* /*pairs: Q4_K/Q5_K only*/) {
  __m256 acc = _mm256_setzero_ps();
  float tiled = 0.0f;
  __m128 repacked = _mm_setzero_ps();  // [s1 terms, s2 terms] (the repacked orders)
  for (int64_t b = 0; b < blocks; ++b) {
    prefetchBlock<BlockQ2_K>(ahead, b);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales));
    const __m128i mins8 = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0xF));
    const __m256i minLanes =
        _mm256_madd_epi16(_mm256_cvtepi8_epi16(mins8),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].bsums)));
    const PartScales scales(_mm256_cvtepi8_epi16(_mm_and_si128(packed, _mm_set1_epi8(0xF))));
    __m256i halves[2];  // the lanes of elements 0-127 and 128-255
    for (int h = 0; h < 2; ++h) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 32 * h));
      halves[h] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const int i = 4 * h + g;
        const __m256i q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * g), _mm256_set1_epi8(3));
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs + 32 * i));
        halves[h] = _mm256_add_epi32(halves[h],
                                     _mm256_madd_epi16(scales.part(i), _mm256_maddubs_epi16(q, a)));
      }
    }
    const __m256i lanes = _mm256_add_epi32(halves[0], halves[1]);
    if (order == DotOrder::Repacked || order == DotOrder::RepackedGemm) {
      // llama.cpp's x86 repacked Q2_K (reference_dots.cpp): [s1, s2] times [y.d * d, y.d * dmin]
      // fused once per block (gemv) or per half (gemm; minLanes' 128-bit halves are the halves'
      // minimum terms).
      const __m128 scales2 = scalePair(x[b], y[b].d);
      const __m128i minLo = _mm256_castsi256_si128(minLanes);
      const __m128i minHi = _mm256_extracti128_si256(minLanes, 1);
      if (order == DotOrder::RepackedGemm) {
        for (int h = 0; h < 2; ++h) {
          const __m128i totals = _mm_unpacklo_epi32(_mm_cvtsi32_si128(hsumInt(halves[h])),
                                                    _mm_cvtsi32_si128(hsumInt(h ? minHi : minLo)));
          repacked = _mm_fmadd_ps(_mm_cvtepi32_ps(totals), scales2, repacked);
        }
      } else {
        const __m128i totals = _mm_unpacklo_epi32(_mm_cvtsi32_si128(hsumInt(lanes)),
                                                  _mm_cvtsi32_si128(hsumInt(minLanes)));
        repacked = _mm_fmadd_ps(_mm_cvtepi32_ps(totals), scales2, repacked);
      }
      continue;
    }
    if (order == DotOrder::Tiled) {
      tiled =
          tiledStep(tiled, lanes, hsumInt(minLanes), half(x[b].d), half(x[b].dmin), y[b].d, true);
      continue;
    }
    const float d = y[b].d * half(x[b].d);
    const float dmin = -y[b].d * half(x[b].dmin);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(minLanes), acc);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
  }
  if (order == DotOrder::Repacked || order == DotOrder::RepackedGemm) {
    return _mm_cvtss_f32(_mm_sub_ss(repacked, _mm_movehdup_ps(repacked)));
  }
  return order == DotOrder::Tiled ? tiled : hsum8(acc);
}

// Q3_K's 16 scales (6 bits, biased by 32) as int16, from the 12 packed bytes: four 32-bit words
// of four scales each (low nibbles of bytes 0-7, then their high nibbles, each with two bits
// of bytes 8-11 on top).
inline __m256i q3KScales(const uint8_t packed[12]) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  constexpr uint32_t kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  const __m128i bytes =
      _mm_set_epi32(static_cast<int>(((u[1] >> 4) & kLow4) | (((u[2] >> 6) & kLow2) << 4)),
                    static_cast<int>(((u[0] >> 4) & kLow4) | (((u[2] >> 4) & kLow2) << 4)),
                    static_cast<int>((u[1] & kLow4) | (((u[2] >> 2) & kLow2) << 4)),
                    static_cast<int>((u[0] & kLow4) | ((u[2] & kLow2) << 4)));
  return _mm256_cvtepi8_epi16(_mm_sub_epi8(bytes, _mm_set1_epi8(32)));
}

float dotQ3_K(const BlockQ3_K* x, const BlockQ8_K* y, int64_t blocks, DotOrder order,
              const uint8_t* ahead, const __m128i* /*pairs: Q4_K/Q5_K only*/) {
  __m256 acc = _mm256_setzero_ps();
  float tiled = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    prefetchBlock<BlockQ3_K>(ahead, b);
    const PartScales scales(q3KScales(x[b].scales));
    const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].hmask));
    __m256i lanes = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 32 * h));
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const int i = 4 * h + g;
        // Code = low two bits + 4 x third bit (0..7), value = code - 4: one vpmaddubsw of the
        // codes less four times the activations' pair sums (|.| <= 1792 + 1024: exact in int16).
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * g), _mm256_set1_epi8(3));
        const __m256i third =
            i >= 2 ? _mm256_srli_epi16(hbits, i - 2) : _mm256_slli_epi16(hbits, 2 - i);
        const __m256i code = _mm256_or_si256(low, _mm256_and_si256(third, _mm256_set1_epi8(4)));
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs + 32 * i));
        const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(code, a),
                                             _mm256_maddubs_epi16(_mm256_set1_epi8(4), a));
        lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(scales.part(i), p16));
      }
    }
    if (order == DotOrder::Tiled) {
      tiled = tiledStep(tiled, lanes, 0, half(x[b].d), 0.0f, y[b].d, false);
      continue;
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * half(x[b].d)), _mm256_cvtepi32_ps(lanes), acc);
  }
  return order == DotOrder::Tiled ? tiled : hsum8(acc);
}

// An IQ4_XS block's eight sub-block scales (iq4XsScale) as int16 words, in both 128-bit lanes:
// the low nibbles of scalesLow interleaved with their high ones, and bits 2s..2s+1 of scalesHigh
// moved to the top of word s by a multiply (AVX2 has no per-word shifts) and back down.
inline __m256i iq4XsScales(const BlockIQ4_XS& x) {
  uint32_t low;
  std::memcpy(&low, x.scalesLow, 4);
  const __m128i packed = _mm_cvtsi32_si128(static_cast<int>(low));
  const __m128i nibbles = _mm_unpacklo_epi8(
      _mm_and_si128(packed, _mm_set1_epi8(0xF)),
      _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0xF)));  // byte s: low bits of s
  const __m128i high = _mm_srli_epi16(
      _mm_mullo_epi16(_mm_set1_epi16(static_cast<int16_t>(x.scalesHigh)),
                      _mm_setr_epi16(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1)),
      14);
  const __m128i scales = _mm_sub_epi16(
      _mm_or_si128(_mm_cvtepu8_epi16(nibbles), _mm_slli_epi16(high, 4)), _mm_set1_epi16(32));
  return _mm256_broadcastsi128_si256(scales);
}
// Sub-block s's scale in every word, from iq4XsScales.
inline __m256i iq4XsPick(__m256i scales, int s) {
  return _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<int16_t>(0x0202 * s + 0x0100)));
}

float dotIQ4_XS(const BlockIQ4_XS* x, const BlockQ8_K* y, int64_t blocks, DotOrder order,
                const uint8_t* ahead, const __m128i* /*pairs: Q4_K/Q5_K only*/) {
  __m256 acc = _mm256_setzero_ps();
  float tiled = 0.0f;
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113));
  for (int64_t b = 0; b < blocks; ++b) {
    prefetchBlock<BlockIQ4_XS>(ahead, b);
    const __m256i scales = iq4XsScales(x[b]);
    __m256i lanes = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m256i q = _mm256_shuffle_epi8(table, nibbles(x[b].qs + 16 * s));
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs + 32 * s));
      const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(a, q));
      lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(p16, iq4XsPick(scales, s)));
    }
    if (order == DotOrder::Tiled) {
      tiled = tiledStep(tiled, lanes, 0, half(x[b].d), 0.0f, y[b].d, false);
      continue;
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half(x[b].d) * y[b].d), _mm256_cvtepi32_ps(lanes), acc);
  }
  return order == DotOrder::Tiled ? tiled : hsum8(acc);
}

// The tiled order of Q3_K and IQ4_XS (prefill batches of 8+ tokens) through tiled8Rows
// (x86_kquant_kernels.h), which needs only each block's exact total: eight rows and K::kTokens
// tokens per pass, each step unpacked once for all the pass's tokens. The vec order stays row
// by row (dotQ3_K, dotIQ4_XS), whose lanes are ggml's.

// Q2_K (its repacked orders, and the tiled one where rows are not a multiple of 8): step
// i = 4h + g holds quants 0..3 of elements 128h + 32g .. +31, two 4-bit scales per step; the 16
// 4-bit minimums meet the token's 16 bsums (minLanes), the gemm fuses per half (128 elements).
struct Q2KTraits : Avx2KSteps {
  static constexpr int kTokens = 4;  // 8: the gemm 0.93 against 0.60 ns per block (registers)
  static constexpr int kGemmGroups = 2;
  using Block = BlockQ2_K;
  static constexpr bool kHasMin = true, kHasOffset = false;
  struct Context {
    PartScales scales;
    __m256i mins;  // the 16 minimums as int16
  };
  static void prepare(const Block& x, Context& c, __m128i& /*mins: minLanes instead*/) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
    c.scales = PartScales(_mm256_cvtepu8_epi16(_mm_and_si128(packed, _mm_set1_epi8(0xF))));
    c.mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0xF)));
  }
  static void unpack(const Block& x, const Context& c, int i, __m256i& q, __m256i& scale) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * (i / 4)));
    q = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * (i % 4)), _mm256_set1_epi8(3));
    scale = c.scales.part(i);
  }
  // Lane h (0, 1): the minimum products of sub-blocks 8h .. 8h+7; lanes 2 and 3 zero.
  static __m128i minLanes(const Context& c, const BlockQ8_K& y) {
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
    const __m256i prod = _mm256_madd_epi16(c.mins, bsums);  // lane k: sub-blocks 2k, 2k+1
    const __m128i halves =
        _mm_hadd_epi32(_mm256_castsi256_si128(prod),
                       _mm256_extracti128_si256(prod, 1));  // [lo01, lo23, hi01, hi23]
    return _mm_hadd_epi32(halves, _mm_setzero_si128());     // [lo, hi, 0, 0]
  }
  static float d(const Block& x) { return half(x.d); }
  static float dmin(const Block& x) { return half(x.dmin); }
};

// Q3_K: step i = 4h + g holds codes low + 4 x third bit (0..7), value = code - 4; the -4 enters
// as 4 x sum(scale x bsum) per block and token (as Q6_K's -32).
struct Q3KTraits : Avx2KSteps {
  static constexpr int kTokens = 8;  // 0.65 against 0.70-0.71 ns with 4 (cpu_kernels_bench)
  using Block = BlockQ3_K;
  static constexpr bool kHasMin = false, kHasOffset = true;
  // The scales stay in memory here, each part's pair broadcast from there: with PartScales in the
  // context (twice the bytes per row of the eight-row pass) these passes ran ~5% slower.
  struct Context {
    alignas(32) int16_t scales[16];
    __m256i hbits;  // hmask: bit i of byte l is the third bit of element l of step i
  };
  static void prepare(const Block& x, Context& c, __m128i& /*mins*/) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(c.scales), q3KScales(x.scales));
    c.hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.hmask));
  }
  static void unpack(const Block& x, const Context& c, int i, __m256i& q, __m256i& scale) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * (i / 4)));
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * (i % 4)), _mm256_set1_epi8(3));
    const __m256i third = _mm256_and_si256(_mm256_srli_epi16(c.hbits, i), _mm256_set1_epi8(1));
    q = _mm256_or_si256(low, _mm256_slli_epi16(third, 2));
    scale = _mm256_set_m128i(_mm_set1_epi16(c.scales[2 * i + 1]), _mm_set1_epi16(c.scales[2 * i]));
  }
  static __m256i offset(const Context& c, const BlockQ8_K& y) {
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
    const __m256i scales = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.scales));
    return _mm256_slli_epi32(_mm256_madd_epi16(bsums, scales), 2);
  }
  static __m256i subtractOffset(__m256i sum, const Context& c, const BlockQ8_K& y) {
    return _mm256_sub_epi32(sum, offset(c, y));
  }
  static float d(const Block& x) { return half(x.d); }
  static float dmin(const Block&) { return 0.0f; }
};

// IQ4_XS: step s is sub-block s, its levels signed (-127..113, which as unsigned codes would
// overflow vpmaddubsw's 16-bit pairs), so each step multiplies |level| by the activations with
// the level's sign (ggml's vpsignb pair); one 6-bit scale per step.
struct IQ4XSTraits : Avx2KSteps {
  static constexpr int kTokens = 4;  // 0.68-0.69 against 0.73 ns with 8
  using Block = BlockIQ4_XS;
  static constexpr bool kHasMin = false, kHasOffset = false;
  struct Context {
    int16_t scales[8];
  };
  static void prepare(const Block& x, Context& c, __m128i& /*mins*/) {
    for (int s = 0; s < 8; ++s) c.scales[s] = static_cast<int16_t>(iq4XsScale(x, s));
  }
  static void unpack(const Block& x, const Context& c, int i, __m256i& q, __m256i& scale) {
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(gguf::kIq4NlValues)));
    q = _mm256_shuffle_epi8(table, nibbles(x.qs + 16 * i));
    scale = _mm256_set1_epi16(c.scales[i]);
  }
  static Acc accumulate(Acc sum, __m256i q, __m256i scale, const int8_t* a) {
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
    return _mm256_add_epi32(sum, _mm256_madd_epi16(scale, p16));
  }
  static float d(const Block& x) { return half(x.d); }
  static float dmin(const Block&) { return 0.0f; }
};

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
void gemmQ4_1(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.rowGroups) {
    gemmQ4_1GroupsAvx2<gemmQ4_1>(g, b, e);
    return;
  }
  gemm<Q4_1>(g, b, e);
}
void gemmQ5_0(const GemmArgs& g, int64_t b, int64_t e) { gemm<Q5_0>(g, b, e); }
void gemmQ5_1(const GemmArgs& g, int64_t b, int64_t e) { gemm<Q5_1>(g, b, e); }
void gemmQ8_0(const GemmArgs& g, int64_t b, int64_t e) { gemm<Q8_0>(g, b, e); }
void gemmQ4_K(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.rowGroups) {
    gemmKGroupsAvx2<BlockQ4_Kx8, gemmQ4_K>(g, b, e);
    return;
  }
  gemmKTiled<Q4KTraits, dotQ4K<Q4KTraits>>(g, b, e);
}
void gemmQ5_K(const GemmArgs& g, int64_t b, int64_t e) {
  gemmKTiled<Q5KTraits, dotQ5K<Q5KTraits>>(g, b, e);
}
void gemmQ6_K(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.rowGroups) {
    gemmKGroupsAvx2<BlockQ6_Kx8, gemmQ6_K>(g, b, e);
    return;
  }
  gemmKTiled<Q6KTraits, dotQ6K<Q6KTraits>>(g, b, e);
}
void gemmIQ4_NL(const GemmArgs& g, int64_t b, int64_t e) { gemmIQ4NL(g, b, e); }
// MXFP4's repacked order through Q4_0's repacked kernel (avx2_q4_0_repacked.h), in row groups
// or the file layout.
void gemmMXFP4(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.order == DotOrder::Repacked) {
    gemmQ4_0Repacked<MXFP4Weights8>(g, b, e);
    return;
  }
  if (g.rowGroups) {
    ungroupedRows<WeightKind::MXFP4, gemmMXFP4>(g, b / kGroupRows * kGroupRows, b, e);
    return;
  }
  gemmTableVec<MXFP4>(g, b, e);
}
void gemmQ2_K(const GemmArgs& g, int64_t b, int64_t e) { gemmKTiled<Q2KTraits, dotQ2_K>(g, b, e); }
void gemmQ3_K(const GemmArgs& g, int64_t b, int64_t e) { gemmKTiled<Q3KTraits, dotQ3_K>(g, b, e); }
void gemmIQ4_XS(const GemmArgs& g, int64_t b, int64_t e) {
  gemmKTiled<IQ4XSTraits, dotIQ4_XS>(g, b, e);
}

}  // namespace shoal::cpu::avx2
