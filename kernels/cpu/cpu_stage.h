#pragma once
// A stage that runs its layers on the CPU. Weights stay in the file mapping in their quantized
// format; the KV cache (f16, like llama.cpp's default) is owned here.

#include <memory>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/stage.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace shoal::cpu {

class CpuStage final : public runtime::Stage {
 public:
  CpuStage(const runtime::ModelSource& model, const runtime::StageSpec& spec,
           std::shared_ptr<ThreadPool> pool);

  const runtime::StageSpec& spec() const override { return m_spec; }
  void forward(const runtime::StageInput& input, runtime::StageOutput& output) override;
  void truncate(int32_t sequence, int32_t fromPosition) override;
  int32_t cachedPositions(int32_t sequence) const override;

 private:
  struct Layer {
    const float* attnNorm;
    WeightMatrix wq, wk, wv, wo;
    const float* bq = nullptr;
    const float* bk = nullptr;
    const float* bv = nullptr;
    const float* ffnNorm;
    WeightMatrix wGate, wUp, wDown;
  };

  void embed(const runtime::StageInput& input);
  void runLayer(const Layer& layer, size_t localLayer, const runtime::StageInput& input);
  void attention(size_t localLayer, const runtime::StageInput& input);
  void head(const runtime::StageInput& input, runtime::StageOutput& output);
  void checkInput(const runtime::StageInput& input) const;
  uint16_t* keyCache(size_t localLayer, int32_t sequence, int32_t position);
  uint16_t* valueCache(size_t localLayer, int32_t sequence, int32_t position);

  model::ModelConfig m_config;
  runtime::StageSpec m_spec;
  std::shared_ptr<ThreadPool> m_pool;
  std::vector<Layer> m_layers;
  const gguf::TensorInfo* m_tokenEmbd = nullptr;
  const float* m_outputNorm = nullptr;
  WeightMatrix m_output;
  std::vector<float> m_ropeFreqs;  // empty: no frequency factors

  // KV cache: per local layer, per sequence, contextLength x kvDim halfs.
  std::vector<std::vector<uint16_t>> m_keys, m_values;
  std::vector<int32_t> m_cached;  // positions cached per sequence

  // Activations and scratch for a batch of up to maxBatch tokens, allocated once.
  std::vector<float> m_x, m_norm, m_q, m_k, m_v, m_attn, m_gate, m_up, m_tmp;
  std::vector<float> m_ropeCos, m_ropeSin;
  std::vector<float> m_scores;        // per thread: contextLength
  std::vector<float> m_queryScratch;  // per thread: headDim
  MatmulScratch m_matmulScratch;
};

}  // namespace shoal::cpu
