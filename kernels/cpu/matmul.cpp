#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "engine/error.h"
#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/geglu.h"

namespace shoal::cpu {

WeightMatrix WeightMatrix::from(const gguf::TensorInfo& tensor) {
  if (tensor.dims.empty() || tensor.dims.size() > 2) {
    throw Error("tensor " + tensor.name + ": a weight matrix must have 1 or 2 dimensions");
  }
  WeightMatrix w;
  w.type = tensor.type;
  w.kind = weightKind(tensor.type);
  w.activation = activationKind(w.kind);
  w.cols = tensor.dims[0];
  w.rows = tensor.dims.size() == 2 ? tensor.dims[1] : 1;
  w.tensorRows = w.rows;
  w.data = tensor.data;
  w.rowBytes = gguf::rowBytes(tensor.type, w.cols);
  return w;
}

ExpertMatrices ExpertMatrices::from(const gguf::TensorInfo& tensor) {
  if (tensor.dims.size() != 3) {
    throw Error("tensor " + tensor.name + ": stacked expert matrices must have 3 dimensions");
  }
  ExpertMatrices e;
  WeightMatrix& w = e.first;
  w.type = tensor.type;
  w.kind = weightKind(tensor.type);
  w.activation = activationKind(w.kind);
  w.cols = tensor.dims[0];
  w.rows = tensor.dims[1];
  w.tensorRows = w.rows;  // llama.cpp's repack test reads ne[1] of the stacked tensor
  w.data = tensor.data;
  w.rowBytes = gguf::rowBytes(tensor.type, w.cols);
  e.count = tensor.dims[2];
  e.expertBytes = w.rowBytes * static_cast<size_t>(w.rows);
  return e;
}

size_t WeightMatrix::activationBytes() const {
  return gguf::rowBytes(activationTensorType(activation), cols);
}

DotOrder dotOrder(const WeightMatrix& w, int64_t tokens) {
  // Q4_0: llama.cpp repacks a tensor of 8k rows when the CPU has AVX2 (ggml-cpu/repack.cpp,
  // ggml_repack_get_optimal_repack_type), whatever the batch.
  if (w.kind == WeightKind::Q4_0) {
    return w.tensorRows % 8 == 0 ? DotOrder::Repacked : DotOrder::Vec;
  }
  // Q4_K, IQ4_NL and MXFP4 likewise (block_q4_Kx8, block_iq4_nlx8, block_mxfp4x8), and Q2_K,
  // which llama.cpp repacks when the CPU has AVX-512 (block_q2_Kx8): Shoal follows that CPU's
  // defaults on every level.
  if ((w.kind == WeightKind::Q4_K || w.kind == WeightKind::IQ4_NL || w.kind == WeightKind::MXFP4 ||
       w.kind == WeightKind::Q2_K) &&
      w.tensorRows % 8 == 0) {
    return DotOrder::Repacked;
  }
  // K-quants: llama.cpp's tiled matmul takes batches of 8+ tokens (ggml-cpu/tiled, any shape).
  if (hasTiledOrder(w.kind)) {
    return tokens >= 8 ? DotOrder::Tiled : DotOrder::Vec;
  }
  // IQ4_NL: tinyBLAS_Q0_AVX takes 2+ tokens, whatever the shape.
  if (w.kind == WeightKind::IQ4_NL) return tokens >= 2 ? DotOrder::Tiled : DotOrder::Vec;
  if (tokens < 2 || w.rows % 4 != 0) return DotOrder::Vec;
  // tinyBLAS steps: 16 floats (F32, F16 as f32 after vcvtph2ps), 32 bf16 (vdpbf16ps).
  switch (w.kind) {
    case WeightKind::F32:
    case WeightKind::F16:
      return w.cols % 16 == 0 ? DotOrder::Tiled : DotOrder::Vec;
    case WeightKind::BF16:
      return w.cols % 32 == 0 ? DotOrder::Tiled : DotOrder::Vec;
    default:
      return DotOrder::Vec;
  }
}

bool splitsTokensInFours(const WeightMatrix& w) {
  return (w.kind == WeightKind::Q4_K || w.kind == WeightKind::Q2_K) &&
         dotOrder(w, 2) == DotOrder::Repacked;
}

namespace {

// Whether w's kernels read RepackedQ4_0Act (GemmArgs::actBlocks): Q4_0, IQ4_NL and MXFP4 in the
// repacked order (the x86 kernels of that order share one arithmetic; a level whose kernel for
// the type does not read them just leaves them).
bool readsRepackedQ4_0Act(const WeightMatrix& w) {
  return (w.kind == WeightKind::Q4_0 || w.kind == WeightKind::IQ4_NL ||
          w.kind == WeightKind::MXFP4) &&
         dotOrder(w, 1) == DotOrder::Repacked;
}

// Side rows are read as whole 64-byte registers; a small ZeroedBuffer is calloc's (16 bytes).
constexpr size_t kSideAlign = 64;

uint8_t* sideRows(MatmulScratch& scratch, int a) {
  const auto p = reinterpret_cast<uintptr_t>(scratch.sides[a].data());
  return reinterpret_cast<uint8_t*>((p + kSideAlign - 1) / kSideAlign * kSideAlign);
}

// Bytes of one side row for w's activations in a batch of `tokens` (0: none).
size_t sideBytes(const WeightMatrix& w, int64_t tokens) {
  const KernelTable& k = kernels();
  if (k.actSideBytes == nullptr || tokens < 2 || tokens > kMaxSideTokens) return 0;
  // Q4_0 in the repacked order reads RepackedQ4_0Act instead.
  if (readsRepackedQ4_0Act(w)) return 0;
  return k.actSideBytes(w.activation, w.cols);
}

}  // namespace

void MatmulScratch::reserve(const WeightMatrix& w, int64_t tokens) {
  const int a = static_cast<int>(w.activation);
  activations[a].reserve(w.activationBytes() * static_cast<size_t>(tokens));
  // For up to kMaxSideTokens of the batch, whether or not the weights are grouped yet: the
  // stage reserves for its largest batch up front, and forward() then allocates nothing.
  const int64_t sideTokens = std::min(tokens, kMaxSideTokens);
  const size_t side = sideBytes(w, sideTokens);
  if (side > 0) sides[a].reserve(side * static_cast<size_t>(sideTokens) + kSideAlign);
  if (readsRepackedQ4_0Act(w)) {
    repackedQ4_0.reserve(static_cast<size_t>(w.cols / kQK * tokens));
  }
}

namespace {

// Rows are handed out in runs of 16: a multiple of every kernel's row tile, and of SwiGLU's
// vector of 16 (gatedFfn).
constexpr int64_t kRowGrain = 16;

// A product's rows go to the threads in many chunks, so that the thread that finishes last waits
// little at the end of each product: with four per thread, about half a chunk (1/16 of the
// product) of one thread's time was lost per product (5% of a step idle, 8 sequences of the 1B
// model). But a chunk holds at least kMinChunkWork weight bytes x tokens, a few microseconds of
// work, so that a small model's short decode products do not pay a claim for every few rows.
constexpr int kChunksPerThread = 16;
constexpr int64_t kMinChunkWork = 128 << 10;

// Rows per grain of the pool for rows of rowBytes bytes each against `tokens` tokens.
int64_t rowGrain(size_t rowBytes, int64_t tokens) {
  const int64_t work = std::max<int64_t>(1, static_cast<int64_t>(rowBytes) * tokens);
  const int64_t rows = std::max(kRowGrain, (kMinChunkWork + work - 1) / work);
  return (rows + kRowGrain - 1) / kRowGrain * kRowGrain;
}
constexpr size_t kMaxJobs = 4;

// Converts x into each activation format the jobs need (once per format); returns the args of
// each job.
void prepare(std::span<const MatmulJob> jobs, const float* x, int64_t tokens, int64_t orderTokens,
             ThreadPool& pool, MatmulScratch& scratch, GemmArgs* args) {
  const KernelTable& k = kernels();
  bool needed[static_cast<int>(ActKind::Count)] = {};
  for (const MatmulJob& j : jobs) {
    if (j.w->cols != jobs[0].w->cols) {
      throw Error("matmul: products of one input need equal row lengths (" +
                  std::to_string(j.w->cols) + " vs " + std::to_string(jobs[0].w->cols) + ")");
    }
    scratch.reserve(*j.w, tokens);
    needed[static_cast<int>(j.w->activation)] = true;
  }
  const int64_t cols = jobs[0].w->cols;
  size_t side[static_cast<int>(ActKind::Count)] = {};
  for (const MatmulJob& j : jobs) {  // a format's side rows, if any of its products reads them
    size_t& bytes = side[static_cast<int>(j.w->activation)];
    bytes = std::max(bytes, sideBytes(*j.w, tokens));
  }
  const int64_t order = orderTokens > 0 ? orderTokens : tokens;
  // Q4_0 (IQ4_NL, MXFP4) in the repacked order: each token's blocks' starting sums and scales,
  // once per call.
  bool repacked = false;
  for (const MatmulJob& j : jobs) repacked = repacked || readsRepackedQ4_0Act(*j.w);
  const int64_t blocks = cols / kQK;
  const int q8 = static_cast<int>(ActKind::Q8_0);
  auto convertAll = [&](int64_t begin, int64_t end, int) {
    for (int a = 0; a < static_cast<int>(ActKind::Count); ++a) {
      if (!needed[a]) continue;
      const size_t stride = gguf::rowBytes(activationTensorType(static_cast<ActKind>(a)), cols);
      for (int64_t t = begin; t < end; ++t) {
        uint8_t* row = scratch.activations[a].data() + static_cast<size_t>(t) * stride;
        k.convert[a](x + t * cols, row, cols);
        if (a == q8 && repacked) {
          repackedQ4_0Act(row, cols, scratch.repackedQ4_0.data() + t * blocks);
        }
        if (side[a] > 0) {
          k.actSide(static_cast<ActKind>(a), row, cols,
                    sideRows(scratch, a) + static_cast<size_t>(t) * side[a]);
        }
      }
    }
  };
  if (tokens == 1) {
    convertAll(0, 1, 0);
  } else {
    pool.parallelFor(tokens, convertAll);
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    const WeightMatrix& w = *jobs[i].w;
    GemmArgs& g = args[i];
    g.weights = w.data;
    g.weightStride = w.rowBytes;
    g.act = scratch.activations[static_cast<int>(w.activation)].data();
    g.actStride = w.activationBytes();
    g.tokens = tokens;
    g.cols = w.cols;
    g.y = jobs[i].y;
    g.ldy = w.rows;
    g.order = dotOrder(w, order);
    g.rowGroups = w.rowGroups;
    if (readsRepackedQ4_0Act(w)) {
      g.actBlocks = scratch.repackedQ4_0.data();
      g.actBlocksStride = blocks;
    }
    const int a = static_cast<int>(w.activation);
    if (side[a] > 0) {
      g.actSide = sideRows(scratch, a);
      g.actSideStride = side[a];
    }
  }
}

// The tokens of a product that llama.cpp's repacked Q4_K and Q2_K kernels hand to their gemm
// (kernel_table.h): of a product of 2+ tokens in the order of 2+ (a prompt's segment, or runs of
// them each a multiple of 4 long but the last: LayerRunner::buildRuns), the whole fours from
// its first token; none of a product in the one-token order (decode rows).
int64_t repackedGemmTokens(const GemmArgs& g, const WeightMatrix& w, int64_t orderTokens) {
  if (!splitsTokensInFours(w) || orderTokens < 2) return 0;
  return g.tokens - g.tokens % 4;
}

// fn on rows [begin, end): the first gemmTokens tokens in DotOrder::RepackedGemm, the others in
// args' order.
void runTokens(GemmFn fn, const GemmArgs& args, int64_t gemmTokens, int64_t begin, int64_t end) {
  if (gemmTokens == 0) {
    fn(args, begin, end);
    return;
  }
  GemmArgs gemm = args;
  gemm.order = DotOrder::RepackedGemm;
  gemm.tokens = gemmTokens;
  fn(gemm, begin, end);
  if (gemmTokens == args.tokens) return;
  GemmArgs rest = args;  // Q4_K: no side rows or RepackedQ4_0Act to move along
  rest.tokens = args.tokens - gemmTokens;
  rest.act += static_cast<size_t>(gemmTokens) * args.actStride;
  rest.y += gemmTokens * args.ldy;
  fn(rest, begin, end);
}

// Rows [begin, end) of one product: those below w.copiedRows from their copy (args with the
// copy's row 0), the others from w.data.
void runRows(GemmFn fn, const WeightMatrix& w, const GemmArgs& args, int64_t gemmTokens,
             int64_t begin, int64_t end) {
  const int64_t split = std::clamp(w.copiedRows, begin, end);
  if (begin < split) {
    GemmArgs copy = args;
    copy.weights = w.copied;
    copy.rowGroups = w.copiedRowGroups;
    runTokens(fn, copy, gemmTokens, begin, split);
  }
  if (split < end) runTokens(fn, args, gemmTokens, split, end);
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t tokens, float* y, ThreadPool& pool,
            MatmulScratch& scratch, int64_t orderTokens) {
  const MatmulJob job{&w, y};
  matmul(std::span(&job, 1), x, tokens, pool, scratch, orderTokens);
}

void matmul(std::span<const MatmulJob> jobs, const float* x, int64_t tokens, ThreadPool& pool,
            MatmulScratch& scratch, int64_t orderTokens) {
  if (jobs.empty() || jobs.size() > kMaxJobs) {
    throw Error("matmul: " + std::to_string(jobs.size()) + " products of one input (1 to " +
                std::to_string(kMaxJobs) + ")");
  }
  GemmArgs args[kMaxJobs];
  prepare(jobs, x, tokens, orderTokens, pool, scratch, args);
  const KernelTable& k = kernels();
  GemmFn fns[kMaxJobs];
  int64_t gemmTokens[kMaxJobs];
  int64_t firstRow[kMaxJobs + 1] = {0};
  size_t rowBytes = 0;  // the widest product's
  const int64_t order = orderTokens > 0 ? orderTokens : tokens;
  for (size_t i = 0; i < jobs.size(); ++i) {
    fns[i] = k.gemm[static_cast<int>(jobs[i].w->kind)];
    gemmTokens[i] = repackedGemmTokens(args[i], *jobs[i].w, order);
    firstRow[i + 1] = firstRow[i] + jobs[i].w->rows;
    rowBytes = std::max(rowBytes, jobs[i].w->rowBytes);
  }
  // The rows of all products in a row, split between threads; each thread meets every token
  // with its rows, so each weight row is read once per call.
  pool.parallelFor(
      firstRow[jobs.size()],
      [&](int64_t begin, int64_t end, int) {
        for (size_t i = 0; i < jobs.size(); ++i) {
          const int64_t lo = std::max(begin, firstRow[i]), hi = std::min(end, firstRow[i + 1]);
          if (lo < hi) {
            runRows(fns[i], *jobs[i].w, args[i], gemmTokens[i], lo - firstRow[i], hi - firstRow[i]);
          }
        }
      },
      rowGrain(rowBytes, tokens), kChunksPerThread);
}

void gatedFfn(const WeightMatrix& wGate, const WeightMatrix& wUp, const float* x, int64_t tokens,
              float* gate, float* up, ThreadPool& pool, MatmulScratch& scratch, int64_t orderTokens,
              model::Activation activation) {
  if (wGate.rows != wUp.rows) {
    throw Error("gated FFN: gate and up have " + std::to_string(wGate.rows) + " and " +
                std::to_string(wUp.rows) + " rows");
  }
  const MatmulJob jobs[2] = {{&wGate, gate}, {&wUp, up}};
  GemmArgs args[2];
  prepare(jobs, x, tokens, orderTokens, pool, scratch, args);
  const KernelTable& k = kernels();
  const GemmFn gateFn = k.gemm[static_cast<int>(wGate.kind)];
  const GemmFn upFn = k.gemm[static_cast<int>(wUp.kind)];
  const int64_t order = orderTokens > 0 ? orderTokens : tokens;
  const int64_t gateGemm = repackedGemmTokens(args[0], wGate, order);
  const int64_t upGemm = repackedGemmTokens(args[1], wUp, order);
  const int64_t n = wGate.rows;
  pool.parallelFor(
      n,
      [&](int64_t begin, int64_t end, int) {
        runRows(gateFn, wGate, args[0], gateGemm, begin, end);
        runRows(upFn, wUp, args[1], upGemm, begin, end);
        // Chunks start on multiples of 16 and the last one ends the row, so each element gets
        // the vector or scalar SiLU that a whole-row call would give it.
        for (int64_t t = 0; t < tokens; ++t) {
          float* g = gate + t * n;
          if (activation == model::Activation::GeluTanh) {
            geglu(g + begin, up + t * n + begin, g + begin, end - begin);
          } else {
            k.swiglu(g + begin, up + t * n + begin, g + begin, end - begin);
          }
        }
      },
      rowGrain(wGate.rowBytes + wUp.rowBytes, tokens), kChunksPerThread);
}

}  // namespace shoal::cpu
