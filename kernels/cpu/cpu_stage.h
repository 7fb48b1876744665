#pragma once
// A stage that runs its layers on the CPU: each layer is its architecture's layer program
// (engine/model/layer_program.h), bound to the weights once (cpu_layer_program.h) and run op by
// op (cpu_layer_ops.h). Weights keep their quantized format, copied into huge pages when the
// system allows (weight_arena.h) and read from the file mapping otherwise; the KV cache
// (f16, like llama.cpp's default) is owned here. Batches of several sequences are computed
// together; the stage never samples (StageOutput::tokens stays empty: the Session samples).

#include <memory>
#include <string_view>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/stage_sequences.h"
#include "kernels/cpu/cpu_layer_ops.h"
#include "kernels/cpu/cpu_layer_program.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/weight_arena.h"

namespace shoal::cpu {

class CpuStage final : public runtime::LocalStage {
 public:
  // Throws shoal::Error when the spec does not fit the model or the model's layer program
  // cannot run on its weights here.
  CpuStage(const runtime::ModelSource& model, const runtime::StageSpec& spec,
           std::shared_ptr<ThreadPool> pool);

  const runtime::StageSpec& spec() const override { return m_spec; }
  void truncate(int32_t sequence, int32_t fromPosition) override {
    m_book.truncate(sequence, fromPosition);
  }
  int32_t cachedPositions(int32_t sequence) const override { return m_book.cached(sequence); }

  // Sees each intermediate tensor of a batch as it is produced, for op-by-op comparison with
  // llama.cpp or another backend. Names follow llama.cpp's graph callbacks ("attn_norm",
  // "Qcur" (after RoPE), "Kcur", "Vcur", "kqv_out", "attn_out", "ffn_inp", "ffn_norm",
  // "ffn_swiglu", "l_out" (after the residual add), "result_norm", "result_output"); layer is
  // the model's layer index, -1 for the head. data holds rows x cols floats, row-major (one row
  // per live row of the batch). Empty (the default) costs nothing.
  using TensorObserver = cpu::TensorObserver;
  void setTensorObserver(TensorObserver observer) { m_runner->setObserver(std::move(observer)); }

 protected:
  void run(const runtime::Batch& batch, runtime::StageOutput& output) override;

 private:
  void moveWeightsToHugePages(const runtime::ModelSource& model, int threads,
                              const float*& ropeFreqs);
  void embed(std::span<const int32_t> tokens);
  void head(runtime::StageOutput& output);

  model::ModelConfig m_config;
  runtime::StageSpec m_spec;
  runtime::SequenceBook m_book;
  const gguf::TensorInfo* m_tokenEmbd = nullptr;  // first stage
  const uint8_t* m_tokenEmbdData = nullptr;       // its rows: the mapping's, or m_weights'
  WeightArena m_weights;  // the matrices' bytes in huge pages, when copied (weight_arena.h)
  const float* m_outputNorm = nullptr;  // head stage
  WeightMatrix m_output;                // head stage
  std::vector<CpuLayer> m_layers;
  std::unique_ptr<LayerRunner> m_runner;
};

}  // namespace shoal::cpu
