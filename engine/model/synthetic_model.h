#pragma once
// Writes GGUF models with random weights in the layout of a registered architecture (its tensor
// table: names and shapes as llama.cpp loads them; `<arch>.*` metadata), for tests and benchmarks
// at any size:
// a 1B..8B-shaped model is streamed to disk row by row, never held in memory.
//
// Weights are deterministic functions of (seed, tensor name, row): the same spec always gives
// the same bytes, whatever the chunking or thread count. Matrices are normal with std
// `weightStd` (0.02), norm weights are 1 + N(0, 0.02), so activations stay in a sane range.

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf/tensor_type.h"

namespace shoal::model {

struct SyntheticModelSpec {
  std::string architecture = "llama";  // any registered architecture (llama, qwen2, qwen3, ...)
  std::string name = "shoal-synthetic";
  int nLayer = 2;
  int nEmbd = 256;
  int nHead = 4;
  int nHeadKv = 4;
  int nFf = 512;
  // Mixture of experts (0 experts: a dense model). nFfExp 0: written as no key, so the
  // architecture's default width applies (llama: nFf; qwen3moe: nFf / nExpertUsed).
  int nExpert = 0;
  int nExpertUsed = 0;
  int nFfExp = 0;
  // Vocabulary size. 0 with vocabFrom: take it from the copied tokenizer. Without vocabFrom a
  // SentencePiece-style vocabulary (<unk>, <s>, </s>, 256 byte tokens, fillers) of this size is
  // generated, so it must be at least 259.
  int nVocab = 0;
  int nCtx = 2048;
  float ropeFreqBase = 10000.f;
  // rope.scaling.*: type "" writes no scaling keys; "linear" or "yarn" with this factor (and,
  // for yarn, original_context_length when ropeOrigCtx > 0).
  std::string ropeScaling;
  // attention.sliding_window / sliding_window_pattern (0: no key).
  int slidingWindow = 0;
  int slidingWindowPattern = 0;
  // attn_logit_softcapping / final_logit_softcapping (0: no key).
  float attnLogitSoftcap = 0.f;
  float finalLogitSoftcap = 0.f;
  float ropeScalingFactor = 1.f;
  int ropeOrigCtx = 0;  // written whenever > 0
  // rope.scaling.attn_factor (0: no key).
  float ropeAttnFactor = 0.f;
  // LongRoPE (phi3): write rope_factors_long/short.weight, the long ones rising from 1 to about
  // 64 over the rotated pairs and the short ones from 1 to about 1.5, as in Phi-3's configs.
  bool longRope = false;
  float rmsEps = 1e-5f;
  bool tiedOutput = false;  // no output.weight: llama.cpp reuses token_embd.weight
  gguf::TensorType weightType = gguf::TensorType::Q8_0;  // attention and FFN matrices
  gguf::TensorType embedType = gguf::TensorType::Q8_0;   // token_embd and output
  // Per-kind overrides, keyed by the tensor kind: "token_embd", "output", "attn_q", "attn_k",
  // "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_exps", "ffn_up_exps",
  // "ffn_down_exps". Norms, biases and routers (ffn_gate_inp) are always F32.
  std::map<std::string, gguf::TensorType> typeOverrides;
  uint64_t seed = 1;
  float weightStd = 0.02f;
  // A GGUF file whose tokenizer.* metadata (tokens, merges, types, pre, model, bos/eos...) is
  // copied, so llama.cpp and Shoal's tokenizer can load the result. Empty: generated vocabulary.
  std::string vocabFrom;
  // A Jinja chat template to write as tokenizer.chat_template (replacing a copied one), so a
  // test can give a model another chat format. Empty: the copied one, or none.
  std::string chatTemplate;
};

// The tensor kinds typeOverrides takes, in table order.
std::span<const std::string_view> syntheticTensorKinds();

// One tensor of the model, as written.
struct SyntheticTensor {
  std::string name;
  std::string kind;  // "attn_q", "attn_norm", ... (the typeOverrides key)
  gguf::TensorType type;
  std::vector<int64_t> dims;  // ggml order
};

// The tensors a spec produces, in file order. Throws shoal::Error for an invalid spec (naming
// the field), e.g. a row length that is not a multiple of the chosen type's block size.
std::vector<SyntheticTensor> syntheticTensors(const SyntheticModelSpec& spec);

// The f32 values of row `row` of tensor `name` before quantization (n = dims[0] values).
void syntheticRow(const SyntheticModelSpec& spec, const std::string& name, int64_t row, float* dst,
                  int64_t n);

// Write the model to `path` (through a temporary file and a rename). Throws shoal::Error.
void writeSyntheticModel(const SyntheticModelSpec& spec, const std::filesystem::path& path);

}  // namespace shoal::model
