#include "kernels/cpu/cpu_stage.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {
namespace {

const float* f32Data(model::Tensor t) {
  return t ? reinterpret_cast<const float*>(t->data) : nullptr;
}

size_t sz(int64_t v) { return static_cast<size_t>(v); }

}  // namespace

CpuStage::CpuStage(const runtime::ModelSource& model, const runtime::StageSpec& spec,
                   std::shared_ptr<ThreadPool> pool)
    : m_config(*model.config), m_spec(spec), m_pool(std::move(pool)) {
  const model::ModelConfig& c = m_config;
  const model::ModelWeights& w = *model.weights;
  if (spec.firstLayer < 0 || spec.lastLayer > c.nLayer || spec.firstLayer > spec.lastLayer) {
    throw Error("CPU stage: layer range [" + std::to_string(spec.firstLayer) + ", " +
                std::to_string(spec.lastLayer) + ") is outside the model's " +
                std::to_string(c.nLayer) + " layers");
  }
  if (spec.contextLength <= 0 || spec.maxSequences <= 0 || spec.maxBatch <= 0) {
    throw Error("CPU stage: context length, sequences and batch must be positive");
  }
  for (int32_t i = spec.firstLayer; i < spec.lastLayer; ++i) {
    const model::LayerWeights& lw = w.layers[sz(i)];
    m_layers.push_back(Layer{f32Data(lw.attnNorm), WeightMatrix::from(*lw.wq),
                             WeightMatrix::from(*lw.wk), WeightMatrix::from(*lw.wv),
                             WeightMatrix::from(*lw.wo), f32Data(lw.bq), f32Data(lw.bk),
                             f32Data(lw.bv), f32Data(lw.ffnNorm), WeightMatrix::from(*lw.wGate),
                             WeightMatrix::from(*lw.wUp), WeightMatrix::from(*lw.wDown)});
  }
  if (spec.hasEmbedding) m_tokenEmbd = w.tokenEmbd;
  if (spec.hasHead) {
    m_outputNorm = f32Data(w.outputNorm);
    m_output = WeightMatrix::from(*w.output);
  }
  if (w.ropeFreqs) m_ropeFreqs.assign(f32Data(w.ropeFreqs), f32Data(w.ropeFreqs) + c.nRot / 2);

  m_attnShape.nHead = c.nHead;
  m_attnShape.nHeadKv = c.nHeadKv;
  m_attnShape.headDim = c.headDim;
  m_attnShape.contextLength = spec.contextLength;
  // llama.cpp's kq_scale for the llama family.
  m_attnShape.scale = 1.0f / std::sqrt(static_cast<float>(c.headDim));
  const size_t slots = m_layers.size() * sz(spec.maxSequences);
  // Zero-filled: value positions past the cached ones are read (times probability 0) by the
  // zero-padded dot products and must be finite.
  m_keys.resize(slots);
  m_values.resize(slots);
  for (size_t i = 0; i < slots; ++i) {
    m_keys[i].reset(sz(spec.contextLength) * sz(c.kvDim()));
    m_values[i].reset(sz(m_attnShape.valueStride()) * sz(c.kvDim()));
  }
  m_cached.assign(sz(spec.maxSequences), 0);

  const size_t b = sz(spec.maxBatch);
  m_x.reset(b * sz(c.nEmbd));
  m_norm.reset(b * sz(c.nEmbd));
  m_q.reset(b * sz(c.qDim()));
  m_k.reset(b * sz(c.kvDim()));
  m_v.reset(b * sz(c.kvDim()));
  m_attn.reset(b * sz(c.qDim()));
  m_gate.reset(b * sz(c.nFf));
  m_up.reset(b * sz(c.nFf));
  m_tmp.reset(b * sz(std::max(c.nEmbd, c.qDim())));
  m_halfRow.resize(sz(c.kvDim()));
  m_ropeCos.resize(b * sz(c.nRot / 2));
  m_ropeSin.resize(b * sz(c.nRot / 2));
  m_attnScratch.reserve(m_attnShape, m_pool->size());
  // Size the matmul scratch for the largest batch now, so forward() never allocates.
  for (const Layer& l : m_layers) {
    for (const WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.wGate, &l.wUp, &l.wDown}) {
      m_matmulScratch.reserve(*m, spec.maxBatch);
    }
  }
  if (m_output.data) m_matmulScratch.reserve(m_output, spec.maxBatch);
}

void CpuStage::checkInput(const runtime::StageInput& in) const {
  if (in.sequence < 0 || in.sequence >= m_spec.maxSequences) {
    throw Error("CPU stage: sequence " + std::to_string(in.sequence) + " out of range");
  }
  if (in.count <= 0 || in.count > m_spec.maxBatch) {
    throw Error("CPU stage: batch of " + std::to_string(in.count) + " tokens (max " +
                std::to_string(m_spec.maxBatch) + ")");
  }
  if (in.firstPosition < 0 || in.firstPosition > m_cached[sz(in.sequence)] ||
      in.firstPosition + in.count > m_spec.contextLength) {
    throw Error("CPU stage: positions [" + std::to_string(in.firstPosition) + ", " +
                std::to_string(in.firstPosition + in.count) + ") do not follow the " +
                std::to_string(m_cached[sz(in.sequence)]) +
                " cached positions within a context of " + std::to_string(m_spec.contextLength));
  }
  if (m_spec.hasEmbedding) {
    if (in.tokens.size() != sz(in.count)) throw Error("CPU stage: token count mismatch");
    for (int32_t t : in.tokens) {
      if (t < 0 || t >= m_config.nVocab) {
        throw Error("CPU stage: token id " + std::to_string(t) + " outside the vocabulary");
      }
    }
  } else if (in.hidden.size() != sz(in.count) * sz(m_config.nEmbd)) {
    throw Error("CPU stage: expected " + std::to_string(in.count) + " x " +
                std::to_string(m_config.nEmbd) + " hidden values, got " +
                std::to_string(in.hidden.size()));
  }
}

uint16_t* CpuStage::keyCache(size_t localLayer, int32_t sequence, int32_t position) {
  return m_keys[localLayer * sz(m_spec.maxSequences) + sz(sequence)].data() +
         sz(position) * sz(m_config.kvDim());
}

uint16_t* CpuStage::valueCache(size_t localLayer, int32_t sequence) {
  return m_values[localLayer * sz(m_spec.maxSequences) + sz(sequence)].data();
}

void CpuStage::forward(const runtime::StageInput& in, runtime::StageOutput& out) {
  checkInput(in);
  const model::ModelConfig& c = m_config;
  const int64_t n = in.count;

  if (m_spec.hasEmbedding) {
    embed(in);
  } else {
    std::memcpy(m_x.data(), in.hidden.data(), sz(n) * sz(c.nEmbd) * sizeof(float));
  }
  const int32_t half = c.nRot / 2;
  for (int64_t t = 0; t < n; ++t) {
    ropeAngles(in.firstPosition + static_cast<int32_t>(t), c,
               m_ropeFreqs.empty() ? nullptr : m_ropeFreqs.data(), &m_ropeCos[sz(t * half)],
               &m_ropeSin[sz(t * half)]);
  }
  for (size_t l = 0; l < m_layers.size(); ++l) runLayer(m_layers[l], l, in);
  m_cached[sz(in.sequence)] = in.firstPosition + in.count;

  if (m_spec.hasHead) {
    head(in, out);
  } else {
    out.hidden.assign(m_x.begin(), m_x.begin() + n * c.nEmbd);
  }
}

void CpuStage::embed(const runtime::StageInput& in) {
  const int64_t d = m_config.nEmbd;
  const size_t rowBytes = gguf::rowBytes(m_tokenEmbd->type, d);
  for (int64_t t = 0; t < in.count; ++t) {
    gguf::dequantizeRow(m_tokenEmbd->type, m_tokenEmbd->data + sz(in.tokens[sz(t)]) * rowBytes,
                        &m_x[sz(t * d)], d);
  }
}

// One transformer block, pre-norm:
//   x += Wo · attention(rope(Wq·norm(x)), rope(Wk·norm(x)), Wv·norm(x))
//   x += Wdown · (silu(Wgate·norm(x)) * Wup·norm(x))
void CpuStage::runLayer(const Layer& L, size_t localLayer, const runtime::StageInput& in) {
  const model::ModelConfig& c = m_config;
  const int64_t n = in.count, d = c.nEmbd, kv = c.kvDim(), qd = c.qDim();
  ThreadPool& pool = *m_pool;

  const int32_t layer = m_spec.firstLayer + static_cast<int32_t>(localLayer);
  for (int64_t t = 0; t < n; ++t)
    rmsNorm(&m_x[sz(t * d)], L.attnNorm, &m_norm[sz(t * d)], d, c.rmsEps);
  observe("attn_norm", layer, m_norm.data(), n, d);
  const MatmulJob qkv[] = {{&L.wq, m_q.data()}, {&L.wk, m_k.data()}, {&L.wv, m_v.data()}};
  matmul(qkv, m_norm.data(), n, pool, m_matmulScratch);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; L.bq && i < qd; ++i) m_q[sz(t * qd + i)] += L.bq[i];
    for (int64_t i = 0; L.bk && i < kv; ++i) m_k[sz(t * kv + i)] += L.bk[i];
    for (int64_t i = 0; L.bv && i < kv; ++i) m_v[sz(t * kv + i)] += L.bv[i];
    const float* cosv = &m_ropeCos[sz(t * (c.nRot / 2))];
    const float* sinv = &m_ropeSin[sz(t * (c.nRot / 2))];
    applyRope(&m_q[sz(t * qd)], c.nHead, c.headDim, c.nRot, c.ropeStyle, cosv, sinv);
    applyRope(&m_k[sz(t * kv)], c.nHeadKv, c.headDim, c.nRot, c.ropeStyle, cosv, sinv);
    // Keys and values enter the cache as f16 (round to nearest even), values transposed.
    const int32_t pos = in.firstPosition + static_cast<int32_t>(t);
    kernels().floatToHalf(&m_k[sz(t * kv)], keyCache(localLayer, in.sequence, pos), kv);
    kernels().floatToHalf(&m_v[sz(t * kv)], m_halfRow.data(), kv);
    uint16_t* vc = valueCache(localLayer, in.sequence);
    const int64_t vStride = m_attnShape.valueStride();
    for (int64_t i = 0; i < kv; ++i) vc[sz(i * vStride + pos)] = m_halfRow[sz(i)];
  }
  observe("Qcur", layer, m_q.data(), n, qd);
  observe("Kcur", layer, m_k.data(), n, kv);
  observe("Vcur", layer, m_v.data(), n, kv);
  attention(m_attnShape, m_q.data(), in.count, in.firstPosition,
            keyCache(localLayer, in.sequence, 0), valueCache(localLayer, in.sequence),
            m_attn.data(), pool, m_attnScratch);
  observe("kqv_out", layer, m_attn.data(), n, qd);
  matmul(L.wo, m_attn.data(), n, m_tmp.data(), pool, m_matmulScratch);
  observe("attn_out", layer, m_tmp.data(), n, d);

  // After the attention of the model's last layer only the rows that produce logits go on, as
  // in llama.cpp (inp_out_ids): with only the last token's logits wanted, the FFN sees one
  // token, which for F32/F16/BF16 weights also decides the dot order (kernel_table.h).
  const bool lastTokenOnly = layer == c.nLayer - 1 && m_spec.hasHead && !in.allLogits;
  const int64_t first = lastTokenOnly ? n - 1 : 0, rows = n - first;
  float* x = &m_x[sz(first * d)];
  const float* attnOut = &m_tmp[sz(first * d)];
  for (int64_t i = 0; i < rows * d; ++i) x[i] += attnOut[i];
  observe("ffn_inp", layer, x, rows, d);

  for (int64_t t = 0; t < rows; ++t) rmsNorm(&x[t * d], L.ffnNorm, &m_norm[sz(t * d)], d, c.rmsEps);
  observe("ffn_norm", layer, m_norm.data(), rows, d);
  gatedFfn(L.wGate, L.wUp, m_norm.data(), rows, m_gate.data(), m_up.data(), pool, m_matmulScratch);
  observe("ffn_swiglu", layer, m_gate.data(), rows, c.nFf);
  matmul(L.wDown, m_gate.data(), rows, m_tmp.data(), pool, m_matmulScratch);
  for (int64_t i = 0; i < rows * d; ++i) x[i] += m_tmp[sz(i)];
  observe("l_out", layer, x, rows, d);
}

void CpuStage::head(const runtime::StageInput& in, runtime::StageOutput& out) {
  const model::ModelConfig& c = m_config;
  const int64_t d = c.nEmbd;
  const int64_t first = in.allLogits ? 0 : in.count - 1;
  const int64_t rows = in.count - first;
  for (int64_t t = 0; t < rows; ++t) {
    rmsNorm(&m_x[sz((first + t) * d)], m_outputNorm, &m_norm[sz(t * d)], d, c.rmsEps);
  }
  observe("result_norm", -1, m_norm.data(), rows, d);
  out.logits.resize(sz(rows) * sz(c.nVocab));
  matmul(m_output, m_norm.data(), rows, out.logits.data(), *m_pool, m_matmulScratch);
  observe("result_output", -1, out.logits.data(), rows, c.nVocab);
}

void CpuStage::truncate(int32_t sequence, int32_t fromPosition) {
  if (sequence < 0 || sequence >= m_spec.maxSequences) {
    throw Error("CPU stage: sequence " + std::to_string(sequence) + " out of range");
  }
  m_cached[sz(sequence)] = std::clamp(fromPosition, 0, m_cached[sz(sequence)]);
}

int32_t CpuStage::cachedPositions(int32_t sequence) const {
  if (sequence < 0 || sequence >= m_spec.maxSequences) return 0;
  return m_cached[sz(sequence)];
}

}  // namespace shoal::cpu
