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

// The layer-program features the CUDA kernels cover beyond the llama/qwen ops: all of them
// (gpu_op_gaps.h lists them), so a pool can put any architecture's layers on a CUDA device.
inline constexpr kernels::GpuOpSupport kCudaOps = kernels::kEveryGpuOp;

// Row width (floats per token) of a buffer in a layer whose keys and values are kvDim wide:
// X, Norm and Tmp hold the residual width, Q and Attn the query width, Gate and Up the FFN's.
int64_t bufferWidth(model::Buffer buffer, const model::ModelConfig& config, int32_t kvDim);

// A mixture-of-experts layer's weights (MoeFfn).
struct CudaExperts {
  // Gate, up and down of every expert, expert e's rows at e * (rows / experts): only the
  // chosen experts' rows are read, never dequantized whole (not in CudaOp::matrices).
  std::array<DeviceMatrix, 3> matrices{};
  // With MoeParams::biases: the router's bias (experts floats), then the gate's, up's and
  // down's (experts x their rows); nullptr otherwise.
  std::array<const float*, 4> biases{};
  int64_t width = 0;  // one expert's FFN width (gate and up rows per expert)
};

struct CudaOp {
  model::Op op;
  // Project: one per output (a fused matrix's rows already cut to the output's range);
  // GatedFfn: gate, up; MoeFfn: the router.
  std::array<DeviceMatrix, 3> matrices{};
  // RmsNorm, HeadNorm: the weight; AddBias: the bias; Attend with sinks: nHead sink logits.
  const float* vector = nullptr;
  RopeTable rope;       // Rope: the angles of op.rope
  CudaExperts experts;  // MoeFfn
};

struct CudaLayer {
  int32_t index = 0;  // the model's layer number
  bool last = false;  // the model's last layer: KeepOutputRows takes effect here
  int32_t kvDim = 0;  // width of the keys and values this layer caches per position
  // The widest window its Attend ops look over (0: the whole context), and the ring its cache
  // is kept as when that saves memory (engine/model/kv_ring.h: positions in slot p mod ring;
  // 0: the cache holds the whole context). Set by CudaStage, which knows the context length.
  int32_t window = 0;
  int32_t ring = 0;
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
// what this backend cannot run: a cache bound by the program itself, a missing weight, a weight
// or head count that does not fit the buffers.
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
