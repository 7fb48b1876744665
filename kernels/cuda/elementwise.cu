// The small ops of the layer program: RMSNorm, RoPE, bias, residual add, the gated FFNs'
// activations (SwiGLU, GeGLU, gpt-oss's clamped SwiGLU), scaling and soft-capping, KV-cache
// append, and greedy argmax.

#include "kernels/cuda/activation_quant.cuh"
#include "kernels/cuda/activations.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace shoal::cuda {
namespace {

unsigned gridFor(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024).
__device__ float blockSum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? shared[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// 1 / RMS of a row (every thread of the block gets it), the same sums for both norm kernels.
__device__ float rmsScale(const float* xr, int64_t n, float eps, float* shared) {
  float sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += xr[i] * xr[i];
  sum = blockSum(sum, shared);
  return rsqrtf(sum / static_cast<float>(n) + eps);
}

__global__ void rmsNormKernel(const float* x, const float* weight, float* y, int64_t n, float eps) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  const float scale = rmsScale(xr, n, eps, shared);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * weight[i];
}

// Row blockIdx.x's norm output from its scale, and its int8 blocks (n a multiple of 32): a warp
// per block of 32 outputs, lane i writing output i and its quant.
__device__ void normQuantizeRow(const float* xr, float scale, const float* weight, float* y,
                                int64_t n, int8_t* q, float2* ds) {
  float* yr = y + blockIdx.x * n;
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int64_t b = threadIdx.x / 32; b < n / 32; b += warps) {
    const int64_t i = b * 32 + lane;
    const float v = xr[i] * scale * weight[i];
    yr[i] = v;
    quantizeBlock32(v, q + blockIdx.x * n + b * 32, ds + blockIdx.x * (n / 32) + b);
  }
}

// RMSNorm whose output is also quantized for the mat-vec that reads it.
__global__ void rmsNormQuantizeKernel(const float* x, const float* weight, float* y, int64_t n,
                                      float eps, int8_t* q, float2* ds) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * n;
  normQuantizeRow(xr, rmsScale(xr, n, eps, shared), weight, y, n, q, ds);
}

// (x0, x1) rotated by the angle of (c, s), as both RoPE kernels round it.
__device__ __forceinline__ void rotatePair(float& x0, float& x1, float c, float s) {
  const float a = x0, b = x1;
  x0 = fmaf(a, c, -(b * s));
  x1 = fmaf(a, s, b * c);
}

// One thread per (token, head, pair), the angle read from the position's row of the tables.
__global__ void ropeKernel(float* x, int64_t tokens, RopeShape p, const float* cosTable,
                           const float* sinTable, const int32_t* firstPosition) {
  const int half = p.nRot / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * p.heads * half) return;
  const int pair = static_cast<int>(i % half);
  const int64_t th = i / half;  // token * heads + head
  const int64_t t = th / p.heads;
  const int64_t at = (static_cast<int64_t>(*firstPosition) + t) * half + pair;
  const float c = cosTable[at], s = sinTable[at];
  float* v = x + th * p.headDim;
  const int a = p.neox ? pair : 2 * pair;
  const int b = p.neox ? pair + half : 2 * pair + 1;
  rotatePair(v[a], v[b], c, s);
}

// The residual add, then rmsNormQuantize of the sum: x += addend, y = norm(x), q = y's int8
// blocks; one block per row. Each thread adds the elements it then squares, and blockSum's
// barrier makes every sum visible before the warps read them by blocks of 32.
__global__ void addRmsNormQuantizeKernel(float* x, const float* addend, const float* weight,
                                         float* y, int64_t n, float eps, int8_t* q, float2* ds) {
  __shared__ float shared[32];
  float* xr = x + blockIdx.x * n;
  const float* ar = addend + blockIdx.x * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) xr[i] += ar[i];
  normQuantizeRow(xr, rmsScale(xr, n, eps, shared), weight, y, n, q, ds);
}

// RoPE of the queries (in place) and keys of `tokens` tokens, the rotated keys and the values
// stored straight into the f16 cache (the K buffer keeps its unrotated keys): one thread per
// query pair, per key pair, and per value element (which also stores the key elements past
// nRot). Positions and ring slots as storeKv's.
__global__ void ropeStoreKernel(float* q, const float* k, const float* v, int64_t tokens,
                                RopeShape qs, RopeShape ks, RopeAngles qt, RopeAngles kt,
                                __half* keyCache, __half* valueCache, int32_t ring,
                                const int32_t* firstPosition) {
  const int half = qs.nRot / 2;
  const int kvDim = ks.heads * ks.headDim;
  const int64_t qPairs = tokens * qs.heads * half, kPairs = tokens * ks.heads * half;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t first = *firstPosition;
  auto slotOf = [&](int64_t t) {
    const int64_t pos = first + t;
    return (ring > 0 ? pos % ring : pos) * kvDim;
  };
  if (i < qPairs) {
    const int pair = static_cast<int>(i % half);
    const int64_t th = i / half, t = th / qs.heads;
    const int64_t at = (first + t) * half + pair;
    float* x = q + th * qs.headDim;
    const int a = qs.neox ? pair : 2 * pair, b = qs.neox ? pair + half : 2 * pair + 1;
    rotatePair(x[a], x[b], qt.cos[at], qt.sin[at]);
    return;
  }
  i -= qPairs;
  if (i < kPairs) {
    const int pair = static_cast<int>(i % half);
    const int64_t th = i / half, t = th / ks.heads, head = th % ks.heads;
    const int64_t at = (first + t) * half + pair;
    const float* x = k + th * ks.headDim;
    const int a = ks.neox ? pair : 2 * pair, b = ks.neox ? pair + half : 2 * pair + 1;
    float xa = x[a], xb = x[b];
    rotatePair(xa, xb, kt.cos[at], kt.sin[at]);
    __half* cache = keyCache + slotOf(t) + head * ks.headDim;
    cache[a] = __float2half_rn(xa);
    cache[b] = __float2half_rn(xb);
    return;
  }
  i -= kPairs;
  if (i >= tokens * kvDim) return;
  const int64_t t = i / kvDim, d = i % kvDim;
  valueCache[slotOf(t) + d] = __float2half_rn(v[i]);
  if (d % ks.headDim >= ks.nRot) keyCache[slotOf(t) + d] = __float2half_rn(k[i]);
}

__global__ void addBiasKernel(float* x, const float* bias, int64_t total, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) x[i] += bias[i % n];
}

__global__ void addKernel(float* x, const float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] += y[i];
}

template <GateActivation A>
__global__ void gatedKernel(const float* gate, const float* up, float* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = activate<A>(gate[i], up[i]);
}

__global__ void scaleKernel(float* x, float factor, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

__global__ void softcapKernel(float* x, float cap, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = tanhf(x[i] / cap) * cap;
}

__global__ void storeKvKernel(const float* k, const float* v, __half* keyCache, __half* valueCache,
                              int64_t total, int32_t kvDim, const int32_t* firstPosition,
                              int32_t ring) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t t = i / kvDim, d = i % kvDim;
  const int64_t pos = static_cast<int64_t>(*firstPosition) + t;
  const int64_t at = (ring > 0 ? pos % ring : pos) * kvDim + d;
  keyCache[at] = __float2half_rn(k[i]);
  valueCache[at] = __float2half_rn(v[i]);
}

// One block: each thread keeps its best (value, index), then the block reduces; ties keep the
// smaller index, as the CPU sampler's first-maximum rule does.
__global__ void argmaxKernel(const float* allLogits, int64_t n, int32_t* allOut) {
  const float* logits = allLogits + static_cast<int64_t>(blockIdx.x) * n;  // a block per row
  int32_t* out = allOut + blockIdx.x;
  __shared__ float bestV[1024];
  __shared__ int32_t bestI[1024];
  float v = -INFINITY;
  int32_t idx = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (logits[i] > v) {
      v = logits[i];
      idx = static_cast<int32_t>(i);
    }
  }
  bestV[threadIdx.x] = v;
  bestI[threadIdx.x] = idx;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = bestV[threadIdx.x + s];
      const int32_t oi = bestI[threadIdx.x + s];
      if (ov > bestV[threadIdx.x] || (ov == bestV[threadIdx.x] && oi < bestI[threadIdx.x])) {
        bestV[threadIdx.x] = ov;
        bestI[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = bestI[0];
}

}  // namespace

void rmsNorm(const float* x, const float* weight, float* y, int64_t rows, int64_t n, float eps,
             cudaStream_t stream) {
  rmsNormKernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, weight, y, n, eps);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void rmsNormQuantize(const float* x, const float* weight, float* y, int64_t rows, int64_t n,
                     float eps, int8_t* q, float2* ds, cudaStream_t stream) {
  if (n % 32 != 0) throw Error("CUDA rmsNormQuantize: a row of " + std::to_string(n));
  rmsNormQuantizeKernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, weight, y, n, eps, q,
                                                                         ds);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void addRmsNormQuantize(float* x, const float* addend, const float* weight, float* y, int64_t rows,
                        int64_t n, float eps, int8_t* q, float2* ds, cudaStream_t stream) {
  if (n % 32 != 0) throw Error("CUDA addRmsNormQuantize: a row of " + std::to_string(n));
  addRmsNormQuantizeKernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, addend, weight, y, n,
                                                                            eps, q, ds);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void rope(float* x, int64_t tokens, const RopeShape& shape, const float* cosTable,
          const float* sinTable, const int32_t* firstPosition, cudaStream_t stream) {
  const int64_t n = tokens * shape.heads * (shape.nRot / 2);
  if (n == 0) return;
  ropeKernel<<<gridFor(n, 256), 256, 0, stream>>>(x, tokens, shape, cosTable, sinTable,
                                                  firstPosition);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void ropeStore(float* q, const float* k, const float* v, int64_t tokens, const RopeShape& qShape,
               const RopeShape& kShape, const RopeAngles& qTable, const RopeAngles& kTable,
               __half* keyCache, __half* valueCache, int32_t ring, const int32_t* firstPosition,
               cudaStream_t stream) {
  if (qShape.nRot != kShape.nRot || qShape.headDim != kShape.headDim ||
      qShape.neox != kShape.neox) {
    throw Error("CUDA ropeStore: queries and keys rotated differently");
  }
  const int64_t half = qShape.nRot / 2;
  const int64_t n =
      tokens * (qShape.heads * half + kShape.heads * half + int64_t{kShape.heads} * kShape.headDim);
  if (n == 0) return;
  ropeStoreKernel<<<gridFor(n, 256), 256, 0, stream>>>(
      q, k, v, tokens, qShape, kShape, qTable, kTable, keyCache, valueCache, ring, firstPosition);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void addBias(float* x, const float* bias, int64_t rows, int64_t n, cudaStream_t stream) {
  addBiasKernel<<<gridFor(rows * n, 256), 256, 0, stream>>>(x, bias, rows * n, n);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void addInPlace(float* x, const float* y, int64_t n, cudaStream_t stream) {
  addKernel<<<gridFor(n, 256), 256, 0, stream>>>(x, y, n);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  gatedKernel<GateActivation::Silu><<<gridFor(n, 256), 256, 0, stream>>>(gate, up, out, n);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void geglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gatedKernel<GateActivation::GeluTanh><<<gridFor(n, 256), 256, 0, stream>>>(gate, up, out, n);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void swigluOai(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gatedKernel<GateActivation::SwigluOai><<<gridFor(n, 256), 256, 0, stream>>>(gate, up, out, n);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void scale(float* x, float factor, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  scaleKernel<<<gridFor(n, 256), 256, 0, stream>>>(x, factor, n);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void softcap(float* x, float cap, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  softcapKernel<<<gridFor(n, 256), 256, 0, stream>>>(x, cap, n);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void storeKv(const float* k, const float* v, __half* keyCache, __half* valueCache, int64_t tokens,
             int32_t kvDim, const int32_t* firstPosition, int32_t ring, cudaStream_t stream) {
  const int64_t n = tokens * kvDim;
  storeKvKernel<<<gridFor(n, 256), 256, 0, stream>>>(k, v, keyCache, valueCache, n, kvDim,
                                                     firstPosition, ring);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void argmax(const float* logits, int64_t rows, int64_t n, int32_t* out, cudaStream_t stream) {
  if (rows == 0) return;
  argmaxKernel<<<static_cast<unsigned>(rows), 1024, 0, stream>>>(logits, n, out);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace shoal::cuda
