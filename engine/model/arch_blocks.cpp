#include "engine/model/arch_blocks.h"

#include <cmath>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"

namespace shoal::model::arch {

RopeParams ropeOf(const ModelConfig& c, RopeStyle style) {
  RopeParams p;
  p.nRot = c.nRot;
  p.freqBase = c.ropeFreqBase;
  p.freqScale = c.ropeFreqScale;
  p.style = style;
  p.freqFactors = c.hasRopeFreqs;
  p.nCtxOrig = c.ropeOrigCtx;
  p.attnFactor = c.ropeAttnFactor;
  if (c.ropeScaling == RopeScaling::Yarn) {
    // llama.cpp's context setup (llama-context.cpp): ext_factor 1 and an attention factor
    // get_mscale(factor) that cancels rope_yarn's own magnitude correction, times
    // rope.scaling.attn_factor; in float, in its order.
    p.extFactor = 1.0f;
    const float factor = 1.0f / c.ropeFreqScale;
    float attn = factor <= 1.0f ? 1.0f : 0.1f * std::log(factor) + 1.0f;
    attn *= 1.0f / (1.0f + 0.1f * std::log(factor));
    p.attnFactor = attn * c.ropeAttnFactor;
  }
  return p;
}

bool slidingLayer(const ModelConfig& c, int32_t layer) {
  if (c.slidingWindow <= 0) return false;
  const int32_t n = c.slidingWindowPattern;
  return n == 0 || layer % n < n - 1;
}

void readSlidingWindowPattern(const gguf::File& file, const std::string& prefix, ModelConfig& c,
                              int32_t fallback) {
  const std::string key = prefix + "attention.sliding_window_pattern";
  if (const gguf::Value* v = file.find(key); v && v->asArray()) {
    throw Error(file.displayName() + ": " + key + " as a per-layer array is not supported yet");
  }
  c.slidingWindowPattern = static_cast<int32_t>(file.getIntOr(key, fallback));
  if (c.slidingWindowPattern < 0 || c.slidingWindowPattern > 1024) {
    throw Error(file.displayName() + ": " + key + " out of range");
  }
}

void readSlidingWindows(const gguf::File& file, const std::string& prefix, ModelConfig& c,
                        int64_t defaultWindow, int32_t defaultPattern) {
  const std::string key = prefix + "attention.sliding_window";
  if (defaultWindow == 0 && !file.find(key))
    throw Error(file.displayName() + ": " + key + " is missing");
  const int64_t window = file.getIntOr(key, defaultWindow);
  if (window <= 0 || window > (int64_t{1} << 24)) {
    throw Error(file.displayName() + ": " + key + " out of range");
  }
  c.slidingWindow = static_cast<int32_t>(window);
  readSlidingWindowPattern(file, prefix, c, defaultPattern);
  c.ropeFreqBaseSwa =
      static_cast<float>(file.getFloatOr(prefix + "rope.freq_base_swa", c.ropeFreqBase));
  if (!(c.ropeFreqBaseSwa > 1.0f)) {
    throw Error(file.displayName() + ": " + prefix + "rope.freq_base_swa out of range");
  }
}

float readSoftcap(const gguf::File& file, const std::string& key, float fallback) {
  const double v = file.getFloatOr(key, fallback);
  if (!(v >= 0.0) || !std::isfinite(v) || v > 1e6) {
    throw Error(file.displayName() + ": " + key + " out of range");
  }
  return static_cast<float>(v);
}

AttendParams fullAttention(const ModelConfig& c) {
  AttendParams a;
  a.window = 0;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.headDim));
  return a;
}

void appendAttentionOutputAndFfn(std::vector<Op>& ops, const ModelConfig& c) {
  ops.push_back(project(Buffer::Attn, {{TensorRole::Wo, Buffer::Tmp}}));
  // After the model's last attention only the rows that produce logits go on (llama.cpp's
  // inp_out_ids), which also decides the FFN's batch shape.
  ops.push_back(keepOutputRows());
  ops.push_back(add(Buffer::Tmp, Buffer::X));
  ops.push_back(rmsNorm(Buffer::X, Buffer::Norm, TensorRole::FfnNorm, c.rmsEps));
  if (c.nExpert > 0) {
    MoeParams moe;
    moe.experts = c.nExpert;
    moe.used = c.nExpertUsed;
    moe.normalizeWeights = true;  // llama and qwen3moe both pass norm_w = true
    ops.push_back(moeFfn(Buffer::Norm, Buffer::Tmp, moe));
  } else {
    ops.push_back(gatedFfn(Buffer::Norm, TensorRole::WGate, TensorRole::WUp, Activation::Silu));
    ops.push_back(project(Buffer::Gate, {{TensorRole::WDown, Buffer::Tmp}}));
  }
  ops.push_back(add(Buffer::Tmp, Buffer::X));
}

LayerProgram gemmaProgram(const ModelConfig& c, int32_t layer, const GemmaLayer& g) {
  using R = TensorRole;
  LayerProgram p;
  p.kvDim = c.kvDim();
  if (layer == 0) p.ops.push_back(scale(Buffer::X, std::sqrt(static_cast<float>(c.nEmbd))));
  p.ops.push_back(rmsNorm(Buffer::X, Buffer::Norm, R::AttnNorm, c.rmsEps));
  p.ops.push_back(
      project(Buffer::Norm, {{R::Wq, Buffer::Q}, {R::Wk, Buffer::K}, {R::Wv, Buffer::V}}));
  if (g.headNorms) p.ops.push_back(headNorm(Buffer::Q, c.nHead, R::QNorm, c.rmsEps));
  p.ops.push_back(rope(Buffer::Q, c.nHead, g.rope));
  if (g.headNorms) p.ops.push_back(headNorm(Buffer::K, c.nHeadKv, R::KNorm, c.rmsEps));
  p.ops.push_back(rope(Buffer::K, c.nHeadKv, g.rope));
  const std::vector<Op> rest = {
      scale(Buffer::Q, g.queryScale),
      attend(g.attention),
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
  p.ops.insert(p.ops.end(), rest.begin(), rest.end());
  return p;
}

float gemmaQueryScale(const ModelConfig& c, int32_t layers27b) {
  const int32_t width = c.nLayer == layers27b ? c.nEmbd / c.nHead : c.headDim;
  return 1.0f / std::sqrt(static_cast<float>(width));
}

LayerProgram headNormedProgram(const ModelConfig& c) {
  LayerProgram p;
  p.kvDim = c.kvDim();
  const RopeParams rp = ropeOf(c, RopeStyle::Neox);
  p.ops = {
      rmsNorm(Buffer::X, Buffer::Norm, TensorRole::AttnNorm, c.rmsEps),
      project(
          Buffer::Norm,
          {{TensorRole::Wq, Buffer::Q}, {TensorRole::Wk, Buffer::K}, {TensorRole::Wv, Buffer::V}}),
      headNorm(Buffer::Q, c.nHead, TensorRole::QNorm, c.rmsEps),
      headNorm(Buffer::K, c.nHeadKv, TensorRole::KNorm, c.rmsEps),
      rope(Buffer::Q, c.nHead, rp),
      rope(Buffer::K, c.nHeadKv, rp),
      attend(fullAttention(c)),
  };
  appendAttentionOutputAndFfn(p.ops, c);
  return p;
}

}  // namespace shoal::model::arch
