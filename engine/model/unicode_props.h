#pragma once
// What the tokenizer needs to know about a codepoint: its coarse category and whether it is
// whitespace, as bit flags in the layout llama.cpp's unicode_cpt_flags uses, so pre-tokenizer
// rules read like their regexes (\p{L} = kFlagLetter, \s = kFlagWhitespace, ...).

#include <cstdint>

namespace shoal::model::unicode {

using CodepointFlags = uint16_t;

constexpr CodepointFlags kFlagUndefined = 1 << 0;    // Cn, and anything above U+10FFFF
constexpr CodepointFlags kFlagNumber = 1 << 1;       // \p{N}
constexpr CodepointFlags kFlagLetter = 1 << 2;       // \p{L}
constexpr CodepointFlags kFlagSeparator = 1 << 3;    // \p{Z}
constexpr CodepointFlags kFlagMark = 1 << 4;         // \p{M}
constexpr CodepointFlags kFlagPunctuation = 1 << 5;  // \p{P}
constexpr CodepointFlags kFlagSymbol = 1 << 6;       // \p{S}
constexpr CodepointFlags kFlagControl = 1 << 7;      // \p{C} except Cn
constexpr CodepointFlags kFlagWhitespace = 1 << 8;   // llama.cpp's whitespace set (\s)
constexpr CodepointFlags kCategoryMask = 0xFF;

// Exactly one category bit is set, plus kFlagWhitespace where it applies; never 0, so 0 is free
// to mean "no codepoint here" (past the end of a fragment) in the pre-tokenizers.
CodepointFlags codepointFlags(uint32_t cpt);

// The Unicode version the tables were generated from (tools/gen_unicode_tables.py).
const char* unicodeVersion();

}  // namespace shoal::model::unicode
