#include "engine/model/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/architecture.h"
#include "engine/model/model_config.h"

namespace shoal::model {

namespace {

using gguf::TensorType;
using gguf::Value;
using gguf::ValueType;

// The byte tokens, <unk>, <s> and </s> of the generated vocabulary.
constexpr int kMinGeneratedVocab = 259;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t hashName(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

[[noreturn]] void badSpec(const std::string& what) { throw Error("synthetic model: " + what); }

int resolveVocabSize(const SyntheticModelSpec& spec) {
  if (spec.vocabFrom.empty()) {
    if (spec.nVocab < kMinGeneratedVocab) {
      badSpec("nVocab " + std::to_string(spec.nVocab) + " is below " +
              std::to_string(kMinGeneratedVocab) +
              " (the generated vocabulary needs <unk>, <s>, </s> and 256 byte tokens)");
    }
    return spec.nVocab;
  }
  const gguf::File f = gguf::File::open(spec.vocabFrom);
  const gguf::Value* tokens = f.find("tokenizer.ggml.tokens");
  const gguf::Array* a = tokens ? tokens->asArray() : nullptr;
  if (!a) badSpec(spec.vocabFrom + " has no tokenizer.ggml.tokens array");
  const int n = static_cast<int>(a->items.size());
  if (spec.nVocab != 0 && spec.nVocab != n) {
    badSpec("nVocab " + std::to_string(spec.nVocab) + " differs from the " + std::to_string(n) +
            " tokens of " + spec.vocabFrom + " (use 0 to take it from the file)");
  }
  return n;
}

void validate(const SyntheticModelSpec& spec) {
  if (!findArchitecture(spec.architecture)) {
    badSpec("architecture \"" + spec.architecture + "\" is not supported");
  }
  auto positive = [](int v, const char* field) {
    if (v <= 0) badSpec(std::string(field) + " must be positive (got " + std::to_string(v) + ")");
  };
  positive(spec.nLayer, "nLayer");
  positive(spec.nEmbd, "nEmbd");
  positive(spec.nHead, "nHead");
  positive(spec.nHeadKv, "nHeadKv");
  positive(spec.nFf, "nFf");
  positive(spec.nCtx, "nCtx");
  if (spec.nEmbd % spec.nHead != 0) {
    badSpec("nEmbd " + std::to_string(spec.nEmbd) + " is not a multiple of nHead " +
            std::to_string(spec.nHead));
  }
  if (spec.nHead % spec.nHeadKv != 0) {
    badSpec("nHead " + std::to_string(spec.nHead) + " is not a multiple of nHeadKv " +
            std::to_string(spec.nHeadKv));
  }
  if (!spec.ropeScaling.empty() && spec.ropeScaling != "linear" && spec.ropeScaling != "yarn") {
    badSpec("ropeScaling must be empty, \"linear\" or \"yarn\"");
  }
  if (spec.ropeAttnFactor < 0) badSpec("ropeAttnFactor must not be negative");
  if (spec.nExpert < 0 || spec.nExpertUsed < 0 || spec.nFfExp < 0) {
    badSpec("expert counts and widths must not be negative");
  }
  if (spec.nExpert > 0 && (spec.nExpertUsed < 1 || spec.nExpertUsed > spec.nExpert)) {
    badSpec("nExpertUsed " + std::to_string(spec.nExpertUsed) + " must be 1.." +
            std::to_string(spec.nExpert));
  }
  if (spec.nExpert == 0 && (spec.nExpertUsed != 0 || spec.nFfExp != 0)) {
    badSpec("nExpertUsed and nFfExp need nExpert > 0");
  }
  const auto kinds = syntheticTensorKinds();
  for (const auto& [kind, type] : spec.typeOverrides) {
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
      badSpec("unknown tensor kind \"" + kind + "\" in typeOverrides");
    }
  }
}

// Fills rows [first, first + count) of `t`, quantized, into dst; rows are split over threads.
void fillRows(const SyntheticModelSpec& spec, const SyntheticTensor& t, int64_t first,
              int64_t count, uint8_t* dst) {
  const int64_t n = t.dims[0];
  const size_t rowSize = gguf::rowBytes(t.type, n);
  auto work = [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(n));
    for (int64_t r = begin; r < end; ++r) {
      syntheticRow(spec, t.name, first + r, row.data(), n);
      gguf::quantizeRow(t.type, row.data(), dst + static_cast<size_t>(r) * rowSize, n);
    }
  };
  const int64_t elements = count * n;
  const int64_t threads =
      std::min<int64_t>({std::max(1u, std::thread::hardware_concurrency()), count,
                         std::max<int64_t>(1, elements / (int64_t{1} << 16))});
  if (threads <= 1) {
    work(0, count);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (count + threads - 1) / threads;
  for (int64_t begin = 0; begin < count; begin += per) {
    pool.emplace_back(work, begin, std::min(count, begin + per));
  }
  for (std::thread& th : pool) th.join();
}

void setGeneratedVocab(gguf::Writer& w, int nVocab) {
  std::vector<Value> tokens, scores, types;
  tokens.reserve(static_cast<size_t>(nVocab));
  auto add = [&](std::string text, float score, int32_t type) {
    tokens.push_back(Value::string(std::move(text)));
    scores.push_back(Value::f32(score));
    types.push_back(Value::i32(type));
  };
  // llama.cpp token types: 1 normal, 2 unknown, 3 control, 6 byte.
  add("<unk>", 0.f, 2);
  add("<s>", 0.f, 3);
  add("</s>", 0.f, 3);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    add(buf, 0.f, 6);
  }
  for (int i = kMinGeneratedVocab; i < nVocab; ++i) {
    add("\xe2\x96\x81w" + std::to_string(i), -static_cast<float>(i), 1);  // "▁w<i>"
  }
  w.set("tokenizer.ggml.model", Value::string("llama"));
  w.set("tokenizer.ggml.tokens", Value::array(ValueType::String, std::move(tokens)));
  w.set("tokenizer.ggml.scores", Value::array(ValueType::Float32, std::move(scores)));
  w.set("tokenizer.ggml.token_type", Value::array(ValueType::Int32, std::move(types)));
  w.set("tokenizer.ggml.unknown_token_id", Value::u32(0));
  w.set("tokenizer.ggml.bos_token_id", Value::u32(1));
  w.set("tokenizer.ggml.eos_token_id", Value::u32(2));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
}

}  // namespace

std::span<const std::string_view> syntheticTensorKinds() {
  static constexpr std::string_view kKinds[] = {
      "token_embd",    "output",      "attn_q",       "attn_k", "attn_v",
      "attn_qkv",      "attn_output", "ffn_gate",     "ffn_up", "ffn_down",
      "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
  return kKinds;
}

std::vector<SyntheticTensor> syntheticTensors(const SyntheticModelSpec& spec) {
  validate(spec);
  // The architecture's tensor table decides names and shapes, as for a real file of it.
  ModelConfig c;
  c.architecture = spec.architecture;
  c.arch = findArchitecture(spec.architecture);
  c.nLayer = spec.nLayer;
  c.nEmbd = spec.nEmbd;
  c.nFf = spec.nFf;
  c.nHead = spec.nHead;
  c.nHeadKv = spec.nHeadKv;
  c.headDim = spec.nEmbd / spec.nHead;
  c.nRot = c.headDim;
  c.nVocab = static_cast<int32_t>(resolveVocabSize(spec));
  c.tiedOutput = spec.tiedOutput;
  c.nExpert = spec.nExpert;
  c.nExpertUsed = spec.nExpertUsed;
  // The width a reader will take: the key when written, else the architecture's default.
  c.nFfExp = spec.nFfExp > 0                                           ? spec.nFfExp
             : spec.architecture == "qwen3moe" && spec.nExpertUsed > 0 ? spec.nFf / spec.nExpertUsed
                                                                       : spec.nFf;
  if (spec.longRope && !findTensorSpec(*c.arch, TensorRole::RopeFactorsLong)) {
    badSpec("longRope: architecture " + spec.architecture + " has no LongRoPE factors");
  }
  std::vector<SyntheticTensor> out;
  for (const StageTensor& st : stageTensors(c, 0, c.nLayer, true, true)) {
    const TensorSpec* ts = findTensorSpec(*c.arch, st.role);
    const bool longRopeFactors =
        st.role == TensorRole::RopeFactorsLong || st.role == TensorRole::RopeFactorsShort;
    const bool wanted = st.required || (st.role == TensorRole::Output && !spec.tiedOutput) ||
                        (longRopeFactors && spec.longRope);
    if (!ts || !wanted) continue;
    const std::string kind(tensorRoleName(st.role));
    std::vector<int64_t> dims = specDims(*ts, c);
    TensorType type = TensorType::F32;
    if (!ts->f32) {
      const bool embed = kind == "token_embd" || kind == "output";
      type = embed ? spec.embedType : spec.weightType;
      if (auto it = spec.typeOverrides.find(kind); it != spec.typeOverrides.end()) {
        type = it->second;
      }
    }
    if (!gguf::quantizable(type)) {
      badSpec("tensor " + st.name + ": type " + gguf::typeName(type) + " cannot be written");
    }
    const int64_t block = gguf::typeTraits(type).blockSize;
    if (dims[0] % block != 0) {
      badSpec("tensor " + st.name + ": row length " + std::to_string(dims[0]) +
              " is not a multiple of the " + gguf::typeName(type) + " block size " +
              std::to_string(block) + "; choose another type for " + kind);
    }
    out.push_back(SyntheticTensor{st.name, kind, type, std::move(dims)});
  }
  return out;
}

void syntheticRow(const SyntheticModelSpec& spec, const std::string& name, int64_t row, float* dst,
                  int64_t n) {
  uint64_t state =
      spec.seed ^ hashName(name) ^ (static_cast<uint64_t>(row) * 0xd1b54a32d192ed03ull);
  splitmix64(state);  // decorrelate nearby seeds
  if (name.rfind("rope_factors_", 0) == 0) {
    // Frequency factors: a smooth rise over the pairs (x in [0, 1]) with 1% noise.
    const bool isLong = name == "rope_factors_long.weight";
    for (int64_t i = 0; i < n; ++i) {
      const double x = n > 1 ? static_cast<double>(i) / static_cast<double>(n - 1) : 0.0;
      const double base = isLong ? 1.0 + 63.0 * x * x : 1.0 + 0.5 * x * x * x;
      const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
      dst[i] = static_cast<float>(base * (1.0 + 0.01 * u));
    }
    return;
  }
  const bool norm = name.find("norm.weight") != std::string::npos;
  const double stddev = norm ? 0.02 : spec.weightStd;
  const double mean = norm ? 1.0 : 0.0;
  constexpr double kTwoPi = 6.283185307179586;
  for (int64_t i = 0; i < n; i += 2) {
    // Box-Muller: u1 in (0, 1] keeps the log finite.
    const double u1 = (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    dst[i] = static_cast<float>(mean + stddev * r * std::cos(kTwoPi * u2));
    if (i + 1 < n) dst[i + 1] = static_cast<float>(mean + stddev * r * std::sin(kTwoPi * u2));
  }
}

void writeSyntheticModel(const SyntheticModelSpec& spec, const std::filesystem::path& path) {
  const std::vector<SyntheticTensor> tensors = syntheticTensors(spec);
  const int64_t nVocab = tensors.front().dims[1];
  const std::string a = spec.architecture;
  gguf::Writer w;
  w.set("general.architecture", Value::string(a));
  w.set("general.name", Value::string(spec.name));
  w.set(a + ".context_length", Value::u32(static_cast<uint32_t>(spec.nCtx)));
  w.set(a + ".embedding_length", Value::u32(static_cast<uint32_t>(spec.nEmbd)));
  w.set(a + ".block_count", Value::u32(static_cast<uint32_t>(spec.nLayer)));
  w.set(a + ".feed_forward_length", Value::u32(static_cast<uint32_t>(spec.nFf)));
  if (spec.nExpert > 0) {
    w.set(a + ".expert_count", Value::u32(static_cast<uint32_t>(spec.nExpert)));
    w.set(a + ".expert_used_count", Value::u32(static_cast<uint32_t>(spec.nExpertUsed)));
    if (spec.nFfExp > 0) {
      w.set(a + ".expert_feed_forward_length", Value::u32(static_cast<uint32_t>(spec.nFfExp)));
    }
  }
  w.set(a + ".attention.head_count", Value::u32(static_cast<uint32_t>(spec.nHead)));
  w.set(a + ".attention.head_count_kv", Value::u32(static_cast<uint32_t>(spec.nHeadKv)));
  w.set(a + ".rope.freq_base", Value::f32(spec.ropeFreqBase));
  if (spec.slidingWindow > 0) {
    w.set(a + ".attention.sliding_window", Value::u32(static_cast<uint32_t>(spec.slidingWindow)));
  }
  if (spec.slidingWindowPattern > 0) {
    w.set(a + ".attention.sliding_window_pattern",
          Value::u32(static_cast<uint32_t>(spec.slidingWindowPattern)));
  }
  if (spec.attnLogitSoftcap > 0) {
    w.set(a + ".attn_logit_softcapping", Value::f32(spec.attnLogitSoftcap));
  }
  if (spec.finalLogitSoftcap > 0) {
    w.set(a + ".final_logit_softcapping", Value::f32(spec.finalLogitSoftcap));
  }
  if (!spec.ropeScaling.empty()) {
    w.set(a + ".rope.scaling.type", Value::string(spec.ropeScaling));
    w.set(a + ".rope.scaling.factor", Value::f32(spec.ropeScalingFactor));
  }
  if (spec.ropeOrigCtx > 0) {
    w.set(a + ".rope.scaling.original_context_length",
          Value::u32(static_cast<uint32_t>(spec.ropeOrigCtx)));
  }
  if (spec.ropeAttnFactor > 0) {
    w.set(a + ".rope.scaling.attn_factor", Value::f32(spec.ropeAttnFactor));
  }
  w.set(a + ".attention.layer_norm_rms_epsilon", Value::f32(spec.rmsEps));
  w.set(a + ".rope.dimension_count", Value::u32(static_cast<uint32_t>(spec.nEmbd / spec.nHead)));
  w.set(a + ".vocab_size", Value::u32(static_cast<uint32_t>(nVocab)));
  w.set("general.quantization_version", Value::u32(2));
  if (spec.vocabFrom.empty()) {
    setGeneratedVocab(w, static_cast<int>(nVocab));
  } else {
    const gguf::File vocab = gguf::File::open(spec.vocabFrom);
    for (const gguf::KeyValue& kv : vocab.metadata()) {
      if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
    }
  }
  if (!spec.chatTemplate.empty()) {
    w.set("tokenizer.chat_template", Value::string(spec.chatTemplate));
  }
  for (const SyntheticTensor& t : tensors) {
    w.addTensorStreamed(t.name, t.type, t.dims,
                        [&spec, &t](int64_t first, int64_t count, uint8_t* dst) {
                          fillRows(spec, t, first, count, dst);
                        });
  }
  w.write(path);
}

}  // namespace shoal::model
