// Weights to f16 (the cuBLAS path of batches) and rows to f32 (the embedding lookup). One thread
// per 32-element sub-block (device_blocks.cuh).

#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_blocks.cuh"

namespace shoal::cuda {
namespace {

using gguf::TensorType;

template <TensorType T>
__device__ void dequantSubBlock(const uint8_t* row, int64_t s, float* y);

template <>
__device__ void dequantSubBlock<TensorType::Q4_0>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + s * kQ4_0Bytes;
  const float d = loadHalf(b);
  for (int l = 0; l < 16; ++l) {
    y[l] = d * static_cast<float>((b[2 + l] & 0xF) - 8);
    y[l + 16] = d * static_cast<float>((b[2 + l] >> 4) - 8);
  }
}

template <>
__device__ void dequantSubBlock<TensorType::Q4_1>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + s * kQ4_1Bytes;
  const float d = loadHalf(b), m = loadHalf(b + 2);
  for (int l = 0; l < 16; ++l) {
    y[l] = d * static_cast<float>(b[4 + l] & 0xF) + m;
    y[l + 16] = d * static_cast<float>(b[4 + l] >> 4) + m;
  }
}

template <>
__device__ void dequantSubBlock<TensorType::Q8_0>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + s * kQ8_0Bytes;
  const float d = loadHalf(b);
  for (int l = 0; l < 32; ++l) y[l] = d * static_cast<float>(static_cast<int8_t>(b[2 + l]));
}

template <>
__device__ void dequantSubBlock<TensorType::Q4_K>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + (s / 8) * kQ4_KBytes;
  const int j = static_cast<int>(s % 8);
  int scale, min;
  q4kScaleMin(j, b + 4, scale, min);
  const float d = loadHalf(b) * static_cast<float>(scale);
  const float m = loadHalf(b + 2) * static_cast<float>(min);
  const uint8_t* qs = b + 16 + 32 * (j / 2);
  const int shift = (j & 1) * 4;
  for (int l = 0; l < 32; ++l) y[l] = d * static_cast<float>((qs[l] >> shift) & 0xF) - m;
}

template <>
__device__ void dequantSubBlock<TensorType::Q6_K>(const uint8_t* row, int64_t s, float* y) {
  const uint8_t* b = row + (s / 8) * kQ6_KBytes;
  const int j = static_cast<int>(s % 8);
  const int h = j / 4, r = j % 4;
  const uint8_t* ql = b + 64 * h + 32 * (r & 1);
  const uint8_t* qh = b + 128 + 32 * h;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * h + 2 * r;
  const float d = loadHalf(b + 208);
  const int lowShift = r >= 2 ? 4 : 0;
  for (int l = 0; l < 32; ++l) {
    const int q = (((ql[l] >> lowShift) & 0xF) | (((qh[l] >> (2 * r)) & 3) << 4)) - 32;
    y[l] = d * static_cast<float>(sc[l / 16]) * static_cast<float>(q);
  }
}

template <>
__device__ void dequantSubBlock<TensorType::F16>(const uint8_t* row, int64_t s, float* y) {
  const __half* h = reinterpret_cast<const __half*>(row) + s * 32;
  for (int l = 0; l < 32; ++l) y[l] = __half2float(h[l]);
}

template <>
__device__ void dequantSubBlock<TensorType::F32>(const uint8_t* row, int64_t s, float* y) {
  const float* f = reinterpret_cast<const float*>(row) + s * 32;
  for (int l = 0; l < 32; ++l) y[l] = f[l];
}

__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }

// Sub-block i of the output = sub-block (i % perRow) of row ids[i / perRow] (or i / perRow).
template <TensorType T, typename Out>
__global__ void dequantKernel(const uint8_t* w, const int32_t* ids, int64_t outRows, int64_t k,
                              int64_t rowBytes, Out* out) {
  const int64_t perRow = k / 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= outRows * perRow) return;
  const int64_t outRow = i / perRow, s = i % perRow;
  const int64_t srcRow = ids ? ids[outRow] : outRow;
  float v[32];
  dequantSubBlock<T>(w + srcRow * rowBytes, s, v);
  Out* o = out + outRow * k + s * 32;
  for (int l = 0; l < 32; ++l) store(o + l, v[l]);
}

template <typename Out>
void launchDequant(TensorType type, const void* w, const int32_t* ids, int64_t outRows, int64_t k,
                   int64_t rowBytes, Out* out, cudaStream_t stream) {
  if (k % 32 != 0)
    throw Error("CUDA dequantize: row length " + std::to_string(k) + " is not a multiple of 32");
  const int64_t n = outRows * (k / 32);
  const unsigned grid = static_cast<unsigned>((n + 127) / 128);
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (type) {
#define SHOAL_DEQUANT_CASE(T)                                           \
  case TensorType::T:                                                   \
    dequantKernel<TensorType::T, Out>                                   \
        <<<grid, 128, 0, stream>>>(wb, ids, outRows, k, rowBytes, out); \
    break;
    SHOAL_DEQUANT_CASE(Q4_0)
    SHOAL_DEQUANT_CASE(Q4_1)
    SHOAL_DEQUANT_CASE(Q8_0)
    SHOAL_DEQUANT_CASE(Q4_K)
    SHOAL_DEQUANT_CASE(Q6_K)
    SHOAL_DEQUANT_CASE(F16)
    SHOAL_DEQUANT_CASE(F32)
#undef SHOAL_DEQUANT_CASE
    default:
      throw Error("CUDA dequantize: unsupported weight type " +
                  std::to_string(static_cast<int>(type)));
  }
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool weightTypeSupported(TensorType type) {
  switch (type) {
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q8_0:
    case TensorType::Q4_K:
    case TensorType::Q6_K:
    case TensorType::F16:
    case TensorType::F32:
      return true;
    default:
      return false;
  }
}

int64_t typeBlockElements(TensorType type) {
  switch (type) {
    case TensorType::Q4_K:
    case TensorType::Q6_K:
      return 256;
    case TensorType::F16:
    case TensorType::F32:
      return 1;
    default:
      return 32;
  }
}

int64_t typeBlockBytes(TensorType type) {
  switch (type) {
    case TensorType::Q4_0:
      return kQ4_0Bytes;
    case TensorType::Q4_1:
      return kQ4_1Bytes;
    case TensorType::Q8_0:
      return kQ8_0Bytes;
    case TensorType::Q4_K:
      return kQ4_KBytes;
    case TensorType::Q6_K:
      return kQ6_KBytes;
    case TensorType::F16:
      return 2;
    case TensorType::F32:
      return 4;
    default:
      return 0;
  }
}

void dequantizeToHalf(TensorType type, const void* w, int64_t rows, int64_t k, int64_t rowBytes,
                      __half* out, cudaStream_t stream) {
  launchDequant(type, w, nullptr, rows, k, rowBytes, out, stream);
}

void gatherRows(TensorType type, const void* w, const int32_t* ids, int64_t count, int64_t k,
                int64_t rowBytes, float* out, cudaStream_t stream) {
  launchDequant(type, w, ids, count, k, rowBytes, out, stream);
}

}  // namespace shoal::cuda
