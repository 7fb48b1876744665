#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace shoal::cpu {

WeightMatrix WeightMatrix::from(const gguf::TensorInfo& tensor) {
  if (tensor.dims.empty() || tensor.dims.size() > 2) {
    throw Error("tensor " + tensor.name + ": a weight matrix must have 1 or 2 dimensions");
  }
  WeightMatrix w;
  w.type = tensor.type;
  w.kind = weightKind(tensor.type);
  w.activation = activationKind(w.kind);
  w.cols = tensor.dims[0];
  w.rows = tensor.dims.size() == 2 ? tensor.dims[1] : 1;
  w.data = tensor.data;
  w.rowBytes = gguf::rowBytes(tensor.type, w.cols);
  return w;
}

size_t WeightMatrix::activationBytes() const {
  return gguf::rowBytes(activationTensorType(activation), cols);
}

DotOrder dotOrder(const WeightMatrix& w, int64_t tokens) {
  if (tokens < 2 || w.rows % 4 != 0) return DotOrder::Vec;
  // tinyBLAS steps: 16 floats (F32, F16 as f32 after vcvtph2ps), 32 bf16 (vdpbf16ps).
  switch (w.kind) {
    case WeightKind::F32:
    case WeightKind::F16:
      return w.cols % 16 == 0 ? DotOrder::Tiled : DotOrder::Vec;
    case WeightKind::BF16:
      return w.cols % 32 == 0 ? DotOrder::Tiled : DotOrder::Vec;
    default:
      return DotOrder::Vec;
  }
}

void matmul(const WeightMatrix& w, const float* x, int64_t tokens, float* y, ThreadPool& pool,
            MatmulScratch& scratch) {
  const KernelTable& k = kernels();
  const size_t actBytes = w.activationBytes();
  const size_t need = actBytes * static_cast<size_t>(tokens);
  if (scratch.activations.size() < need) scratch.activations.resize(need);
  uint8_t* act = scratch.activations.data();
  const ConvertFn convert = k.convert[static_cast<int>(w.activation)];
  if (tokens == 1) {
    convert(x, act, w.cols);
  } else {
    pool.parallelFor(tokens, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        convert(x + t * w.cols, act + static_cast<size_t>(t) * actBytes, w.cols);
      }
    });
  }

  GemmArgs args;
  args.weights = w.data;
  args.weightStride = w.rowBytes;
  args.act = act;
  args.actStride = actBytes;
  args.tokens = tokens;
  args.cols = w.cols;
  args.y = y;
  args.ldy = w.rows;
  args.order = dotOrder(w, tokens);
  const GemmFn gemm = k.gemm[static_cast<int>(w.kind)];
  // Rows are split between threads in runs of 4 (the decode kernels' tile); each thread meets
  // every token with its rows, so each weight row is read once per call.
  pool.parallelFor(
      w.rows, [&](int64_t begin, int64_t end, int) { gemm(args, begin, end); }, 4);
}

}  // namespace shoal::cpu
