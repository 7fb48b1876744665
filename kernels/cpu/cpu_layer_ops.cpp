#include "kernels/cpu/cpu_layer_ops.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/error.h"
#include "engine/model/kv_ring.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {
namespace {

using model::Buffer;
using model::OpKind;

size_t sz(int64_t v) { return static_cast<size_t>(v); }
size_t idx(Buffer b) { return static_cast<size_t>(b); }

}  // namespace

LayerRunner::LayerRunner(std::span<const CpuLayer> layers, int64_t nEmbd,
                         std::vector<model::RopeParams> ropes, const float* ropeFreqs,
                         int32_t maxBatch, std::shared_ptr<ThreadPool> pool)
    : m_pool(std::move(pool)), m_ropeFreqs(ropeFreqs) {
  const size_t rows = sz(maxBatch);
  BufferWidths widest{};
  widest[idx(Buffer::X)] = widest[idx(Buffer::Norm)] = nEmbd;  // embedding and head
  int64_t widestKv = 0;
  for (const CpuLayer& layer : layers) {
    for (const BoundOp& op : layer.ops) {
      for (size_t b = 0; b < model::kBufferCount; ++b) widest[b] = std::max(widest[b], op.width[b]);
      for (const WeightMatrix& m : op.matrices) {
        if (!m.data) continue;
        m_matmulScratch.reserve(m, maxBatch);
        m_runsInFours = m_runsInFours || splitsTokensInFours(m);
      }
    }
    widestKv = std::max<int64_t>(widestKv, layer.attention.kvDim());
  }
  for (size_t b = 0; b < model::kBufferCount; ++b) m_buffers[b].reset(rows * sz(widest[b]));
  m_halfRow.resize(sz(widestKv));
  // MoE layers: the router's rows, each (row, expert)'s output, and one expert group's rows.
  int64_t experts = 0, used = 0, width = 0, out = 0;
  for (const CpuLayer& layer : layers) {
    for (const BoundOp& op : layer.ops) {
      if (op.op.kind != model::OpKind::MoeFfn) continue;
      experts = std::max<int64_t>(experts, op.op.moe.experts);
      used = std::max<int64_t>(used, op.op.moe.used);
      width = std::max(width, op.experts[0].first.rows);
      out = std::max(out, op.experts[2].first.rows);
      for (const ExpertMatrices& e : op.experts) {
        m_matmulScratch.reserve(e.first, maxBatch * op.op.moe.used);
      }
    }
  }
  if (experts > 0) {
    m_moe.probs.reset(rows * sz(experts));
    m_moe.ranking.resize(sz(experts));
    m_moe.chosen.resize(rows * sz(used));
    m_moe.weights.resize(rows * sz(used));
    m_moe.routed.resize(rows * sz(used));
    m_moe.placeOf.resize(rows * sz(used));
    m_moe.nextFree.resize(sz(experts) * 2);
    m_moe.perExpert.resize(sz(experts) * 2 + 1);
    m_moe.segmentCount.resize(sz(experts));
    m_moe.tiles.reserve(sz(experts) * 2 * sz((std::max(width, out) + 15) / 16));
    m_moe.gate.reset(rows * sz(used) * sz(width));
    m_moe.up.reset(rows * sz(used) * sz(width));
    m_moe.down.reset(rows * sz(used) * sz(out));
  }
  // One scratch for every layer: sized for the longest value rows (a sliding-window layer's
  // ring is shorter than a global layer's whole context).
  const CpuLayer* longest = nullptr;
  for (const CpuLayer& l : layers) {
    if (!longest || l.attention.valueStride() > longest->attention.valueStride()) longest = &l;
  }
  if (longest) m_attnScratch.reserve(longest->attention, m_pool->size());
  for (const model::RopeParams& p : ropes) {
    const size_t half = sz(p.nRot / 2);
    m_ropes.push_back({p, std::vector<float>(rows * half), std::vector<float>(rows * half)});
  }
  m_positions.resize(rows);
  m_keep.resize(rows);
}

void LayerRunner::begin(const runtime::Batch& batch) {
  m_segments = batch.segments;
  m_rows = 0;
  m_keepCount = 0;
  m_kept = false;
  for (const runtime::Segment& s : batch.segments) {
    for (int32_t i = 0; i < s.count; ++i) {
      const bool kept = s.logits == runtime::LogitRows::All ||
                        (s.logits == runtime::LogitRows::Last && i + 1 == s.count);
      if (kept) m_keep[sz(m_keepCount++)] = static_cast<int32_t>(m_rows);
      m_positions[sz(m_rows++)] = s.firstPosition + i;
    }
  }
  buildRuns();
  for (RopeTable& r : m_ropes) {
    const int64_t half = r.params.nRot / 2;
    const float* factors = r.params.freqFactors ? m_ropeFreqs : nullptr;
    for (int64_t t = 0; t < m_rows; ++t) {
      ropeAngles(m_positions[sz(t)], r.params, factors, &r.cos[sz(t * half)], &r.sin[sz(t * half)]);
    }
  }
}

// The layer, op by op. A batch whose rows all went at KeepOutputRows (no logits wanted from
// it) has nothing left to compute.
void LayerRunner::run(CpuLayer& layer) {
  for (const BoundOp& op : layer.ops) {
    if (m_rows == 0) return;
    switch (op.op.kind) {
      case OpKind::RmsNorm:
        rmsNorm(op);
        break;
      case OpKind::Project:
        project(op);
        break;
      case OpKind::AddBias:
        addBias(op);
        break;
      case OpKind::HeadNorm:
        headNorm(op);
        break;
      case OpKind::Rope:
        rope(op);
        break;
      case OpKind::Attend:
        attend(op, layer);
        break;
      case OpKind::KeepOutputRows:
        keepOutputRows(op.live, op.width);
        break;
      case OpKind::Add:
        add(op);
        break;
      case OpKind::GatedFfn:
        gatedFfn(op);
        break;
      case OpKind::MoeFfn:
        moeFfn(op, layer.index);
        break;
      case OpKind::Scale:
        scale(op);
        break;
    }
    if (!op.observed.empty()) {
      observe(op.observed, layer.index, buffer(op.op.dst), m_rows, op.width[idx(op.op.dst)]);
    }
  }
}

// dst = rmsnorm(src) * weight, row by row.
void LayerRunner::rmsNorm(const BoundOp& op) {
  const int64_t n = op.width[idx(op.op.src)];
  const float* src = buffer(op.op.src);
  float* dst = buffer(op.op.dst);
  for (int64_t t = 0; t < m_rows; ++t) {
    cpu::rmsNorm(src + t * n, op.vector, dst + t * n, n, op.op.eps);
  }
}

// Each output = its weight · src, with src converted once for all of them.
void LayerRunner::project(const BoundOp& op) {
  std::array<MatmulJob, 3> jobs{};
  for (uint8_t i = 0; i < op.op.outCount; ++i) {
    jobs[i] = {&op.matrices[i], buffer(op.op.outs[i].dst)};
  }
  const int64_t in = op.matrices[0].cols;
  for (const RowRun& run : m_runs) {
    std::array<MatmulJob, 3> part = jobs;
    for (uint8_t i = 0; i < op.op.outCount; ++i) part[i].y += run.first * op.matrices[i].rows;
    matmul(std::span(part.data(), op.op.outCount), buffer(op.op.src) + run.first * in, run.rows,
           *m_pool, m_matmulScratch, run.orderTokens);
  }
}

// dst += bias, row by row (qwen2's Q/K/V biases).
void LayerRunner::addBias(const BoundOp& op) {
  const int64_t n = op.width[idx(op.op.dst)];
  float* dst = buffer(op.op.dst);
  for (int64_t t = 0; t < m_rows; ++t) {
    for (int64_t i = 0; i < n; ++i) dst[t * n + i] += op.vector[i];
  }
}

// rmsnorm over each head's row of headDim values, times the head-wide weight (ggml_rms_norm on
// the [headDim, heads, rows] view, then ggml_mul): qwen3's Q/K norms.
void LayerRunner::headNorm(const BoundOp& op) {
  const int64_t width = op.width[idx(op.op.dst)];
  const int64_t headDim = width / op.op.heads;
  float* dst = buffer(op.op.dst);
  for (int64_t head = 0; head < m_rows * op.op.heads; ++head) {
    float* v = dst + head * headDim;
    cpu::rmsNorm(v, op.vector, v, headDim, op.op.eps);
  }
}

// Each row's heads turned by the angles of the row's position.
void LayerRunner::rope(const BoundOp& op) {
  const RopeTable& table = m_ropes[sz(op.ropeTable)];
  const int64_t width = op.width[idx(op.op.dst)];
  const int32_t headDim = static_cast<int32_t>(width / op.op.heads);
  const int64_t half = table.params.nRot / 2;
  float* dst = buffer(op.op.dst);
  for (int64_t t = 0; t < m_rows; ++t) {
    applyRope(dst + t * width, op.op.heads, headDim, table.params, &table.cos[sz(t * half)],
              &table.sin[sz(t * half)]);
  }
}

// Per segment: its rows' keys and values into its sequence's cache (f16, round to nearest
// even; values transposed), then causal attention of its rows over that cache. A ring (a
// sliding-window layer, attention.h) takes a long segment in chunks, each written and then
// attended, so that writing never overtakes the window a row still reads.
void LayerRunner::attend(const BoundOp& op, CpuLayer& layer) {
  const AttentionShape& shape = layer.attention;
  const int64_t kv = shape.kvDim(), qd = op.width[idx(Buffer::Q)];
  const int64_t vStride = shape.valueStride(), ring = shape.ringPeriod;
  const float* q = buffer(Buffer::Q);
  const float* k = buffer(Buffer::K);
  const float* v = buffer(Buffer::V);
  float* out = buffer(Buffer::Attn);
  observe("Qcur", layer.index, q, m_rows, qd);
  observe("Kcur", layer.index, k, m_rows, kv);
  observe("Vcur", layer.index, v, m_rows, kv);
  const int64_t chunk =
      ring > 0 ? int64_t{model::kKvRingWriteChunk} : std::numeric_limits<int64_t>::max();
  int64_t row = 0;
  for (const runtime::Segment& s : m_segments) {
    uint16_t* keys = layer.keys[sz(s.sequence)].data();
    uint16_t* values = layer.values[sz(s.sequence)].data();
    for (int64_t done = 0; done < s.count;) {
      const int64_t n = std::min<int64_t>(chunk, s.count - done);
      for (int64_t t = row + done; t < row + done + n; ++t) {
        const int64_t pos = m_positions[sz(t)], slot = shape.keySlot(pos);
        for (int64_t g = 0; g < shape.nHeadKv; ++g) {
          kernels().floatToHalf(k + t * kv + g * shape.headDim,
                                keys + g * shape.keyHeadStride() + slot * shape.keyPositionStride(),
                                shape.headDim);
        }
        kernels().floatToHalf(v + t * kv, m_halfRow.data(), kv);
        for (int64_t i = 0; i < kv; ++i) values[i * vStride + slot] = m_halfRow[sz(i)];
        if (ring > 0) {
          for (int64_t i = 0; i < kv; ++i) values[i * vStride + slot + ring] = m_halfRow[sz(i)];
        }
      }
      // The order of the segment's dot products is the whole segment's, chunked or not.
      const int32_t order = s.decodeOrder ? 1 : s.count;
      attention(shape, q + (row + done) * qd, static_cast<int32_t>(n),
                s.firstPosition + static_cast<int32_t>(done), keys, values, out + (row + done) * qd,
                *m_pool, m_attnScratch, order);
      done += n;
    }
    row += s.count;
  }
}

int64_t LayerRunner::liveRows(const runtime::Segment& s) const {
  return !m_kept                                ? s.count
         : s.logits == runtime::LogitRows::All  ? s.count
         : s.logits == runtime::LogitRows::Last ? 1
                                                : 0;
}

void LayerRunner::buildRuns() {
  m_runs.clear();
  int64_t first = 0;
  for (const runtime::Segment& s : m_segments) {
    const int64_t rows = liveRows(s);
    if (rows == 0) continue;
    // dotOrder's thresholds: 2+ tokens (tinyBLAS) and 8+ (the K-quant tiled kernel). With a
    // repacked Q4_K or Q2_K matrix in the stage (m_runsInFours), a prompt segment joins the run
    // before it only if that run's rows are a multiple of 4: those kernels split a product's
    // tokens into whole fours and the rest (matmul.cpp, repackedGemmTokens), which must fall as
    // they would in each segment alone.
    const int64_t order = s.decodeOrder ? 1 : rows >= 8 ? 8 : rows >= 2 ? 2 : 1;
    if (!m_runs.empty() && m_runs.back().orderTokens == order &&
        (order == 1 || !m_runsInFours || m_runs.back().rows % 4 == 0)) {
      m_runs.back().rows += rows;
    } else {
      m_runs.push_back({first, rows, order});
    }
    first += rows;
  }
}

void LayerRunner::addHeadMatrix(const WeightMatrix& w, int32_t maxBatch) {
  m_matmulScratch.reserve(w, maxBatch);
  m_runsInFours = m_runsInFours || splitsTokensInFours(w);
}

void LayerRunner::keepOutputRows(const std::array<bool, model::kBufferCount>& live,
                                 const BufferWidths& width) {
  if (m_kept) return;
  m_kept = true;
  buildRuns();
  if (m_keepCount == m_rows) return;  // every row goes on
  for (int64_t k = 0; k < m_keepCount; ++k) {
    const int64_t from = m_keep[sz(k)];
    if (from == k) continue;
    for (size_t b = 0; b < model::kBufferCount; ++b) {
      if (!live[b]) continue;
      float* data = m_buffers[b].data();
      std::memcpy(data + k * width[b], data + from * width[b], sz(width[b]) * sizeof(float));
    }
    m_positions[sz(k)] = m_positions[sz(from)];
  }
  m_rows = m_keepCount;
}

// dst += src (the residual adds).
void LayerRunner::add(const BoundOp& op) {
  const int64_t n = m_rows * op.width[idx(op.op.dst)];
  const float* src = buffer(op.op.src);
  float* dst = buffer(op.op.dst);
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// dst *= factor (ggml_scale: one multiply per value).
void LayerRunner::scale(const BoundOp& op) {
  const int64_t n = m_rows * op.width[idx(op.op.dst)];
  float* dst = buffer(op.op.dst);
  for (int64_t i = 0; i < n; ++i) dst[i] *= op.op.factor;
}

// Gate = act(Wgate · src) * (Wup · src), fused (matmul.h).
void LayerRunner::gatedFfn(const BoundOp& op) {
  const int64_t in = op.matrices[0].cols, n = op.matrices[0].rows;
  for (const RowRun& run : m_runs) {
    cpu::gatedFfn(op.matrices[0], op.matrices[1], buffer(op.op.src) + run.first * in, run.rows,
                  buffer(Buffer::Gate) + run.first * n, buffer(Buffer::Up) + run.first * n, *m_pool,
                  m_matmulScratch, run.orderTokens, op.op.activation);
  }
}

}  // namespace shoal::cpu
