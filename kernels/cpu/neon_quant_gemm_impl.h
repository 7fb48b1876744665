#pragma once
// The NEON matrix kernels of the quantized weight types, bit-identical to the scalar reference
// (reference_dots.cpp): the same exact integer lanes, the same fused per-block accumulation and
// the same horizontal sums as ggml's x86 kernels, in NEON registers (neon_helpers.h).
//
// Included by two files: neon_quant_gemm.cpp (plain ARMv8-A: the integer lanes by SMULL +
// pairwise adds) and neon_dotprod_quant_gemm.cpp (built with the dot-product extension: SDOT).
// Each gets its own internal copy; fillQuantGemms fills a table with that copy's kernels.
//
// Covered: every quantized weight type with a CPU kernel, Q4_0 in both its orders (the repacked
// one row by row, in file layout or row groups); Q4_1 also in row groups (gemmGroups). Q4_0's
// vec order, Q4_1, Q5_0, Q5_1, Q8_0 (their one order) and IQ4_NL's tiled order take R
// rows x T tokens per pass (4 x 1 for one token, 2 x 4
// otherwise); the super-block types (Q2_K ... Q6_K, IQ4_XS; both orders) one row x up to 4
// tokens; IQ4_NL's and MXFP4's vec order (two accumulators) one row and token at a time. So
// every weight block is unpacked once per pass and every activation block loaded once per row
// group. Each (row, token) keeps its own accumulators and sums blocks in order, so the tile
// shape changes no result.

#include <arm_neon.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/gguf/quant_common.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/neon_helpers.h"
#include "kernels/cpu/row_group_fallback.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu {
namespace {

// Rows ahead that the 32-element kernels prefetch (decode streams the weights once).
constexpr size_t kPrefetchRows = 8;

// 0x10 in byte j where bit `first + j` of the 32-bit qh is set (Q5 fifth bits of 16 elements).
inline int8x16_t fifthBits(const uint8_t* qh, int first) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  bits >>= first;
  const uint8x16_t spread = vcombine_u8(vdup_n_u8(static_cast<uint8_t>(bits)),
                                        vdup_n_u8(static_cast<uint8_t>(bits >> 8)));
  const uint8x16_t select = vreinterpretq_u8_u64(vdupq_n_u64(0x8040201008040201ull));
  return vreinterpretq_s8_u8(vandq_u8(vtstq_u8(spread, select), vdupq_n_u8(0x10)));
}

// Per 32-element weight type: the block's elements 0..15 and 16..31 as signed bytes, and whether
// it has a minimum (then the activation block carries s = d * sum(q)).
struct Q4_0 {
  using W = BlockQ4_0;
  using A = BlockQ8_0;
  static constexpr bool kMin = false;
  static void load(const W& b, int8x16_t& lo, int8x16_t& hi) {
    nibbles(b.qs, lo, hi);
    lo = vsubq_s8(lo, vdupq_n_s8(8));
    hi = vsubq_s8(hi, vdupq_n_s8(8));
  }
};
struct Q4_1 {
  using W = BlockQ4_1;
  using A = BlockQ8_1;
  static constexpr bool kMin = true;
  static void load(const W& b, int8x16_t& lo, int8x16_t& hi) { nibbles(b.qs, lo, hi); }
};
struct Q5_0 {
  using W = BlockQ5_0;
  using A = BlockQ8_0;
  static constexpr bool kMin = false;
  static void load(const W& b, int8x16_t& lo, int8x16_t& hi) {
    nibbles(b.qs, lo, hi);
    lo = vsubq_s8(vorrq_s8(lo, fifthBits(b.qh, 0)), vdupq_n_s8(16));
    hi = vsubq_s8(vorrq_s8(hi, fifthBits(b.qh, 16)), vdupq_n_s8(16));
  }
};
struct Q5_1 {
  using W = BlockQ5_1;
  using A = BlockQ8_1;
  static constexpr bool kMin = true;
  static void load(const W& b, int8x16_t& lo, int8x16_t& hi) {
    nibbles(b.qs, lo, hi);
    lo = vorrq_s8(lo, fifthBits(b.qh, 0));
    hi = vorrq_s8(hi, fifthBits(b.qh, 16));
  }
};
struct Q8_0 {
  using W = BlockQ8_0;
  using A = BlockQ8_0;
  static constexpr bool kMin = false;
  static void load(const W& b, int8x16_t& lo, int8x16_t& hi) {
    lo = vld1q_s8(b.qs);
    hi = vld1q_s8(b.qs + 16);
  }
};

// The activation block's s (Q8_1) or nothing (Q8_0).
inline float blockSum(const BlockQ8_1& a) { return half(a.s); }
inline float blockSum(const BlockQ8_0&) { return 0.0f; }

template <class Q, int R, int T>
void tile(const GemmArgs& g, int64_t r0, int64_t t0) {
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
  float32x4_t accLo[R][T], accHi[R][T];
  float summs[R][T];  // minimum terms, one fused multiply-add per block as ggml's scalar summs
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      accLo[r][t] = accHi[r][t] = vdupq_n_f32(0.0f);
      summs[r][t] = 0.0f;
    }
  }
  const int32x4_t zero = vdupq_n_s32(0);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int r = 0; r < R; ++r) {
      __builtin_prefetch(reinterpret_cast<const uint8_t*>(&w[r][b]) +
                         kPrefetchRows * g.weightStride);
    }
    int8x16_t yLo[T], yHi[T];
    float dy[T];
    for (int t = 0; t < T; ++t) {
      yLo[t] = vld1q_s8(a[t][b].qs);
      yHi[t] = vld1q_s8(a[t][b].qs + 16);
      dy[t] = half(a[t][b].d);
    }
    for (int r = 0; r < R; ++r) {
      int8x16_t qLo, qHi;
      Q::load(w[r][b], qLo, qHi);
      const float dw = half(w[r][b].d);
      for (int t = 0; t < T; ++t) {
        if constexpr (Q::kMin) {
          summs[r][t] = fmaSingle(half(w[r][b].m), blockSum(a[t][b]), summs[r][t]);
        }
        const float scale = dw * dy[t];
        accLo[r][t] = vfmaq_n_f32(accLo[r][t], vcvtq_f32_s32(dot16(zero, qLo, yLo[t])), scale);
        accHi[r][t] = vfmaq_n_f32(accHi[r][t], vcvtq_f32_s32(dot16(zero, qHi, yHi[t])), scale);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    float* out = g.y + (t0 + t) * g.ldy + r0;
    for (int r = 0; r < R; ++r) {
      const float sum = hsum8(accLo[r][t], accHi[r][t]);
      out[r] = Q::kMin ? sum + summs[r][t] : sum;
    }
  }
}

// Runs tile.template operator()<T>(t) over the tokens four at a time, the last 1-3 in one tile
// too (so every tile unpacks its weights once for all its tokens).
template <class Tile>
void forTokenTiles(int64_t tokens, const Tile& tile) {
  int64_t t = 0;
  for (; t + 4 <= tokens; t += 4) tile.template operator()<4>(t);
  switch (tokens - t) {
    case 3:
      tile.template operator()<3>(t);
      break;
    case 2:
      tile.template operator()<2>(t);
      break;
    case 1:
      tile.template operator()<1>(t);
      break;
    default:
      break;
  }
}

template <class Q, int R>
void rowTile(const GemmArgs& g, int64_t r0) {
  forTokenTiles(g.tokens, [&]<int T>(int64_t t) { tile<Q, R, T>(g, r0, t); });
}

template <class Q>
void gemmGroups(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd);

// ---- Q4_0 in DotOrder::Repacked (kernel_table.h) ----------------------------------------------
// Per row and block the exact integer total, then acc = fma(total, d_w * d_a, acc): one row and
// token at a time, in file layout or row groups (blockOf(b) gives block b's quants and scale).
// Correct first: the x86 levels lay rows across lanes; this has not been tuned on ARM hardware.

template <class BlockOf>
float repackedDot(BlockOf blockOf, const BlockQ8_0* y, int64_t blocks) {
  const int32x4_t zero = vdupq_n_s32(0);
  float acc = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* qs = nullptr;
    uint16_t d = 0;
    blockOf(b, qs, d);
    int8x16_t lo, hi;
    nibbles(qs, lo, hi);
    lo = vsubq_s8(lo, vdupq_n_s8(8));
    hi = vsubq_s8(hi, vdupq_n_s8(8));
    const int32x4_t lanes = dot16(dot16(zero, lo, vld1q_s8(y[b].qs)), hi, vld1q_s8(y[b].qs + 16));
    acc = fmaSingle(static_cast<float>(vaddvq_s32(lanes)), half(d) * half(y[b].d), acc);
  }
  return acc;
}

void gemmQ4_0Repacked(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  const int64_t blocks = g.cols / kQK;
  const size_t groupBytes = g.weightStride * kGroupRows;
  for (int64_t t = 0; t < g.tokens; ++t) {
    const auto* y =
        reinterpret_cast<const BlockQ8_0*>(g.act + static_cast<size_t>(t) * g.actStride);
    for (int64_t r = rowBegin; r < rowEnd; ++r) {
      float dot;
      if (g.rowGroups) {
        const auto* x = reinterpret_cast<const BlockQ4_0x8*>(
            g.weights + static_cast<size_t>(r / kGroupRows) * groupBytes);
        const int i = static_cast<int>(r % kGroupRows);
        dot = repackedDot(
            [&](int64_t b, const uint8_t*& qs, uint16_t& d) {
              qs = x[b].qs[i];
              d = x[b].d[i];
            },
            y, blocks);
      } else {
        const auto* x =
            reinterpret_cast<const BlockQ4_0*>(g.weights + static_cast<size_t>(r) * g.weightStride);
        dot = repackedDot(
            [&](int64_t b, const uint8_t*& qs, uint16_t& d) {
              qs = x[b].qs;
              d = x[b].d;
            },
            y, blocks);
      }
      g.y[t * g.ldy + r] = dot;
    }
  }
}

template <class Q>
void gemm(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  if constexpr (std::is_same_v<Q, Q4_0>) {
    if (g.order == DotOrder::Repacked) {
      gemmQ4_0Repacked(g, rowBegin, rowEnd);
      return;
    }
    if (g.rowGroups) {
      // The vec order on a grouped matrix: not a shape the CPU stage makes (a grouped Q4_0
      // matrix has 8k rows, so the repacked order), but still the same bits, from the rows
      // taken out.
      ungroupedRows<WeightKind::Q4_0, gemm<Q>>(g, rowBegin / kGroupRows * kGroupRows, rowBegin,
                                               rowEnd);
      return;
    }
  }
  if constexpr (std::is_same_v<Q, Q4_1>) {
    if (g.rowGroups) {
      gemmGroups<Q>(g, rowBegin, rowEnd);
      return;
    }
  }
  int64_t r = rowBegin;
  if (g.tokens == 1) {
    for (; r + 4 <= rowEnd; r += 4) tile<Q, 4, 1>(g, r, 0);
  } else {
    for (; r + 2 <= rowEnd; r += 2) rowTile<Q, 2>(g, r);
  }
  for (; r < rowEnd; ++r) rowTile<Q, 1>(g, r);
}

// ---- Q4_1 in row groups (row_groups.h; grouped Q4_0 takes the repacked order above) ------------
// One pass per group and token over its blocks: d of the eight rows converted by two FCVTLs and
// multiplied by the token's d in two vector multiplies (the tile: one conversion and one
// multiply per row), the token's quants loaded once for eight rows, Q4_1's minimum terms for
// four rows per fused multiply-add (each lane the tile's fmaSingle for its row), and a thread's
// rows one front-to-back stream. Each row's lanes, fused multiply-adds and horizontal sum are the
// tile's, so the bits are the same. Speed not measured on ARM hardware yet (qemu-user only).

template <class Q>
struct GroupOfQ;
template <>
struct GroupOfQ<Q4_1> {
  using Group = BlockQ4_1x8;
  static constexpr WeightKind kKind = WeightKind::Q4_1;
};

// Four f16 values as floats (exact).
inline float32x4_t halves4(const uint16_t* h) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

// out[r] = row r's dot with one token, as tile<Q, R, 1> computes it for that row.
template <class Q>
void groupDot(const typename GroupOfQ<Q>::Group* x, const typename Q::A* y, int64_t blocks,
              float* out) {
  float32x4_t accLo[kGroupRows], accHi[kGroupRows];
  for (int r = 0; r < kGroupRows; ++r) accLo[r] = accHi[r] = vdupq_n_f32(0.0f);
  float32x4_t summs[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};  // Q4_1: row r in lane r % 4
  const int32x4_t zero = vdupq_n_s32(0);
  for (int64_t b = 0; b < blocks; ++b) {
    const auto& xb = x[b];
    const auto& yb = y[b];
    const float dy = half(yb.d);
    alignas(16) float scale[kGroupRows];
    vst1q_f32(scale, vmulq_n_f32(halves4(xb.d), dy));
    vst1q_f32(scale + 4, vmulq_n_f32(halves4(xb.d + 4), dy));
    if constexpr (Q::kMin) {
      const float s = blockSum(yb);
      summs[0] = vfmaq_n_f32(summs[0], halves4(xb.m), s);
      summs[1] = vfmaq_n_f32(summs[1], halves4(xb.m + 4), s);
    }
    const int8x16_t yLo = vld1q_s8(yb.qs), yHi = vld1q_s8(yb.qs + 16);
    for (int r = 0; r < kGroupRows; ++r) {
      int8x16_t qLo, qHi;
      nibbles(xb.qs[r], qLo, qHi);
      accLo[r] = vfmaq_n_f32(accLo[r], vcvtq_f32_s32(dot16(zero, qLo, yLo)), scale[r]);
      accHi[r] = vfmaq_n_f32(accHi[r], vcvtq_f32_s32(dot16(zero, qHi, yHi)), scale[r]);
    }
  }
  alignas(16) float mins[kGroupRows];
  vst1q_f32(mins, summs[0]);
  vst1q_f32(mins + 4, summs[1]);
  for (int r = 0; r < kGroupRows; ++r) {
    const float sum = hsum8(accLo[r], accHi[r]);
    out[r] = Q::kMin ? sum + mins[r] : sum;
  }
}

// Rows [rowBegin, rowEnd) of a grouped Q4_1 matrix, token by token (its one order).
template <class Q>
void gemmGroups(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  using Group = typename GroupOfQ<Q>::Group;
  using A = typename Q::A;
  int64_t first = 0, last = 0;
  if (!ungroupedEdges<GroupOfQ<Q>::kKind, gemm<Q>>(g, rowBegin, rowEnd, first, last)) return;
  const int64_t blocks = g.cols / kQK;
  groupsTokenByToken<Group, A>(g, first, last,
                               [blocks](const Group* x, const A* a, int64_t, float* out) {
                                 groupDot<Q>(x, a, blocks, out);
                               });
}

// ---- Super-block types (Q8_K activations): Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, IQ4_XS ------------

// One super-block of one row, unpacked once per pass: 8 parts of 32 elements, each as two
// halves of 16 values (q[2 * part + half]), with the int scale of each half.
struct KBlock {
  int8x16_t q[16];
  int32_t scale[16];
  int16x8_t mins;  // per-block minimum factors (Q4_K, Q5_K: 8 sub-blocks; Q2_K: unused)
  float d, dmin;
};

// One token's accumulators of one row: the vec order's eight float lanes (lo, hi) and its
// minimum terms (min lanes or a scalar), or the tiled order's scalar.
struct KAcc {
  float32x4_t lo, hi, min;
  float summs, tiled;
};

// Minimum products, paired as _mm256_madd_epi16 pairs them: lane k of the result is
// m[2k] * b[2k] + m[2k+1] * b[2k+1] for eight int16 pairs.
inline int32x4_t maddPairs(int16x8_t m, int16x8_t b) {
  return vpaddq_s32(vmull_s16(vget_low_s16(m), vget_low_s16(b)), vmull_high_s16(m, b));
}

// The K-quant traits: unpack(x, k), then per token the exact integer lanes (lo: lanes 0..3, hi:
// 4..7, as ggml's AVX2 kernels hold them), adjusted by adjust() (Q6_K's bias), and a block
// step in each order. The default steps: no minimum.
struct NoMin {
  static void adjust(const KBlock&, const void*, const BlockQ8_K&, int32x4_t&, int32x4_t&) {}
  static int32_t minSum(const KBlock&, const void*, const BlockQ8_K&) { return 0; }
  static constexpr bool kHasMin = false;
  static void vecStep(KAcc& acc, const KBlock& k, const void*, const BlockQ8_K& y, int32x4_t lo,
                      int32x4_t hi) {
    const float d = y.d * k.d;
    acc.lo = vfmaq_n_f32(acc.lo, vcvtq_f32_s32(lo), d);
    acc.hi = vfmaq_n_f32(acc.hi, vcvtq_f32_s32(hi), d);
  }
  static float vecResult(const KAcc& acc) { return hsum8(acc.lo, acc.hi); }
};

// Q4_K/Q5_K scales and minimums, scales duplicated per half.
inline void scalesAndMins(const uint8_t packed[12], KBlock& k) {
  int16_t mins[8];
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, mn;
    kQuantScaleMin(j, packed, sc, mn);
    k.scale[2 * j] = k.scale[2 * j + 1] = sc;
    mins[j] = mn;
  }
  k.mins = vld1q_s16(mins);
}

// The 4 minimum products of a Q4_K/Q5_K block and a token: prod[p] = mins[2p] * sums[2p] +
// mins[2p+1] * sums[2p+1], sums[j] the activation sum of sub-block j (two bsums).
inline int32x4_t minProducts(const KBlock& k, const BlockQ8_K& y) {
  return maddPairs(k.mins, vpaddq_s16(vld1q_s16(y.bsums), vld1q_s16(y.bsums + 8)));
}
inline int32_t minProductSum(const KBlock& k, const BlockQ8_K& y) {
  const int32x4_t p = minProducts(k, y);
  return (vgetq_lane_s32(p, 0) + vgetq_lane_s32(p, 1)) +
         (vgetq_lane_s32(p, 2) + vgetq_lane_s32(p, 3));
}

// Q4_K's 32 nibbles of part 2j (low) and 2j+1 (high) from qs[32j..32j+31].
inline void unpackNibbleParts(const uint8_t* qs, KBlock& k) {
  for (int j = 0; j < 4; ++j) {
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t bits = vld1q_u8(qs + 32 * j + 16 * h);
      k.q[4 * j + h] = vreinterpretq_s8_u8(vandq_u8(bits, vdupq_n_u8(0xF)));
      k.q[4 * j + 2 + h] = vreinterpretq_s8_u8(vshrq_n_u8(bits, 4));
    }
  }
}

// Q4_K and Q5_K: 8 sub-blocks with a 6-bit scale and minimum each (kQuantScaleMin), the
// low 4 bits of parts 2j and 2j+1 in the nibbles of qs[32j..32j+31].
struct SubBlockMins : NoMin {
  static constexpr bool kHasMin = true;
  template <class Block>
  static void unpackNibbles(const Block& x, KBlock& k) {
    scalesAndMins(x.scales, k);
    unpackNibbleParts(x.qs, k);
    k.d = half(x.d);
    k.dmin = half(x.dmin);
  }
  static int32_t minSum(const KBlock& k, const void*, const BlockQ8_K& y) {
    return minProductSum(k, y);
  }
};

struct Q4K : SubBlockMins {
  using Block = BlockQ4_K;
  static void unpack(const Block& x, KBlock& k) { unpackNibbles(x, k); }
  // The repacked gemm's step (kernel_table.h): 64 elements, two parts; minProducts' lanes are
  // its minimum terms.
  static constexpr int kGemmParts = 2;
  static void stepMins(const KBlock& k, const void*, const BlockQ8_K& y, int32_t out[4]) {
    vst1q_s32(out, minProducts(k, y));
  }
  // Four minimum lanes, fma(-d_a * dmin, prod, lane) per block.
  static void vecStep(KAcc& acc, const KBlock& k, const void* x, const BlockQ8_K& y, int32x4_t lo,
                      int32x4_t hi) {
    acc.min = vfmaq_n_f32(acc.min, vcvtq_f32_s32(minProducts(k, y)), -y.d * k.dmin);
    NoMin::vecStep(acc, k, x, y, lo, hi);
  }
  // The minimum lanes summed as (m0 + m2) + (m1 + m3).
  static float vecResult(const KAcc& acc) {
    const float32x2_t pairs = vadd_f32(vget_low_f32(acc.min), vget_high_f32(acc.min));
    return hsum8(acc.lo, acc.hi) + (vget_lane_f32(pairs, 0) + vget_lane_f32(pairs, 1));
  }
};

struct Q5K : SubBlockMins {
  using Block = BlockQ5_K;
  // Q4_K's nibbles, plus the fifth bit of element l of part i in bit i of qh[l].
  static void unpack(const Block& x, KBlock& k) {
    unpackNibbles(x, k);
    const uint8x16_t high[2] = {vld1q_u8(x.qh), vld1q_u8(x.qh + 16)};
    for (int i = 0; i < 8; ++i) {
      for (int h = 0; h < 2; ++h) {
        const uint8x16_t fifth = vandq_u8(
            vtstq_u8(high[h], vdupq_n_u8(static_cast<uint8_t>(1u << i))), vdupq_n_u8(0x10));
        k.q[2 * i + h] = vorrq_s8(k.q[2 * i + h], vreinterpretq_s8_u8(fifth));
      }
    }
  }
  // One scalar minimum term, fma(-d_a * dmin, the products' total, summs) per block.
  static void vecStep(KAcc& acc, const KBlock& k, const void* x, const BlockQ8_K& y, int32x4_t lo,
                      int32x4_t hi) {
    acc.summs = fmaSingle(-y.d * k.dmin, static_cast<float>(minProductSum(k, y)), acc.summs);
    NoMin::vecStep(acc, k, x, y, lo, hi);
  }
  static float vecResult(const KAcc& acc) { return hsum8(acc.lo, acc.hi) + acc.summs; }
};

// Q6_K: part i = 4h + p holds 6-bit quants (0..63): the low 4 bits from ql[64h + 32(p & 1) ..]
// (high nibbles for p >= 2), the top 2 from bits 2p, 2p+1 of qh[32h ..]; one int8 scale per 16
// elements (scales[2i + half]). The -32 bias comes off the lanes (adjust).
struct Q6K : NoMin {
  using Block = BlockQ6_K;
  static void unpack(const Block& x, KBlock& k) {
    for (int i = 0; i < 8; ++i) {
      const int h = i / 4, p = i % 4;
      for (int e = 0; e < 2; ++e) {
        const uint8x16_t low = vld1q_u8(x.ql + 64 * h + 32 * (p % 2) + 16 * e);
        const uint8x16_t nib = p < 2 ? vandq_u8(low, vdupq_n_u8(0xF)) : vshrq_n_u8(low, 4);
        const uint8x16_t qh = vld1q_u8(x.qh + 32 * h + 16 * e);
        const uint8x16_t top =
            vandq_u8(vshlq_u8(qh, vdupq_n_s8(static_cast<int8_t>(-2 * p))), vdupq_n_u8(3));
        k.q[2 * i + e] = vreinterpretq_s8_u8(vorrq_u8(nib, vshlq_n_u8(top, 4)));
        k.scale[2 * i + e] = x.scales[2 * i + e];
      }
    }
    k.d = half(x.d);
  }
  // Lane k loses 32 * (bsums[2k] * sc[2k] + bsums[2k+1] * sc[2k+1]).
  static void adjust(const KBlock&, const void* xv, const BlockQ8_K& y, int32x4_t& lo,
                     int32x4_t& hi) {
    const auto& x = *static_cast<const Block*>(xv);
    const int16x8_t s0 = vmovl_s8(vld1_s8(x.scales)), s1 = vmovl_s8(vld1_s8(x.scales + 8));
    lo = vsubq_s32(lo, vshlq_n_s32(maddPairs(vld1q_s16(y.bsums), s0), 5));
    hi = vsubq_s32(hi, vshlq_n_s32(maddPairs(vld1q_s16(y.bsums + 8), s1), 5));
  }
};

// Q2_K: element 128h + 32g + l is bits 2g, 2g+1 of qs[32h + l] (part i = 4h + g); per 16
// elements a 4-bit scale (low nibble of scales[]) and a 4-bit minimum (high nibble). The
// minimum lanes, k: min[2k] * bsum[2k] + min[2k+1] * bsum[2k+1], enter the float lanes first.
struct Q2K : NoMin {
  using Block = BlockQ2_K;
  static constexpr bool kHasMin = true;
  static void unpack(const Block& x, KBlock& k) {
    for (int i = 0; i < 8; ++i) {
      const int h = i / 4, g = i % 4;
      for (int e = 0; e < 2; ++e) {
        const uint8x16_t bits = vld1q_u8(x.qs + 32 * h + 16 * e);
        k.q[2 * i + e] = vreinterpretq_s8_u8(
            vandq_u8(vshlq_u8(bits, vdupq_n_s8(static_cast<int8_t>(-2 * g))), vdupq_n_u8(3)));
        k.scale[2 * i + e] = x.scales[2 * i + e] & 0xF;
      }
    }
    k.d = half(x.d);
    k.dmin = half(x.dmin);
  }
  // The repacked gemm's step (kernel_table.h): 128 elements, four parts; its minimum terms are
  // minLanes' halves.
  static constexpr int kGemmParts = 4;
  static void stepMins(const KBlock&, const void* x, const BlockQ8_K& y, int32_t out[4]) {
    int32x4_t lo, hi;
    minLanes(x, y, lo, hi);
    out[0] = vaddvq_s32(lo);
    out[1] = vaddvq_s32(hi);
  }
  static void minLanes(const void* xv, const BlockQ8_K& y, int32x4_t& lo, int32x4_t& hi) {
    const auto& x = *static_cast<const Block*>(xv);
    const uint8x16_t mins = vshrq_n_u8(vld1q_u8(x.scales), 4);
    const int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
    const int16x8_t m1 = vreinterpretq_s16_u16(vmovl_high_u8(mins));
    lo = maddPairs(m0, vld1q_s16(y.bsums));
    hi = maddPairs(m1, vld1q_s16(y.bsums + 8));
  }
  static int32_t minSum(const KBlock&, const void* x, const BlockQ8_K& y) {
    int32x4_t lo, hi;
    minLanes(x, y, lo, hi);
    return vaddvq_s32(vaddq_s32(lo, hi));
  }
  static void vecStep(KAcc& acc, const KBlock& k, const void* x, const BlockQ8_K& y, int32x4_t lo,
                      int32x4_t hi) {
    int32x4_t minLo, minHi;
    minLanes(x, y, minLo, minHi);
    const float dmin = -y.d * k.dmin;
    acc.lo = vfmaq_n_f32(acc.lo, vcvtq_f32_s32(minLo), dmin);
    acc.hi = vfmaq_n_f32(acc.hi, vcvtq_f32_s32(minHi), dmin);
    NoMin::vecStep(acc, k, x, y, lo, hi);
  }
};

// Q3_K: Q2_K's low bits, less 4 where the third bit (bit i of hmask[l] for part i) is clear;
// 16 signed 6-bit scales (q3KScale).
struct Q3K : NoMin {
  using Block = BlockQ3_K;
  static void unpack(const Block& x, KBlock& k) {
    const uint8x16_t hmask[2] = {vld1q_u8(x.hmask), vld1q_u8(x.hmask + 16)};
    for (int i = 0; i < 8; ++i) {
      const int h = i / 4, g = i % 4;
      for (int e = 0; e < 2; ++e) {
        const uint8x16_t bits = vld1q_u8(x.qs + 32 * h + 16 * e);
        const uint8x16_t low =
            vandq_u8(vshlq_u8(bits, vdupq_n_s8(static_cast<int8_t>(-2 * g))), vdupq_n_u8(3));
        const uint8x16_t set = vtstq_u8(hmask[e], vdupq_n_u8(static_cast<uint8_t>(1u << i)));
        const uint8x16_t four = vbicq_u8(vdupq_n_u8(4), set);
        k.q[2 * i + e] = vsubq_s8(vreinterpretq_s8_u8(low), vreinterpretq_s8_u8(four));
        k.scale[2 * i + e] = q3KScale(x.scales, 2 * i + e);
      }
    }
    k.d = half(x.d);
  }
};

// IQ4_XS: sub-block s is the 32 nibbles of qs[16s..16s+15] (low nibbles first), each an index
// into IQ4_NL's 16 levels; one signed 6-bit scale per sub-block (iq4XsScale).
struct IQ4XS : NoMin {
  using Block = BlockIQ4_XS;
  static void unpack(const Block& x, KBlock& k) {
    const int8x16_t table = vld1q_s8(gguf::kIq4NlValues);
    for (int s = 0; s < 8; ++s) {
      int8x16_t lo, hi;
      nibbles(x.qs + 16 * s, lo, hi);
      k.q[2 * s] = vqtbl1q_s8(table, vreinterpretq_u8_s8(lo));
      k.q[2 * s + 1] = vqtbl1q_s8(table, vreinterpretq_u8_s8(hi));
      k.scale[2 * s] = k.scale[2 * s + 1] = iq4XsScale(x, s);
    }
    k.d = half(x.d);
  }
};

// One row x T tokens of a super-block matrix, in any of its orders (reference_dots.cpp's
// notes): vec, per block, K::vecStep on the eight exact integer lanes; tiled, r = s1 * d_w,
// r = fma(-dmin_w, s2, r) with a minimum, acc = fma(r, d_a, acc); repacked (Q4_K),
// acc = fma(s1, d_w * d_a, acc) and summs = fma(s2, dmin_w * d_a, summs), then acc - summs.
template <class K, int T, DotOrder kOrder>
void kTile(const GemmArgs& g, int64_t row, int64_t t0) {
  using Block = typename K::Block;
  const int64_t blocks = g.cols / kQKK;
  const auto* x =
      reinterpret_cast<const Block*>(g.weights + static_cast<size_t>(row) * g.weightStride);
  const BlockQ8_K* a[T];
  for (int t = 0; t < T; ++t) {
    a[t] = reinterpret_cast<const BlockQ8_K*>(g.act + static_cast<size_t>(t0 + t) * g.actStride);
  }
  KAcc acc[T];
  for (int t = 0; t < T; ++t) {
    acc[t].lo = acc[t].hi = acc[t].min = vdupq_n_f32(0.0f);
    acc[t].summs = acc[t].tiled = 0.0f;
  }
  const int32x4_t zero = vdupq_n_s32(0);
  KBlock k;
  for (int64_t b = 0; b < blocks; ++b) {
    __builtin_prefetch(reinterpret_cast<const uint8_t*>(&x[b]) + 4 * sizeof(Block));
    K::unpack(x[b], k);
    for (int t = 0; t < T; ++t) {
      const BlockQ8_K& y = a[t][b];
      if constexpr (kOrder == DotOrder::RepackedGemm) {
        // Per step of K::kGemmParts parts: its exact total and its minimum term, each fused into
        // its accumulator.
        int32_t prods[4];
        K::stepMins(k, &x[b], y, prods);
        for (int j = 0; j < 8 / K::kGemmParts; ++j) {
          int32x4_t step = zero;
          for (int i = K::kGemmParts * j; i < K::kGemmParts * (j + 1); ++i) {
            step =
                vmlaq_n_s32(step, dot16(zero, k.q[2 * i], vld1q_s8(y.qs + 32 * i)), k.scale[2 * i]);
            step = vmlaq_n_s32(step, dot16(zero, k.q[2 * i + 1], vld1q_s8(y.qs + 32 * i + 16)),
                               k.scale[2 * i + 1]);
          }
          acc[t].tiled = fmaSingle(static_cast<float>(vaddvq_s32(step)), k.d * y.d, acc[t].tiled);
          acc[t].summs = fmaSingle(static_cast<float>(prods[j]), k.dmin * y.d, acc[t].summs);
        }
        continue;
      }
      int32x4_t lo = zero, hi = zero;
      for (int i = 0; i < 8; ++i) {
        lo = vmlaq_n_s32(lo, dot16(zero, k.q[2 * i], vld1q_s8(y.qs + 32 * i)), k.scale[2 * i]);
        hi = vmlaq_n_s32(hi, dot16(zero, k.q[2 * i + 1], vld1q_s8(y.qs + 32 * i + 16)),
                         k.scale[2 * i + 1]);
      }
      K::adjust(k, &x[b], y, lo, hi);
      if constexpr (kOrder == DotOrder::Repacked) {
        const float s1 = static_cast<float>(vaddvq_s32(vaddq_s32(lo, hi)));
        acc[t].tiled = fmaSingle(s1, k.d * y.d, acc[t].tiled);
        acc[t].summs =
            fmaSingle(static_cast<float>(K::minSum(k, &x[b], y)), k.dmin * y.d, acc[t].summs);
      } else if constexpr (kOrder == DotOrder::Tiled) {
        float r = static_cast<float>(vaddvq_s32(vaddq_s32(lo, hi))) * k.d;
        if constexpr (K::kHasMin) {
          r = fmaSingle(-k.dmin, static_cast<float>(K::minSum(k, &x[b], y)), r);
        }
        acc[t].tiled = fmaSingle(r, y.d, acc[t].tiled);
      } else {
        K::vecStep(acc[t], k, &x[b], y, lo, hi);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    g.y[(t0 + t) * g.ldy + row] = kOrder == DotOrder::Repacked || kOrder == DotOrder::RepackedGemm
                                      ? acc[t].tiled - acc[t].summs
                                  : kOrder == DotOrder::Tiled ? acc[t].tiled
                                                              : K::vecResult(acc[t]);
  }
}

template <class K, DotOrder kOrder>
void gemmKOrder(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  for (int64_t r = rowBegin; r < rowEnd; ++r) {
    forTokenTiles(g.tokens, [&]<int T>(int64_t t) { kTile<K, T, kOrder>(g, r, t); });
  }
}

template <class K>
void gemmK(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  if (g.order == DotOrder::Tiled) return gemmKOrder<K, DotOrder::Tiled>(g, rowBegin, rowEnd);
  if constexpr (std::is_same_v<K, Q4K> || std::is_same_v<K, Q2K>) {  // the repacked K-quants
    if (g.order == DotOrder::Repacked) {
      return gemmKOrder<K, DotOrder::Repacked>(g, rowBegin, rowEnd);
    }
    if (g.order == DotOrder::RepackedGemm) {
      return gemmKOrder<K, DotOrder::RepackedGemm>(g, rowBegin, rowEnd);
    }
  }
  gemmKOrder<K, DotOrder::Vec>(g, rowBegin, rowEnd);
}

// ---- IQ4_NL and MXFP4: 32-element blocks of table levels (Q8_0 activations) -----------------

// IQ4_NL's tiled order (tinyBLAS_Q0_AVX, 2+ tokens) is Q4_0's tile with the levels looked up.
struct IQ4NL {
  using W = BlockQ4_0;  // same layout: f16 d + 16 B of nibbles
  using A = BlockQ8_0;
  static constexpr bool kMin = false;
  static void load(const W& b, int8x16_t& lo, int8x16_t& hi) {
    const int8x16_t table = vld1q_s8(gguf::kIq4NlValues);
    nibbles(b.qs, lo, hi);
    lo = vqtbl1q_s8(table, vreinterpretq_u8_s8(lo));
    hi = vqtbl1q_s8(table, vreinterpretq_u8_s8(hi));
  }
  static float scale(const W& b) { return half(b.d); }
};

// MXFP4: the nibbles index the doubled E2M1 levels; the scale is an E8M0 exponent (as
// gguf::e8m0Half, here: a header's inline function could be the copy every caller gets).
struct MXFP4 {
  using W = BlockMXFP4;
  static void load(const W& b, int8x16_t& lo, int8x16_t& hi) {
    const int8x16_t table = vld1q_s8(gguf::kMxfp4Values);
    nibbles(b.qs, lo, hi);
    lo = vqtbl1q_s8(table, vreinterpretq_u8_s8(lo));
    hi = vqtbl1q_s8(table, vreinterpretq_u8_s8(hi));
  }
  static float scale(const W& b) {
    const uint32_t bits = b.e < 2 ? 0x00200000u << b.e : static_cast<uint32_t>(b.e - 1) << 23;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
};

// The vec order of ggml_vec_dot_iq4_nl_q8_0 / ggml_vec_dot_mxfp4_q8_0 (AVX2): even and odd
// blocks in two accumulators, added before the horizontal sum; an odd last block fused into
// the total in scalar.
template <class Q>
float dotTableVec(const typename Q::W* x, const BlockQ8_0* y, int64_t blocks) {
  const int32x4_t zero = vdupq_n_s32(0);
  float32x4_t lo[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  float32x4_t hi[2] = {lo[0], lo[0]};
  int64_t b = 0;
  for (; b + 1 < blocks; b += 2) {
    for (int j = 0; j < 2; ++j) {
      int8x16_t qLo, qHi;
      Q::load(x[b + j], qLo, qHi);
      const float scale = half(y[b + j].d) * Q::scale(x[b + j]);
      lo[j] = vfmaq_n_f32(lo[j], vcvtq_f32_s32(dot16(zero, qLo, vld1q_s8(y[b + j].qs))), scale);
      hi[j] =
          vfmaq_n_f32(hi[j], vcvtq_f32_s32(dot16(zero, qHi, vld1q_s8(y[b + j].qs + 16))), scale);
    }
  }
  float sum = hsum8(vaddq_f32(lo[0], lo[1]), vaddq_f32(hi[0], hi[1]));
  for (; b < blocks; ++b) {
    int8x16_t qLo, qHi;
    Q::load(x[b], qLo, qHi);
    const int32x4_t s = dot16(dot16(zero, qLo, vld1q_s8(y[b].qs)), qHi, vld1q_s8(y[b].qs + 16));
    sum = fmaSingle(half(y[b].d) * Q::scale(x[b]), static_cast<float>(vaddvq_s32(s)), sum);
  }
  return sum;
}

// DotOrder::Repacked (llama.cpp's x86 repacked table kernels): per block the exact total, one
// fma with d_w * d_a.
template <class Q>
float dotTableRepacked(const typename Q::W* x, const BlockQ8_0* y, int64_t blocks) {
  const int32x4_t zero = vdupq_n_s32(0);
  float acc = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    int8x16_t qLo, qHi;
    Q::load(x[b], qLo, qHi);
    const int32x4_t s = dot16(dot16(zero, qLo, vld1q_s8(y[b].qs)), qHi, vld1q_s8(y[b].qs + 16));
    acc = fmaSingle(static_cast<float>(vaddvq_s32(s)), Q::scale(x[b]) * half(y[b].d), acc);
  }
  return acc;
}

// A table-level type's rows one by one, every token, with Dot (dotTableVec, dotTableRepacked).
template <class Q, float (*Dot)(const typename Q::W*, const BlockQ8_0*, int64_t)>
void gemmTableRows(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  const int64_t blocks = g.cols / kQK;
  for (int64_t r = rowBegin; r < rowEnd; ++r) {
    const auto* x =
        reinterpret_cast<const typename Q::W*>(g.weights + static_cast<size_t>(r) * g.weightStride);
    for (int64_t t = 0; t < g.tokens; ++t) {
      const auto* y =
          reinterpret_cast<const BlockQ8_0*>(g.act + static_cast<size_t>(t) * g.actStride);
      g.y[t * g.ldy + r] = Dot(x, y, blocks);
    }
  }
}

void gemmIQ4NL(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  if (g.order == DotOrder::Repacked) {
    return gemmTableRows<IQ4NL, dotTableRepacked<IQ4NL>>(g, rowBegin, rowEnd);
  }
  if (g.order == DotOrder::Tiled) return gemm<IQ4NL>(g, rowBegin, rowEnd);
  gemmTableRows<IQ4NL, dotTableVec<IQ4NL>>(g, rowBegin, rowEnd);
}

void gemmMXFP4(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  if (g.order == DotOrder::Repacked) {
    return gemmTableRows<MXFP4, dotTableRepacked<MXFP4>>(g, rowBegin, rowEnd);
  }
  gemmTableRows<MXFP4, dotTableVec<MXFP4>>(g, rowBegin, rowEnd);
}

// This copy's kernels into a table (the other entries stay as they are).
void fillQuantGemms(KernelTable& t) {
  auto set = [&t](WeightKind k, GemmFn fn) { t.gemm[static_cast<int>(k)] = fn; };
  set(WeightKind::Q4_0, gemm<Q4_0>);
  set(WeightKind::Q4_1, gemm<Q4_1>);
  set(WeightKind::Q5_0, gemm<Q5_0>);
  set(WeightKind::Q5_1, gemm<Q5_1>);
  set(WeightKind::Q8_0, gemm<Q8_0>);
  set(WeightKind::IQ4_NL, gemmIQ4NL);
  set(WeightKind::MXFP4, gemmMXFP4);
  set(WeightKind::Q4_K, gemmK<Q4K>);
  set(WeightKind::Q5_K, gemmK<Q5K>);
  set(WeightKind::Q6_K, gemmK<Q6K>);
  set(WeightKind::Q2_K, gemmK<Q2K>);
  set(WeightKind::Q3_K, gemmK<Q3K>);
  set(WeightKind::IQ4_XS, gemmK<IQ4XS>);
  t.rowGroups[static_cast<int>(WeightKind::Q4_0)] = true;  // gemmGroups
  t.rowGroups[static_cast<int>(WeightKind::Q4_1)] = true;
}

}  // namespace
}  // namespace shoal::cpu
