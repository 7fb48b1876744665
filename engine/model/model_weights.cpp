#include "engine/model/model_weights.h"

#include <string>

#include "engine/error.h"
#include "engine/model/architecture.h"

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
  const Architecture& arch = architectureOf(c);
  const Binder b(file);
  ModelWeights w;
  w.layers.resize(static_cast<size_t>(c.nLayer));
  for (const StageTensor& st : stageTensors(c, firstLayer, lastLayer, embedding, head)) {
    const TensorSpec& spec = *findTensorSpec(arch, st.role);  // stageTensors lists table rows
    const std::vector<int64_t> dims = specDims(spec, c);
    const Tensor t = b.get(st.name, dims, st.required, spec.f32);
    if (st.layer >= 0) {
      w.layers[static_cast<size_t>(st.layer)].byRole[static_cast<size_t>(st.role)] = t;
    } else {
      w.global[static_cast<size_t>(st.role)] = t;
    }
  }
  if (head) {
    // A tied head reuses the embedding; then the embedding must be there.
    Tensor& output = w.global[static_cast<size_t>(TensorRole::Output)];
    const Tensor embd = w[TensorRole::TokenEmbd];
    if (!output) {
      if (!embd) throw Error(file.displayName() + ": missing tensor output.weight");
      output = embd;
    }
  }
  if (!embedding && !(head && w[TensorRole::Output] == w[TensorRole::TokenEmbd])) {
    w.global[static_cast<size_t>(TensorRole::TokenEmbd)] = nullptr;  // bound only for the head
  }
  return w;
}

}  // namespace shoal::model
