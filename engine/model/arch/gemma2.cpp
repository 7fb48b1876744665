// Gemma 2 (llama.cpp's gemma2 graph): the gemma block (arch_blocks.h) without head norms, with
// soft-capped attention scores (cap * tanh(score / cap), attn_logit_softcapping, default 50)
// and logits (final_logit_softcapping, default 30). Even layers (sliding_window_pattern,
// default 2) attend over the last attention.sliding_window positions (default 4096); every
// layer turns by the same RoPE scaling, the sliding ones by rope.freq_base_swa when present.
// The queries are scaled by 1/sqrt(head size), or 1/sqrt(n_embd / n_head) in the 46-layer 27B
// model. The output is tied to the embedding.

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/arch_blocks.h"
#include "engine/model/architecture.h"

namespace shoal::model::arch {
namespace {

constexpr std::string_view kNames[] = {"gemma2"};

constexpr auto kTensors =
    joinTensors(kLlamaGlobalTensors, kLlamaLayerTensors, kGemmaPostNormTensors);

// llama.cpp's LLM_TYPE_27B for gemma2, which takes another attention scale.
constexpr int32_t k27bLayers = 46;

void readConfig(const gguf::File& file, const std::string& prefix, ModelConfig& c) {
  if (c.nExpert > 0) throw Error(file.displayName() + ": gemma2 has no experts");
  c.attnLogitSoftcap = readSoftcap(file, prefix + "attn_logit_softcapping", 50.0f);
  c.finalLogitSoftcap = readSoftcap(file, prefix + "final_logit_softcapping", 30.0f);
  readSlidingWindows(file, prefix, c, 4096, 2);
}

LayerProgram program(const ModelConfig& c, int32_t layer) {
  const bool sliding = slidingLayer(c, layer);
  GemmaLayer g;
  g.rope = ropeOf(c, RopeStyle::Neox);
  if (sliding) g.rope.freqBase = c.ropeFreqBaseSwa;  // rope_freq_scale_train_swa: the same scale
  g.queryScale = gemmaQueryScale(c, k27bLayers);
  g.attention.window = sliding ? c.slidingWindow : 0;
  g.attention.scale = 1.0f;  // the queries are scaled instead
  g.attention.softcap = c.attnLogitSoftcap;
  return gemmaProgram(c, layer, g);
}

}  // namespace

const Architecture& architecture_gemma2() {
  static const Architecture a{kNames, readConfig, kTensors, program};
  return a;
}

}  // namespace shoal::model::arch
