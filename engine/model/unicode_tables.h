#pragma once
// Generated Unicode data (engine/model/unicode_tables.cpp, written by tools/gen_unicode_tables.py).
// Use the lookups of unicode_props.h; these arrays are their raw material.

#include <cstddef>
#include <cstdint>

namespace shoal::model::unicode {

// General category coarsened to its first letter, as llama.cpp's tokenizer tables do; Cn
// (unassigned) stays apart as Undefined.
enum class Category : uint8_t {
  Undefined = 0,
  Number,       // N*
  Letter,       // L*
  Separator,    // Z*
  Mark,         // M*
  Punctuation,  // P*
  Symbol,       // S*
  Control,      // Cc, Cf, Co, Cs
};

struct CategoryRange {
  uint32_t start;  // first codepoint; the range ends where the next one starts
  Category category;
};

extern const char kUnicodeVersion[];           // e.g. "14.0.0"
extern const CategoryRange kCategoryRanges[];  // sorted by start; first start is 0
extern const size_t kCategoryRangeCount;
extern const uint32_t kWhitespace[];  // sorted; llama.cpp's whitespace set
extern const size_t kWhitespaceCount;

}  // namespace shoal::model::unicode
