#pragma once
// A stage that runs its layers on the CPU: each layer is its architecture's layer program
// (engine/model/layer_program.h), bound to the weights once (cpu_layer_program.h) and run op by
// op (cpu_layer_ops.h). Weights keep their quantized format, read from the file mapping at first
// and copied into huge pages in the background when the system allows (weight_arena.h); the KV
// cache (f16, like llama.cpp's default) is owned here. Batches of several sequences are computed
// together; the stage never samples (StageOutput::tokens stays empty: the Session samples).

#include <memory>
#include <mutex>
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
  ~CpuStage() override;

  const runtime::StageSpec& spec() const override { return m_spec; }
  int32_t truncate(int32_t sequence, int32_t fromPosition) override {
    return m_book.truncate(sequence, fromPosition);
  }
  int32_t cachedPositions(int32_t sequence) const override { return m_book.cached(sequence); }
  void settle() override { waitForWeightCopy(); }

  // Sees each intermediate tensor of a batch as it is produced, for op-by-op comparison with
  // llama.cpp or another backend. Names follow llama.cpp's graph callbacks ("attn_norm",
  // "Qcur" (after RoPE), "Kcur", "Vcur", "kqv_out", "attn_out", "ffn_inp", "ffn_norm",
  // "ffn_swiglu", "l_out" (after the residual add), "result_norm", "result_output"); layer is
  // the model's layer index, -1 for the head. data holds rows x cols floats, row-major (one row
  // per live row of the batch). Empty (the default) costs nothing.
  using TensorObserver = cpu::TensorObserver;
  void setTensorObserver(TensorObserver observer) { m_runner->setObserver(std::move(observer)); }

  // Until the background copy of the weights (weight_arena.h) is done and adopted: from then on
  // every pass reads the copy. Returns at once when there is no copy. For tests and for
  // measuring the steady state; the stage never needs it.
  void waitForWeightCopy();
  // Units of the copy (one per tensor: the head's, then each layer's) adopted so far, and in
  // all; 0 and 0 without a copy.
  size_t weightUnitsInCopy();
  size_t weightUnits() const { return m_weights.bytes() ? m_weights.units() : 0; }
  // Bytes of KV cache the stage allocated, every sequence of every layer (a sliding-window
  // layer's ring, kv_ring.h, holds less than the context).
  uint64_t kvCacheBytes() const;
  // Tensors of the copy in row groups (row_groups.h) so far.
  size_t weightTensorsInRowGroups() const { return m_weights.transformedRanges(); }

 protected:
  void run(const runtime::Batch& batch, runtime::StageOutput& output) override;

 private:
  void startWeightCopy(const runtime::ModelSource& model);
  // Adopts every unit copied so far, and points the readers of the unit being copied at the
  // rows already copied (followCopy); with m_adoptMutex held.
  void adoptCopiedWeights();
  void followCopy();
  void adoptUnit(size_t unit);
  // Gives the file mapping's pages for [p, p + bytes) back (nothing when the weights are a
  // buffer: dropping its pages would zero it).
  void releaseMapping(const uint8_t* p, size_t bytes) const;
  // Whether the copy may put tensor t's rows into row groups (row_groups.h): the active kernel
  // level reads its type that way, and every matrix of the stage that reads it starts on a
  // group and takes whole groups.
  bool groupable(const gguf::TensorInfo& t) const;
  void embed(std::span<const int32_t> tokens);
  void head(runtime::StageOutput& output);

  model::ModelConfig m_config;
  runtime::StageSpec m_spec;
  runtime::SequenceBook m_book;
  const gguf::TensorInfo* m_tokenEmbd = nullptr;  // first stage
  const uint8_t* m_tokenEmbdData = nullptr;       // its rows: the mapping's, or m_weights'
  bool m_tokenEmbdGrouped = false;                // ... in row groups (a tied output's copy)
  std::vector<uint8_t> m_embedRow;                // one row taken out of its group
  const gguf::File* m_file = nullptr;  // the mapping the weights come from (null: a buffer)
  // Held by run() and by the copying thread while it adopts: the ops' weight pointers change
  // only under it.
  std::mutex m_adoptMutex;
  size_t m_adoptedUnits = 0;  // units of m_weights adopted (their readers point at the copy)
  // Per unit of m_weights (one tensor each): the layer (index into m_layers) that reads it, or
  // m_layers.size() for the head.
  std::vector<size_t> m_unitReader;
  size_t m_unitsOfHead = 0;             // the first units: the head's tensors
  const float* m_outputNorm = nullptr;  // head stage
  WeightMatrix m_output;                // head stage
  std::vector<CpuLayer> m_layers;
  std::unique_ptr<LayerRunner> m_runner;
  // Declared last: its copying thread must stop before the members it adopts into are destroyed
  // (the destructor stops it first anyway).
  WeightArena m_weights;  // the weights' bytes in huge pages, as copied (weight_arena.h)
};

}  // namespace shoal::cpu
