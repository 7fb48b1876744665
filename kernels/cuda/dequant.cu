// Weights to f16 (the cuBLAS path of batches) and rows to f32 (the embedding lookup). One thread
// per 32-element sub-block (dequantSubBlock, block_math.cuh).

#include <string>

#include "kernels/cuda/block_math.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace shoal::cuda {
namespace {

// Sub-block i of the output = sub-block (i % perRow) of row ids[i / perRow] (or i / perRow).
template <TensorType T, typename Out>
__global__ void dequantKernel(const uint8_t* w, const int32_t* ids, int64_t outRows, int64_t k,
                              int64_t rowBytes, Out* out) {
  const int64_t perRow = k / 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= outRows * perRow) return;
  const int64_t outRow = i / perRow, s = i % perRow;
  const int64_t srcRow = ids ? ids[outRow] : outRow;
  dequantSubBlockTo<T>(w + srcRow * rowBytes, s, out + outRow * k + s * 32);
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
    SHOAL_CUDA_QUANT_TYPES(SHOAL_DEQUANT_CASE)
    SHOAL_CUDA_FLOAT_TYPES(SHOAL_DEQUANT_CASE)
#undef SHOAL_DEQUANT_CASE
    default:
      throw Error("CUDA dequantize: unsupported weight type " +
                  std::to_string(static_cast<int>(type)));
  }
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool weightTypeSupported(TensorType type) { return typeBlockBytes(type) != 0; }

int64_t typeBlockElements(TensorType type) {
  switch (type) {
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_XS:
      return 256;
    case TensorType::F16:
    case TensorType::BF16:
    case TensorType::F32:
      return 1;
    default:
      return 32;
  }
}

int64_t typeBlockBytes(TensorType type) {
  switch (type) {
#define SHOAL_BLOCK_BYTES_CASE(T) \
  case TensorType::T:             \
    return k##T##Bytes;
    SHOAL_CUDA_QUANT_TYPES(SHOAL_BLOCK_BYTES_CASE)
#undef SHOAL_BLOCK_BYTES_CASE
    case TensorType::F16:
    case TensorType::BF16:
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
