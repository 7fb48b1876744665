#pragma once
// Rows of a grouped matrix (row_groups.h) that a level's grouped kernel does not take (rows not
// in whole groups, batch shapes it leaves to the file layout's kernel): taken out of their
// groups into a buffer and run by the file layout's kernel, which gives the same bits.
//
// Included by the grouped kernels' headers (AVX2, AVX-512) (anonymous namespace: each including
// file keeps its own copy, see x86_kquant_kernels.h); no instructions beyond the baseline here.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_groups.h"

namespace shoal::cpu {
namespace {

// Rows [rowBegin, rowEnd) of the groups from row g0 (a group boundary) to rowEnd's group, by
// the file layout's kernel on the rows taken out of their groups.
template <WeightKind kKind, void (*FileGemm)(const GemmArgs&, int64_t, int64_t)>
void ungroupedRows(const GemmArgs& g, int64_t g0, int64_t rowBegin, int64_t rowEnd) {
  const int64_t groupEnd = (rowEnd - g0 + kGroupRows - 1) / kGroupRows * kGroupRows;
  auto* buffer = static_cast<uint8_t*>(std::malloc(g.weightStride * static_cast<size_t>(groupEnd)));
  if (buffer == nullptr) std::abort();  // as operator new would fail: nothing to compute with
  const uint8_t* groups = g.weights + static_cast<size_t>(g0) * g.weightStride;
  ungroupRows(kKind, groups, g.cols, rowBegin - g0, rowEnd - g0,
              buffer + (rowBegin - g0) * g.weightStride, g.weightStride);
  GemmArgs a = g;
  a.weights = buffer;
  a.rowGroups = false;
  a.y = g.y + g0;
  FileGemm(a, rowBegin - g0, rowEnd - g0);
  std::free(buffer);
}

// The rows of [rowBegin, rowEnd) outside whole groups, by ungroupedRows; [first, last) gets the
// whole groups' rows, left to the caller. False when the range lies inside one group (all of it
// done here).
template <WeightKind kKind, void (*FileGemm)(const GemmArgs&, int64_t, int64_t)>
bool ungroupedEdges(const GemmArgs& g, int64_t rowBegin, int64_t rowEnd, int64_t& first,
                    int64_t& last) {
  first = (rowBegin + kGroupRows - 1) / kGroupRows * kGroupRows;
  last = rowEnd / kGroupRows * kGroupRows;
  if (first > last) {
    ungroupedRows<kKind, FileGemm>(g, last, rowBegin, rowEnd);
    return false;
  }
  if (rowBegin < first) ungroupedRows<kKind, FileGemm>(g, first - kGroupRows, rowBegin, first);
  if (last < rowEnd) ungroupedRows<kKind, FileGemm>(g, last, last, rowEnd);
  return true;
}

// f(std::integral_constant<int, n>{}) for a pass of n (1 to 4) tokens: the grouped kernels are
// templated on their token count (their accumulators are registers), and a batch picks one per
// pass.
template <class F>
inline void withTokenCount(int n, F&& f) {
  switch (n) {
    case 4:
      f(std::integral_constant<int, 4>{});
      break;
    case 3:
      f(std::integral_constant<int, 3>{});
      break;
    case 2:
      f(std::integral_constant<int, 2>{});
      break;
    default:
      f(std::integral_constant<int, 1>{});
      break;
  }
}

// The whole groups of rows [first, last) for every token, one group and token per call of
// dot(x, a, t, out), which writes the group's eight outputs for token t into out (the decode
// kernels' loop).
template <class Group, class Act, class Dot>
void groupsTokenByToken(const GemmArgs& g, int64_t first, int64_t last, Dot&& dot) {
  alignas(32) float out[kGroupRows];
  for (int64_t r = first; r < last; r += kGroupRows) {
    const auto* x =
        reinterpret_cast<const Group*>(g.weights + static_cast<size_t>(r) * g.weightStride);
    for (int64_t t = 0; t < g.tokens; ++t) {
      const auto* a = reinterpret_cast<const Act*>(g.act + static_cast<size_t>(t) * g.actStride);
      dot(x, a, t, out);
      std::memcpy(g.y + t * g.ldy + r, out, sizeof out);
    }
  }
}

}  // namespace
}  // namespace shoal::cpu
