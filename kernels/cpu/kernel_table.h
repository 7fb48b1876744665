#pragma once
// The CPU kernels of one instruction-set level, as a table chosen once at run time
// (cpu_features.h). All levels compute bit-identical results; the scalar level is the reference
// the others are tested against, and its order of evaluation is ggml's (ggml_order.h):
//
//  * Weight rows stay in their file format. Activations are converted to the format each weight
//    type pairs with (ggml's vec_dot_type): Q4_0, Q5_0, Q8_0 -> Q8_0; Q4_1, Q5_1 -> Q8_1;
//    Q4_K, Q5_K, Q6_K -> Q8_K; F16 -> F16; BF16 -> BF16; F32 -> F32. Q8_0/Q8_1 use ggml's x86
//    quantizer (scale 127/amax, round half to even), Q8_K ggml's reference one.
//  * Quantized dots follow ggml's AVX2 kernels (arch/x86/quants.c): per 32-element block, eight
//    lanes each holding the exact integer dot of 4 adjacent elements; lane += d_w*d_a * lane_sum
//    with one rounding (fma) per block; the lanes summed as hsum_float_8; then the minimum term
//    (Q4_1, Q5_1: m_w*s_a fused-accumulated per block in a scalar).
//  * F32/F16/BF16 dots have two orders, because ggml runs a one-token matmul through its vec_dot
//    kernels and a multi-token one through llamafile's tinyBLAS (llamafile/sgemm.cpp):
//    DotOrder::Vec = 4 accumulators of 16 lanes (ggml_vec_dot_f16/f32; BF16: 2 accumulators of
//    vdpbf16ps pairs), DotOrder::Tiled = 1 accumulator of 16 lanes (tinyBLAS). Both end with
//    reduce16. Matrix code picks Tiled for batches of 2+ tokens where tinyBLAS would run.
//    (tinyBLAS also takes Q8_0/Q4_0/Q5_0 batches, but its tinyBLAS_Q0_AVX accumulates exactly
//    like the vec_dot kernels, so the quantized types need only one order.)
//
//  * IQ4_NL (levels from a 16-entry table, Q8_0 activations) has three orders: DotOrder::Vec as
//    ggml_vec_dot_iq4_nl_q8_0 (AVX2): two accumulators, even and odd blocks, added before the
//    horizontal sum, an odd last block fused into the total in scalar; DotOrder::Tiled as
//    tinyBLAS_Q0_AVX, which runs it for 2+ tokens: one accumulator, like Q4_0; and Q4_0's
//    DotOrder::Repacked below (a tensor of 8k rows, block_iq4_nlx8).
//
//  * MXFP4 (E2M1 levels from a table, an E8M0 scale, Q8_0 activations) has two: as
//    ggml_vec_dot_mxfp4_q8_0 (AVX2), IQ4_NL's vec order (llama.cpp has no tinyBLAS or tiled
//    kernel for it), and Q4_0's DotOrder::Repacked for a tensor of 8k rows (block_mxfp4x8).
//
//  * Q2_K, Q3_K and IQ4_XS (Q8_K activations) take the same two orders as the K-quants below
//    (Q2_K tensors of 8k rows the repacked ones instead, as Q4_K's):
//    their vec_dot kernels' eight integer lanes scaled per super-block, or the tiled kernel's
//    exact per-super-block totals (which covers them too: the tiled order depends only on
//    those totals, not on how a kernel splits them).
//
//  * K-quant dots have two orders too: DotOrder::Vec as above, DotOrder::Tiled as llama.cpp's
//    tiled matmul (ggml-cpu/tiled) rounds, which it runs for batches of 8+ tokens: per
//    super-block exact integer totals, then r = s1 * d_w, r = fma(-dmin_w, s2, r),
//    acc = fma(r, d_a, acc) (reference_dots.cpp).
//
//  * Q4_0 has a second order, DotOrder::Repacked, for every batch size of a matrix whose tensor
//    has a multiple of 8 rows: llama.cpp at its defaults on x86 (AVX2 and up) loads such a
//    matrix into its "repack" buffer type and multiplies it with its own kernels for every batch
//    (ggml-cpu/repack.cpp, ggml_repack_get_optimal_repack_type: block_q4_0x8; arch/x86/repack.cpp,
//    gemv_q4_b32_8x8_q8_0_lut_avx and the gemm beside it, which IQ4_NL and MXFP4 share with their
//    level tables and scales): per row and block the exact integer
//    total of its 32 products, then acc = fma(total, d_w * d_a, acc), block by block from
//    acc = 0. Activations are Q8_0 as quantize_row_q8_0 writes them (its 4-row interleaved
//    quantizer gives the same values). Other matrices keep the vec order above (llama.cpp's
//    vec_dot, or tinyBLAS, which accumulates like it). This order is batch-invariant, and its
//    exact per-block totals let a kernel lay rows across SIMD lanes (avx512_q4_0_repacked.h).
//
//  * Q4_K takes the repacked orders too, on the same condition (block_q4_Kx8,
//    ggml_gemv_q4_K_8x8_q8_K and ggml_gemm_q4_K_8x8_q8_K in arch/x86/repack.cpp), with two
//    float steps: the exact integer totals s1 (scales times the sub-blocks' dots) and s2
//    (minimums times the activation sums) go into two accumulators, acc = fma(s1, d_w * d_a,
//    acc) and accMin = fma(s2, dmin_w * d_a, accMin), and the result is acc - accMin. Its gemv,
//    DotOrder::Repacked, fuses once per super-block; its gemm, DotOrder::RepackedGemm, once per
//    64 elements (sub-blocks 2j, 2j+1: four times per super-block). llama.cpp hands a product's
//    tokens to the gemm in whole fours and the last tokens % 4 to the gemv, and every token of a
//    mixture of experts' product to the gemv; matmul() splits a segment's tokens the same way
//    (matmul.h), so a token's order depends on its own segment, never on other sequences.
//    Q2_K takes the same two orders (block_q2_Kx8, repacked by llama.cpp when the CPU has
//    AVX-512; Shoal follows that on every level) with a gemm step of 128 elements (sub-blocks
//    8h .. 8h+7): two fusions per super-block.

#include <cstddef>
#include <cstdint>

#include "engine/gguf/tensor_type.h"
#include "kernels/cpu/cpu_features.h"

namespace shoal::cpu {

enum class DotOrder { Vec, Tiled, Repacked, RepackedGemm };

// Weight types with a matrix kernel, as table indices.
enum class WeightKind {
  F32,
  F16,
  BF16,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q8_0,
  Q4_K,
  Q5_K,
  Q6_K,
  IQ4_NL,
  MXFP4,
  Q2_K,
  Q3_K,
  IQ4_XS,
  Count
};

// Formats activations are converted to before a matrix product.
enum class ActKind { F32, F16, BF16, Q8_0, Q8_1, Q8_K, Count };

// Whether llama.cpp's tiled K-quant matmul (ggml-cpu/tiled) takes this type's products of 8+
// tokens (a matrix's, or one expert's rows in a mixture of experts): then DotOrder::Tiled.
constexpr bool hasTiledOrder(WeightKind k) {
  return k == WeightKind::Q4_K || k == WeightKind::Q5_K || k == WeightKind::Q6_K ||
         k == WeightKind::Q2_K || k == WeightKind::Q3_K || k == WeightKind::IQ4_XS;
}

// WeightKind of a tensor type; throws shoal::Error for types without a kernel.
WeightKind weightKind(gguf::TensorType type);
// The activation format a weight type pairs with.
ActKind activationKind(WeightKind kind);
gguf::TensorType activationTensorType(ActKind kind);

// Per block of a Q8_0 activation row, for Q4_0 weights in DotOrder::Repacked: the integer dot
// of the block's codes q + 8 (as stored) starts at `start` = -8 * (sum of the activations), which
// takes the bias off exactly; d is the activation block's scale as a float.
struct RepackedQ4_0Act {
  int32_t start = 0;
  float d = 0.0f;
};
// Writes one Q8_0 row's blocks (cols / 32 of them) of RepackedQ4_0Act (every level: plain C++).
void repackedQ4_0Act(const void* q8Row, int64_t cols, RepackedQ4_0Act* out);

// One matrix product job: y[t * ldy + r] = dot(weight row r, activation row t).
struct GemmArgs {
  const uint8_t* weights = nullptr;  // row 0 of the weight matrix
  size_t weightStride = 0;           // bytes from one weight row to the next
  const uint8_t* act = nullptr;      // activation row 0, already converted (ActKind)
  size_t actStride = 0;              // bytes from one activation row to the next
  int64_t tokens = 0;                // activation rows
  int64_t cols = 0;                  // elements per row (a multiple of the block size)
  float* y = nullptr;
  int64_t ldy = 0;  // floats from one token's outputs to the next
  DotOrder order = DotOrder::Vec;
  // The weights are in row groups (row_groups.h), row 0 starting a group; only for a kind the
  // level's table marks in rowGroups.
  bool rowGroups = false;
  // The level's side rows of these activations (KernelTable::actSide), token t's at
  // actSide + t * actSideStride; nullptr when the caller built none (a kernel that wants them
  // then computes its own).
  const uint8_t* actSide = nullptr;
  size_t actSideStride = 0;
  // DotOrder::Repacked: per token and block of its Q8_0 activations, what the kernels start
  // from (RepackedQ4_0Act), token t's at actBlocks + t * actBlocksStride; nullptr when the caller
  // built none (the kernels then compute them).
  const RepackedQ4_0Act* actBlocks = nullptr;
  int64_t actBlocksStride = 0;
};

// Batches up to which matmul() gives the kernels side rows (KernelTable::actSide): decode
// batches of several sequences, where the kernels are compute-bound (a lone token's pass is
// memory-bound, and computes what it needs instead of reading it). From this size the AVX-512
// Q4_0 and Q8_0 kernels run bands, which need none.
constexpr int64_t kMaxSideTokens = 32;

// Computes rows [rowBegin, rowEnd) for every token of the job.
using GemmFn = void (*)(const GemmArgs& args, int64_t rowBegin, int64_t rowEnd);

// Converts n floats to an activation format (n a multiple of its block size).
using ConvertFn = void (*)(const float* x, void* dst, int64_t n);

// Attention's dot products as one batch: K·q (rows: cached keys; queries: the heads and tokens
// that read them) and V·p (rows: transposed value dimensions; queries: the probabilities of each
// head and token). out[q * outStride + j] = dotF16(rows + j * rowStride, y16 + q * yStride, n,
// order) for q < queries, j < count. Computed together, the dots share the loads and
// conversions of their common rows and overlap their reductions.
struct HalfDots {
  const uint16_t* rows = nullptr;  // count rows of n halfs, rowStride halfs apart
  int64_t rowStride = 0;
  int64_t count = 0;
  const uint16_t* y16 = nullptr;  // queries arguments of n halfs, yStride apart
  const float* y32 = nullptr;     // the same arguments as floats (each exactly its half)
  int64_t yStride = 0;
  int32_t queries = 0;
  int64_t n = 0;  // elements per dot product (Tiled: a multiple of 16)
  DotOrder order = DotOrder::Vec;
  float* out = nullptr;  // out[q * outStride + j]
  int64_t outStride = 0;
};

struct KernelTable {
  Isa isa = Isa::Scalar;
  GemmFn gemm[static_cast<int>(WeightKind::Count)] = {};
  ConvertFn convert[static_cast<int>(ActKind::Count)] = {};
  // Kinds whose gemm also reads weights in row groups (GemmArgs::rowGroups): the CPU stage's
  // weight copy groups those matrices' rows (row_groups.h).
  bool rowGroups[static_cast<int>(WeightKind::Count)] = {};
  // Optional side rows: what the level's kernels would otherwise recompute from an activation
  // row for every group of weight rows they read it with (AVX-512: its blocks' dot-product
  // starting sums and scales, spread to whole registers), computed once per matmul instead.
  // actSideBytes(kind, cols): bytes of one row's (0: none for that kind); actSide writes them
  // from the row converted to `kind`. nullptr: the level has none.
  size_t (*actSideBytes)(ActKind kind, int64_t cols) = nullptr;
  void (*actSide)(ActKind kind, const void* actRow, int64_t cols, void* sideRow) = nullptr;

  // n halfs to floats / floats to halfs (round to nearest even).
  void (*halfToFloat)(const uint16_t* x, float* y, int64_t n) = nullptr;
  void (*floatToHalf)(const float* x, uint16_t* y, int64_t n) = nullptr;

  // Dot product of two f16 rows in one of the two orders (Tiled needs n % 16 == 0).
  float (*dotF16)(const uint16_t* x, const uint16_t* y, int64_t n, DotOrder order) = nullptr;

  // Every row's dot product with every query argument, each bit for bit dotF16's (HalfDots).
  void (*dotsF16)(const HalfDots& d) = nullptr;

  // Softmax numerator: y[i] = exp(x[i] - max) for i < n (ggml_vec_soft_max_f32, AVX-512: groups
  // of 16, each group reduced by reduce16 and added to a double). A last partial group counts
  // as padded with zeros, as ggml's masked, 256-padded KV rows are. Returns the sum.
  double (*softmaxExp)(const float* x, float max, float* y, int64_t n) = nullptr;

  // y[i] = silu(gate[i]) * up[i] (ggml_vec_swiglu_f32 with ggml_v_silu on whole vectors of 16;
  // the last n % 16 elements use libm's expf, as ggml's scalar tail does).
  void (*swiglu)(const float* gate, const float* up, float* y, int64_t n) = nullptr;
};

// dotsF16 as one Dot call per dot product, for the levels without a kernel of their own.
template <float (*Dot)(const uint16_t*, const uint16_t*, int64_t, DotOrder)>
void dotsOneByOne(const HalfDots& d) {
  for (int32_t q = 0; q < d.queries; ++q) {
    for (int64_t j = 0; j < d.count; ++j) {
      d.out[q * d.outStride + j] =
          Dot(d.rows + j * d.rowStride, d.y16 + q * d.yStride, d.n, d.order);
    }
  }
}

// The table of the active level (activeIsa()).
const KernelTable& kernels();

// The table of a given level, or nullptr when this build or this CPU lacks it.
const KernelTable* kernelsFor(Isa isa);

// Per-level tables (defined in reference_*.cpp, avx2_*.cpp, avx512_*.cpp, neon_ops.cpp; the
// levels a build lacks return nullptr from cpu_no_simd.cpp).
const KernelTable& referenceKernels();
const KernelTable* avx2Kernels();
const KernelTable* avx512Kernels();
const KernelTable* neonKernels();
const KernelTable* neonDotKernels();

}  // namespace shoal::cpu
