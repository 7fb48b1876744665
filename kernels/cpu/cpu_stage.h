#pragma once
// A stage that runs its layers on the CPU. Weights stay in the file mapping in their quantized
// format; the KV cache (f16, like llama.cpp's default) is owned here.

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/stage.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/zeroed_buffer.h"

namespace shoal::cpu {

class CpuStage final : public runtime::Stage {
 public:
  CpuStage(const runtime::ModelSource& model, const runtime::StageSpec& spec,
           std::shared_ptr<ThreadPool> pool);

  const runtime::StageSpec& spec() const override { return m_spec; }
  void forward(const runtime::StageInput& input, runtime::StageOutput& output) override;
  void truncate(int32_t sequence, int32_t fromPosition) override;
  int32_t cachedPositions(int32_t sequence) const override;

  // Sees each intermediate tensor of forward() as it is produced, for op-by-op comparison with
  // llama.cpp or another backend. Names follow llama.cpp's graph callbacks ("attn_norm",
  // "Qcur" (after RoPE), "Kcur", "Vcur", "kqv_out", "attn_out", "ffn_inp", "ffn_norm",
  // "ffn_swiglu", "l_out" (after the residual add), "result_norm", "result_output"); layer is
  // the model's layer index, -1 for the head. data holds rows x cols floats, row-major (one row
  // per token). Empty (the default) costs nothing.
  using TensorObserver = std::function<void(std::string_view name, int32_t layer, const float* data,
                                            int64_t rows, int64_t cols)>;
  void setTensorObserver(TensorObserver observer) { m_observer = std::move(observer); }

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
  void head(const runtime::StageInput& input, runtime::StageOutput& output);
  void checkInput(const runtime::StageInput& input) const;
  void observe(std::string_view name, int32_t layer, const float* data, int64_t rows,
               int64_t cols) const {
    if (m_observer) m_observer(name, layer, data, rows, cols);
  }
  uint16_t* keyCache(size_t localLayer, int32_t sequence, int32_t position);
  uint16_t* valueCache(size_t localLayer, int32_t sequence);

  model::ModelConfig m_config;
  runtime::StageSpec m_spec;
  std::shared_ptr<ThreadPool> m_pool;
  std::vector<Layer> m_layers;
  const gguf::TensorInfo* m_tokenEmbd = nullptr;
  const float* m_outputNorm = nullptr;
  WeightMatrix m_output;
  std::vector<float> m_ropeFreqs;  // empty: no frequency factors

  // KV cache, per local layer and sequence, f16 as llama.cpp's default cache: keys
  // position-major (contextLength x kvDim), values transposed (kvDim rows of valueStride
  // positions) so each output dimension of V·softmax is one contiguous dot product, as in
  // llama.cpp's V cache without flash attention. Pages become resident as positions fill.
  std::vector<ZeroedBuffer<uint16_t>> m_keys, m_values;
  AttentionShape m_attnShape;
  std::vector<int32_t> m_cached;  // positions cached per sequence

  // Activations and scratch for a batch of up to maxBatch tokens, allocated once; only the rows
  // of the largest batch seen so far are resident.
  ZeroedBuffer<float> m_x, m_norm, m_q, m_k, m_v, m_attn, m_gate, m_up, m_tmp;
  std::vector<float> m_ropeCos, m_ropeSin;
  std::vector<uint16_t> m_halfRow;  // one token's values as f16, before the transposed store
  AttentionScratch m_attnScratch;
  MatmulScratch m_matmulScratch;
  TensorObserver m_observer;
};

}  // namespace shoal::cpu
