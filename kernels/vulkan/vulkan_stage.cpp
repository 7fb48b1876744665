#include "kernels/vulkan/vulkan_stage.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/error.h"
#include "kernels/cpu/cpu_ops.h"

namespace shoal::vulkan {
namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }
uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

// Recorded command buffers kept per stage; prefill shapes vary, so the cache is bounded.
constexpr size_t kMaxRecordedShapes = 32;

}  // namespace

VulkanStage::VulkanStage(std::shared_ptr<Device> device, const runtime::ModelSource& model,
                         const runtime::StageSpec& spec,
                         const std::function<void(uint64_t, uint64_t)>& progress)
    : m_device(std::move(device)),
      m_pool(*m_device),
      m_config(*model.config),
      m_spec(spec),
      m_progress(progress) {
  const model::ModelConfig& c = m_config;
  const model::ModelWeights& w = *model.weights;
  if (spec.firstLayer < 0 || spec.lastLayer > c.nLayer || spec.firstLayer > spec.lastLayer) {
    throw Error("Vulkan stage: layer range [" + std::to_string(spec.firstLayer) + ", " +
                std::to_string(spec.lastLayer) + ") is outside the model's " +
                std::to_string(c.nLayer) + " layers");
  }
  if (spec.contextLength <= 0 || spec.maxSequences <= 0 || spec.maxBatch <= 0) {
    throw Error("Vulkan stage: context length, sequences and batch must be positive");
  }
  if (!attentionFits(m_device->physical(), spec.contextLength)) {
    throw Error("Vulkan stage: a context of " + std::to_string(spec.contextLength) +
                " positions does not fit the attention kernel's shared memory on " +
                m_device->physical().info.name + " (" +
                std::to_string(m_device->physical().maxSharedMemory) + " bytes)");
  }
  if (c.headDim > 256) throw Error("Vulkan stage: head size above 256 is not supported");

  // Total bytes to upload, for the progress callback.
  auto count = [&](model::Tensor t) { m_uploadTotal += t ? t->nbytes : 0; };
  for (int32_t i = spec.firstLayer; i < spec.lastLayer; ++i) {
    const model::LayerWeights& lw = w.layers[sz(i)];
    for (model::Tensor t : {lw.attnNorm, lw.wq, lw.wk, lw.wv, lw.wo, lw.bq, lw.bk, lw.bv,
                            lw.ffnNorm, lw.wGate, lw.wUp, lw.wDown})
      count(t);
  }
  if (spec.hasEmbedding) count(w.tokenEmbd);
  if (spec.hasHead) {
    count(w.outputNorm);
    if (!(spec.hasEmbedding && w.output == w.tokenEmbd)) count(w.output);
  }

  const uint64_t kvBytes = uint64_t(spec.contextLength) * uint64_t(c.kvDim()) * 2;
  for (int32_t i = spec.firstLayer; i < spec.lastLayer; ++i) {
    const model::LayerWeights& lw = w.layers[sz(i)];
    Layer L;
    L.attnNorm = uploadFloats(lw.attnNorm);
    L.ffnNorm = uploadFloats(lw.ffnNorm);
    L.bq = uploadFloats(lw.bq);
    L.bk = uploadFloats(lw.bk);
    L.bv = uploadFloats(lw.bv);
    L.wq = uploadMatrix(*lw.wq);
    L.wk = uploadMatrix(*lw.wk);
    L.wv = uploadMatrix(*lw.wv);
    L.wo = uploadMatrix(*lw.wo);
    L.wGate = uploadMatrix(*lw.wGate);
    L.wUp = uploadMatrix(*lw.wUp);
    L.wDown = uploadMatrix(*lw.wDown);
    for (int32_t s = 0; s < spec.maxSequences; ++s) {
      // Zeroed so that no kernel ever reads uninitialised memory.
      L.keys.push_back(m_pool.allocate(kvBytes));
      L.values.push_back(m_pool.allocate(kvBytes));
      m_pool.zero(L.keys.back());
      m_pool.zero(L.values.back());
    }
    m_layers.push_back(std::move(L));
  }
  if (spec.hasEmbedding) m_tokenEmbd = uploadMatrix(*w.tokenEmbd);
  if (spec.hasHead) {
    m_outputNorm = uploadFloats(w.outputNorm);
    m_output = uploadMatrix(*w.output);
  }

  // RoPE angle tables for every position, from the CPU backend's ropeAngles (ggml's rounding).
  const int32_t half = c.nRot / 2;
  std::vector<float> cosv(sz(spec.contextLength) * sz(half)), sinv(cosv.size());
  const float* freqs = w.ropeFreqs ? reinterpret_cast<const float*>(w.ropeFreqs->data) : nullptr;
  for (int32_t p = 0; p < spec.contextLength; ++p) {
    cpu::ropeAngles(p, c, freqs, &cosv[sz(p) * sz(half)], &sinv[sz(p) * sz(half)]);
  }
  m_ropeCos = m_pool.allocate(cosv.size() * 4);
  m_ropeSin = m_pool.allocate(sinv.size() * 4);
  m_pool.upload(m_ropeCos, cosv.data(), cosv.size() * 4);
  m_pool.upload(m_ropeSin, sinv.data(), sinv.size() * 4);

  const uint64_t b = uint64_t(spec.maxBatch);
  m_x = m_pool.allocate(b * uint64_t(c.nEmbd) * 4);
  m_norm = m_pool.allocate(b * uint64_t(c.nEmbd) * 4);
  m_q = m_pool.allocate(b * uint64_t(c.qDim()) * 4);
  m_k = m_pool.allocate(b * uint64_t(c.kvDim()) * 4);
  m_v = m_pool.allocate(b * uint64_t(c.kvDim()) * 4);
  m_attn = m_pool.allocate(b * uint64_t(c.qDim()) * 4);
  m_tmp = m_pool.allocate(b * uint64_t(std::max(c.nEmbd, c.qDim())) * 4);
  m_gate = m_pool.allocate(b * uint64_t(c.nFf) * 4);
  m_up = m_pool.allocate(b * uint64_t(c.nFf) * 4);
  const uint64_t widest = b * uint64_t(std::max({c.nEmbd, c.qDim(), c.nFf}));
  m_actQuants = m_pool.allocate(QuantizedActivations::quantBytes(widest));
  m_actScales = m_pool.allocate(QuantizedActivations::scaleBytes(widest));
  m_actSums = m_pool.allocate(QuantizedActivations::scaleBytes(widest));
  m_act = {m_actQuants.address, m_actScales.address, m_actSums.address};
  m_params = m_pool.allocate(16, true);
  m_tokens = m_pool.allocate(b * 4, true);
  if (!spec.hasEmbedding) m_hiddenIn = m_pool.allocate(b * uint64_t(c.nEmbd) * 4, true);
  if (spec.hasHead) {
    m_logits = m_pool.allocate(b * uint64_t(c.nVocab) * 4, true);
  } else {
    m_hiddenOut = m_pool.allocate(b * uint64_t(c.nEmbd) * 4, true);
  }
  m_cached.assign(sz(spec.maxSequences), 0);
}

VulkanStage::~VulkanStage() { m_device->api().vkDeviceWaitIdle(m_device->handle()); }

DeviceMatrix VulkanStage::uploadMatrix(const gguf::TensorInfo& t) {
  if (auto it = m_matrices.find(&t); it != m_matrices.end()) return it->second;
  if (!supportedWeightType(t.type)) {
    throw Error("Vulkan stage: tensor " + t.name + " has type " +
                std::string(gguf::typeTraits(t.type).name) + ", which has no Vulkan kernel");
  }
  DeviceMatrix m;
  m.type = t.type;
  m.cols = t.dims[0];
  m.rows = t.rows();
  m.rowBytes = gguf::rowBytes(t.type, m.cols);
  m.memory = m_pool.allocate(t.nbytes);
  const uint64_t before = m_uploaded;
  m_pool.upload(m.memory, t.data, t.nbytes, [&](uint64_t done, uint64_t) {
    m_uploaded = before + done;
    if (m_progress) m_progress(m_uploaded, m_uploadTotal);
  });
  m_matrices[&t] = m;
  return m;
}

Allocation VulkanStage::uploadFloats(const gguf::TensorInfo* t) {
  if (!t) return {};
  if (t->type != gguf::TensorType::F32) {
    throw Error("Vulkan stage: tensor " + t->name + " must be F32");
  }
  Allocation a = m_pool.allocate(t->nbytes);
  m_pool.upload(a, t->data, t->nbytes);
  m_uploaded += t->nbytes;
  if (m_progress) m_progress(m_uploaded, m_uploadTotal);
  return a;
}

void VulkanStage::checkInput(const runtime::StageInput& in) const {
  if (in.sequence < 0 || in.sequence >= m_spec.maxSequences) {
    throw Error("Vulkan stage: sequence " + std::to_string(in.sequence) + " out of range");
  }
  if (in.count <= 0 || in.count > m_spec.maxBatch) {
    throw Error("Vulkan stage: batch of " + std::to_string(in.count) + " tokens (max " +
                std::to_string(m_spec.maxBatch) + ")");
  }
  if (in.firstPosition < 0 || in.firstPosition > m_cached[sz(in.sequence)] ||
      in.firstPosition + in.count > m_spec.contextLength) {
    throw Error("Vulkan stage: positions [" + std::to_string(in.firstPosition) + ", " +
                std::to_string(in.firstPosition + in.count) + ") do not follow the " +
                std::to_string(m_cached[sz(in.sequence)]) +
                " cached positions within a context of " + std::to_string(m_spec.contextLength));
  }
  if (m_spec.hasEmbedding) {
    if (in.tokens.size() != sz(in.count)) throw Error("Vulkan stage: token count mismatch");
    for (int32_t t : in.tokens) {
      if (t < 0 || t >= m_config.nVocab) {
        throw Error("Vulkan stage: token id " + std::to_string(t) + " outside the vocabulary");
      }
    }
  } else if (in.hidden.size() != sz(in.count) * sz(m_config.nEmbd)) {
    throw Error("Vulkan stage: expected " + std::to_string(in.count) + " x " +
                std::to_string(m_config.nEmbd) + " hidden values, got " +
                std::to_string(in.hidden.size()));
  }
}

// The layer program, as kernels/cpu/cpu_stage.cpp runs it:
//   x += Wo · attention(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x))
//   x += Wdown · (silu(Wgate·norm(x)) * Wup·norm(x))
void VulkanStage::record(Recorder& rec, int32_t count, int32_t sequence, bool allLogits) {
  const model::ModelConfig& c = m_config;
  const uint32_t n = u32(count), d = u32(c.nEmbd), qd = u32(c.qDim()), kv = u32(c.kvDim());
  const bool neox = c.ropeStyle == model::RopeStyle::Neox;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.headDim));
  if (m_spec.hasEmbedding) {
    rec.embed(m_tokenEmbd, m_tokens.address, m_x.address, n);
  } else {
    rec.copy(m_hiddenIn, m_x, uint64_t(n) * d * 4);
  }
  for (Layer& L : m_layers) {
    rec.rmsNorm(m_x.address, L.attnNorm.address, m_norm.address, d, n, 0, c.rmsEps);
    products(rec, m_norm.address, d, n,
             {{&L.wq, m_q.address}, {&L.wk, m_k.address}, {&L.wv, m_v.address}});
    if (L.bq.address) rec.add(L.bq.address, m_q.address, n * qd, qd);
    if (L.bk.address) rec.add(L.bk.address, m_k.address, n * kv, kv);
    if (L.bv.address) rec.add(L.bv.address, m_v.address, n * kv, kv);
    rec.rope(m_q.address, m_ropeCos.address, m_ropeSin.address, m_params.address, u32(c.nHead),
             u32(c.headDim), u32(c.nRot), neox, n);
    rec.rope(m_k.address, m_ropeCos.address, m_ropeSin.address, m_params.address, u32(c.nHeadKv),
             u32(c.headDim), u32(c.nRot), neox, n);
    const Allocation& keys = L.keys[sz(sequence)];
    const Allocation& values = L.values[sz(sequence)];
    rec.kvStore(m_k.address, m_v.address, keys.address, values.address, m_params.address, kv, n);
    rec.attention(m_q.address, keys.address, values.address, m_attn.address, m_params.address,
                  u32(c.nHead), u32(c.nHeadKv), u32(c.headDim), scale, n,
                  u32(m_spec.contextLength));
    products(rec, m_attn.address, qd, n, {{&L.wo, m_tmp.address}});
    rec.add(m_tmp.address, m_x.address, n * d, n * d);
    rec.rmsNorm(m_x.address, L.ffnNorm.address, m_norm.address, d, n, 0, c.rmsEps);
    products(rec, m_norm.address, d, n, {{&L.wGate, m_gate.address}, {&L.wUp, m_up.address}});
    rec.swiglu(m_gate.address, m_up.address, n * u32(c.nFf), u32(c.nFf));
    products(rec, m_gate.address, u32(c.nFf), n, {{&L.wDown, m_tmp.address}});
    rec.add(m_tmp.address, m_x.address, n * d, n * d);
  }
  if (m_spec.hasHead) {
    const uint32_t first = allLogits ? 0 : n - 1, rows = n - first;
    rec.rmsNorm(m_x.address, m_outputNorm.address, m_norm.address, d, rows, first, c.rmsEps);
    products(rec, m_norm.address, d, rows, {{&m_output, m_logits.address}});
  } else {
    rec.copy(m_x, m_hiddenOut, uint64_t(n) * d * 4);
  }
  (void)sequence;
}

void VulkanStage::products(Recorder& rec, VkDeviceAddress x, uint32_t cols, uint32_t tokens,
                           std::initializer_list<Product> jobs) {
  bool quantized = false;
  for (const Product& job : jobs) {
    if (quantizesActivations(job.w->type)) {
      if (!quantized) rec.quantizeQ8(x, m_act, cols, tokens);
      quantized = true;
      rec.matmulQ8(*job.w, m_act, job.y, tokens);
    } else {
      rec.matmul(*job.w, x, job.y, tokens);
    }
  }
}

VkCommandBuffer VulkanStage::commandsFor(int32_t count, int32_t sequence, bool allLogits) {
  const auto key = std::make_tuple(count, sequence, allLogits && m_spec.hasHead);
  if (auto it = m_commands.find(key); it != m_commands.end()) return it->second;
  if (m_commands.size() >= kMaxRecordedShapes) {
    // Keep the decode shapes (one token), drop the prefill ones.
    for (auto it = m_commands.begin(); it != m_commands.end();) {
      if (std::get<0>(it->first) != 1) {
        m_device->freeCommandBuffer(it->second);
        it = m_commands.erase(it);
      } else {
        ++it;
      }
    }
  }
  VkCommandBuffer cb = m_device->allocateCommandBuffer();
  Recorder rec(*m_device, cb);
  record(rec, count, sequence, std::get<2>(key));
  rec.finish();
  m_commands[key] = cb;
  return cb;
}

void VulkanStage::forward(const runtime::StageInput& in, runtime::StageOutput& out) {
  checkInput(in);
  const model::ModelConfig& c = m_config;
  const size_t n = sz(in.count);
  VkCommandBuffer cb = commandsFor(in.count, in.sequence, in.allLogits);
  static_cast<int32_t*>(m_params.mapped)[0] = in.firstPosition;
  if (m_spec.hasEmbedding) {
    std::memcpy(m_tokens.mapped, in.tokens.data(), n * 4);
  } else {
    std::memcpy(m_hiddenIn.mapped, in.hidden.data(), n * sz(c.nEmbd) * 4);
  }
  m_device->submitAndWait(cb);
  m_cached[sz(in.sequence)] = in.firstPosition + in.count;
  if (m_spec.hasHead) {
    const size_t rows = in.allLogits ? n : 1;
    const float* logits = static_cast<const float*>(m_logits.mapped);
    out.logits.assign(logits, logits + rows * sz(c.nVocab));
  } else {
    const float* hidden = static_cast<const float*>(m_hiddenOut.mapped);
    out.hidden.assign(hidden, hidden + n * sz(c.nEmbd));
  }
}

void VulkanStage::truncate(int32_t sequence, int32_t fromPosition) {
  if (sequence < 0 || sequence >= m_spec.maxSequences) {
    throw Error("Vulkan stage: sequence " + std::to_string(sequence) + " out of range");
  }
  m_cached[sz(sequence)] = std::clamp(fromPosition, 0, m_cached[sz(sequence)]);
}

int32_t VulkanStage::cachedPositions(int32_t sequence) const {
  if (sequence < 0 || sequence >= m_spec.maxSequences) return 0;
  return m_cached[sz(sequence)];
}

}  // namespace shoal::vulkan
