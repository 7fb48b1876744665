#pragma once
// The layer-program features a GPU backend (Vulkan, CUDA) may lack kernels for, named for the
// refusal a stage gives before it uploads anything: the CPU backend runs them. Each backend
// says which it has (GpuOpSupport); the rest are refused by name. (Sliding windows depend on
// the stage's context length: each backend checks those itself.) Header-only: the CUDA plugin
// does not link the engine.

#include "engine/model/layer_program.h"
#include "engine/model/model_config.h"

namespace shoal::kernels {

// What a GPU backend's kernels cover beyond the llama/qwen ops every backend runs.
struct GpuOpSupport {
  bool moe = false;        // MoeFfn (routed experts)
  bool moeBiases = false;  // MoeFfn with router and expert biases (gpt-oss)
  bool scale = false;      // Scale (gemma's embedding scale, phi3's query scale)
  bool sinks = false;      // Attend with attention sinks (gpt-oss)
  bool softcap = false;    // Attend and head soft-capping (gemma2)
  bool geglu = false;      // GatedFfn with the tanh GELU (gemma)
  bool swigluOai = false;  // GatedFfn with gpt-oss's clamped SwiGLU
  bool rowRanges = false;  // row ranges of one matrix (phi3's fused QKV and gate/up)
};

// Every feature above: what a backend with kernels for all of them declares.
inline constexpr GpuOpSupport kEveryGpuOp{.moe = true,
                                          .moeBiases = true,
                                          .scale = true,
                                          .sinks = true,
                                          .softcap = true,
                                          .geglu = true,
                                          .swigluOai = true,
                                          .rowRanges = true};

// What `op` needs that a backend with `has` lacks ("a mixture of experts", ...), or nullptr.
inline const char* gpuOpGap(const model::Op& op, const GpuOpSupport& has) {
  if (op.kind == model::OpKind::MoeFfn) {
    if (!has.moe) return "a mixture of experts";
    if (op.moe.biases && !has.moeBiases) return "a mixture of experts with biases";
  }
  // The activation of a dense or an expert FFN.
  if (op.kind == model::OpKind::GatedFfn || op.kind == model::OpKind::MoeFfn) {
    if (op.activation == model::Activation::GeluTanh && !has.geglu) return "a GeGLU FFN";
    if (op.activation == model::Activation::SwigluOai && !has.swigluOai) {
      return "a clamped SwiGLU FFN";
    }
  }
  if (op.kind == model::OpKind::GatedFfn && op.fusedGateUp && !has.rowRanges) {
    return "a fused gate/up FFN";
  }
  if (op.kind == model::OpKind::Scale && !has.scale) return "a Scale op";
  if (op.kind == model::OpKind::Attend) {
    if (op.attend.sinks && !has.sinks) return "attention sinks";
    if (op.attend.softcap > 0 && !has.softcap) return "attention logit soft-capping";
  }
  if (op.kind == model::OpKind::Project && !has.rowRanges) {
    for (uint8_t i = 0; i < op.outCount; ++i) {
      if (op.outs[i].firstRow != 0 || op.outs[i].rows != 0) return "a fused Q/K/V projection";
    }
  }
  return nullptr;
}

// What a stage holding the model's head needs that a backend with `has` lacks, or nullptr.
inline const char* gpuHeadGap(const model::ModelConfig& c, const GpuOpSupport& has) {
  return c.finalLogitSoftcap > 0 && !has.softcap ? "final logit soft-capping" : nullptr;
}

}  // namespace shoal::kernels
