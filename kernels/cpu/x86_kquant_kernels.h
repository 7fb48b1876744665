#pragma once
// The K-quant matrix kernels (Q4_K, Q5_K, Q6_K against Q8_K activations) of the x86 levels,
// written once over per-level unpacking traits: avx2_quant_gemm.cpp unpacks 32 elements per
// step into ymm registers, avx512_kquant_gemm.cpp 64 per step into zmm registers. Both give the
// same exact integer lanes as ggml's AVX2 kernels, so every level stays bit-identical to the
// scalar reference (reference_dots.cpp).
//
// Everything here is in an anonymous namespace on purpose: each level's file compiles it with
// its own instruction set, and internal linkage keeps the linker from handing one level's copy
// of a helper to another (an AVX-512 copy on an AVX2-only CPU would fault). Include it from a
// level's kernel file only; no standard library templates (see avx2_ops.cpp).
//
// A traits type K provides:
//   using Block;                         the weight block (BlockQ4_K, BlockQ5_K, BlockQ6_K)
//   kHasMin, kHasOffset                  minimums (Q4_K, Q5_K) / the quants' bias (Q6_K's -32)
//   kTokens                              tokens per pass of the tiled kernel (<= kTiledTokens)
//   kSteps, kStepBytes                   a block is kSteps steps of kStepBytes quants each
//   struct Context; prepare(x, c, mins)  per-block state, and the 8 int16 minimums (kHasMin)
//   using Acc; zero()                    the integer accumulator of one (block, token)
//   unpack(x, c, i, q, scale)            step i's unsigned quants and their int16 scales
//   accumulate(sum, q, scale, a)         sum += scale * dot(q, a), a the step's activations
//   fold(sum)                            the accumulator as ggml's eight int32 lanes
//   offset(c, y)                         what the lanes lose to the bias (only if kHasOffset)
//   subtractOffset(sum, c, y)            sum less the offset in total (lanes may differ: tiled;
//                                        only if kHasOffset)
//   d(x), dmin(x)                        the block's float scales
// and optionally (Q2_K, whose 16 minimums pair with the 16 bsums rather than 8 with their pairs):
//   minLanes(c, y)                       the minimum products, lane j the sum over gemm group j
//                                        (the 4-lane vector's total is the block's)
//   kGemmGroups                          DotOrder::RepackedGemm's fusions per block (default 4:
//                                        Q4_K's pairs of sub-blocks; Q2_K 2: its halves)

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu {
namespace {

inline float half(uint16_t h) { return _cvtsh_ss(h); }

// One fused multiply-add, rounded once (std::fma could be an out-of-line copy shared with code
// built for any CPU).
inline float fmaSingle(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// hsum_float_8's order.
inline float hsum8(__m256 x) {
  __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  r = _mm_add_ss(r, _mm_movehdup_ps(r));
  return _mm_cvtss_f32(r);
}

// The cache lines of block b of the row at `ahead` (nullptr: none), into L2: a row kernel calls
// it once per block it reads, so the row ahead is fetched at the pace this one is consumed (see
// gemmK). L2, not L1: on the Zen 5 development VM the hint to L1 let a whole row's prefetches
// evict the row being read; the hint to L2 took Q6_K decode from 14 to 22 GB/s on one core.
template <class Block>
inline void prefetchBlock(const uint8_t* ahead, int64_t b) {
  if (ahead == nullptr) return;
  const uint8_t* p = ahead + static_cast<size_t>(b) * sizeof(Block);
  const uintptr_t last = reinterpret_cast<uintptr_t>(p) + sizeof(Block) - 1;
  for (uintptr_t line = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63}; line <= last; line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T2);
}

// The 8 sub-block scales and mins of a Q4_K/Q5_K block as 8 + 8 int16 (kQuantScaleMin's
// unpacking done on the three 32-bit words at once: word 0 holds scales 0-3 and the top bits of
// scales 4-7, word 1 mins 0-3 and the top bits of mins 4-7, word 2 the low nibbles of scales
// 4-7 and in its high nibbles the low bits of mins 4-7). All in vector registers: a detour
// through general registers cost a store-forwarding round trip per block, which made Q4_K
// decode compute-bound. Reads 16 bytes from `packed`: in both blocks 4 more bytes of the same
// block follow the scales.
inline void scalesAndMins(const uint8_t* packed, __m128i& scales, __m128i& mins) {
  const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i low6 = _mm_and_si128(u, _mm_set1_epi8(0x3f));  // [scales 0-3, mins 0-3, ..]
  const __m128i word2 = _mm_shuffle_epi32(u, _MM_SHUFFLE(2, 2, 2, 2));
  const __m128i low4 =
      _mm_and_si128(_mm_srlv_epi32(word2, _mm_setr_epi32(0, 4, 0, 0)), _mm_set1_epi8(0x0f));
  const __m128i top2 = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(u, 6), _mm_set1_epi8(0x03)), 4);
  const __m128i high = _mm_or_si128(low4, top2);        // [scales 4-7, mins 4-7, ..]
  const __m128i both = _mm_unpacklo_epi32(low6, high);  // [scales 0-3, 4-7, mins 0-3, 4-7]
  scales = _mm_cvtepu8_epi16(both);
  mins = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(both, both));
}

// A token block's sub-block sums, sums[k] = bsums[2k] + bsums[2k+1]: the partner of the 8
// minimums.
inline __m128i bsumPairs(const BlockQ8_K& y) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y.bsums + 8));
  return _mm_hadd_epi16(lo, hi);
}

// Token y's activations in pair lanes for `blocks` super-blocks. In each 32-bit lane i of chunk
// m, the low nibbles' four bytes are elements 4i, 4i+1 of sub-blocks 2m and 2m+1 (int16 words 2i
// of both halves of the chunk's 64 activations), the high nibbles' the next two of each (words
// 2i+1): two shifts and two word blends per chunk.
inline void pairLaneActivations(const BlockQ8_K* y, int64_t blocks, PairLaneBlock* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    for (int m = 0; m < 4; ++m) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs + 64 * m));
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs + 64 * m + 32));
      const __m256i low = _mm256_blend_epi16(a, _mm256_slli_epi32(c, 16), 0xAA);
      const __m256i high = _mm256_blend_epi16(_mm256_srli_epi32(a, 16), c, 0xAA);
      for (int copy = 0; copy < 64; copy += 32) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(out[b].qs[m][0] + copy), low);
        _mm256_store_si256(reinterpret_cast<__m256i*>(out[b].qs[m][1] + copy), high);
      }
    }
  }
}

// A thread's buffer of T (pair-lane activations, start values), grown as needed. A plain
// allocation, not a std::vector: PairLaneBlock is shared by the levels' files, and a vector of it
// instantiated here with one level's instructions could be the copy the linker gives the others.
template <class T>
struct AlignedScratch {
  T* data = nullptr;
  size_t capacity = 0;
  AlignedScratch() = default;
  AlignedScratch(const AlignedScratch&) = delete;
  AlignedScratch& operator=(const AlignedScratch&) = delete;
  ~AlignedScratch() { std::free(data); }
  // Room for n items (their contents undefined).
  T* reserve(size_t n) {
    if (n > capacity) {
      std::free(data);
      data = static_cast<T*>(std::aligned_alloc(alignof(T), n * sizeof(T)));
      capacity = data ? n : 0;
      if (!data) throw std::bad_alloc();
    }
    return data;
  }
};

// g's activations (Q8_K, every token) in pair lanes, token t's blocks at the result + t * blocks,
// in the calling thread's buffer.
inline const PairLaneBlock* pairLaneRows(const GemmArgs& g, int64_t blocks) {
  thread_local AlignedScratch<PairLaneBlock> scratch;
  PairLaneBlock* out = scratch.reserve(static_cast<size_t>(g.tokens * blocks));
  for (int64_t t = 0; t < g.tokens; ++t) {
    pairLaneActivations(
        reinterpret_cast<const BlockQ8_K*>(g.act + static_cast<size_t>(t) * g.actStride), blocks,
        out + t * blocks);
  }
  return out;
}

// mins[2p]*sums[2p] + mins[2p+1]*sums[2p+1], the sums from the table a row kernel computed for
// the token (pairs, see gemmK) or, without one, from the block.
inline __m128i minProducts(const BlockQ8_K& y, const __m128i* pairs, int64_t b, __m128i mins) {
  return _mm_madd_epi16(mins, pairs ? _mm_load_si128(pairs + b) : bsumPairs(y));
}

// [y.d * d, y.d * dmin, 0, 0] for a Q4_K/Q5_K block (d and dmin are its first 4 bytes): both
// halves converted by one instruction. half() per scale cost three instructions on the vector
// ports each, which on the Intel Xeon VM (AVX-512 keeps vector work off port 1) held Q4_K decode
// at 19 GB/s per core from cache; without the conversions it ran at 24. The products round as
// y.d * half(x.d) does (multiplication commutes exactly).
template <class Block>
inline __m128 scalePair(const Block& x, float yd) {
  static_assert(offsetof(Block, dmin) == offsetof(Block, d) + 2);
  int32_t bits;
  std::memcpy(&bits, &x.d, sizeof bits);
  return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)), _mm_set1_ps(yd));
}

// The sum of the four int32 lanes in lane 0 (exact: integer adds).
inline __m128i hsumIntLane0(__m128i s) {
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  return _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
}

inline int32_t hsumInt(__m256i v) {
  return _mm_cvtsi128_si32(
      hsumIntLane0(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1))));
}
inline int32_t hsumInt(__m128i s) { return _mm_cvtsi128_si32(hsumIntLane0(s)); }

// One super-block of DotOrder::Tiled (reference_dots.cpp): the lanes' exact total s1 and the
// minimum total s2 enter a float epilogue per super-block.
inline float tiledStep(float acc, __m256i lanes, int32_t minSum, float dw, float dminW, float da,
                       bool hasMin) {
  float r = static_cast<float>(hsumInt(lanes)) * dw;
  if (hasMin) r = fmaSingle(-dminW, static_cast<float>(minSum), r);
  return fmaSingle(r, da, acc);
}

// The totals of eight rows' integer lanes, row r in lane r (exact: integer adds).
inline __m256i rowTotals8(const __m256i lanes[8]) {
  const __m256i h0123 = _mm256_hadd_epi32(_mm256_hadd_epi32(lanes[0], lanes[1]),
                                          _mm256_hadd_epi32(lanes[2], lanes[3]));
  const __m256i h4567 = _mm256_hadd_epi32(_mm256_hadd_epi32(lanes[4], lanes[5]),
                                          _mm256_hadd_epi32(lanes[6], lanes[7]));
  // h0123 = [lanes 0-3 of rows 0..3 summed | lanes 4-7 of rows 0..3 summed]
  const __m128i t0123 =
      _mm_add_epi32(_mm256_castsi256_si128(h0123), _mm256_extracti128_si256(h0123, 1));
  const __m128i t4567 =
      _mm_add_epi32(_mm256_castsi256_si128(h4567), _mm256_extracti128_si256(h4567, 1));
  return _mm256_set_m128i(t4567, t0123);
}

// A traits type's optional members (see the top of this file).
template <class K>
constexpr int gemmGroups() {
  if constexpr (requires { K::kGemmGroups; }) {
    return K::kGemmGroups;
  } else {
    return 4;
  }
}
template <class K>
constexpr bool hasMinLanes() {
  return requires(const typename K::Context& c, const BlockQ8_K& y) { K::minLanes(c, y); };
}
// Row x token's minimum products: four lanes whose total is the block's minimum term, lane j
// that of gemm group j. tokenSums: the token's bsumPairs (unused where K brings minLanes).
template <class K>
inline __m128i minProducts4(const typename K::Context& c, __m128i mins, __m128i tokenSums,
                            const BlockQ8_K& y) {
  if constexpr (hasMinLanes<K>()) {
    return K::minLanes(c, y);
  } else {
    return _mm_madd_epi16(mins, tokenSums);
  }
}

// The totals of eight rows' four minimum products (128-bit each), row r in lane r.
inline __m256i minTotals8(const __m128i prod[8]) {
  const __m256i v01 =
      _mm256_hadd_epi32(_mm256_set_m128i(prod[4], prod[0]), _mm256_set_m128i(prod[5], prod[1]));
  const __m256i v23 =
      _mm256_hadd_epi32(_mm256_set_m128i(prod[6], prod[2]), _mm256_set_m128i(prod[7], prod[3]));
  return _mm256_hadd_epi32(v01, v23);  // [rows 0..3 | rows 4..7]
}

constexpr int kTiledRows = 8;
// Batches from which a Q4_K matrix in the repacked order runs the prefill kernels (the tiled
// order's: AVX-512 bands, tiled8Rows; for grouped weights, on rows taken out of their groups),
// as DotOrder::Tiled batches do from 8 tokens; smaller ones run the decode kernels.
constexpr int64_t kRepackedPrefillTokens = 8;
// Tokens per pass at most: enough to spread a part's unpacking over several tokens, few enough
// that the running sums stay in registers (measured on AVX2: Q6_K's cheaper lanes take 8).
constexpr int kTiledTokens = 8;

// A block's eight integer lanes against one token (ggml's lane layout: lane k sums elements
// 4k..4k+3 of every 32, times their scale).
template <class K>
inline __m256i blockLanes(const typename K::Block& x, const typename K::Context& c,
                          const BlockQ8_K& y) {
  typename K::Acc sum = K::zero();
  for (int i = 0; i < K::kSteps; ++i) {
    typename K::Acc q, scale;
    K::unpack(x, c, i, q, scale);
    sum = K::accumulate(sum, q, scale, y.qs + K::kStepBytes * i);
  }
  __m256i lanes = K::fold(sum);
  if constexpr (K::kHasOffset) lanes = _mm256_sub_epi32(lanes, K::offset(c, y));
  return lanes;
}

// The exact integer totals of sub-blocks 2j and 2j+1 (scales applied) for j = 0..3, one per
// 32-bit lane: what DotOrder::RepackedGemm fuses every 64 elements. A step is 32 elements
// (AVX2) or 64 (AVX-512), so a pair of sub-blocks is one or two steps.
template <class K>
inline __m128i stepPairTotals(const typename K::Block& x, const typename K::Context& c,
                              const BlockQ8_K& y) {
  constexpr int kPerPair = K::kSteps / 4;
  static_assert(kPerPair * K::kStepBytes == 64);
  alignas(16) int32_t totals[4];
  typename K::Acc sum = K::zero();
  for (int i = 0; i < K::kSteps; ++i) {  // one loop over the steps: it unrolls
    typename K::Acc q, scale;
    K::unpack(x, c, i, q, scale);
    sum = K::accumulate(sum, q, scale, y.qs + K::kStepBytes * i);
    if ((i + 1) % kPerPair == 0) {
      totals[i / kPerPair] = hsumInt(K::fold(sum));
      sum = K::zero();
    }
  }
  return _mm_load_si128(reinterpret_cast<const __m128i*>(totals));
}

// ggml_vec_dot_q4_K_q8_K (AVX2): the minimum term in a 4-lane vector accumulator.
template <class K>
float dotQ4K(const BlockQ4_K* x, const BlockQ8_K* y, int64_t blocks, DotOrder order,
             const uint8_t* ahead, const __m128i* pairs) {
  __m256 acc = _mm256_setzero_ps();
  __m128 accMin = _mm_setzero_ps();
  float tiled = 0.0f;
  __m128 repacked = _mm_setzero_ps();  // [s1 terms, s2 terms] (DotOrder::Repacked)
  for (int64_t b = 0; b < blocks; ++b) {
    prefetchBlock<BlockQ4_K>(ahead, b);
    // ggml: d = y.d * d, dmin = -y.d * dmin, accMin = fma(dmin, prod, accMin); fnmadd with
    // y.d * dmin rounds the same (negation is exact).
    const __m128 scales = scalePair(x[b], y[b].d);
    typename K::Context c;
    __m128i mins;
    K::prepare(x[b], c, mins);
    const __m128i prod = minProducts(y[b], pairs, b, mins);
    if (order == DotOrder::RepackedGemm) {
      // prod's lane j is the minimum term of sub-blocks 2j, 2j+1 too.
      const __m128 steps = _mm_cvtepi32_ps(stepPairTotals<K>(x[b], c, y[b]));
      const __m128 mins4 = _mm_cvtepi32_ps(prod);
      const __m128 s1 = _mm_unpacklo_ps(steps, mins4), s2 = _mm_unpackhi_ps(steps, mins4);
      repacked = _mm_fmadd_ps(s1, scales, repacked);  // [step 0, min 0]
      repacked = _mm_fmadd_ps(_mm_movehl_ps(s1, s1), scales, repacked);
      repacked = _mm_fmadd_ps(s2, scales, repacked);
      repacked = _mm_fmadd_ps(_mm_movehl_ps(s2, s2), scales, repacked);
      continue;
    }
    const __m256i lanes = blockLanes<K>(x[b], c, y[b]);
    if (order == DotOrder::Repacked) {
      // Both totals in one vector: [s1, s2] times [d_w * d_a, dmin_w * d_a], fused into their
      // accumulators (scalePair's products are llama.cpp's d_w * d_a and dmin_w * d_a).
      const __m128i totals =
          _mm_unpacklo_epi32(_mm_cvtsi32_si128(hsumInt(lanes)), _mm_cvtsi32_si128(hsumInt(prod)));
      repacked = _mm_fmadd_ps(_mm_cvtepi32_ps(totals), scales, repacked);
      continue;
    }
    accMin = _mm_fnmadd_ps(_mm_shuffle_ps(scales, scales, 0x55), _mm_cvtepi32_ps(prod), accMin);
    if (order == DotOrder::Tiled) {
      tiled = tiledStep(tiled, lanes, hsumInt(prod), half(x[b].d), half(x[b].dmin), y[b].d, true);
    } else {
      acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(scales), _mm256_cvtepi32_ps(lanes), acc);
    }
  }
  if (order == DotOrder::Tiled) return tiled;
  if (order == DotOrder::Repacked || order == DotOrder::RepackedGemm) {
    return _mm_cvtss_f32(_mm_sub_ss(repacked, _mm_movehdup_ps(repacked)));
  }
  accMin = _mm_add_ps(accMin, _mm_movehl_ps(accMin, accMin));
  accMin = _mm_add_ss(accMin, _mm_movehdup_ps(accMin));
  return hsum8(acc) + _mm_cvtss_f32(accMin);
}

// ggml_vec_dot_q5_K_q8_K (AVX2): the minimum term in a scalar, fused per block.
template <class K>
float dotQ5K(const BlockQ5_K* x, const BlockQ8_K* y, int64_t blocks, DotOrder order,
             const uint8_t* ahead, const __m128i* pairs) {
  __m256 acc = _mm256_setzero_ps();
  __m128 summs = _mm_setzero_ps();  // lane 0
  float tiled = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    prefetchBlock<BlockQ5_K>(ahead, b);
    // As dotQ4K: [y.d * d, y.d * dmin]; summs = fma(-y.d * dmin, minSum, summs) as fnmadd.
    const __m128 scales = scalePair(x[b], y[b].d);
    typename K::Context c;
    __m128i mins;
    K::prepare(x[b], c, mins);
    // Integer adds: the order of ggml's (p0 + p1) + (p2 + p3) does not matter.
    const __m128i minSum = hsumIntLane0(minProducts(y[b], pairs, b, mins));
    summs = _mm_fnmadd_ss(_mm_movehdup_ps(scales), _mm_cvtepi32_ps(minSum), summs);
    const __m256i lanes = blockLanes<K>(x[b], c, y[b]);
    if (order == DotOrder::Tiled) {
      tiled = tiledStep(tiled, lanes, _mm_cvtsi128_si32(minSum), half(x[b].d), half(x[b].dmin),
                        y[b].d, true);
    } else {
      acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(scales), _mm256_cvtepi32_ps(lanes), acc);
    }
  }
  return order == DotOrder::Tiled ? tiled : hsum8(acc) + _mm_cvtss_f32(summs);
}

// ggml_vec_dot_q6_K_q8_K (AVX2).
template <class K>
float dotQ6K(const BlockQ6_K* x, const BlockQ8_K* y, int64_t blocks, DotOrder order,
             const uint8_t* ahead, const __m128i* /*pairs*/) {
  __m256 acc = _mm256_setzero_ps();
  float tiled = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    prefetchBlock<BlockQ6_K>(ahead, b);
    const float d = y[b].d * half(x[b].d);
    typename K::Context c;
    __m128i unused;
    K::prepare(x[b], c, unused);
    const __m256i lanes = blockLanes<K>(x[b], c, y[b]);  // the -32 offset included
    if (order == DotOrder::Tiled) {
      tiled = tiledStep(tiled, lanes, 0, half(x[b].d), 0.0f, y[b].d, false);
    } else {
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lanes), acc);
    }
  }
  return order == DotOrder::Tiled ? tiled : hsum8(acc);
}

// DotOrder::Tiled (kOrder) for eight rows and kTokens (<= kTiledTokens) tokens at once:
// each weight step is unpacked once for every token, the rows' integer totals are reduced
// together (row r in lane r), and the per-block epilogue r = s1*dw, r = fma(-dminw, s2, r),
// acc = fma(r, da, acc) runs on eight rows in one vector, rounding each lane exactly as tiledStep
// does for that row alone. DotOrder::Repacked (Q4_K) instead fuses s1 and s2 into accumulators
// of their own, acc = fma(s1, dw * da, acc), accMin = fma(s2, dminw * da, accMin), and ends
// with acc - accMin. out[t] receives token t's eight outputs.
template <class K, int kTokens, DotOrder kOrder>
void tiled8Rows(const typename K::Block* const* x, const BlockQ8_K* const* y, int64_t blocks,
                float* const* out) {
  __m256 acc[kTokens], accMin[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = accMin[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    // Each token's sums of sub-block pairs, the partner of the 8 minimums (minProducts).
    __m128i tokenSums[kTokens];
    for (int t = 0; t < kTokens; ++t) {
      if constexpr (K::kHasMin && !hasMinLanes<K>()) {
        tokenSums[t] = bsumPairs(y[t][b]);
      } else {
        tokenSums[t] = _mm_setzero_si128();
      }
    }
    __m256i lanes[kTokens][kTiledRows];
    __m128i prod[kTokens][kTiledRows];
    alignas(32) float dw[kTiledRows], dminW[kTiledRows];
    for (int r = 0; r < kTiledRows; ++r) {
      const typename K::Block& blk = x[r][b];
      typename K::Context c;
      __m128i mins = _mm_setzero_si128();
      K::prepare(blk, c, mins);
      typename K::Acc sum[kTokens];
      for (int t = 0; t < kTokens; ++t) sum[t] = K::zero();
      for (int i = 0; i < K::kSteps; ++i) {
        typename K::Acc q, scale;
        K::unpack(blk, c, i, q, scale);
        for (int t = 0; t < kTokens; ++t) {
          sum[t] = K::accumulate(sum[t], q, scale, y[t][b].qs + K::kStepBytes * i);
        }
      }
      for (int t = 0; t < kTokens; ++t) {
        // Only the totals count here, so the bias may enter any lane.
        if constexpr (K::kHasOffset) sum[t] = K::subtractOffset(sum[t], c, y[t][b]);
        lanes[t][r] = K::fold(sum[t]);
        if constexpr (K::kHasMin) prod[t][r] = minProducts4<K>(c, mins, tokenSums[t], y[t][b]);
      }
      dw[r] = K::d(blk);
      dminW[r] = K::dmin(blk);
    }
    const __m256 dwv = _mm256_load_ps(dw), dminv = _mm256_load_ps(dminW);
    for (int t = 0; t < kTokens; ++t) {
      if constexpr (kOrder == DotOrder::Repacked) {
        const __m256 da = _mm256_set1_ps(y[t][b].d);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rowTotals8(lanes[t])), _mm256_mul_ps(dwv, da),
                                 acc[t]);
        accMin[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(minTotals8(prod[t])),
                                    _mm256_mul_ps(dminv, da), accMin[t]);
        continue;
      }
      __m256 r = _mm256_mul_ps(_mm256_cvtepi32_ps(rowTotals8(lanes[t])), dwv);
      if constexpr (K::kHasMin) {
        r = _mm256_fnmadd_ps(dminv, _mm256_cvtepi32_ps(minTotals8(prod[t])), r);
      }
      acc[t] = _mm256_fmadd_ps(r, _mm256_set1_ps(y[t][b].d), acc[t]);
    }
  }
  for (int t = 0; t < kTokens; ++t) {
    _mm256_storeu_ps(out[t],
                     kOrder == DotOrder::Repacked ? _mm256_sub_ps(acc[t], accMin[t]) : acc[t]);
  }
}

// Row by row, each row read front to back, for every token (the vec order of decode). While
// row r is read, row r + kRowsAhead is prefetched block by block (prefetchBlock), at the pace
// row r is consumed. The previous way, the whole row ahead in one burst of prefetches at the
// start of each row, stalled the core until its fill buffers drained: on the Intel Xeon
// development VM (2 cores, AVX-512, 27 GiB/s DRAM reads) spreading it took the 1B Q4_K model's
// decode from 32-33 to 36-37 tok/s (2 threads, shoal-cli bench -n 32, alternated). 1, 4, 8 and
// 16 rows ahead were slower or no better than 2.
constexpr int64_t kRowsAhead = 2;

// Each token's bsumPairs once per call, for kernels of the types with minimums (Q4_K, Q5_K)
// rather than once per row: vphaddw is three instructions, and without it Q4_K decode ran 30%
// faster from cache (cpu_kernels_bench, one core). Up to kPairTokens tokens of kPairBlocks
// blocks (32768 columns; 14 KiB of stack); larger products pair the sums per block. Token t's
// table starts at pairs + t * kPairBlocks. Returns whether it filled the table.
constexpr int64_t kPairTokens = 7, kPairBlocks = 128;
inline bool tableBsumPairs(const GemmArgs& g, int64_t blocks, __m128i* pairs) {
  if (g.tokens > kPairTokens || blocks > kPairBlocks) return false;
  for (int64_t t = 0; t < g.tokens; ++t) {
    const auto* a =
        reinterpret_cast<const BlockQ8_K*>(g.act + static_cast<size_t>(t) * g.actStride);
    for (int64_t b = 0; b < blocks; ++b) pairs[t * kPairBlocks + b] = bsumPairs(a[b]);
  }
  return true;
}

template <class W,
          float (*Dot)(const W*, const BlockQ8_K*, int64_t, DotOrder, const uint8_t*,
                       const __m128i*),
          bool kMinPairs = false>
void gemmK(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  const int64_t blocks = g.cols / kQKK;
  // Types with minimums (kMinPairs: Q4_K, Q5_K): each token's bsumPairs once per call.
  __m128i pairs[kMinPairs ? kPairTokens * kPairBlocks : 1];
  const bool tabled = kMinPairs && tableBsumPairs(g, blocks, pairs);
  for (int64_t r = rowBegin; r < rowEnd; ++r) {
    const uint8_t* ahead = g.weights + static_cast<size_t>(r + kRowsAhead) * g.weightStride;
    const auto* w = reinterpret_cast<const W*>(g.weights + static_cast<size_t>(r) * g.weightStride);
    for (int64_t t = 0; t < g.tokens; ++t) {
      const auto* a =
          reinterpret_cast<const BlockQ8_K*>(g.act + static_cast<size_t>(t) * g.actStride);
      // The first token's pass fetches the row ahead; the others find this row in cache.
      g.y[t * g.ldy + r] = Dot(w, a, blocks, g.order, t == 0 ? ahead : nullptr,
                               tabled ? pairs + t * kPairBlocks : nullptr);
    }
  }
}

// DotOrder::RepackedGemm (Q4_K, Q2_K) for eight rows and kTokens tokens at once: as tiled8Rows
// in the repacked order, with the two accumulators fed once per gemm group (Q4_K: a pair of
// sub-blocks, 64 elements; Q2_K: 128): the rows' step totals reduced together per group, the
// minimum products (one lane per group) taken row by row from a small table.
template <class K, int kTokens>
void repackedGemm8Rows(const typename K::Block* const* x, const BlockQ8_K* const* y, int64_t blocks,
                       float* const* out) {
  constexpr int kGroups = gemmGroups<K>();
  constexpr int kPerPair = K::kSteps / kGroups;  // steps per group
  static_assert(kPerPair * kGroups == K::kSteps);
  __m256 acc[kTokens], accMin[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = accMin[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    typename K::Context c[kTiledRows];
    __m128i mins[kTiledRows];
    alignas(32) float dw[kTiledRows], dminW[kTiledRows];
    for (int r = 0; r < kTiledRows; ++r) {
      K::prepare(x[r][b], c[r], mins[r]);
      dw[r] = K::d(x[r][b]);
      dminW[r] = K::dmin(x[r][b]);
    }
    const __m256 dwv = _mm256_load_ps(dw), dminv = _mm256_load_ps(dminW);
    // Per token, the eight rows' minimum products of step j in one vector (row r in lane r):
    // rows r and r + 4 side by side, then a 4x4 transpose in each 128-bit half.
    __m256i minProd[kTokens][4];
    for (int t = 0; t < kTokens; ++t) {
      const __m128i sums = hasMinLanes<K>() ? _mm_setzero_si128() : bsumPairs(y[t][b]);
      __m256i v[4];
      for (int r = 0; r < 4; ++r) {
        v[r] = _mm256_set_m128i(minProducts4<K>(c[r + 4], mins[r + 4], sums, y[t][b]),
                                minProducts4<K>(c[r], mins[r], sums, y[t][b]));
      }
      const __m256i a = _mm256_unpacklo_epi32(v[0], v[1]), c2 = _mm256_unpackhi_epi32(v[0], v[1]);
      const __m256i e = _mm256_unpacklo_epi32(v[2], v[3]), f = _mm256_unpackhi_epi32(v[2], v[3]);
      minProd[t][0] = _mm256_unpacklo_epi64(a, e);
      minProd[t][1] = _mm256_unpackhi_epi64(a, e);
      minProd[t][2] = _mm256_unpacklo_epi64(c2, f);
      minProd[t][3] = _mm256_unpackhi_epi64(c2, f);
    }
    // Each row's steps in one pass (the loop over all kSteps unrolls, as tiled8Rows's does), its
    // lanes kept per pair; then per pair the eight rows' totals together.
    __m256i lanes[kTokens][kGroups][kTiledRows];
    for (int r = 0; r < kTiledRows; ++r) {
      typename K::Acc sum[kTokens];
      for (int t = 0; t < kTokens; ++t) sum[t] = K::zero();
      for (int i = 0; i < K::kSteps; ++i) {
        typename K::Acc q, scale;
        K::unpack(x[r][b], c[r], i, q, scale);
        for (int t = 0; t < kTokens; ++t) {
          sum[t] = K::accumulate(sum[t], q, scale, y[t][b].qs + K::kStepBytes * i);
        }
        if ((i + 1) % kPerPair == 0) {
          for (int t = 0; t < kTokens; ++t) {
            lanes[t][i / kPerPair][r] = K::fold(sum[t]);
            sum[t] = K::zero();
          }
        }
      }
    }
    for (int j = 0; j < kGroups; ++j) {
      for (int t = 0; t < kTokens; ++t) {
        const __m256 da = _mm256_set1_ps(y[t][b].d);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rowTotals8(lanes[t][j])),
                                 _mm256_mul_ps(dwv, da), acc[t]);
        accMin[t] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(minProd[t][j]), _mm256_mul_ps(dminv, da), accMin[t]);
      }
    }
  }
  for (int t = 0; t < kTokens; ++t) _mm256_storeu_ps(out[t], _mm256_sub_ps(acc[t], accMin[t]));
}

// tiled8Rows (or repackedGemm8Rows) for n tokens, 1 <= n <= N.
template <class K, int N, DotOrder kOrder>
void tiled8RowsFor(int n, const typename K::Block* const* x, const BlockQ8_K* const* y,
                   int64_t blocks, float* const* out) {
  if (n == N) {
    if constexpr (kOrder == DotOrder::RepackedGemm) {
      repackedGemm8Rows<K, N>(x, y, blocks, out);
    } else {
      tiled8Rows<K, N, kOrder>(x, y, blocks, out);
    }
  } else if constexpr (N > 1) {
    tiled8RowsFor<K, N - 1, kOrder>(n, x, y, blocks, out);
  }
}

// gemmKTiled's passes of several tokens, in the tiled order or (Q4_K) a repacked one.
template <class K,
          float (*Dot)(const typename K::Block*, const BlockQ8_K*, int64_t, DotOrder,
                       const uint8_t*, const __m128i*),
          DotOrder kOrder>
void gemmKTiledOrder(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  using Block = typename K::Block;
  const int64_t blocks = g.cols / kQKK;
  auto row = [&g](int64_t r) {
    return reinterpret_cast<const Block*>(g.weights + static_cast<size_t>(r) * g.weightStride);
  };
  auto act = [&g](int64_t t) {
    return reinterpret_cast<const BlockQ8_K*>(g.act + static_cast<size_t>(t) * g.actStride);
  };
  int64_t r = rowBegin;
  for (; r + kTiledRows <= rowEnd; r += kTiledRows) {
    const Block* rows[kTiledRows];
    for (int i = 0; i < kTiledRows; ++i) rows[i] = row(r + i);
    // The outputs are token-major (y[t * ldy + r]): eight rows of one token are contiguous.
    alignas(32) float buffer[kTiledTokens][kTiledRows];
    for (int64_t t = 0; t < g.tokens; t += K::kTokens) {
      const int n = static_cast<int>(g.tokens - t < K::kTokens ? g.tokens - t : K::kTokens);
      const BlockQ8_K* a[kTiledTokens] = {};
      float* out[kTiledTokens] = {};
      for (int i = 0; i < n; ++i) {
        a[i] = act(t + i);
        out[i] = buffer[i];
      }
      tiled8RowsFor<K, K::kTokens, kOrder>(n, rows, a, blocks, out);
      for (int i = 0; i < n; ++i) {
        std::memcpy(g.y + (t + i) * g.ldy + r, buffer[i], sizeof buffer[i]);
      }
    }
  }
  for (; r < rowEnd; ++r) {
    for (int64_t t = 0; t < g.tokens; ++t) {
      g.y[t * g.ldy + r] = Dot(row(r), act(t), blocks, g.order, nullptr, nullptr);
    }
  }
}

// K-quant rows: the tiled and repacked orders of prefill batches eight rows and K::kTokens
// tokens at a time (tiled8Rows), the last rows one by one; the vec order (decode) and single
// tokens row by row (gemmK). (Decode over four interleaved rows, sharing the activation loads,
// was measured 1.5-4x slower on matrices larger than the caches: the hardware prefetchers lost
// the streams.)
template <class K, float (*Dot)(const typename K::Block*, const BlockQ8_K*, int64_t, DotOrder,
                                const uint8_t*, const __m128i*)>
void gemmKTiled(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  static_assert(K::kTokens >= 1 && K::kTokens <= kTiledTokens);
  if (g.order == DotOrder::Vec || g.tokens < 2) {
    gemmK<typename K::Block, Dot, K::kHasMin && !hasMinLanes<K>()>(g, rowBegin, rowEnd);
    return;
  }
  // The repacked K-quants.
  if constexpr (std::is_same_v<typename K::Block, BlockQ4_K> ||
                std::is_same_v<typename K::Block, BlockQ2_K>) {
    if (g.order == DotOrder::Repacked) {
      gemmKTiledOrder<K, Dot, DotOrder::Repacked>(g, rowBegin, rowEnd);
      return;
    }
    if (g.order == DotOrder::RepackedGemm) {
      gemmKTiledOrder<K, Dot, DotOrder::RepackedGemm>(g, rowBegin, rowEnd);
      return;
    }
  }
  gemmKTiledOrder<K, Dot, DotOrder::Tiled>(g, rowBegin, rowEnd);
}

}  // namespace
}  // namespace shoal::cpu
