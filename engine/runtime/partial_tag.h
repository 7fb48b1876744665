#pragma once
// For splitters of streamed text (reasoning_split.h, tool_call_split.h): how much of a text's end
// might still become a tag once more text arrives, and so must be held back.

#include <algorithm>
#include <string_view>

namespace shoal::runtime {

// The length of the longest suffix of `text` that is a proper prefix of `tag`.
inline size_t partialTagAtEnd(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace shoal::runtime
