// AVX-512 (VNNI) matrix kernels for Q4_K, Q5_K and Q6_K weights (and Q3_K's and IQ4_XS's
// prefill), bit-identical to the scalar
// reference (reference_dots.cpp): x86_kquant_kernels.h's kernels over 64-element steps.
//
// A step is two of the AVX2 kernel's 32-element parts side by side in one zmm: vpmaddubsw
// multiplies both parts' bytes with 64 contiguous activations, and one vpdpwssd applies each
// part's scale and adds, so lanes 0-7 hold part 2j's eight ggml lanes and lanes 8-15 part
// 2j+1's. Folding the two halves at the end gives exactly the AVX2 kernel's lanes (integer
// adds), which the float epilogue then treats as ggml does. About half the instructions of the
// AVX2 kernels per block: measured 1.2-2x faster per thread on cache-resident matrices, most of
// it in prefill (decode from DRAM is bound by the memory more than by the kernel). These
// kernels run decode (the vec order) and the last rows of a prefill; prefill batches (the tiled
// order) run in bands of 16 rows (avx512_kquant_bands.h), which reuse this file's unpacking.
//
// Compiled with AVX-512 F/BW/VL/DQ/VNNI; reached only through the AVX-512 table.

#include <immintrin.h>

#include "engine/gguf/quant_common.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/simd_kernels.h"
#include "kernels/cpu/x86_kquant_kernels.h"
// After x86_kquant_kernels.h, whose helpers they use.
#include "kernels/cpu/avx512_kquant_bands.h"
#include "kernels/cpu/avx512_kquant_groups.h"

namespace shoal::cpu::avx512 {
namespace {

// 32 int16 lanes: the first 16 equal to a, the last 16 to b (vpermw indices, shift counts).
inline __m512i halves16(int a, int b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(static_cast<int16_t>(a))),
                            _mm256_set1_epi16(static_cast<int16_t>(b)), 1);
}

// The same 32 bytes in both halves of a zmm.
inline __m512i both32(const uint8_t* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// [low nibbles of p[0..31] | high nibbles of p[0..31]]: parts 2j and 2j+1 of Q4_K and Q5_K.
// The 32 bytes are loaded into both halves and only the high half shifted (a masked shift):
// no cross-lane insert.
inline __m512i nibbleHalves(const uint8_t* p) {
  const __m512i both = both32(p);
  const __m512i shifted = _mm512_mask_srli_epi16(both, 0xFFFF0000u, both, 4);
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0xF));
}

// Step j's scales of a Q4_K/Q5_K block: int16 2j in the low 256 bits, 2j+1 in the high ones,
// from the 8 scales in every 128-bit lane (one in-lane byte shuffle).
inline __m512i stepScales(__m512i scales, int j) {
  const int16_t lo = static_cast<int16_t>(((4 * j + 1) << 8) | (4 * j));
  const int16_t hi = static_cast<int16_t>(((4 * j + 3) << 8) | (4 * j + 2));
  return _mm512_shuffle_epi8(scales, halves16(lo, hi));
}

// A Q4_K/Q5_K row's scales, minimum pairs, d and dmin into a band tile (avx512_kquant_bands.h).
inline void minBandScales(const uint8_t* packed, uint16_t d, uint16_t dmin, int row,
                          BandTile<8>& tile) {
  __m128i scales, mins;
  scalesAndMins(packed, scales, mins);
  alignas(16) int16_t s16[8];
  alignas(16) int32_t m32[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(s16), scales);
  _mm_store_si128(reinterpret_cast<__m128i*>(m32), mins);  // minimums 2p, 2p+1 in word p
  for (int s = 0; s < 8; ++s) tile.scales[s][row] = s16[s];
  for (int p = 0; p < 4; ++p) tile.pairs[p][row] = m32[p];
  tile.d[row] = half(d);
  tile.dmin[row] = half(dmin);
}

struct Avx512KSteps {
  static constexpr int kSteps = 4, kStepBytes = 64;
  using Acc = __m512i;
  static Acc zero() { return _mm512_setzero_si512(); }
  static Acc accumulate(Acc sum, Acc q, Acc scale, const int8_t* a) {
    return _mm512_dpwssd_epi32(sum, scale, _mm512_maddubs_epi16(q, _mm512_loadu_si512(a)));
  }
  static __m256i fold(Acc sum) {
    return _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
  }
};

struct Q4KTraits : Avx512KSteps {
  static constexpr int kTokens = 4, kSubBlocks = 8;
  static constexpr int kGemmSubBlocks = 2;  // RepackedGemm fuses every 64 elements
  using Block = BlockQ4_K;
  static constexpr bool kHasMin = true, kHasOffset = false;
  struct Context {
    __m512i scales;  // the 8 scales as int16 in every 128-bit lane
  };
  static void prepare(const Block& x, Context& c, __m128i& mins) {
    __m128i scales;
    scalesAndMins(x.scales, scales, mins);
    c.scales = _mm512_broadcast_i32x4(scales);
  }
  static void unpack(const Block& x, const Context& c, int j, __m512i& q, __m512i& scale) {
    q = nibbleHalves(x.qs + 32 * j);
    scale = stepScales(c.scales, j);
  }
  static void bandScales(const Block& x, int row, BandTile<8>& tile) {
    minBandScales(x.scales, x.d, x.dmin, row, tile);
  }
  static float d(const Block& x) { return half(x.d); }
  static float dmin(const Block& x) { return half(x.dmin); }
};

struct Q5KTraits : Avx512KSteps {
  static constexpr int kTokens = 4, kSubBlocks = 8;
  using Block = BlockQ5_K;
  static constexpr bool kHasMin = true, kHasOffset = false;
  struct Context {
    __m512i scales;  // as Q4_K's
    __m512i high;    // qh in both halves: bit i of byte l is the fifth bit of element l of part i
  };
  static void prepare(const Block& x, Context& c, __m128i& mins) {
    __m128i scales;
    scalesAndMins(x.scales, scales, mins);
    c.scales = _mm512_broadcast_i32x4(scales);
    c.high = both32(x.qh);
  }
  static void unpack(const Block& x, const Context& c, int j, __m512i& q, __m512i& scale) {
    // Part 2j's fifth bits are bit 2j of each qh byte, part 2j+1's bit 2j+1.
    const __m512i bit = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << (2 * j)))),
        _mm256_set1_epi8(static_cast<char>(1 << (2 * j + 1))), 1);
    const __mmask64 fifth = _mm512_test_epi8_mask(c.high, bit);
    const __m512i nib = nibbleHalves(x.qs + 32 * j);
    q = _mm512_mask_add_epi8(nib, fifth, nib, _mm512_set1_epi8(0x10));
    scale = stepScales(c.scales, j);
  }
  static void bandScales(const Block& x, int row, BandTile<8>& tile) {
    minBandScales(x.scales, x.d, x.dmin, row, tile);
  }
  static float d(const Block& x) { return half(x.d); }
  static float dmin(const Block& x) { return half(x.dmin); }
};

// Q6_K: step k covers the AVX2 kernel's parts 2k and 2k+1, i.e. h = k / 2 (which 128
// elements) and p = 2(k % 2), 2(k % 2) + 1: the low 4 bits from ql[64h .. 64h + 63] (high
// nibbles for odd k), the top 2 from bits 2p..2p+1 of qh[32h ..]; the 16-element scales
// 4k .. 4k + 3, one per 128-bit lane. The -32 bias: the vec order takes it off the folded
// lanes, as ggml's AVX2 kernel does (offset); the tiled order, which needs only totals, adds it
// into the accumulator in one instruction (subtractOffset).
struct Q6KTraits : Avx512KSteps {
  static constexpr int kTokens = 8, kSubBlocks = 16;
  using Block = BlockQ6_K;
  static constexpr bool kHasMin = false, kHasOffset = true;
  struct Context {
    __m512i scales16;  // the 16 scales as int16 in the low 256 bits
    __m512i bias16;    // -32 times each scale, the high 256 bits zero
  };
  static void prepare(const Block& x, Context& c, __m128i& /*mins*/) {
    const __m256i s =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)));
    c.scales16 = _mm512_castsi256_si512(s);
    c.bias16 =
        _mm512_zextsi256_si512(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(s, 5)));
  }
  static void unpack(const Block& x, const Context& c, int k, __m512i& q, __m512i& scale) {
    const int h = k / 2, odd = k % 2;
    const __m512i src = _mm512_loadu_si512(x.ql + 64 * h);
    const __m512i nib =
        _mm512_and_si512(odd ? _mm512_srli_epi16(src, 4) : src, _mm512_set1_epi8(0xF));
    const __m512i qh = both32(x.qh + 32 * h);
    const __m512i top = _mm512_and_si512(_mm512_srlv_epi16(qh, halves16(4 * odd, 4 * odd + 2)),
                                         _mm512_set1_epi8(3));
    q = _mm512_or_si512(nib, _mm512_slli_epi16(top, 4));
    // int16 lane l (of 32) takes scale 4k + l / 8.
    const __m512i index =
        _mm512_add_epi16(_mm512_set1_epi16(static_cast<int16_t>(4 * k)),
                         _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22,
                                                            21, 20, 19, 18, 17, 16, 15, 14, 13, 12,
                                                            11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           3));
    scale = _mm512_permutexvar_epi16(index, c.scales16);
  }
  static __m256i offset(const Context& c, const BlockQ8_K& y) {
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
    return _mm256_slli_epi32(_mm256_madd_epi16(bsums, _mm512_castsi512_si256(c.scales16)), 5);
  }
  // One vpdpwssd: -32 * scale * bsum, for the 16 bsums (|32 * scale| <= 4096 fits int16).
  static __m512i subtractOffset(__m512i sum, const Context& c, const BlockQ8_K& y) {
    const __m512i bsums =
        _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums)));
    return _mm512_dpwssd_epi32(sum, c.bias16, bsums);
  }
  static void bandScales(const Block& x, int row, BandTile<16>& tile) {
    for (int s = 0; s < 16; ++s) tile.scales[s][row] = x.scales[s];
    for (int p = 0; p < 8; ++p) {
      const auto lo = static_cast<uint16_t>(-32 * x.scales[2 * p]);
      const auto hi = static_cast<uint16_t>(-32 * x.scales[2 * p + 1]);
      tile.pairs[p][row] = static_cast<int32_t>(lo | (static_cast<uint32_t>(hi) << 16));
    }
    tile.d[row] = half(x.d);
    tile.dmin[row] = 0.0f;
  }
  static float d(const Block& x) { return half(x.d); }
  static float dmin(const Block&) { return 0.0f; }
};

// Q3_K and IQ4_XS in bands only (the tiled order: prefill batches of 8+ tokens; their decode and
// a band's last rows stay with the AVX2 kernels). Their values are signed, so the bands' unsigned
// codes carry an offset that is taken back in integers against the activation sums, as Q6_K's -32
// is (exact: the tiled order needs only each super-block's integer total).

// The signed scale of each lane from its 6 bits, as q3KScale and iq4XsScale assemble them: the
// low four bits, the top two at bits 4-5, minus 32.
inline __m512i sixBitScales(__m512i low4, __m512i top2) {
  return _mm512_sub_epi32(_mm512_or_si512(low4, _mm512_slli_epi32(top2, 4)), _mm512_set1_epi32(32));
}

// Lane j of a 64-element step i (elements 64i + 4j ..) lies in sub-block s * i + j / (16 / s) of
// s sub-blocks per step (4 of 16 elements, or 2 of 32): its index in the step's scales.
template <int kPerStep>
inline __m512i stepScaleIndex(int i) {
  static_assert(kPerStep == 2 || kPerStep == 4);
  const __m512i j = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_add_epi32(_mm512_set1_epi32(kPerStep * i),
                          _mm512_srli_epi32(j, kPerStep == 4 ? 2 : 3));
}

// Q2_K in bands (the repacked orders of prefill: RepackedGemm, and Repacked batches of
// kRepackedPrefillTokens+; decode as at the AVX2 level): codes are the 2-bit values (0..3); per
// 16-element sub-block a 4-bit scale and a 4-bit minimum against its bsum.
struct Q2KTraits {
  static constexpr int kSteps = 4, kStepBytes = 64, kSubBlocks = 16, kOffset = 0;
  static constexpr bool kSmallDots = true;  // |4 x 3 x 128| <= 1536
  static constexpr int kGemmSubBlocks = 8;  // RepackedGemm fuses every 128 elements
  using Block = BlockQ2_K;
  static constexpr bool kHasMin = true;
  // The 16 scales (low nibbles) as int32.
  static __m512i scales(const Block& x) {
    return _mm512_and_si512(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales))),
        _mm512_set1_epi32(0xF));
  }
  static __m512i scaleIndex(int i) { return stepScaleIndex<4>(i); }
  // Each pair of sub-blocks' minimums (high nibbles) times their bsums, eight int32.
  static __m256i minProducts(const Block& x, const BlockQ8_K& y) {
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(
        _mm_srli_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales)), 4),
        _mm_set1_epi8(0xF)));
    return _mm256_madd_epi16(mins, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums)));
  }
  // Their sum: the block's s2 (exact).
  static int32_t minTotal(const Block& x, const BlockQ8_K& y) {
    return _mm512_reduce_add_epi32(_mm512_zextsi256_si512(minProducts(x, y)));
  }
  struct Context {};
  static void prepare(const Block& /*x*/, Context& /*c*/, __m128i& /*mins*/) {}
  // Step i, elements 64i .. 64i+63: bit pairs g and g + 1 (g = 2(i % 2)) of qs[32(i / 2) ..].
  static void unpack(const Block& x, const Context& /*c*/, int i, __m512i& q, __m512i& scale) {
    const int g = 2 * (i % 2);
    q = _mm512_and_si512(_mm512_srlv_epi16(both32(x.qs + 32 * (i / 2)), halves16(2 * g, 2 * g + 2)),
                         _mm512_set1_epi8(3));
    scale = _mm512_setzero_si512();  // unused: bands take tile.scales
  }
  static void bandScales(const Block& x, int row, BandTile<16>& tile) {
    for (int s = 0; s < 16; ++s) tile.scales[s][row] = x.scales[s] & 0xF;
    for (int p = 0; p < 8; ++p) {
      const uint32_t lo = x.scales[2 * p] >> 4, hi = x.scales[2 * p + 1] >> 4;
      tile.pairs[p][row] = static_cast<int32_t>(lo | (hi << 16));
    }
    tile.d[row] = half(x.d);
    tile.dmin[row] = half(x.dmin);
  }
};

// Q3_K: code = the low two bits + 4 x the third bit = value + 4 (0..7); per 16-element group g
// the offset enters as -4 * scale(g) against bsum g (tile.pairs, as Q6_K's).
struct Q3KTraits {
  static constexpr int kSteps = 4, kStepBytes = 64, kSubBlocks = 16, kOffset = 4;
  static constexpr bool kSmallDots = true;  // |4 x 4 x 128| <= 2048
  using Block = BlockQ3_K;
  static constexpr bool kHasMin = false;
  // The 16 signed scales (q3KScale) as int32: low 4 bits from byte s (s < 8) or the high nibble
  // of byte s - 8, top 2 bits from bits 2(s / 4) of byte 8 + s % 4.
  static __m512i scales(const Block& x) {
    const __m128i packed =
        _mm_insert_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x.scales)),
                         static_cast<int>(load32(x.scales + 8)), 2);
    const __m512i bytes = _mm512_cvtepu8_epi32(packed);
    const __m512i low = _mm512_and_si512(
        _mm512_srlv_epi32(
            _mm512_permutexvar_epi32(
                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7), bytes),
            _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4)),
        _mm512_set1_epi32(0xF));
    const __m512i high = _mm512_and_si512(
        _mm512_srlv_epi32(
            _mm512_permutexvar_epi32(
                _mm512_setr_epi32(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11), bytes),
            _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6)),
        _mm512_set1_epi32(3));
    return sixBitScales(low, high);
  }
  static __m512i scaleIndex(int i) { return stepScaleIndex<4>(i); }
  struct Context {};
  static void prepare(const Block& /*x*/, Context& /*c*/, __m128i& /*mins*/) {}
  // Step i, elements 64i .. 64i+63: half h = i / 2 of the block, bit pairs g and g + 1 (g =
  // 2(i % 2)) of qs[32h ..] in the low and high 256 bits, third bits 4h + g and 4h + g + 1 of
  // hmask. scale: unused (bands take tile.scales).
  static void unpack(const Block& x, const Context& /*c*/, int i, __m512i& q, __m512i& scale) {
    const int h = i / 2, g = 2 * (i % 2);
    // Shifted as 16-bit words: bits 2g, 2g+1 of each byte stay its own (2g + 1 <= 7).
    const __m512i low = _mm512_and_si512(
        _mm512_srlv_epi16(both32(x.qs + 32 * h), halves16(2 * g, 2 * g + 2)), _mm512_set1_epi8(3));
    const __m512i bit = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << (4 * h + g)))),
        _mm256_set1_epi8(static_cast<char>(1 << (4 * h + g + 1))), 1);
    const __mmask64 third = _mm512_test_epi8_mask(both32(x.hmask), bit);
    q = _mm512_mask_add_epi8(low, third, low, _mm512_set1_epi8(4));
    scale = _mm512_setzero_si512();
  }
  static void bandScales(const Block& x, int row, BandTile<16>& tile) {
    int scales[16];
    for (int s = 0; s < 16; ++s) scales[s] = q3KScale(x.scales, s);
    for (int s = 0; s < 16; ++s) tile.scales[s][row] = scales[s];
    for (int p = 0; p < 8; ++p) {
      const auto lo = static_cast<uint16_t>(-4 * scales[2 * p]);
      const auto hi = static_cast<uint16_t>(-4 * scales[2 * p + 1]);
      tile.pairs[p][row] = static_cast<int32_t>(lo | (static_cast<uint32_t>(hi) << 16));
    }
    tile.d[row] = half(x.d);
    tile.dmin[row] = 0.0f;
  }
};

// IQ4_XS: code = the level + 128 (1..241, IQ4_NL's table); per 32-element sub-block s the offset
// enters as -128 * scale(s) (|.| <= 4096: int16) against the sub-block's activation sum.
struct IQ4XSTraits {
  static constexpr int kSteps = 4, kStepBytes = 64, kSubBlocks = 8, kOffset = 128;
  static constexpr bool kSmallDots = false;  // up to 4 x 127 x 128
  using Block = BlockIQ4_XS;
  static constexpr bool kHasMin = false;
  // The 8 signed scales (iq4XsScale) as int32 in lanes 0-7 (8-15 unused): low 4 bits nibble s of
  // scalesLow, top 2 bits bits 2s of scalesHigh.
  static __m512i scales(const Block& x) {
    const __m512i low = _mm512_and_si512(
        _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(load32(x.scalesLow))),
                          _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0)),
        _mm512_set1_epi32(0xF));
    const __m512i high = _mm512_and_si512(
        _mm512_srlv_epi32(_mm512_set1_epi32(x.scalesHigh),
                          _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0)),
        _mm512_set1_epi32(3));
    return sixBitScales(low, high);
  }
  static __m512i scaleIndex(int i) { return stepScaleIndex<2>(i); }
  struct Context {
    __m512i levels;  // the 16 levels + 128, in every 128-bit lane
  };
  static void prepare(const Block& /*x*/, Context& c, __m128i& /*mins*/) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(gguf::kIq4NlValues));
    // + 128 (mod 256) flips the top bit.
    c.levels = _mm512_broadcast_i32x4(_mm_xor_si128(table, _mm_set1_epi8(-128)));
  }
  // Step i: sub-blocks 2i and 2i+1, bytes qs[32i ..]; a sub-block's first 16 elements are its
  // 16 bytes' low nibbles, the next 16 their high ones: [bytes 0-15 | again | 16-31 | again],
  // the second copies shifted down a nibble.
  static void unpack(const Block& x, const Context& c, int i, __m512i& q, __m512i& scale) {
    const __m512i bytes =
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * i)));
    const __m512i copies =
        _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), bytes);
    const __m512i nibbles = _mm512_and_si512(_mm512_mask_srli_epi16(copies, 0xFF00FF00u, copies, 4),
                                             _mm512_set1_epi8(0xF));
    q = _mm512_shuffle_epi8(c.levels, nibbles);
    scale = _mm512_setzero_si512();
  }
  static void bandScales(const Block& x, int row, BandTile<8>& tile) {
    int scales[8];
    for (int s = 0; s < 8; ++s) scales[s] = iq4XsScale(x, s);
    for (int s = 0; s < 8; ++s) tile.scales[s][row] = scales[s];
    for (int p = 0; p < 4; ++p) {
      const auto lo = static_cast<uint16_t>(-128 * scales[2 * p]);
      const auto hi = static_cast<uint16_t>(-128 * scales[2 * p + 1]);
      tile.pairs[p][row] = static_cast<int32_t>(lo | (static_cast<uint32_t>(hi) << 16));
    }
    tile.d[row] = half(x.d);
    tile.dmin[row] = 0.0f;
  }
};

}  // namespace
}  // namespace shoal::cpu::avx512

// After the traits above, which it reads.
#include "kernels/cpu/avx512_signed_kquant_vec.h"

namespace shoal::cpu::avx512 {

// The tiled order (prefill) in bands of 16 rows, the last rows and the vec order (decode) as the
// AVX2 level orders them.
void gemmQ4_K(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.rowGroups) {
    gemmKGroups<BlockQ4_Kx8, Q4KTraits, gemmQ4_K>(g, b, e);
    return;
  }
  if (g.order == DotOrder::Tiled || g.order == DotOrder::RepackedGemm ||
      (g.order == DotOrder::Repacked && g.tokens >= kRepackedPrefillTokens)) {
    b = gemmKBands<Q4KTraits>(g, b, e);
  }
  gemmKTiled<Q4KTraits, dotQ4K<Q4KTraits>>(g, b, e);
}
void gemmQ5_K(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.rowGroups) {
    gemmKGroups<BlockQ5_Kx8, Q5KTraits, gemmQ5_K>(g, b, e);
    return;
  }
  if (g.order == DotOrder::Tiled) b = gemmKBands<Q5KTraits>(g, b, e);
  gemmKTiled<Q5KTraits, dotQ5K<Q5KTraits>>(g, b, e);
}
void gemmQ6_K(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.rowGroups) {
    gemmKGroups<BlockQ6_Kx8, Q6KTraits, gemmQ6_K>(g, b, e);
    return;
  }
  if (g.order == DotOrder::Tiled) b = gemmKBands<Q6KTraits>(g, b, e);
  gemmKTiled<Q6KTraits, dotQ6K<Q6KTraits>>(g, b, e);
}

// Q2_K: the repacked orders, RepackedGemm and batches of kRepackedPrefillTokens+ in bands (a
// band's last rows as at the AVX2 level), fewer tokens by avx512_signed_kquant_vec.h; the vec
// and tiled orders (a tensor whose rows are not a multiple of 8) as at the AVX2 level.
void gemmQ2_K(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.order == DotOrder::Repacked && g.tokens < kRepackedPrefillTokens) {
    return gemmSignedVec<Q2KTraits>(g, b, e);
  }
  if (g.order == DotOrder::RepackedGemm || g.order == DotOrder::Repacked) {
    b = gemmKBands<Q2KTraits>(g, b, e);
  }
  avx2::gemmQ2_K(g, b, e);
}
// Q3_K and IQ4_XS: the tiled order in bands (a band's last rows as at the AVX2 level), the vec
// order by avx512_signed_kquant_vec.h.
void gemmQ3_K(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.order != DotOrder::Tiled) return gemmSignedVec<Q3KTraits>(g, b, e);
  b = gemmKBands<Q3KTraits>(g, b, e);
  avx2::gemmQ3_K(g, b, e);
}
void gemmIQ4_XS(const GemmArgs& g, int64_t b, int64_t e) {
  if (g.order != DotOrder::Tiled) return gemmSignedVec<IQ4XSTraits>(g, b, e);
  b = gemmKBands<IQ4XSTraits>(g, b, e);
  avx2::gemmIQ4_XS(g, b, e);
}

}  // namespace shoal::cpu::avx512
