#pragma once
// Pieces the llama-like architectures share: their common tensor rows, the default RoPE
// parameters, and the second half of a pre-norm block (attention output, residual, gated FFN,
// residual). An architecture file composes them with its own attention input (biases, head norms,
// ...).

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "engine/model/layer_program.h"
#include "engine/model/model_config.h"

namespace shoal::model::arch {

// The tensors every llama-like architecture has: the global ones and the block's weights.
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
inline constexpr TensorSpec kLlamaLayerTensors[] = {
    {TensorRole::AttnNorm, TensorScope::Layer, "attn_norm.weight", {Dim::Embd, Dim::One}, true},
    {TensorRole::Wq, TensorScope::Layer, "attn_q.weight", {Dim::Embd, Dim::QDim}},
    {TensorRole::Wk, TensorScope::Layer, "attn_k.weight", {Dim::Embd, Dim::KvDim}},
    {TensorRole::Wv, TensorScope::Layer, "attn_v.weight", {Dim::Embd, Dim::KvDim}},
    {TensorRole::Wo, TensorScope::Layer, "attn_output.weight", {Dim::QDim, Dim::Embd}},
    {TensorRole::FfnNorm, TensorScope::Layer, "ffn_norm.weight", {Dim::Embd, Dim::One}, true},
    {TensorRole::WGate, TensorScope::Layer, "ffn_gate.weight", {Dim::Embd, Dim::Ff}},
    {TensorRole::WUp, TensorScope::Layer, "ffn_up.weight", {Dim::Embd, Dim::Ff}},
    {TensorRole::WDown, TensorScope::Layer, "ffn_down.weight", {Dim::Ff, Dim::Embd}},
};

// One table from several lists of rows (at compile time), so an architecture names only what it
// adds: joinTensors(kLlamaGlobalTensors, kLlamaLayerTensors, kMyExtras).
template <size_t... N>
constexpr std::array<TensorSpec, (N + ...)> joinTensors(const TensorSpec (&... parts)[N]) {
  std::array<TensorSpec, (N + ...)> out{};
  size_t at = 0;
  ((std::copy(std::begin(parts), std::end(parts), out.begin() + at), at += N), ...);
  return out;
}

// RoPE as the config's rope.* keys describe it, rotating pairs in `style`.
RopeParams ropeOf(const ModelConfig& c, RopeStyle style);

// llama.cpp's kq_scale for these families: 1 / sqrt(head size).
AttendParams fullAttention(const ModelConfig& c);

// ops: Attn -> Wo -> Tmp; keep output rows; X += Tmp; FFN norm; SwiGLU FFN; X += Wdown · Gate.
void appendAttentionOutputAndFfn(std::vector<Op>& ops, const ModelConfig& c);

}  // namespace shoal::model::arch
