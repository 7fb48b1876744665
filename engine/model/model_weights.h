#pragma once
// Binds the tensors of a GGUF file to their roles in the transformer, as the architecture's
// tensor table (tensor_table.h) lists them, checking every shape and type against the
// ModelConfig. The tensors stay where they are (in the file mapping); a backend
// copies or uploads the ones its stage needs.

#include <array>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/model/model_config.h"
#include "engine/model/tensor_table.h"

namespace shoal::model {

using Tensor = const gguf::TensorInfo*;  // nullptr for an optional tensor that is absent

// The tensors of one layer, by role (TensorRole's layer roles; the others stay nullptr).
struct LayerWeights {
  std::array<Tensor, kTensorRoleCount> byRole{};
  Tensor operator[](TensorRole role) const { return byRole[static_cast<size_t>(role)]; }
};

struct ModelWeights {
  // Global tensors by role (TokenEmbd, OutputNorm, Output, RopeFreqs); Output == TokenEmbd when
  // the head is tied.
  std::array<Tensor, kTensorRoleCount> global{};
  std::vector<LayerWeights> layers;  // config.nLayer entries, by the model's layer index

  Tensor operator[](TensorRole role) const { return global[static_cast<size_t>(role)]; }

  // The RoPE frequency factors a stage with KV caches of `contextLength` positions per sequence
  // divides its angles by: rope_freqs.weight when bound; else LongRoPE's long factors when
  // contextLength exceeds rope.scaling.original_context_length and its short ones otherwise
  // (llama.cpp's get_rope_factors, by n_ctx_seq); nullptr when the model has none. The choice
  // holds for every position, so all stages of a chain, sharing one context length, agree.
  // Inline: the CUDA plugin, which does not link the engine, calls it too.
  Tensor ropeFactors(const ModelConfig& config, int32_t contextLength) const {
    if (const Tensor freqs = (*this)[TensorRole::RopeFreqs]) return freqs;
    return contextLength > config.ropeOrigCtx ? (*this)[TensorRole::RopeFactorsLong]
                                              : (*this)[TensorRole::RopeFactorsShort];
  }

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
