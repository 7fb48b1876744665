#pragma once
// Pieces the llama-like architectures share: their common tensor rows, the default RoPE
// parameters, and the second half of a pre-norm block (attention output, residual, gated FFN,
// residual). An architecture file composes them with its own attention input (biases, head norms,
// ...).

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "engine/model/layer_program.h"
#include "engine/model/model_config.h"

namespace shoal::gguf {
class File;
}

namespace shoal::model::arch {

// The tensors every llama-like architecture has: the global ones and the block's weights (the
// dense FFN's only in models without experts).
inline constexpr TensorSpec kLlamaGlobalTensors[] = {
    {TensorRole::TokenEmbd, TensorScope::Embedding, "token_embd.weight", {Dim::Embd, Dim::Vocab}},
    {TensorRole::OutputNorm, TensorScope::Head, "output_norm.weight", {Dim::Embd, Dim::One}, true},
    // Absent when the head is tied to the embedding.
    {TensorRole::Output, TensorScope::Head, "output.weight", {Dim::Embd, Dim::Vocab}, false, false},
    // llama 3.1 frequency factors, when the file has them.
    {TensorRole::RopeFreqs,
     TensorScope::Global,
     "rope_freqs.weight",
     {Dim::RotHalf, Dim::One},
     true,
     false},
};

// One tensor per line.
// clang-format off
inline constexpr TensorSpec kLlamaLayerTensors[] = {
    {TensorRole::AttnNorm, TensorScope::Layer, "attn_norm.weight", {Dim::Embd, Dim::One}, true},
    {TensorRole::Wq, TensorScope::Layer, "attn_q.weight", {Dim::Embd, Dim::QDim}},
    {TensorRole::Wk, TensorScope::Layer, "attn_k.weight", {Dim::Embd, Dim::KvDim}},
    {TensorRole::Wv, TensorScope::Layer, "attn_v.weight", {Dim::Embd, Dim::KvDim}},
    {TensorRole::Wo, TensorScope::Layer, "attn_output.weight", {Dim::QDim, Dim::Embd}},
    {TensorRole::FfnNorm, TensorScope::Layer, "ffn_norm.weight", {Dim::Embd, Dim::One}, true},
    {TensorRole::WGate, TensorScope::Layer, "ffn_gate.weight", {Dim::Embd, Dim::Ff}, false, true, FfnForm::Dense},
    {TensorRole::WUp, TensorScope::Layer, "ffn_up.weight", {Dim::Embd, Dim::Ff}, false, true, FfnForm::Dense},
    {TensorRole::WDown, TensorScope::Layer, "ffn_down.weight", {Dim::Ff, Dim::Embd}, false, true, FfnForm::Dense},
};

// The FFN of a mixture-of-experts layer (llama.cpp's ffn_gate_inp and ffn_*_exps), for Mixtral-
// style llama models and qwen3moe: the router is F32 in every GGUF converter's output.
inline constexpr TensorSpec kMoeLayerTensors[] = {
    {TensorRole::GateInp, TensorScope::Layer, "ffn_gate_inp.weight", {Dim::Embd, Dim::Experts, Dim::One}, true, true, FfnForm::Experts},
    {TensorRole::GateExps, TensorScope::Layer, "ffn_gate_exps.weight", {Dim::Embd, Dim::FfExp, Dim::Experts}, false, true, FfnForm::Experts},
    {TensorRole::UpExps, TensorScope::Layer, "ffn_up_exps.weight", {Dim::Embd, Dim::FfExp, Dim::Experts}, false, true, FfnForm::Experts},
    {TensorRole::DownExps, TensorScope::Layer, "ffn_down_exps.weight", {Dim::FfExp, Dim::Embd, Dim::Experts}, false, true, FfnForm::Experts},
};
// clang-format on

// One table from several lists of rows (at compile time), so an architecture names only what it
// adds: joinTensors(kLlamaGlobalTensors, kLlamaLayerTensors, kMyExtras).
template <size_t... N>
constexpr std::array<TensorSpec, (N + ...)> joinTensors(const TensorSpec (&... parts)[N]) {
  std::array<TensorSpec, (N + ...)> out{};
  size_t at = 0;
  ((std::copy(std::begin(parts), std::end(parts), out.begin() + at), at += N), ...);
  return out;
}

// Biases of the Q, K and V projections (qwen2, gpt-oss).
inline constexpr TensorSpec kQkvBiasTensors[] = {
    {TensorRole::Bq, TensorScope::Layer, "attn_q.bias", {Dim::QDim, Dim::One}, true},
    {TensorRole::Bk, TensorScope::Layer, "attn_k.bias", {Dim::KvDim, Dim::One}, true},
    {TensorRole::Bv, TensorScope::Layer, "attn_v.bias", {Dim::KvDim, Dim::One}, true},
};

// Qwen3's per-head RMSNorm weights of the queries and keys (one head wide).
inline constexpr TensorSpec kHeadNormTensors[] = {
    {TensorRole::QNorm, TensorScope::Layer, "attn_q_norm.weight", {Dim::HeadDim, Dim::One}, true},
    {TensorRole::KNorm, TensorScope::Layer, "attn_k_norm.weight", {Dim::HeadDim, Dim::One}, true},
};

// Gemma's RMSNorms of the attention and FFN outputs (gemma2, gemma3, gpt-oss's
// post_attention_norm).
inline constexpr TensorSpec kGemmaPostNormTensors[] = {
    {TensorRole::AttnPostNorm,
     TensorScope::Layer,
     "post_attention_norm.weight",
     {Dim::Embd, Dim::One},
     true},
    {TensorRole::FfnPostNorm,
     TensorScope::Layer,
     "post_ffw_norm.weight",
     {Dim::Embd, Dim::One},
     true},
};

// The gemma block (gemma2, gemma3; llama.cpp's graphs): Scale(X, sqrt(n_embd)) first in layer 0;
// RMSNorm, Q/K/V, (gemma3: per-head RMSNorm of Q and of K, each before its) NeoX RoPE, the
// queries scaled, attention (kq scale 1), Wo, an RMSNorm of the attention output
// (post_attention_norm) before the residual add, then RMSNorm, a GeGLU FFN, an RMSNorm of its
// output (post_ffw_norm) and the residual add.
struct GemmaLayer {
  bool headNorms = false;
  RopeParams rope;
  float queryScale = 1;
  AttendParams attention;
};
LayerProgram gemmaProgram(const ModelConfig& c, int32_t layer, const GemmaLayer& g);
// llama.cpp's f_attention_scale for gemma: 1/sqrt(n_embd / n_head) for the 27B model (told
// apart by its layer count, layers27b), 1/sqrt(head size) otherwise.
float gemmaQueryScale(const ModelConfig& c, int32_t layers27b);

// Qwen3's block (qwen3, qwen3moe): the llama block without Q/K/V biases, with HeadNorm over the
// queries and keys before NeoX RoPE; its FFN as appendAttentionOutputAndFfn decides.
LayerProgram headNormedProgram(const ModelConfig& c);

// RoPE as the config's rope.* keys describe it, rotating pairs in `style`.
RopeParams ropeOf(const ModelConfig& c, RopeStyle style);

// Whether `layer` attends over a sliding window (llama_hparams::set_swa_pattern without
// dense_first): with c.slidingWindow > 0, layers with layer % pattern < pattern - 1; pattern 0
// makes every layer sliding.
bool slidingLayer(const ModelConfig& c, int32_t layer);

// attention.sliding_window_pattern (default `fallback` when absent) into c.slidingWindowPattern;
// a per-layer array is refused, as is a pattern out of range.
void readSlidingWindowPattern(const gguf::File& file, const std::string& prefix, ModelConfig& c,
                              int32_t fallback);

// Interleaved sliding-window attention that every model of the architecture has (gemma2,
// gpt-oss): attention.sliding_window (defaultWindow when absent; 0: the key is required),
// the pattern (readSlidingWindowPattern with defaultPattern) and rope.freq_base_swa (the model's
// rope.freq_base when absent).
void readSlidingWindows(const gguf::File& file, const std::string& prefix, ModelConfig& c,
                        int64_t defaultWindow, int32_t defaultPattern);

// A soft-capping key (default `fallback` when absent; 0 turns it off), refused when negative or
// not finite.
float readSoftcap(const gguf::File& file, const std::string& key, float fallback);

// llama.cpp's kq_scale for these families: 1 / sqrt(head size).
AttendParams fullAttention(const ModelConfig& c);

// ops: Attn -> Wo -> Tmp; keep output rows; X += Tmp; FFN norm; then X += Wdown · SwiGLU for a
// dense model, X += the routed experts (MoeFfn, weights normalized) for one with experts.
void appendAttentionOutputAndFfn(std::vector<Op>& ops, const ModelConfig& c);

}  // namespace shoal::model::arch
