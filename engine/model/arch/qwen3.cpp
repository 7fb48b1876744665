// Qwen3 (dense): the llama block without Q/K/V biases, with an RMSNorm over each head of the
// queries and of the keys before RoPE (attn_q_norm / attn_k_norm, one head wide), and RoPE on
// (i, i + n/2) pairs (NeoX style). Its head size comes from attention.key_length (it need not
// be embedding_length / head_count), which ModelConfig already reads.

#include "engine/model/arch_blocks.h"
#include "engine/model/architecture.h"

namespace shoal::model::arch {
namespace {

constexpr std::string_view kNames[] = {"qwen3"};

constexpr auto kTensors = joinTensors(kLlamaGlobalTensors, kLlamaLayerTensors, kHeadNormTensors);

LayerProgram program(const ModelConfig& c, int32_t /*layer: all alike*/) {
  return headNormedProgram(c);
}

}  // namespace

const Architecture& architecture_qwen3() {
  static const Architecture a{kNames, nullptr, kTensors, program};
  return a;
}

}  // namespace shoal::model::arch
