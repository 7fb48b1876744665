#include "engine/model/unicode_utf8.h"

#include <array>

namespace shoal::model::unicode {

namespace {

bool isContinuation(std::string_view text, size_t i) {
  return i < text.size() && (static_cast<uint8_t>(text[i]) & 0xC0) == 0x80;
}

// Decodes one sequence at offset; returns false (offset unchanged) where llama.cpp's
// unicode_cpt_from_utf8 throws "invalid character".
bool decodeOne(std::string_view text, size_t& offset, uint32_t& cpt) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(text[k])); };
  const uint32_t lead = b(offset);
  if ((lead & 0x80) == 0) {
    cpt = lead;
    offset += 1;
    return true;
  }
  if ((lead & 0x40) == 0) return false;  // a continuation byte cannot start a sequence
  if ((lead & 0x20) == 0) {
    if (!isContinuation(text, offset + 1)) return false;
    cpt = ((lead & 0x1F) << 6) | (b(offset + 1) & 0x3F);
    offset += 2;
    return true;
  }
  if ((lead & 0x10) == 0) {
    if (!isContinuation(text, offset + 1) || !isContinuation(text, offset + 2)) return false;
    cpt = ((lead & 0x0F) << 12) | ((b(offset + 1) & 0x3F) << 6) | (b(offset + 2) & 0x3F);
    offset += 3;
    return true;
  }
  if ((lead & 0x08) == 0) {
    if (!isContinuation(text, offset + 1) || !isContinuation(text, offset + 2) ||
        !isContinuation(text, offset + 3)) {
      return false;
    }
    cpt = ((lead & 0x07) << 18) | ((b(offset + 1) & 0x3F) << 12) | ((b(offset + 2) & 0x3F) << 6) |
          (b(offset + 3) & 0x3F);
    offset += 4;
    return true;
  }
  return false;  // 0xF8..0xFF
}

struct ByteAlphabet {
  std::array<std::string, 256> utf8;  // byte -> UTF-8 of its codepoint
  std::array<int16_t, 512> byteOf;    // codepoint (all are < 0x144) -> byte, or -1

  ByteAlphabet() {
    byteOf.fill(-1);
    const auto standsForItself = [](int c) {
      return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    };
    uint32_t next = 256;
    for (int c = 0; c < 256; ++c) {
      const uint32_t cpt = standsForItself(c) ? static_cast<uint32_t>(c) : next++;
      appendUtf8(utf8[c], cpt);
      byteOf[cpt] = static_cast<int16_t>(c);
    }
  }
};

const ByteAlphabet& byteAlphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

}  // namespace

std::vector<uint32_t> decodeUtf8Lenient(std::string_view text) {
  std::vector<uint32_t> cpts;
  cpts.reserve(text.size());
  size_t offset = 0;
  while (offset < text.size()) {
    uint32_t cpt = 0;
    if (decodeOne(text, offset, cpt)) {
      cpts.push_back(cpt);
    } else {
      cpts.push_back(kReplacementChar);
      ++offset;
    }
  }
  return cpts;
}

void appendUtf8(std::string& out, uint32_t cpt) {
  if (cpt <= 0x7F) {
    out.push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt <= 0x10FFFF) {
    out.push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    appendUtf8(out, kReplacementChar);
  }
}

std::string_view byteToUnicode(uint8_t b) { return byteAlphabet().utf8[b]; }

int unicodeToByte(uint32_t cpt) {
  if (cpt >= byteAlphabet().byteOf.size()) return -1;
  return byteAlphabet().byteOf[cpt];
}

}  // namespace shoal::model::unicode
