#pragma once
// The layer-program ops the GPU backends (Vulkan, CUDA) have no kernels for yet, named for the
// refusal a stage gives before it uploads anything: the CPU backend runs them. Header-only: the
// CUDA plugin does not link the engine.

#include "engine/model/layer_program.h"

namespace shoal::kernels {

// What `op` needs that the GPU backends lack ("a mixture of experts", ...), or nullptr.
inline const char* gpuOpGap(const model::Op& op) {
  if (op.kind == model::OpKind::MoeFfn) return "a mixture of experts";
  if (op.kind == model::OpKind::Scale) return "a Scale op";
  if (op.kind == model::OpKind::Attend && op.attend.sinks) return "attention sinks";
  if (op.kind == model::OpKind::Attend && op.attend.softcap > 0) {
    return "attention logit soft-capping";
  }
  if (op.kind == model::OpKind::GatedFfn && op.activation != model::Activation::Silu) {
    return "a GeGLU FFN";
  }
  if (op.kind == model::OpKind::GatedFfn && op.fusedGateUp) return "a fused gate/up FFN";
  if (op.kind == model::OpKind::Project) {
    for (uint8_t i = 0; i < op.outCount; ++i) {
      if (op.outs[i].firstRow != 0 || op.outs[i].rows != 0) return "a fused Q/K/V projection";
    }
  }
  return nullptr;
}

// What a stage holding the model's head needs that the GPU backends lack, or nullptr.
inline const char* gpuHeadGap(const model::ModelConfig& c) {
  return c.finalLogitSoftcap > 0 ? "final logit soft-capping" : nullptr;
}

}  // namespace shoal::kernels
