#pragma once
// Device-side reading of the GGUF quantization blocks (layouts: engine/gguf/dequantize.cpp and
// kernels/cpu/block_layouts.h). A row is read as 32-element sub-blocks: sub-block s of a 32-block
// format is block s; of a K-quant it is sub-block s % 8 of super-block s / 8.

#include <cuda_fp16.h>

#include <cstdint>

namespace shoal::cuda {

constexpr int kQ4_0Bytes = 18, kQ4_1Bytes = 20, kQ8_0Bytes = 34, kQ4_KBytes = 144, kQ6_KBytes = 210;

__device__ __forceinline__ float loadHalf(const uint8_t* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));
}

// Four bytes from a 2-byte aligned address (block fields sit at even offsets only).
__device__ __forceinline__ int load4(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<int>(static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16));
}

// 6-bit scale and minimum of sub-block j of a Q4_K super-block (scales = its 12 packed bytes).
__device__ __forceinline__ void q4kScaleMin(int j, const uint8_t* q, int& scale, int& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace shoal::cuda
