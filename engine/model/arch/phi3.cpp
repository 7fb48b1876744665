// Phi-3 / Phi-3.5 / Phi-4-mini dense (llama.cpp's phi3 graph): RMSNorm; one fused attn_qkv
// matrix whose rows are Q, then K, then V; NeoX RoPE; the queries scaled by 1/sqrt(head size)
// with kq scale 1; the output projection and residual; RMSNorm; one fused ffn_up matrix whose
// first half of rows is the gate and the second the up projection (llama.cpp's ggml_swiglu of
// the whole row); ffn_down; residual. llama.cpp ignores phi3's attention.sliding_window (its
// SWA is disabled for this architecture), and so does Shoal.
//
// LongRoPE (the 128k-context models, "su"/"longrope" in their config): the converter writes the
// rope_factors_long/short tensors, rope.scaling.original_context_length and
// rope.scaling.attn_factor (no rope.scaling.type). A stage divides its angles by the long
// factors when its context exceeds the original one and by the short ones otherwise, and the
// attention factor scales cos and sin either way (llama.cpp's get_rope_factors and
// yarn_attn_factor).
//
// Not supported (refused): the MoE variant (phimoe is another architecture name anyway).

#include <cmath>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/arch_blocks.h"
#include "engine/model/architecture.h"

namespace shoal::model::arch {
namespace {

using R = TensorRole;

constexpr std::string_view kNames[] = {"phi3"};

// One tensor per line.
// clang-format off
constexpr TensorSpec kLayerTensors[] = {
    {R::AttnNorm, TensorScope::Layer, "attn_norm.weight", {Dim::Embd, Dim::One}, true},
    {R::Wqkv, TensorScope::Layer, "attn_qkv.weight", {Dim::Embd, Dim::QkvDim}},
    {R::Wo, TensorScope::Layer, "attn_output.weight", {Dim::QDim, Dim::Embd}},
    {R::FfnNorm, TensorScope::Layer, "ffn_norm.weight", {Dim::Embd, Dim::One}, true},
    {R::WUp, TensorScope::Layer, "ffn_up.weight", {Dim::Embd, Dim::Ff2}},
    {R::WDown, TensorScope::Layer, "ffn_down.weight", {Dim::Ff, Dim::Embd}},
};
// clang-format on
// LongRoPE's factors: global, F32, one per rotated pair; llama.cpp loads them per layer as
// duplicates of one tensor.
constexpr TensorSpec kLongRopeTensors[] = {
    {R::RopeFactorsLong,
     TensorScope::Global,
     "rope_factors_long.weight",
     {Dim::RotHalf, Dim::One},
     true,
     false},
    {R::RopeFactorsShort,
     TensorScope::Global,
     "rope_factors_short.weight",
     {Dim::RotHalf, Dim::One},
     true,
     false},
};
constexpr auto kTensors = joinTensors(kLlamaGlobalTensors, kLongRopeTensors, kLayerTensors);

void readConfig(const gguf::File& file, const std::string& /*prefix*/, ModelConfig& c) {
  const bool longFactors = file.findTensor("rope_factors_long.weight") != nullptr;
  const bool shortFactors = file.findTensor("rope_factors_short.weight") != nullptr;
  if (longFactors != shortFactors) {
    // llama.cpp would pass a null factor tensor for one of the two context ranges.
    throw Error(file.displayName() + ": LongRoPE needs both rope_factors_long.weight and " +
                "rope_factors_short.weight; the file has only one");
  }
  if (longFactors) {
    if (c.hasRopeFreqs) {
      throw Error(file.displayName() + ": both rope_freqs.weight and LongRoPE factors");
    }
    c.hasRopeFreqs = true;
  }
  if (c.nExpert > 0) throw Error(file.displayName() + ": phi3 with experts is not supported");
}

LayerProgram program(const ModelConfig& c, int32_t /*layer: all alike*/) {
  const int32_t q = c.qDim(), kv = c.kvDim();
  LayerProgram p;
  p.kvDim = kv;
  const RopeParams rp = ropeOf(c, RopeStyle::Neox);
  AttendParams attention = fullAttention(c);
  attention.scale = 1.0f;  // the queries are scaled instead
  p.ops = {
      rmsNorm(Buffer::X, Buffer::Norm, R::AttnNorm, c.rmsEps),
      project(Buffer::Norm, {{R::Wqkv, Buffer::Q, 0, q},
                             {R::Wqkv, Buffer::K, q, kv},
                             {R::Wqkv, Buffer::V, q + kv, kv}}),
      rope(Buffer::Q, c.nHead, rp),
      rope(Buffer::K, c.nHeadKv, rp),
      scale(Buffer::Q, 1.0f / std::sqrt(static_cast<float>(c.headDim))),
      attend(attention),
      project(Buffer::Attn, {{R::Wo, Buffer::Tmp}}),
      keepOutputRows(),
      add(Buffer::Tmp, Buffer::X),
      rmsNorm(Buffer::X, Buffer::Norm, R::FfnNorm, c.rmsEps),
      fusedGatedFfn(Buffer::Norm, R::WUp, Activation::Silu),
      project(Buffer::Gate, {{R::WDown, Buffer::Tmp}}),
      add(Buffer::Tmp, Buffer::X),
  };
  return p;
}

}  // namespace

const Architecture& architecture_phi3() {
  static const Architecture a{kNames, readConfig, kTensors, program};
  return a;
}

}  // namespace shoal::model::arch
