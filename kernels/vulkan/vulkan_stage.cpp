#include "kernels/vulkan/vulkan_stage.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "engine/error.h"
#include "engine/model/architecture.h"
#include "engine/model/kv_ring.h"
#include "engine/runtime/top_k_draw.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/gpu_op_gaps.h"

namespace shoal::vulkan {
namespace {

using model::Buffer;
using model::TensorRole;

size_t sz(int64_t v) { return static_cast<size_t>(v); }
uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }
size_t idx(Buffer b) { return static_cast<size_t>(b); }
size_t idx(TensorRole r) { return static_cast<size_t>(r); }

// Recorded command buffers kept per stage; prefill shapes vary, so the cache is bounded.
constexpr size_t kMaxRecordedShapes = 32;

// Positions a layer's KV cache holds: a sliding-window layer's ring where that is smaller than
// the context (engine/model/kv_ring.h; the bytes the planner counts for it), else the context.
uint32_t kvPositionsOf(const model::LayerProgram& program, int32_t contextLength) {
  const int32_t window = model::attendWindow(program);
  return model::kvRingPeriodFor(window, contextLength) > 0
             ? static_cast<uint32_t>(model::kvRingPositions(window))
             : static_cast<uint32_t>(contextLength);
}

// Bytes as "12.3 MiB".
std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / (1 << 20));
  return text;
}

// The tensors a stage uploads, each once (a tied output is the embedding): every tensor bound to
// its layers, and the global ones its ends read.
std::vector<model::Tensor> stageTensors(const model::ModelWeights& w,
                                        const runtime::StageSpec& spec) {
  std::vector<model::Tensor> tensors;
  auto need = [&](model::Tensor t, const char* what) {
    if (!t) throw Error(std::string("Vulkan stage: the model's ") + what + " is not bound");
    if (std::find(tensors.begin(), tensors.end(), t) == tensors.end()) tensors.push_back(t);
  };
  if (spec.hasEmbedding) need(w[TensorRole::TokenEmbd], "token embedding");
  for (int32_t i = spec.firstLayer; i < spec.lastLayer; ++i) {
    for (model::Tensor t : w.layers[sz(i)].byRole) {
      if (t) need(t, "layer tensor");
    }
  }
  if (spec.hasHead) {
    need(w[TensorRole::OutputNorm], "output norm");
    need(w[TensorRole::Output], "output projection");
  }
  return tensors;
}

// Split attention's scratch for the widest attention of the stage's layers.
uint64_t attentionScratchFor(const model::ModelConfig& c, const runtime::StageSpec& spec,
                             const std::vector<model::LayerProgram>& programs) {
  const auto widths = bufferWidths(c);
  const uint32_t hd = u32(c.headDim);
  uint64_t bytes = 0;
  for (const model::LayerProgram& p : programs) {
    bytes = std::max(bytes, attentionScratchBytes(widths[idx(Buffer::Q)] / hd, u32(p.kvDim) / hd,
                                                  hd, u32(spec.maxBatch), u32(spec.contextLength)));
  }
  return bytes;
}

}  // namespace

uint64_t VulkanStage::deviceBytes(const runtime::ModelSource& model,
                                  const runtime::StageSpec& spec) {
  // The device-local allocations the constructor makes, each as its pool footprint.
  const model::ModelConfig& c = *model.config;
  auto fp = [](uint64_t bytes) { return MemoryPool::footprint(bytes); };
  uint64_t total = 0;
  for (model::Tensor t : stageTensors(*model.weights, spec)) total += fp(t->nbytes);
  const model::Architecture& arch = model::architectureOf(c);
  std::vector<model::LayerProgram> programs;
  std::vector<model::RopeParams> ropes;
  bool experts = false;
  for (int32_t i = spec.firstLayer; i < spec.lastLayer; ++i) {
    programs.push_back(arch.layerProgram(c, i));
    const uint64_t kvBytes = uint64_t(kvPositionsOf(programs.back(), spec.contextLength)) *
                             uint64_t(programs.back().kvDim) * 2;
    total += 2 * uint64_t(spec.maxSequences) * fp(kvBytes);
    for (const model::Op& op : programs.back().ops) {
      experts = experts || op.kind == model::OpKind::MoeFfn;
      if (op.kind == model::OpKind::Rope &&
          std::find(ropes.begin(), ropes.end(), op.rope) == ropes.end()) {
        ropes.push_back(op.rope);
        total += 2 * fp(uint64_t(spec.contextLength) * uint64_t(op.rope.nRot / 2) * 4);
      }
    }
  }
  const uint64_t b = uint64_t(spec.maxBatch);
  const auto widths = bufferWidths(c);
  for (uint32_t w : widths) total += fp(b * w * 4);
  const uint64_t widest = b * *std::max_element(widths.begin(), widths.end());
  total += fp(QuantizedActivations::quantBytes(widest)) +
           2 * fp(QuantizedActivations::scaleBytes(widest));
  if (const uint64_t scratch = attentionScratchFor(c, spec, programs)) total += fp(scratch);
  if (spec.hasHead) {
    if (const uint64_t top = topKScratchBytes(kTopKRows, u32(c.nVocab), kMaxDeviceTopK)) {
      total += 4 * fp(top);
    }
  }
  if (experts) {
    const uint64_t entries = b * uint64_t(c.nExpertUsed);
    total +=
        fp(b * uint64_t(c.nExpert) * 4) + 2 * fp(entries * 4) + fp(entries * uint64_t(c.nEmbd) * 4);
  }
  return total;
}

VulkanStage::VulkanStage(std::shared_ptr<Device> device, const runtime::ModelSource& model,
                         const runtime::StageSpec& spec,
                         const std::function<void(uint64_t, uint64_t)>& progress)
    : m_device(std::move(device)),
      m_pool(*m_device),
      m_config(*model.config),
      m_spec(spec),
      m_book("Vulkan stage", spec, m_config.nLayer, m_config.nVocab, m_config.nEmbd),
      m_progress(progress) {
  const model::ModelConfig& c = m_config;
  if (c.headDim > 256) throw Error("Vulkan stage: head size above 256 is not supported");
  if (!attentionFits(*m_device, u32(c.headDim), spec.contextLength)) {
    throw Error("Vulkan stage: a context of " + std::to_string(spec.contextLength) +
                " positions does not fit the exact-math attention kernel's shared memory on " +
                m_device->physical().info.name + " (" +
                std::to_string(m_device->physical().maxSharedMemory) + " bytes)");
  }

  if (const char* missing = spec.hasHead ? kernels::gpuHeadGap(c, kVulkanOps) : nullptr) {
    throw Error(std::string("Vulkan stage: the model's head has ") + missing +
                ", which has no Vulkan kernels yet (the CPU backend runs it)");
  }
  const model::Architecture& arch = model::architectureOf(c);
  bool experts = false;  // some layer has a MoeFfn: the stage needs MoeScratch
  for (int32_t i = spec.firstLayer; i < spec.lastLayer; ++i) {
    m_layers.push_back(Layer{arch.layerProgram(c, i), {}, {}, {}});
    // Refused before any weight is uploaded (checkProgram below says the same per op).
    for (const model::Op& op : m_layers.back().program.ops) {
      experts = experts || op.kind == model::OpKind::MoeFfn;
      const char* missing = kernels::gpuOpGap(op, kVulkanOps);
      if (missing) {
        throw Error("Vulkan stage: layer " + std::to_string(i) + " has " + missing +
                    ", which has no Vulkan kernels yet (the CPU backend runs it)");
      }
    }
  }
  if (experts && int64_t{spec.maxBatch} * c.nExpertUsed > 65535) {
    // The expert kernels take a batch's (token, expert) entries as one dispatch dimension.
    throw Error("Vulkan stage: batches of " + std::to_string(spec.maxBatch) + " tokens with " +
                std::to_string(c.nExpertUsed) +
                " experts each exceed 65535 expert entries; use a smaller batch");
  }
  // Refused with the shortfall before anything is uploaded; then the pool takes exactly what the
  // stage needs.
  const uint64_t need = deviceBytes(model, spec), free = m_device->freeMemory();
  if (need > free) {
    const std::string layers = spec.lastLayer - spec.firstLayer == 1
                                   ? "layer " + std::to_string(spec.firstLayer)
                                   : "layers " + std::to_string(spec.firstLayer) + "-" +
                                         std::to_string(spec.lastLayer - 1);
    const char* verb = spec.lastLayer - spec.firstLayer == 1 ? " needs " : " need ";
    throw Error("Vulkan stage: " + layers + verb + mib(need) + " on " +
                m_device->physical().info.name + ", which has " + mib(free) + " free (short by " +
                mib(need - free) + "); put fewer layers on it and the rest on the CPU " +
                "(--gpu-layers)");
  }
  m_pool.reserve(need);
  upload(*model.weights);
  for (size_t l = 0; l < m_layers.size(); ++l) {
    Layer& L = m_layers[l];
    checkProgram(L.program, spec.firstLayer + static_cast<int32_t>(l), spec.contextLength,
                 L.tensors);
    // A sliding-window layer keeps a ring of its last positions (kvPositionsOf); the book
    // refuses batches the ring cannot serve.
    const uint32_t positions = kvPositionsOf(L.program, spec.contextLength);
    if (positions < u32(spec.contextLength)) {
      L.ring = positions;
      m_book.keepRing(static_cast<int32_t>(positions), model::attendWindow(L.program));
    }
    const uint64_t kvBytes = uint64_t(positions) * uint64_t(L.program.kvDim) * 2;
    for (int32_t s = 0; s < spec.maxSequences; ++s) {
      // Zeroed so that no kernel ever reads uninitialised memory.
      L.keys.push_back(m_pool.allocate(kvBytes));
      L.values.push_back(m_pool.allocate(kvBytes));
      m_pool.zero(L.keys.back());
      m_pool.zero(L.values.back());
    }
  }
  buildRopeTables(*model.weights);

  const uint64_t b = uint64_t(spec.maxBatch);
  const auto widths = bufferWidths(c);
  for (size_t i = 0; i < model::kBufferCount; ++i) {
    m_buffers[i] = m_pool.allocate(b * widths[i] * 4);
  }
  const uint64_t widest = b * *std::max_element(widths.begin(), widths.end());
  m_actQuants = m_pool.allocate(QuantizedActivations::quantBytes(widest));
  m_actScales = m_pool.allocate(QuantizedActivations::scaleBytes(widest));
  m_actSums = m_pool.allocate(QuantizedActivations::scaleBytes(widest));
  // Split attention's partial outputs, for the widest attention of any layer.
  std::vector<model::LayerProgram> programs;
  for (const Layer& L : m_layers) programs.push_back(L.program);
  if (const uint64_t scratch = attentionScratchFor(c, spec, programs)) {
    m_attentionScratch = m_pool.allocate(scratch);
  }
  m_params = m_pool.allocate(4 * kMaxPassSegments, true);
  m_tokens = m_pool.allocate(b * 4, true);
  if (!spec.hasEmbedding) m_hiddenIn = m_pool.allocate(b * uint64_t(c.nEmbd) * 4, true);
  if (spec.hasHead) {
    m_logits = m_pool.allocateReadback(b * uint64_t(c.nVocab) * 4);
    m_sampled = m_pool.allocateReadback(b * 4);
    m_topValues = m_pool.allocateReadback(uint64_t(kTopKRows) * kMaxDeviceTopK * 4);
    m_topIds = m_pool.allocateReadback(uint64_t(kTopKRows) * kMaxDeviceTopK * 4);
    const uint64_t topScratch = topKScratchBytes(kTopKRows, u32(c.nVocab), kMaxDeviceTopK);
    if (topScratch > 0) {
      for (Allocation& a : m_topScratch) a = m_pool.allocate(topScratch);
    }
  } else {
    m_hiddenOut = m_pool.allocateReadback(b * uint64_t(c.nEmbd) * 4);
  }
  if (experts) {
    const uint64_t entries = b * uint64_t(c.nExpertUsed);
    m_moeLogits = m_pool.allocate(b * uint64_t(c.nExpert) * 4);
    m_moeIds = m_pool.allocate(entries * 4);
    m_moeWeights = m_pool.allocate(entries * 4);
    m_moeOutputs = m_pool.allocate(entries * uint64_t(c.nEmbd) * 4);
  }
}

VulkanStage::~VulkanStage() {
  m_device->api().vkDeviceWaitIdle(m_device->handle());
  // The device (and its command pool) may outlive the stage: other stages share it.
  for (auto& [key, r] : m_commands) release(r);
}

// The tensors the stage reads, uploaded once each as their raw GGUF bytes (norm weights and
// biases are F32 vectors: one-row matrices): every tensor bound to its layers, by role, and the
// global ones its ends read (the embedding; the head's norm and output, which is the embedding
// itself when tied). RoPE frequency factors stay on the host (buildRopeTables). Then each role
// of the stage and of its layers points at its upload.
void VulkanStage::upload(const model::ModelWeights& w) {
  const std::vector<model::Tensor> tensors = stageTensors(w, m_spec);
  uint64_t total = 0;
  for (model::Tensor t : tensors) total += t->nbytes;
  uint64_t uploaded = 0;
  for (model::Tensor t : tensors) {
    if (!supportedWeightType(t->type)) {
      throw Error("Vulkan stage: tensor " + t->name + " has type " +
                  std::string(gguf::typeTraits(t->type).name) + ", which has no Vulkan kernel");
    }
    DeviceMatrix m;
    m.type = t->type;
    m.cols = t->dims[0];
    m.rows = t->rows();
    m.rowBytes = gguf::rowBytes(t->type, m.cols);
    m.memory = m_pool.allocate(t->nbytes);
    const uint64_t before = uploaded;
    m_pool.upload(m.memory, t->data, t->nbytes, [&](uint64_t done, uint64_t) {
      uploaded = before + done;
      if (m_progress) m_progress(uploaded, total);
    });
    m_tensors[t] = m;
  }

  auto uploadOf = [&](model::Tensor t) -> const DeviceMatrix* {
    const auto it = t ? m_tensors.find(t) : m_tensors.end();
    return it == m_tensors.end() ? nullptr : &it->second;
  };
  for (size_t r = 0; r < model::kTensorRoleCount; ++r) {
    m_global[r] = uploadOf(w.global[r]);
    for (size_t l = 0; l < m_layers.size(); ++l) {
      m_layers[l].tensors[r] = uploadOf(w.layers[sz(m_spec.firstLayer) + l].byRole[r]);
    }
  }
}

// RoPE angle tables for every position, one per distinct RopeParams of the stage's layers,
// from the CPU backend's ropeAngles (ggml's rounding).
void VulkanStage::buildRopeTables(const model::ModelWeights& w) {
  const model::Tensor freqTensor = w.ropeFactors(m_config, m_spec.contextLength);
  for (const Layer& L : m_layers) {
    for (const model::Op& op : L.program.ops) {
      if (op.kind != model::OpKind::Rope) continue;
      const model::RopeParams& p = op.rope;
      if (std::any_of(m_ropeTables.begin(), m_ropeTables.end(),
                      [&](const RopeTable& t) { return t.params == p; })) {
        continue;
      }
      if (p.freqFactors && !freqTensor) {
        throw Error("Vulkan stage: RoPE frequency factors (rope_freqs or rope_factors) are absent");
      }
      const float* freqs =
          p.freqFactors ? reinterpret_cast<const float*>(freqTensor->data) : nullptr;
      const size_t half = sz(p.nRot / 2);
      std::vector<float> cosv(sz(m_spec.contextLength) * half), sinv(cosv.size());
      for (int32_t pos = 0; pos < m_spec.contextLength; ++pos) {
        cpu::ropeAngles(pos, p, freqs, &cosv[sz(pos) * half], &sinv[sz(pos) * half]);
      }
      RopeTable t{p, m_pool.allocate(cosv.size() * 4), m_pool.allocate(sinv.size() * 4)};
      m_pool.upload(t.cos, cosv.data(), cosv.size() * 4);
      m_pool.upload(t.sin, sinv.data(), sinv.size() * 4);
      m_ropeTables.push_back(t);
    }
  }
}

// The embedding (or the hidden states received), each layer's program, then the head: final
// norm and output projection over the rows whose logits are wanted.
void VulkanStage::record(Recorder& rec, const PassKey& key) {
  std::vector<PassSegment> segments;
  uint32_t n = 0;
  for (const auto& [count, sequence] : key.segments) {
    segments.push_back({n, u32(count), m_params.address + 4 * segments.size()});
    n += u32(count);
  }
  const uint32_t d = u32(m_config.nEmbd), select = key.select;
  const runtime::LogitRows logits = key.logits;
  PassContext ctx;
  ctx.config = &m_config;
  for (size_t i = 0; i < model::kBufferCount; ++i) ctx.buffers[i] = m_buffers[i].address;
  ctx.quantized = {m_actQuants.address, m_actScales.address, m_actSums.address};
  ctx.segments = segments;
  ctx.contextLength = u32(m_spec.contextLength);
  ctx.attentionScratch = m_attentionScratch.address;
  ctx.ropeTables = &m_ropeTables;
  ctx.moe = {m_moeLogits.address, m_moeIds.address, m_moeWeights.address, m_moeOutputs.address};
  ctx.rows = n;
  ctx.decodeOrder = key.decodeOrder;
  ctx.kept = logits == runtime::LogitRows::All    ? RowRange{0, n}
             : logits == runtime::LogitRows::Last ? RowRange{n - 1, 1}
                                                  : RowRange{0, 0};

  if (m_spec.hasEmbedding) {
    rec.embed(*m_global[idx(TensorRole::TokenEmbd)], m_tokens.address, ctx.buffers[idx(Buffer::X)],
              n);
  } else {
    rec.copy(m_hiddenIn, m_buffers[idx(Buffer::X)], uint64_t(n) * d * 4);
  }
  LayerRecorder layers(rec, ctx);
  std::vector<KvCache> caches(key.segments.size());
  for (size_t l = 0; l < m_layers.size(); ++l) {
    const Layer& L = m_layers[l];
    const int32_t layer = m_spec.firstLayer + static_cast<int32_t>(l);
    for (size_t i = 0; i < caches.size(); ++i) {
      const size_t sequence = sz(key.segments[i][1]);
      caches[i] = {L.keys[sequence].address, L.values[sequence].address};
    }
    layers.record(LayerPass{&L.program, &L.tensors, caches, L.ring,
                            m_spec.hasHead && layer == m_config.nLayer - 1});
  }
  if (m_spec.hasHead) {
    // The kept rows, also when this stage holds no layer (and so ran no KeepOutputRows).
    const RowRange rows = ctx.kept;
    if (rows.count == 0) return;
    rec.rmsNorm(layers.at(Buffer::X, rows.first),
                m_global[idx(TensorRole::OutputNorm)]->memory.address, layers.at(Buffer::Norm, 0),
                d, rows.count, 0, m_config.rmsEps);
    const LayerRecorder::Product output[] = {{m_global[idx(TensorRole::Output)], m_logits.address}};
    layers.products(layers.at(Buffer::Norm, 0), d, rows.count, output);
    if (const float cap = m_config.finalLogitSoftcap; cap > 0) {
      rec.softcap(m_logits.address, rows.count * u32(m_config.nVocab), cap);
    }
    if (select == 1) {
      rec.argmax(m_logits.address, m_sampled.address, rows.count, u32(m_config.nVocab));
    } else if (select > 1) {
      const Recorder::TopKScratch scratch{{m_topScratch[0].address, m_topScratch[1].address},
                                          {m_topScratch[2].address, m_topScratch[3].address}};
      rec.topK(m_logits.address, rows.count, u32(m_config.nVocab), select, scratch,
               m_topValues.address, m_topIds.address);
    }
  } else {
    rec.copy(m_buffers[idx(Buffer::X)], m_hiddenOut, uint64_t(n) * d * 4);
  }
}

void VulkanStage::release(Recorded& r) {
  m_device->freeCommandBuffer(r.commands);
  if (r.timestamps) m_device->api().vkDestroyQueryPool(m_device->handle(), r.timestamps, nullptr);
}

const VulkanStage::Recorded& VulkanStage::commandsFor(const PassKey& key) {
  if (auto it = m_commands.find(key); it != m_commands.end()) {
    m_lastDispatches = it->second.dispatches();
    return it->second;
  }
  if (m_commands.size() >= kMaxRecordedShapes) {
    // Keep the decode shapes (one row per segment), drop the prefill ones; all of them when the
    // decode shapes alone fill the cache (many sets of sequences decoding together).
    auto decode = [](const PassKey& k) {
      return std::all_of(k.segments.begin(), k.segments.end(),
                         [](const std::array<int32_t, 2>& s) { return s[0] == 1; });
    };
    for (auto it = m_commands.begin(); it != m_commands.end();) {
      if (!decode(it->first) || m_commands.size() >= kMaxRecordedShapes / 2) {
        release(it->second);
        it = m_commands.erase(it);
      } else {
        ++it;
      }
    }
  }
  Recorded r;
  r.commands = m_device->allocateCommandBuffer();
  try {
    if (m_profiling) {
      // A timestamp before the first dispatch and after each (room for any pass Shoal records;
      // dispatches past it would go untimed).
      VkQueryPoolCreateInfo qi{};
      qi.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = kProfileQueries;
      check(m_device->api().vkCreateQueryPool(m_device->handle(), &qi, nullptr, &r.timestamps),
            "vkCreateQueryPool");
    }
    Recorder rec(*m_device, r.commands, r.timestamps, r.timestamps ? kProfileQueries : 0);
    record(rec, key);
    rec.finish();
    r.records = rec.records();
  } catch (...) {
    release(r);
    throw;
  }
  m_lastDispatches = r.dispatches();
  return m_commands[key] = std::move(r);
}

bool VulkanStage::setProfiling(bool on) {
  if (on && m_device->physical().timestampBits == 0) return false;
  if (on != m_profiling) {
    // Recorded passes are recorded again, with or without timestamps.
    for (auto& [key, r] : m_commands) release(r);
    m_commands.clear();
    m_profiling = on;
  }
  m_profile.clear();
  return on;
}

std::vector<runtime::KernelProfile> VulkanStage::profile() const {
  std::vector<runtime::KernelProfile> out;
  for (const auto& [kernel, p] : m_profile) out.push_back(p);
  return out;
}

uint64_t VulkanStage::decodeWeightBytes() const {
  uint64_t total = 0;
  const DeviceMatrix* embedding = m_global[idx(TensorRole::TokenEmbd)];
  const DeviceMatrix* output = m_global[idx(TensorRole::Output)];
  for (const auto& [tensor, m] : m_tensors) {
    if (m.rows <= 1) continue;  // norm weights and biases: vectors, not matrices
    const bool embeddingOnly = &m == embedding && !(m_spec.hasHead && output == &m);
    total += embeddingOnly ? m.rowBytes : static_cast<uint64_t>(m.rows) * m.rowBytes;
  }
  return total;
}

// Adds a profiled pass's timestamps to the profile, by kernel.
void VulkanStage::addToProfile(const Recorded& r) {
  const uint32_t timed =
      std::min<uint32_t>(static_cast<uint32_t>(r.records.size()) + 1, kProfileQueries);
  std::vector<uint64_t> ticks(timed);
  check(m_device->api().vkGetQueryPoolResults(m_device->handle(), r.timestamps, 0, timed,
                                              ticks.size() * 8, ticks.data(), 8,
                                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
        "vkGetQueryPoolResults");
  const uint32_t bits = m_device->physical().timestampBits;
  const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  const double secondsPerTick = double(m_device->physical().timestampPeriod) * 1e-9;
  for (size_t i = 0; i < r.records.size(); ++i) {
    runtime::KernelProfile& p = m_profile[r.records[i].kernel];
    p.kernel = r.records[i].kernel;
    ++p.dispatches;
    p.weightBytes += r.records[i].weightBytes;
    if (i + 1 < timed) p.seconds += double((ticks[i + 1] - ticks[i]) & mask) * secondsPerTick;
  }
}

void VulkanStage::runPass(const runtime::Batch& batch, int32_t row,
                          std::span<const runtime::Segment> segments, const PassKey& key,
                          runtime::StageOutput& out) {
  size_t n = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    static_cast<int32_t*>(m_params.mapped)[i] = segments[i].firstPosition;
    n += sz(segments[i].count);
  }
  const size_t d = sz(m_config.nEmbd);
  const runtime::LogitRows logits = key.logits;
  const uint32_t select = key.select;
  const Recorded& recorded = commandsFor(key);
  if (m_spec.hasEmbedding) {
    std::memcpy(m_tokens.mapped, batch.tokens.data() + row, n * 4);
  } else {
    std::memcpy(m_hiddenIn.mapped, batch.hidden.data() + sz(row) * d, n * d * 4);
  }
  m_device->submitAndWait(recorded.commands);
  ++m_passes;
  if (recorded.timestamps) addToProfile(recorded);
  if (m_spec.hasHead) {
    const size_t rows = logits == runtime::LogitRows::All    ? n
                        : logits == runtime::LogitRows::Last ? 1
                                                             : 0;
    if (select == 1) {
      const int32_t* tokens = static_cast<const int32_t*>(m_sampled.mapped);
      out.tokens.insert(out.tokens.end(), tokens, tokens + rows);
      m_bytesReadBack += rows * 4;
    } else if (select > 1) {
      // Each row's top k from the device; the request's sampler draws among them as it would
      // among the whole vocabulary (its chain starts with the same top k: sampleTopK).
      const size_t k = std::min<size_t>(select, sz(m_config.nVocab));
      const float* values = static_cast<const float*>(m_topValues.mapped);
      const int32_t* ids = static_cast<const int32_t*>(m_topIds.mapped);
      for (size_t r = 0; r < rows; ++r) {
        out.tokens.push_back(runtime::drawAmongTopK(
            *batch.sample, std::span(values + r * select, k), std::span(ids + r * select, k)));
      }
      m_bytesReadBack += rows * k * 8;
    } else {
      const float* values = static_cast<const float*>(m_logits.mapped);
      out.logits.insert(out.logits.end(), values, values + rows * sz(m_config.nVocab));
      m_bytesReadBack += rows * sz(m_config.nVocab) * 4;
    }
  } else {
    const float* hidden = static_cast<const float*>(m_hiddenOut.mapped);
    out.hidden.insert(out.hidden.end(), hidden, hidden + n * d);
    m_bytesReadBack += n * d * 4;
  }
}

void VulkanStage::run(const runtime::Batch& batch, runtime::StageOutput& out) {
  m_book.check(batch);
  out.hidden.clear();
  out.logits.clear();
  out.tokens.clear();
  // Sampling on the device: greedy requests by argmax.comp (a token reads back 4 bytes), top-k
  // ones (k <= kMaxDeviceTopK, a few logits rows) by topk.comp and a draw among the k on the
  // host (k * 8 bytes). Other requests get logits back (the host samples them).
  const size_t logitRows = m_spec.hasHead ? sz(runtime::SequenceBook::logitRows(batch)) : 0;
  const runtime::SampleRequest* sample = m_spec.hasHead ? batch.sample : nullptr;
  uint32_t select = 0;
  if (sample && sample->temperature <= 0) {
    select = 1;
  } else if (sample && sample->topK > 0 && u32(sample->topK) <= kMaxDeviceTopK &&
             logitRows <= kTopKRows) {
    select = u32(sample->topK);
  }
  if (m_spec.hasHead) {
    const size_t rows = logitRows;
    if (select > 0) {
      out.tokens.reserve(rows);
    } else {
      out.logits.reserve(rows * sz(m_config.nVocab));
    }
  } else {
    out.hidden.reserve(sz(batch.rows()) * sz(m_config.nEmbd));
  }
  // A stage with a ring takes long segments in chunks (each through every layer), so that a
  // chunk's new positions never overwrite the window one of its rows reads.
  const bool rings =
      std::any_of(m_layers.begin(), m_layers.end(), [](const Layer& L) { return L.ring > 0; });
  const int32_t chunk = rings ? model::kKvRingWriteChunk : std::numeric_limits<int32_t>::max();
  // Consecutive segments run together in one pass when every row of each goes on (decode rows,
  // a verification's rows, hidden states), so the pass keeps all its rows: the products read each
  // weight once for all those sequences. Any other segment (a prompt whose last row alone is
  // kept) runs alone, in chunks on a ring stage. Passes go in row order, and so do the outputs.
  const auto whole = [&](const runtime::Segment& s) {
    return s.count <= chunk && (!m_spec.hasHead || s.logits == runtime::LogitRows::All ||
                                (s.logits == runtime::LogitRows::Last && s.count == 1));
  };
  const std::span<const runtime::Segment> segments = batch.segments;
  int32_t row = 0;
  for (size_t i = 0; i < segments.size();) {
    size_t j = i;
    int32_t rows = 0;
    while (j < segments.size() && j - i < kMaxPassSegments && whole(segments[j])) {
      rows += segments[j++].count;
    }
    if (j - i > 1) {
      PassKey key;
      key.select = select;
      for (size_t k = i; k < j; ++k) {
        key.segments.push_back({segments[k].count, segments[k].sequence});
        key.decodeOrder = key.decodeOrder || segments[k].decodeOrder;
      }
      runPass(batch, row, segments.subspan(i, j - i), key, out);
      row += rows;
      i = j;
      continue;
    }
    const runtime::Segment& segment = segments[i++];
    for (int32_t done = 0; done < segment.count;) {
      runtime::Segment part = segment;
      part.firstPosition += done;
      part.count = std::min(chunk, segment.count - done);
      if (done + part.count < segment.count && segment.logits == runtime::LogitRows::Last) {
        part.logits = runtime::LogitRows::None;
      }
      PassKey key;
      key.segments = {{part.count, part.sequence}};
      // Without the head every row goes on as a hidden state: one recording serves every mode.
      key.logits = m_spec.hasHead ? part.logits : runtime::LogitRows::All;
      key.select = select;
      key.decodeOrder = part.decodeOrder;
      runPass(batch, row + done, std::span(&part, 1), key, out);
      done += part.count;
    }
    row += segment.count;
  }
  m_book.commit(batch);
}

int32_t VulkanStage::truncate(int32_t sequence, int32_t fromPosition) {
  return m_book.truncate(sequence, fromPosition);
}

int32_t VulkanStage::cachedPositions(int32_t sequence) const { return m_book.cached(sequence); }

}  // namespace shoal::vulkan
