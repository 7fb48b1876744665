// Scalar reference activation converters: the formats activations take before a matrix product.

#include <cmath>
#include <cstring>

#include "engine/gguf/dequantize.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/ggml_order.h"
#include "kernels/cpu/reference_kernels.h"

namespace shoal::cpu::ref {
namespace {

// ggml's x86 quantize_row_q8_0 / q8_1 (arch/x86/quants.c), which differ from the reference
// quantizers in engine/gguf (and ggml's own *_ref): the inverse scale is 127/amax, not 1/d, and
// products are rounded half to even, not half away from zero. Returns the sum of the quants.
int32_t quantizeBlock(const float* x, float& d, int8_t qs[32]) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int32_t sum = 0;
  for (int j = 0; j < 32; ++j) {
    const int32_t q = order::roundEven(x[j] * id);
    qs[j] = static_cast<int8_t>(q);
    sum += q;
  }
  return sum;
}

}  // namespace

void convertF32(const float* x, void* dst, int64_t n) {
  std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
}

void convertF16(const float* x, void* dst, int64_t n) {
  floatToHalf(x, static_cast<uint16_t*>(dst), n);
}

void convertBF16(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = gguf::floatToBf16(x[i]);
}

void quantizeQ8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float d;
    quantizeBlock(x + b * kQK, d, y[b].qs);
    y[b].d = gguf::floatToHalf(d);
  }
}

void quantizeQ8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t b = 0; b < n / kQK; ++b) {
    float d;
    const int32_t sum = quantizeBlock(x + b * kQK, d, y[b].qs);
    y[b].d = gguf::floatToHalf(d);
    y[b].s = gguf::floatToHalf(d * static_cast<float>(sum));
  }
}

// ggml's x86 build quantizes Q8_K with its reference quantizer, which engine/gguf reproduces.
void quantizeQ8_K(const float* x, void* dst, int64_t n) {
  gguf::quantizeRow(gguf::TensorType::Q8_K, x, dst, n);
}

void halfToFloat(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = gguf::halfToFloat(x[i]);
}

void floatToHalf(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = gguf::floatToHalf(x[i]);
}

}  // namespace shoal::cpu::ref
