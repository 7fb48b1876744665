#pragma once
// Binds the tensors of a GGUF file to their roles in the transformer, checking every shape and
// type against the ModelConfig. The tensors stay where they are (in the file mapping); a backend
// copies or uploads the ones its stage needs.

#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/model/model_config.h"

namespace shoal::model {

using Tensor = const gguf::TensorInfo*;  // nullptr for an optional tensor that is absent

struct LayerWeights {
  Tensor attnNorm = nullptr;  // [nEmbd] f32
  Tensor wq = nullptr;        // [nEmbd] x qDim rows
  Tensor wk = nullptr;        // [nEmbd] x kvDim rows
  Tensor wv = nullptr;        // [nEmbd] x kvDim rows
  Tensor wo = nullptr;        // [qDim] x nEmbd rows
  Tensor bq = nullptr;        // qwen2 only: [qDim] f32
  Tensor bk = nullptr;        // qwen2 only: [kvDim] f32
  Tensor bv = nullptr;        // qwen2 only: [kvDim] f32
  Tensor ffnNorm = nullptr;   // [nEmbd] f32
  Tensor wGate = nullptr;     // [nEmbd] x nFf rows
  Tensor wUp = nullptr;       // [nEmbd] x nFf rows
  Tensor wDown = nullptr;     // [nFf] x nEmbd rows
};

struct ModelWeights {
  Tensor tokenEmbd = nullptr;   // [nEmbd] x nVocab rows
  Tensor outputNorm = nullptr;  // [nEmbd] f32
  Tensor output = nullptr;      // [nEmbd] x nVocab rows; == tokenEmbd when tied
  Tensor ropeFreqs = nullptr;   // optional [nRot/2] f32 frequency factors
  std::vector<LayerWeights> layers;

  // Throws shoal::Error naming the tensor for a missing tensor or a wrong shape or type.
  static ModelWeights bind(const gguf::File& file, const ModelConfig& config);

  // Binds only what a stage over layers [firstLayer, lastLayer) needs: those layers, the
  // embedding when `embedding`, the final norm and output when `head` (token_embd.weight too when
  // the output is tied), rope_freqs.weight when present. Everything else stays nullptr, so a
  // weight shard (a GGUF holding one stage's tensors, written by the LAN layer) binds. layers
  // still has config.nLayer entries, indexed by the model's layer number.
  static ModelWeights bindRange(const gguf::File& file, const ModelConfig& config,
                                int32_t firstLayer, int32_t lastLayer, bool embedding, bool head);
};

}  // namespace shoal::model
