#include "kernels/cpu/row_groups.h"

#include <cstring>
#include <string>
#include <vector>

#include "engine/error.h"

namespace shoal::cpu {

bool hasRowGroups(WeightKind kind) { return kind == WeightKind::Q4_K; }

void groupRows(WeightKind kind, uint8_t* data, int64_t rows, int64_t cols) {
  if (!hasRowGroups(kind)) throw Error("row groups: no grouped layout for this weight type");
  if (rows % kGroupRows != 0 || cols % kQKK != 0) {
    throw Error("row groups: a matrix of " + std::to_string(rows) + " x " + std::to_string(cols) +
                " does not divide into groups of " + std::to_string(kGroupRows) + " rows");
  }
  const int64_t blocks = cols / kQKK;
  const size_t groupBytes = sizeof(BlockQ4_K) * static_cast<size_t>(blocks * kGroupRows);
  std::vector<BlockQ4_K> plain(static_cast<size_t>(blocks * kGroupRows));
  for (int64_t g = 0; g < rows / kGroupRows; ++g) {
    uint8_t* group = data + static_cast<size_t>(g) * groupBytes;
    std::memcpy(plain.data(), group, groupBytes);
    auto* out = reinterpret_cast<BlockQ4_Kx8*>(group);
    for (int64_t b = 0; b < blocks; ++b) {
      BlockQ4_Kx8& x = out[b];
      for (int r = 0; r < kGroupRows; ++r) {
        const BlockQ4_K& in = plain[static_cast<size_t>(r * blocks + b)];
        x.d[r] = in.d;
        x.dmin[r] = in.dmin;
        std::memcpy(x.scales[r], in.scales, sizeof in.scales);
        std::memcpy(x.qs[r], in.qs, sizeof in.qs);
      }
    }
  }
}

void ungroupRow(WeightKind kind, const uint8_t* data, int64_t cols, int64_t r, uint8_t* out) {
  if (!hasRowGroups(kind)) throw Error("row groups: no grouped layout for this weight type");
  const int64_t blocks = cols / kQKK;
  const auto* group =
      reinterpret_cast<const BlockQ4_Kx8*>(data) + static_cast<size_t>(r / kGroupRows * blocks);
  auto* row = reinterpret_cast<BlockQ4_K*>(out);
  for (int64_t b = 0; b < blocks; ++b) {
    ungroupBlock(group[b], static_cast<int>(r % kGroupRows), row[b]);
  }
}

}  // namespace shoal::cpu
