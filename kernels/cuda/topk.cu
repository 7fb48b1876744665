// Top-k selection on the device, so that a sampled token reads back k candidates (8 bytes each)
// instead of the vocabulary's logits: the CUDA twin of the Vulkan backend's topk.comp, same
// algorithm and order. One level: block (c, r) takes entries [c * kTopKChunk, (c + 1) *
// kTopKChunk) of row r of its input and writes their best k (value and id, best first) as chunk c
// of row r of its output; levels repeat over the candidates until one chunk remains, whose k
// entries are the row's top k. Level 0 reads logits (the position is the id); later levels read
// the candidates (ids carried).
//
// "Best" is the CPU sampler's order (engine/runtime/sampler.h): higher logit first, lower id on
// ties, NaN as -inf and +inf as the largest float. Entries become 32-bit keys that compare as the
// floats do (sign-flipped bits, -0 as +0); key 0 (below -inf's key) marks a taken entry or none.
// Each of the k rounds picks the best (key, id) of the chunk with a tree over the threads' own
// bests, and only the thread whose entry was taken looks at its entries again.

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace shoal::cuda {
namespace {

constexpr unsigned kTopKThreads = 256;
constexpr uint32_t kNone = 0xffffffffu;

__device__ uint32_t keyOf(float v) {
  if (isnan(v)) v = -INFINITY;
  if (v == 0.0f) v = 0.0f;                        // -0 equals +0 (then the lower id goes first)
  if (isinf(v) && v > 0.0f) v = 3.402823466e38f;  // FLT_MAX
  const uint32_t bits = __float_as_uint(v);
  return (bits & 0x80000000u) != 0u ? ~bits : bits | 0x80000000u;
}

__device__ float valueOf(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) != 0u ? key & 0x7fffffffu : ~key);
}

// Whether entry a comes before entry b.
__device__ bool before(uint32_t keyA, uint32_t idA, uint32_t keyB, uint32_t idB) {
  return keyA > keyB || (keyA == keyB && idA < idB);
}

__global__ void topKLevelKernel(const float* values, const int32_t* ids, int64_t width, bool logits,
                                int32_t k, float* outValues, int32_t* outIds) {
  __shared__ uint32_t keys[kTopKChunk];
  __shared__ uint32_t entryIds[kTopKChunk];
  __shared__ uint32_t bestKey[kTopKThreads];
  __shared__ uint32_t bestAt[kTopKThreads];  // index into keys of the thread's best
  const unsigned chunk = blockIdx.x, row = blockIdx.y, tid = threadIdx.x;
  const int64_t first = static_cast<int64_t>(chunk) * kTopKChunk;
  const int64_t count = width - first < kTopKChunk ? width - first : kTopKChunk;
  for (unsigned i = tid; i < kTopKChunk; i += kTopKThreads) {
    const int64_t at = static_cast<int64_t>(row) * width + first + i;
    keys[i] = i < count ? keyOf(values[at]) : 0u;
    entryIds[i] = i < count
                      ? (logits ? static_cast<uint32_t>(first + i) : static_cast<uint32_t>(ids[at]))
                      : kNone;
  }
  __syncthreads();
  // The thread's best among its entries i = tid, tid + kTopKThreads, ...
  const auto ownBest = [&] {
    uint32_t mine = kNone;
    for (unsigned i = tid; i < kTopKChunk; i += kTopKThreads) {
      if (keys[i] != 0u &&
          (mine == kNone || before(keys[i], entryIds[i], keys[mine], entryIds[mine]))) {
        mine = i;
      }
    }
    return mine;
  };
  uint32_t mine = ownBest();
  const int64_t outBase = (static_cast<int64_t>(row) * gridDim.x + chunk) * k;
  for (int32_t round = 0; round < k; ++round) {
    bestKey[tid] = mine == kNone ? 0u : keys[mine];
    bestAt[tid] = mine;
    __syncthreads();
    for (unsigned s = kTopKThreads / 2; s > 0; s >>= 1) {
      if (tid < s) {
        const uint32_t a = bestAt[tid], b = bestAt[tid + s];
        const bool takeB = b != kNone && (a == kNone || before(bestKey[tid + s], entryIds[b],
                                                               bestKey[tid], entryIds[a]));
        if (takeB) {
          bestKey[tid] = bestKey[tid + s];
          bestAt[tid] = b;
        }
      }
      __syncthreads();
    }
    const uint32_t winner = bestAt[0];
    if (tid == 0) {
      outValues[outBase + round] = winner == kNone ? -INFINITY : valueOf(keys[winner]);
      outIds[outBase + round] = winner == kNone ? -1 : static_cast<int32_t>(entryIds[winner]);
    }
    // Every thread has read bestAt[0] and thread 0 the winner's entry before the next round's
    // bests overwrite them and the winner's owner takes it.
    __syncthreads();
    if (winner != kNone && winner % kTopKThreads == tid) {
      keys[winner] = 0u;
      mine = ownBest();
    }
  }
}

int64_t chunksOf(int64_t width) { return (width + kTopKChunk - 1) / kTopKChunk; }

}  // namespace

uint64_t topKScratchBytes(int64_t rows, int64_t vocab, int32_t k) {
  // The first level's output is the largest intermediate one; values and ids, twice (levels
  // alternate between the two).
  const int64_t chunks = chunksOf(vocab);
  return chunks > 1 ? 2 * static_cast<uint64_t>(rows * chunks * k) * (sizeof(float) + 4) : 0;
}

void topK(const float* logits, int64_t rows, int64_t vocab, int32_t k, const TopKScratch& scratch,
          float* values, int32_t* ids, cudaStream_t stream) {
  if (k < 1 || k > kMaxDeviceTopK) throw Error("CUDA top-k: k of 1 to 64");
  if (rows == 0) return;
  const float* inValues = logits;
  const int32_t* inIds = nullptr;
  int64_t width = vocab;
  for (int level = 0;; ++level) {
    const int64_t chunks = chunksOf(width);
    const bool last = chunks == 1;
    float* outValues = last ? values : scratch.values[level % 2];
    int32_t* outIds = last ? ids : scratch.ids[level % 2];
    topKLevelKernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(rows)),
                      kTopKThreads, 0, stream>>>(inValues, inIds, width, level == 0, k, outValues,
                                                 outIds);
    SHOAL_CUDA_CHECK(cudaGetLastError());
    if (last) return;
    inValues = outValues;
    inIds = outIds;
    width = chunks * k;
  }
}

}  // namespace shoal::cuda
