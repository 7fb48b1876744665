// shoal-synth-model: write a GGUF model of a registered architecture with random weights.
//
//   shoal-synth-model --layers 16 --embd 2048 --heads 32 --kv-heads 8 --ff 8192
//       --vocab-from models/SmolLM2-135M-Instruct.Q4_1.gguf --type q4_0 --out /tmp/1b.gguf
//   shoal-synth-model --truncate-from models/SmolLM2-135M-Instruct.Q4_1.gguf --layers 8
//       --out /tmp/smollm2-first8.gguf      (a real model's first layers; see truncated_model.h)
//
// Exit status: 0 written, 1 the model could not be written, 2 bad command line.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/tensor_type.h"
#include "engine/model/synthetic_model.h"
#include "engine/model/truncated_model.h"

namespace {

// Parses a type name for a CLI11 option; returns an error message or "".
std::string parseType(const std::string& text, shoal::gguf::TensorType& out) {
  const auto t = shoal::gguf::typeFromName(text);
  if (!t || !shoal::gguf::quantizable(*t)) {
    return "unknown or unwritable tensor type '" + text +
           "' (f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K)";
  }
  out = *t;
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  shoal::model::SyntheticModelSpec spec;
  std::string out;
  std::string type = "q8_0";
  std::string embedType;
  std::string truncateFrom;
  std::vector<std::string> typeOf;
  CLI::App app{"Write a GGUF model (llama, qwen2, qwen3, ...) with deterministic random weights."};
  app.add_option("--arch", spec.architecture, "architecture (its tensor table decides the tensors)")
      ->capture_default_str();
  app.add_option("--layers", spec.nLayer, "transformer blocks")->capture_default_str();
  app.add_option("--embd", spec.nEmbd, "embedding length")->capture_default_str();
  app.add_option("--heads", spec.nHead, "attention heads")->capture_default_str();
  app.add_option("--kv-heads", spec.nHeadKv, "key/value heads (GQA)")->capture_default_str();
  app.add_option("--ff", spec.nFf, "feed-forward length")->capture_default_str();
  app.add_option("--experts", spec.nExpert, "experts per layer (0: a dense FFN)")
      ->capture_default_str();
  app.add_option("--experts-used", spec.nExpertUsed, "experts each token is routed to (top-k)")
      ->capture_default_str();
  app.add_option("--ff-expert", spec.nFfExp,
                 "one expert's FFN width (0: no key; llama uses --ff, qwen3moe --ff / top-k)")
      ->capture_default_str();
  app.add_option("--vocab", spec.nVocab,
                 "vocabulary size (0: from --vocab-from; generated vocab needs >= 259)")
      ->capture_default_str();
  app.add_option("--ctx", spec.nCtx, "context length")->capture_default_str();
  app.add_option("--type", type, "type of the attention/FFN matrices")->capture_default_str();
  app.add_option("--embed-type", embedType, "type of token_embd/output (default: --type)");
  app.add_option(
      "--type-of", typeOf,
      "KIND=TYPE: another type for one kind of matrix (token_embd output attn_q attn_k "
      "attn_v attn_output ffn_gate ffn_up ffn_down ffn_gate_exps ffn_up_exps ffn_down_exps), "
      "repeatable; e.g. a Q4_K_M-style mix: "
      "--type q4_K --type-of attn_v=q6_K --type-of ffn_down=q6_K");
  app.add_option("--vocab-from", spec.vocabFrom, "GGUF file to copy tokenizer.* metadata from")
      ->check(CLI::ExistingFile);
  app.add_option("--seed", spec.seed, "random seed")->capture_default_str();
  app.add_option("--rope-base", spec.ropeFreqBase, "RoPE frequency base")->capture_default_str();
  app.add_option("--sliding-window", spec.slidingWindow, "attention.sliding_window (0: no key)")
      ->capture_default_str();
  app.add_option("--sliding-window-pattern", spec.slidingWindowPattern,
                 "attention.sliding_window_pattern (0: no key)")
      ->capture_default_str();
  app.add_option("--attn-softcap", spec.attnLogitSoftcap, "attn_logit_softcapping (0: no key)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--final-softcap", spec.finalLogitSoftcap, "final_logit_softcapping (0: no key)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rope-scaling", spec.ropeScaling, "RoPE scaling: linear or yarn (default none)")
      ->check(CLI::IsMember({"linear", "yarn"}));
  app.add_option("--rope-scale", spec.ropeScalingFactor, "RoPE scaling factor")
      ->capture_default_str();
  app.add_option("--rope-orig-ctx", spec.ropeOrigCtx,
                 "YaRN's original context length (0: no key, the context length)")
      ->capture_default_str();
  app.add_option("--rope-attn-factor", spec.ropeAttnFactor, "rope.scaling.attn_factor (0: no key)")
      ->capture_default_str();
  app.add_flag("--long-rope", spec.longRope,
               "write LongRoPE's rope_factors_long/short tensors (phi3)");
  app.add_option("--rms-eps", spec.rmsEps, "RMSNorm epsilon")->capture_default_str();
  app.add_option("--name", spec.name, "general.name")->capture_default_str();
  app.add_flag("--tied", spec.tiedOutput, "no output.weight (reuse token_embd)");
  app.add_option("--out", out, "output file")->required();
  auto* truncate =
      app.add_option("--truncate-from", truncateFrom,
                     "write the first --layers blocks of this real GGUF model instead (all its "
                     "metadata and non-layer tensors copied)")
          ->check(CLI::ExistingFile);
  for (const char* shapeOption : {"--arch",
                                  "--embd",
                                  "--heads",
                                  "--kv-heads",
                                  "--ff",
                                  "--experts",
                                  "--experts-used",
                                  "--ff-expert",
                                  "--vocab",
                                  "--ctx",
                                  "--type",
                                  "--embed-type",
                                  "--vocab-from",
                                  "--seed",
                                  "--rope-base",
                                  "--rope-scaling",
                                  "--rope-scale",
                                  "--rope-orig-ctx",
                                  "--rms-eps",
                                  "--name",
                                  "--tied",
                                  "--type-of",
                                  "--rope-attn-factor",
                                  "--long-rope"}) {
    truncate->excludes(shapeOption);
  }
  try {
    app.parse(argc, argv);
    if (std::string err = parseType(type, spec.weightType); !err.empty()) {
      throw CLI::ValidationError("--type", err);
    }
    for (const std::string& item : typeOf) {
      const size_t eq = item.find('=');
      const std::string kind = item.substr(0, eq);
      std::string kindList;
      bool known = false;
      for (std::string_view k : shoal::model::syntheticTensorKinds()) {
        known = known || kind == k;
        kindList += (kindList.empty() ? "" : " ") + std::string(k);
      }
      if (eq == std::string::npos || !known) {
        throw CLI::ValidationError("--type-of", "expected KIND=TYPE with KIND one of " + kindList +
                                                    ", got '" + item + "'");
      }
      shoal::gguf::TensorType t{};
      if (std::string err = parseType(item.substr(eq + 1), t); !err.empty()) {
        throw CLI::ValidationError("--type-of", err);
      }
      spec.typeOverrides[kind] = t;
    }
    if (embedType.empty()) embedType = type;
    if (std::string err = parseType(embedType, spec.embedType); !err.empty()) {
      throw CLI::ValidationError("--embed-type", err);
    }
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "shoal-synth-model: %s\n", e.what());
    return 2;
  }
  try {
    if (!truncateFrom.empty()) {
      shoal::model::writeTruncatedModel(truncateFrom, spec.nLayer, out);
    } else {
      shoal::model::writeSyntheticModel(spec, out);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shoal-synth-model: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
