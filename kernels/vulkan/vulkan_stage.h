#pragma once
// A stage on a Vulkan device. Weights are uploaded once (raw GGUF blocks) through a staging
// buffer; the KV cache (f16, position-major) and all activations live on the device. A forward
// pass is one command buffer, recorded the first time a (token count, sequence, all-logits)
// shape is seen and replayed after that: per token the host writes the first position and the
// token ids into a mapped buffer, submits once and waits.

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/stage.h"
#include "kernels/vulkan/vk_ops.h"

namespace shoal::vulkan {

class VulkanStage final : public runtime::Stage {
 public:
  // progress(uploaded, total) bytes while the weights go up. Throws shoal::Error when a tensor
  // type has no kernel, the context does not fit the attention kernel, or memory runs out.
  VulkanStage(std::shared_ptr<Device> device, const runtime::ModelSource& model,
              const runtime::StageSpec& spec,
              const std::function<void(uint64_t, uint64_t)>& progress = {});
  ~VulkanStage() override;

  const runtime::StageSpec& spec() const override { return m_spec; }
  void forward(const runtime::StageInput& input, runtime::StageOutput& output) override;
  void truncate(int32_t sequence, int32_t fromPosition) override;
  int32_t cachedPositions(int32_t sequence) const override;

 private:
  struct Layer {
    Allocation attnNorm, ffnNorm, bq, bk, bv;
    DeviceMatrix wq, wk, wv, wo, wGate, wUp, wDown;
    std::vector<Allocation> keys, values;  // per sequence
  };

  DeviceMatrix uploadMatrix(const gguf::TensorInfo& t);
  Allocation uploadFloats(const gguf::TensorInfo* t);
  VkCommandBuffer commandsFor(int32_t count, int32_t sequence, bool allLogits);
  void record(Recorder& rec, int32_t count, int32_t sequence, bool allLogits);
  // Products of one input x (tokens x cols): quantized once for the integer kernels when some
  // weight type needs it, as the CPU backend converts an input once per format.
  struct Product {
    const DeviceMatrix* w;
    VkDeviceAddress y;
  };
  void products(Recorder& rec, VkDeviceAddress x, uint32_t cols, uint32_t tokens,
                std::initializer_list<Product> jobs);
  void checkInput(const runtime::StageInput& input) const;

  std::shared_ptr<Device> m_device;
  MemoryPool m_pool;
  model::ModelConfig m_config;
  runtime::StageSpec m_spec;
  std::function<void(uint64_t, uint64_t)> m_progress;
  uint64_t m_uploadTotal = 0, m_uploaded = 0;
  std::map<const gguf::TensorInfo*, DeviceMatrix> m_matrices;  // tied output shares the embedding

  std::vector<Layer> m_layers;
  DeviceMatrix m_tokenEmbd, m_output;
  Allocation m_outputNorm;
  Allocation m_ropeCos, m_ropeSin;  // contextLength x nRot/2
  // Activations for maxBatch tokens.
  Allocation m_x, m_norm, m_q, m_k, m_v, m_attn, m_tmp, m_gate, m_up;
  Allocation m_actQuants, m_actScales, m_actSums;  // quantized activations (QuantizedActivations)
  QuantizedActivations m_act;
  // Host-visible: [firstPosition], token ids, hidden in/out, logits.
  Allocation m_params, m_tokens, m_hiddenIn, m_hiddenOut, m_logits;
  std::vector<int32_t> m_cached;

  std::map<std::tuple<int32_t, int32_t, bool>, VkCommandBuffer> m_commands;
};

}  // namespace shoal::vulkan
