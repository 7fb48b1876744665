#pragma once
// The RepackedQ4_0Act of a job (kernel_table.h) for the DotOrder::Repacked Q4_0 kernels: the
// caller's (matmul() computes them once per call), or computed here when a caller built none.
//
// Included by the x86 kernels' headers (anonymous namespace: each including file keeps its own
// copy, see x86_kquant_kernels.h); no instructions beyond the baseline here.

#include <cstdint>
#include <cstdlib>

#include "kernels/cpu/block_layouts.h"
#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {
namespace {

// Token t's blocks are at the result + t * stride. `owned` is what the caller must free
// (nullptr when the job brought its own).
inline const RepackedQ4_0Act* repackedActs(const GemmArgs& g, int64_t& stride,
                                           RepackedQ4_0Act*& owned) {
  owned = nullptr;
  if (g.actBlocks != nullptr) {
    stride = g.actBlocksStride;
    return g.actBlocks;
  }
  stride = g.cols / kQK;
  owned = static_cast<RepackedQ4_0Act*>(
      std::malloc(sizeof(RepackedQ4_0Act) * static_cast<size_t>(stride * g.tokens)));
  if (owned == nullptr) std::abort();  // as operator new would fail: nothing to compute with
  for (int64_t t = 0; t < g.tokens; ++t) {
    repackedQ4_0Act(g.act + static_cast<size_t>(t) * g.actStride, g.cols, owned + t * stride);
  }
  return owned;
}

}  // namespace
}  // namespace shoal::cpu
