#pragma once
// The layer programs of a CUDA stage (engine/model/layer_program.h: the architecture's ops over
// named buffers), resolved once against the device: every op carries the device copies of the
// weights it reads and the RoPE table it rotates by, and the widths of the buffers it touches
// are checked against those weights. CudaStage then runs a layer as a plain loop over its ops.

#include <array>
#include <cstdint>
#include <vector>

#include "engine/model/architecture.h"
#include "engine/model/layer_program.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "kernels/cuda/cuda_rope_tables.h"
#include "kernels/cuda/cuda_weights.h"
#include "kernels/gpu_op_gaps.h"

namespace shoal::cuda {

// The layer-program features the CUDA kernels cover beyond the llama/qwen ops: none yet.
inline constexpr kernels::GpuOpSupport kCudaOps{};

// Row width (floats per token) of a buffer in a layer whose keys and values are kvDim wide:
// X, Norm and Tmp hold the residual width, Q and Attn the query width, Gate and Up the FFN's.
int64_t bufferWidth(model::Buffer buffer, const model::ModelConfig& config, int32_t kvDim);

struct CudaOp {
  model::Op op;
  std::array<DeviceMatrix, 3> matrices{};  // Project: one per output; GatedFfn: gate, up
  const float* vector = nullptr;           // RmsNorm, HeadNorm: the weight; AddBias: the bias
  RopeTable rope;                          // Rope: the angles of op.rope
};

struct CudaLayer {
  int32_t index = 0;  // the model's layer number
  bool last = false;  // the model's last layer: KeepOutputRows takes effect here
  int32_t kvDim = 0;  // width of the keys and values this layer caches per position
  std::vector<CudaOp> ops;
};

// Every tensor the architecture's table assigns to a stage over [firstLayer, lastLayer) (with
// the embedding and head as asked), handed to `add` in table order; absent optional tensors are
// nullptr.
template <typename Add>
void forEachStageTensor(const model::ModelConfig& config, const model::ModelWeights& weights,
                        int32_t firstLayer, int32_t lastLayer, bool embedding, bool head,
                        Add&& add);

// The programs of layers [firstLayer, lastLayer), from config.arch (set by ModelConfig::fromGguf),
// with every weight already uploaded to `device`. Throws shoal::Error naming the layer and op for
// what this backend cannot run: a sliding attention window, an activation it lacks, a missing
// weight, a weight or head count that does not fit the buffers.
std::vector<CudaLayer> resolveLayers(const model::ModelConfig& config,
                                     const model::ModelWeights& weights,
                                     const DeviceWeights& device, RopeTables& ropeTables,
                                     int32_t firstLayer, int32_t lastLayer);

template <typename Add>
void forEachStageTensor(const model::ModelConfig& config, const model::ModelWeights& weights,
                        int32_t firstLayer, int32_t lastLayer, bool embedding, bool head,
                        Add&& add) {
  using model::TensorScope;
  for (const model::TensorSpec& t : config.arch->tensors) {
    if (t.scope == TensorScope::Layer) {
      for (int32_t i = firstLayer; i < lastLayer; ++i) {
        add(weights.layers[static_cast<size_t>(i)][t.role]);
      }
    } else if (t.scope == TensorScope::Global || (t.scope == TensorScope::Embedding && embedding) ||
               (t.scope == TensorScope::Head && head)) {
      add(weights[t.role]);  // a tied output is token_embd again: DeviceWeights keeps one copy
    }
  }
}

}  // namespace shoal::cuda
