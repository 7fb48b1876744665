// Decode mat-vec: y = W x for a few tokens, W in its GGUF format. One warp per output row; lane
// l takes the 32-element sub-blocks l, l + 32, ... of the row, so a warp reads a contiguous run
// of blocks (coalesced) and the whole row exactly once. Quantized formats multiply their integer
// quants with the int8 activations four at a time (dp4a) and apply the scales per sub-block
// (subBlockDot, block_math.cuh).
//
// The same kernels run a mixture of experts' products (matvecExperts): the grid's y index is
// then an entry (token, rank) whose expert (ids) picks which `rows` rows of the stacked expert
// matrix it reads, and whose input is its token's row or its own. Two fused forms save decode
// launches: matvecSet reads up to three matrices of one type (a Project's outputs: Q, K and V)
// in one launch, and matvecGated computes a gated FFN's gate and up rows and applies the
// activation, so only the activated row is written.

#include "kernels/cuda/activations.cuh"
#include "kernels/cuda/block_math.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace shoal::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// Which rows and which input row the grid's y index (blockIdx.y) stands for.
struct Routing {
  const int32_t* ids = nullptr;  // nullptr: y is a token, reading rows 0.. of w
  int32_t used = 1;              // entries per token
  bool perEntryInput = false;    // the input row is the entry's own, not its token's
};

// The first weight row and the input row of grid row y.
__device__ __forceinline__ void locate(const Routing& route, int64_t y, int64_t rows,
                                       int64_t& firstRow, int64_t& input) {
  if (!route.ids) {
    firstRow = 0;
    input = y;
    return;
  }
  firstRow = static_cast<int64_t>(route.ids[y]) * rows;
  input = route.perEntryInput ? y : y / route.used;
}

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One row of a quantized matrix times input row t of the int8 activations, summed over the
// warp (every lane gets the sum).
template <TensorType T>
__device__ __forceinline__ float rowDot(const uint8_t* row, int64_t k, const int8_t* xq,
                                        const float2* xds, int64_t t) {
  const int64_t subBlocks = k / 32;
  const int* x = reinterpret_cast<const int*>(xq + t * k);
  const float2* d = xds + t * subBlocks;
  float acc = 0;
  for (int64_t s = threadIdx.x; s < subBlocks; s += 32)
    acc += subBlockDot<T>(row, s, x + s * 8, d[s]);
  return warpSum(acc);
}

template <TensorType T>
__global__ void matvecQuantKernel(const uint8_t* w, int64_t rows, int64_t k, int64_t rowBytes,
                                  const int8_t* xq, const float2* xds, float* y, Routing route) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (r >= rows) return;
  int64_t firstRow, t;
  locate(route, blockIdx.y, rows, firstRow, t);
  const float acc = rowDot<T>(w + (firstRow + r) * rowBytes, k, xq, xds, t);
  if (threadIdx.x == 0) y[static_cast<int64_t>(blockIdx.y) * rows + r] = acc;
}

// Several matrices of one type over the same input in one launch (a Project's outputs): grid x
// blocks [first[i], first[i + 1]) compute matrix i's rows.
struct MatrixSet {
  const uint8_t* w[kMaxMatvecSet];
  int64_t rows[kMaxMatvecSet];
  int64_t rowBytes[kMaxMatvecSet];
  float* y[kMaxMatvecSet];
  unsigned first[kMaxMatvecSet + 1];
  int count;
};

template <TensorType T>
__global__ void matvecSetKernel(MatrixSet set, int64_t k, const int8_t* xq, const float2* xds) {
  int i = 0;
  while (i + 1 < set.count && blockIdx.x >= set.first[i + 1]) ++i;
  const int64_t r = static_cast<int64_t>(blockIdx.x - set.first[i]) * kWarpsPerBlock + threadIdx.y;
  if (r >= set.rows[i]) return;
  const int64_t t = blockIdx.y;
  const float acc = rowDot<T>(set.w[i] + r * set.rowBytes[i], k, xq, xds, t);
  if (threadIdx.x == 0) set.y[i][t * set.rows[i] + r] = acc;
}

// A gated FFN's two products and its activation in one pass: y[t][r] = act(gate row r · x_t,
// up row r · x_t), so the up products never reach memory.
template <TensorType T, GateActivation A>
__global__ void matvecGatedKernel(const uint8_t* gate, const uint8_t* up, int64_t rows, int64_t k,
                                  int64_t rowBytes, const int8_t* xq, const float2* xds, float* y) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (r >= rows) return;
  const int64_t t = blockIdx.y;
  const float g = rowDot<T>(gate + r * rowBytes, k, xq, xds, t);
  const float u = rowDot<T>(up + r * rowBytes, k, xq, xds, t);
  if (threadIdx.x == 0) y[t * rows + r] = activate<A>(g, u);
}

template <typename W>
__device__ __forceinline__ float2 load2f(const W* p);
template <>
__device__ __forceinline__ float2 load2f<__half>(const __half* p) {
  return __half22float2(*reinterpret_cast<const __half2*>(p));
}
template <>
__device__ __forceinline__ float2 load2f<__nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
template <>
__device__ __forceinline__ float2 load2f<float>(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}

// F16/BF16/F32 rows against float activations, two elements per load (k is even).
template <typename W>
__global__ void matvecFloatKernel(const W* w, int64_t rows, int64_t k, const float* xf, float* y,
                                  Routing route) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.y;
  if (r >= rows) return;
  int64_t firstRow, t;
  locate(route, blockIdx.y, rows, firstRow, t);
  const W* row = w + (firstRow + r) * k;
  const float* x = xf + t * k;
  float acc = 0;
  for (int64_t i = 2 * threadIdx.x; i < k; i += 64) {
    const float2 wv = load2f<W>(row + i);
    const float2 xv = *reinterpret_cast<const float2*>(x + i);
    acc += wv.x * xv.x + wv.y * xv.y;
  }
  acc = warpSum(acc);
  if (threadIdx.x == 0) y[static_cast<int64_t>(blockIdx.y) * rows + r] = acc;
}

// y (outRows x rows) from `rows` rows of w per grid row, as `route` says.
void launch(TensorType type, const void* w, int64_t rows, int64_t k, int64_t rowBytes,
            const int8_t* xq, const float2* xds, const float* xf, int64_t outRows, float* y,
            const Routing& route, cudaStream_t stream) {
  if (rows == 0 || outRows == 0) return;
  const dim3 block(32, kWarpsPerBlock);
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>(outRows));
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (type) {
#define SHOAL_MATVEC_CASE(T)                                                    \
  case TensorType::T:                                                           \
    matvecQuantKernel<TensorType::T>                                            \
        <<<grid, block, 0, stream>>>(wb, rows, k, rowBytes, xq, xds, y, route); \
    break;
    SHOAL_CUDA_QUANT_TYPES(SHOAL_MATVEC_CASE)
#undef SHOAL_MATVEC_CASE
    case TensorType::F16:
      matvecFloatKernel<__half>
          <<<grid, block, 0, stream>>>(static_cast<const __half*>(w), rows, k, xf, y, route);
      break;
    case TensorType::BF16:
      matvecFloatKernel<__nv_bfloat16>
          <<<grid, block, 0, stream>>>(static_cast<const __nv_bfloat16*>(w), rows, k, xf, y, route);
      break;
    case TensorType::F32:
      matvecFloatKernel<float>
          <<<grid, block, 0, stream>>>(static_cast<const float*>(w), rows, k, xf, y, route);
      break;
    default:
      throw Error("CUDA matvec: unsupported weight type " + std::to_string(static_cast<int>(type)));
  }
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void matvec(TensorType type, const void* w, int64_t rows, int64_t k, int64_t rowBytes,
            const int8_t* xq, const float2* xds, const float* xf, int64_t tokens, float* y,
            cudaStream_t stream) {
  launch(type, w, rows, k, rowBytes, xq, xds, xf, tokens, y, Routing{}, stream);
}

void matvecSet(TensorType type, const MatvecTarget* targets, int count, int64_t k, const int8_t* xq,
               const float2* xds, int64_t tokens, cudaStream_t stream) {
  if (count < 1 || count > kMaxMatvecSet) {
    throw Error("CUDA matvecSet: 1 to " + std::to_string(kMaxMatvecSet) + " matrices");
  }
  if (tokens == 0) return;
  MatrixSet set{};
  set.count = count;
  unsigned blocks = 0;
  for (int i = 0; i < set.count; ++i) {
    const MatvecTarget& m = targets[i];
    set.w[i] = static_cast<const uint8_t*>(m.w);
    set.rows[i] = m.rows;
    set.rowBytes[i] = m.rowBytes;
    set.y[i] = m.y;
    set.first[i] = blocks;
    blocks += static_cast<unsigned>((m.rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  }
  set.first[set.count] = blocks;
  const dim3 block(32, kWarpsPerBlock), grid(blocks, static_cast<unsigned>(tokens));
  switch (type) {
#define SHOAL_MATVEC_SET_CASE(T)                                                 \
  case TensorType::T:                                                            \
    matvecSetKernel<TensorType::T><<<grid, block, 0, stream>>>(set, k, xq, xds); \
    break;
    SHOAL_CUDA_QUANT_TYPES(SHOAL_MATVEC_SET_CASE)
#undef SHOAL_MATVEC_SET_CASE
    default:
      throw Error("CUDA matvecSet: not a quantized type " + std::to_string(static_cast<int>(type)));
  }
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

namespace {

template <GateActivation A>
void launchGated(TensorType type, const uint8_t* gate, const uint8_t* up, int64_t rows, int64_t k,
                 int64_t rowBytes, const int8_t* xq, const float2* xds, int64_t tokens, float* y,
                 cudaStream_t stream) {
  const dim3 block(32, kWarpsPerBlock);
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>(tokens));
  switch (type) {
#define SHOAL_MATVEC_GATED_CASE(T)                                             \
  case TensorType::T:                                                          \
    matvecGatedKernel<TensorType::T, A>                                        \
        <<<grid, block, 0, stream>>>(gate, up, rows, k, rowBytes, xq, xds, y); \
    break;
    SHOAL_CUDA_QUANT_TYPES(SHOAL_MATVEC_GATED_CASE)
#undef SHOAL_MATVEC_GATED_CASE
    default:
      throw Error("CUDA matvecGated: not a quantized type " +
                  std::to_string(static_cast<int>(type)));
  }
}

}  // namespace

void matvecGated(TensorType type, const void* gate, const void* up, int64_t rows, int64_t k,
                 int64_t rowBytes, GateActivation activation, const int8_t* xq, const float2* xds,
                 int64_t tokens, float* y, cudaStream_t stream) {
  if (rows == 0 || tokens == 0) return;
  const auto* g = static_cast<const uint8_t*>(gate);
  const auto* u = static_cast<const uint8_t*>(up);
  switch (activation) {
    case GateActivation::Silu:
      launchGated<GateActivation::Silu>(type, g, u, rows, k, rowBytes, xq, xds, tokens, y, stream);
      break;
    case GateActivation::GeluTanh:
      launchGated<GateActivation::GeluTanh>(type, g, u, rows, k, rowBytes, xq, xds, tokens, y,
                                            stream);
      break;
    case GateActivation::SwigluOai:
      launchGated<GateActivation::SwigluOai>(type, g, u, rows, k, rowBytes, xq, xds, tokens, y,
                                             stream);
      break;
  }
  SHOAL_CUDA_CHECK(cudaGetLastError());
}

void matvecExperts(TensorType type, const void* w, int64_t expertRows, int64_t k, int64_t rowBytes,
                   const int32_t* ids, int64_t entries, int32_t used, bool perEntryInput,
                   const int8_t* xq, const float2* xds, const float* xf, float* y,
                   cudaStream_t stream) {
  launch(type, w, expertRows, k, rowBytes, xq, xds, xf, entries, y,
         Routing{ids, used, perEntryInput}, stream);
}

}  // namespace shoal::cuda
