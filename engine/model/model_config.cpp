#include "engine/model/model_config.h"

#include <string_view>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/architecture.h"

namespace shoal::model {
namespace {

int32_t positiveInt(const gguf::File& file, const std::string& key, int64_t limit) {
  const int64_t v = file.getInt(key);
  if (v <= 0 || v > limit) {
    throw Error(file.displayName() + ": " + key + " = " + std::to_string(v) +
                " is out of range (1.." + std::to_string(limit) + ")");
  }
  return static_cast<int32_t>(v);
}

}  // namespace

ModelConfig ModelConfig::fromGguf(const gguf::File& file) {
  ModelConfig c;
  c.architecture = file.getString("general.architecture");
  c.arch = findArchitecture(c.architecture);
  if (!c.arch) {
    std::string names;
    for (std::string_view n : supportedArchitectureNames()) {
      names += (names.empty() ? "" : ", ") + std::string(n);
    }
    throw Error(file.displayName() + ": unsupported architecture '" + c.architecture +
                "' (supported: " + names + ")");
  }
  // llama.cpp's gguf-split writes split.count into every part, each holding only its own
  // tensors; a model is one mapped file here, so a split model is refused by name.
  if (const int64_t parts = file.getIntOr("split.count", 0); parts > 1) {
    throw Error(file.displayName() + ": the model is split into " + std::to_string(parts) +
                " files, and Shoal loads single-file GGUF models only (join the parts with "
                "llama.cpp's gguf-split --merge)");
  }
  c.name = file.getStringOr("general.name", "");
  const std::string a = c.architecture + ".";

  // Generous upper bounds: they only stop absurd values from turning into huge allocations.
  c.nLayer = positiveInt(file, a + "block_count", 1024);
  c.nEmbd = positiveInt(file, a + "embedding_length", 1 << 16);
  c.nFf = positiveInt(file, a + "feed_forward_length", 1 << 18);
  c.nHead = positiveInt(file, a + "attention.head_count", 1024);
  c.nHeadKv = file.find(a + "attention.head_count_kv")
                  ? positiveInt(file, a + "attention.head_count_kv", 1024)
                  : c.nHead;
  if (c.nHead % c.nHeadKv != 0) {
    throw Error(file.displayName() + ": head_count " + std::to_string(c.nHead) +
                " is not a multiple of head_count_kv " + std::to_string(c.nHeadKv));
  }
  c.headDim = file.find(a + "attention.key_length")
                  ? positiveInt(file, a + "attention.key_length", 4096)
                  : c.nEmbd / c.nHead;
  if (!file.find(a + "attention.key_length") && c.nEmbd % c.nHead != 0) {
    throw Error(file.displayName() + ": embedding_length " + std::to_string(c.nEmbd) +
                " is not a multiple of head_count " + std::to_string(c.nHead));
  }
  if (file.find(a + "attention.value_length") &&
      file.getInt(a + "attention.value_length") != c.headDim) {
    throw Error(file.displayName() +
                ": attention.value_length differs from key_length (unsupported)");
  }
  c.nCtxTrain =
      file.find(a + "context_length") ? positiveInt(file, a + "context_length", 1 << 24) : 4096;
  c.rmsEps = static_cast<float>(file.getFloatOr(a + "attention.layer_norm_rms_epsilon", 1e-5));
  if (!(c.rmsEps > 0.0f && c.rmsEps < 1.0f)) {
    throw Error(file.displayName() + ": " + a + "attention.layer_norm_rms_epsilon out of range");
  }
  c.nRot = file.find(a + "rope.dimension_count")
               ? positiveInt(file, a + "rope.dimension_count", c.headDim)
               : c.headDim;
  if (c.nRot % 2 != 0) throw Error(file.displayName() + ": rope.dimension_count must be even");
  c.ropeFreqBase = static_cast<float>(file.getFloatOr(a + "rope.freq_base", 10000.0));
  if (!(c.ropeFreqBase > 1.0f)) throw Error(file.displayName() + ": rope.freq_base out of range");

  // llama.cpp: rope_freq_scale = 1.0f / factor in float; the type defaults to linear when a
  // factor is given without one.
  const double factor = file.getFloatOr(a + "rope.scaling.factor", 0.0);
  const std::string scaling =
      file.getStringOr(a + "rope.scaling.type", factor != 0.0 ? "linear" : "none");
  if (scaling == "linear" || scaling == "yarn") {
    if (!(factor == 0.0 || (factor >= 1.0 && factor <= 1024.0))) {
      throw Error(file.displayName() + ": rope.scaling.factor out of range");
    }
    c.ropeScaling = scaling == "yarn" ? RopeScaling::Yarn : RopeScaling::Linear;
    c.ropeFreqScale = factor == 0.0 ? 1.0f : 1.0f / static_cast<float>(factor);
  } else if (scaling != "none") {
    throw Error(file.displayName() + ": unsupported rope.scaling.type '" + scaling + "'");
  }
  c.ropeOrigCtx = file.find(a + "rope.scaling.original_context_length")
                      ? positiveInt(file, a + "rope.scaling.original_context_length", 1 << 24)
                      : c.nCtxTrain;
  c.ropeAttnFactor = static_cast<float>(file.getFloatOr(a + "rope.scaling.attn_factor", 1.0));
  if (!(c.ropeAttnFactor > 0.0f && c.ropeAttnFactor < 100.0f)) {
    throw Error(file.displayName() + ": rope.scaling.attn_factor out of range");
  }

  if (file.find(a + "vocab_size")) {
    c.nVocab = positiveInt(file, a + "vocab_size", 1 << 24);
  } else if (const auto* tokens = file.find("tokenizer.ggml.tokens"); tokens && tokens->asArray()) {
    c.nVocab = static_cast<int32_t>(tokens->asArray()->items.size());
  } else {
    const auto* embd = file.findTensor("token_embd.weight");
    if (!embd || embd->dims.size() != 2) {
      throw Error(file.displayName() + ": cannot tell the vocabulary size");
    }
    c.nVocab = static_cast<int32_t>(embd->dims[1]);
  }
  // Experts (llama.cpp reads these keys for every architecture; the tensor table decides which
  // tensors a model with experts has).
  if (file.find(a + "expert_count") && file.getInt(a + "expert_count") != 0) {
    c.nExpert = positiveInt(file, a + "expert_count", 1024);
    c.nExpertUsed = positiveInt(file, a + "expert_used_count", c.nExpert);
    c.nFfExp = file.find(a + "expert_feed_forward_length")
                   ? positiveInt(file, a + "expert_feed_forward_length", 1 << 18)
                   : c.nFf;
  }
  c.tiedOutput = file.findTensor("output.weight") == nullptr;
  c.hasRopeFreqs = file.findTensor("rope_freqs.weight") != nullptr;
  if (c.arch->readConfig) c.arch->readConfig(file, a, c);
  return c;
}

}  // namespace shoal::model
