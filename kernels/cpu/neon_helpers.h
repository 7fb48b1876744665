#pragma once
// Helpers of the aarch64 NEON kernel files: the x86 evaluation order of ggml_order.h written in
// NEON registers, so that the NEON levels stay bit-identical to the scalar reference (and so to
// the x86 levels: a pipeline split between an x86 and an ARM node computes what one machine
// would).
//
// Eight float lanes of an x86 ymm accumulator live in two float32x4 registers here (lo: lanes
// 0..3, hi: 4..7); the integer lane k of a 32-element block (the exact dot of elements 4k..4k+3)
// is lane k % 4 of lo or hi. Additions and fused multiply-adds are per lane, so the registers'
// width does not change a rounding.
//
// Internal linkage and no standard library templates, as in the x86 files: this header is
// compiled once for plain ARMv8-A and once with the dot-product extension (Isa::NeonDot), and an
// out-of-line copy built with the extension must not serve a CPU without it.

#include <arm_neon.h>

#include <cstdint>

namespace shoal::cpu {
namespace {

// An f16 as a float (exact; FCVT).
inline float half(uint16_t h) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

// a * b + c rounded once (FMADD; std::fma could be a shared out-of-line copy).
inline float fmaSingle(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

// hsum_float_8 of the eight lanes (lo, hi): the halves added, then (v0 + v2) + (v1 + v3).
inline float hsum8(float32x4_t lo, float32x4_t hi) {
  const float32x4_t v = vaddq_f32(hi, lo);
  const float32x2_t pairs = vadd_f32(vget_low_f32(v), vget_high_f32(v));
  return vget_lane_f32(pairs, 0) + vget_lane_f32(pairs, 1);
}

// acc + the four 4-element integer dots of a and b (16 signed bytes each), exact.
inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  // Products fit int16 (|a*b| <= 2^14); pairs are widened to int32 before any further sum.
  const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
  const int16x8_t hi = vmull_high_s8(a, b);
  return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
#endif
}

// The 32 nibbles of 16 packed bytes in element order: low nibbles are elements 0..15.
inline void nibbles(const uint8_t* qs, int8x16_t& lo, int8x16_t& hi) {
  const uint8x16_t packed = vld1q_u8(qs);
  lo = vreinterpretq_s8_u8(vandq_u8(packed, vdupq_n_u8(0xF)));
  hi = vreinterpretq_s8_u8(vshrq_n_u8(packed, 4));
}

}  // namespace
}  // namespace shoal::cpu
