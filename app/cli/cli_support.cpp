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
#include "engine/runtime/draft_model_choice.h"
#include "engine/runtime/local_chain.h"
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
  // The device asked for, or the backend's best and its other GPUs of that kind (a model that
  // does not fit the first spreads over them, then the CPU).
  const std::vector<std::string> devices = runtime::chainDevices(*lm.backend, o.device);

  const model::ModelConfig& c = lm.model->config();
  runtime::StageSpec spec;
  spec.firstLayer = 0;
  spec.lastLayer = c.nLayer;
  spec.hasEmbedding = spec.hasHead = true;
  spec.contextLength = o.contextLength > 0 ? o.contextLength : std::min(c.nCtxTrain, 4096);
  spec.maxSequences = std::max(o.sequences, 1);
  runtime::ModelSource src{&lm.model->file(), &lm.model->config(), &lm.model->weights()};
  if (o.gpuLayers >= 0 && lm.backend->stageDeviceBytes(src, spec) == 0) {
    throw CliExit{2, "--gpu-layers needs a GPU backend that reports its memory (--backend vulkan)"};
  }
  try {
    const runtime::LocalSplit split =
        runtime::planLocalSplit(*lm.backend, devices, src, spec, o.gpuLayers);
    if (const std::string line = split.describe(c.nLayer); !line.empty()) {
      std::fprintf(stderr, "note: %s\n", line.c_str());
    }
    if (split.needsCpu()) lm.cpu = kernels::createBackend("cpu", bo);
    lm.chain = runtime::buildLocalChain(*lm.backend, lm.cpu.get(), src, spec, split);
  } catch (const Error& e) {
    throw CliExit{1, e.what()};
  }
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
  g.lookup.maxDraft = draftMax;
  return g;
}

void addDraftOption(CLI::App& cmd, int& draftMax) {
  cmd.add_option("--draft-max", draftMax,
                 "most tokens drafted per step by prompt lookup (speculative decoding of greedy "
                 "replies; the text is unchanged); 0 = off")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
}

void addDraftModelOption(CLI::App& cmd, std::string& choice, const std::string& defaultChoice) {
  choice = defaultChoice;
  cmd.add_option("--draft-model", choice,
                 "a small model with the same vocabulary that drafts tokens for speculative "
                 "decoding on this machine (a GGUF path; auto: the largest one at most 1/8 of the "
                 "model's size next to it or in the model folders; none)")
      ->capture_default_str();
}

std::unique_ptr<DraftModel> loadDraftModel(const std::string& choice,
                                           const std::filesystem::path& targetPath,
                                           const model::Tokenizer& target, int threads,
                                           bool verbose, int sequences, int contextLength) {
  const std::filesystem::path path = runtime::chooseDraftModel(choice, targetPath, target);
  if (path.empty()) {
    if (verbose && choice == "auto") std::fprintf(stderr, "[draft model: none found for auto]\n");
    return nullptr;
  }
  ModelOptions mo;
  mo.model = path.string();
  mo.threads = threads;
  mo.sequences = sequences;
  mo.contextLength = contextLength;
  auto d = std::make_unique<DraftModel>();
  d->loaded = loadModel(mo);
  const std::string why = runtime::draftVocabularyMismatch(target, d->loaded.model->tokenizer());
  if (!why.empty()) {
    throw CliExit{2, "draft model " + path.string() + " cannot draft for this model: " + why};
  }
  d->drafter = std::make_unique<runtime::ModelDrafter>(*d->loaded.chain);
  if (verbose) std::fprintf(stderr, "[draft model %s]\n", path.string().c_str());
  return d;
}

void addCompletionOptions(CLI::App& cmd, CompletionOptions& o) {
  cmd.add_option("-p,--prompt", o.prompt, "prompt text")->required();
  cmd.add_option("-n,--n-predict", o.maxTokens, "tokens to generate")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  addSamplerOptions(cmd, o.sampler, nullptr);
  cmd.add_option("--stop", o.stop, "stop string (repeatable)");
  cmd.add_flag("--ignore-eos", o.ignoreEos, "keep generating past end-of-generation tokens");
  addDraftOption(cmd, o.draftMax);
}

}  // namespace shoal::cli
