#pragma once
// An architecture, as data: the hyper-parameters it reads beyond the common ones, its tensor
// table and its layer program. One file per architecture under engine/model/arch/ defines one
// Architecture; CMake lists the directory into the registry (arch_registry.cpp.in), so adding an
// architecture touches that one file (plus tests) and no backend when its ops exist.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "engine/model/layer_program.h"
#include "engine/model/tensor_table.h"

namespace shoal::gguf {
class File;
}

namespace shoal::model {

struct ModelConfig;

struct Architecture {
  // general.architecture values this entry serves ("llama", "mistral").
  std::span<const std::string_view> names;
  // Reads what this architecture adds to the common keys (ModelConfig::fromGguf has read those
  // already; `prefix` is "<arch>."). Throws shoal::Error naming the key. May be empty.
  void (*readConfig)(const gguf::File& file, const std::string& prefix, ModelConfig& config);
  // Every tensor, in the order backends upload them.
  std::span<const TensorSpec> tensors;
  // The program of layer `layer` (0-based) of a model with this config.
  LayerProgram (*layerProgram)(const ModelConfig& config, int32_t layer);
};

// The table entry of `role` in an architecture's tensor table, or nullptr. Inline: the CUDA
// plugin uses it without linking the engine.
inline const TensorSpec* findTensorSpec(const Architecture& arch, TensorRole role) {
  for (const TensorSpec& t : arch.tensors) {
    if (t.role == role) return &t;
  }
  return nullptr;
}

// The architecture serving general.architecture = name, or nullptr.
const Architecture* findArchitecture(std::string_view name);
// Every registered architecture's names, for error messages ("llama, mistral, qwen2").
std::vector<std::string_view> supportedArchitectureNames();

// The architecture of a config (config.arch set by fromGguf; throws if none, which cannot
// happen for a config fromGguf produced).
const Architecture& architectureOf(const ModelConfig& config);

}  // namespace shoal::model
