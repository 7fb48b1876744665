// The mixture-of-experts FFN's own kernels (cuda_kernels.h says what each computes): routing per
// token, the experts' biases, and the weighted sum. The expert products themselves are the
// mat-vec's (matvecExperts in matvec.cu): only the chosen experts' rows are read.
//
// Routing follows the CPU backend's (cpu_layer_moe.cpp, llama.cpp's build_moe_ffn) within the
// accuracy contract: the softmax sums in float rather than double, and ties between equal
// probabilities go to the lower expert index.

#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace shoal::cuda {
namespace {

// Experts a layer may have (the router's row lives in shared memory) and experts per token.
constexpr int kMaxExperts = 1024;
constexpr int kMaxUsed = 32;

unsigned gridFor(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

__device__ __forceinline__ float warpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp per token: probabilities (Softmax gating) or logits (SoftmaxWeight) in shared memory,
// then `used` rounds of a warp-wide arg-max, each taking the winner out of the running.
__global__ void moeRouteKernel(const float* logits, int32_t experts, int32_t used,
                               bool softmaxWeight, bool normalize, int32_t* ids, float* weights) {
  __shared__ float p[kMaxExperts];
  __shared__ float chosen[kMaxUsed];
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x;
  const float* row = logits + t * experts;
  float max = -INFINITY;
  for (int e = lane; e < experts; e += 32) {
    p[e] = row[e];
    max = fmaxf(max, p[e]);
  }
  max = warpMax(max);
  if (!softmaxWeight) {  // p = softmax(logits)
    float sum = 0.0f;
    for (int e = lane; e < experts; e += 32) {
      p[e] = expf(p[e] - max);
      sum += p[e];
    }
    const float inv = 1.0f / warpSum(sum);
    for (int e = lane; e < experts; e += 32) p[e] *= inv;
  }
  __syncwarp();
  for (int k = 0; k < used; ++k) {
    float best = -INFINITY;
    int bestIndex = experts;  // no expert: only when every candidate left is -inf
    for (int e = lane; e < experts; e += 32) {
      if (p[e] > best || (p[e] == best && e < bestIndex)) {
        best = p[e];
        bestIndex = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bestIndex, o);
      if (ov > best || (ov == best && oi < bestIndex)) {
        best = ov;
        bestIndex = oi;
      }
    }
    if (bestIndex >= experts) bestIndex = k;  // all -inf: any expert, weight 0 below
    if (lane == 0) {
      ids[t * used + k] = bestIndex;
      chosen[k] = best;
      p[bestIndex] = -INFINITY;
    }
    __syncwarp();
  }
  if (lane != 0) return;
  // The chosen experts' weights: their probabilities, or the softmax over their logits (the
  // first is the largest), then divided by their sum when asked (ggml_clamp at 2^-14).
  float* w = weights + t * used;
  if (softmaxWeight) {
    float sum = 0.0f;
    for (int k = 0; k < used; ++k) {
      chosen[k] = expf(chosen[k] - chosen[0]);
      sum += chosen[k];
    }
    for (int k = 0; k < used; ++k) chosen[k] /= sum;
  }
  for (int k = 0; k < used; ++k) w[k] = fmaxf(chosen[k], 0.0f);
  if (normalize) {
    float sum = 0.0f;
    for (int k = 0; k < used; ++k) sum += w[k];
    sum = fmaxf(sum, 6.103515625e-5f);
    for (int k = 0; k < used; ++k) w[k] /= sum;
  }
}

__global__ void addExpertBiasKernel(const float* bias, const int32_t* ids, float* y, int64_t total,
                                    int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t entry = i / n;
  y[i] += bias[static_cast<int64_t>(ids[entry]) * n + i % n];
}

// Each product rounded, then added in rank order, as the CPU's ggml_mul + ggml_add chain.
__global__ void moeCombineKernel(const float* y, const float* weights, float* out, int64_t rows,
                                 int32_t used, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * n) return;
  const int64_t t = i / n, c = i % n;
  const float* w = weights + t * used;
  const float* yt = y + t * used * n + c;
  float sum = __fmul_rn(yt[0], w[0]);
  for (int k = 1; k < used; ++k) sum = __fadd_rn(sum, __fmul_rn(yt[k * n], w[k]));
  out[i] = sum;
}

}  // namespace

void moeRoute(const float* logits, int64_t rows, int32_t experts, int32_t used, bool softmaxWeight,
              bool normalize, int32_t* ids, float* weights, cudaStream_t stream) {
  if (experts <= 0 || experts > kMaxExperts || used <= 0 || used > kMaxUsed || used > experts) {
    throw Error("CUDA MoE routing: " + std::to_string(used) + " of " + std::to_string(experts) +
                " experts is not supported (at most " + std::to_string(kMaxUsed) + " of " +
                std::to_string(kMaxExperts) + ")");
  }
  if (rows == 0) return;
  moeRouteKernel<<<static_cast<unsigned>(rows), 32, 0, stream>>>(
      logits, experts, used, softmaxWeight, normalize, ids, weights);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void addExpertBias(const float* bias, const int32_t* ids, float* y, int64_t entries, int64_t n,
                   cudaStream_t stream) {
  if (entries * n == 0) return;
  addExpertBiasKernel<<<gridFor(entries * n, 256), 256, 0, stream>>>(bias, ids, y, entries * n, n);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void moeCombine(const float* y, const float* weights, float* out, int64_t rows, int32_t used,
                int64_t n, cudaStream_t stream) {
  if (rows * n == 0) return;
  moeCombineKernel<<<gridFor(rows * n, 256), 256, 0, stream>>>(y, weights, out, rows, used, n);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace shoal::cuda
