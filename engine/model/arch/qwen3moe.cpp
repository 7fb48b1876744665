// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention (per-head Q/K RMSNorm, NeoX
// RoPE, head size from attention.key_length) with a routed mixture of SwiGLU experts in place
// of the FFN: softmax over expert_count router logits, the top expert_used_count experts per
// token, their probabilities renormalized to sum to 1 (llama.cpp's norm_w = true). One
// expert's width is expert_feed_forward_length (llama.cpp's fallback without the key:
// feed_forward_length / expert_used_count). No shared expert.

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/arch_blocks.h"
#include "engine/model/architecture.h"

namespace shoal::model::arch {
namespace {

constexpr std::string_view kNames[] = {"qwen3moe"};

constexpr auto kTensors =
    joinTensors(kLlamaGlobalTensors, kLlamaLayerTensors, kHeadNormTensors, kMoeLayerTensors);

void readConfig(const gguf::File& file, const std::string& prefix, ModelConfig& c) {
  if (c.nExpert == 0) {
    throw Error(file.displayName() + ": " + prefix + "expert_count is missing or 0 (qwen3moe " +
                "needs experts)");
  }
  if (!file.find(prefix + "expert_feed_forward_length")) c.nFfExp = c.nFf / c.nExpertUsed;
}

LayerProgram program(const ModelConfig& c, int32_t /*layer: all alike*/) {
  return headNormedProgram(c);
}

}  // namespace

const Architecture& architecture_qwen3moe() {
  static const Architecture a{kNames, readConfig, kTensors, program};
  return a;
}

}  // namespace shoal::model::arch
