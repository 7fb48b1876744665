// Utf8StreamDecoder (declared in tokenizer.h): token bytes in, whole UTF-8 characters out.

#include <cstdint>

#include "engine/model/tokenizer.h"

namespace shoal::model {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Decodes as much of `bytes` as can be decided. Valid sequences are copied, each maximal invalid
// subpart becomes one U+FFFD (Unicode 15, 3.9 "U+FFFD Substitution of Maximal Subparts"). An
// incomplete sequence at the end is left undecided (its start is returned) unless atEnd, when
// it becomes one U+FFFD.
size_t decodeAvailable(std::string_view bytes, bool atEnd, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto lead = static_cast<uint8_t>(bytes[i]);
    if (lead < 0x80) {
      out.push_back(static_cast<char>(lead));
      ++i;
      continue;
    }
    size_t length = 0;
    uint8_t secondLow = 0x80;  // the second byte's range excludes overlongs and surrogates
    uint8_t secondHigh = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) secondLow = 0xA0;
      if (lead == 0xED) secondHigh = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) secondLow = 0x90;
      if (lead == 0xF4) secondHigh = 0x8F;
    } else {
      out.append(kReplacement);  // continuation byte without a lead, C0, C1, F5..FF
      ++i;
      continue;
    }
    size_t k = 1;
    for (; k < length && i + k < bytes.size(); ++k) {
      const auto c = static_cast<uint8_t>(bytes[i + k]);
      const uint8_t low = k == 1 ? secondLow : 0x80;
      const uint8_t high = k == 1 ? secondHigh : 0xBF;
      if (c < low || c > high) break;
    }
    if (k == length) {
      out.append(bytes.substr(i, length));
      i += length;
    } else if (i + k < bytes.size()) {
      out.append(kReplacement);  // cut short by a byte that cannot continue it
      i += k;
    } else if (atEnd) {
      out.append(kReplacement);  // stream ended inside the character
      i = bytes.size();
    } else {
      return i;  // may still complete with the next push
    }
  }
  return i;
}

}  // namespace

std::string Utf8StreamDecoder::push(std::string_view bytes) {
  m_pending.append(bytes);
  std::string out;
  const size_t decided = decodeAvailable(m_pending, false, out);
  m_pending.erase(0, decided);
  return out;
}

std::string Utf8StreamDecoder::flush() {
  std::string out;
  decodeAvailable(m_pending, true, out);
  m_pending.clear();
  return out;
}

}  // namespace shoal::model
