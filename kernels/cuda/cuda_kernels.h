#pragma once
// Host-callable launchers of the CUDA backend's kernels. Every pointer is device memory unless
// said otherwise; every launch is asynchronous on `stream`. Matrices are row-major; a weight
// matrix has `rows` rows of `k` elements in its GGUF block format, `rowBytes` apart.
//
// Quantized weights meet 8-bit activations: quantizeActivations() turns each 32 values of x into
// int8 with one scale (d = max|x| / 127) and the scaled sum d * sum(q) (for the weight formats
// with a minimum or an offset), and the mat-vec kernels multiply with int8 dot products (dp4a).

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/gguf/tensor_type.h"

namespace shoal::cuda {

// cudaSuccess when the current device can run these kernels (kernel_image.cu); otherwise the
// runtime's error, typically cudaErrorNoKernelImageForDevice (the device's architecture was not
// compiled in: SHOAL_CUDA_ARCHS).
cudaError_t probeKernelImage();

// Weight formats the mat-vec and dequantization kernels handle.
bool weightTypeSupported(gguf::TensorType type);
// Elements per block and bytes per block of a supported type (F32/F16: 1 element).
int64_t typeBlockElements(gguf::TensorType type);
int64_t typeBlockBytes(gguf::TensorType type);

// x: tokens x k floats (k a multiple of 32) -> q: tokens x k int8, ds: tokens x k/32 (d, d*sum).
void quantizeActivations(const float* x, int64_t tokens, int64_t k, int8_t* q, float2* ds,
                         cudaStream_t stream);

// y[t * rows + r] = sum_i W[r][i] * x[t][i] for t < tokens. Quantized types read (xq, xds), F16
// and F32 read xf (tokens x k floats).
void matvec(gguf::TensorType type, const void* w, int64_t rows, int64_t k, int64_t rowBytes,
            const int8_t* xq, const float2* xds, const float* xf, int64_t tokens, float* y,
            cudaStream_t stream);

// How a gated FFN's gate and up combine (model::Activation; the math is activations.cuh's).
enum class GateActivation { Silu, GeluTanh, SwigluOai };

// One matrix of a matvecSet: `rows` rows, `rowBytes` apart, into y (tokens x rows).
struct MatvecTarget {
  const void* w = nullptr;
  int64_t rows = 0;
  int64_t rowBytes = 0;
  float* y = nullptr;
};
inline constexpr int kMaxMatvecSet = 3;
// matvec for up to kMaxMatvecSet quantized matrices of one type and row length k over the same
// int8 activations, in one launch.
void matvecSet(gguf::TensorType type, const MatvecTarget* targets, int count, int64_t k,
               const int8_t* xq, const float2* xds, int64_t tokens, cudaStream_t stream);

// y[t * rows + r] = act(gate row r · x_t, up row r · x_t) for two quantized matrices of one type
// (activations.cuh), in one launch.
void matvecGated(gguf::TensorType type, const void* gate, const void* up, int64_t rows, int64_t k,
                 int64_t rowBytes, GateActivation activation, const int8_t* xq, const float2* xds,
                 int64_t tokens, float* y, cudaStream_t stream);

// Whole matrix to f16 (rows x k), for the cuBLAS path of batches.
void dequantizeToHalf(gguf::TensorType type, const void* w, int64_t rows, int64_t k,
                      int64_t rowBytes, __half* out, cudaStream_t stream);

// out[i] = row ids[i] of W as floats, i < count (the embedding lookup). ids are checked on the
// host.
void gatherRows(gguf::TensorType type, const void* w, const int32_t* ids, int64_t count, int64_t k,
                int64_t rowBytes, float* out, cudaStream_t stream);

// y = x / sqrt(mean(x^2) + eps) * weight, per row of n. y may be x (in place).
void rmsNorm(const float* x, const float* weight, float* y, int64_t rows, int64_t n, float eps,
             cudaStream_t stream);
// rmsNorm (not in place), and y quantized as quantizeActivations would (n a multiple of 32), in
// one launch: the norm before a quantized product.
void rmsNormQuantize(const float* x, const float* weight, float* y, int64_t rows, int64_t n,
                     float eps, int8_t* q, float2* ds, cudaStream_t stream);
// x += addend (the residual add), then rmsNormQuantize(x -> y), in one launch.
void addRmsNormQuantize(float* x, const float* addend, const float* weight, float* y, int64_t rows,
                        int64_t n, float eps, int8_t* q, float2* ds, cudaStream_t stream);

// The shape RoPE rotates: `heads` heads of headDim per token, the first nRot dims of each.
struct RopeShape {
  int32_t heads = 0;
  int32_t headDim = 0;
  int32_t nRot = 0;
  bool neox = false;  // rotate (i, i + nRot/2) instead of (2i, 2i+1)
};
// Rotate x (tokens x heads x headDim) in place; token t is at position *firstPosition + t
// (firstPosition lives on the device so a captured graph can replay with new positions). The
// angles come from tables of nRot/2 cosines (and sines) per position, computed on the host by
// the CPU backend's ropeAngles, so both backends rotate by the same angles.
void rope(float* x, int64_t tokens, const RopeShape& shape, const float* cosTable,
          const float* sinTable, const int32_t* firstPosition, cudaStream_t stream);

// A RoPE angle table on the device: nRot/2 cosines and sines per position.
struct RopeAngles {
  const float* cos = nullptr;
  const float* sin = nullptr;
};
// rope of q (tokens x qShape.heads heads, in place) and of k (kShape.heads heads), the rotated
// keys and the values v (tokens x kvDim) stored into the f16 caches as storeKv stores them (ring
// as there); k itself is left unrotated. The two shapes share nRot, headDim and style.
void ropeStore(float* q, const float* k, const float* v, int64_t tokens, const RopeShape& qShape,
               const RopeShape& kShape, const RopeAngles& qTable, const RopeAngles& kTable,
               __half* keyCache, __half* valueCache, int32_t ring, const int32_t* firstPosition,
               cudaStream_t stream);

void addBias(float* x, const float* bias, int64_t rows, int64_t n, cudaStream_t stream);
void addInPlace(float* x, const float* y, int64_t n, cudaStream_t stream);
// out = silu(gate) * up
void swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);
// out = gelu(gate) * up with the tanh approximation (gemma's GeGLU; 0 for gate <= -10 and
// gate * up for gate >= 10, as ggml's vec_geglu).
void geglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);
// gpt-oss's clamped SwiGLU (layer_program.h Activation::SwigluOai): g = min(gate, 7),
// u = clamp(up, -7, 7), out = g * sigmoid(1.702 g) * (u + 1).
void swigluOai(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);
// x *= factor (n floats).
void scale(float* x, float factor, int64_t n, cudaStream_t stream);
// x = cap * tanh(x / cap) (n floats): gemma2's final logit soft-capping.
void softcap(float* x, float cap, int64_t n, cudaStream_t stream);
void floatToHalf(const float* x, __half* y, int64_t n, cudaStream_t stream);

// Append tokens' keys and values (tokens x kvDim floats) to an f16 cache of kvDim per position,
// at positions *firstPosition + t; ring > 0: the cache is a sliding window's ring of that many
// positions (engine/model/kv_ring.h), position p in slot p mod ring.
void storeKv(const float* k, const float* v, __half* keyCache, __half* valueCache, int64_t tokens,
             int32_t kvDim, const int32_t* firstPosition, int32_t ring, cudaStream_t stream);

struct AttentionParams {
  int32_t nHead = 0;
  int32_t nHeadKv = 0;
  int32_t headDim = 0;  // at most 256
  float scale = 0;      // applied to each (soft-capped) Q·K, usually 1/sqrt(headDim)
  int32_t splits = 1;   // position ranges computed in parallel per (token, head), then merged
  int32_t chunk = 256;  // positions per split; splits * chunk must cover the longest context
  int32_t window = 0;   // > 0: token at position p sees only positions p - window + 1 .. p
  int32_t ring = 0;     // > 0: the cache is a ring of this many positions (as storeKv's)
  float softcap = 0;    // > 0: Q·K becomes softcap * tanh(Q·K / softcap) before `scale`
  const float* sinks = nullptr;  // nHead sink logits (gpt-oss), or nullptr: head h's softmax
                                 // also counts exp(sinks[h] - max), max over scores and sink
  // tokens x nHead zeroed counters, or nullptr: with them the last split of each (token, head)
  // merges the splits itself (one launch); without, a second kernel merges. They are left zeroed.
  unsigned* tickets = nullptr;
};
// Causal attention: token t (position *firstPosition + t) over cached positions
// 0..*firstPosition + t (the last `window` of them when windowed). partial: scratch of
// tokens * nHead * splits * (headDim + 2) floats.
void attention(const AttentionParams& p, const float* q, const __half* keyCache,
               const __half* valueCache, int64_t tokens, const int32_t* firstPosition,
               float* partial, float* out, cudaStream_t stream);

// The mixture-of-experts FFN (layer_program.h MoeFfn), in four steps over `rows` tokens:
//  moeRoute:       per token, from its `experts` router logits, the `used` chosen experts (most
//                  probable first) and their weights, as MoeParams says (softmaxWeight: the
//                  SoftmaxWeight gating; normalize: divide by their sum, clamped at 2^-14)
//  matvecExperts:  for every (token, rank) entry e = token * used + rank, y[e] = the chosen
//                  expert's `expertRows` rows of w times the entry's input: the token's row of
//                  the activations (perEntryInput false) or the entry's own row (true)
//  addExpertBias:  y[e] += bias row ids[e] (experts x n F32), per entry
//  moeCombine:     out[t] = sum over ranks, in rank order, of weights[t][k] * y[t * used + k]
void moeRoute(const float* logits, int64_t rows, int32_t experts, int32_t used, bool softmaxWeight,
              bool normalize, int32_t* ids, float* weights, cudaStream_t stream);
void matvecExperts(gguf::TensorType type, const void* w, int64_t expertRows, int64_t k,
                   int64_t rowBytes, const int32_t* ids, int64_t entries, int32_t used,
                   bool perEntryInput, const int8_t* xq, const float2* xds, const float* xf,
                   float* y, cudaStream_t stream);
void addExpertBias(const float* bias, const int32_t* ids, float* y, int64_t entries, int64_t n,
                   cudaStream_t stream);
void moeCombine(const float* y, const float* weights, float* out, int64_t rows, int32_t used,
                int64_t n, cudaStream_t stream);

// out[r] = index of the largest of row r's n logits (the first on ties), r < rows: greedy
// sampling on the device.
void argmax(const float* logits, int64_t rows, int64_t n, int32_t* out, cudaStream_t stream);

// Top-k sampling's selection on the device (topk.cu): the k (<= kMaxDeviceTopK) best logits of
// each of `rows` rows, best first in the CPU sampler's order (higher first, lower id on ties, NaN
// as -inf), into values and ids (rows x k; id -1 past a row's entries), level by level through
// `scratch` (topKScratchBytes for the most rows and the vocabulary). The host draws among them.
inline constexpr int32_t kMaxDeviceTopK = 64;
inline constexpr int64_t kTopKChunk = 1024;  // entries one block selects from
struct TopKScratch {
  float* values[2] = {nullptr, nullptr};
  int32_t* ids[2] = {nullptr, nullptr};
};
uint64_t topKScratchBytes(int64_t rows, int64_t vocab, int32_t k);
void topK(const float* logits, int64_t rows, int64_t vocab, int32_t k, const TopKScratch& scratch,
          float* values, int32_t* ids, cudaStream_t stream);

}  // namespace shoal::cuda
