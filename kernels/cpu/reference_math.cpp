// Scalar reference of the float ops whose rounding ggml defines with SIMD code: the softmax
// numerator and SwiGLU (ggml-cpu/vec.cpp), both built on ggml's vectorized exp.

#include <cmath>

#include "kernels/cpu/ggml_order.h"
#include "kernels/cpu/reference_kernels.h"

namespace shoal::cpu::ref {

double softmaxExp(const float* x, float max, float* y, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; i += 16) {
    float group[16] = {};
    for (int l = 0; l < 16 && i + l < n; ++l) {
      group[l] = order::exp(x[i + l] - max);
      y[i + l] = group[l];
    }
    sum += static_cast<double>(order::reduce16(group));
  }
  return sum;
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
  const int64_t full = n - n % 16;
  int64_t i = 0;
  for (; i < full; ++i) y[i] = order::silu(gate[i]) * up[i];
  for (; i < n; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace shoal::cpu::ref
