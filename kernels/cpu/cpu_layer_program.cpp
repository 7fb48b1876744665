#include "kernels/cpu/cpu_layer_program.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/error.h"
#include "engine/model/kv_ring.h"

namespace shoal::cpu {
namespace {

using model::Buffer;
using model::OpKind;
using model::TensorRole;

size_t idx(Buffer b) { return static_cast<size_t>(b); }

std::string_view kindName(OpKind kind) {
  switch (kind) {
    case OpKind::RmsNorm:
      return "RmsNorm";
    case OpKind::Project:
      return "Project";
    case OpKind::AddBias:
      return "AddBias";
    case OpKind::HeadNorm:
      return "HeadNorm";
    case OpKind::Rope:
      return "Rope";
    case OpKind::Attend:
      return "Attend";
    case OpKind::KeepOutputRows:
      return "KeepOutputRows";
    case OpKind::Add:
      return "Add";
    case OpKind::GatedFfn:
      return "GatedFfn";
    case OpKind::MoeFfn:
      return "MoeFfn";
    case OpKind::Scale:
      return "Scale";
  }
  return "?";
}

// The buffers an op reads (before it writes any) and the ones it writes.
struct Access {
  std::array<bool, model::kBufferCount> reads{}, writes{};
};

Access accessOf(const model::Op& op) {
  Access a;
  switch (op.kind) {
    case OpKind::RmsNorm:
      a.reads[idx(op.src)] = a.writes[idx(op.dst)] = true;
      break;
    case OpKind::Project:
      a.reads[idx(op.src)] = true;
      for (uint8_t i = 0; i < op.outCount; ++i) a.writes[idx(op.outs[i].dst)] = true;
      break;
    case OpKind::AddBias:
    case OpKind::HeadNorm:
    case OpKind::Rope:
    case OpKind::Scale:
      a.reads[idx(op.dst)] = a.writes[idx(op.dst)] = true;
      break;
    case OpKind::Attend:
      a.reads[idx(Buffer::Q)] = a.reads[idx(Buffer::K)] = a.reads[idx(Buffer::V)] = true;
      a.writes[idx(Buffer::Attn)] = true;
      break;
    case OpKind::KeepOutputRows:
      break;
    case OpKind::Add:
      a.reads[idx(op.src)] = a.reads[idx(op.dst)] = a.writes[idx(op.dst)] = true;
      break;
    case OpKind::GatedFfn:
      a.reads[idx(op.src)] = a.writes[idx(Buffer::Gate)] = a.writes[idx(Buffer::Up)] = true;
      break;
    case OpKind::MoeFfn:
      a.reads[idx(op.src)] = a.writes[idx(op.dst)] = true;
      break;
  }
  return a;
}

// What llama.cpp's graph callbacks call the same tensors of a pre-norm block, so that op-by-op
// comparisons line up: the first RmsNorm of a layer writes attn_norm and the second ffn_norm,
// the projection of the attention output attn_out, Attend kqv_out, the first Add (residual)
// ffn_inp and the second l_out, the gated FFN ffn_swiglu, the experts' sum ffn_moe_out. Other
// ops are not reported.
std::string_view observedName(const model::Op& op, int rmsNormsBefore, int addsBefore) {
  switch (op.kind) {
    case OpKind::RmsNorm:
      // The pre- and post-norms by their weights (llama.cpp names them so: attn_norm,
      // attn_post_norm, ffn_norm, ffn_post_norm); otherwise by position.
      if (op.weight == TensorRole::AttnNorm || op.weight == TensorRole::FfnNorm ||
          op.weight == TensorRole::AttnPostNorm || op.weight == TensorRole::FfnPostNorm) {
        return model::tensorRoleName(op.weight);
      }
      return rmsNormsBefore == 0 ? "attn_norm" : rmsNormsBefore == 1 ? "ffn_norm" : "";
    case OpKind::Project:
      return op.src == Buffer::Attn ? "attn_out" : "";
    case OpKind::Attend:
      return "kqv_out";
    case OpKind::Add:
      return addsBefore == 0 ? "ffn_inp" : addsBefore == 1 ? "l_out" : "";
    case OpKind::GatedFfn:
      return op.activation == model::Activation::GeluTanh ? "ffn_geglu" : "ffn_swiglu";
    case OpKind::MoeFfn:
      return "ffn_moe_out";
    default:
      return "";
  }
}

class Binder {
 public:
  Binder(const model::LayerProgram& program, const LayerBinding& b,
         std::vector<model::RopeParams>& ropes)
      : m_program(program), m_b(b), m_ropes(ropes) {}

  CpuLayer bind() {
    const model::ModelConfig& c = *m_b.config;
    m_layer.index = m_b.layer;
    BufferWidths width{};
    width[idx(Buffer::X)] = c.nEmbd;
    bool kept = false, attended = false;
    int rmsNorms = 0, adds = 0;
    for (m_at = 0; m_at < m_program.ops.size(); ++m_at) {
      const model::Op& op = m_program.ops[m_at];
      if (op.kind == OpKind::KeepOutputRows && !m_b.keepOutputRows) continue;
      const Access access = accessOf(op);
      for (size_t b = 0; b < model::kBufferCount; ++b) {
        if (access.reads[b] && width[b] == 0) fail("reads a buffer no earlier op wrote");
      }
      BoundOp bound;
      bound.op = op;
      bound.observed = observedName(op, rmsNorms, adds);
      rmsNorms += op.kind == OpKind::RmsNorm;
      adds += op.kind == OpKind::Add;
      switch (op.kind) {
        case OpKind::RmsNorm:
          bound.vector = vector(op.weight, width[idx(op.src)]);
          width[idx(op.dst)] = width[idx(op.src)];
          break;
        case OpKind::Project:
          for (uint8_t i = 0; i < op.outCount; ++i) {
            if (op.outs[i].dst == op.src) fail("projects a buffer into itself");
            bound.matrices[i] = rowsOf(matrix(op.outs[i].weight, width[idx(op.src)]),
                                       op.outs[i].firstRow, op.outs[i].rows);
            width[idx(op.outs[i].dst)] = bound.matrices[i].rows;
          }
          break;
        case OpKind::AddBias:
          bound.vector = vector(op.weight, width[idx(op.dst)]);
          break;
        case OpKind::HeadNorm:
          bound.vector = vector(op.weight, headWidth(op, width[idx(op.dst)]));
          break;
        case OpKind::Rope:
          bound.ropeTable = ropeTable(op.rope, headWidth(op, width[idx(op.dst)]));
          break;
        case OpKind::Attend:
          if (kept) fail("attends after KeepOutputRows (keys of dropped rows would be lost)");
          if (attended) fail("is a second Attend (a layer has one KV cache)");
          attended = true;
          bindAttention(op.attend, width);
          width[idx(Buffer::Attn)] = width[idx(Buffer::Q)];
          break;
        case OpKind::KeepOutputRows:
          kept = true;
          bound.live = liveAfter(m_at);
          break;
        case OpKind::Add:
          if (width[idx(op.src)] != width[idx(op.dst)]) fail("adds rows of different widths");
          break;
        case OpKind::GatedFfn:
          if (op.activation != model::Activation::Silu &&
              op.activation != model::Activation::GeluTanh) {
            fail("uses an unknown activation");
          }
          if (op.src == Buffer::Gate || op.src == Buffer::Up) fail("reads its own output");
          if (op.fusedGateUp) {
            const WeightMatrix both = matrix(op.ffn[0], width[idx(op.src)]);
            if (both.rows % 2 != 0) fail("splits an odd number of rows into gate and up");
            bound.matrices[0] = rowsOf(both, 0, static_cast<int32_t>(both.rows / 2));
            bound.matrices[1] = rowsOf(both, static_cast<int32_t>(both.rows / 2),
                                       static_cast<int32_t>(both.rows / 2));
          } else {
            bound.matrices[0] = matrix(op.ffn[0], width[idx(op.src)]);
            bound.matrices[1] = matrix(op.ffn[1], width[idx(op.src)]);
          }
          if (bound.matrices[0].rows != bound.matrices[1].rows) fail("has gate/up of two sizes");
          width[idx(Buffer::Gate)] = width[idx(Buffer::Up)] = bound.matrices[0].rows;
          break;
        case OpKind::MoeFfn:
          bindExperts(op, width[idx(op.src)], bound);
          width[idx(op.dst)] = bound.experts[2].first.rows;
          break;
        case OpKind::Scale:
          if (!std::isfinite(op.factor)) fail("scales by a factor that is not finite");
          break;
      }
      bound.width = width;
      m_layer.ops.push_back(bound);
    }
    if (width[idx(Buffer::X)] != c.nEmbd) fail("leaves the residual at a different width");
    if (!attended) fail("has no Attend");
    return std::move(m_layer);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    const std::string op = m_at < m_program.ops.size()
                               ? ", op " + std::to_string(m_at) + " (" +
                                     std::string(kindName(m_program.ops[m_at].kind)) + ")"
                               : "";
    throw Error("CPU stage: layer " + std::to_string(m_b.layer) + op + " " + what);
  }

  model::Tensor tensor(TensorRole role) const {
    if (role == TensorRole::Count) fail("names no weight");
    const model::Tensor t = (*m_b.weights)[role];
    if (!t) fail("needs " + std::string(model::tensorRoleName(role)) + ", which is not loaded");
    return t;
  }

  const float* vector(TensorRole role, int64_t n) const {
    const model::Tensor t = tensor(role);
    if (t->type != gguf::TensorType::F32 || t->elementCount() != n) {
      fail("needs " + t->name + " as " + std::to_string(n) + " f32 values");
    }
    return reinterpret_cast<const float*>(t->data);
  }

  WeightMatrix matrix(TensorRole role, int64_t cols) const {
    const WeightMatrix m = WeightMatrix::from(*tensor(role));
    if (m.cols != cols) {
      fail("multiplies rows of " + std::to_string(cols) + " by " + std::to_string(m.cols) +
           "-wide " + std::string(model::tensorRoleName(role)));
    }
    return m;
  }

  // Rows [first, first + rows) of m (rows 0: all of them).
  WeightMatrix rowsOf(WeightMatrix m, int32_t first, int32_t rows) const {
    if (rows == 0 && first == 0) return m;
    if (first < 0 || rows <= 0 || first + rows > m.rows) {
      fail("takes rows [" + std::to_string(first) + ", " + std::to_string(first + rows) +
           ") of a matrix of " + std::to_string(m.rows));
    }
    m.data += static_cast<size_t>(first) * m.rowBytes;
    m.rows = rows;
    return m;
  }

  // The router and the stacked experts of a MoeFfn op over rows of `in` values.
  void bindExperts(const model::Op& op, int64_t in, BoundOp& bound) const {
    if (op.activation != model::Activation::Silu && op.activation != model::Activation::SwigluOai) {
      fail("uses an activation its experts lack");
    }
    if (op.moe.gating != model::MoeGating::Softmax &&
        op.moe.gating != model::MoeGating::SoftmaxWeight) {
      fail("uses an unknown expert gating");
    }
    if (op.src == op.dst) fail("writes the buffer it reads");
    bound.matrices[0] = matrix(TensorRole::GateInp, in);
    if (bound.matrices[0].rows != op.moe.experts) {
      fail("routes to " + std::to_string(op.moe.experts) + " experts with a router of " +
           std::to_string(bound.matrices[0].rows));
    }
    const TensorRole roles[3] = {TensorRole::GateExps, TensorRole::UpExps, TensorRole::DownExps};
    for (int i = 0; i < 3; ++i) {
      const model::Tensor t = tensor(roles[i]);
      try {
        bound.experts[static_cast<size_t>(i)] = ExpertMatrices::from(*t);
      } catch (const Error& e) {
        fail(e.what());
      }
      if (bound.experts[static_cast<size_t>(i)].count != op.moe.experts) {
        fail("needs " + std::to_string(op.moe.experts) + " experts in " + t->name);
      }
    }
    const WeightMatrix &gate = bound.experts[0].first, &up = bound.experts[1].first,
                       &down = bound.experts[2].first;
    if (gate.cols != in || up.cols != in || gate.rows != up.rows || down.cols != gate.rows) {
      fail("has expert matrices of mismatched shapes");
    }
    // llama.cpp's expert products take a float weight's vec_dot order at any batch size and a
    // K-quant's tiled order at 8+ tokens per expert; one order is chosen for gate and up, so
    // they must not mix the two families.
    if (isFloatKind(gate.kind) != isFloatKind(up.kind)) {
      fail("mixes float and quantized gate/up expert matrices");
    }
    if (op.moe.biases) {
      const int64_t e = op.moe.experts;
      bound.moeBiases = {vector(TensorRole::GateInpBias, e),
                         vector(TensorRole::GateExpsBias, e * gate.rows),
                         vector(TensorRole::UpExpsBias, e * up.rows),
                         vector(TensorRole::DownExpsBias, e * down.rows)};
    }
  }

  static bool isFloatKind(WeightKind k) {
    return k == WeightKind::F32 || k == WeightKind::F16 || k == WeightKind::BF16;
  }

  // The width of one head of a HeadNorm/Rope op's buffer.
  int64_t headWidth(const model::Op& op, int64_t width) const {
    if (op.heads <= 0 || width % op.heads != 0) {
      fail("splits " + std::to_string(width) + " values into " + std::to_string(op.heads) +
           " heads");
    }
    return width / op.heads;
  }

  int32_t ropeTable(const model::RopeParams& rope, int64_t headDim) const {
    if (rope.nRot <= 0 || rope.nRot % 2 != 0 || rope.nRot > headDim) {
      fail("rotates " + std::to_string(rope.nRot) + " of " + std::to_string(headDim) +
           " dimensions");
    }
    if (rope.freqFactors && (!m_b.ropeFreqs || m_b.ropeFreqCount < rope.nRot / 2)) {
      fail("needs RoPE frequency factors (rope_freqs or rope_factors) with " +
           std::to_string(rope.nRot / 2) + " factors");
    }
    const auto it = std::find(m_ropes.begin(), m_ropes.end(), rope);
    if (it != m_ropes.end()) return static_cast<int32_t>(it - m_ropes.begin());
    m_ropes.push_back(rope);
    return static_cast<int32_t>(m_ropes.size() - 1);
  }

  void bindAttention(const model::AttendParams& params, const BufferWidths& width) {
    const model::ModelConfig& c = *m_b.config;
    const int64_t q = width[idx(Buffer::Q)], k = width[idx(Buffer::K)];
    const int64_t kvDim = m_program.kvDim;
    if (k != kvDim || width[idx(Buffer::V)] != kvDim) {
      fail("attends over keys/values of " + std::to_string(k) + "/" +
           std::to_string(width[idx(Buffer::V)]) + " values, its cache holds " +
           std::to_string(kvDim));
    }
    if (c.headDim <= 0 || q % c.headDim != 0 || kvDim % c.headDim != 0 ||
        (q / c.headDim) % (kvDim / c.headDim) != 0) {
      fail("cannot split queries of " + std::to_string(q) + " and keys of " +
           std::to_string(kvDim) + " into heads of " + std::to_string(c.headDim));
    }
    if (params.window < 0) fail("has a negative attention window");
    // A program that bounds its cache itself (LayerProgram::window) would be sized by
    // kv_footprint.h other than what is allocated here (the context, or a sliding window's
    // ring).
    if (m_program.window != 0 && m_program.window < m_b.contextLength) {
      fail("declares a KV cache bounded by its window, which the CPU stage does not keep");
    }
    AttentionShape& s = m_layer.attention;
    s.nHead = static_cast<int32_t>(q / c.headDim);
    s.nHeadKv = static_cast<int32_t>(kvDim / c.headDim);
    s.headDim = c.headDim;
    s.contextLength = m_b.contextLength;
    s.scale = params.scale;
    s.window = params.window;
    s.sinks = params.sinks ? vector(TensorRole::AttnSinks, s.nHead) : nullptr;
    if (!(params.softcap >= 0) || !std::isfinite(params.softcap)) fail("has an invalid soft-cap");
    s.softcap = params.softcap;
    s.headMajorKeys = true;
    // A sliding-window layer keeps a ring of its last positions where that is smaller than the
    // context (model::kvRingPeriodFor); the stage refuses batches that would need positions
    // the ring no longer holds (SequenceBook::keepRing).
    s.ringPeriod = model::kvRingPeriodFor(params.window, m_b.contextLength);
    // Zero-filled: value positions past the cached ones are read (times probability 0) by the
    // zero-padded dot products and must be finite.
    m_layer.keys.resize(static_cast<size_t>(m_b.sequences));
    m_layer.values.resize(static_cast<size_t>(m_b.sequences));
    for (size_t i = 0; i < m_layer.keys.size(); ++i) {
      m_layer.keys[i].reset(static_cast<size_t>(s.keySlots()) * static_cast<size_t>(kvDim));
      m_layer.values[i].reset(static_cast<size_t>(s.valueStride()) * static_cast<size_t>(kvDim));
    }
  }

  // Buffers that an op after `at` reads before any op writes them.
  std::array<bool, model::kBufferCount> liveAfter(size_t at) const {
    std::array<bool, model::kBufferCount> live{}, decided{};
    for (size_t j = at + 1; j < m_program.ops.size(); ++j) {
      const Access a = accessOf(m_program.ops[j]);
      for (size_t b = 0; b < model::kBufferCount; ++b) {
        if (decided[b]) continue;
        if (a.reads[b]) live[b] = decided[b] = true;
        if (a.writes[b]) decided[b] = true;
      }
    }
    // The residual stream goes on to the next layer or the head.
    live[idx(Buffer::X)] = live[idx(Buffer::X)] || !decided[idx(Buffer::X)];
    return live;
  }

  const model::LayerProgram& m_program;
  const LayerBinding& m_b;
  std::vector<model::RopeParams>& m_ropes;
  CpuLayer m_layer;
  size_t m_at = 0;
};

}  // namespace

CpuLayer bindLayer(const model::LayerProgram& program, const LayerBinding& binding,
                   std::vector<model::RopeParams>& ropes) {
  return Binder(program, binding, ropes).bind();
}

}  // namespace shoal::cpu
