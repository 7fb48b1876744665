#include "lan/discovery/display_name.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace shoal::lan {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

// The code point starting at text[i] and its length in bytes; {kReplacement, 1} for a byte that
// does not start a valid, shortest-form UTF-8 sequence of a scalar value.
std::pair<char32_t, size_t> decodeAt(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return {b0, 1};
  size_t length = 0;
  char32_t cp = 0;
  char32_t minimum = 0;
  if ((b0 & 0xE0) == 0xC0) {
    length = 2, cp = b0 & 0x1F, minimum = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, cp = b0 & 0x0F, minimum = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, cp = b0 & 0x07, minimum = 0x10000;
  } else {
    return {kReplacement, 1};
  }
  if (i + length > text.size()) return {kReplacement, 1};
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return {kReplacement, 1};
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < minimum || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kReplacement, 1};
  return {cp, length};
}

void appendUtf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool isLineBreakOrTab(char32_t cp) {
  return cp == '\t' || cp == '\n' || cp == '\r' || cp == 0x2028 || cp == 0x2029;
}

bool isRemoved(char32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

size_t utf8Length(char32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

}  // namespace

std::string sanitizeDisplayText(std::string_view text, size_t maxBytes) {
  std::string out;
  out.reserve(std::min(text.size(), maxBytes));
  bool pendingSpace = false;
  for (size_t i = 0; i < text.size();) {
    auto [cp, length] = decodeAt(text, i);
    i += length;
    if (isLineBreakOrTab(cp)) cp = ' ';
    if (cp != ' ' && isRemoved(cp)) continue;
    if (cp == ' ') {
      pendingSpace = !out.empty();  // leading spaces are dropped, inner runs become one
      continue;
    }
    const size_t need = utf8Length(cp) + (pendingSpace ? 1 : 0);
    if (out.size() + need > maxBytes) break;
    if (pendingSpace) out += ' ';
    pendingSpace = false;
    appendUtf8(out, cp);
  }
  return out;  // a trailing space is never written: it waits for a following character
}

}  // namespace shoal::lan
