#include "engine/plan/model_cost.h"

#include <charconv>
#include <string_view>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"

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
  const int64_t kvHeads = f.headCountKv > 0 ? f.headCountKv : f.headCount;
  const int64_t keyLen = f.keyLength > 0 ? f.keyLength : f.embeddingLength / f.headCount;
  const int64_t valueLen = f.valueLength > 0 ? f.valueLength : f.embeddingLength / f.headCount;

  double layerBytes = 0, layerElements = 0;
  std::vector<int> seen(static_cast<size_t>(f.blockCount), 0);
  for (const auto& t : f.tensors) {
    const int64_t b = blockOf(t.name);
    if (b < 0) continue;
    if (b >= f.blockCount) {
      throw Error("tensor " + t.name + ": layer " + std::to_string(b) + " beyond " + a +
                  ".block_count " + std::to_string(f.blockCount));
    }
    seen[static_cast<size_t>(b)] = 1;
    layerBytes += static_cast<double>(t.bytes);
    layerElements += static_cast<double>(t.elements);
  }
  for (int64_t b = 0; b < f.blockCount; ++b) {
    if (!seen[static_cast<size_t>(b)])
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

  const double layers = static_cast<double>(f.blockCount);
  const double n = static_cast<double>(f.embeddingLength);
  ModelCost m;
  m.layers = static_cast<int>(f.blockCount);
  m.layerWeightBytes = layerBytes / layers;
  m.layerFlopsPerToken = 2.0 * layerElements / layers + 4.0 * static_cast<double>(f.headCount) *
                                                            static_cast<double>(keyLen) *
                                                            static_cast<double>(contextTokens);
  m.kvBytesPerTokenPerLayer =
      static_cast<double>(kvHeads) * static_cast<double>(keyLen + valueLen) * 2.0;
  m.hiddenBytesPerToken = n * 4.0;
  m.embedBytes = static_cast<double>(embed->bytes);
  m.headBytes = static_cast<double>(head->bytes) + (norm ? static_cast<double>(norm->bytes) : 0.0);
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
