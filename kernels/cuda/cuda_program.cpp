#include "kernels/cuda/cuda_program.h"

#include <string>
#include <string_view>

#include "engine/error.h"
#include "kernels/gpu_op_gaps.h"

namespace shoal::cuda {
namespace {

using model::Buffer;
using model::OpKind;
using model::TensorRole;

// The longest head the attention kernel handles (attention.cu's kMaxHeadDim).
constexpr int32_t kMaxHeadDim = 256;

// Checks one layer's ops against the model and looks up what each reads on the device.
class Resolver {
 public:
  Resolver(const model::ModelConfig& c, const model::ModelWeights& w, const DeviceWeights& d,
           RopeTables& tables, int32_t layer, int32_t kvDim)
      : m_c(c), m_w(w), m_d(d), m_tables(tables), m_layer(layer), m_kvDim(kvDim) {}

  CudaOp resolve(const model::Op& op) {
    CudaOp out;
    out.op = op;
    if (op.src >= Buffer::Count || op.dst >= Buffer::Count) fail("an op on an unknown buffer");
    if (const char* gap = kernels::gpuOpGap(op, kCudaOps)) {
      fail(std::string(gap) + ", which has no CUDA kernels yet (the CPU backend runs it)");
    }
    const int64_t src = width(op.src), dst = width(op.dst);
    switch (op.kind) {
      case OpKind::RmsNorm:
        if (src != dst) fail("RmsNorm between buffers of different widths");
        out.vector = vector(op.weight, src);
        break;
      case OpKind::Project:
        if (op.outCount == 0 || size_t{op.outCount} > out.matrices.size())
          fail("a Project of no output");
        for (size_t i = 0; i < size_t{op.outCount}; ++i) {
          const model::ProjectOut& o = op.outs[i];
          out.matrices[i] = o.rows > 0 ? rowRange(o.weight, src, o.firstRow, o.rows, width(o.dst))
                                       : matrix(o.weight, src, width(o.dst));
        }
        break;
      case OpKind::AddBias:
        out.vector = vector(op.weight, dst);
        break;
      case OpKind::HeadNorm:
        checkHeads(op, dst);
        out.vector = vector(op.weight, m_c.headDim);
        break;
      case OpKind::Rope:
        checkHeads(op, dst);
        if (op.rope.nRot > m_c.headDim) fail("RoPE over more dimensions than a head has");
        out.rope = m_tables.get(op.rope);
        break;
      case OpKind::Attend:
        checkAttend(op);
        if (op.attend.sinks) out.vector = vector(TensorRole::AttnSinks, m_c.nHead);
        break;
      case OpKind::KeepOutputRows:
        break;
      case OpKind::Add:
        if (src != dst) fail("Add between buffers of different widths");
        break;
      case OpKind::GatedFfn:
        if (op.dst != Buffer::Gate) fail("a gated FFN that does not write Gate");
        if (op.fusedGateUp) {  // one matrix, the gate's rows first
          out.matrices[0] = rowRange(op.ffn[0], src, 0, m_c.nFf, m_c.nFf);
          out.matrices[1] = rowRange(op.ffn[0], src, m_c.nFf, m_c.nFf, m_c.nFf);
        } else {
          out.matrices[0] = matrix(op.ffn[0], src, m_c.nFf);
          out.matrices[1] = matrix(op.ffn[1], src, m_c.nFf);
        }
        break;
      case OpKind::MoeFfn:
        resolveExperts(op, src, dst, out);
        break;
      case OpKind::Scale:
        break;
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("CUDA stage: layer " + std::to_string(m_layer) + ": " + what);
  }

  int64_t width(Buffer b) const { return bufferWidth(b, m_c, m_kvDim); }

  // The table's GGUF name of a role, for messages about tensors that are absent.
  std::string nameOf(TensorRole role) const {
    for (const model::TensorSpec& t : m_c.arch->tensors) {
      if (t.role == role) return std::string(t.name);
    }
    return "a tensor its architecture's table does not list";
  }

  const gguf::TensorInfo* tensor(TensorRole role) const {
    if (role >= TensorRole::Count) fail("an op without its weight");
    const gguf::TensorInfo* t = m_w.layers[static_cast<size_t>(m_layer)][role];
    if (!t) fail("the program needs " + nameOf(role) + ", which the model lacks");
    return t;
  }

  DeviceMatrix matrix(TensorRole role, int64_t k, int64_t rows) const {
    const gguf::TensorInfo* t = tensor(role);
    const DeviceMatrix m = m_d.get(t);
    if (m.k != k || m.rows != rows) {
      fail(t->name + " is " + std::to_string(m.rows) + " rows of " + std::to_string(m.k) +
           ", the program's buffers need " + std::to_string(rows) + " rows of " +
           std::to_string(k));
    }
    return m;
  }

  // Rows [first, first + count) of a matrix of k columns, which must be `want` rows.
  DeviceMatrix rowRange(TensorRole role, int64_t k, int64_t first, int64_t count,
                        int64_t want) const {
    const gguf::TensorInfo* t = tensor(role);
    DeviceMatrix m = m_d.get(t);
    if (m.k != k || first < 0 || count != want || first + count > m.rows) {
      fail("rows [" + std::to_string(first) + ", +" + std::to_string(count) + ") of " + t->name +
           " (" + std::to_string(m.rows) + " rows of " + std::to_string(m.k) +
           ") do not make the " + std::to_string(want) + " rows of " + std::to_string(k) +
           " the program's buffers need");
    }
    m.data = static_cast<const uint8_t*>(m.data) + first * m.rowBytes;
    m.rows = count;
    return m;
  }

  // The router (matrices[0]), the experts' matrices and biases of a MoeFfn from src (srcWidth)
  // to dst (dstWidth), checked against MoeParams.
  void resolveExperts(const model::Op& op, int64_t srcWidth, int64_t dstWidth, CudaOp& out) const {
    const model::MoeParams& moe = op.moe;
    if (moe.experts <= 0 || moe.used <= 0 || moe.used > moe.experts) {
      fail(std::to_string(moe.used) + " of " + std::to_string(moe.experts) + " experts");
    }
    out.matrices[0] = matrix(TensorRole::GateInp, srcWidth, moe.experts);
    CudaExperts& x = out.experts;
    const TensorRole roles[3] = {TensorRole::GateExps, TensorRole::UpExps, TensorRole::DownExps};
    for (int i = 0; i < 3; ++i) x.matrices[size_t(i)] = m_d.get(tensor(roles[i]));
    const DeviceMatrix &gate = x.matrices[0], &up = x.matrices[1], &down = x.matrices[2];
    x.width = gate.rows / moe.experts;
    if (gate.k != srcWidth || up.k != srcWidth || gate.rows % moe.experts != 0 ||
        up.rows != gate.rows || down.k != x.width || down.rows != dstWidth * moe.experts) {
      fail("expert matrices that do not hold " + std::to_string(moe.experts) + " experts from " +
           std::to_string(srcWidth) + " to " + std::to_string(dstWidth) + " wide rows");
    }
    if (moe.biases) {
      x.biases[0] = vector(TensorRole::GateInpBias, moe.experts);
      x.biases[1] = vector(TensorRole::GateExpsBias, gate.rows);
      x.biases[2] = vector(TensorRole::UpExpsBias, up.rows);
      x.biases[3] = vector(TensorRole::DownExpsBias, down.rows);
    }
  }

  const float* vector(TensorRole role, int64_t length) const {
    const gguf::TensorInfo* t = tensor(role);
    const DeviceMatrix m = m_d.get(t);
    if (t->type != gguf::TensorType::F32 || m.k * m.rows != length) {
      fail(t->name + " must be " + std::to_string(length) + " F32 values");
    }
    return static_cast<const float*>(m.data);
  }

  void checkHeads(const model::Op& op, int64_t dstWidth) const {
    if (op.heads <= 0 || int64_t(op.heads) * m_c.headDim != dstWidth) {
      fail(std::to_string(op.heads) + " heads of " + std::to_string(m_c.headDim) +
           " do not fill a row of " + std::to_string(dstWidth));
    }
  }

  void checkAttend(const model::Op& op) const {
    if (op.attend.window < 0) fail("a negative attention window");
    if (op.src != Buffer::Q || op.dst != Buffer::Attn) fail("Attend must read Q and write Attn");
    const int32_t kvHeads = m_kvDim / m_c.headDim;
    if (m_c.headDim > kMaxHeadDim || kvHeads <= 0 || m_kvDim % m_c.headDim != 0 ||
        m_c.nHead % kvHeads != 0) {
      fail("attention with heads of " + std::to_string(m_c.headDim) + " (max " +
           std::to_string(kMaxHeadDim) + "), " + std::to_string(m_c.nHead) +
           " query heads over keys " + std::to_string(m_kvDim) + " wide is not supported");
    }
  }

  const model::ModelConfig& m_c;
  const model::ModelWeights& m_w;
  const DeviceWeights& m_d;
  RopeTables& m_tables;
  int32_t m_layer;
  int32_t m_kvDim;
};

}  // namespace

int64_t bufferWidth(model::Buffer buffer, const model::ModelConfig& c, int32_t kvDim) {
  switch (buffer) {
    case Buffer::X:
    case Buffer::Norm:
    case Buffer::Tmp:
      return c.nEmbd;
    case Buffer::Q:
    case Buffer::Attn:
      return c.qDim();
    case Buffer::K:
    case Buffer::V:
      return kvDim;
    case Buffer::Gate:
    case Buffer::Up:
      return c.nFf;
    case Buffer::Count:
      break;
  }
  return 0;
}

std::vector<CudaLayer> resolveLayers(const model::ModelConfig& config,
                                     const model::ModelWeights& weights,
                                     const DeviceWeights& device, RopeTables& ropeTables,
                                     int32_t firstLayer, int32_t lastLayer) {
  std::vector<CudaLayer> layers;
  for (int32_t i = firstLayer; i < lastLayer; ++i) {
    // Computed once per stage: the program is data, the loop in CudaStage runs it per batch.
    const model::LayerProgram program = config.arch->layerProgram(config, i);
    // The cache holds the context or a sliding window's ring (kv_ring.h, set up by CudaStage);
    // a program bounding its cache itself would be sized otherwise by kv_footprint.h.
    if (program.window != 0) {
      throw Error("CUDA stage: layer " + std::to_string(i) +
                  ": a KV cache bounded by the layer program's own window is not supported");
    }
    CudaLayer layer;
    layer.index = i;
    layer.last = i == config.nLayer - 1;
    layer.kvDim = program.kvDim > 0 ? program.kvDim : config.kvDim();
    layer.window = model::attendWindow(program);
    Resolver resolver(config, weights, device, ropeTables, i, layer.kvDim);
    bool kept = false;
    for (const model::Op& op : program.ops) {
      // Rows dropped by KeepOutputRows shift the rows that remain, and RoPE and the KV cache
      // take positions from the first row: they must come before it.
      if (kept && (op.kind == OpKind::Rope || op.kind == OpKind::Attend)) {
        throw Error("CUDA stage: layer " + std::to_string(i) +
                    ": RoPE or attention after KeepOutputRows is not supported");
      }
      kept = kept || op.kind == OpKind::KeepOutputRows;
      layer.ops.push_back(resolver.resolve(op));
    }
    layers.push_back(std::move(layer));
  }
  return layers;
}

}  // namespace shoal::cuda
