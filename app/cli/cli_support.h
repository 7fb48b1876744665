#pragma once
// Options and model loading shared by the shoal-cli commands that run a model.

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/sampler.h"

namespace shoal::cli {

struct ModelOptions {
  std::string model;            // -m; empty: the default model
  int threads = 0;              // --threads; 0: physical cores
  std::string backend = "cpu";  // --backend
  std::string device;           // --device; empty: the backend's first device
  int contextLength = 0;        // --ctx; 0: min(model's training context, 4096)
};

// -m/--model, --threads, --backend, --device, --ctx.
void addModelOptions(CLI::App& cmd, ModelOptions& options);

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, --seed.
// A seed that is not given is drawn at random (and printed with --verbose).
void addSamplerOptions(CLI::App& cmd, runtime::SamplerParams& params, CLI::Option** seedOption);

struct LoadedModel {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<runtime::Backend> backend;
  std::unique_ptr<runtime::Chain> chain;
  double loadSeconds = 0;
};

// Loads the model (CliExit{2} for a bad file) and builds a one-stage chain on the device.
LoadedModel loadModel(const ModelOptions& options, bool withChain = true);

// Peak resident set size of this process, in bytes.
uint64_t peakRssBytes();

}  // namespace shoal::cli
