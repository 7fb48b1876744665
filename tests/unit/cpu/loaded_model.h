#pragma once
// A GGUF model opened for a CPU stage in a test: the file, its config and its weights, bound in
// that order (ModelSource points at all three).

#include <filesystem>

#include "engine/gguf/gguf_file.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/backend.h"

namespace shoal::cpu::test {

struct Loaded {
  gguf::File file;
  model::ModelConfig config;
  model::ModelWeights weights;
  explicit Loaded(const std::filesystem::path& path)
      : file(gguf::File::open(path)),
        config(model::ModelConfig::fromGguf(file)),
        weights(model::ModelWeights::bind(file, config)) {}
  runtime::ModelSource source() { return {&file, &config, &weights}; }
};

}  // namespace shoal::cpu::test
