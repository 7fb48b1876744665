#include "kernels/cpu/cpu_stage.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "engine/model/architecture.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu {
namespace {

using model::Buffer;
using model::TensorRole;

size_t sz(int64_t v) { return static_cast<size_t>(v); }

model::Tensor required(const model::ModelWeights& w, TensorRole role) {
  if (!w[role]) {
    throw Error("CPU stage: the model's " + std::string(model::tensorRoleName(role)) +
                " tensor is not loaded");
  }
  return w[role];
}

}  // namespace

CpuStage::CpuStage(const runtime::ModelSource& model, const runtime::StageSpec& spec,
                   std::shared_ptr<ThreadPool> pool)
    : m_config(*model.config),
      m_spec(spec),
      m_book("CPU stage", spec, m_config.nLayer, m_config.nVocab, m_config.nEmbd) {
  const model::ModelConfig& c = m_config;
  const model::ModelWeights& w = *model.weights;
  const model::Architecture& arch = model::architectureOf(c);
  // rope_freqs.weight (llama 3.1) or LongRoPE's factors for this context length (phi3), for the
  // Rope ops that ask for frequency factors.
  const model::Tensor ropeFreqs = w.ropeFactors(c, spec.contextLength);
  const float* freqFactors = ropeFreqs && ropeFreqs->type == gguf::TensorType::F32
                                 ? reinterpret_cast<const float*>(ropeFreqs->data)
                                 : nullptr;

  std::vector<model::RopeParams> ropes;
  for (int32_t i = spec.firstLayer; i < spec.lastLayer; ++i) {
    LayerBinding b;
    b.config = &c;
    b.weights = &w.layers[sz(i)];
    b.layer = i;
    b.keepOutputRows = spec.hasHead && i == c.nLayer - 1;
    b.contextLength = spec.contextLength;
    b.sequences = spec.maxSequences;
    b.ropeFreqs = freqFactors;
    b.ropeFreqCount = freqFactors ? ropeFreqs->elementCount() : 0;
    m_layers.push_back(bindLayer(arch.layerProgram(c, i), b, ropes));
    const AttentionShape& a = m_layers.back().attention;
    if (a.ringPeriod > 0) m_book.keepRing(a.ringPeriod, a.window);
  }
  if (spec.hasEmbedding) m_tokenEmbd = required(w, TensorRole::TokenEmbd);
  if (spec.hasHead) {
    m_outputNorm = reinterpret_cast<const float*>(required(w, TensorRole::OutputNorm)->data);
    m_output = WeightMatrix::from(*required(w, TensorRole::Output));
  }
  if (m_tokenEmbd) m_tokenEmbdData = m_tokenEmbd->data;
  m_runner = std::make_unique<LayerRunner>(m_layers, c.nEmbd, std::move(ropes), freqFactors,
                                           spec.maxBatch, std::move(pool));
  // Sized for the largest batch now, so that a batch never allocates.
  if (m_output.data) m_runner->addHeadMatrix(m_output, spec.maxBatch);
  // Last: from here on the copying thread may adopt units (under m_adoptMutex).
  startWeightCopy(model);
}

uint64_t CpuStage::kvCacheBytes() const {
  uint64_t bytes = 0;
  for (const CpuLayer& l : m_layers) {
    for (const auto& k : l.keys) bytes += k.size() * sizeof(uint16_t);
    for (const auto& v : l.values) bytes += v.size() * sizeof(uint16_t);
  }
  return bytes;
}

CpuStage::~CpuStage() {
  m_weights.stop();  // its thread may be adopting units into the members destroyed below
}

// Every tensor of the stage's layers and head (matrices, norms, biases) is copied into huge
// pages (weight_arena.h) in the background, one tensor per unit, and each unit, once copied, is
// adopted (adoptUnit) between forward passes or between layers. Why a unit per tensor: the
// mapping's pages are given back as each chunk is copied, but a pass that reads a tensor before
// it is adopted faults them back in, so the peak RSS is one copy plus at most the largest
// tensor (given back again when it is adopted). Why the head first: the first forward pass reaches
// it last, so it usually finds the head already adopted and never faults the head's mapping pages
// in (the tied embedding/output is a stage's largest tensor); the head is copied at normal
// priority for that, the layers at the lowest (weight_arena.cpp): a pass that reads a tensor while
// it is being copied faults its released pages back in, and a slow copy of the head did that to
// up to 107 MB (peak RSS 1.07x llama.cpp's on Q8_0). Small tensors are copied too: reading
// a norm from the mapping would map the file's whole (up to 2 MiB) page-cache folio around it. What
// stays in the mapping: the rows of an untied token embedding (a row per token, as in llama.cpp)
// and the RoPE frequency factors (a few KiB the runner holds a pointer to). Without the copy
// everything stays there.
void CpuStage::startWeightCopy(const runtime::ModelSource& model) {
  const model::ModelWeights& w = *model.weights;
  m_file = model.file;
  const size_t head = m_layers.size();
  auto add = [this](size_t reader, model::Tensor t) {
    if (!t) return;
    WeightArena::Transform group;
    size_t granule = 0;
    if (groupable(*t)) {
      const WeightKind kind = weightKind(t->type);
      const int64_t cols = t->dims[0];
      const size_t rowBytes = gguf::rowBytes(t->type, cols);
      granule = rowBytes * kGroupRows;
      // Piece by piece as the copy goes: rows already grouped can be read from the copy while
      // the rest of the tensor is under way (followCopy).
      group = [kind, cols, rowBytes](uint8_t* copy, size_t bytes) {
        groupRows(kind, copy, static_cast<int64_t>(bytes / rowBytes), cols);
      };
    }
    m_weights.add(m_unitReader.size(), t->data, t->nbytes, std::move(group), granule);
    m_unitReader.push_back(reader);
  };
  if (m_spec.hasHead) {
    add(head, w[TensorRole::Output]);
    add(head, w[TensorRole::OutputNorm]);
  }
  m_unitsOfHead = m_unitReader.size();
  for (int32_t i = m_spec.firstLayer; i < m_spec.lastLayer; ++i) {
    for (model::Tensor t : w.layers[sz(i)].byRole) add(sz(i - m_spec.firstLayer), t);
  }
  // The copying thread adopts what it copied unless a forward pass holds the lock (that pass
  // adopts it at its next layer boundary); after the last unit it waits for the lock, so that
  // nothing copied is left unadopted while the stage is idle. Each chunk's mapping pages are
  // given back as soon as it is copied.
  m_weights.start(
      [this](size_t, bool last) {
        std::unique_lock lock(m_adoptMutex, std::defer_lock);
        if (last) {
          lock.lock();
        } else if (!lock.try_lock()) {
          return;
        }
        adoptCopiedWeights();
      },
      [this](const uint8_t* p, size_t n) { releaseMapping(p, n); }, m_unitsOfHead);
}

bool CpuStage::groupable(const gguf::TensorInfo& t) const {
  if (t.dims.size() < 2 || !hasRowGroups(t.type)) return false;
  // SHOAL_CPU_WEIGHTS=plain: the copy keeps the file layout (to measure what the groups buy).
  if (const char* mode = std::getenv("SHOAL_CPU_WEIGHTS"); mode && std::string(mode) == "plain") {
    return false;
  }
  const WeightKind kind = weightKind(t.type);
  if (!hasRowGroups(kind) || !kernels().rowGroups[static_cast<int>(kind)]) return false;
  const size_t rowBytes = gguf::rowBytes(t.type, t.dims[0]);
  const size_t groupBytes = rowBytes * kGroupRows;
  if (t.nbytes % groupBytes != 0) return false;
  const auto begin = reinterpret_cast<uintptr_t>(t.data), end = begin + t.nbytes;
  bool whole = true;
  auto check = [&](const WeightMatrix& m) {
    const auto p = reinterpret_cast<uintptr_t>(m.data);
    if (p < begin || p >= end) return;
    whole = whole && m.rowBytes == rowBytes && (p - begin) % groupBytes == 0 &&
            m.rows % kGroupRows == 0;
  };
  for (const CpuLayer& layer : m_layers) {
    for (const BoundOp& op : layer.ops) {
      for (const WeightMatrix& m : op.matrices) check(m);
      for (const ExpertMatrices& e : op.experts) {
        if (e.first.data) check(e.first);
      }
    }
  }
  if (m_output.data) check(m_output);
  return whole;
}

void CpuStage::releaseMapping(const uint8_t* p, size_t bytes) const {
  if (m_file) m_file->releasePages(p, bytes);
}

void CpuStage::waitForWeightCopy() {
  m_weights.wait();
  const std::lock_guard lock(m_adoptMutex);
  adoptCopiedWeights();
}

size_t CpuStage::weightUnitsInCopy() {
  const std::lock_guard lock(m_adoptMutex);
  return m_adoptedUnits;
}

void CpuStage::adoptCopiedWeights() {
  const size_t copied = m_weights.copiedUnits();
  for (; m_adoptedUnits < copied; ++m_adoptedUnits) adoptUnit(m_adoptedUnits);
  followCopy();
}

// The unit being copied has its source pages given back chunk by chunk as they are copied; a
// pass that read them from the mapping would fault them back in, holding that tensor twice
// until the unit is adopted (the head, the largest tensor, copied while the first passes run,
// took peak RSS up to 1.09x the mapping's alone on the 1B Q8_0 model). So its matrices read the
// rows already copied from the copy; a tensor going into row groups is grouped chunk by chunk as
// it is copied, and its matrices read the grouped rows there. Experts and the embedding rows
// still read the mapping.
void CpuStage::followCopy() {
  const size_t unit = m_weights.copiedUnits();
  if (unit >= m_unitReader.size()) return;
  auto follow = [this](WeightMatrix& m) {
    if (m.data == nullptr || m.rowGroups) return;
    const uint8_t* copy = nullptr;
    bool grouped = false;
    const size_t bytes =
        m_weights.copiedPrefix(m.data, m.rowBytes * static_cast<size_t>(m.rows), &copy, &grouped);
    // A grouped prefix comes in whole groups (the transform's granule; the matrix starts on one).
    const auto rows = static_cast<int64_t>(bytes / m.rowBytes);
    if (rows > m.copiedRows) {
      m.copied = copy;
      m.copiedRows = rows;
      m.copiedRowGroups = grouped;
    }
  };
  const size_t reader = m_unitReader[unit];
  if (reader < m_layers.size()) {
    for (BoundOp& op : m_layers[reader].ops) {
      for (WeightMatrix& m : op.matrices) follow(m);
    }
  } else {
    follow(m_output);
  }
}

// Points the unit's readers at the copy and gives the mapping's pages for it back. The readers
// are a layer's ops (or the head), all of whose pointers are remapped: those into units already
// adopted or not yet copied come back unchanged (remap leaves addresses outside the copied
// units' sources alone, and the copy lies outside every source).
void CpuStage::adoptUnit(size_t unit) {
  auto floats = [this](const float* p) {
    return reinterpret_cast<const float*>(m_weights.remap(reinterpret_cast<const uint8_t*>(p)));
  };
  // A matrix that moves to a tensor the copy put into row groups learns so as it moves. (Any
  // copied unit moves here, not only this one: a layer's ops are remapped together.)
  auto move = [this](WeightMatrix& m) {
    const uint8_t* to = m_weights.remap(m.data);
    if (to == m.data) return;
    if (m_weights.transformed(m.data)) m.rowGroups = true;
    m.data = to;
    m.copied = nullptr;  // all of it is in the copy now
    m.copiedRows = 0;
    m.copiedRowGroups = false;
  };
  const size_t reader = m_unitReader[unit];
  if (reader < m_layers.size()) {
    for (BoundOp& op : m_layers[reader].ops) {
      for (WeightMatrix& m : op.matrices) move(m);
      for (ExpertMatrices& e : op.experts) move(e.first);
      for (const float*& bias : op.moeBiases) bias = floats(bias);
      op.vector = floats(op.vector);
    }
  } else {
    move(m_output);
    m_outputNorm = floats(m_outputNorm);
    // A tied embedding is the output matrix: its rows are read from the copy too.
    const uint8_t* embd = m_weights.remap(m_tokenEmbdData);
    if (embd != m_tokenEmbdData && m_weights.transformed(m_tokenEmbdData)) {
      m_tokenEmbdGrouped = true;
    }
    m_tokenEmbdData = embd;
  }
  m_weights.forEachRange(unit, [this](const uint8_t* p, size_t n) { releaseMapping(p, n); });
}

// The forward pass: rows in, each layer's program, rows (or logits) out.
void CpuStage::run(const runtime::Batch& batch, runtime::StageOutput& out) {
  const std::lock_guard lock(m_adoptMutex);
  adoptCopiedWeights();
  m_book.check(batch);
  LayerRunner& r = *m_runner;
  r.begin(batch);
  if (m_spec.hasEmbedding) {
    embed(batch.tokens);
  } else {
    std::memcpy(r.buffer(Buffer::X), batch.hidden.data(), batch.hidden.size() * sizeof(float));
  }
  for (CpuLayer& layer : m_layers) {
    adoptCopiedWeights();  // one atomic load when nothing new was copied
    r.run(layer);
  }
  adoptCopiedWeights();
  if (m_spec.hasHead) {
    head(out);
  } else {
    const float* x = r.buffer(Buffer::X);
    out.hidden.assign(x, x + r.rows() * m_config.nEmbd);
  }
  out.tokens.clear();  // never samples: the caller does
  m_book.commit(batch);
}

void CpuStage::embed(std::span<const int32_t> tokens) {
  const int64_t d = m_config.nEmbd;
  const size_t rowBytes = gguf::rowBytes(m_tokenEmbd->type, d);
  float* x = m_runner->buffer(Buffer::X);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const uint8_t* row = m_tokenEmbdData + sz(tokens[t]) * rowBytes;
    if (m_tokenEmbdGrouped) {
      m_embedRow.resize(rowBytes);
      ungroupRow(weightKind(m_tokenEmbd->type), m_tokenEmbdData, d, tokens[t], m_embedRow.data());
      row = m_embedRow.data();
    }
    gguf::dequantizeRow(m_tokenEmbd->type, row, x + sz(d) * t, d);
  }
}

// Final norm and output projection of the rows whose logits are wanted, in row order.
void CpuStage::head(runtime::StageOutput& out) {
  LayerRunner& r = *m_runner;
  const int64_t d = m_config.nEmbd;
  if (!r.keptOutputRows()) {  // a head stage without layers: choose the rows here
    std::array<bool, model::kBufferCount> live{};
    live[static_cast<size_t>(Buffer::X)] = true;
    BufferWidths width{};
    width[static_cast<size_t>(Buffer::X)] = d;
    r.keepOutputRows(live, width);
  }
  const int64_t rows = r.rows();
  out.logits.resize(sz(rows) * sz(m_config.nVocab));
  if (rows == 0) return;
  const float* x = r.buffer(Buffer::X);
  float* norm = r.buffer(Buffer::Norm);
  for (int64_t t = 0; t < rows; ++t) {
    rmsNorm(x + t * d, m_outputNorm, norm + t * d, d, m_config.rmsEps);
  }
  r.observe("result_norm", -1, norm, rows, d);
  const int64_t vocab = m_config.nVocab;
  for (const LayerRunner::RowRun& run : r.runs()) {
    matmul(m_output, norm + run.first * d, run.rows, out.logits.data() + run.first * vocab,
           r.pool(), r.matmulScratch(), run.orderTokens);
  }
  if (const float cap = m_config.finalLogitSoftcap; cap > 0) {
    // ggml_scale(1 / cap), ggml_tanh, ggml_scale(cap): three roundings, in that order.
    const float invCap = 1.0f / cap;
    for (float& l : out.logits) l = std::tanh(l * invCap) * cap;
  }
  r.observe("result_output", -1, out.logits.data(), rows, m_config.nVocab);
}

}  // namespace shoal::cpu
