#pragma once
// A stage on a Vulkan device. Weights are uploaded once (raw GGUF blocks) through a staging
// buffer, as the architecture's tensor table lists them; the KV cache (f16, position-major) and
// all activations live on the device. Each layer runs its architecture's layer program
// (engine/model/layer_program.h), recorded op by op (vk_layer_program.h). A forward pass is one
// command buffer, recorded the first time its shape (each segment's rows and sequence, the logit
// rows) is seen and replayed after that: the host writes each segment's first position and the
// token ids into mapped buffers, submits once and waits. Consecutive segments of a batch run as
// one pass (the products read each weight once for all their rows; RoPE, the cache store and
// attention per segment) when every row of each goes on (decode rows, verifications, hidden
// states); any other segment (a prompt whose last row alone is kept) runs as a pass of its own.

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "engine/model/layer_program.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/stage_sequences.h"
#include "kernels/vulkan/vk_layer_program.h"
#include "kernels/vulkan/vk_ops.h"

namespace shoal::vulkan {

class VulkanStage final : public runtime::LocalStage {
 public:
  // progress(uploaded, total) bytes while the weights go up. Throws shoal::Error when a tensor
  // type has no kernel, a layer program has an op the kernels cannot run (checkProgram), the
  // context does not fit the attention kernel, or the stage needs more device memory than the
  // device has free (with the shortfall).
  VulkanStage(std::shared_ptr<Device> device, const runtime::ModelSource& model,
              const runtime::StageSpec& spec,
              const std::function<void(uint64_t, uint64_t)>& progress = {});
  ~VulkanStage() override;

  // The device-local bytes a stage of this spec allocates (weights, KV cache, activations,
  // scratch), which the constructor checks against Device::freeMemory() before uploading.
  static uint64_t deviceBytes(const runtime::ModelSource& model, const runtime::StageSpec& spec);
  // What this stage's memory pool holds on the device (tests compare it with deviceBytes).
  uint64_t deviceBytesAllocated() const { return m_pool.deviceBytesAllocated(); }

  const runtime::StageSpec& spec() const override { return m_spec; }
  int32_t truncate(int32_t sequence, int32_t fromPosition) override;
  int32_t cachedPositions(int32_t sequence) const override;
  // Bytes copied from the device to the host by the batches so far (logits, sampled tokens or
  // hidden states): a greedy decode step on a head stage reads back 4 bytes.
  uint64_t bytesReadBack() const { return m_bytesReadBack; }
  // Compute dispatches in the command buffer of the last pass run (the fusion checks: a
  // decoded token's layer is a handful of dispatches).
  uint32_t lastDispatches() const { return m_lastDispatches; }
  // Passes submitted so far: one per batch whose segments run together, else one per segment.
  uint64_t passes() const { return m_passes; }

  // Per-kernel GPU time from timestamp queries (needs timestampValidBits on the compute queue).
  bool setProfiling(bool on) override;
  std::vector<runtime::KernelProfile> profile() const override;
  uint64_t decodeWeightBytes() const override;

 protected:
  void run(const runtime::Batch& batch, runtime::StageOutput& output) override;

 private:
  struct Layer {
    model::LayerProgram program;
    RoleTensors tensors{};
    std::vector<Allocation> keys, values;  // per sequence
    // > 0: a sliding-window layer's cache is a ring of this many positions
    // (model::kvRingPositions: the bytes the planner counts for it).
    uint32_t ring = 0;
  };

  void upload(const model::ModelWeights& weights);
  void buildRopeTables(const model::ModelWeights& weights);
  // What a recorded pass is for: each segment's (rows, sequence), in row order; the logit rows of
  // the pass (a pass of several segments keeps them all); select (runPass); decode order.
  struct PassKey {
    std::vector<std::array<int32_t, 2>> segments;
    runtime::LogitRows logits = runtime::LogitRows::All;
    uint32_t select = 0;
    bool decodeOrder = false;
    auto operator<=>(const PassKey&) const = default;
  };
  // The segments `segments` of a batch as one pass, their rows starting at `row` of the batch
  // (key: their shape); appends to output. select: 0 return the logits rows; 1 their argmax
  // (greedy); k > 1 their top k, among which the batch's SampleRequest draws a token.
  void runPass(const runtime::Batch& batch, int32_t row, std::span<const runtime::Segment> segments,
               const PassKey& key, runtime::StageOutput& output);
  // A recorded pass: its command buffer, what each dispatch is, and (profiling) its timestamps.
  struct Recorded {
    VkCommandBuffer commands = VK_NULL_HANDLE;
    VkQueryPool timestamps = VK_NULL_HANDLE;
    std::vector<DispatchRecord> records;
    uint32_t dispatches() const { return static_cast<uint32_t>(records.size()); }
  };
  // Timestamp queries per profiled pass.
  static constexpr uint32_t kProfileQueries = 8192;

  const Recorded& commandsFor(const PassKey& key);
  void release(Recorded& recorded);
  void addToProfile(const Recorded& recorded);
  void record(Recorder& rec, const PassKey& key);

  std::shared_ptr<Device> m_device;
  MemoryPool m_pool;
  model::ModelConfig m_config;
  runtime::StageSpec m_spec;
  runtime::SequenceBook m_book;
  std::function<void(uint64_t, uint64_t)> m_progress;

  // Every uploaded tensor by its GGUF tensor (a tied output shares the embedding's upload).
  std::map<const gguf::TensorInfo*, DeviceMatrix> m_tensors;
  RoleTensors m_global{};  // TokenEmbd, OutputNorm, Output, ... as this stage holds them
  std::vector<Layer> m_layers;
  std::vector<RopeTable> m_ropeTables;  // one per distinct RopeParams of the layers
  // Activations for maxBatch rows, by layer_program.h's Buffer.
  std::array<Allocation, model::kBufferCount> m_buffers;
  Allocation m_actQuants, m_actScales, m_actSums;  // quantized activations (QuantizedActivations)
  Allocation m_attentionScratch;  // split attention's partial outputs (attentionScratchBytes)
  // Host-visible: each segment's first position, token ids, hidden in/out, logits, sampled tokens
  // (what the host reads back is in host-cached memory where the device has it).
  Allocation m_params, m_tokens, m_hiddenIn, m_hiddenOut, m_logits, m_sampled;
  // Top-k sampling: each logits row's k best (values, ids; host-cached), and topk.comp's scratch.
  Allocation m_topValues, m_topIds;
  std::array<Allocation, 4> m_topScratch;
  // The most logits rows one pass samples by top-k on the device (more get their logits back).
  static constexpr uint32_t kTopKRows = 16;
  uint64_t m_bytesReadBack = 0;
  Allocation m_moeLogits, m_moeIds, m_moeWeights, m_moeOutputs;  // MoeScratch, when experts

  // The most segments one pass runs together (a first position each in m_params).
  static constexpr size_t kMaxPassSegments = 64;
  std::map<PassKey, Recorded> m_commands;
  uint32_t m_lastDispatches = 0;
  uint64_t m_passes = 0;
  bool m_profiling = false;
  std::map<std::string, runtime::KernelProfile> m_profile;  // by kernel, since setProfiling
};

}  // namespace shoal::vulkan
