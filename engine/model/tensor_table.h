#pragma once
// The tensors of an architecture, described once as data: which GGUF tensor plays which role,
// its shape in terms of the model's hyper-parameters, and when it must be present. Weight
// binding (model_weights.h), the LAN layer's shard lists, size estimates and every backend's
// upload iterate over this table instead of naming tensors themselves.

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::model {

struct ModelConfig;

// What a tensor is for. Layer roles index LayerWeights; global roles index ModelWeights.
// Adding a role is how an architecture gets a new kind of weight (and a backend learns it only
// through the op that reads it).
enum class TensorRole : uint8_t {
  // Global (one per model).
  TokenEmbd,   // embedding rows, one per token id
  OutputNorm,  // final RMSNorm weight
  Output,      // output projection (the embedding when tied)
  RopeFreqs,   // llama 3.1 RoPE frequency factors
  // LongRoPE (phi3 128k): frequency factors for a context past rope.scaling.original_context_length
  // and for one within it; a stage takes one of them (ModelWeights::ropeFactors).
  RopeFactorsLong,
  RopeFactorsShort,
  // Per layer.
  AttnNorm,      // pre-attention RMSNorm weight
  Wq,            // query projection
  Wk,            // key projection
  Wv,            // value projection
  Wqkv,          // query, key and value projections in one matrix (phi3)
  Wo,            // attention output projection
  Bq,            // query bias
  Bk,            // key bias
  Bv,            // value bias
  Bo,            // attention output bias (gpt-oss)
  AttnSinks,     // per query head, a logit that joins each softmax and takes no value (gpt-oss)
  QNorm,         // per-head RMSNorm weight of the queries (one head's width)
  KNorm,         // per-head RMSNorm weight of the keys
  FfnNorm,       // pre-FFN RMSNorm weight
  AttnPostNorm,  // RMSNorm weight of the attention output (gemma)
  FfnPostNorm,   // RMSNorm weight of the FFN output (gemma)
  WGate,         // FFN gate projection
  WUp,           // FFN up projection
  WDown,         // FFN down projection
  // Mixture of experts (per layer): the router and the experts' stacked matrices, one matrix
  // per expert along the third dimension (llama.cpp's ffn_*_exps).
  GateInp,   // router: one row of logits weights per expert
  GateExps,  // experts' gate projections
  UpExps,    // experts' up projections
  DownExps,  // experts' down projections
  // Their biases (gpt-oss): the router's one per expert, the experts' one row per expert.
  GateInpBias,
  GateExpsBias,
  UpExpsBias,
  DownExpsBias,
  Count
};
constexpr size_t kTensorRoleCount = static_cast<size_t>(TensorRole::Count);
std::string_view tensorRoleName(TensorRole role);  // "attn_q", "ffn_down", ...

// Where a tensor belongs: the stage that needs it.
enum class TensorScope : uint8_t {
  Embedding,  // the first stage (token ids in)
  Head,       // the last stage (logits out)
  Global,     // every stage (e.g. RoPE frequency factors)
  Layer,      // the stage holding that layer; the GGUF name gets "blk.<i>." in front
};

// A dimension of a tensor, as a hyper-parameter of the model (ModelConfig).
// FfExp is one expert's FFN width, Experts the number of experts, Heads the query heads.
// QkvDim is QDim + 2 KvDim (a fused Q/K/V matrix), Ff2 twice Ff (a fused gate/up matrix).
enum class Dim : uint8_t {
  One,
  Embd,
  QDim,
  KvDim,
  Ff,
  Vocab,
  HeadDim,
  RotHalf,
  FfExp,
  Experts,
  QkvDim,
  Ff2,
  Heads
};
int64_t dimValue(Dim dim, const ModelConfig& config);

// Which models of an architecture have a tensor: the llama family has dense and
// mixture-of-experts members (Mixtral) that share everything but the FFN.
enum class FfnForm : uint8_t {
  Any,      // every model
  Dense,    // models without experts (ModelConfig::nExpert == 0)
  Experts,  // models with experts
};

struct TensorSpec {
  TensorRole role;
  TensorScope scope;
  std::string_view name;  // GGUF name (after "blk.<i>." for layer tensors)
  // GGUF dims: {row length, rows, matrices}; trailing Dim::One are absent (a vector, a matrix).
  std::array<Dim, 3> shape;
  bool f32 = false;  // must be F32 (norms, biases, factors, routers: every backend reads them so)
  bool required = true;         // false: bound when present (rope_freqs, a tied model's output)
  FfnForm form = FfnForm::Any;  // the models that have it (the others never bind it)
};

// The GGUF dims of a tensor of this spec in a model of this config (shape without its trailing
// Dim::One).
std::vector<int64_t> specDims(const TensorSpec& spec, const ModelConfig& config);

// A tensor of a stage, resolved: its full GGUF name and whether it must exist.
struct StageTensor {
  std::string name;
  TensorRole role;
  int32_t layer = -1;  // -1 for global tensors
  bool required = true;
};

// The GGUF tensors a stage over layers [firstLayer, lastLayer) needs, in table order, with the
// embedding when `embedding`, the head when `head` (token_embd.weight too when the output is
// tied). For shard lists and size estimates; bindRange (model_weights.h) binds the same set.
// Needs config.arch (set by ModelConfig::fromGguf); throws shoal::Error without it.
std::vector<StageTensor> stageTensors(const ModelConfig& config, int32_t firstLayer,
                                      int32_t lastLayer, bool embedding, bool head);

}  // namespace shoal::model
