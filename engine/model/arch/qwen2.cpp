// Qwen2 (and Qwen2.5): the llama block with biases on the Q, K and V projections and RoPE on
// (i, i + n/2) pairs (NeoX style).

#include "engine/model/arch_blocks.h"
#include "engine/model/architecture.h"

namespace shoal::model::arch {
namespace {

using R = TensorRole;

constexpr std::string_view kNames[] = {"qwen2"};

constexpr auto kTensors = joinTensors(kLlamaGlobalTensors, kLlamaLayerTensors, kQkvBiasTensors);

LayerProgram program(const ModelConfig& c, int32_t /*layer: all alike*/) {
  LayerProgram p;
  p.kvDim = c.kvDim();
  const RopeParams rp = ropeOf(c, RopeStyle::Neox);
  p.ops = {
      rmsNorm(Buffer::X, Buffer::Norm, R::AttnNorm, c.rmsEps),
      project(Buffer::Norm, {{R::Wq, Buffer::Q}, {R::Wk, Buffer::K}, {R::Wv, Buffer::V}}),
      addBias(Buffer::Q, R::Bq),
      addBias(Buffer::K, R::Bk),
      addBias(Buffer::V, R::Bv),
      rope(Buffer::Q, c.nHead, rp),
      rope(Buffer::K, c.nHeadKv, rp),
      attend(fullAttention(c)),
  };
  appendAttentionOutputAndFfn(p.ops, c);
  return p;
}

}  // namespace

const Architecture& architecture_qwen2() {
  static const Architecture a{kNames, nullptr, kTensors, program};
  return a;
}

}  // namespace shoal::model::arch
