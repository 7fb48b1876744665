// Activations to 8-bit blocks of 32 (the partner of every quantized weight format here), and
// float to f16.

#include "kernels/cuda/activation_quant.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace shoal::cuda {
namespace {

// One warp per block of 32 values: lane i quantizes value i.
__global__ void quantizeKernel(const float* x, int64_t blocks, int8_t* q, float2* ds) {
  const int64_t block = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (block >= blocks) return;
  quantizeBlock32(x[block * 32 + threadIdx.x % 32], q + block * 32, ds + block);
}

__global__ void toHalfKernel(const float* x, __half* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2half_rn(x[i]);
}

}  // namespace

void quantizeActivations(const float* x, int64_t tokens, int64_t k, int8_t* q, float2* ds,
                         cudaStream_t stream) {
  const int64_t blocks = tokens * k / 32;
  const int threads = 256;
  const int64_t grid = (blocks * 32 + threads - 1) / threads;
  quantizeKernel<<<static_cast<unsigned>(grid), threads, 0, stream>>>(x, blocks, q, ds);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void floatToHalf(const float* x, __half* y, int64_t n, cudaStream_t stream) {
  toHalfKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(x, y, n);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace shoal::cuda
