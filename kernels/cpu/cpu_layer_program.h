#pragma once
// A layer program (engine/model/layer_program.h) bound for the CPU stage: each op with the
// weights it reads (in the file mapping; the stage may move them, cpu_stage.h), the row width of
// every buffer after it, and the name under which the tensor observer sees its result. Binding
// checks the program against the model once, when the stage is built, so that running it
// (cpu_layer_ops.h) checks nothing.

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/model/layer_program.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/zeroed_buffer.h"

namespace shoal::cpu {

using BufferWidths = std::array<int64_t, model::kBufferCount>;

struct BoundOp {
  model::Op op;
  // Project: the weight of each output (op.outs); GatedFfn: gate, up; MoeFfn: the router.
  std::array<WeightMatrix, 3> matrices{};
  // MoeFfn: the experts' gate, up and down matrices.
  std::array<ExpertMatrices, 3> experts{};
  // MoeFfn with biases (f32): the router's (experts values), then the experts' gate, up and
  // down biases (one row of the product's width per expert).
  std::array<const float*, 4> moeBiases{};
  const float* vector = nullptr;  // RmsNorm, AddBias, HeadNorm: op.weight (f32)
  // Floats per row of each buffer once the op has run (0: not written yet in this layer).
  BufferWidths width{};
  int32_t ropeTable = -1;  // Rope: index into the stage's distinct RopeParams
  // KeepOutputRows: the buffers a later op reads before writing them (the rows to carry on).
  std::array<bool, model::kBufferCount> live{};
  // The tensor observer's name for op.dst after this op (empty: not reported). Attend also
  // reports its inputs as Qcur, Kcur and Vcur just before it runs.
  std::string_view observed;
};

// One layer of the stage: its bound ops and its KV cache.
struct CpuLayer {
  int32_t index = 0;  // the model's layer number
  std::vector<BoundOp> ops;
  AttentionShape attention;
  // Per sequence, f16 as llama.cpp's default cache: keys position-major (contextLength x kvDim),
  // values transposed (kvDim rows of valueStride positions) so each output dimension of
  // V·softmax is one contiguous dot product, as in llama.cpp's V cache without flash attention.
  // Pages become resident as positions fill.
  std::vector<ZeroedBuffer<uint16_t>> keys, values;
};

struct LayerBinding {
  const model::ModelConfig* config = nullptr;
  const model::LayerWeights* weights = nullptr;
  int32_t layer = 0;
  bool keepOutputRows = false;  // the model's last layer on a head stage (else the op is dropped)
  int32_t contextLength = 0;
  int32_t sequences = 0;
  const float* ropeFreqs = nullptr;  // rope_freqs.weight (RopeParams::freqFactors), or nullptr
  int64_t ropeFreqCount = 0;
};

// Binds `program`. Distinct RopeParams of its Rope ops are added to `ropes` (shared by the
// layers of a stage, so each angle table is computed once per batch). Throws shoal::Error for a
// program this backend cannot run on these weights (a missing or mis-shaped weight, a buffer
// read before it is written, an activation it lacks, ...), naming the layer and op.
CpuLayer bindLayer(const model::LayerProgram& program, const LayerBinding& binding,
                   std::vector<model::RopeParams>& ropes);

}  // namespace shoal::cpu
