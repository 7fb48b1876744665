#pragma once
// The kernels of a transformer stage, recorded into a command buffer. Every op is followed by a
// barrier, so ops recorded in order see each other's results. Buffers are device addresses;
// sizes are in elements.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/gguf/tensor_type.h"
#include "kernels/vulkan/vk_memory.h"

namespace shoal::vulkan {

// A weight matrix uploaded as its raw GGUF bytes.
struct DeviceMatrix {
  gguf::TensorType type = gguf::TensorType::F32;
  int64_t rows = 0, cols = 0;
  uint64_t rowBytes = 0;
  Allocation memory;
};

// Whether a weight type has mat-vec/mat-mat/embedding kernels.
bool supportedWeightType(gguf::TensorType type);

// Whether products with this weight type quantize the activations to 8 bits first and take
// integer dot products per block (Q4_0, Q4_1, Q8_0; in exact math in the CPU backend's order,
// bit-identical to it). The other types (F16, F32, Q5_0, Q5_1, the K-quants, IQ4_NL, IQ4_XS,
// MXFP4) multiply dequantized weights with f32 activations.
bool quantizesActivations(gguf::TensorType type);

// Activations quantized by Recorder::quantizeQ8: int8 quants (tokens x cols, 4 per word), and
// per 32-element block the f16-rounded scale d and (Q8_1) d * sum of the quants, as f32.
struct QuantizedActivations {
  VkDeviceAddress qs = 0, d = 0, s = 0;
  // Bytes of each part for `elements` activations.
  static uint64_t quantBytes(uint64_t elements) { return elements; }
  static uint64_t scaleBytes(uint64_t elements) { return elements / 32 * 4; }
};

// The layer program's attention options (AttendParams), as the attention kernel takes them.
struct AttentionOptions {
  uint32_t window = 0;        // attend over the last `window` positions only (0: all)
  float softcap = 0;          // cap * tanh(K.q / cap) before the scale (0: none)
  VkDeviceAddress sinks = 0;  // one sink logit per query head (0: none)
  // > 0: the caches are rings of this many positions, position p in slot p mod ring
  // (engine/model/kv_ring.h); the stage keeps the window before each batch in it.
  uint32_t ring = 0;
};

// What the block mat-vec (matvec_block.comp) does with its sums.
enum class MatvecEpilogue : uint32_t {
  Store = 0,   // y = W x
  Add = 1,     // y += W x (a residual add fused into the projection before it)
  SwiGlu = 2,  // y of the first matrix = silu(W_0 x) * (W_1 x): a gated FFN's gate and up
};

// One matrix of a block mat-vec and where its products go.
struct MatvecOut {
  const DeviceMatrix* w = nullptr;
  VkDeviceAddress y = 0;
  VkDeviceAddress bias = 0;  // w.rows floats added to each token's products (0: none)
};

// Tokens of the block mat-vec's tile (matvec_block.comp TOKENS): it takes batches of fewer rows
// (decode); larger ones go to the kernels that read each weight once per 8 or 32 tokens.
inline constexpr uint32_t kBlockMatvecTokens = 4;
// Batches from which matmulQ8 runs the tiled integer matmul (matmat_q8.comp: 32-token tiles)
// rather than the cooperative mat-vec (8-token tiles).
inline constexpr uint32_t kTiledQ8Tokens = 16;

// One recorded dispatch, for profiles.
struct DispatchRecord {
  std::string kernel;        // the shader, e.g. "matvec_block_q4_1_subgroup"
  uint64_t weightBytes = 0;  // bytes of weight matrices it reads (products, embedding rows)
};

class Recorder {
 public:
  // Begins recording into `commands` (reusable: recorded once, submitted many times). With a
  // timestamp query pool of `queries` queries, query 0 is written before the first dispatch and
  // query i + 1 after dispatch i (as long as there are queries left), so dispatch i took
  // t[i + 1] - t[i].
  Recorder(Device& device, VkCommandBuffer commands, VkQueryPool timestamps = VK_NULL_HANDLE,
           uint32_t queries = 0);
  // Ends recording.
  void finish();

  void copy(const Allocation& src, const Allocation& dst, VkDeviceSize bytes);

  // y[t * rows + r] = dot(W row r, x[t * cols ...]) for t < tokens: the mat-vec kernel for small
  // batches, the tiled mat-mat kernel for prefill.
  void matmul(const DeviceMatrix& w, VkDeviceAddress x, VkDeviceAddress y, uint32_t tokens);
  // Forced kernel choice, for the op tests.
  void matvec(const DeviceMatrix& w, VkDeviceAddress x, VkDeviceAddress y, uint32_t tokens);
  void matmat(const DeviceMatrix& w, VkDeviceAddress x, VkDeviceAddress y, uint32_t tokens);

  // The block mat-vec: up to three matrices of one type and width in one dispatch, each with
  // `tokens` rows of x (16-byte aligned), with the epilogue's fusion (SwiGlu: exactly two
  // matrices of equal rows, the output in the first one's y). Default math and decode batches
  // only: canMatvecBlocks says whether it takes a product.
  // rowsPerSlot: rows per slot of lanes (1, 2 or 4; 0: chosen for the device and the shape);
  // the results do not depend on it (the op tests force each).
  void matvecBlocks(std::span<const MatvecOut> outs, VkDeviceAddress x, uint32_t tokens,
                    MatvecEpilogue epilogue = MatvecEpilogue::Store, uint32_t rowsPerSlot = 0);
  bool canMatvecBlocks(const DeviceMatrix& w, VkDeviceAddress x, uint32_t tokens) const;

  // act = x (tokens x cols floats, cols a multiple of 32) quantized as the CPU's Q8_0/Q8_1
  // quantizer does it (one result serves both formats).
  void quantizeQ8(VkDeviceAddress x, const QuantizedActivations& act, uint32_t cols,
                  uint32_t tokens);
  // y[t * rows + r] = dot(W row r, activation row t) for a weight type that quantizesActivations,
  // for any token count: a workgroup per row reading each weight once per 8 tokens, from
  // kTiledQ8Tokens on the tiled kernel reading it once per 32, or (exact math) one invocation
  // per row and token in the CPU backend's order. decodeOrder keeps the mat-vec for any batch,
  // whose rows round as the decode kernels' do.
  void matmulQ8(const DeviceMatrix& w, const QuantizedActivations& act, VkDeviceAddress y,
                uint32_t tokens, bool decodeOrder = false);

  // y[t] = row tokens[t] of w, as f32.
  void embed(const DeviceMatrix& w, VkDeviceAddress tokens, VkDeviceAddress y, uint32_t count);
  // y[t] = rmsnorm(x[firstRow + t]) * weight for t < rows.
  void rmsNorm(VkDeviceAddress x, VkDeviceAddress weight, VkDeviceAddress y, uint32_t n,
               uint32_t rows, uint32_t firstRow, float eps);
  // Two sets of rows normalized in one dispatch (a layer's per-head Q and K norms; in place
  // allowed): rows of n floats from x, times weight, into y; at most 65535 rows together.
  struct NormRows {
    VkDeviceAddress x = 0, weight = 0, y = 0;
    uint32_t n = 0, rows = 0;
  };
  void rmsNormPair(const NormRows& a, const NormRows& b, float eps);
  // In place on count x heads x headDim; positions params[0] + t; tables contextLength x nRot/2.
  void rope(VkDeviceAddress x, VkDeviceAddress cosTable, VkDeviceAddress sinTable,
            VkDeviceAddress params, uint32_t heads, uint32_t headDim, uint32_t nRot, bool neox,
            uint32_t count);
  // RoPE of q (count x qHeads x headDim) in place, then q *= qScale, and RoPE of k into the key
  // cache and v into the value cache (rope_store.comp: rope twice, scale and kvStore in one
  // dispatch, with equal results; default math only, shapes that ropeStoreFits).
  void ropeStore(VkDeviceAddress q, VkDeviceAddress k, VkDeviceAddress v, VkDeviceAddress keyCache,
                 VkDeviceAddress valueCache, VkDeviceAddress cosTable, VkDeviceAddress sinTable,
                 VkDeviceAddress params, uint32_t qHeads, uint32_t kvHeads, uint32_t headDim,
                 uint32_t nRot, bool neox, uint32_t count, float qScale = 1, uint32_t ring = 0);
  // ring (both): as AttentionOptions::ring.
  void kvStore(VkDeviceAddress k, VkDeviceAddress v, VkDeviceAddress keyCache,
               VkDeviceAddress valueCache, VkDeviceAddress params, uint32_t kvDim, uint32_t count,
               uint32_t ring = 0);
  // Attention of `count` tokens (q: count x heads x headDim, after RoPE; positions params[0] + t)
  // over the f16 caches, into y. In default math the split kernel (flash-decoding: any context
  // length, the query heads of a KV head together); `scratch` holds attentionScratchBytes for
  // this shape (0 when that is 0). In exact math the whole-context kernel, whose contextLength
  // must fit shared memory (attentionFits).
  void attention(VkDeviceAddress q, VkDeviceAddress keyCache, VkDeviceAddress valueCache,
                 VkDeviceAddress y, VkDeviceAddress params, uint32_t heads, uint32_t kvHeads,
                 uint32_t headDim, float scale, uint32_t count, uint32_t contextLength,
                 VkDeviceAddress scratch, const AttentionOptions& options = {});
  // gate = silu(gate) * up over n elements in rows of rowLen.
  void swiglu(VkDeviceAddress gate, VkDeviceAddress up, uint32_t n, uint32_t rowLen);
  // gate = gelu(gate) * up over n elements, GELU as the CPU's (ggml's tanh form through an f16
  // table: the value rounded to f16 in and out).
  void geglu(VkDeviceAddress gate, VkDeviceAddress up, uint32_t n);
  // Mixture of experts. matvecExperts: y[i * rows + r] = dot(expert ids[i]'s row r, x row i
  // (xPerEntry) or i / used), for `entries` (token, k) entries; w holds the experts' matrices
  // one after another, each `rowsPerExpert` rows (the dequantizing mat-vec kernel, any batch).
  void matvecExperts(const DeviceMatrix& w, int64_t rowsPerExpert, VkDeviceAddress ids,
                     VkDeviceAddress x, VkDeviceAddress y, uint32_t entries, uint32_t used,
                     bool xPerEntry);
  // The router's top-`used` experts per row of logits (rows x experts, overwritten with the
  // probabilities for Softmax gating) and their weights (moe_route.comp); experts <= 256.
  void moeRoute(VkDeviceAddress logits, VkDeviceAddress ids, VkDeviceAddress weights, uint32_t rows,
                uint32_t experts, uint32_t used, bool softmaxOfChosen, bool normalize);
  // y[i][c] += bias[ids[i]][c] for entries i < entries, c < cols (ggml_add_id: an expert's
  // bias row after its product).
  void addExpertBias(VkDeviceAddress bias, VkDeviceAddress ids, VkDeviceAddress y, uint32_t entries,
                     uint32_t cols);
  // gate = gpt-oss's clamped SwiGLU of gate and up over n elements (kernels/cpu/swiglu_oai.cpp).
  void swigluOai(VkDeviceAddress gate, VkDeviceAddress up, uint32_t n);
  // dst[t] = sum over k of src[t * used + k] * weights[t * used + k], in rank order.
  void moeCombine(VkDeviceAddress src, VkDeviceAddress weights, VkDeviceAddress dst, uint32_t rows,
                  uint32_t cols, uint32_t used);
  // x[i] *= factor for i < n.
  void scale(VkDeviceAddress x, uint32_t n, float factor);
  // x[i] = cap * tanh(x[i] / cap) for i < n (soft-capping, as ggml's scale, tanh, scale).
  void softcap(VkDeviceAddress x, uint32_t n, float cap);
  // y[i] += x[i % period] for i < n.
  void add(VkDeviceAddress x, VkDeviceAddress y, uint32_t n, uint32_t period);
  // tokens[r] = the index of row r's largest logit (the lowest among equal ones) for r < rows:
  // greedy sampling on the device.
  void argmax(VkDeviceAddress logits, VkDeviceAddress tokens, uint32_t rows, uint32_t vocab);

  // The top k (<= kMaxDeviceTopK) logits of each of `rows` rows, best first in the CPU sampler's
  // order (higher first, lower id on ties), into values and ids (rows x k; id -1 past a row's
  // entries): topk.comp, level by level through `scratch` (topKScratchBytes: two value and two
  // id buffers of that many bytes each).
  struct TopKScratch {
    VkDeviceAddress values[2] = {0, 0}, ids[2] = {0, 0};
  };
  void topK(VkDeviceAddress logits, uint32_t rows, uint32_t vocab, uint32_t k,
            const TopKScratch& scratch, VkDeviceAddress values, VkDeviceAddress ids);

  // Whether the device runs the exact-math variants (Device::exactMath).
  bool exactMath() const;
  // Dispatches recorded so far (what the dispatch-count checks read), and what each was.
  uint32_t dispatches() const { return static_cast<uint32_t>(m_records.size()); }
  const std::vector<DispatchRecord>& records() const { return m_records; }

 private:
  class Push;
  // Split attention of `count` tokens (q and y at that batch's first row; token t at position
  // params[0] + firstToken + t): attention_split.comp and, with several splits,
  // attention_merge.comp.
  void splitAttention(VkDeviceAddress q, VkDeviceAddress keyCache, VkDeviceAddress valueCache,
                      VkDeviceAddress y, VkDeviceAddress params, uint32_t heads, uint32_t kvHeads,
                      uint32_t headDim, float scale, uint32_t firstToken, uint32_t count,
                      uint32_t contextLength, VkDeviceAddress scratch,
                      const AttentionOptions& options);
  void dispatch(const std::string& shader, const std::vector<uint32_t>& constants, const Push& push,
                uint32_t x, uint32_t y = 1, uint32_t z = 1);
  void barrier();

  Device& m_device;
  VkCommandBuffer m_cb;
  VkQueryPool m_timestamps = VK_NULL_HANDLE;
  uint32_t m_queries = 0;
  std::vector<DispatchRecord> m_records;
  uint64_t m_weightBytes = 0;  // what the next dispatch reads of weights (set by its op)
};

// The most candidates topK keeps per row.
inline constexpr uint32_t kMaxDeviceTopK = 64;
// Bytes of each of topK's four scratch buffers for `rows` rows of `vocab` logits (0: one level,
// no scratch).
uint64_t topKScratchBytes(uint32_t rows, uint32_t vocab, uint32_t k);

// Whether ropeStore takes `count` tokens in one dispatch (Vulkan's guaranteed 65535 groups).
bool ropeStoreFits(uint32_t qHeads, uint32_t kvHeads, uint32_t headDim, uint32_t nRot,
                   uint32_t count);

// Tokens per split-attention pass: a larger batch attends in several passes, so the scratch
// stays bounded.
inline constexpr uint32_t kAttentionTokensPerPass = 64;
// Splits of the positions in split attention for a pass of `tokens` tokens (1: no merge step,
// no scratch).
uint32_t attentionSplits(uint32_t heads, uint32_t kvHeads, uint32_t tokens, uint32_t contextLength);
// Scratch bytes split attention needs for any batch of up to maxTokens tokens (0: none).
uint64_t attentionScratchBytes(uint32_t heads, uint32_t kvHeads, uint32_t headDim,
                               uint32_t maxTokens, uint32_t contextLength);
// Whether attention over `contextLength` positions runs on the device: always with the split
// kernel; in exact math when the whole-context kernel's scores fit shared memory.
bool attentionFits(const Device& device, uint32_t headDim, int32_t contextLength);

}  // namespace shoal::vulkan
