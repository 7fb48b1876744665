// Decode mat-vec: y = W x for a few tokens, W in its GGUF format. One warp per output row; lane
// l takes the 32-element sub-blocks l, l + 32, ... of the row, so a warp reads a contiguous run
// of blocks (coalesced) and the whole row exactly once. Quantized formats multiply their integer
// quants with the int8 activations four at a time (__dp4a) and apply the scales per sub-block.

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_blocks.cuh"

namespace shoal::cuda {
namespace {

using gguf::TensorType;

constexpr int kWarpsPerBlock = 4;

// Dot product of sub-block s of a row with 32 activations (xq, d and d*sum in xds).
template <TensorType T>
__device__ __forceinline__ float subBlockDot(const uint8_t* row, int64_t s, const int* x,
                                             float2 xds);

template <>
__device__ __forceinline__ float subBlockDot<TensorType::Q4_0>(const uint8_t* row, int64_t s,
                                                               const int* x, float2 xds) {
  // value = d * (nibble - 8); low nibbles are elements 0..15, high nibbles 16..31.
  const uint8_t* b = row + s * kQ4_0Bytes;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int v = load4(b + 2 + 4 * i);
    sum = __dp4a(static_cast<int>(__vsub4(v & 0x0F0F0F0F, 0x08080808)), x[i], sum);
    sum = __dp4a(static_cast<int>(__vsub4((v >> 4) & 0x0F0F0F0F, 0x08080808)), x[i + 4], sum);
  }
  return loadHalf(b) * xds.x * static_cast<float>(sum);
}

template <>
__device__ __forceinline__ float subBlockDot<TensorType::Q4_1>(const uint8_t* row, int64_t s,
                                                               const int* x, float2 xds) {
  // value = d * nibble + m: the minimum meets the activations' sum (xds.y = dx * sum(q)).
  const uint8_t* b = row + s * kQ4_1Bytes;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int v = load4(b + 4 + 4 * i);
    sum = __dp4a(v & 0x0F0F0F0F, x[i], sum);
    sum = __dp4a((v >> 4) & 0x0F0F0F0F, x[i + 4], sum);
  }
  return loadHalf(b) * xds.x * static_cast<float>(sum) + loadHalf(b + 2) * xds.y;
}

template <>
__device__ __forceinline__ float subBlockDot<TensorType::Q8_0>(const uint8_t* row, int64_t s,
                                                               const int* x, float2 xds) {
  const uint8_t* b = row + s * kQ8_0Bytes;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum = __dp4a(load4(b + 2 + 4 * i), x[i], sum);
  return loadHalf(b) * xds.x * static_cast<float>(sum);
}

template <>
__device__ __forceinline__ float subBlockDot<TensorType::Q4_K>(const uint8_t* row, int64_t s,
                                                               const int* x, float2 xds) {
  // value = d * scale_j * nibble - dmin * min_j; sub-blocks 2c and 2c+1 share qs[32c..32c+31]
  // (low and high nibbles).
  const uint8_t* b = row + (s / 8) * kQ4_KBytes;
  const int j = static_cast<int>(s % 8);
  const uint8_t* qs = b + 16 + 32 * (j / 2);
  const int shift = (j & 1) * 4;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) sum = __dp4a((load4(qs + 4 * i) >> shift) & 0x0F0F0F0F, x[i], sum);
  int scale, min;
  q4kScaleMin(j, b + 4, scale, min);
  return loadHalf(b) * static_cast<float>(scale) * xds.x * static_cast<float>(sum) -
         loadHalf(b + 2) * static_cast<float>(min) * xds.y;
}

template <>
__device__ __forceinline__ float subBlockDot<TensorType::Q6_K>(const uint8_t* row, int64_t s,
                                                               const int* x, float2 xds) {
  // Sub-block j = 4h + r of super-block: half h, range r (elements 32r..32r+31 of the half):
  // low bits from ql[64h + 32(r&1) + l] (high nibble when r >= 2), top 2 bits from bits 2r..2r+1
  // of qh[32h + l]; value = d * scale * (q - 32) with one int8 scale per 16 elements.
  const uint8_t* b = row + (s / 8) * kQ6_KBytes;
  const int j = static_cast<int>(s % 8);
  const int h = j / 4, r = j % 4;
  const uint8_t* ql = b + 64 * h + 32 * (r & 1);
  const uint8_t* qh = b + 128 + 32 * h;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * h + 2 * r;
  const int lowShift = r >= 2 ? 4 : 0;
  int sum0 = 0, sum1 = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int lo = (load4(ql + 4 * i) >> lowShift) & 0x0F0F0F0F;
    const int hi = ((load4(qh + 4 * i) >> (2 * r)) & 0x03030303) << 4;
    const int q = static_cast<int>(__vsub4(static_cast<unsigned>(lo | hi), 0x20202020u));
    if (i < 4) {
      sum0 = __dp4a(q, x[i], sum0);
    } else {
      sum1 = __dp4a(q, x[i], sum1);
    }
  }
  return loadHalf(b + 208) * xds.x * static_cast<float>(sc[0] * sum0 + sc[1] * sum1);
}

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <TensorType T>
__global__ void matvecQuantKernel(const uint8_t* w, int64_t rows, int64_t k, int64_t rowBytes,
                                  const int8_t* xq, const float2* xds, float* y) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  const int64_t t = blockIdx.y;
  if (r >= rows) return;
  const uint8_t* row = w + r * rowBytes;
  const int64_t subBlocks = k / 32;
  const int* x = reinterpret_cast<const int*>(xq + t * k);
  const float2* d = xds + t * subBlocks;
  float acc = 0;
  for (int64_t s = threadIdx.x; s < subBlocks; s += 32)
    acc += subBlockDot<T>(row, s, x + s * 8, d[s]);
  acc = warpSum(acc);
  if (threadIdx.x == 0) y[t * rows + r] = acc;
}

template <typename W>
__device__ __forceinline__ float2 load2f(const W* p);
template <>
__device__ __forceinline__ float2 load2f<__half>(const __half* p) {
  return __half22float2(*reinterpret_cast<const __half2*>(p));
}
template <>
__device__ __forceinline__ float2 load2f<float>(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}

// F16/F32 rows against float activations, two elements per load (k is even).
template <typename W>
__global__ void matvecFloatKernel(const W* w, int64_t rows, int64_t k, const float* xf, float* y) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  const int64_t t = blockIdx.y;
  if (r >= rows) return;
  const W* row = w + r * k;
  const float* x = xf + t * k;
  float acc = 0;
  for (int64_t i = 2 * threadIdx.x; i < k; i += 64) {
    const float2 wv = load2f<W>(row + i);
    const float2 xv = *reinterpret_cast<const float2*>(x + i);
    acc += wv.x * xv.x + wv.y * xv.y;
  }
  acc = warpSum(acc);
  if (threadIdx.x == 0) y[t * rows + r] = acc;
}

}  // namespace

void matvec(TensorType type, const void* w, int64_t rows, int64_t k, int64_t rowBytes,
            const int8_t* xq, const float2* xds, const float* xf, int64_t tokens, float* y,
            cudaStream_t stream) {
  const dim3 block(32, kWarpsPerBlock);
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>(tokens));
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (type) {
    case TensorType::Q4_0:
      matvecQuantKernel<TensorType::Q4_0>
          <<<grid, block, 0, stream>>>(wb, rows, k, rowBytes, xq, xds, y);
      break;
    case TensorType::Q4_1:
      matvecQuantKernel<TensorType::Q4_1>
          <<<grid, block, 0, stream>>>(wb, rows, k, rowBytes, xq, xds, y);
      break;
    case TensorType::Q8_0:
      matvecQuantKernel<TensorType::Q8_0>
          <<<grid, block, 0, stream>>>(wb, rows, k, rowBytes, xq, xds, y);
      break;
    case TensorType::Q4_K:
      matvecQuantKernel<TensorType::Q4_K>
          <<<grid, block, 0, stream>>>(wb, rows, k, rowBytes, xq, xds, y);
      break;
    case TensorType::Q6_K:
      matvecQuantKernel<TensorType::Q6_K>
          <<<grid, block, 0, stream>>>(wb, rows, k, rowBytes, xq, xds, y);
      break;
    case TensorType::F16:
      matvecFloatKernel<__half>
          <<<grid, block, 0, stream>>>(static_cast<const __half*>(w), rows, k, xf, y);
      break;
    case TensorType::F32:
      matvecFloatKernel<float>
          <<<grid, block, 0, stream>>>(static_cast<const float*>(w), rows, k, xf, y);
      break;
    default:
      throw Error("CUDA matvec: unsupported weight type " + std::to_string(static_cast<int>(type)));
  }
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace shoal::cuda
