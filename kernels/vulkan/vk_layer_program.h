#pragma once
// Records a layer program (engine/model/layer_program.h) into a command buffer, one small
// function per op kind, over a stage's activation buffers. The Vulkan stage knows no
// architecture: it hands each layer's program, weights and KV cache to LayerRecorder.

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/model/layer_program.h"
#include "kernels/gpu_op_gaps.h"
#include "kernels/vulkan/vk_ops.h"

namespace shoal::vulkan {

// The layer-program features the Vulkan kernels cover beyond the llama/qwen ops: all of them
// (a feature added to gpu_op_gaps.h is refused by name until its kernels exist).
inline constexpr kernels::GpuOpSupport kVulkanOps = kernels::kEveryGpuOp;

// The weights of a layer (or the stage's global ones) by role; nullptr where not uploaded.
using RoleTensors = std::array<const DeviceMatrix*, model::kTensorRoleCount>;

// RoPE cos/sin tables (contextLength x nRot/2) for one set of RoPE parameters.
struct RopeTable {
  model::RopeParams params;
  Allocation cos, sin;
};

// Rows [first, first + count) of the batch.
struct RowRange {
  uint32_t first = 0, count = 0;
};

// One sequence's rows of a pass: the rows [firstRow, firstRow + count) of the batch, at positions
// params[0] + t (params: a host-written int on the device, one per segment).
struct PassSegment {
  uint32_t firstRow = 0, count = 0;
  VkDeviceAddress params = 0;
};

// A sequence's f16 key and value caches of one layer.
struct KvCache {
  VkDeviceAddress keys = 0, values = 0;
};

// Scratch of the mixture-of-experts FFN, for the stage's largest batch (all 0 when no layer
// of the stage has experts).
struct MoeScratch {
  VkDeviceAddress logits = 0;   // rows x experts: router logits, then probabilities
  VkDeviceAddress ids = 0;      // rows x used ints: the chosen experts
  VkDeviceAddress weights = 0;  // rows x used: their weights
  VkDeviceAddress outputs = 0;  // (rows x used) x nEmbd: each entry's expert output
};

// What stays the same across the layers of one recorded pass. A pass runs the rows of one or
// more sequences together (the products read each weight once for all of them); RoPE, the cache
// store and attention run per segment, over its own sequence's cache.
struct PassContext {
  const model::ModelConfig* config = nullptr;
  std::array<VkDeviceAddress, model::kBufferCount> buffers{};  // one row per token each
  QuantizedActivations quantized;                              // scratch for integer products
  std::span<const PassSegment> segments;  // in row order; their counts add up to rows
  uint32_t contextLength = 0;             // of the KV cache
  VkDeviceAddress attentionScratch = 0;   // attentionScratchBytes for the stage's largest batch
  const std::vector<RopeTable>* ropeTables = nullptr;
  MoeScratch moe;
  uint32_t rows = 0;  // rows of the batch
  // Segment::decodeOrder: the integer products keep the mat-vec's rounding (not the tiled
  // matmul's), so each row equals decoding it alone (speculative verification).
  bool decodeOrder = false;
  RowRange kept;  // the rows KeepOutputRows keeps (the logits rows of a head stage)
};

// One layer of a pass.
struct LayerPass {
  const model::LayerProgram* program = nullptr;
  const RoleTensors* tensors = nullptr;
  std::span<const KvCache> caches;  // the layer's cache of each segment's sequence
  uint32_t ring = 0;  // > 0: the cache is a ring of this many positions (AttentionOptions::ring)
  bool keepsOutputRows = false;  // the model's last layer on a head stage: KeepOutputRows acts
};

// Records layers one after another; the rows in play shrink to the kept ones at the
// KeepOutputRows of the model's last layer (the head then reads PassContext::kept).
class LayerRecorder {
 public:
  LayerRecorder(Recorder& rec, const PassContext& context);

  void record(const LayerPass& layer);

  // Address of row `row` of a buffer, rows laid out at the buffer's current width.
  VkDeviceAddress at(model::Buffer buffer, uint32_t row) const;

  // Products of one input (rows x cols floats) with several weights, into their destinations:
  // quantized once for the integer kernels when a weight type needs it, as the CPU backend
  // converts an input once per format.
  struct Product {
    const DeviceMatrix* w;
    VkDeviceAddress y;
    VkDeviceAddress bias = 0;  // added to the products (w.rows floats per row), or 0
  };
  void products(VkDeviceAddress x, uint32_t cols, uint32_t rows, std::span<const Product> jobs);

 private:
  void rmsNorm(const model::Op& op);
  // biases: per output, a bias vector added to its products (the AddBias ops after it), or 0.
  void project(const model::Op& op, const std::array<VkDeviceAddress, 3>& biases = {});
  void addBias(const model::Op& op);
  void headNorm(const model::Op& op);
  // Two HeadNorm ops in one dispatch, when they fit one (else false, nothing recorded).
  bool headNormPair(const model::Op& a, const model::Op& b);
  void rope(const model::Op& op);
  const RopeTable& ropeTable(const model::Op& op) const;
  uint32_t ropeHeadDim(const model::Op& op) const;
  // RoPE of Q and K, Q times qScale and the cache store in one dispatch, when the kernel takes
  // them (else false, nothing recorded).
  bool ropeAndStore(const model::Op& q, const model::Op& k, float qScale);
  // stored: the keys and values are in the cache already (ropeAndStore).
  void attend(const model::Op& op, bool stored);
  // Records a fused sequence starting at ops[i]: the ops taken beyond ops[i], or -1 (nothing
  // recorded) where no fusion applies.
  int fused(const std::vector<model::Op>& ops, size_t i);
  void keepOutputRows();
  void add(const model::Op& op);
  void gatedFfn(const model::Op& op);
  void moeFfn(const model::Op& op);
  static DeviceMatrix rowsOf(const DeviceMatrix& w, int64_t first, int64_t count);

  const DeviceMatrix& weight(model::TensorRole role) const;
  uint32_t& width(model::Buffer buffer) { return m_width[static_cast<size_t>(buffer)]; }
  uint32_t widthOf(model::Buffer buffer) const { return m_width[static_cast<size_t>(buffer)]; }

  Recorder& m_rec;
  const PassContext& m_ctx;
  const LayerPass* m_layer = nullptr;
  // Floats per row of each buffer as last written (a projection sets its output's width, at
  // most the buffer's capacity).
  std::array<uint32_t, model::kBufferCount> m_capacity{}, m_width{};
  RowRange m_rows;  // in play: all rows of the batch, or the kept ones after KeepOutputRows
};

// Throws shoal::Error when the Vulkan kernels cannot run a layer's program as the stage holds
// it: a weight it reads is absent, a sliding attention window shorter than the context, RoPE or
// attention after KeepOutputRows.
void checkProgram(const model::LayerProgram& program, int32_t layer, int32_t contextLength,
                  const RoleTensors& tensors);

// The most floats per row each buffer holds (layer_program.h's table; Gate and Up also hold a
// token's `used` expert rows): the stage allocates maxBatch rows of these.
std::array<uint32_t, model::kBufferCount> bufferWidths(const model::ModelConfig& config);

}  // namespace shoal::vulkan
