#pragma once
// y = W x for a weight matrix kept in its file format and a batch of f32 activations, on the
// thread pool, with the active kernel table.

#include <cstdint>
#include <span>
#include <vector>

#include "engine/gguf/gguf_file.h"
#include "engine/model/layer_program.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/zeroed_buffer.h"

namespace shoal::cpu {

// A weight matrix of `rows` rows, each `cols` elements of `type`, as stored in the GGUF file.
struct WeightMatrix {
  gguf::TensorType type = gguf::TensorType::F32;
  WeightKind kind = WeightKind::F32;
  ActKind activation = ActKind::F32;  // format x is converted to
  int64_t rows = 0;
  int64_t cols = 0;
  // Rows of the tensor this matrix is (a view of rows, rowsOf, keeps its tensor's): llama.cpp
  // picks a Q4_0 tensor's kernel by it (DotOrder::Repacked).
  int64_t tensorRows = 0;
  const uint8_t* data = nullptr;
  size_t rowBytes = 0;
  // The rows are in groups of 8 (row_groups.h), as the CPU stage's weight copy leaves a matrix
  // the active kernel level reads that way; row(r) is then no row of the file layout.
  bool rowGroups = false;
  // While the CPU stage's weight copy is under way on this matrix's tensor: rows [0, copiedRows)
  // are read from `copied`, their copy, and only the others from `data` (weight_arena.h,
  // copiedPrefix), so that the rows whose source pages the copy gave back are not faulted in.
  const uint8_t* copied = nullptr;
  int64_t copiedRows = 0;
  bool copiedRowGroups = false;  // the copied rows are in row groups already

  // Throws shoal::Error for a tensor that is not a 1-D/2-D matrix of a supported type.
  static WeightMatrix from(const gguf::TensorInfo& tensor);
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * rowBytes; }
  // Bytes one converted activation row takes.
  size_t activationBytes() const;
};

// The experts of a stacked mixture-of-experts tensor (ggml dims {cols, rows, experts}: one
// matrix per expert, one after the other), as matrices of their own.
struct ExpertMatrices {
  WeightMatrix first;      // expert 0
  size_t expertBytes = 0;  // bytes from one expert's matrix to the next
  int64_t count = 0;       // experts
  // Throws shoal::Error for a tensor that is not 3-D or of a type without a kernel.
  static ExpertMatrices from(const gguf::TensorInfo& tensor);
  WeightMatrix expert(int64_t e) const {
    WeightMatrix m = first;
    m.data += static_cast<size_t>(e) * expertBytes;
    return m;
  }
};

// Scratch reused across calls so the decode path does not allocate: converted activations, one
// buffer per activation format.
struct MatmulScratch {
  ZeroedBuffer<uint8_t> activations[static_cast<int>(ActKind::Count)];
  ZeroedBuffer<uint8_t> sides[static_cast<int>(ActKind::Count)];  // KernelTable::actSide rows
  ZeroedBuffer<RepackedQ4_0Act> repackedQ4_0;                     // GemmArgs::actBlocks
  // Make room for `tokens` rows of w's activation format (and their side rows, if any).
  void reserve(const WeightMatrix& w, int64_t tokens);
};

// One product of a shared input: y[t * w.rows + r] = dot(w row r, x row t).
struct MatmulJob {
  const WeightMatrix* w = nullptr;
  float* y = nullptr;
};

// The order the dots of this product use, as llama.cpp at its defaults on x86 picks its kernel:
// F32/F16/BF16 matmuls of 2+ tokens go through llamafile's tinyBLAS when the shape allows (cols
// a multiple of the vector step, rows of 4); K-quant matmuls of 8+ tokens through its tiled
// kernel; a Q4_0, Q4_K, IQ4_NL or MXFP4 tensor of 8k rows through its repacked kernels at every
// batch size (and Q2_K, as on an AVX-512 CPU).
DotOrder dotOrder(const WeightMatrix& w, int64_t tokens);

// Whether matmul() splits w's products of 2+ tokens into whole fours and the rest (a Q4_K or Q2_K
// matrix in the repacked order, below): a caller that runs several segments' rows as one product
// must then start each segment on a multiple of 4 (LayerRunner::buildRuns).
bool splitsTokensInFours(const WeightMatrix& w);

// y[t * W.rows + r] = dot(W row r, x[t * W.cols ...]) for t in [0, tokens). orderTokens (0:
// tokens) picks the dot order (dotOrder) as for a product of that many tokens, so that rows of a
// batch that belong to different sequences can each get the order of their own segment. A Q4_K
// or Q2_K matrix in the repacked order with orderTokens >= 2 gives its first tokens - tokens % 4
// tokens DotOrder::RepackedGemm and the rest Repacked, as llama.cpp's repacked kernels split a
// product (kernel_table.h); with orderTokens 1, every token Repacked (decode rows).
void matmul(const WeightMatrix& w, const float* x, int64_t tokens, float* y, ThreadPool& pool,
            MatmulScratch& scratch, int64_t orderTokens = 0);

// Several products of the same input (Q, K and V): x is converted once per activation format
// and all the rows are shared out in one pass of the thread pool. The matrices must have x's
// row length; at most 4 jobs.
void matmul(std::span<const MatmulJob> jobs, const float* x, int64_t tokens, ThreadPool& pool,
            MatmulScratch& scratch, int64_t orderTokens = 0);

// The gated feed-forward input, fused: gate[t * n + i] = act(Wgate x)[i] * (Wup x)[i]
// (SwiGLU as ggml_vec_swiglu_f32 rounds it per row of n = Wgate.rows; GeGLU as
// ggml_vec_geglu_f32, cpu_ops.h), computed in one pass of the thread pool: each thread takes
// the same rows of both matrices and finishes them. up receives Wup x; both buffers hold
// tokens x n floats.
void gatedFfn(const WeightMatrix& wGate, const WeightMatrix& wUp, const float* x, int64_t tokens,
              float* gate, float* up, ThreadPool& pool, MatmulScratch& scratch,
              int64_t orderTokens = 0, model::Activation activation = model::Activation::Silu);

}  // namespace shoal::cpu
