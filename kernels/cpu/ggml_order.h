#pragma once
// Scalar statements of the floating-point evaluation order Shoal's CPU kernels share with
// ggml-cpu as llama.cpp builds it on an x86-64 machine with AVX-512 (its "native" build: the
// reference llama.cpp of Shoal's correctness fixtures). Every CPU kernel level (scalar, AVX2,
// AVX-512) rounds exactly as these helpers do, so all levels give bit-identical results.
//
// The small transformer models Shoal targets are chaotic under activation quantization: a
// different summation order in one dot product moves final logits by ~0.2, enough to change
// greedy continuations. Matching llama.cpp therefore means matching its order, op by op.
//
// Internal linkage on purpose: this header is included by translation units compiled for
// different instruction sets, and an inline function with external linkage could be merged into
// one copy holding instructions the CPU lacks.

#include <cmath>
#include <cstdint>

namespace shoal::cpu::order {

// ggml's hsum_float_8 (ggml-cpu/arch/x86/quants.c): the 128-bit halves added, then pairs.
static inline float hsum8(const float a[8]) {
  const float v0 = a[4] + a[0], v1 = a[5] + a[1], v2 = a[6] + a[2], v3 = a[7] + a[3];
  return (v0 + v2) + (v1 + v3);
}

// _mm512_reduce_add_ps as GCC expands it (avx512fintrin.h, __MM512_REDUCE_OP): the 256-bit
// halves added, then hsum8's order on the result. Used by ggml's AVX-512 F16/F32 dots, its
// softmax, and llamafile's tinyBLAS.
static inline float reduce16(const float a[16]) {
  float u[8];
  for (int i = 0; i < 8; ++i) u[i] = a[i + 8] + a[i];
  return hsum8(u);
}

// ggml_v_expf for __m512 (ggml-cpu/vec.h, AVX512F+DQ branch; adapted by ggml from ARM's
// optimized routines): a degree-5 polynomial in the reduced argument, scaled by scalef. The
// AVX2 branch of the same file rounds differently (it folds the 1 in at the end), so this is the
// AVX-512 variant, kept on every level.
static inline float exp(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  // _mm512_scalef_ps: j * 2^n rounded once, like ldexp.
  return std::ldexp(j, static_cast<int>(n));
}

// ggml_v_silu: x / (1 + exp(0 - x)).
static inline float silu(float x) { return x / (1.0f + exp(0.0f - x)); }

// Round to the nearest integer, ties to even (vroundps with _MM_ROUND_NEAREST).
static inline int32_t roundEven(float x) { return static_cast<int32_t>(std::nearbyint(x)); }

}  // namespace shoal::cpu::order
