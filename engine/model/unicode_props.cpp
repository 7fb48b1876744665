#include "engine/model/unicode_props.h"

#include <algorithm>
#include <array>
#include <memory>

#include "engine/model/unicode_tables.h"

namespace shoal::model::unicode {

namespace {

constexpr uint32_t kBmpSize = 0x10000;
constexpr uint32_t kMaxCodepoint = 0x10FFFF;

CodepointFlags flagOf(Category category) {
  return static_cast<CodepointFlags>(1u << static_cast<unsigned>(category));
}

bool isWhitespace(uint32_t cpt) {
  return std::binary_search(kWhitespace, kWhitespace + kWhitespaceCount, cpt);
}

Category searchCategory(uint32_t cpt) {
  // The last range whose start is <= cpt.
  const CategoryRange* end = kCategoryRanges + kCategoryRangeCount;
  const CategoryRange* it = std::upper_bound(
      kCategoryRanges, end, cpt, [](uint32_t c, const CategoryRange& r) { return c < r.start; });
  return (it - 1)->category;
}

// The Basic Multilingual Plane holds nearly all text; one table lookup there instead of a binary
// search over ~2200 ranges. Built once on first use and immutable afterwards (thread-safe static
// initialisation), so concurrent tokenizers share it without locks.
const std::array<CodepointFlags, kBmpSize>& bmpTable() {
  static const std::unique_ptr<std::array<CodepointFlags, kBmpSize>> table = [] {
    auto t = std::make_unique<std::array<CodepointFlags, kBmpSize>>();
    size_t range = 0;
    for (uint32_t cpt = 0; cpt < kBmpSize; ++cpt) {
      while (range + 1 < kCategoryRangeCount && kCategoryRanges[range + 1].start <= cpt) {
        ++range;
      }
      (*t)[cpt] = flagOf(kCategoryRanges[range].category);
    }
    for (size_t i = 0; i < kWhitespaceCount; ++i) {
      if (kWhitespace[i] < kBmpSize) (*t)[kWhitespace[i]] |= kFlagWhitespace;
    }
    return t;
  }();
  return *table;
}

}  // namespace

CodepointFlags codepointFlags(uint32_t cpt) {
  if (cpt < kBmpSize) return bmpTable()[cpt];
  if (cpt > kMaxCodepoint) return kFlagUndefined;
  CodepointFlags flags = flagOf(searchCategory(cpt));
  if (isWhitespace(cpt)) flags |= kFlagWhitespace;
  return flags;
}

const char* unicodeVersion() { return kUnicodeVersion; }

}  // namespace shoal::model::unicode
