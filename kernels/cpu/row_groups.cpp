#include "kernels/cpu/row_groups.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/error.h"

namespace shoal::cpu {
namespace {

// Row r's copy of one grouped super-block from a file-layout block (ungroupBlock's inverse).
void groupBlock(const BlockQ4_K& in, int r, BlockQ4_Kx8& x) {
  x.d[r] = in.d;
  x.dmin[r] = in.dmin;
  std::memcpy(x.scales[r], in.scales, sizeof in.scales);
  for (int m = 0; m < 4; ++m) pairLaneSwap(in.qs + 32 * m, x.qs[r / 2][m][r % 2]);
}
void groupBlock(const BlockQ5_K& in, int r, BlockQ5_Kx8& x) {
  x.d[r] = in.d;
  x.dmin[r] = in.dmin;
  std::memcpy(x.scales[r], in.scales, sizeof in.scales);
  pairLaneSwapBits(in.qh, x.qh[r / 2][r % 2]);
  for (int m = 0; m < 4; ++m) pairLaneSwap(in.qs + 32 * m, x.qs[r / 2][m][r % 2]);
}

void groupBlock(const BlockQ6_K& in, int r, BlockQ6_Kx8& x) {
  x.d[r] = in.d;
  std::memcpy(x.scales[r], in.scales, sizeof in.scales);
  std::memcpy(x.qh[r], in.qh, sizeof in.qh);
  std::memcpy(x.ql[r], in.ql, sizeof in.ql);
}

void groupBlock(const BlockQ4_0& in, int r, BlockQ4_0x8& x) {
  x.d[r] = in.d;
  std::memcpy(x.qs[r], in.qs, sizeof in.qs);
}
void groupBlock(const BlockMXFP4& in, int r, BlockMXFP4x8& x) {
  x.e[r] = in.e;
  std::memcpy(x.qs[r], in.qs, sizeof in.qs);
}
void groupBlock(const BlockQ4_1& in, int r, BlockQ4_1x8& x) {
  x.d[r] = in.d;
  x.m[r] = in.m;
  std::memcpy(x.qs[r], in.qs, sizeof in.qs);
}
void groupBlock(const BlockQ8_0& in, int r, BlockQ8_0x8& x) {
  x.d[r] = in.d;
  std::memcpy(x.qs[r], in.qs, sizeof in.qs);
}

// Elements per block of each kind that has the layout.
int64_t blockElements(WeightKind kind) {
  return kind == WeightKind::Q4_0 || kind == WeightKind::Q4_1 || kind == WeightKind::Q8_0 ||
                 kind == WeightKind::IQ4_NL || kind == WeightKind::MXFP4
             ? kQK
             : kQKK;
}

template <class Block, class Group>
void groupRowsOf(uint8_t* data, int64_t rows, int64_t blocks) {
  const size_t groupBytes = sizeof(Block) * static_cast<size_t>(blocks * kGroupRows);
  std::vector<Block> plain(static_cast<size_t>(blocks * kGroupRows));
  for (int64_t g = 0; g < rows / kGroupRows; ++g) {
    uint8_t* group = data + static_cast<size_t>(g) * groupBytes;
    std::memcpy(plain.data(), group, groupBytes);
    auto* out = reinterpret_cast<Group*>(group);
    for (int64_t b = 0; b < blocks; ++b) {
      for (int r = 0; r < kGroupRows; ++r) {
        groupBlock(plain[static_cast<size_t>(r * blocks + b)], r, out[b]);
      }
    }
  }
}

template <class Block, class Group>
void ungroupRowsOf(const uint8_t* data, int64_t blocks, int64_t rowBegin, int64_t rowEnd,
                   uint8_t* out, size_t outStride) {
  for (int64_t g = rowBegin / kGroupRows; g * kGroupRows < rowEnd; ++g) {
    const auto* group = reinterpret_cast<const Group*>(data) + static_cast<size_t>(g * blocks);
    const int64_t lo = std::max(rowBegin, g * kGroupRows);
    const int64_t hi = std::min(rowEnd, (g + 1) * kGroupRows);
    // Block by block, so the group is read front to back (one stream for the prefetchers).
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t r = lo; r < hi; ++r) {
        auto* row = reinterpret_cast<Block*>(out + static_cast<size_t>(r - rowBegin) * outStride);
        ungroupBlock(group[b], static_cast<int>(r % kGroupRows), row[b]);
      }
    }
  }
}

}  // namespace

bool hasRowGroups(WeightKind kind) {
  return kind == WeightKind::Q4_0 || kind == WeightKind::Q4_1 || kind == WeightKind::Q8_0 ||
         kind == WeightKind::Q4_K || kind == WeightKind::Q5_K || kind == WeightKind::Q6_K ||
         kind == WeightKind::IQ4_NL || kind == WeightKind::MXFP4;
}

bool hasRowGroups(gguf::TensorType type) {
  using gguf::TensorType;
  return type == TensorType::Q4_0 || type == TensorType::Q4_1 || type == TensorType::Q8_0 ||
         type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K ||
         type == TensorType::IQ4_NL || type == TensorType::MXFP4;
}

void groupRows(WeightKind kind, uint8_t* data, int64_t rows, int64_t cols) {
  if (!hasRowGroups(kind)) throw Error("row groups: no grouped layout for this weight type");
  if (rows % kGroupRows != 0 || cols % blockElements(kind) != 0) {
    throw Error("row groups: a matrix of " + std::to_string(rows) + " x " + std::to_string(cols) +
                " does not divide into groups of " + std::to_string(kGroupRows) + " rows");
  }
  const int64_t blocks = cols / blockElements(kind);
  if (kind == WeightKind::Q4_0 || kind == WeightKind::IQ4_NL) {  // IQ4_NL: Q4_0's block shape
    groupRowsOf<BlockQ4_0, BlockQ4_0x8>(data, rows, blocks);
  } else if (kind == WeightKind::MXFP4) {
    groupRowsOf<BlockMXFP4, BlockMXFP4x8>(data, rows, blocks);
  } else if (kind == WeightKind::Q4_1) {
    groupRowsOf<BlockQ4_1, BlockQ4_1x8>(data, rows, blocks);
  } else if (kind == WeightKind::Q8_0) {
    groupRowsOf<BlockQ8_0, BlockQ8_0x8>(data, rows, blocks);
  } else if (kind == WeightKind::Q4_K) {
    groupRowsOf<BlockQ4_K, BlockQ4_Kx8>(data, rows, blocks);
  } else if (kind == WeightKind::Q5_K) {
    groupRowsOf<BlockQ5_K, BlockQ5_Kx8>(data, rows, blocks);
  } else {
    groupRowsOf<BlockQ6_K, BlockQ6_Kx8>(data, rows, blocks);
  }
}

void ungroupRow(WeightKind kind, const uint8_t* data, int64_t cols, int64_t r, uint8_t* out) {
  ungroupRows(kind, data, cols, r, r + 1, out, 0);
}

void ungroupRows(WeightKind kind, const uint8_t* data, int64_t cols, int64_t rowBegin,
                 int64_t rowEnd, uint8_t* out, size_t outStride) {
  if (!hasRowGroups(kind)) throw Error("row groups: no grouped layout for this weight type");
  const int64_t blocks = cols / blockElements(kind);
  auto run = [&](auto block, auto group) {
    ungroupRowsOf<decltype(block), decltype(group)>(data, blocks, rowBegin, rowEnd, out, outStride);
  };
  if (kind == WeightKind::Q4_0 || kind == WeightKind::IQ4_NL) {
    run(BlockQ4_0{}, BlockQ4_0x8{});
  } else if (kind == WeightKind::MXFP4) {
    run(BlockMXFP4{}, BlockMXFP4x8{});
  } else if (kind == WeightKind::Q4_1) {
    run(BlockQ4_1{}, BlockQ4_1x8{});
  } else if (kind == WeightKind::Q8_0) {
    run(BlockQ8_0{}, BlockQ8_0x8{});
  } else if (kind == WeightKind::Q4_K) {
    run(BlockQ4_K{}, BlockQ4_Kx8{});
  } else if (kind == WeightKind::Q5_K) {
    run(BlockQ5_K{}, BlockQ5_Kx8{});
  } else {
    run(BlockQ6_K{}, BlockQ6_Kx8{});
  }
}

}  // namespace shoal::cpu
