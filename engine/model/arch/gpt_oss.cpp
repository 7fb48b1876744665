// gpt-oss (OpenAI's gpt-oss-20b and -120b; llama.cpp's openai-moe graph): per layer RMSNorm,
// Q/K/V with biases, NeoX RoPE (YaRN-scaled in the released models), attention with a learned
// sink logit per head (attn_sinks), the output projection with its bias, the residual add, an
// RMSNorm (post_attention_norm) and a routed mixture of experts with biases everywhere: the top
// expert_used_count experts by router logit, weighted by a softmax over the chosen logits (not
// renormalized), each a clamped SwiGLU (alpha 1.702, limit 7), then the residual add. Even layers
// (attention.sliding_window_pattern, default 2) attend over the last attention.sliding_window
// positions, odd ones over the whole context; both turn by the same RoPE base and scaling
// (rope.freq_base_swa when present). The experts are MXFP4 in the released files.
//
// The last layer computes every row, as llama.cpp's graph does (it drops the rows without logits
// only after it), so its products take the whole batch's dot order: KeepOutputRows ends the
// program. (On the fixture models an earlier cut gives the same logits; the placement follows
// llama.cpp rather than that luck.)

#include <cmath>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/arch_blocks.h"
#include "engine/model/architecture.h"

namespace shoal::model::arch {
namespace {

using R = TensorRole;

constexpr std::string_view kNames[] = {"gpt-oss"};

// One tensor per line.
// clang-format off
constexpr TensorSpec kGptOssLayerTensors[] = {
    {R::Bo, TensorScope::Layer, "attn_output.bias", {Dim::Embd, Dim::One}, true},
    {R::AttnSinks, TensorScope::Layer, "attn_sinks.weight", {Dim::Heads, Dim::One}, true},
    {R::AttnPostNorm, TensorScope::Layer, "post_attention_norm.weight", {Dim::Embd, Dim::One}, true},
    {R::GateInpBias, TensorScope::Layer, "ffn_gate_inp.bias", {Dim::Experts, Dim::One}, true, true, FfnForm::Experts},
    {R::GateExpsBias, TensorScope::Layer, "ffn_gate_exps.bias", {Dim::FfExp, Dim::Experts}, true, true, FfnForm::Experts},
    {R::UpExpsBias, TensorScope::Layer, "ffn_up_exps.bias", {Dim::FfExp, Dim::Experts}, true, true, FfnForm::Experts},
    {R::DownExpsBias, TensorScope::Layer, "ffn_down_exps.bias", {Dim::Embd, Dim::Experts}, true, true, FfnForm::Experts},
};
// The attention weights of the llama block (no ffn_norm: post_attention_norm takes its place).
constexpr TensorSpec kAttentionTensors[] = {
    {R::AttnNorm, TensorScope::Layer, "attn_norm.weight", {Dim::Embd, Dim::One}, true},
    {R::Wq, TensorScope::Layer, "attn_q.weight", {Dim::Embd, Dim::QDim}},
    {R::Wk, TensorScope::Layer, "attn_k.weight", {Dim::Embd, Dim::KvDim}},
    {R::Wv, TensorScope::Layer, "attn_v.weight", {Dim::Embd, Dim::KvDim}},
    {R::Wo, TensorScope::Layer, "attn_output.weight", {Dim::QDim, Dim::Embd}},
};
// clang-format on
constexpr auto kTensors = joinTensors(kLlamaGlobalTensors, kAttentionTensors, kQkvBiasTensors,
                                      kMoeLayerTensors, kGptOssLayerTensors);

void readConfig(const gguf::File& file, const std::string& prefix, ModelConfig& c) {
  if (c.nExpert == 0) {
    throw Error(file.displayName() + ": " + prefix + "expert_count is missing or 0 (gpt-oss " +
                "needs experts)");
  }
  // llama.cpp requires both keys for gpt-oss.
  const std::string ffKey = prefix + "expert_feed_forward_length";
  if (!file.find(ffKey)) throw Error(file.displayName() + ": " + ffKey + " is missing");
  readSlidingWindows(file, prefix, c, 0, 2);
}

LayerProgram program(const ModelConfig& c, int32_t layer) {
  const bool sliding = slidingLayer(c, layer);
  RopeParams rp = ropeOf(c, RopeStyle::Neox);
  if (sliding) rp.freqBase = c.ropeFreqBaseSwa;  // rope_freq_scale_train_swa: the same scaling
  AttendParams attention;
  attention.window = sliding ? c.slidingWindow : 0;
  attention.scale = 1.0f / std::sqrt(static_cast<float>(c.nRot));  // 1/sqrtf(n_rot)
  attention.sinks = true;
  MoeParams moe;
  moe.experts = c.nExpert;
  moe.used = c.nExpertUsed;
  moe.normalizeWeights = false;
  moe.gating = MoeGating::SoftmaxWeight;
  moe.biases = true;
  LayerProgram p;
  p.kvDim = c.kvDim();
  p.ops = {
      rmsNorm(Buffer::X, Buffer::Norm, R::AttnNorm, c.rmsEps),
      project(Buffer::Norm, {{R::Wq, Buffer::Q}, {R::Wk, Buffer::K}, {R::Wv, Buffer::V}}),
      addBias(Buffer::Q, R::Bq),
      addBias(Buffer::K, R::Bk),
      addBias(Buffer::V, R::Bv),
      rope(Buffer::Q, c.nHead, rp),
      rope(Buffer::K, c.nHeadKv, rp),
      attend(attention),
      project(Buffer::Attn, {{R::Wo, Buffer::Tmp}}),
      addBias(Buffer::Tmp, R::Bo),
      add(Buffer::Tmp, Buffer::X),
      rmsNorm(Buffer::X, Buffer::Norm, R::AttnPostNorm, c.rmsEps),
      moeFfn(Buffer::Norm, Buffer::Tmp, moe, Activation::SwigluOai),
      add(Buffer::Tmp, Buffer::X),
      keepOutputRows(),
  };
  return p;
}

}  // namespace

const Architecture& architecture_gpt_oss() {
  static const Architecture a{kNames, readConfig, kTensors, program};
  return a;
}

}  // namespace shoal::model::arch
