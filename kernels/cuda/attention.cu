// Causal attention over the f16 KV cache, split along the positions ("split-K" for decode): a
// block per (token, head, split) computes, with an online softmax, the maximum score M, the sum
// L of exp(score - M) and the weighted values A over its range of positions; a second kernel
// merges the splits (out = sum_s A_s e^(M_s - M) / sum_s L_s e^(M_s - M)). A long context then
// keeps every SM busy even for one token and one KV head group. The number of positions comes
// from the device (*firstPosition), so a captured decode graph replays with new positions;
// splits past the visible positions (or before a sliding window) write an empty partial. The
// options of the newer architectures live here too: a window over a ring cache, soft-capped
// scores (gemma2) and attention sinks (gpt-oss), each as the CPU backend's attention.h defines.

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace shoal::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxHeadDim = 256;
constexpr int kMaxPerLane = kMaxHeadDim / 32;

__device__ void mergeSplits(const AttentionParams& p, const float* partial, float* out, int head,
                            int64_t t);

__global__ void attentionPartialKernel(AttentionParams p, const float* q, const __half* keys,
                                       const __half* values, const int32_t* firstPosition,
                                       float* partial, float* result) {
  __shared__ float qs[kMaxHeadDim];
  __shared__ float warpM[kWarps], warpL[kWarps];
  __shared__ float warpAcc[kWarps][kMaxHeadDim];

  const int split = blockIdx.x, head = blockIdx.y;
  const int64_t t = blockIdx.z;
  const int hd = p.headDim;
  const int64_t kvDim = static_cast<int64_t>(p.nHeadKv) * hd;
  const int kvHead = head / (p.nHead / p.nHeadKv);
  const int64_t visible = static_cast<int64_t>(*firstPosition) + t + 1;
  // A sliding window hides the positions before visible - window (whole splits then stay empty).
  const int64_t first = p.window > 0 ? max(int64_t{0}, visible - p.window) : 0;
  const int64_t begin = max(first, static_cast<int64_t>(split) * p.chunk);
  const int64_t end = min(visible, static_cast<int64_t>(split) * p.chunk + p.chunk);

  const float* qRow = q + (t * p.nHead + head) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = qRow[d];
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float m = -INFINITY, l = 0.0f;
  float acc[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) acc[j] = 0.0f;

  for (int64_t pos = begin + warp; pos < end; pos += kWarps) {
    const int64_t slot = p.ring > 0 ? pos % p.ring : pos;
    const __half* k = keys + slot * kvDim + static_cast<int64_t>(kvHead) * hd;
    float dot = 0.0f;
    for (int d = lane; d < hd; d += 32) dot += qs[d] * __half2float(k[d]);
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (p.softcap > 0) dot = tanhf(dot / p.softcap) * p.softcap;
    const float s = dot * p.scale;
    const float mNew = fmaxf(m, s);
    const float correction = expf(m - mNew);
    const float e = expf(s - mNew);
    l = l * correction + e;
    const __half* v = values + slot * kvDim + static_cast<int64_t>(kvHead) * hd;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) acc[j] = acc[j] * correction + e * __half2float(v[d]);
    }
    m = mNew;
  }
  if (lane == 0) {
    warpM[warp] = m;
    warpL[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < hd) warpAcc[warp][d] = acc[j];
  }
  __syncthreads();

  float mAll = -INFINITY;
  for (int w = 0; w < kWarps; ++w) mAll = fmaxf(mAll, warpM[w]);
  float* out = partial + ((t * p.nHead + head) * p.splits + split) * (hd + 2);
  if (threadIdx.x == 0) {
    float lAll = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (warpM[w] != -INFINITY) lAll += warpL[w] * expf(warpM[w] - mAll);
    out[0] = mAll;
    out[1] = lAll;
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (warpM[w] != -INFINITY) a += warpAcc[w][d] * expf(warpM[w] - mAll);
    out[2 + d] = a;
  }
  if (!p.tickets) return;
  // The fused merge: each split's block takes a ticket once its partial is visible to the
  // device; the last of a (token, head) merges them all and resets the ticket for the next
  // launch (a replayed decode graph).
  __shared__ bool lastSplit;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* ticket = p.tickets + t * p.nHead + head;
    lastSplit = atomicAdd(ticket, 1u) == static_cast<unsigned>(p.splits) - 1;
    if (lastSplit) *ticket = 0;
  }
  __syncthreads();
  if (lastSplit) {
    __threadfence();
    mergeSplits(p, partial, result, head, t);
  }
}

// Merges the splits of (token t, head) into out (a block of 32 * kWarps threads). Partials are
// read past L1 (__ldcg): in the fused form the last split's block reads what other blocks wrote.
__device__ void mergeSplits(const AttentionParams& p, const float* partial, float* out, int head,
                            int64_t t) {
  const int hd = p.headDim;
  const float* in = partial + (t * p.nHead + head) * p.splits * (hd + 2);
  // A sink is one more softmax term that attends to nothing: it joins the maximum and the sum.
  const float sink = p.sinks ? p.sinks[head] : -INFINITY;
  float m = sink;
  for (int s = 0; s < p.splits; ++s) m = fmaxf(m, __ldcg(in + s * (hd + 2)));
  float l = p.sinks ? expf(sink - m) : 0.0f;
  for (int s = 0; s < p.splits; ++s) {
    const float ms = __ldcg(in + s * (hd + 2));
    if (ms != -INFINITY) l += __ldcg(in + s * (hd + 2) + 1) * expf(ms - m);
  }
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float a = 0.0f;
    for (int s = 0; s < p.splits; ++s) {
      const float ms = __ldcg(in + s * (hd + 2));
      if (ms != -INFINITY) a += __ldcg(in + s * (hd + 2) + 2 + d) * expf(ms - m);
    }
    out[(t * p.nHead + head) * hd + d] = a / l;
  }
}

__global__ void attentionMergeKernel(AttentionParams p, const float* partial, float* out) {
  mergeSplits(p, partial, out, blockIdx.x, blockIdx.y);
}

}  // namespace

void attention(const AttentionParams& p, const float* q, const __half* keyCache,
               const __half* valueCache, int64_t tokens, const int32_t* firstPosition,
               float* partial, float* out, cudaStream_t stream) {
  if (p.headDim > kMaxHeadDim || p.nHeadKv <= 0 || p.nHead % p.nHeadKv != 0) {
    throw Error("CUDA attention: head size " + std::to_string(p.headDim) + " (max " +
                std::to_string(kMaxHeadDim) + ") or heads " + std::to_string(p.nHead) + "/" +
                std::to_string(p.nHeadKv) + " not supported");
  }
  const dim3 grid(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.nHead),
                  static_cast<unsigned>(tokens));
  attentionPartialKernel<<<grid, 32 * kWarps, 0, stream>>>(p, q, keyCache, valueCache,
                                                           firstPosition, partial, out);
  SHOAL_CUDA_CHECK(cudaGetLastError());
  if (p.tickets) return;  // merged by each (token, head)'s last split
  attentionMergeKernel<<<dim3(static_cast<unsigned>(p.nHead), static_cast<unsigned>(tokens)),
                         32 * kWarps, 0, stream>>>(p, partial, out);
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace shoal::cuda
