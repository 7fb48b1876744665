#pragma once
// Causal self-attention of a batch of new tokens over an f16 KV cache, evaluated as llama.cpp
// does without flash attention (llama-graph.cpp build_attn_mha): kq = K·q with q rounded to
// f16, softmax(kq * scale) over the visible positions, then V·softmax with the probabilities
// rounded to f16. The dot products run in ggml's vec order for a single token and in tinyBLAS's
// order for a batch (kernel_table.h), over position counts padded with zeros the way llama.cpp's
// 256-padded, masked KV view pads them.

#include <cstdint>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace shoal::cpu {

struct AttentionShape {
  int32_t nHead = 0;
  int32_t nHeadKv = 0;
  int32_t headDim = 0;
  int32_t contextLength = 0;  // positions the cache holds
  float scale = 0;            // multiplies K·q before the softmax (1/sqrt(headDim))
  int32_t window = 0;         // 0: all earlier positions; n: only the last n (sliding window)
  // nHead sink logits (gpt-oss's attn_sinks), or nullptr: head h's softmax also counts
  // exp(sinks[h] - max), with the max taken over the scores and the sink (ggml_soft_max's sinks).
  const float* sinks = nullptr;
  // > 0: each K·q becomes softcap * tanh(K·q / softcap) before `scale` (ggml_scale, ggml_tanh,
  // ggml_scale in llama.cpp's graph).
  float softcap = 0;

  // Key cache layout. false: position-major, kvDim halfs per position with the KV heads side by
  // side (llama.cpp's layout). true: head-major, each KV head's keys contiguous, contextLength x
  // headDim, so that the K·q of one head streams through memory instead of reading headDim of
  // every kvDim halfs (the CPU stage's cache; the arithmetic is the same either way).
  bool headMajorKeys = false;

  // > 0: the cache is a ring of this many positions (a sliding-window layer,
  // engine/model/kv_ring.h): position p's key is in slot p mod ringPeriod, and its value
  // in that slot and again ringPeriod slots later, so that the values of any ringPeriod
  // consecutive positions are one contiguous run for the V·softmax dot products (which must
  // not be cut in two: their sums would round differently). 0: slot p holds position p.
  int32_t ringPeriod = 0;

  int32_t kvDim() const { return nHeadKv * headDim; }
  // Slots per KV head: of keys, and of each transposed value row.
  int64_t keySlots() const { return ringPeriod > 0 ? ringPeriod : contextLength; }
  int64_t valueSlots() const { return ringPeriod > 0 ? int64_t{2} * ringPeriod : contextLength; }
  int64_t keySlot(int64_t position) const {
    return ringPeriod > 0 ? position % ringPeriod : position;
  }
  // Halfs between the keys of consecutive positions of one KV head, and between KV heads.
  int64_t keyPositionStride() const { return headMajorKeys ? headDim : kvDim(); }
  int64_t keyHeadStride() const { return headMajorKeys ? keySlots() * headDim : headDim; }
  // Stride of a transposed value row: its slots rounded up to 64, so that a row can be read
  // zero-padded to the 64-position steps of the dot products.
  int64_t valueStride() const { return (valueSlots() + 63) / 64 * 64; }
};

// Scratch of attention(), sized once for a shape and a thread count.
//
// Small calls (decode, a few verifying rows: every query's scores within passBytes) run in three
// passes over the whole call, each spread over all threads (K·q, softmax, V·p), with one set of
// rows for all of the call's queries (call*, grown on first use). Larger calls (prompts) are cut
// into work items of up to `queries` (token, head) pairs, each from K·q to V·p on one thread
// with that thread's rows (the others).
struct AttentionScratch {
  void reserve(const AttentionShape& shape, int threads);
  std::vector<uint16_t> query16;  // threads x queries x headDim: q rounded to f16
  std::vector<float> query32;     // the same, as floats
  std::vector<float> scores;      // threads x queries x stride: K·q, then the probabilities
  std::vector<uint16_t> probs16;  // threads x queries x stride: probabilities as f16
  std::vector<float> outs;        // threads x queries x headDim
  int64_t stride = 0;             // valueStride of the reserved shape, plus a skew
  int32_t headDim = 0;
  int32_t queries = 0;  // (token, head) pairs per work item

  // Bytes of scores and f16 probabilities up to which a call runs in passes. Tests set 0 to
  // run every call in items (the two give the same bits).
  int64_t passBytes = int64_t{16} << 20;
  std::vector<uint16_t> callQuery16;  // the call's queries x headDim, as query16
  std::vector<float> callQuery32;
  std::vector<float> callScores;      // the call's queries x stride, as scores
  std::vector<uint16_t> callProbs16;  // the call's queries x stride, as probs16
  std::vector<float> callOuts;        // the call's queries x headDim
};

// out[t * nHead * headDim + h * headDim + i] for t < count: attention of token t (position
// firstPosition + t, sees positions 0..firstPosition + t, or with a window the last `window` of
// them, as llama.cpp's sliding-window mask) and head h.
//  q:      count x nHead x headDim floats (after RoPE)
//  keys:   f16 keys after RoPE, laid out as shape.headMajorKeys says
//  values: f16 values transposed: row (kvHead * headDim + i) holds dimension i of every
//          position, valueStride() apart; positions past the cached ones, and those before a
//          window, must hold finite values (they meet zero probabilities). With a ring, the
//          caller has written positions [firstPosition - window + 1, firstPosition + count)
//          (those >= 0), which the ring holds (count <= ringPeriod - window).
//  orderTokens: the dot products take the order of a batch of this many tokens (0: count); 1
//          makes each token's result equal to attending it alone (Segment::decodeOrder).
void attention(const AttentionShape& shape, const float* q, int32_t count, int32_t firstPosition,
               const uint16_t* keys, const uint16_t* values, float* out, ThreadPool& pool,
               AttentionScratch& scratch, int32_t orderTokens = 0);

}  // namespace shoal::cpu
