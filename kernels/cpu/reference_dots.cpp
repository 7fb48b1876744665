// Scalar reference dot products, in the order of ggml's x86 kernels (see kernel_table.h and
// ggml_order.h). Lane arrays stand for SIMD registers: lane k of a quantized dot holds the exact
// integer dot of elements 4k..4k+3 of a 32-element block, as vpdpbusd / vpmaddubsw+vpmaddwd
// leave it in ggml's ymm accumulators.

#include <cstring>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "engine/gguf/quant_common.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/ggml_order.h"
#include "kernels/cpu/reference_kernels.h"

namespace shoal::cpu::ref {
namespace {

using gguf::bf16ToFloat;
using gguf::halfToFloat;

// The 32 weights of a Q4_0/Q4_1 block in element order: low nibbles are elements 0..15.
void nibbles(const uint8_t qs[16], int32_t out[32]) {
  for (int j = 0; j < 16; ++j) {
    out[j] = qs[j] & 0xF;
    out[j + 16] = qs[j] >> 4;
  }
}

// Q5_0/Q5_1: the nibble plus the fifth bit (bit j of qh for element j) shifted to 16.
void nibblesWithHighBit(const uint8_t qs[16], const uint8_t qh[4], int32_t out[32]) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  nibbles(qs, out);
  for (int j = 0; j < 32; ++j) out[j] |= static_cast<int32_t>((bits >> j) & 1u) << 4;
}

// Eight lanes of 4-element integer dots, then lane = fma(scale, lane sum, lane).
void accumulateBlock(const int32_t x[32], const int8_t y[32], float scale, float acc[8]) {
  for (int k = 0; k < 8; ++k) {
    int32_t s = 0;
    for (int e = 4 * k; e < 4 * k + 4; ++e) s += x[e] * y[e];
    acc[k] = std::fma(scale, static_cast<float>(s), acc[k]);
  }
}

// ggml_vec_dot_f16/f32 (AVX-512: GGML_F32_STEP 64, 4 registers of 16). xs/ys convert element i.
template <typename X, typename Y>
double vecOrderSum(X xs, Y ys, int64_t n, int64_t& done) {
  float acc[4][16] = {};
  const int64_t full = n & ~int64_t{63};
  for (int64_t i = 0; i < full; i += 64) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 16; ++l) {
        const int64_t e = i + 16 * j + l;
        acc[j][l] = std::fma(xs(e), ys(e), acc[j][l]);
      }
    }
  }
  for (int l = 0; l < 16; ++l) {
    acc[0][l] = acc[0][l] + acc[2][l];
    acc[1][l] = acc[1][l] + acc[3][l];
    acc[0][l] = acc[0][l] + acc[1][l];
  }
  done = full;
  return static_cast<double>(order::reduce16(acc[0]));
}

// llamafile tinyBLAS (KN = 16): one register of 16 lanes, n % 16 == 0.
template <typename X, typename Y>
float tiledOrderSum(X xs, Y ys, int64_t n) {
  float acc[16] = {};
  for (int64_t i = 0; i < n; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(xs(i + l), ys(i + l), acc[l]);
  }
  return order::reduce16(acc);
}

// vdpbf16ps on one lane: the odd pair first, then the even one, each fused.
void dpbf16(float& acc, float x0, float y0, float x1, float y1) {
  acc = std::fma(x1, y1, acc);
  acc = std::fma(x0, y0, acc);
}

// Per-sub-block minimum terms: int products of the mins with the Q8_K sums of 32 elements,
// paired as _mm_madd_epi16 pairs them (4 results).
void minProducts(const BlockQ8_K& y, const uint8_t mins[8], int32_t prod[4]) {
  int32_t sums[8];
  for (int k = 0; k < 8; ++k) sums[k] = y.bsums[2 * k] + y.bsums[2 * k + 1];
  for (int p = 0; p < 4; ++p)
    prod[p] = mins[2 * p] * sums[2 * p] + mins[2 * p + 1] * sums[2 * p + 1];
}

}  // namespace

float dotF32(const void* w, const void* a, int64_t n, DotOrder order) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  auto xs = [x](int64_t i) { return x[i]; };
  auto ys = [y](int64_t i) { return y[i]; };
  if (order == DotOrder::Tiled) return tiledOrderSum(xs, ys, n);
  int64_t i = 0;
  // ggml_vec_dot_f32 keeps its total in a float; GCC fuses the leftover products into it.
  float sum = static_cast<float>(vecOrderSum(xs, ys, n, i));
  for (; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

float dotF16(const void* w, const void* a, int64_t n, DotOrder order) {
  return dotHalf(static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a), n, order);
}

float dotHalf(const uint16_t* x, const uint16_t* y, int64_t n, DotOrder order) {
  auto xs = [x](int64_t i) { return halfToFloat(x[i]); };
  auto ys = [y](int64_t i) { return halfToFloat(y[i]); };
  if (order == DotOrder::Tiled) return tiledOrderSum(xs, ys, n);
  int64_t i = 0;
  double sum = vecOrderSum(xs, ys, n, i);
  for (; i < n; ++i) sum += static_cast<double>(xs(i) * ys(i));
  return static_cast<float>(sum);
}

// ggml_vec_dot_bf16 with AVX512_BF16: two registers of 16 lanes over 64-element steps, each lane
// taking an (even, odd) pair through vdpbf16ps; tinyBLAS (KN = 32) uses one register.
float dotBF16(const void* w, const void* a, int64_t n, DotOrder order) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  auto xs = [x](int64_t i) { return bf16ToFloat(x[i]); };
  auto ys = [y](int64_t i) { return bf16ToFloat(y[i]); };
  if (order == DotOrder::Tiled) {
    float acc[16] = {};
    for (int64_t i = 0; i < n; i += 32) {
      for (int l = 0; l < 16; ++l) {
        const int64_t e = i + 2 * l;
        dpbf16(acc[l], xs(e), ys(e), xs(e + 1), ys(e + 1));
      }
    }
    return order::reduce16(acc);
  }
  float c1[16] = {}, c2[16] = {};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int l = 0; l < 16; ++l) {
      const int64_t e = i + 2 * l;
      dpbf16(c1[l], xs(e), ys(e), xs(e + 1), ys(e + 1));
      dpbf16(c2[l], xs(e + 32), ys(e + 32), xs(e + 33), ys(e + 33));
    }
  }
  double sum = 0;
  sum += static_cast<double>(order::reduce16(c1));
  sum += static_cast<double>(order::reduce16(c2));
  for (; i < n; ++i) sum += static_cast<double>(xs(i) * ys(i));
  return static_cast<float>(sum);
}

float dotQ4_0(const void* w, const void* a, int64_t n, DotOrder order) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  int32_t q[32];
  if (order == DotOrder::Repacked) {
    // llama.cpp's x86 repacked kernels: the block's exact total, one fma per block.
    float acc = 0.0f;
    for (int64_t b = 0; b < n / kQK; ++b) {
      nibbles(x[b].qs, q);
      int32_t total = 0;
      for (int e = 0; e < 32; ++e) total += (q[e] - 8) * y[b].qs[e];
      acc = std::fma(static_cast<float>(total), halfToFloat(x[b].d) * halfToFloat(y[b].d), acc);
    }
    return acc;
  }
  float acc[8] = {};
  for (int64_t b = 0; b < n / kQK; ++b) {
    nibbles(x[b].qs, q);
    for (int32_t& v : q) v -= 8;
    accumulateBlock(q, y[b].qs, halfToFloat(x[b].d) * halfToFloat(y[b].d), acc);
  }
  return order::hsum8(acc);
}

// The vec order of ggml's table-level dots (vec_dot_iq4_nl_q8_0, vec_dot_mxfp4_q8_0; AVX2):
// even and odd blocks in two accumulators, added before the horizontal sum, an odd last block
// fused into the total in scalar (sumf += d * (sumi1 + sumi2)). unpack(b, q) writes block b's 32
// levels, scale(b) its product of scales.
template <typename Unpack, typename Scale>
float tableVecOrder(const BlockQ8_0* y, int64_t blocks, Unpack unpack, Scale scale) {
  int32_t q[32];
  float even[8] = {}, odd[8] = {};
  int64_t b = 0;
  for (; b + 1 < blocks; b += 2) {
    unpack(b, q);
    accumulateBlock(q, y[b].qs, scale(b), even);
    unpack(b + 1, q);
    accumulateBlock(q, y[b + 1].qs, scale(b + 1), odd);
  }
  float both[8];
  for (int k = 0; k < 8; ++k) both[k] = even[k] + odd[k];
  float sum = order::hsum8(both);
  for (; b < blocks; ++b) {
    unpack(b, q);
    int32_t s = 0;
    for (int e = 0; e < 32; ++e) s += q[e] * y[b].qs[e];
    sum = std::fma(scale(b), static_cast<float>(s), sum);
  }
  return sum;
}

// The repacked order of llama.cpp's x86 table-level kernels (gemv/gemm_q4_b32_8x8_q8_0_lut_avx,
// as for Q4_0): per block the exact total of its 32 products, acc = fma(total, scale(b), acc).
template <typename Unpack, typename Scale>
float tableRepackedOrder(const BlockQ8_0* y, int64_t blocks, Unpack unpack, Scale scale) {
  int32_t q[32];
  float acc = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    unpack(b, q);
    int32_t total = 0;
    for (int e = 0; e < 32; ++e) total += q[e] * y[b].qs[e];
    acc = std::fma(static_cast<float>(total), scale(b), acc);
  }
  return acc;
}

float dotIQ4_NL(const void* w, const void* a, int64_t n, DotOrder order) {
  const auto* x = static_cast<const BlockQ4_0*>(w);  // same layout: f16 d + 16 B of nibbles
  const auto* y = static_cast<const BlockQ8_0*>(a);
  const int64_t blocks = n / kQK;
  auto unpack = [&](int64_t b, int32_t q[32]) {
    nibbles(x[b].qs, q);
    for (int e = 0; e < 32; ++e) q[e] = gguf::kIq4NlValues[q[e]];
  };
  auto scale = [&](int64_t b) { return halfToFloat(y[b].d) * halfToFloat(x[b].d); };
  if (order == DotOrder::Repacked) return tableRepackedOrder(y, blocks, unpack, scale);
  if (order == DotOrder::Tiled) {  // tinyBLAS_Q0_AVX: one accumulator
    int32_t q[32];
    float acc[8] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      unpack(b, q);
      accumulateBlock(q, y[b].qs, scale(b), acc);
    }
    return order::hsum8(acc);
  }
  return tableVecOrder(y, blocks, unpack, scale);
}

// ggml_vec_dot_mxfp4_q8_0 (AVX2): IQ4_NL's vec order with the E2M1 levels and the E8M0 scale;
// or its repacked order.
float dotMXFP4(const void* w, const void* a, int64_t n, DotOrder order) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  auto unpack = [&](int64_t b, int32_t q[32]) {
    nibbles(x[b].qs, q);
    for (int e = 0; e < 32; ++e) q[e] = gguf::kMxfp4Values[q[e]];
  };
  auto scale = [&](int64_t b) { return halfToFloat(y[b].d) * gguf::e8m0Half(x[b].e); };
  if (order == DotOrder::Repacked) return tableRepackedOrder(y, n / kQK, unpack, scale);
  return tableVecOrder(y, n / kQK, unpack, scale);
}

float dotQ4_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float acc[8] = {};
  float summs = 0;
  int32_t q[32];
  for (int64_t b = 0; b < n / kQK; ++b) {
    // ggml's `summs += m * s` is compiled to an fma (GCC contracts it under -march=native).
    summs = std::fma(halfToFloat(x[b].m), halfToFloat(y[b].s), summs);
    nibbles(x[b].qs, q);
    accumulateBlock(q, y[b].qs, halfToFloat(x[b].d) * halfToFloat(y[b].d), acc);
  }
  return order::hsum8(acc) + summs;
}

float dotQ5_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc[8] = {};
  int32_t q[32];
  for (int64_t b = 0; b < n / kQK; ++b) {
    nibblesWithHighBit(x[b].qs, x[b].qh, q);
    for (int32_t& v : q) v -= 16;
    accumulateBlock(q, y[b].qs, halfToFloat(x[b].d) * halfToFloat(y[b].d), acc);
  }
  return order::hsum8(acc);
}

float dotQ5_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float acc[8] = {};
  float summs = 0;
  int32_t q[32];
  for (int64_t b = 0; b < n / kQK; ++b) {
    summs = std::fma(halfToFloat(x[b].m), halfToFloat(y[b].s), summs);
    nibblesWithHighBit(x[b].qs, x[b].qh, q);
    accumulateBlock(q, y[b].qs, halfToFloat(x[b].d) * halfToFloat(y[b].d), acc);
  }
  return order::hsum8(acc) + summs;
}

float dotQ8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float acc[8] = {};
  int32_t q[32];
  for (int64_t b = 0; b < n / kQK; ++b) {
    for (int j = 0; j < 32; ++j) q[j] = x[b].qs[j];
    accumulateBlock(q, y[b].qs, halfToFloat(x[b].d) * halfToFloat(y[b].d), acc);
  }
  return order::hsum8(acc);
}

// K-quants, DotOrder::Vec (ggml_vec_dot_q{4,5,6}_K_q8_K, AVX2). Per 256-element super-block
// the eight lanes hold exact integers: lane k sums, over each 32-element sub-block, scale * (dot
// of elements 4k..4k+3 of it); then lane = fma(d, lane sum, lane).
//
// K-quants, DotOrder::Tiled (llama.cpp's tiled matmul, ggml-cpu/tiled, AVX-512 VNNI microkernel,
// used for batches of 8+ tokens): per super-block the exact integers s1 = sum of scale * dot
// (the lanes added up) and s2 = sum of min * activation sum; then r = s1 * d_w (rounded),
// r = fma(-dmin_w, s2, r) with a minimum, and acc = fma(r, d_a, acc) (GCC fuses its mul + add).
namespace {
float tiledStep(float acc, const int32_t lanes[8], int32_t minSum, float dw, float dminW, float da,
                bool hasMin) {
  int32_t s1 = 0;
  for (int k = 0; k < 8; ++k) s1 += lanes[k];
  float r = static_cast<float>(s1) * dw;
  if (hasMin) r = std::fma(-dminW, static_cast<float>(minSum), r);
  return std::fma(r, da, acc);
}
}  // namespace

float dotQ4_K(const void* w, const void* a, int64_t n, DotOrder order) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  float accMin[4] = {};
  float tiled = 0, repacked = 0, repackedMin = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = y[b].d * halfToFloat(x[b].d);
    const float dmin = -y[b].d * halfToFloat(x[b].dmin);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) kQuantScaleMin(j, x[b].scales, sc[j], mn[j]);
    int32_t prod[4];
    minProducts(y[b], mn, prod);
    for (int p = 0; p < 4; ++p) accMin[p] = std::fma(dmin, static_cast<float>(prod[p]), accMin[p]);
    int32_t lanes[8] = {};
    int32_t steps[4] = {};         // sub-blocks 2j and 2j+1 (RepackedGemm)
    for (int s = 0; s < 8; ++s) {  // sub-block s: nibble (s % 2) of bytes 32*(s/2) ...
      const uint8_t* q = x[b].qs + 32 * (s / 2);
      const int8_t* q8 = y[b].qs + 32 * s;
      for (int e = 0; e < 32; ++e) {
        const int v = (s % 2 == 0) ? (q[e] & 0xF) : (q[e] >> 4);
        lanes[e / 4] += sc[s] * v * q8[e];
        steps[s / 2] += sc[s] * v * q8[e];
      }
    }
    if (order == DotOrder::RepackedGemm) {
      // llama.cpp's x86 repacked gemm: the same two accumulators, fused every 64 elements.
      const float da = y[b].d;
      for (int j = 0; j < 4; ++j) {
        repacked = std::fma(static_cast<float>(steps[j]), halfToFloat(x[b].d) * da, repacked);
        repackedMin =
            std::fma(static_cast<float>(prod[j]), halfToFloat(x[b].dmin) * da, repackedMin);
      }
      continue;
    }
    if (order == DotOrder::Tiled) {
      tiled = tiledStep(tiled, lanes, (prod[0] + prod[1]) + (prod[2] + prod[3]),
                        halfToFloat(x[b].d), halfToFloat(x[b].dmin), y[b].d, true);
      continue;
    }
    if (order == DotOrder::Repacked) {
      // llama.cpp's x86 repacked kernel (ggml_gemv_q4_K_8x8_q8_K and the gemm beside it): the
      // exact totals s1 and s2 per super-block, each fused into its own accumulator with
      // d_w * d_a and dmin_w * d_a; the result is their difference.
      int32_t s1 = 0;
      for (int k = 0; k < 8; ++k) s1 += lanes[k];
      const float da = y[b].d;
      repacked = std::fma(static_cast<float>(s1), halfToFloat(x[b].d) * da, repacked);
      repackedMin = std::fma(static_cast<float>((prod[0] + prod[1]) + (prod[2] + prod[3])),
                             halfToFloat(x[b].dmin) * da, repackedMin);
      continue;
    }
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lanes[k]), acc[k]);
  }
  if (order == DotOrder::Tiled) return tiled;
  if (order == DotOrder::Repacked || order == DotOrder::RepackedGemm) {
    return repacked - repackedMin;
  }
  const float m = (accMin[0] + accMin[2]) + (accMin[1] + accMin[3]);
  return order::hsum8(acc) + m;
}

float dotQ5_K(const void* w, const void* a, int64_t n, DotOrder order) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  float summs = 0, tiled = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = y[b].d * halfToFloat(x[b].d);
    const float dmin = -y[b].d * halfToFloat(x[b].dmin);
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) kQuantScaleMin(j, x[b].scales, sc[j], mn[j]);
    int32_t prod[4];
    minProducts(y[b], mn, prod);
    const int32_t minSum = (prod[0] + prod[1]) + (prod[2] + prod[3]);
    summs = std::fma(dmin, static_cast<float>(minSum), summs);
    int32_t lanes[8] = {};
    for (int s = 0; s < 8; ++s) {
      const uint8_t* q = x[b].qs + 32 * (s / 2);
      const int8_t* q8 = y[b].qs + 32 * s;
      for (int e = 0; e < 32; ++e) {
        const int lo = (s % 2 == 0) ? (q[e] & 0xF) : (q[e] >> 4);
        const int hi = (x[b].qh[e] >> s) & 1;  // sub-block s keeps its fifth bits in bit s
        lanes[e / 4] += sc[s] * (lo | (hi << 4)) * q8[e];
      }
    }
    if (order == DotOrder::Tiled) {
      tiled = tiledStep(tiled, lanes, minSum, halfToFloat(x[b].d), halfToFloat(x[b].dmin), y[b].d,
                        true);
      continue;
    }
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lanes[k]), acc[k]);
  }
  return order == DotOrder::Tiled ? tiled : order::hsum8(acc) + summs;
}

// Q2_K, Q3_K, IQ4_XS (ggml_vec_dot_{q2_K,q3_K,iq4_xs}_q8_K, AVX2): per super-block eight exact
// integer lanes, lane k holding elements 4k..4k+3 of every 32 (value * scale * activation);
// acc = fma(d_w * d_a, lane, acc) per lane (Q2_K first acc = fma(-dmin_w * d_a, min lane, acc)
// with min lane k = min[2k] * bsum[2k] + min[2k + 1] * bsum[2k + 1]), then hsum_float_8. The
// tiled order takes the lanes' total (tiledStep).
namespace {
template <typename Value>
void elementLanes(const int8_t* q8, Value value, int32_t lanes[8]) {
  for (int k = 0; k < 8; ++k) lanes[k] = 0;
  for (int e = 0; e < kQKK; ++e) lanes[(e % 32) / 4] += value(e) * q8[e];
}
}  // namespace

float dotQ2_K(const void* w, const void* a, int64_t n, DotOrder order) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  float tiled = 0, repacked = 0, repackedMin = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ2_K& blk = x[b];
    int32_t lanes[8], mins[8];
    elementLanes(
        y[b].qs,
        [&](int e) {
          const int q = (blk.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
          return (blk.scales[e / 16] & 0xF) * q;
        },
        lanes);
    for (int k = 0; k < 8; ++k) {
      mins[k] = (blk.scales[2 * k] >> 4) * y[b].bsums[2 * k] +
                (blk.scales[2 * k + 1] >> 4) * y[b].bsums[2 * k + 1];
    }
    if (order == DotOrder::Tiled) {
      int32_t minSum = 0;
      for (int32_t m : mins) minSum += m;
      tiled =
          tiledStep(tiled, lanes, minSum, halfToFloat(blk.d), halfToFloat(blk.dmin), y[b].d, true);
      continue;
    }
    if (order == DotOrder::Repacked || order == DotOrder::RepackedGemm) {
      // llama.cpp's x86 repacked Q2_K (ggml_gemv/gemm_q2_K_8x8_q8_K, AVX-512 CPUs): Q4_K's two
      // accumulators; the gemv fuses once per super-block, the gemm once per 128 elements (half
      // h: sub-blocks 8h .. 8h+7, mins pairs 4h .. 4h+3).
      int32_t halves[2] = {}, minHalves[2] = {};
      for (int e = 0; e < kQKK; ++e) {
        const int q = (blk.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        halves[e / 128] += (blk.scales[e / 16] & 0xF) * q * y[b].qs[e];
      }
      for (int k = 0; k < 8; ++k) minHalves[k / 4] += mins[k];
      const float da = y[b].d;
      const int steps = order == DotOrder::RepackedGemm ? 2 : 1;
      for (int h = 0; h < steps; ++h) {
        const int32_t s1 = steps == 2 ? halves[h] : halves[0] + halves[1];
        const int32_t s2 = steps == 2 ? minHalves[h] : minHalves[0] + minHalves[1];
        repacked = std::fma(static_cast<float>(s1), halfToFloat(blk.d) * da, repacked);
        repackedMin = std::fma(static_cast<float>(s2), halfToFloat(blk.dmin) * da, repackedMin);
      }
      continue;
    }
    const float d = y[b].d * halfToFloat(blk.d);
    const float dmin = -y[b].d * halfToFloat(blk.dmin);
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(dmin, static_cast<float>(mins[k]), acc[k]);
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lanes[k]), acc[k]);
  }
  if (order == DotOrder::Repacked || order == DotOrder::RepackedGemm) {
    return repacked - repackedMin;
  }
  return order == DotOrder::Tiled ? tiled : order::hsum8(acc);
}

float dotQ3_K(const void* w, const void* a, int64_t n, DotOrder order) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  float tiled = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ3_K& blk = x[b];
    int32_t lanes[8];
    elementLanes(
        y[b].qs,
        [&](int e) {
          const int h = e / 128, g = (e % 128) / 32, l = e % 32;
          const int low = (blk.qs[32 * h + l] >> (2 * g)) & 3;
          const int high = (blk.hmask[l] >> (4 * h + g)) & 1;
          return q3KScale(blk.scales, e / 16) * (low - (high ? 0 : 4));
        },
        lanes);
    if (order == DotOrder::Tiled) {
      tiled = tiledStep(tiled, lanes, 0, halfToFloat(blk.d), 0.0f, y[b].d, false);
      continue;
    }
    const float d = y[b].d * halfToFloat(blk.d);
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lanes[k]), acc[k]);
  }
  return order == DotOrder::Tiled ? tiled : order::hsum8(acc);
}

float dotIQ4_XS(const void* w, const void* a, int64_t n, DotOrder order) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  float tiled = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockIQ4_XS& blk = x[b];
    int32_t lanes[8];
    elementLanes(
        y[b].qs,
        [&](int e) {
          const int s = e / 32, l = e % 32;
          const uint8_t byte = blk.qs[16 * s + l % 16];
          const int nib = l < 16 ? (byte & 0xF) : (byte >> 4);
          return iq4XsScale(blk, s) * gguf::kIq4NlValues[nib];
        },
        lanes);
    if (order == DotOrder::Tiled) {
      tiled = tiledStep(tiled, lanes, 0, halfToFloat(blk.d), 0.0f, y[b].d, false);
      continue;
    }
    const float d = halfToFloat(blk.d) * y[b].d;
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lanes[k]), acc[k]);
  }
  return order == DotOrder::Tiled ? tiled : order::hsum8(acc);
}

// Q6_K: values are used unsigned (0..63) and the -32 offset is taken off per lane afterwards,
// from the Q8_K sums: lane k loses 32 * (bsums[2k]*scale[2k] + bsums[2k+1]*scale[2k+1]).
float dotQ6_K(const void* w, const void* a, int64_t n, DotOrder order) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float acc[8] = {};
  float tiled = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = y[b].d * halfToFloat(x[b].d);
    const int8_t* sc = x[b].scales;
    int32_t lanes[8] = {};
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x[b].ql + 64 * half;
      const uint8_t* qh = x[b].qh + 32 * half;
      for (int part = 0; part < 4; ++part) {
        const int8_t* q8 = y[b].qs + 128 * half + 32 * part;
        for (int e = 0; e < 32; ++e) {
          const int low = (part % 2 == 0 ? ql[e] : ql[e + 32]);
          const int nib = part < 2 ? (low & 0xF) : (low >> 4);
          const int v = nib | (((qh[e] >> (2 * part)) & 3) << 4);
          const int scale = sc[8 * half + 2 * part + (e >= 16 ? 1 : 0)];
          lanes[e / 4] += scale * v * q8[e];
        }
      }
    }
    for (int k = 0; k < 8; ++k) {
      lanes[k] -= 32 * (y[b].bsums[2 * k] * sc[2 * k] + y[b].bsums[2 * k + 1] * sc[2 * k + 1]);
    }
    if (order == DotOrder::Tiled) {
      tiled = tiledStep(tiled, lanes, 0, halfToFloat(x[b].d), 0.0f, y[b].d, false);
      continue;
    }
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, static_cast<float>(lanes[k]), acc[k]);
  }
  return order == DotOrder::Tiled ? tiled : order::hsum8(acc);
}

float dot(WeightKind kind, const void* w, const void* a, int64_t n, DotOrder order) {
  switch (kind) {
    case WeightKind::F32:
      return dotF32(w, a, n, order);
    case WeightKind::F16:
      return dotF16(w, a, n, order);
    case WeightKind::BF16:
      return dotBF16(w, a, n, order);
    case WeightKind::Q4_0:
      return dotQ4_0(w, a, n, order);
    case WeightKind::Q4_1:
      return dotQ4_1(w, a, n);
    case WeightKind::Q5_0:
      return dotQ5_0(w, a, n);
    case WeightKind::Q5_1:
      return dotQ5_1(w, a, n);
    case WeightKind::Q8_0:
      return dotQ8_0(w, a, n);
    case WeightKind::Q4_K:
      return dotQ4_K(w, a, n, order);
    case WeightKind::Q5_K:
      return dotQ5_K(w, a, n, order);
    case WeightKind::Q6_K:
      return dotQ6_K(w, a, n, order);
    case WeightKind::IQ4_NL:
      return dotIQ4_NL(w, a, n, order);
    case WeightKind::MXFP4:
      return dotMXFP4(w, a, n, order);
    case WeightKind::Q2_K:
      return dotQ2_K(w, a, n, order);
    case WeightKind::Q3_K:
      return dotQ3_K(w, a, n, order);
    case WeightKind::IQ4_XS:
      return dotIQ4_XS(w, a, n, order);
    case WeightKind::Count:
      break;
  }
  throw Error("CPU backend: no dot product for weight kind " +
              std::to_string(static_cast<int>(kind)));
}

}  // namespace shoal::cpu::ref
