#include "lan/json/json_bounds.h"

namespace shoal::lan {

std::string jsonBoundsViolation(std::string_view text, const JsonBounds& bounds) {
  size_t depth = 0;
  size_t values = 1;  // the top-level value
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (c == '\\') {
        ++i;  // the escaped character (\" or \\) cannot end the string
      } else if (c == '"') {
        inString = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        inString = true;
        break;
      case '[':
      case '{':
        if (++depth > bounds.maxDepth) {
          return "nests arrays/objects deeper than " + std::to_string(bounds.maxDepth) +
                 " levels (at byte " + std::to_string(i) + ")";
        }
        ++values;  // its first element, if any (an upper bound: "[]" counts one)
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      case ',':
        ++values;
        break;
      default:
        break;
    }
    if (values > bounds.maxValues) {
      return "holds more than " + std::to_string(bounds.maxValues) + " JSON values";
    }
  }
  return {};
}

}  // namespace shoal::lan
