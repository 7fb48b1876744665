// The aarch64 kernel tables: Isa::Neon (every ARMv8-A CPU: NEON is part of the 64-bit ARM
// baseline) and Isa::NeonDot (ARMv8.2 dot-product extension: Cortex-A76 and later, e.g.
// Raspberry Pi 5, Jetson Orin, Neoverse servers). Both start from the scalar reference table and
// replace what the NEON files provide, and both compute what the reference computes, bit for
// bit; the float kernels here serve both (they need no extension).
//
// NEON here: the F32/F16/BF16 dots in both orders (and so those matrix kernels and the f16
// attention dots), the Q8_0/Q8_1/Q8_K activation quantizers. The reference's: half conversion,
// the softmax numerator and SwiGLU.

#include <arm_neon.h>

#include <cstring>

#include "engine/gguf/dequantize.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/neon_helpers.h"
#include "kernels/cpu/reference_kernels.h"
#include "kernels/cpu/simd_kernels.h"

namespace shoal::cpu {
namespace {

// ---- F32/F16 dots: 16 lanes of ggml's AVX-512 registers as four float32x4 --------------------

struct Lanes16 {
  float32x4_t v[4];
};

inline void load16(const float* p, Lanes16& out) {
  for (int i = 0; i < 4; ++i) out.v[i] = vld1q_f32(p + 4 * i);
}
inline void load16(const uint16_t* p, Lanes16& out) {
  for (int i = 0; i < 2; ++i) {
    const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p + 8 * i));
    out.v[2 * i] = vcvt_f32_f16(vget_low_f16(h));
    out.v[2 * i + 1] = vcvt_high_f32_f16(h);
  }
}

inline void fma16(Lanes16& acc, const Lanes16& x, const Lanes16& y) {
  for (int i = 0; i < 4; ++i) acc.v[i] = vfmaq_f32(acc.v[i], x.v[i], y.v[i]);
}

// reduce16: lanes 8..15 added to 0..7, then hsum8.
inline float reduce16(const Lanes16& a) {
  return hsum8(vaddq_f32(a.v[2], a.v[0]), vaddq_f32(a.v[3], a.v[1]));
}

inline float element(const float* p, int64_t i) { return p[i]; }
inline float element(const uint16_t* p, int64_t i) { return half(p[i]); }

// DotOrder::Tiled (tinyBLAS): one register of 16 lanes, n % 16 == 0.
template <typename E>
float tiledDot(const E* x, const E* y, int64_t n) {
  Lanes16 acc{}, a, b;
  for (int i = 0; i < 4; ++i) acc.v[i] = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < n; i += 16) {
    load16(x + i, a);
    load16(y + i, b);
    fma16(acc, a, b);
  }
  return reduce16(acc);
}

// DotOrder::Vec (ggml_vec_dot_f16/f32): four registers over 64-element steps, folded (0 + 2),
// (1 + 3), then added; the total of the whole steps, as reference_dots.cpp's vecOrderSum.
template <typename E>
float vecSteps(const E* x, const E* y, int64_t full) {
  Lanes16 acc[4], a, b;
  for (auto& r : acc) {
    for (int i = 0; i < 4; ++i) r.v[i] = vdupq_n_f32(0.0f);
  }
  for (int64_t i = 0; i < full; i += 64) {
    for (int j = 0; j < 4; ++j) {
      load16(x + i + 16 * j, a);
      load16(y + i + 16 * j, b);
      fma16(acc[j], a, b);
    }
  }
  for (int i = 0; i < 4; ++i) {
    acc[0].v[i] = vaddq_f32(acc[0].v[i], acc[2].v[i]);
    acc[1].v[i] = vaddq_f32(acc[1].v[i], acc[3].v[i]);
    acc[0].v[i] = vaddq_f32(acc[0].v[i], acc[1].v[i]);
  }
  return reduce16(acc[0]);
}

float dotF32(const float* x, const float* y, int64_t n, DotOrder order) {
  if (order == DotOrder::Tiled) return tiledDot(x, y, n);
  const int64_t full = n & ~int64_t{63};
  float sum = vecSteps(x, y, full);
  for (int64_t i = full; i < n; ++i) sum = fmaSingle(x[i], y[i], sum);
  return sum;
}

float dotHalf(const uint16_t* x, const uint16_t* y, int64_t n, DotOrder order) {
  if (order == DotOrder::Tiled) return tiledDot(x, y, n);
  const int64_t full = n & ~int64_t{63};
  double sum = static_cast<double>(vecSteps(x, y, full));
  for (int64_t i = full; i < n; ++i) sum += static_cast<double>(element(x, i) * element(y, i));
  return static_cast<float>(sum);
}

template <typename E, float (*Dot)(const E*, const E*, int64_t, DotOrder)>
void gemmFloat(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd) {
  for (int64_t r = rowBegin; r < rowEnd; ++r) {
    const auto* w = reinterpret_cast<const E*>(g.weights + static_cast<size_t>(r) * g.weightStride);
    for (int64_t t = 0; t < g.tokens; ++t) {
      const auto* a = reinterpret_cast<const E*>(g.act + static_cast<size_t>(t) * g.actStride);
      g.y[t * g.ldy + r] = Dot(w, a, g.cols, g.order);
    }
  }
}

// ---- BF16: vdpbf16ps emulated per lane (AVX512_BF16: the odd pair, then the even one) -----

// Lanes 0..7 take the (even, odd) pairs of elements 0..15, lanes 8..15 those of 16..31: lane l
// = fma(x[2l], y[2l], fma(x[2l+1], y[2l+1], lane l)). bf16 -> f32 is a 16-bit shift, exact.
inline void dpbf16Step(Lanes16& acc, const uint16_t* x, const uint16_t* y) {
  for (int h = 0; h < 2; ++h) {
    const uint16x8x2_t xp = vld2q_u16(x + 16 * h), yp = vld2q_u16(y + 16 * h);
    for (int q = 0; q < 2; ++q) {
      const auto widen = [q](uint16x8_t v) {
        return vreinterpretq_f32_u32(q == 0 ? vshll_n_u16(vget_low_u16(v), 16)
                                            : vshll_high_n_u16(v, 16));
      };
      float32x4_t& lanes = acc.v[2 * h + q];
      lanes = vfmaq_f32(lanes, widen(xp.val[1]), widen(yp.val[1]));
      lanes = vfmaq_f32(lanes, widen(xp.val[0]), widen(yp.val[0]));
    }
  }
}

inline float bf16(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// ggml_vec_dot_bf16 (two registers over 64-element steps, a double total, the leftovers as
// float products) or tinyBLAS (one register, n % 32 == 0), as reference_dots.cpp's dotBF16.
float dotBF16(const uint16_t* x, const uint16_t* y, int64_t n, DotOrder order) {
  Lanes16 c1, c2;
  for (int i = 0; i < 4; ++i) c1.v[i] = c2.v[i] = vdupq_n_f32(0.0f);
  if (order == DotOrder::Tiled) {
    for (int64_t i = 0; i < n; i += 32) dpbf16Step(c1, x + i, y + i);
    return reduce16(c1);
  }
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    dpbf16Step(c1, x + i, y + i);
    dpbf16Step(c2, x + i + 32, y + i + 32);
  }
  double sum = 0;
  sum += static_cast<double>(reduce16(c1));
  sum += static_cast<double>(reduce16(c2));
  for (; i < n; ++i) sum += static_cast<double>(bf16(x[i]) * bf16(y[i]));
  return static_cast<float>(sum);
}

// ---- Q8_0 / Q8_1 activations: ggml's x86 quantizer (127/amax, ties to even) -------------------

// One block: its quants and scale; returns the sum of the quants.
inline int32_t quantizeBlock(const float* x, float& d, int8_t qs[32]) {
  float32x4_t v[8];
  float32x4_t amax = vdupq_n_f32(0.0f);
  for (int i = 0; i < 8; ++i) {
    v[i] = vld1q_f32(x + 4 * i);
    amax = vmaxnmq_f32(amax, vabsq_f32(v[i]));
  }
  const float m = vmaxnmvq_f32(amax);
  d = m / 127.0f;
  const float id = m != 0.0f ? 127.0f / m : 0.0f;
  int32x4_t sum = vdupq_n_s32(0);
  for (int i = 0; i < 8; i += 2) {
    const int32x4_t q0 = vcvtnq_s32_f32(vmulq_n_f32(v[i], id));
    const int32x4_t q1 = vcvtnq_s32_f32(vmulq_n_f32(v[i + 1], id));
    sum = vaddq_s32(sum, vaddq_s32(q0, q1));
    const int16x8_t q16 = vcombine_s16(vmovn_s32(q0), vmovn_s32(q1));
    vst1_s8(qs + 4 * i, vmovn_s16(q16));
  }
  return vaddvq_s32(sum);
}

void quantizeQ8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float d;
    quantizeBlock(x + b * kQK, d, y[b].qs);
    y[b].d = gguf::floatToHalf(d);
  }
}

void quantizeQ8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float d;
    const int32_t sum = quantizeBlock(x + b * kQK, d, y[b].qs);
    y[b].d = gguf::floatToHalf(d);
    y[b].s = gguf::floatToHalf(d * static_cast<float>(sum));
  }
}

// ggml's quantize_row_q8_K_ref (see avx2_ops.cpp's quantizeQ8_K, which this mirrors): the first
// signed value of largest magnitude (a compare and select: NaN never wins), iscale = -127 / it,
// q = the low byte of min(127, nearest_int(iscale * x)) with ggml's add-1.5*2^23 rounding trick
// done step by step as the scalar code does it, the sums of each 16 quants, d = 1 / iscale.
void quantizeQ8_K(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float32x4_t m = vdupq_n_f32(0.0f);
    for (int j = 0; j < kQKK; j += 4) {
      const float32x4_t ax = vabsq_f32(vld1q_f32(x + j));
      m = vbslq_f32(vcgtq_f32(ax, m), ax, m);
    }
    const float amax = vmaxvq_f32(m);
    if (amax == 0.0f) {
      std::memset(&y[b], 0, sizeof y[b]);
      continue;
    }
    int first = 0;
    for (int j = 0; j < kQKK; j += 4) {
      const uint32x4_t hit = vceqq_f32(vabsq_f32(vld1q_f32(x + j)), vdupq_n_f32(amax));
      if (vmaxvq_u32(hit) != 0) {
        first = j;
        while (__builtin_fabsf(x[first]) != amax) ++first;
        break;
      }
    }
    const float iscale = -127.f / x[first];
    for (int g = 0; g < 16; ++g) {
      int32x4_t q[4];
      for (int k = 0; k < 4; ++k) {
        const float32x4_t v = vmulq_n_f32(vld1q_f32(x + 16 * g + 4 * k), iscale);
        const int32x4_t bits = vreinterpretq_s32_f32(vaddq_f32(v, vdupq_n_f32(12582912.f)));
        const int32x4_t rounded =
            vsubq_s32(vandq_s32(bits, vdupq_n_s32(0x007fffff)), vdupq_n_s32(0x00400000));
        q[k] = vminq_s32(rounded, vdupq_n_s32(127));
      }
      // Narrowing keeps the low bytes, as the scalar code's int8 store does.
      const int8x16_t bytes =
          vcombine_s8(vmovn_s16(vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]))),
                      vmovn_s16(vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]))));
      vst1q_s8(y[b].qs + 16 * g, bytes);
      y[b].bsums[g] = static_cast<int16_t>(vaddlvq_s8(bytes));
    }
    y[b].d = 1 / iscale;
  }
}

KernelTable makeTable(Isa isa, void (*setQuantGemms)(KernelTable&)) {
  KernelTable t = referenceKernels();
  t.isa = isa;
  setQuantGemms(t);
  t.gemm[static_cast<int>(WeightKind::F32)] = gemmFloat<float, dotF32>;
  t.gemm[static_cast<int>(WeightKind::F16)] = gemmFloat<uint16_t, dotHalf>;
  t.gemm[static_cast<int>(WeightKind::BF16)] = gemmFloat<uint16_t, dotBF16>;
  t.convert[static_cast<int>(ActKind::Q8_0)] = quantizeQ8_0;
  t.convert[static_cast<int>(ActKind::Q8_1)] = quantizeQ8_1;
  t.convert[static_cast<int>(ActKind::Q8_K)] = quantizeQ8_K;
  t.dotF16 = dotHalf;
  t.dotsF16 = dotsOneByOne<dotHalf>;
  return t;
}

}  // namespace

const KernelTable* neonKernels() {
  static const KernelTable table = makeTable(Isa::Neon, neon::setQuantGemms);
  return &table;
}

const KernelTable* neonDotKernels() {
  static const KernelTable table = makeTable(Isa::NeonDot, neondot::setQuantGemms);
  return &table;
}

}  // namespace shoal::cpu
