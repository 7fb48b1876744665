#include "engine/plan/model_cost.h"

#include <algorithm>
#include <charconv>
#include <string_view>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/architecture.h"
#include "engine/model/model_config.h"

namespace shoal::plan {
namespace {

// The layer number of a "blk.<N>.<rest>" tensor name, or -1.
int64_t blockOf(std::string_view name) {
  constexpr std::string_view prefix = "blk.";
  if (name.substr(0, prefix.size()) != prefix) return -1;
  name.remove_prefix(prefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos) return -1;
  int64_t n = -1;
  auto [ptr, ec] = std::from_chars(name.data(), name.data() + dot, n);
  if (ec != std::errc() || ptr != name.data() + dot) return -1;
  return n;
}

// An expert tensor of an MoE layer (ffn_gate_exps, ffn_up_exps, ffn_down_exps, ...): a token
// uses expert_used_count of its expert_count slices.
bool isExpertTensor(std::string_view name) { return name.find("_exps.") != std::string_view::npos; }

const ModelFacts::Tensor* findTensor(const ModelFacts& f, std::string_view name) {
  for (const auto& t : f.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace

ModelCost modelCostFromFacts(const ModelFacts& f, int64_t contextTokens) {
  const std::string& a = f.arch;
  if (f.blockCount < 1)
    throw Error(a + ".block_count: must be >= 1, got " + std::to_string(f.blockCount));
  if (f.embeddingLength < 1) throw Error(a + ".embedding_length: must be >= 1");
  if (f.headCount < 1) throw Error(a + ".attention.head_count: must be >= 1");
  if (!f.layerKv.empty() && f.layerKv.size() != static_cast<size_t>(f.blockCount)) {
    throw Error("KV footprint of " + std::to_string(f.layerKv.size()) + " layers for " + a +
                ".block_count " + std::to_string(f.blockCount));
  }
  const bool experts = f.expertCount > 0 && f.expertUsedCount > 0;
  if (experts && f.expertUsedCount > f.expertCount) {
    throw Error(a + ".expert_used_count: " + std::to_string(f.expertUsedCount) + " is more than " +
                a + ".expert_count " + std::to_string(f.expertCount));
  }
  const int64_t kvHeads = f.headCountKv > 0 ? f.headCountKv : f.headCount;
  const int64_t keyLen = f.keyLength > 0 ? f.keyLength : f.embeddingLength / f.headCount;
  const int64_t valueLen = f.valueLength > 0 ? f.valueLength : f.embeddingLength / f.headCount;

  // Per layer: all bytes and elements, and those of the expert tensors.
  struct Sums {
    double bytes = 0, elements = 0, expertBytes = 0, expertElements = 0;
    bool seen = false;
  };
  std::vector<Sums> perBlock(static_cast<size_t>(f.blockCount));
  double layerBytes = 0, layerElements = 0;
  for (const auto& t : f.tensors) {
    const int64_t b = blockOf(t.name);
    if (b < 0) continue;
    if (b >= f.blockCount) {
      throw Error("tensor " + t.name + ": layer " + std::to_string(b) + " beyond " + a +
                  ".block_count " + std::to_string(f.blockCount));
    }
    Sums& s = perBlock[static_cast<size_t>(b)];
    s.seen = true;
    s.bytes += static_cast<double>(t.bytes);
    s.elements += static_cast<double>(t.elements);
    if (isExpertTensor(t.name)) {
      s.expertBytes += static_cast<double>(t.bytes);
      s.expertElements += static_cast<double>(t.elements);
    }
    layerBytes += static_cast<double>(t.bytes);
    layerElements += static_cast<double>(t.elements);
  }
  for (int64_t b = 0; b < f.blockCount; ++b) {
    if (!perBlock[static_cast<size_t>(b)].seen)
      throw Error("no tensor blk." + std::to_string(b) + ".* for layer " + std::to_string(b));
  }
  const auto* embed = findTensor(f, "token_embd.weight");
  if (!embed) throw Error("tensor token_embd.weight: missing");
  const auto* output = findTensor(f, "output.weight");
  const auto* head = output ? output : embed;  // tied embeddings
  const auto* norm = findTensor(f, "output_norm.weight");
  int64_t vocab = f.vocabSize;
  if (vocab <= 0) vocab = head->rows;
  if (vocab <= 0) throw Error(a + ".vocab_size: missing and no token list or head tensor to count");

  // The fraction of an expert tensor one token reads and computes with.
  const double active =
      experts ? static_cast<double>(f.expertUsedCount) / static_cast<double>(f.expertCount) : 1.0;
  const double attentionPerPosition =
      4.0 * static_cast<double>(f.headCount) * static_cast<double>(keyLen);
  const double context = static_cast<double>(contextTokens);
  const double defaultKv =
      static_cast<double>(kvHeads) * static_cast<double>(keyLen + valueLen) * 2.0;
  std::vector<LayerCost> layers;
  for (size_t b = 0; b < perBlock.size(); ++b) {
    const Sums& s = perBlock[b];
    LayerCost c;
    c.weightBytes = s.bytes;
    c.readBytesPerToken = experts ? s.bytes - s.expertBytes + s.expertBytes * active : s.bytes;
    if (!f.layerKv.empty()) {
      c.kvBytesPerPosition = static_cast<double>(f.layerKv[b].bytesPerPosition);
      c.window = f.layerKv[b].window;
    } else {
      c.kvBytesPerPosition = defaultKv;
    }
    const double positions =
        c.window > 0 ? std::min(context, static_cast<double>(c.window)) : context;
    const double elements =
        experts ? s.elements - s.expertElements + s.expertElements * active : s.elements;
    c.flopsPerToken = 2.0 * elements + attentionPerPosition * positions;
    layers.push_back(c);
  }
  const bool alike = std::all_of(layers.begin(), layers.end(), [&](const LayerCost& c) {
    return c == layers.front() && c.window == 0 && c.readBytesPerToken == c.weightBytes;
  });

  const double count = static_cast<double>(f.blockCount);
  const double n = static_cast<double>(f.embeddingLength);
  ModelCost m;
  m.layers = static_cast<int>(f.blockCount);
  m.layerWeightBytes = layerBytes / count;
  if (alike) {
    m.layerFlopsPerToken = 2.0 * layerElements / count + attentionPerPosition * context;
    m.kvBytesPerTokenPerLayer = layers.front().kvBytesPerPosition;
  } else {
    double flops = 0, kv = 0;
    for (const LayerCost& c : layers) {
      flops += c.flopsPerToken;
      kv += c.kvBytesPerPosition;
    }
    m.layerFlopsPerToken = flops / count;
    m.kvBytesPerTokenPerLayer = kv / count;
    m.perLayer = std::move(layers);
  }
  m.hiddenBytesPerToken = n * 4.0;
  m.embedBytes = static_cast<double>(embed->bytes);
  m.headBytes = static_cast<double>(head->bytes) + (norm ? static_cast<double>(norm->bytes) : 0.0);
  if (head == embed) m.sharedEmbedHeadBytes = static_cast<double>(embed->bytes);
  m.headFlopsPerToken = 2.0 * n * static_cast<double>(vocab);
  return m;
}

ModelFacts modelFactsFromGguf(const gguf::File& file) {
  ModelFacts f;
  f.arch = file.getString("general.architecture");
  const std::string& a = f.arch;
  f.blockCount = file.getInt(a + ".block_count");
  f.embeddingLength = file.getInt(a + ".embedding_length");
  f.headCount = file.getInt(a + ".attention.head_count");
  f.headCountKv = file.getIntOr(a + ".attention.head_count_kv", 0);
  f.keyLength = file.getIntOr(a + ".attention.key_length", 0);
  f.valueLength = file.getIntOr(a + ".attention.value_length", 0);
  f.vocabSize = file.getIntOr(a + ".vocab_size", 0);
  if (f.vocabSize <= 0) {
    if (const gguf::Value* tokens = file.find("tokenizer.ggml.tokens")) {
      if (const gguf::Array* arr = tokens->asArray())
        f.vocabSize = static_cast<int64_t>(arr->items.size());
    }
  }
  f.expertCount = file.getIntOr(a + ".expert_count", 0);
  f.expertUsedCount = file.getIntOr(a + ".expert_used_count", 0);
  // KV from the layer program, as the nodes size their caches; architectures Shoal cannot run
  // may still be planned, with the metadata formula.
  if (model::findArchitecture(a)) {
    const model::ModelConfig config = model::ModelConfig::fromGguf(file);
    for (int32_t l = 0; l < config.nLayer; ++l) f.layerKv.push_back(model::layerKv(config, l));
  }
  for (const gguf::TensorInfo& t : file.tensors()) {
    f.tensors.push_back({t.name, t.nbytes, t.elementCount(), t.rows()});
  }
  return f;
}

ModelCost modelCostFromGguf(const gguf::File& file, int64_t contextTokens) {
  try {
    return modelCostFromFacts(modelFactsFromGguf(file), contextTokens);
  } catch (const Error& e) {
    throw Error(file.displayName() + ": " + e.what());
  }
}

}  // namespace shoal::plan
