#include "engine/model/tokenizer_spm.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>

#include "engine/error.h"
#include "engine/model/unicode_utf8.h"

namespace shoal::model {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string replaceAll(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit = text.find(from); hit != std::string_view::npos; hit = text.find(from, pos)) {
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

struct Symbol {
  uint32_t start;   // byte range in the escaped text
  uint32_t length;  // 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Bigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t length;  // of left + right when queued; a different sum means the entry is stale
};

// Heap order of llama.cpp's llm_bigram_spm::comparator: highest score first, then leftmost.
bool lowerPriority(const Bigram& a, const Bigram& b) {
  return a.score < b.score || (a.score == b.score && a.left > b.left);
}

}  // namespace

SpmTokenizer::SpmTokenizer(Vocab vocab)
    : Tokenizer(std::move(vocab)), m_index(m_vocab.tokens), m_special(m_vocab) {
  const int32_t n = size();
  if (m_vocab.scores.empty()) m_vocab.scores.assign(n, 0.0f);

  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    TokenId id = m_index.find(name);
    if (id < 0) id = m_index.find(std::string(1, static_cast<char>(b)));
    if (id < 0 && m_vocab.unk) id = *m_vocab.unk;
    m_byteToken[b] = id;
  }

  m_pieces = tokenPieces(m_vocab,
                         [](const std::string& text) { return replaceAll(text, kSpaceMark, " "); });
}

std::vector<TokenId> SpmTokenizer::encode(std::string_view text, bool addSpecial,
                                          bool parseSpecial) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 2);
  if (addSpecial && m_vocab.addBos) out.push_back(*m_vocab.bos);
  // The space prefix goes before the first text and before text that follows a special token,
  // as in llama.cpp (is_prev_special).
  bool afterSpecial = true;
  for (const Fragment& f : m_special.split(text, parseSpecial)) {
    if (f.isToken()) {
      out.push_back(f.token);
      afterSpecial = true;
      continue;
    }
    std::string part = m_vocab.addSpacePrefix && afterSpecial ? " " : "";
    part.append(text.substr(f.offset, f.length));
    encodeEscaped(replaceAll(part, " ", kSpaceMark), out);
    afterSpecial = false;
  }
  if (addSpecial && m_vocab.addEos) out.push_back(*m_vocab.eos);
  return out;
}

void SpmTokenizer::encodeEscaped(std::string_view text, std::vector<TokenId>& out) const {
  // One symbol per UTF-8 character, its length read from the lead byte alone (llama.cpp).
  std::vector<Symbol> symbols;
  for (size_t offset = 0; offset < text.size();) {
    const size_t length = std::min(unicode::utf8SequenceLength(text[offset]), text.size() - offset);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(length), index - 1,
                       offset + length < text.size() ? index + 1 : -1});
    offset += length;
  }
  if (symbols.empty()) return;

  const auto textOf = [&](const Symbol& s, uint32_t length) {
    return text.substr(s.start, length);
  };
  std::vector<Bigram> heap;
  // Text of every pair ever queued -> the two symbols it joined (llama.cpp's rev_merge, last
  // writer wins); used only to split a symbol that is not a token, see below.
  std::unordered_map<std::string_view, std::pair<int32_t, int32_t>> joined;
  const auto queuePair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t length = symbols[left].length + symbols[right].length;
    const std::string_view pair = textOf(symbols[left], length);
    const TokenId id = m_index.find(pair);
    if (id < 0) return;
    heap.push_back({m_vocab.scores[id], left, right, length});
    std::push_heap(heap.begin(), heap.end(), lowerPriority);
    joined.insert_or_assign(pair, std::make_pair(left, right));
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    queuePair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), lowerPriority);
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != b.length) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    queuePair(left.prev, b.left);
    queuePair(b.left, left.next);
  }

  // Every merged symbol is a token; a symbol that is not (a character without a token) is split
  // back into the pair that formed its text if there was one, else spelled as byte tokens.
  // llama.cpp recurses there; a work list with a step limit keeps malformed input from looping.
  std::vector<int32_t> work;
  size_t steps = 4 * symbols.size() + 16;
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    work.assign(1, i);
    while (!work.empty()) {
      const int32_t s = work.back();
      work.pop_back();
      const std::string_view piece = textOf(symbols[s], symbols[s].length);
      if (const TokenId id = m_index.find(piece); id >= 0) {
        out.push_back(id);
        continue;
      }
      const auto it = joined.find(piece);
      if (it != joined.end() && steps > 0) {
        --steps;
        work.push_back(it->second.second);  // right after left: the stack pops left first
        work.push_back(it->second.first);
        continue;
      }
      for (char c : piece) {
        const TokenId id = m_byteToken[static_cast<uint8_t>(c)];
        if (id < 0) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(static_cast<uint8_t>(c)));
          throw Error(std::string("SentencePiece vocabulary: no token for byte ") + hex +
                      " (no <0x..> byte token and no unknown token)");
        }
        out.push_back(id);
      }
    }
  }
}

std::string SpmTokenizer::tokenBytes(TokenId id, bool renderSpecial) const {
  checkId(id);
  const TokenAttr attr = m_vocab.attrs[id];
  if (!renderSpecial && (attr == TokenAttr::Control || attr == TokenAttr::Unknown)) return {};
  return m_pieces[id];
}

}  // namespace shoal::model
