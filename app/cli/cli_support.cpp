#include "app/cli/cli_support.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "app/cli/commands.h"
#include "engine/error.h"
#include "engine/model/default_model.h"
#include "kernels/backend_registry.h"

namespace shoal::cli {

std::string defaultModelPath() { return model::defaultModelPath(); }

void addModelOptions(CLI::App& cmd, ModelOptions& o) {
  cmd.add_option("-m,--model", o.model, "GGUF model file (default: the default model)");
  cmd.add_option("--threads", o.threads, "CPU threads (default: physical cores)")
      ->check(CLI::Range(0, 1024));
  cmd.add_option("--backend", o.backend, "compute backend")->capture_default_str();
  cmd.add_option("--device", o.device, "device id (see shoal-cli devices)");
  cmd.add_option("--ctx", o.contextLength, "context length in tokens (default: min(model, 4096))")
      ->check(CLI::Range(0, 1 << 24));
  cmd.add_option("--gpu-layers", o.gpuLayers,
                 "layers on the GPU backend's device, the rest on the CPU (default: as many as "
                 "fit its free memory)")
      ->check(CLI::Range(0, 1 << 16));
  cmd.add_option("--gpu-memory", o.gpuMemoryMiB,
                 "the most device memory (MiB) the GPU backend may use (default: its budget)")
      ->check(CLI::Range(1, 1 << 30));
}

void addSamplerOptions(CLI::App& cmd, runtime::SamplerParams& p, CLI::Option** seedOption) {
  cmd.add_option("--temp", p.temperature, "temperature; 0 = greedy")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 100.0f));
  cmd.add_option("--top-k", p.topK, "top-k; 0 = off")->capture_default_str();
  cmd.add_option("--top-p", p.topP, "top-p; 1 = off")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f));
  cmd.add_option("--min-p", p.minP, "min-p; 0 = off")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f));
  cmd.add_option("--repeat-penalty", p.repeatPenalty, "repetition penalty; 1 = off")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 10.0f));
  cmd.add_option("--repeat-last-n", p.repeatLastN, "tokens the penalty looks back on")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  CLI::Option* seed = cmd.add_option("--seed", p.seed, "random seed (default: random)");
  if (seedOption) *seedOption = seed;
  p.seed = std::random_device{}();
}

namespace {

// Layers of the model the GPU backend's device takes: --gpu-layers, or as many as its free memory
// holds (all when the whole model fits; a stage needs its embedding and its layers' weights, KV
// cache and activations: Backend::stageDeviceBytes). A split is said on stderr. CliExit{1} when
// the device cannot hold even the embedding and one layer. A CPU backend takes every layer.
int32_t deviceLayers(runtime::Backend& backend, const std::string& device,
                     const runtime::ModelSource& src, const runtime::StageSpec& full,
                     int requested) {
  const int32_t layers = full.lastLayer;
  const uint64_t need = backend.stageDeviceBytes(src, full);
  if (need == 0) {
    if (requested >= 0 && requested != layers) {
      throw CliExit{2, "--gpu-layers needs a GPU backend (--backend vulkan or cuda)"};
    }
    return layers;
  }
  auto mib = [](uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; };
  const uint64_t free = backend.freeDeviceBytes(device);
  int32_t fit = std::min<int32_t>(requested, layers);
  if (requested < 0) {
    if (need <= free) return layers;
    runtime::StageSpec part = full;
    part.hasHead = false;
    for (fit = layers - 1; fit > 0; --fit) {
      part.lastLayer = fit;
      if (backend.stageDeviceBytes(src, part) <= free) break;
    }
    if (fit == 0) {
      part.lastLayer = 1;
      throw CliExit{1, device + " has " + mib(free) + " free, less than the embedding and one " +
                           "layer need (" + mib(backend.stageDeviceBytes(src, part)) +
                           "); run on the CPU (--backend cpu)"};
    }
  }
  if (fit == 0) {
    std::fprintf(stderr, "note: %s takes no layer, the CPU runs the model\n", device.c_str());
  } else if (fit < layers) {
    std::fprintf(stderr, "note: %s takes layers 0-%d of %d, the CPU the rest%s\n", device.c_str(),
                 fit - 1, layers,
                 requested < 0 ? (" (the model needs " + mib(need) + ", the device has " +
                                  mib(free) + " free)")
                                     .c_str()
                               : "");
  }
  return fit;
}

}  // namespace

LoadedModel loadModel(const ModelOptions& o, bool withChain) {
  LoadedModel lm;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = o.model.empty() ? defaultModelPath() : o.model;
  std::error_code ec;
  if (o.model.empty() && std::getenv("SHOAL_MODEL") == nullptr &&
      !std::filesystem::exists(path, ec)) {
    // A first run: say where it looked and how to get a model, not just "cannot open".
    throw CliExit{2, "no model: the default model is not installed (expected at " + path +
                         "); fetch it with shoal-fetch-default-model, find another with "
                         "`shoal-cli models search`, or pass -m FILE"};
  }
  try {
    lm.model = model::Model::load(path);
  } catch (const Error& e) {
    throw CliExit{2, e.what()};
  }
  if (!withChain) return lm;

  kernels::BackendOptions bo;
  bo.cpuThreads = o.threads;
  bo.gpuMemoryLimit = uint64_t(o.gpuMemoryMiB) << 20;
  try {
    lm.backend = kernels::createBackend(o.backend, bo);
  } catch (const Error& e) {
    throw CliExit{2, e.what()};
  }
  const runtime::Availability a = lm.backend->availability();
  if (!a.available) throw CliExit{1, o.backend + " backend unavailable: " + a.reason};
  const auto devices = lm.backend->devices();
  const std::string device = o.device.empty() ? devices.front().id : o.device;

  const model::ModelConfig& c = lm.model->config();
  runtime::StageSpec spec;
  spec.firstLayer = 0;
  spec.lastLayer = c.nLayer;
  spec.hasEmbedding = spec.hasHead = true;
  spec.contextLength = o.contextLength > 0 ? o.contextLength : std::min(c.nCtxTrain, 4096);
  runtime::ModelSource src{&lm.model->file(), &lm.model->config(), &lm.model->weights()};
  const int32_t onDevice = deviceLayers(*lm.backend, device, src, spec, o.gpuLayers);
  std::vector<std::unique_ptr<runtime::Stage>> stages;
  try {
    if (onDevice == c.nLayer) {
      stages.push_back(lm.backend->createStage(device, src, spec));
    } else {
      // The first layers (and the embedding) on the device, the rest and the head on the CPU.
      lm.cpu = kernels::createBackend("cpu", bo);
      runtime::StageSpec gpu = spec, cpu = spec;
      gpu.lastLayer = cpu.firstLayer = onDevice;
      gpu.hasHead = false;
      cpu.hasEmbedding = false;
      if (onDevice > 0) stages.push_back(lm.backend->createStage(device, src, gpu));
      stages.push_back(
          lm.cpu->createStage(lm.cpu->devices().front().id, src, onDevice > 0 ? cpu : spec));
    }
  } catch (const Error& e) {
    throw CliExit{1, e.what()};
  }
  lm.chain = std::make_unique<runtime::Chain>(std::move(stages));
  lm.loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return lm;
}

uint64_t peakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;
}

HugePageBytes hugePageBytes() {
  HugePageBytes h;
  std::ifstream rollup("/proc/self/smaps_rollup");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (rollup >> key) {
    if (key == "AnonHugePages:" && rollup >> kib >> unit) h.anonymous = kib * 1024;
    if (key == "FilePmdMapped:" && rollup >> kib >> unit) h.filePmdMapped = kib * 1024;
  }
  return h;
}

std::vector<model::TokenId> CompletionOptions::encodePrompt(
    const model::Tokenizer& tokenizer) const {
  auto tokens = tokenizer.encode(prompt, true, true);
  if (tokens.empty()) throw CliExit{2, "the prompt is empty"};
  return tokens;
}

runtime::GenerateOptions CompletionOptions::generateOptions() const {
  runtime::GenerateOptions g;
  g.maxTokens = maxTokens;
  g.sampler = sampler;
  g.stop = stop;
  g.ignoreEndOfGeneration = ignoreEos;
  return g;
}

void addCompletionOptions(CLI::App& cmd, CompletionOptions& o) {
  cmd.add_option("-p,--prompt", o.prompt, "prompt text")->required();
  cmd.add_option("-n,--n-predict", o.maxTokens, "tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  addSamplerOptions(cmd, o.sampler, nullptr);
  cmd.add_option("--stop", o.stop, "stop string (repeatable)");
  cmd.add_flag("--ignore-eos", o.ignoreEos, "keep generating past end-of-generation tokens");
}

}  // namespace shoal::cli
