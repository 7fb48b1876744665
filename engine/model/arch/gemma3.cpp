// Gemma 3 (llama.cpp's gemma3 graph): the embedding scaled by sqrt(n_embd) on the way in; per
// layer RMSNorm, Q/K/V, per-head RMSNorm of Q and K, NeoX RoPE, the queries scaled by
// 1/sqrt(head size) (kq scale 1), attention, an RMSNorm of the attention output
// (post_attention_norm) before the residual add, then RMSNorm, a GeGLU FFN (tanh GELU of the gate
// times up), an RMSNorm of its output (post_ffw_norm) and the residual add. Five of every six
// layers (i % 6 < 5, attention.sliding_window_pattern) attend over the last
// attention.sliding_window positions only and turn by rope.freq_base_swa (10000) unscaled;
// the others attend globally with rope.freq_base and the model's RoPE scaling. The GGUF
// converter stores the norm weights with gemma's "+1" already added.
//
// Not supported (refused): the 27B model's attention scale (1/sqrt(n_embd / n_head), told apart
// by llama.cpp by its layer count), final logit soft-capping, per-layer window patterns given
// as an array.

#include <cmath>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/arch_blocks.h"
#include "engine/model/architecture.h"

namespace shoal::model::arch {
namespace {

using R = TensorRole;

constexpr std::string_view kNames[] = {"gemma3"};

constexpr TensorSpec kPostNorms[] = {
    {R::AttnPostNorm,
     TensorScope::Layer,
     "post_attention_norm.weight",
     {Dim::Embd, Dim::One},
     true},
    {R::FfnPostNorm, TensorScope::Layer, "post_ffw_norm.weight", {Dim::Embd, Dim::One}, true},
};
constexpr auto kTensors =
    joinTensors(kLlamaGlobalTensors, kLlamaLayerTensors, kHeadNormTensors, kPostNorms);

// llama.cpp's LLM_TYPE_27B, which takes another attention scale.
constexpr int32_t k27bLayers = 62;

void readConfig(const gguf::File& file, const std::string& prefix, ModelConfig& c) {
  if (c.nLayer == k27bLayers) {
    throw Error(file.displayName() + ": a 62-layer gemma3 (27B) scales attention by " +
                "1/sqrt(n_embd / n_head), which Shoal does not implement yet");
  }
  if (file.getFloatOr(prefix + "final_logit_softcapping", 0.0) != 0.0) {
    throw Error(file.displayName() + ": " + prefix +
                "final_logit_softcapping is not supported yet");
  }
  if (c.nExpert > 0) throw Error(file.displayName() + ": gemma3 has no experts");
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
  RopeParams rp = ropeOf(c, RopeStyle::Neox);
  if (sliding) {
    // get_rope_freq_base/scale: the local layers' own base, unscaled (no YaRN on them either).
    rp.freqBase = c.ropeFreqBaseSwa;
    rp.freqScale = 1.0f;
    rp.extFactor = 0.0f;
  }
  AttendParams attention;
  attention.window = sliding ? c.slidingWindow : 0;
  attention.scale = 1.0f;  // the queries are scaled instead (below)
  LayerProgram p;
  p.kvDim = c.kvDim();
  if (layer == 0) p.ops.push_back(scale(Buffer::X, std::sqrt(static_cast<float>(c.nEmbd))));
  const std::vector<Op> ops = {
      rmsNorm(Buffer::X, Buffer::Norm, R::AttnNorm, c.rmsEps),
      project(Buffer::Norm, {{R::Wq, Buffer::Q}, {R::Wk, Buffer::K}, {R::Wv, Buffer::V}}),
      headNorm(Buffer::Q, c.nHead, R::QNorm, c.rmsEps),
      rope(Buffer::Q, c.nHead, rp),
      headNorm(Buffer::K, c.nHeadKv, R::KNorm, c.rmsEps),
      rope(Buffer::K, c.nHeadKv, rp),
      scale(Buffer::Q, 1.0f / std::sqrt(static_cast<float>(c.headDim))),
      attend(attention),
      project(Buffer::Attn, {{R::Wo, Buffer::Tmp}}),
      keepOutputRows(),
      rmsNorm(Buffer::Tmp, Buffer::Tmp, R::AttnPostNorm, c.rmsEps),
      add(Buffer::Tmp, Buffer::X),
      rmsNorm(Buffer::X, Buffer::Norm, R::FfnNorm, c.rmsEps),
      gatedFfn(Buffer::Norm, R::WGate, R::WUp, Activation::GeluTanh),
      project(Buffer::Gate, {{R::WDown, Buffer::Tmp}}),
      rmsNorm(Buffer::Tmp, Buffer::Tmp, R::FfnPostNorm, c.rmsEps),
      add(Buffer::Tmp, Buffer::X),
  };
  p.ops.insert(p.ops.end(), ops.begin(), ops.end());
  return p;
}

}  // namespace

const Architecture& architecture_gemma3() {
  static const Architecture a{kNames, readConfig, kTensors, program};
  return a;
}

}  // namespace shoal::model::arch
