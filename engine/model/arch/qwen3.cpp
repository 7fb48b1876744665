// Qwen3 (dense): the llama block without Q/K/V biases, with an RMSNorm over each head of the
// queries and of the keys before RoPE (attn_q_norm / attn_k_norm, one head wide), and RoPE on
// (i, i + n/2) pairs (NeoX style). Its head size comes from attention.key_length (it need not
// be embedding_length / head_count), which ModelConfig already reads.

#include "engine/model/arch_blocks.h"
#include "engine/model/architecture.h"

namespace shoal::model::arch {
namespace {

using R = TensorRole;

constexpr std::string_view kNames[] = {"qwen3"};

// One head wide: the same weights normalize every head.
constexpr TensorSpec kHeadNorms[] = {
    {R::QNorm, TensorScope::Layer, "attn_q_norm.weight", {Dim::HeadDim, Dim::One}, true},
    {R::KNorm, TensorScope::Layer, "attn_k_norm.weight", {Dim::HeadDim, Dim::One}, true},
};
constexpr auto kTensors = joinTensors(kLlamaGlobalTensors, kLlamaLayerTensors, kHeadNorms);

LayerProgram program(const ModelConfig& c, int32_t /*layer: all alike*/) {
  LayerProgram p;
  p.kvDim = c.kvDim();
  const RopeParams rp = ropeOf(c, RopeStyle::Neox);
  p.ops = {
      rmsNorm(Buffer::X, Buffer::Norm, R::AttnNorm, c.rmsEps),
      project(Buffer::Norm, {{R::Wq, Buffer::Q}, {R::Wk, Buffer::K}, {R::Wv, Buffer::V}}),
      headNorm(Buffer::Q, c.nHead, R::QNorm, c.rmsEps),
      headNorm(Buffer::K, c.nHeadKv, R::KNorm, c.rmsEps),
      rope(Buffer::Q, c.nHead, rp),
      rope(Buffer::K, c.nHeadKv, rp),
      attend(fullAttention(c)),
  };
  appendAttentionOutputAndFfn(p.ops, c);
  return p;
}

}  // namespace

const Architecture& architecture_qwen3() {
  static const Architecture a{kNames, nullptr, kTensors, program};
  return a;
}

}  // namespace shoal::model::arch
