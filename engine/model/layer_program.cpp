#include "engine/model/layer_program.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace shoal::model {

Op rmsNorm(Buffer src, Buffer dst, TensorRole weight, float eps) {
  Op op;
  op.kind = OpKind::RmsNorm;
  op.src = src;
  op.dst = dst;
  op.weight = weight;
  op.eps = eps;
  return op;
}

Op project(Buffer src, std::initializer_list<ProjectOut> outs) {
  if (outs.size() == 0 || outs.size() > 3) throw Error("a Project op has 1 to 3 outputs");
  Op op;
  op.kind = OpKind::Project;
  op.src = src;
  for (const ProjectOut& o : outs) op.outs[op.outCount++] = o;
  op.dst = op.outs[0].dst;
  return op;
}

Op addBias(Buffer dst, TensorRole bias) {
  Op op;
  op.kind = OpKind::AddBias;
  op.src = dst;
  op.dst = dst;
  op.weight = bias;
  return op;
}

Op headNorm(Buffer dst, int32_t heads, TensorRole weight, float eps) {
  Op op;
  op.kind = OpKind::HeadNorm;
  op.src = dst;
  op.dst = dst;
  op.heads = heads;
  op.weight = weight;
  op.eps = eps;
  return op;
}

Op rope(Buffer dst, int32_t heads, const RopeParams& params) {
  Op op;
  op.kind = OpKind::Rope;
  op.src = dst;
  op.dst = dst;
  op.heads = heads;
  op.rope = params;
  return op;
}

Op attend(const AttendParams& params) {
  Op op;
  op.kind = OpKind::Attend;
  op.src = Buffer::Q;
  op.dst = Buffer::Attn;
  op.attend = params;
  return op;
}

Op keepOutputRows() {
  Op op;
  op.kind = OpKind::KeepOutputRows;
  return op;
}

Op add(Buffer src, Buffer dst) {
  Op op;
  op.kind = OpKind::Add;
  op.src = src;
  op.dst = dst;
  return op;
}

Op gatedFfn(Buffer src, TensorRole gate, TensorRole up, Activation activation) {
  Op op;
  op.kind = OpKind::GatedFfn;
  op.src = src;
  op.dst = Buffer::Gate;
  op.ffn = {gate, up};
  op.activation = activation;
  return op;
}

Op fusedGatedFfn(Buffer src, TensorRole gateUp, Activation activation) {
  Op op = gatedFfn(src, gateUp, gateUp, activation);
  op.fusedGateUp = true;
  return op;
}

Op moeFfn(Buffer src, Buffer dst, const MoeParams& params, Activation activation) {
  if (params.experts <= 0 || params.used <= 0 || params.used > params.experts) {
    throw Error("a MoeFfn op routes each token to 1.." + std::to_string(params.experts) +
                " experts (got " + std::to_string(params.used) + ")");
  }
  Op op;
  op.kind = OpKind::MoeFfn;
  op.src = src;
  op.dst = dst;
  op.activation = activation;
  op.moe = params;
  return op;
}

Op scale(Buffer dst, float factor) {
  Op op;
  op.kind = OpKind::Scale;
  op.src = dst;
  op.dst = dst;
  op.factor = factor;
  return op;
}

}  // namespace shoal::model
