// Gemma 3 (llama.cpp's gemma3 graph): the gemma block (arch_blocks.h) with per-head RMSNorm of
// Q and K. Five of every six layers (i % 6 < 5, attention.sliding_window_pattern) attend over
// the last attention.sliding_window positions only and turn by rope.freq_base_swa (10000)
// unscaled; the others attend globally with rope.freq_base and the model's RoPE scaling. The
// queries are scaled by 1/sqrt(head size), or 1/sqrt(n_embd / n_head) in the 62-layer 27B model;
// final_logit_softcapping, when the file has it, caps the logits. The GGUF converter stores the
// norm weights with gemma's "+1" already added.
//
// Not supported (refused): per-layer window patterns given as an array.

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/arch_blocks.h"
#include "engine/model/architecture.h"

namespace shoal::model::arch {
namespace {

constexpr std::string_view kNames[] = {"gemma3"};

constexpr auto kTensors =
    joinTensors(kLlamaGlobalTensors, kLlamaLayerTensors, kHeadNormTensors, kGemmaPostNormTensors);

// llama.cpp's LLM_TYPE_27B, which takes another attention scale.
constexpr int32_t k27bLayers = 62;

void readConfig(const gguf::File& file, const std::string& prefix, ModelConfig& c) {
  if (c.nExpert > 0) throw Error(file.displayName() + ": gemma3 has no experts");
  c.finalLogitSoftcap = readSoftcap(file, prefix + "final_logit_softcapping", 0.0f);
  c.slidingWindow = static_cast<int32_t>(file.getIntOr(prefix + "attention.sliding_window", 0));
  if (c.slidingWindow < 0) {
    throw Error(file.displayName() + ": " + prefix + "attention.sliding_window is negative");
  }
  readSlidingWindowPattern(file, prefix, c, 6);
  c.ropeFreqBaseSwa = static_cast<float>(file.getFloatOr(prefix + "rope.freq_base_swa", 10000.0));
  if (!(c.ropeFreqBaseSwa > 1.0f)) {
    throw Error(file.displayName() + ": " + prefix + "rope.freq_base_swa out of range");
  }
}

LayerProgram program(const ModelConfig& c, int32_t layer) {
  const bool sliding = slidingLayer(c, layer);
  GemmaLayer g;
  g.headNorms = true;
  g.rope = ropeOf(c, RopeStyle::Neox);
  if (sliding) {
    // get_rope_freq_base/scale: the local layers' own base, unscaled (no YaRN on them either).
    g.rope.freqBase = c.ropeFreqBaseSwa;
    g.rope.freqScale = 1.0f;
    g.rope.extFactor = 0.0f;
  }
  g.queryScale = gemmaQueryScale(c, k27bLayers);
  g.attention.window = sliding ? c.slidingWindow : 0;
  g.attention.scale = 1.0f;  // the queries are scaled instead
  return gemmaProgram(c, layer, g);
}

}  // namespace

const Architecture& architecture_gemma3() {
  static const Architecture a{kNames, readConfig, kTensors, program};
  return a;
}

}  // namespace shoal::model::arch
