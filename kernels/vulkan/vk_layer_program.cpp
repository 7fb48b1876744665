#include "kernels/vulkan/vk_layer_program.h"

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "engine/model/model_config.h"
#include "kernels/gpu_op_gaps.h"

namespace shoal::vulkan {
namespace {

using model::Buffer;
using model::Op;

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

[[noreturn]] void fail(const std::string& what) { throw Error("Vulkan layer program: " + what); }

}  // namespace

void checkProgram(const model::LayerProgram& program, int32_t layer, int32_t contextLength,
                  const RoleTensors& tensors) {
  const std::string where = "layer " + std::to_string(layer) + ": ";
  // The KV cache holds the context, or a sliding window's ring (kv_ring.h); a program that
  // bounds its cache itself (LayerProgram::window) would be sized otherwise by kv_footprint.h.
  if (program.window != 0 && program.window < contextLength) {
    fail(where +
         "sliding-window attention with a KV cache bounded by the program's own window has no "
         "Vulkan kernel");
  }
  auto need = [&](model::TensorRole role) {
    if (role == model::TensorRole::Count || !tensors[static_cast<size_t>(role)]) {
      fail(where + "the program reads " +
           (role == model::TensorRole::Count ? std::string("no weight")
                                             : std::string(model::tensorRoleName(role))) +
           ", which the stage does not hold");
    }
  };
  bool kept = false;
  for (const Op& op : program.ops) {
    if (const char* gap = kernels::gpuOpGap(op, kVulkanOps)) {
      fail(where + gap + ", which has no Vulkan kernels yet (the CPU backend runs it)");
    }
    switch (op.kind) {
      case model::OpKind::RmsNorm:
      case model::OpKind::AddBias:
      case model::OpKind::HeadNorm:
        need(op.weight);
        break;
      case model::OpKind::Project:
        if (op.outCount == 0 || op.outCount > op.outs.size()) {
          fail(where + "a projection with " + std::to_string(op.outCount) + " outputs");
        }
        for (uint8_t i = 0; i < op.outCount; ++i) {
          need(op.outs[i].weight);
          const model::ProjectOut& out = op.outs[i];
          const DeviceMatrix& w = *tensors[static_cast<size_t>(out.weight)];
          if (out.firstRow < 0 || out.rows < 0 || out.firstRow + out.rows > w.rows) {
            fail(where + "rows [" + std::to_string(out.firstRow) + ", +" +
                 std::to_string(out.rows) + ") of " +
                 std::string(model::tensorRoleName(out.weight)) + ", which has " +
                 std::to_string(w.rows));
          }
        }
        break;
      case model::OpKind::GatedFfn:
        need(op.ffn[0]);
        if (!op.fusedGateUp) need(op.ffn[1]);
        break;
      case model::OpKind::MoeFfn:
        need(model::TensorRole::GateInp);
        need(model::TensorRole::GateExps);
        need(model::TensorRole::UpExps);
        need(model::TensorRole::DownExps);
        if (op.moe.biases) {
          need(model::TensorRole::GateInpBias);
          need(model::TensorRole::GateExpsBias);
          need(model::TensorRole::UpExpsBias);
          need(model::TensorRole::DownExpsBias);
        }
        if (op.activation != model::Activation::Silu &&
            op.activation != model::Activation::SwigluOai) {
          fail(where + "an expert activation without a Vulkan kernel");
        }
        if (op.moe.experts > 256) fail(where + "more than 256 experts");
        break;
      case model::OpKind::Scale:
        break;
      case model::OpKind::Rope:
      case model::OpKind::Attend:
        // The kernels take positions from the first row on: all rows must still be in play.
        if (kept) fail(where + "RoPE or attention after KeepOutputRows");
        if (op.kind == model::OpKind::Attend && op.attend.sinks) need(model::TensorRole::AttnSinks);
        break;
      case model::OpKind::KeepOutputRows:
        kept = true;
        break;
      case model::OpKind::Add:
        break;
    }
  }
}

std::array<uint32_t, model::kBufferCount> bufferWidths(const model::ModelConfig& c) {
  std::array<uint32_t, model::kBufferCount> w{};
  auto set = [&](Buffer b, int64_t floats) { w[static_cast<size_t>(b)] = u32(floats); };
  set(Buffer::X, c.nEmbd);
  set(Buffer::Norm, c.nEmbd);
  set(Buffer::Q, c.qDim());
  set(Buffer::K, c.kvDim());
  set(Buffer::V, c.kvDim());
  set(Buffer::Attn, c.qDim());
  set(Buffer::Tmp, std::max(c.nEmbd, c.qDim()));
  const int64_t ff = std::max<int64_t>(c.nFf, int64_t{c.nExpertUsed} * c.nFfExp);
  set(Buffer::Gate, ff);
  set(Buffer::Up, ff);
  return w;
}

LayerRecorder::LayerRecorder(Recorder& rec, const PassContext& context)
    : m_rec(rec),
      m_ctx(context),
      m_capacity(bufferWidths(*context.config)),
      m_width(m_capacity),
      m_rows{0, context.rows} {}

VkDeviceAddress LayerRecorder::at(Buffer buffer, uint32_t row) const {
  return m_ctx.buffers[static_cast<size_t>(buffer)] + uint64_t{row} * widthOf(buffer) * 4;
}

const DeviceMatrix& LayerRecorder::weight(model::TensorRole role) const {
  // checkProgram has made sure at construction that every weight a program reads is present.
  if (role == model::TensorRole::Count) fail("an op without its weight");
  const DeviceMatrix* w = (*m_layer->tensors)[static_cast<size_t>(role)];
  if (!w) fail("an op reads " + std::string(model::tensorRoleName(role)) + ", which is absent");
  return *w;
}

void LayerRecorder::record(const LayerPass& layer) {
  m_layer = &layer;
  // Every layer starts from the table's widths; projections narrow their outputs.
  m_width = m_capacity;
  const std::vector<Op>& ops = layer.program->ops;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (m_rows.count == 0) break;  // no logits wanted: nothing left to compute
    const Op& op = ops[i];
    // Fusions first (each returns the ops it took beyond this one, or -1 where it does not
    // apply); the op by itself otherwise.
    if (const int taken = fused(ops, i); taken >= 0) {
      i += static_cast<size_t>(taken);
      continue;
    }
    switch (op.kind) {
      case model::OpKind::RmsNorm:
        rmsNorm(op);
        break;
      case model::OpKind::Project:
        project(op);
        break;
      case model::OpKind::AddBias:
        addBias(op);
        break;
      case model::OpKind::HeadNorm:
        headNorm(op);
        break;
      case model::OpKind::Rope:
        rope(op);
        break;
      case model::OpKind::Attend:
        attend(op, false);
        break;
      case model::OpKind::KeepOutputRows:
        keepOutputRows();
        break;
      case model::OpKind::Add:
        add(op);
        break;
      case model::OpKind::GatedFfn:
        gatedFfn(op);
        break;
      case model::OpKind::Scale:
        m_rec.scale(at(op.dst, m_rows.first), m_rows.count * widthOf(op.dst), op.factor);
        break;
      case model::OpKind::MoeFfn:
        moeFfn(op);
        break;
    }
  }
}

// The fused sequences. In default math (the kernels' results equal the ops' within the accuracy
// contract, and rope_store's equal them exactly):
//   Rope(Q), Rope(K) with one set of parameters [, Scale(Q)], Attend
//                                                         ->  rope_store + attention
//   Project of one output [, KeepOutputRows], Add of that output into another buffer
//                                                         ->  one mat-vec adding into the buffer
//   GatedFfn with SiLU                                    ->  one mat-vec of gate and up with the
//                                                             SwiGLU epilogue (in gatedFfn)
// and in both maths (the same kernels on the same rows):
//   HeadNorm, HeadNorm of another buffer, one eps         ->  one RMSNorm dispatch
//   Project, AddBias on its outputs                       ->  the biases added by its products
// Merged Q/K/V (a Project's outputs) is products()'s business. Programs read a projection's
// output only in the op after it, so skipping the write of the Add's source changes nothing.
int LayerRecorder::fused(const std::vector<Op>& ops, size_t i) {
  const Op& op = ops[i];
  auto next = [&](size_t k) -> const Op* { return i + k < ops.size() ? &ops[i + k] : nullptr; };
  if (op.kind == model::OpKind::Rope && op.dst == Buffer::Q) {
    const Op* k = next(1);
    // phi3 scales the queries between RoPE and attention.
    const Op* scale = next(2) && next(2)->kind == model::OpKind::Scale && next(2)->dst == Buffer::Q
                          ? next(2)
                          : nullptr;
    const Op* a = next(scale ? 3 : 2);
    if (k && a && k->kind == model::OpKind::Rope && k->dst == Buffer::K && k->rope == op.rope &&
        a->kind == model::OpKind::Attend && ropeAndStore(op, *k, scale ? scale->factor : 1.0f)) {
      attend(*a, true);
      return scale ? 3 : 2;
    }
    return -1;
  }
  if (op.kind == model::OpKind::HeadNorm) {
    const Op* k = next(1);
    if (k && k->kind == model::OpKind::HeadNorm && k->dst != op.dst && k->eps == op.eps &&
        headNormPair(op, *k)) {
      return 1;
    }
    return -1;
  }
  if (op.kind == model::OpKind::Project) {
    // The AddBias ops right after it on its outputs go into its products.
    std::array<VkDeviceAddress, 3> biases{};
    int taken = 0;
    for (const Op* b = next(1); b && b->kind == model::OpKind::AddBias; b = next(++taken + 1)) {
      uint8_t o = 0;
      while (o < op.outCount && op.outs[o].dst != b->dst) ++o;
      if (o == op.outCount || biases[o] != 0) break;
      const DeviceMatrix& bias = weight(b->weight);
      const model::ProjectOut& out = op.outs[o];
      const int64_t rows = out.rows > 0 ? out.rows : weight(out.weight).rows;
      if (bias.cols != rows) break;  // addBias reports it
      biases[o] = bias.memory.address;
    }
    if (taken > 0) {
      project(op, biases);
      return taken;
    }
  }
  if (op.kind == model::OpKind::Project && op.outCount == 1) {
    const bool keep = next(1) && next(1)->kind == model::OpKind::KeepOutputRows;
    const Op* a = next(keep ? 2 : 1);
    const model::ProjectOut& out = op.outs[0];
    if (!a || a->kind != model::OpKind::Add || a->src != out.dst || a->dst == out.dst ||
        a->dst == op.src) {
      return -1;
    }
    // Rows are independent: keeping the output rows before the projection instead of after it
    // changes no value and projects only the kept rows.
    const RowRange rows = keep && m_layer->keepsOutputRows ? m_ctx.kept : m_rows;
    const DeviceMatrix& whole = weight(out.weight);
    const DeviceMatrix w = out.rows > 0 ? rowsOf(whole, out.firstRow, out.rows) : whole;
    const VkDeviceAddress x = at(op.src, rows.first);
    if (u32(w.rows) != widthOf(a->dst) || u32(w.cols) != widthOf(op.src) ||
        (rows.count > 0 && !m_rec.canMatvecBlocks(w, x, rows.count))) {
      return -1;
    }
    if (keep) keepOutputRows();
    width(out.dst) = u32(w.rows);
    if (m_rows.count > 0) {
      const MatvecOut job[] = {{&w, at(a->dst, m_rows.first)}};
      m_rec.matvecBlocks(job, x, m_rows.count, MatvecEpilogue::Add);
    }
    return keep ? 2 : 1;
  }
  return -1;
}

void LayerRecorder::products(VkDeviceAddress x, uint32_t cols, uint32_t rows,
                             std::span<const Product> jobs) {
  bool quantized = false;
  std::array<bool, 3> done{};
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Product& job = jobs[i];
    if (u32(job.w->cols) != cols) {
      fail("a " + std::to_string(job.w->cols) + "-column weight applied to rows of " +
           std::to_string(cols));
    }
    if (i < done.size() && done[i]) continue;
    // The block mat-vec takes this product and those after it with the same type and width in
    // one dispatch (a merged Q/K/V).
    if (i < done.size() && m_rec.canMatvecBlocks(*job.w, x, rows)) {
      std::array<MatvecOut, 3> merged{};
      size_t n = 0;
      for (size_t k = i; k < std::min(jobs.size(), done.size()); ++k) {
        const DeviceMatrix& w = *jobs[k].w;
        if (w.type == job.w->type && w.rowBytes == job.w->rowBytes && !done[k] &&
            m_rec.canMatvecBlocks(w, x, rows)) {
          merged[n++] = {&w, jobs[k].y, jobs[k].bias};
          done[k] = true;
        }
      }
      m_rec.matvecBlocks(std::span(merged.data(), n), x, rows);
      continue;
    }
    if (quantizesActivations(job.w->type)) {
      if (!quantized) m_rec.quantizeQ8(x, m_ctx.quantized, cols, rows);
      quantized = true;
      m_rec.matmulQ8(*job.w, m_ctx.quantized, job.y, rows, m_ctx.decodeOrder);
    } else {
      m_rec.matmul(*job.w, x, job.y, rows);
    }
    if (job.bias) {
      const uint32_t n = u32(job.w->rows);
      m_rec.add(job.bias, job.y, rows * n, n);
    }
  }
}

void LayerRecorder::rmsNorm(const Op& op) {
  width(op.dst) = widthOf(op.src);
  m_rec.rmsNorm(at(op.src, m_rows.first), weight(op.weight).memory.address,
                at(op.dst, m_rows.first), widthOf(op.src), m_rows.count, 0, op.eps);
}

// Rows [first, first + count) of a matrix, as a matrix of its own: the same bytes from row
// `first` on (a fused Q/K/V or gate/up matrix read in parts, as ggml views it).
DeviceMatrix LayerRecorder::rowsOf(const DeviceMatrix& w, int64_t first, int64_t count) {
  if (first < 0 || count <= 0 || first + count > w.rows) fail("a row range outside its matrix");
  DeviceMatrix view = w;
  view.rows = count;
  const uint64_t skip = static_cast<uint64_t>(first) * w.rowBytes;
  view.memory.offset += skip;
  view.memory.address += skip;
  view.memory.size = static_cast<uint64_t>(count) * w.rowBytes;
  view.memory.mapped = nullptr;
  return view;
}

void LayerRecorder::project(const Op& op, const std::array<VkDeviceAddress, 3>& biases) {
  // The matrices (whole, or a row range of one), then the output widths: they place the rows
  // of the destinations.
  std::array<DeviceMatrix, 3> ws{};
  for (uint8_t i = 0; i < op.outCount; ++i) {
    const model::ProjectOut& out = op.outs[i];
    const DeviceMatrix& w = weight(out.weight);
    ws[i] = out.rows > 0 ? rowsOf(w, out.firstRow, out.rows) : w;
    if (ws[i].rows > m_capacity[static_cast<size_t>(out.dst)]) {
      fail(std::string(model::tensorRoleName(out.weight)) + " has " + std::to_string(ws[i].rows) +
           " rows, more than its destination buffer holds");
    }
    width(out.dst) = u32(ws[i].rows);
  }
  std::array<Product, 3> jobs{};
  for (uint8_t i = 0; i < op.outCount; ++i) {
    jobs[i] = {&ws[i], at(op.outs[i].dst, m_rows.first), biases[i]};
  }
  products(at(op.src, m_rows.first), widthOf(op.src), m_rows.count,
           std::span(jobs.data(), op.outCount));
}

void LayerRecorder::addBias(const Op& op) {
  const DeviceMatrix& bias = weight(op.weight);
  const uint32_t n = widthOf(op.dst);
  if (u32(bias.cols) != n) {
    fail("a bias of " + std::to_string(bias.cols) + " for rows of " + std::to_string(n));
  }
  m_rec.add(bias.memory.address, at(op.dst, m_rows.first), m_rows.count * n, n);
}

void LayerRecorder::headNorm(const Op& op) {
  // Each head's slice of a row is a row of its own: in place (the kernel reads a row whole
  // before it writes it).
  const uint32_t n = widthOf(op.dst), heads = u32(op.heads);
  if (heads == 0 || n % heads != 0) fail("head norm over " + std::to_string(op.heads) + " heads");
  const DeviceMatrix& w = weight(op.weight);
  if (u32(w.cols) != n / heads) fail("a head norm weight of " + std::to_string(w.cols));
  // One workgroup per head row, in dispatches within Vulkan's guaranteed 65535 groups.
  const uint32_t headDim = n / heads, total = m_rows.count * heads, most = 65535;
  for (uint32_t done = 0; done < total; done += most) {
    const VkDeviceAddress x = at(op.dst, m_rows.first) + uint64_t{done} * headDim * 4;
    m_rec.rmsNorm(x, w.memory.address, x, headDim, std::min(most, total - done), 0, op.eps);
  }
}

// Two HeadNorm ops (a layer's Q and K norms) in one dispatch, when their rows fit one.
bool LayerRecorder::headNormPair(const Op& a, const Op& b) {
  Recorder::NormRows rows[2];
  const Op* ops[] = {&a, &b};
  for (int i = 0; i < 2; ++i) {
    const Op& op = *ops[i];
    const uint32_t n = widthOf(op.dst), heads = u32(op.heads);
    const DeviceMatrix& w = weight(op.weight);
    if (heads == 0 || n % heads != 0 || u32(w.cols) != n / heads) return false;  // headNorm says
    const VkDeviceAddress x = at(op.dst, m_rows.first);
    rows[i] = {x, w.memory.address, x, n / heads, m_rows.count * heads};
  }
  if (uint64_t{rows[0].rows} + rows[1].rows > 65535) return false;
  m_rec.rmsNormPair(rows[0], rows[1], a.eps);
  return true;
}

const RopeTable& LayerRecorder::ropeTable(const Op& op) const {
  const std::vector<RopeTable>& tables = *m_ctx.ropeTables;
  const auto table = std::find_if(tables.begin(), tables.end(),
                                  [&](const RopeTable& t) { return t.params == op.rope; });
  if (table == tables.end()) fail("no angle table for a RoPE op");  // the stage builds them all
  return *table;
}

// The head size of a RoPE op's buffer.
uint32_t LayerRecorder::ropeHeadDim(const Op& op) const {
  const uint32_t width = widthOf(op.dst), heads = u32(op.heads);
  if (heads == 0 || width % heads != 0) fail("RoPE over " + std::to_string(op.heads) + " heads");
  const uint32_t headDim = width / heads;
  if (u32(op.rope.nRot) > headDim) fail("RoPE over more dimensions than a head has");
  return headDim;
}

void LayerRecorder::rope(const Op& op) {
  // Positions come from each segment's params: every row of the batch must be in play
  // (checkProgram refuses RoPE after KeepOutputRows).
  if (m_rows.first != 0 || m_rows.count != m_ctx.rows) fail("RoPE after KeepOutputRows");
  const RopeTable& table = ropeTable(op);
  const uint32_t headDim = ropeHeadDim(op);
  for (const PassSegment& s : m_ctx.segments) {
    m_rec.rope(at(op.dst, s.firstRow), table.cos.address, table.sin.address, s.params,
               u32(op.heads), headDim, u32(op.rope.nRot), op.rope.style == model::RopeStyle::Neox,
               s.count);
  }
}

bool LayerRecorder::ropeAndStore(const Op& q, const Op& k, float qScale) {
  const uint32_t headDim = ropeHeadDim(q), kvDim = widthOf(Buffer::K);
  if (m_rec.exactMath() || m_rows.first != 0 || m_rows.count != m_ctx.rows ||
      ropeHeadDim(k) != headDim || widthOf(Buffer::V) != kvDim ||
      kvDim != u32(m_layer->program->kvDim) || kvDim != u32(k.heads) * headDim) {
    return false;
  }
  for (const PassSegment& s : m_ctx.segments) {
    if (!ropeStoreFits(u32(q.heads), u32(k.heads), headDim, u32(q.rope.nRot), s.count)) {
      return false;
    }
  }
  const RopeTable& table = ropeTable(q);
  for (size_t i = 0; i < m_ctx.segments.size(); ++i) {
    const PassSegment& s = m_ctx.segments[i];
    const KvCache& cache = m_layer->caches[i];
    m_rec.ropeStore(at(Buffer::Q, s.firstRow), at(Buffer::K, s.firstRow), at(Buffer::V, s.firstRow),
                    cache.keys, cache.values, table.cos.address, table.sin.address, s.params,
                    u32(q.heads), u32(k.heads), headDim, u32(q.rope.nRot),
                    q.rope.style == model::RopeStyle::Neox, s.count, qScale, m_layer->ring);
  }
  return true;
}

void LayerRecorder::attend(const Op& op, bool stored) {
  // Positions come from each segment's params[0] + row: every row of the batch must be in play
  // (checkProgram refuses attention after KeepOutputRows).
  if (m_rows.first != 0 || m_rows.count != m_ctx.rows) fail("attention after KeepOutputRows");
  const uint32_t headDim = u32(m_ctx.config->headDim), kvDim = widthOf(Buffer::K);
  if (kvDim != u32(m_layer->program->kvDim) || widthOf(Buffer::V) != kvDim) {
    fail("keys of " + std::to_string(kvDim) + " for a cache of " +
         std::to_string(m_layer->program->kvDim));
  }
  width(Buffer::Attn) = widthOf(Buffer::Q);
  if (!stored) {
    for (size_t i = 0; i < m_ctx.segments.size(); ++i) {
      const PassSegment& s = m_ctx.segments[i];
      m_rec.kvStore(at(Buffer::K, s.firstRow), at(Buffer::V, s.firstRow), m_layer->caches[i].keys,
                    m_layer->caches[i].values, s.params, kvDim, s.count, m_layer->ring);
    }
  }
  AttentionOptions options;
  // A window as long as the context hides nothing: the kernel then skips the masking.
  if (op.attend.window > 0 && u32(op.attend.window) < m_ctx.contextLength) {
    options.window = u32(op.attend.window);
  }
  options.softcap = op.attend.softcap;
  options.ring = m_layer->ring;
  if (op.attend.sinks) options.sinks = weight(model::TensorRole::AttnSinks).memory.address;
  for (size_t i = 0; i < m_ctx.segments.size(); ++i) {
    const PassSegment& s = m_ctx.segments[i];
    m_rec.attention(at(Buffer::Q, s.firstRow), m_layer->caches[i].keys, m_layer->caches[i].values,
                    at(Buffer::Attn, s.firstRow), s.params, widthOf(Buffer::Q) / headDim,
                    kvDim / headDim, headDim, op.attend.scale, s.count, m_ctx.contextLength,
                    m_ctx.attentionScratch, options);
  }
}

void LayerRecorder::keepOutputRows() {
  // Rows are computed independently, so carrying only the kept rows on changes no value; it
  // saves the FFN of the rows whose logits nobody reads (llama.cpp's inp_out_ids).
  if (m_layer->keepsOutputRows) m_rows = m_ctx.kept;
}

void LayerRecorder::add(const Op& op) {
  const uint32_t n = m_rows.count * widthOf(op.dst);
  if (widthOf(op.src) != widthOf(op.dst)) fail("an add of rows of different widths");
  m_rec.add(at(op.src, m_rows.first), at(op.dst, m_rows.first), n, n);
}

void LayerRecorder::gatedFfn(const Op& op) {
  // A fused gate/up matrix (phi3): the gate is its first half of rows, the up projection the
  // second (llama.cpp's swiglu of the whole row splits it so).
  DeviceMatrix fusedGate, fusedUp;
  if (op.fusedGateUp) {
    const DeviceMatrix& both = weight(op.ffn[0]);
    if (both.rows % 2 != 0) fail("a fused gate/up matrix of odd rows");
    fusedGate = rowsOf(both, 0, both.rows / 2);
    fusedUp = rowsOf(both, both.rows / 2, both.rows / 2);
  }
  const DeviceMatrix& gate = op.fusedGateUp ? fusedGate : weight(op.ffn[0]);
  const DeviceMatrix& up = op.fusedGateUp ? fusedUp : weight(op.ffn[1]);
  if (gate.rows != up.rows || gate.rows > m_capacity[static_cast<size_t>(Buffer::Gate)]) {
    fail("FFN gate and up projections of " + std::to_string(gate.rows) + " and " +
         std::to_string(up.rows) + " rows");
  }
  const uint32_t ff = u32(gate.rows);
  width(Buffer::Gate) = ff;
  width(Buffer::Up) = ff;
  const VkDeviceAddress x = at(op.src, m_rows.first);
  if (op.activation == model::Activation::Silu && gate.type == up.type &&
      gate.rowBytes == up.rowBytes && m_rec.canMatvecBlocks(gate, x, m_rows.count) &&
      m_rec.canMatvecBlocks(up, x, m_rows.count)) {
    // Gate, up and SwiGLU in one dispatch.
    const MatvecOut both[] = {{&gate, at(Buffer::Gate, m_rows.first)},
                              {&up, at(Buffer::Up, m_rows.first)}};
    m_rec.matvecBlocks(both, x, m_rows.count, MatvecEpilogue::SwiGlu);
    return;
  }
  const Product jobs[] = {{&gate, at(Buffer::Gate, m_rows.first)},
                          {&up, at(Buffer::Up, m_rows.first)}};
  products(at(op.src, m_rows.first), widthOf(op.src), m_rows.count, jobs);
  switch (op.activation) {
    case model::Activation::Silu:
      m_rec.swiglu(at(Buffer::Gate, m_rows.first), at(Buffer::Up, m_rows.first), m_rows.count * ff,
                   ff);
      break;
    case model::Activation::GeluTanh:
      m_rec.geglu(at(Buffer::Gate, m_rows.first), at(Buffer::Up, m_rows.first), m_rows.count * ff);
      break;
    case model::Activation::SwigluOai:
      m_rec.swigluOai(at(Buffer::Gate, m_rows.first), at(Buffer::Up, m_rows.first),
                      m_rows.count * ff);
      break;
  }
}

// dst = the token's experts' FFNs weighted and summed (engine/model/layer_program.h MoeFfn):
// router logits (an F32 product, plus its bias), the choice and weights per token (moe_route),
// then gate and up for every (token, k) entry from the expert's matrices (plus the expert's
// bias rows), SwiGLU or the clamped SwiGLU over the entries' rows, down per entry, and the
// weighted sum in rank order (moe_combine). Every expert product is one dispatch over all
// entries: only the chosen experts' rows are read.
void LayerRecorder::moeFfn(const Op& op) {
  const MoeScratch& s = m_ctx.moe;
  if (s.logits == 0) fail("a mixture of experts without its scratch");
  const model::MoeParams& moe = op.moe;
  const DeviceMatrix& router = weight(model::TensorRole::GateInp);
  const DeviceMatrix& gates = weight(model::TensorRole::GateExps);
  const DeviceMatrix& ups = weight(model::TensorRole::UpExps);
  const DeviceMatrix& downs = weight(model::TensorRole::DownExps);
  const uint32_t rows = m_rows.count, used = u32(moe.used), in = widthOf(op.src);
  if (u32(router.rows) != u32(moe.experts) || gates.rows % moe.experts != 0 ||
      gates.rows != ups.rows || downs.rows % moe.experts != 0) {
    fail("expert matrices that do not hold " + std::to_string(moe.experts) + " experts");
  }
  const uint32_t ff = u32(gates.rows / moe.experts), out = u32(downs.rows / moe.experts);
  if (uint64_t{used} * ff > m_capacity[static_cast<size_t>(Buffer::Gate)] ||
      out > m_capacity[static_cast<size_t>(op.dst)] || u32(downs.cols) != ff) {
    fail("expert widths beyond the stage's buffers");
  }
  const Product route[] = {{&router, s.logits}};
  products(at(op.src, m_rows.first), in, rows, route);
  if (moe.biases) {
    m_rec.add(weight(model::TensorRole::GateInpBias).memory.address, s.logits,
              rows * u32(moe.experts), u32(moe.experts));
  }
  m_rec.moeRoute(s.logits, s.ids, s.weights, rows, u32(moe.experts), used,
                 moe.gating == model::MoeGating::SoftmaxWeight, moe.normalizeWeights);
  // Each token's `used` gate/up rows side by side: the Gate and Up buffers at a width of
  // used * ff per token.
  width(Buffer::Gate) = used * ff;
  width(Buffer::Up) = used * ff;
  const VkDeviceAddress gate = at(Buffer::Gate, m_rows.first), up = at(Buffer::Up, m_rows.first);
  const VkDeviceAddress x = at(op.src, m_rows.first);
  const uint32_t entries = rows * used;
  auto bias = [&](model::TensorRole role, VkDeviceAddress y, uint32_t cols) {
    if (moe.biases) m_rec.addExpertBias(weight(role).memory.address, s.ids, y, entries, cols);
  };
  m_rec.matvecExperts(gates, ff, s.ids, x, gate, entries, used, false);
  bias(model::TensorRole::GateExpsBias, gate, ff);
  m_rec.matvecExperts(ups, ff, s.ids, x, up, entries, used, false);
  bias(model::TensorRole::UpExpsBias, up, ff);
  if (op.activation == model::Activation::SwigluOai) {
    m_rec.swigluOai(gate, up, entries * ff);
  } else {
    m_rec.swiglu(gate, up, entries * ff, ff);
  }
  m_rec.matvecExperts(downs, out, s.ids, gate, s.outputs, entries, used, true);
  bias(model::TensorRole::DownExpsBias, s.outputs, out);
  width(op.dst) = out;
  m_rec.moeCombine(s.outputs, s.weights, at(op.dst, m_rows.first), rows, out, used);
}

}  // namespace shoal::vulkan
