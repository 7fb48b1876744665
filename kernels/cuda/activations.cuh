#pragma once
// The gated FFNs' activations, element by element, for every kernel that applies one: the
// elementwise kernels (elementwise.cu) and the gated mat-vec's epilogue (matvec.cu), so both
// compute the same values.

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"  // GateActivation

namespace shoal::cuda {

// SwiGLU: silu(g) * u.
__device__ __forceinline__ float swigluOf(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// GeGLU with the tanh GELU, evaluated in float (the CPU backend looks it up from a table of f16
// gates, which the accuracy contract's tolerance covers); the same cut-offs at +-10.
__device__ __forceinline__ float gegluOf(float g, float u) {
  constexpr float kCoefA = 0.044715f;
  constexpr float kSqrt2OverPi = 0.7978845608f;
  float gelu;
  if (g <= -10.0f) {
    gelu = 0.0f;
  } else if (g >= 10.0f) {
    gelu = g;
  } else {
    gelu = 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * g * fmaf(kCoefA * g, g, 1.0f)));
  }
  return gelu * u;
}

// gpt-oss's clamped SwiGLU with llama.cpp's alpha 1.702 and limit 7 (the CPU's swiglu_oai.h).
__device__ __forceinline__ float swigluOaiOf(float g, float u) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  const float gc = fminf(g, kLimit);
  const float uc = fminf(fmaxf(u, -kLimit), kLimit);
  return gc / (1.0f + expf(kAlpha * -gc)) * (uc + 1.0f);
}

template <GateActivation A>
__device__ __forceinline__ float activate(float g, float u) {
  if constexpr (A == GateActivation::Silu) return swigluOf(g, u);
  if constexpr (A == GateActivation::GeluTanh) return gegluOf(g, u);
  return swigluOaiOf(g, u);
}

}  // namespace shoal::cuda
