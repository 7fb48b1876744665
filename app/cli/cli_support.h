#pragma once
// Options and model loading shared by the shoal-cli commands that run a model.

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/model_drafter.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/session.h"

namespace shoal::cli {

struct ModelOptions {
  std::string model;            // -m; empty: the default model
  int threads = 0;              // --threads; 0: physical cores
  std::string backend = "cpu";  // --backend
  std::string device;           // --device; empty: the backend's first device
  int contextLength = 0;        // --ctx; 0: min(model's training context, 4096)
  // --gpu-layers: layers on a GPU backend's device, the rest (and the head) on the CPU; -1: as
  // many as fit its free memory (all when the model fits).
  int gpuLayers = -1;
  int gpuMemoryMiB = 0;  // --gpu-memory: the most a GPU backend may take per device; 0: its budget
  int sequences = 1;     // KV slots of the chain (not an option: a draft model for N replies)
};

// -m/--model, --threads, --backend, --device, --ctx, --gpu-layers, --gpu-memory.
void addModelOptions(CLI::App& cmd, ModelOptions& options);

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, --seed.
// A seed that is not given is drawn at random (and printed with --verbose).
void addSamplerOptions(CLI::App& cmd, runtime::SamplerParams& params, CLI::Option** seedOption);

// A plain completion request (generate, pool generate): the prompt and how to continue it.
struct CompletionOptions {
  std::string prompt;   // -p
  int maxTokens = 128;  // -n
  runtime::SamplerParams sampler;
  std::vector<std::string> stop;  // --stop, repeatable
  bool ignoreEos = false;         // --ignore-eos
  int draftMax = 8;               // --draft-max: prompt-lookup speculation (greedy only), 0 off

  // The prompt's tokens (BOS and special tokens parsed); CliExit{2} when it is empty.
  std::vector<model::TokenId> encodePrompt(const model::Tokenizer& tokenizer) const;
  runtime::GenerateOptions generateOptions() const;
};

// -p/--prompt (required), -n/--n-predict, the sampler options, --stop, --ignore-eos,
// --draft-max.
void addCompletionOptions(CLI::App& cmd, CompletionOptions& options);
// --draft-max N: speculative decoding by prompt lookup (runtime::PromptLookupParams::maxDraft).
void addDraftOption(CLI::App& cmd, int& draftMax);

struct LoadedModel {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<runtime::Backend> backend;
  std::unique_ptr<runtime::Backend> cpu;  // the CPU's part of a GPU/CPU split, else null
  std::unique_ptr<runtime::Chain> chain;
  double loadSeconds = 0;
};

// Loads the model (CliExit{2} for a bad file) and builds its chain: one stage on the device, or
// on a GPU backend whose device lacks the memory (or with --gpu-layers) the first layers there
// and the rest on the CPU, said on stderr.
LoadedModel loadModel(const ModelOptions& options, bool withChain = true);

// A draft model for speculative decoding (runtime::ModelDrafter) and what it runs on.
struct DraftModel {
  LoadedModel loaded;
  std::unique_ptr<runtime::ModelDrafter> drafter;
};

// --draft-model CHOICE for a target model at `targetPath` with tokenizer `target`: a GGUF path;
// "auto", the largest model with the target's vocabulary and at most an eighth of its file size
// found next to it or in the default model folders; or "none". nullptr for none (and for auto
// without a candidate); CliExit{2} for a file that cannot be read or cannot draft for the
// target. The draft model runs on this machine's CPU with `threads` threads, holding `sequences`
// histories of `contextLength` tokens (0: its default context) — one per reply drafted for at
// once.
std::unique_ptr<DraftModel> loadDraftModel(const std::string& choice,
                                           const std::filesystem::path& targetPath,
                                           const model::Tokenizer& target, int threads,
                                           bool verbose, int sequences = 1, int contextLength = 0);
// --draft-model PATH|auto|none.
void addDraftModelOption(CLI::App& cmd, std::string& choice, const std::string& defaultChoice);

// Peak resident set size of this process, in bytes.
uint64_t peakRssBytes();

// How much of this process's memory the kernel maps with huge pages now, in bytes
// (/proc/self/smaps_rollup; zeros where it cannot be read): anonymous memory (the CPU backend's
// weight copy, kernels/cpu/weight_arena.h) and file pages mapped by PMDs (a model's mapping).
struct HugePageBytes {
  uint64_t anonymous = 0;
  uint64_t filePmdMapped = 0;
};
HugePageBytes hugePageBytes();

}  // namespace shoal::cli
