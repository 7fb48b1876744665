#pragma once
// KernelTable::dotsF16's dispatch, shared by the AVX2 and AVX-512 levels (avx2_half_dots.cpp,
// avx512_half_dots.cpp): which of a level's kernels a batch of f16 dot products takes.
//
// Included by those files only, each with its own Kernels type (internal linkage), so each
// instantiation is built with its file's instruction set.

#include <cstdint>

#include "kernels/cpu/kernel_table.h"

namespace shoal::cpu {

// Kernels: static templates shortRows<Order, N>(d) for dots of N = 64 or 128 elements (K·q
// over one head dimension) and longRows<Order>(d) for longer ones (V·p), both for n a multiple
// of 16 (Tiled) or 64 (Vec).
template <class Kernels>
inline void dispatchHalfDots(const HalfDots& d) {
  const bool tiled = d.order == DotOrder::Tiled;
  if (d.n % (tiled ? 16 : 64) != 0 || d.n == 0) {
    // A ragged Vec tail is summed in double one element at a time: the one-dot kernel does that.
    const auto dot = avx2Kernels()->dotF16;
    for (int32_t q = 0; q < d.queries; ++q)
      for (int64_t j = 0; j < d.count; ++j)
        d.out[q * d.outStride + j] =
            dot(d.rows + j * d.rowStride, d.y16 + q * d.yStride, d.n, d.order);
    return;
  }
  if (d.n == 64 || d.n == 128) {
    if (tiled) {
      d.n == 64 ? Kernels::template shortRows<DotOrder::Tiled, 64>(d)
                : Kernels::template shortRows<DotOrder::Tiled, 128>(d);
    } else {
      d.n == 64 ? Kernels::template shortRows<DotOrder::Vec, 64>(d)
                : Kernels::template shortRows<DotOrder::Vec, 128>(d);
    }
  } else if (tiled) {
    Kernels::template longRows<DotOrder::Tiled>(d);
  } else {
    Kernels::template longRows<DotOrder::Vec>(d);
  }
}

}  // namespace shoal::cpu
