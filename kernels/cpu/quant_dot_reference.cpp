#include <cstring>

#include "engine/error.h"
#include "engine/gguf/dequantize.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/quant_dot.h"

namespace shoal::cpu {
namespace {

using gguf::bf16ToFloat;
using gguf::halfToFloat;
using gguf::TensorType;

float dotF32(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * y[i];
  return static_cast<float>(sum);
}

float dotF16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(halfToFloat(x[i])) * halfToFloat(y[i]);
  return static_cast<float>(sum);
}

float dotBF16(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16ToFloat(x[i])) * bf16ToFloat(y[i]);
  return static_cast<float>(sum);
}

float dotQ4_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int32_t sumi = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += ((x[b].qs[j] & 0xF) - 8) * y[b].qs[j];
      sumi += ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + 16];
    }
    sum += static_cast<float>(sumi) * halfToFloat(x[b].d) * halfToFloat(y[b].d);
  }
  return sum;
}

float dotQ4_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int32_t sumi = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += (x[b].qs[j] & 0xF) * y[b].qs[j];
      sumi += (x[b].qs[j] >> 4) * y[b].qs[j + 16];
    }
    sum += static_cast<float>(sumi) * halfToFloat(x[b].d) * halfToFloat(y[b].d) +
           halfToFloat(x[b].m) * halfToFloat(y[b].s);
  }
  return sum;
}

int fifthBit(const uint8_t qh[4], int j) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return static_cast<int>((bits >> j) & 1u) << 4;
}

float dotQ5_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int32_t sumi = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += (((x[b].qs[j] & 0xF) | fifthBit(x[b].qh, j)) - 16) * y[b].qs[j];
      sumi += (((x[b].qs[j] >> 4) | fifthBit(x[b].qh, j + 16)) - 16) * y[b].qs[j + 16];
    }
    sum += static_cast<float>(sumi) * halfToFloat(x[b].d) * halfToFloat(y[b].d);
  }
  return sum;
}

float dotQ5_1(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int32_t sumi = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += ((x[b].qs[j] & 0xF) | fifthBit(x[b].qh, j)) * y[b].qs[j];
      sumi += ((x[b].qs[j] >> 4) | fifthBit(x[b].qh, j + 16)) * y[b].qs[j + 16];
    }
    sum += static_cast<float>(sumi) * halfToFloat(x[b].d) * halfToFloat(y[b].d) +
           halfToFloat(x[b].m) * halfToFloat(y[b].s);
  }
  return sum;
}

float dotQ8_0(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int32_t sumi = 0;
    for (int j = 0; j < kQK; ++j) sumi += x[b].qs[j] * y[b].qs[j];
    sum += static_cast<float>(sumi) * halfToFloat(x[b].d) * halfToFloat(y[b].d);
  }
  return sum;
}

// Q4_K/Q5_K: value = d * scale_j * q - dmin * min_j per 32-element sub-block j; the minimum part
// of the dot product needs only the sums of the activations per 16, which Q8_K carries (bsums).
float dotQ4_K(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = halfToFloat(x[b].d) * y[b].d;
    const float dmin = halfToFloat(x[b].dmin) * y[b].d;
    int32_t sumScaled = 0, sumMins = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      kQuantScaleMin(j, x[b].scales, sc, mn);
      const uint8_t* q = x[b].qs + (j / 2) * 32;
      const int8_t* q8 = y[b].qs + j * 32;
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) s += ((j % 2 == 0) ? (q[l] & 0xF) : (q[l] >> 4)) * q8[l];
      sumScaled += s * sc;
      sumMins += mn * (y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
    }
    sum += d * static_cast<float>(sumScaled) - dmin * static_cast<float>(sumMins);
  }
  return sum;
}

float dotQ5_K(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = halfToFloat(x[b].d) * y[b].d;
    const float dmin = halfToFloat(x[b].dmin) * y[b].d;
    int32_t sumScaled = 0, sumMins = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, mn;
      kQuantScaleMin(j, x[b].scales, sc, mn);
      const uint8_t* q = x[b].qs + (j / 2) * 32;
      const int8_t* q8 = y[b].qs + j * 32;
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) {
        const int lo = (j % 2 == 0) ? (q[l] & 0xF) : (q[l] >> 4);
        const int hi = (x[b].qh[l] >> j) & 1;  // sub-block j keeps its fifth bits in bit j
        s += (lo | (hi << 4)) * q8[l];
      }
      sumScaled += s * sc;
      sumMins += mn * (y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
    }
    sum += d * static_cast<float>(sumScaled) - dmin * static_cast<float>(sumMins);
  }
  return sum;
}

// Q6_K: 16 sub-blocks of 16 with 8-bit scales; a 6-bit value is 4 low bits from ql and 2 high
// bits from qh, minus 32. Each 128-element half uses 64 bytes of ql and 32 of qh.
float dotQ6_K(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    int32_t sumScaled = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x[b].ql + 64 * half;
      const uint8_t* qh = x[b].qh + 32 * half;
      const int8_t* sc = x[b].scales + 8 * half;
      const int8_t* q8 = y[b].qs + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        sumScaled += sc[is + 0] * q1 * q8[l] + sc[is + 2] * q2 * q8[l + 32] +
                     sc[is + 4] * q3 * q8[l + 64] + sc[is + 6] * q4 * q8[l + 96];
      }
    }
    sum += halfToFloat(x[b].d) * y[b].d * static_cast<float>(sumScaled);
  }
  return sum;
}

}  // namespace

gguf::TensorType activationType(gguf::TensorType weight) {
  switch (weight) {
    case TensorType::F32: return TensorType::F32;
    case TensorType::F16: return TensorType::F16;
    case TensorType::BF16: return TensorType::BF16;
    case TensorType::Q4_0:
    case TensorType::Q5_0:
    case TensorType::Q8_0: return TensorType::Q8_0;
    case TensorType::Q4_1:
    case TensorType::Q5_1: return TensorType::Q8_1;
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K: return TensorType::Q8_K;
    default: break;
  }
  throw Error("CPU backend: no matrix kernel for weight type " +
              std::string(gguf::typeTraits(weight).name));
}

void quantizeActivations(gguf::TensorType type, const float* x, void* dst, int64_t n) {
  if (type == TensorType::F32) {
    std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
  } else {
    gguf::quantizeRow(type, x, dst, n);
  }
}

DotFn referenceDot(gguf::TensorType weight) {
  switch (weight) {
    case TensorType::F32: return dotF32;
    case TensorType::F16: return dotF16;
    case TensorType::BF16: return dotBF16;
    case TensorType::Q4_0: return dotQ4_0;
    case TensorType::Q4_1: return dotQ4_1;
    case TensorType::Q5_0: return dotQ5_0;
    case TensorType::Q5_1: return dotQ5_1;
    case TensorType::Q8_0: return dotQ8_0;
    case TensorType::Q4_K: return dotQ4_K;
    case TensorType::Q5_K: return dotQ5_K;
    case TensorType::Q6_K: return dotQ6_K;
    default: break;
  }
  throw Error("CPU backend: no dot product for weight type " +
              std::string(gguf::typeTraits(weight).name));
}

}  // namespace shoal::cpu
