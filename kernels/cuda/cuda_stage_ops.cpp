// CudaStage's forward pass: the embedding, then each layer's program as a loop over its ops (one
// function per op kind below), then the head. Everything here only enqueues work on the stream,
// so the same code records the decode graph under stream capture.

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_stage.h"

namespace shoal::cuda {
namespace {

using model::Buffer;
using model::OpKind;

size_t sz(int64_t v) { return static_cast<size_t>(v); }

bool isFloat(gguf::TensorType type) {
  return type == gguf::TensorType::F16 || type == gguf::TensorType::BF16 ||
         type == gguf::TensorType::F32;
}

GateActivation gateActivationOf(model::Activation a) {
  switch (a) {
    case model::Activation::GeluTanh:
      return GateActivation::GeluTanh;
    case model::Activation::SwigluOai:
      return GateActivation::SwigluOai;
    case model::Activation::Silu:
      break;
  }
  return GateActivation::Silu;
}

}  // namespace

void CudaStage::enqueue(int32_t sequence, int64_t count, runtime::LogitRows logits) {
  const model::ModelConfig& c = m_config;
  m_firstRow = 0;
  m_rows = count;
  m_kept = false;
  m_logitRows = logits;
  if (m_spec.hasEmbedding) {
    gatherRows(m_tokenEmbd.type, m_tokenEmbd.data, m_tokens, count, c.nEmbd, m_tokenEmbd.rowBytes,
               m_buffers[size_t(Buffer::X)], m_stream);
  }
  // Ops of a layer's program already run with the previous layer's last op (a residual add
  // fused with the norm that opens the next layer).
  size_t runAhead = 0;
  for (size_t l = 0; l < m_layers.size(); ++l) {
    const CudaLayer& layer = m_layers[l];
    const CudaLayer* nextLayer = l + 1 < m_layers.size() ? &m_layers[l + 1] : nullptr;
    // The op `ahead` places after op i, into the next layer's program where this one ends.
    auto opAt = [&](size_t i, size_t ahead) -> const CudaOp* {
      const size_t j = i + ahead;
      if (j < layer.ops.size()) return &layer.ops[j];
      const size_t k = j - layer.ops.size();
      return nextLayer && k < nextLayer->ops.size() ? &nextLayer->ops[k] : nullptr;
    };
    m_kvStored = false;
    size_t i = runAhead;
    runAhead = 0;
    for (; i < layer.ops.size(); ++i) {
      if (m_rows == 0) break;  // no row of the model's last layer produces logits
      const CudaOp& op = layer.ops[i];
      const CudaOp* next = opAt(i, 1);
      if (const size_t attend = fusedRopeStoreEnd(layer, i); attend > 0) {
        ropeStoreOp(op, layer.ops[i + 1], layer, sequence);
        ++i;  // the keys' RoPE ran too
        m_quantizedFrom = nullptr;
        continue;
      }
      // The residual add, the norm after it (maybe the next layer's first op) and the norm's
      // quantization in one launch.
      if (next && op.op.kind == OpKind::Add && next->op.src == op.op.dst &&
          bufferWidth(op.op.src, m_config, layer.kvDim) ==
              bufferWidth(op.op.dst, m_config, layer.kvDim) &&
          quantizesForNext(*next, opAt(i, 2))) {
        const bool sameLayer = i + 1 < layer.ops.size();
        const CudaLayer& normLayer = sameLayer ? layer : *nextLayer;
        const int64_t n = bufferWidth(op.op.dst, m_config, layer.kvDim);
        addRmsNormQuantize(buffer(op.op.dst, layer), buffer(op.op.src, layer), next->vector,
                           buffer(next->op.dst, normLayer), m_rows, n, next->op.eps, m_xq, m_xds,
                           m_stream);
        m_quantizedFrom = buffer(next->op.dst, normLayer);
        if (sameLayer) {
          ++i;  // the norm ran too
        } else {
          runAhead = 1;
        }
        continue;
      }
      if (quantizesForNext(op, next)) {
        // The norm's output quantized in the same launch; the next op's products read it.
        rmsNormQuantize(buffer(op.op.src, layer), op.vector, buffer(op.op.dst, layer), m_rows,
                        bufferWidth(op.op.src, m_config, layer.kvDim), op.op.eps, m_xq, m_xds,
                        m_stream);
        m_quantizedFrom = buffer(op.op.dst, layer);
        continue;
      }
      runOp(op, layer, sequence);
      m_quantizedFrom = nullptr;  // only the op right after a fused norm may use it
    }
  }
  if (m_spec.hasHead) head();
}

// Whether ops[i] and ops[i + 1] are the queries' and keys' RoPE of an Attend that follows with
// nothing writing the keys or values in between: then ropeStoreOp rotates both and stores the
// keys and values in the cache in one launch, and the Attend skips its store. Returns the
// Attend's index, or 0.
size_t CudaStage::fusedRopeStoreEnd(const CudaLayer& layer, size_t i) const {
  const std::vector<CudaOp>& ops = layer.ops;
  if (!m_fused || i + 2 >= ops.size()) return 0;
  const model::Op &q = ops[i].op, &k = ops[i + 1].op;
  if (q.kind != OpKind::Rope || k.kind != OpKind::Rope || q.dst != Buffer::Q ||
      k.dst != Buffer::K || q.rope.nRot != k.rope.nRot || q.rope.style != k.rope.style ||
      int64_t{k.heads} * m_config.headDim != layer.kvDim) {
    return 0;
  }
  for (size_t j = i + 2; j < ops.size(); ++j) {
    const model::Op& op = ops[j].op;
    if (op.kind == OpKind::Attend) return j;
    bool writesKv = op.dst == Buffer::K || op.dst == Buffer::V;
    for (size_t o = 0; op.kind == OpKind::Project && o < size_t{op.outCount}; ++o) {
      writesKv = writesKv || op.outs[o].dst == Buffer::K || op.outs[o].dst == Buffer::V;
    }
    if (writesKv || op.kind == OpKind::KeepOutputRows) return 0;
  }
  return 0;
}

void CudaStage::ropeStoreOp(const CudaOp& q, const CudaOp& k, const CudaLayer& layer,
                            int32_t sequence) {
  auto shapeOf = [&](const model::Op& op) {
    RopeShape shape;
    shape.heads = op.heads;
    shape.headDim = m_config.headDim;
    shape.nRot = op.rope.nRot;
    shape.neox = op.rope.style == model::RopeStyle::Neox;
    return shape;
  };
  ropeStore(buffer(Buffer::Q, layer), buffer(Buffer::K, layer), buffer(Buffer::V, layer), m_rows,
            shapeOf(q.op), shapeOf(k.op), {q.rope.cos, q.rope.sin}, {k.rope.cos, k.rope.sin},
            keyCache(layer, sequence), valueCache(layer, sequence), layer.ring, m_position,
            m_stream);
  m_kvStored = true;
}

// A norm whose output the next op's quantized mat-vec products read (decode, and batches below
// the cuBLAS size): it quantizes that output itself (rmsNormQuantize), one launch fewer.
bool CudaStage::quantizesForNext(const CudaOp& op, const CudaOp* next) const {
  if (!m_fused || !next || op.op.kind != OpKind::RmsNorm || op.op.src == op.op.dst ||
      m_rows >= kCublasMinBatch || next->op.src != op.op.dst) {
    return false;
  }
  if (next->op.kind == OpKind::GatedFfn) return !isFloat(next->matrices[0].type);
  if (next->op.kind != OpKind::Project) return false;
  for (size_t i = 0; i < size_t{next->op.outCount}; ++i) {
    if (!isFloat(next->matrices[i].type)) return true;
  }
  return false;
}

void CudaStage::runOp(const CudaOp& op, const CudaLayer& layer, int32_t sequence) {
  switch (op.op.kind) {
    case OpKind::RmsNorm:
      return rmsNormOp(op, layer);
    case OpKind::Project:
      return projectOp(op, layer);
    case OpKind::AddBias:
      return addBiasOp(op, layer);
    case OpKind::HeadNorm:
      return headNormOp(op, layer);
    case OpKind::Rope:
      return ropeOp(op, layer);
    case OpKind::Attend:
      return attendOp(op, layer, sequence);
    case OpKind::KeepOutputRows:
      return keepOutputRowsOp(layer);
    case OpKind::Add:
      return addOp(op, layer);
    case OpKind::GatedFfn:
      return gatedFfnOp(op, layer);
    case OpKind::MoeFfn:
      return moeFfnOp(op, layer);
    case OpKind::Scale:
      return scaleOp(op, layer);
  }
}

void CudaStage::rmsNormOp(const CudaOp& o, const CudaLayer& layer) {
  rmsNorm(buffer(o.op.src, layer), o.vector, buffer(o.op.dst, layer), m_rows,
          bufferWidth(o.op.src, m_config, layer.kvDim), o.op.eps, m_stream);
}

void CudaStage::projectOp(const CudaOp& o, const CudaLayer& layer) {
  std::array<MatmulOut, 3> outs{};
  for (size_t i = 0; i < size_t{o.op.outCount}; ++i) {
    outs[i] = {&o.matrices[i], buffer(o.op.outs[i].dst, layer)};
  }
  matmuls(buffer(o.op.src, layer), std::span(outs.data(), o.op.outCount));
}

void CudaStage::addBiasOp(const CudaOp& o, const CudaLayer& layer) {
  addBias(buffer(o.op.dst, layer), o.vector, m_rows, bufferWidth(o.op.dst, m_config, layer.kvDim),
          m_stream);
}

// RMSNorm over each head: the buffer seen as rows x heads rows of headDim.
void CudaStage::headNormOp(const CudaOp& o, const CudaLayer& layer) {
  float* x = buffer(o.op.dst, layer);
  rmsNorm(x, o.vector, x, m_rows * o.op.heads, m_config.headDim, o.op.eps, m_stream);
}

void CudaStage::ropeOp(const CudaOp& o, const CudaLayer& layer) {
  RopeShape shape;
  shape.heads = o.op.heads;
  shape.headDim = m_config.headDim;
  shape.nRot = o.op.rope.nRot;
  shape.neox = o.op.rope.style == model::RopeStyle::Neox;
  // Positions are those of the segment's first row: resolveLayers refuses a Rope after
  // KeepOutputRows, so m_firstRow is 0 here.
  rope(buffer(o.op.dst, layer), m_rows, shape, o.rope.cos, o.rope.sin, m_position, m_stream);
}

// Append the rows' keys and values to the sequence's cache, then attend over the cache.
void CudaStage::attendOp(const CudaOp& o, const CudaLayer& layer, int32_t sequence) {
  const model::ModelConfig& c = m_config;
  __half* keys = keyCache(layer, sequence);
  __half* values = valueCache(layer, sequence);
  if (!m_kvStored) {  // else ropeStoreOp stored them
    storeKv(buffer(Buffer::K, layer), buffer(Buffer::V, layer), keys, values, m_rows, layer.kvDim,
            m_position, layer.ring, m_stream);
  }
  m_kvStored = false;
  AttentionParams p;
  p.nHead = c.nHead;
  p.nHeadKv = layer.kvDim / c.headDim;
  p.headDim = c.headDim;
  p.scale = o.op.attend.scale;
  // Decode splits the context; several rows take one split each (cuda_stage.h).
  p.chunk = m_rows == 1 ? kAttentionChunk : m_spec.contextLength;
  p.splits = m_rows == 1 ? m_attentionSplits : 1;
  // A window as long as the context hides nothing.
  p.window = o.op.attend.window < m_spec.contextLength ? o.op.attend.window : 0;
  p.ring = layer.ring;
  p.softcap = o.op.attend.softcap;
  p.sinks = o.op.attend.sinks ? o.vector : nullptr;
  p.tickets = m_fused ? m_attentionTickets : nullptr;
  attention(p, buffer(o.op.src, layer), keys, values, m_rows, m_position, m_partial,
            buffer(o.op.dst, layer), m_stream);
}

// Only the model's last layer narrows the rows, and only on the head stage: a stage without the
// head hands every row's hidden state on.
void CudaStage::keepOutputRowsOp(const CudaLayer& layer) {
  if (layer.last && m_spec.hasHead) keepLogitRows();
}

void CudaStage::addOp(const CudaOp& o, const CudaLayer& layer) {
  addInPlace(buffer(o.op.dst, layer), buffer(o.op.src, layer),
             m_rows * bufferWidth(o.op.dst, m_config, layer.kvDim), m_stream);
}

// Gate = act(Wgate · src) * (Wup · src); Up is scratch. A few rows of two matrices of one
// quantized type take the fused mat-vec (gate, up and the activation in one launch).
void CudaStage::gatedFfnOp(const CudaOp& o, const CudaLayer& layer) {
  float* gate = buffer(Buffer::Gate, layer);
  float* up = buffer(Buffer::Up, layer);
  const DeviceMatrix &wg = o.matrices[0], &wu = o.matrices[1];
  if (m_fused && m_rows < kCublasMinBatch && wg.type == wu.type && !isFloat(wg.type) &&
      wg.rowBytes == wu.rowBytes) {
    const float* src = buffer(o.op.src, layer);
    if (m_quantizedFrom != src) quantizeActivations(src, m_rows, wg.k, m_xq, m_xds, m_stream);
    matvecGated(wg.type, wg.data, wu.data, wg.rows, wg.k, wg.rowBytes,
                gateActivationOf(o.op.activation), m_xq, m_xds, m_rows, gate, m_stream);
    return;
  }
  const std::array<MatmulOut, 2> outs{{{&o.matrices[0], gate}, {&o.matrices[1], up}}};
  matmuls(buffer(o.op.src, layer), outs);
  activate(o.op.activation, gate, up, m_rows * m_config.nFf);
}

void CudaStage::activate(model::Activation activation, float* gate, const float* up, int64_t n) {
  switch (activation) {
    case model::Activation::Silu:
      return swiglu(gate, up, gate, n, m_stream);
    case model::Activation::GeluTanh:
      return geglu(gate, up, gate, n, m_stream);
    case model::Activation::SwigluOai:
      return swigluOai(gate, up, gate, n, m_stream);
  }
}

// dst = the routed experts' FFNs of src, weighted and summed (layer_program.h MoeFfn): the
// router's logits (plus its bias), the choice per token on the device, then gate and up for
// every (token, rank) entry from its expert's rows, the activation, down per entry, and the
// weighted sum. The expert products always take the mat-vec path, which reads only the chosen
// experts' rows (a batch's rows are not grouped per expert yet: correct, not yet fast for
// prefill).
void CudaStage::moeFfnOp(const CudaOp& o, const CudaLayer& layer) {
  const model::MoeParams& moe = o.op.moe;
  const CudaExperts& x = o.experts;
  const float* src = buffer(o.op.src, layer);
  const int64_t entries = m_rows * moe.used, ff = x.width;
  const DeviceMatrix &gates = x.matrices[0], &ups = x.matrices[1], &downs = x.matrices[2];
  const int64_t out = downs.rows / moe.experts;

  const MatmulOut route{&o.matrices[0], m_moe.logits};
  matmuls(src, std::span(&route, 1));
  if (moe.biases) addBias(m_moe.logits, x.biases[0], m_rows, moe.experts, m_stream);
  moeRoute(m_moe.logits, m_rows, moe.experts, moe.used,
           moe.gating == model::MoeGating::SoftmaxWeight, moe.normalizeWeights, m_moe.ids,
           m_moe.weights, m_stream);

  // Gate and up read the token's row (quantized once for both), down the entry's own row.
  quantizeActivations(src, m_rows, gates.k, m_xq, m_xds, m_stream);
  auto product = [&](const DeviceMatrix& w, int64_t rows, bool perEntry, const int8_t* xq,
                     const float2* xds, const float* xf, float* y, const float* bias) {
    matvecExperts(w.type, w.data, rows, w.k, w.rowBytes, m_moe.ids, entries, moe.used, perEntry, xq,
                  xds, xf, y, m_stream);
    if (bias) addExpertBias(bias, m_moe.ids, y, entries, rows, m_stream);
  };
  product(gates, ff, false, m_xq, m_xds, src, m_moe.gate, x.biases[1]);
  product(ups, ff, false, m_xq, m_xds, src, m_moe.up, x.biases[2]);
  activate(o.op.activation, m_moe.gate, m_moe.up, entries * ff);
  quantizeActivations(m_moe.gate, entries, ff, m_moe.xq, m_moe.xds, m_stream);
  product(downs, out, true, m_moe.xq, m_moe.xds, m_moe.gate, m_moe.down, x.biases[3]);
  moeCombine(m_moe.down, m_moe.weights, buffer(o.op.dst, layer), m_rows, moe.used, out, m_stream);
}

void CudaStage::scaleOp(const CudaOp& o, const CudaLayer& layer) {
  scale(buffer(o.op.dst, layer), o.op.factor, m_rows * bufferWidth(o.op.dst, m_config, layer.kvDim),
        m_stream);
}

void CudaStage::head() {
  if (!m_kept) keepLogitRows();  // a stage without the model's last layer
  if (m_rows == 0) return;
  const model::ModelConfig& c = m_config;
  float* x = m_buffers[size_t(Buffer::X)] + m_firstRow * c.nEmbd;
  float* norm = m_buffers[size_t(Buffer::Norm)] + m_firstRow * c.nEmbd;
  rmsNorm(x, m_outputNorm, norm, m_rows, c.nEmbd, c.rmsEps, m_stream);
  const MatmulOut out{&m_output, m_logits};
  matmuls(norm, std::span(&out, 1));
  if (c.finalLogitSoftcap > 0) softcap(m_logits, c.finalLogitSoftcap, m_rows * c.nVocab, m_stream);
}

void CudaStage::keepLogitRows() {
  m_kept = true;
  switch (m_logitRows) {
    case runtime::LogitRows::None:
      m_firstRow += m_rows;
      m_rows = 0;
      break;
    case runtime::LogitRows::Last:
      m_firstRow += m_rows - 1;
      m_rows = 1;
      break;
    case runtime::LogitRows::All:
      break;
  }
}

void CudaStage::matmuls(const float* x, std::span<const MatmulOut> outs) {
  const int64_t n = m_rows, k = outs.front().w->k;
  const bool gemm = n >= kCublasMinBatch && m_wHalf;
  // The input is converted once for every matrix that reads it: to f16 for cuBLAS, to int8
  // blocks for the quantized mat-vec kernels (F16/F32 matrices read the floats themselves).
  if (gemm) {
    floatToHalf(x, m_xHalf, n * k, m_stream);
  } else if (m_quantizedFrom != x && std::any_of(outs.begin(), outs.end(), [](const MatmulOut& o) {
               return !isFloat(o.w->type);
             })) {
    quantizeActivations(x, n, k, m_xq, m_xds, m_stream);
  }
  // Several quantized matrices of one type (Q, K and V) in one launch.
  const bool oneSet = m_fused && !gemm && outs.size() > 1 && outs.size() <= size_t{kMaxMatvecSet} &&
                      !isFloat(outs.front().w->type) &&
                      std::all_of(outs.begin(), outs.end(), [&](const MatmulOut& o) {
                        return o.w->type == outs.front().w->type && o.w->k == k;
                      });
  if (oneSet) {
    MatvecTarget targets[kMaxMatvecSet];
    for (size_t i = 0; i < outs.size(); ++i) {
      targets[i] = {outs[i].w->data, outs[i].w->rows, outs[i].w->rowBytes, outs[i].y};
    }
    matvecSet(outs.front().w->type, targets, static_cast<int>(outs.size()), k, m_xq, m_xds, n,
              m_stream);
    return;
  }
  for (const MatmulOut& o : outs) {
    const DeviceMatrix& w = *o.w;
    if (!gemm) {
      matvec(w.type, w.data, w.rows, w.k, w.rowBytes, m_xq, m_xds, x, n, o.y, m_stream);
      continue;
    }
    // Y (n x rows, row-major) = X (n x k) · W^T. In cuBLAS's column-major terms: W is k x rows
    // (lda = k), X is k x n (ldb = k), Y is rows x n (ldc = rows): Y = W^T X. A quantized W is
    // dequantized a tile of rows at a time (kHalfTileElements), each tile one GEMM into rows
    // [first, first + tile) of Y; the stream orders each tile's GEMM before the next tile
    // overwrites the scratch.
    const bool half = w.type == gguf::TensorType::F16;
    const int64_t tileRows = half ? w.rows : std::max<int64_t>(1, kHalfTileElements / w.k);
    for (int64_t first = 0; first < w.rows; first += tileRows) {
      const int64_t rows = std::min(tileRows, w.rows - first);
      const __half* wHalf = static_cast<const __half*>(w.data);
      if (!half) {
        dequantizeToHalf(w.type, static_cast<const uint8_t*>(w.data) + first * w.rowBytes, rows,
                         w.k, w.rowBytes, m_wHalf, m_stream);
        wHalf = m_wHalf;
      }
      const float alpha = 1.0f, beta = 0.0f;
      SHOAL_CUDA_CHECK(cublasGemmEx(
          m_cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(n),
          static_cast<int>(w.k), &alpha, wHalf, CUDA_R_16F, static_cast<int>(w.k), m_xHalf,
          CUDA_R_16F, static_cast<int>(w.k), &beta, o.y + first, CUDA_R_32F,
          static_cast<int>(w.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }
}

float* CudaStage::buffer(Buffer b, const CudaLayer& layer) const {
  return m_buffers[size_t(b)] + m_firstRow * bufferWidth(b, m_config, layer.kvDim);
}

__half* CudaStage::keyCache(const CudaLayer& layer, int32_t sequence) const {
  const size_t local = sz(layer.index - m_spec.firstLayer);
  const int64_t slot = int64_t{kvPositions(layer)} * layer.kvDim;
  return m_kv + m_kvBase[local] + sz(sequence) * 2 * sz(slot);
}

__half* CudaStage::valueCache(const CudaLayer& layer, int32_t sequence) const {
  return keyCache(layer, sequence) + int64_t{kvPositions(layer)} * layer.kvDim;
}

}  // namespace shoal::cuda
