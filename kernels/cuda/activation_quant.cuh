#pragma once
// The 8-bit activation blocks every quantized mat-vec reads (cuda_kernels.h quantizeActivations),
// as a warp-level step that other kernels can end with (the fused RMSNorm + quantize), so every
// producer writes the same bytes.

#include <cuda_runtime.h>

#include <cstdint>

namespace shoal::cuda {

// Called by all 32 lanes of a warp, lane i holding value i of a block of 32: writes the block's
// int8 quants (q[i]) and its (d, d * sum(q)) with d = max|v| / 127.
__device__ __forceinline__ void quantizeBlock32(float v, int8_t* q, float2* ds) {
  const int lane = threadIdx.x % 32;
  float amax = fabsf(v);
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const int qi = d == 0.0f ? 0 : __float2int_rn(v / d);
  int sum = qi;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  q[lane] = static_cast<int8_t>(qi);
  if (lane == 0) *ds = make_float2(d, d * static_cast<float>(sum));
}

}  // namespace shoal::cuda
