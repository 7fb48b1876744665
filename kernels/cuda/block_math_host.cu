// Host builds of block_math.cuh's sub-block functions (see block_math_host.h). The same source
// the kernels run, only the intrinsics differ: block_math.cuh gives each a plain host version.

#include <cstring>
#include <string>

#include "engine/error.h"
#include "kernels/cuda/block_math.cuh"
#include "kernels/cuda/block_math_host.h"

namespace shoal::cuda {
namespace {

[[noreturn]] void unsupported(const char* what, TensorType type) {
  throw Error(std::string(what) + ": no CUDA kernel for ggml type " +
              std::to_string(static_cast<uint32_t>(type)));
}

template <typename Out>
void dequantTo(TensorType type, const uint8_t* row, int64_t s, Out* y) {
  switch (type) {
#define SHOAL_HOST_DEQUANT_CASE(T)               \
  case TensorType::T:                            \
    dequantSubBlockTo<TensorType::T>(row, s, y); \
    return;
    SHOAL_CUDA_QUANT_TYPES(SHOAL_HOST_DEQUANT_CASE)
    SHOAL_CUDA_FLOAT_TYPES(SHOAL_HOST_DEQUANT_CASE)
#undef SHOAL_HOST_DEQUANT_CASE
    default:
      unsupported("hostDequantSubBlock", type);
  }
}

}  // namespace

bool hostHasSubBlockDot(TensorType type) {
  switch (type) {
#define SHOAL_HOST_HAS_DOT_CASE(T) \
  case TensorType::T:              \
    return true;
    SHOAL_CUDA_QUANT_TYPES(SHOAL_HOST_HAS_DOT_CASE)
#undef SHOAL_HOST_HAS_DOT_CASE
    default:
      return false;
  }
}

float hostSubBlockDot(TensorType type, const uint8_t* row, int64_t s, const int8_t* xq32, float d,
                      float dSum) {
  // The kernel reads the activations as 8 ints (4 quants each); copying keeps the host build
  // free of aliasing int8 storage through int.
  int x[8];
  std::memcpy(x, xq32, sizeof x);
  const float2 xds = make_float2(d, dSum);
  switch (type) {
#define SHOAL_HOST_DOT_CASE(T) \
  case TensorType::T:          \
    return subBlockDot<TensorType::T>(row, s, x, xds);
    SHOAL_CUDA_QUANT_TYPES(SHOAL_HOST_DOT_CASE)
#undef SHOAL_HOST_DOT_CASE
    default:
      unsupported("hostSubBlockDot", type);
  }
}

void hostDequantSubBlock(TensorType type, const uint8_t* row, int64_t s, float* y32) {
  dequantTo(type, row, s, y32);
}

void hostDequantSubBlockHalf(TensorType type, const uint8_t* row, int64_t s, uint16_t* y32) {
  __half h[32];
  dequantTo(type, row, s, h);
  std::memcpy(y32, h, sizeof h);
}

}  // namespace shoal::cuda
