#pragma once
// y = W x for a weight matrix kept in its quantized file format and a batch of f32 activations.

#include <cstdint>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/thread_pool.h"

namespace shoal::cpu {

// A weight matrix of `rows` rows, each `cols` elements of `type`, as stored in the GGUF file.
struct WeightMatrix {
  gguf::TensorType type = gguf::TensorType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  size_t rowBytes = 0;
  gguf::TensorType activation = gguf::TensorType::F32;  // format x is converted to
  DotFn dot = nullptr;

  static WeightMatrix from(const gguf::TensorInfo& tensor);
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * rowBytes; }
};

// Scratch reused across calls so the decode path does not allocate.
struct MatmulScratch {
  std::vector<uint8_t> activations;
};

// y[t * W.rows + r] = dot(W row r, x[t * W.cols ...]) for t in [0, tokens).
void matmul(const WeightMatrix& w, const float* x, int64_t tokens, float* y, ThreadPool& pool,
            MatmulScratch& scratch);

}  // namespace shoal::cpu
