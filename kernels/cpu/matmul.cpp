#include "kernels/cpu/matmul.h"

#include <algorithm>

#include "engine/error.h"

namespace shoal::cpu {

WeightMatrix WeightMatrix::from(const gguf::TensorInfo& tensor) {
  if (tensor.dims.empty() || tensor.dims.size() > 2) {
    throw Error("tensor " + tensor.name + ": a weight matrix must have 1 or 2 dimensions");
  }
  WeightMatrix w;
  w.type = tensor.type;
  w.cols = tensor.dims[0];
  w.rows = tensor.dims.size() == 2 ? tensor.dims[1] : 1;
  w.data = tensor.data;
  w.rowBytes = gguf::rowBytes(tensor.type, w.cols);
  w.activation = activationType(tensor.type);
  w.dot = referenceDot(tensor.type);
  return w;
}

void matmul(const WeightMatrix& w, const float* x, int64_t tokens, float* y, ThreadPool& pool,
            MatmulScratch& scratch) {
  const size_t actBytes = gguf::rowBytes(w.activation, w.cols);
  const size_t need = actBytes * static_cast<size_t>(tokens);
  if (scratch.activations.size() < need) scratch.activations.resize(need);
  uint8_t* act = scratch.activations.data();

  pool.parallelFor(tokens, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      quantizeActivations(w.activation, x + t * w.cols, act + static_cast<size_t>(t) * actBytes,
                          w.cols);
    }
  });

  // Rows are split between threads; within a thread a tile of rows meets every token, so each
  // weight row is read from memory once per call however many tokens the batch holds.
  constexpr int64_t kRowTile = 16;
  pool.parallelFor(
      w.rows,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t r0 = begin; r0 < end; r0 += kRowTile) {
          const int64_t r1 = std::min(end, r0 + kRowTile);
          for (int64_t t = 0; t < tokens; ++t) {
            const uint8_t* a = act + static_cast<size_t>(t) * actBytes;
            float* yt = y + t * w.rows;
            for (int64_t r = r0; r < r1; ++r) yt[r] = w.dot(w.row(r), a, w.cols);
          }
        }
      },
      kRowTile);
}

}  // namespace shoal::cpu
