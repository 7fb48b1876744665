// The llama family (llama 1-3, mistral, SmolLM2): GQA, RoPE on adjacent dimension pairs (llama
// GGUFs store Q/K rows permuted for it) with optional linear scaling and llama 3.1 frequency
// factors, RMSNorm, SwiGLU FFN, tied or separate output; with experts (Mixtral) a routed
// mixture of SwiGLU experts in place of the FFN.
//   x += Wo · attention(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x))
//   x += Wdown · (silu(Wgate·norm(x)) * Wup·norm(x))      (dense)
//   x += sum over the top-k experts e of w_e · FFN_e(norm(x))   (experts)

#include "engine/model/arch_blocks.h"
#include "engine/model/architecture.h"

namespace shoal::model::arch {
namespace {

using R = TensorRole;

constexpr std::string_view kNames[] = {"llama", "mistral"};

// Mixtral-style models are llama models with expert_count > 0: kMoeLayerTensors replace the
// dense FFN's.
constexpr auto kTensors = joinTensors(kLlamaGlobalTensors, kLlamaLayerTensors, kMoeLayerTensors);

LayerProgram program(const ModelConfig& c, int32_t /*layer: all alike*/) {
  LayerProgram p;
  p.kvDim = c.kvDim();
  const RopeParams rp = ropeOf(c, RopeStyle::Normal);
  p.ops = {
      rmsNorm(Buffer::X, Buffer::Norm, R::AttnNorm, c.rmsEps),
      project(Buffer::Norm, {{R::Wq, Buffer::Q}, {R::Wk, Buffer::K}, {R::Wv, Buffer::V}}),
      rope(Buffer::Q, c.nHead, rp),
      rope(Buffer::K, c.nHeadKv, rp),
      attend(fullAttention(c)),
  };
  appendAttentionOutputAndFfn(p.ops, c);
  return p;
}

}  // namespace

const Architecture& architecture_llama() {
  static const Architecture a{kNames, nullptr, kTensors, program};
  return a;
}

}  // namespace shoal::model::arch
