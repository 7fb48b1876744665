#pragma once
// UTF-8 <-> codepoints the way llama.cpp's tokenizer does it, and GPT-2's byte-level alphabet.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::model::unicode {

constexpr uint32_t kReplacementChar = 0xFFFD;

// Decodes like llama.cpp's unicode_cpts_from_utf8: the lead byte fixes the length (no check for
// overlong forms or surrogates); a byte that does not start a complete sequence becomes U+FFFD
// and decoding resumes at the next byte. Tokenizing invalid UTF-8 therefore tokenizes U+FFFD.
std::vector<uint32_t> decodeUtf8Lenient(std::string_view text);

// Appends the UTF-8 form of cpt; a value above U+10FFFF (which the lenient decoder can produce
// from F5..F7 lead bytes) is written as U+FFFD (llama.cpp throws there).
void appendUtf8(std::string& out, uint32_t cpt);

// Length of the UTF-8 sequence a byte starts, from its high nibble (1 for continuation bytes), as
// llama.cpp's unicode_len_utf8: how the BPE and SentencePiece merges cut text into characters.
inline size_t utf8SequenceLength(char lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[static_cast<uint8_t>(lead) >> 4];
}

// GPT-2 byte-level BPE alphabet: every byte is spelled by one printable codepoint. Bytes
// 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68 bytes map, in
// increasing order, to U+0100, U+0101, ... (so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ').
// byteToUnicode gives the UTF-8 of the codepoint spelling byte b.
std::string_view byteToUnicode(uint8_t b);
// The byte a codepoint spells, or -1 when it is not part of the alphabet.
int unicodeToByte(uint32_t cpt);

}  // namespace shoal::model::unicode
