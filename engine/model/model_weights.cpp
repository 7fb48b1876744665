#include "engine/model/model_weights.h"

#include <string>

#include "engine/error.h"

namespace shoal::model {
namespace {

std::string dimsText(const std::vector<int64_t>& dims) {
  std::string s = "{";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "}";
}

class Binder {
 public:
  explicit Binder(const gguf::File& file) : m_file(file) {}

  // A tensor of exactly these dims. Norms and biases must be f32 (they are tiny and every backend
  // reads them as f32); matrices may be of any type the engine can dequantize.
  Tensor get(const std::string& name, std::vector<int64_t> dims, bool required = true,
             bool mustBeF32 = false) const {
    const gguf::TensorInfo* t = m_file.findTensor(name);
    if (!t) {
      if (required) throw Error(m_file.displayName() + ": missing tensor " + name);
      return nullptr;
    }
    if (t->dims != dims) {
      throw Error(m_file.displayName() + ": tensor " + name + " has shape " + dimsText(t->dims) +
                  ", expected " + dimsText(dims));
    }
    const auto traits = gguf::typeTraits(t->type);
    if (mustBeF32 && t->type != gguf::TensorType::F32) {
      throw Error(m_file.displayName() + ": tensor " + name + " is " + std::string(traits.name) +
                  ", expected f32");
    }
    if (!traits.dequantizable) {
      throw Error(m_file.displayName() + ": tensor " + name + " has type " +
                  std::string(traits.name) + ", which Shoal cannot compute with yet");
    }
    return t;
  }

 private:
  const gguf::File& m_file;
};

}  // namespace

ModelWeights ModelWeights::bind(const gguf::File& file, const ModelConfig& c) {
  return bindRange(file, c, 0, c.nLayer, true, true);
}

ModelWeights ModelWeights::bindRange(const gguf::File& file, const ModelConfig& c,
                                     int32_t firstLayer, int32_t lastLayer, bool embedding,
                                     bool head) {
  if (firstLayer < 0 || lastLayer > c.nLayer || firstLayer > lastLayer) {
    throw Error(file.displayName() + ": layer range [" + std::to_string(firstLayer) + ", " +
                std::to_string(lastLayer) + ") is outside the model's " + std::to_string(c.nLayer) +
                " layers");
  }
  const Binder b(file);
  ModelWeights w;
  if (embedding || (head && c.tiedOutput)) {
    w.tokenEmbd = b.get("token_embd.weight", {c.nEmbd, c.nVocab});
  }
  if (head) {
    w.outputNorm = b.get("output_norm.weight", {c.nEmbd}, true, true);
    w.output = c.tiedOutput ? w.tokenEmbd : b.get("output.weight", {c.nEmbd, c.nVocab});
  }
  w.ropeFreqs = b.get("rope_freqs.weight", {c.nRot / 2}, false, true);
  w.layers.resize(static_cast<size_t>(c.nLayer));
  for (int32_t i = firstLayer; i < lastLayer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    l.attnNorm = b.get(p + "attn_norm.weight", {c.nEmbd}, true, true);
    l.wq = b.get(p + "attn_q.weight", {c.nEmbd, c.qDim()});
    l.wk = b.get(p + "attn_k.weight", {c.nEmbd, c.kvDim()});
    l.wv = b.get(p + "attn_v.weight", {c.nEmbd, c.kvDim()});
    l.wo = b.get(p + "attn_output.weight", {c.qDim(), c.nEmbd});
    if (c.hasQkvBias) {
      l.bq = b.get(p + "attn_q.bias", {c.qDim()}, true, true);
      l.bk = b.get(p + "attn_k.bias", {c.kvDim()}, true, true);
      l.bv = b.get(p + "attn_v.bias", {c.kvDim()}, true, true);
    }
    l.ffnNorm = b.get(p + "ffn_norm.weight", {c.nEmbd}, true, true);
    l.wGate = b.get(p + "ffn_gate.weight", {c.nEmbd, c.nFf});
    l.wUp = b.get(p + "ffn_up.weight", {c.nEmbd, c.nFf});
    l.wDown = b.get(p + "ffn_down.weight", {c.nFf, c.nEmbd});
  }
  return w;
}

}  // namespace shoal::model
