#include "engine/model/tokenizer_bpe.h"

#include <algorithm>
#include <cstdio>

#include "engine/error.h"
#include "engine/model/unicode_utf8.h"

namespace shoal::model {

namespace {

struct Symbol {
  int32_t id;    // see BpeTokenizer: token id, merge-only id (>= vocabulary size) or -1
  int32_t prev;  // neighbours in the chain of live symbols, -1 at the ends
  int32_t next;
  uint32_t start;   // byte range in the piece
  uint32_t length;  // 0 once merged into its left neighbour
};

struct Bigram {
  int32_t rank;
  int32_t left;  // symbol indices
  int32_t right;
  int32_t leftId;   // symbol ids when the pair was queued: if either side changed since, the
  int32_t rightId;  // entry is stale
  int32_t result;
};

// Heap order of llama.cpp's llm_bigram_bpe::comparator: lowest rank first, then leftmost.
bool lowerPriority(const Bigram& a, const Bigram& b) {
  return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
}

// Token text in GPT-2's byte alphabet -> the bytes it stands for. A codepoint outside the
// alphabet is written the way llama.cpp's llama_decode_text writes it.
std::string unspell(const std::string& text) {
  std::string bytes;
  for (uint32_t cpt : unicode::decodeUtf8Lenient(text)) {
    const int b = unicode::unicodeToByte(cpt);
    if (b >= 0) {
      bytes.push_back(static_cast<char>(b));
      continue;
    }
    std::string utf8;
    unicode::appendUtf8(utf8, cpt);
    bytes += "[UNK_BYTE_0x";
    for (char c : utf8) {
      char hex[3];
      std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned>(static_cast<uint8_t>(c)));
      bytes += hex;
    }
    bytes += text + "]";
  }
  return bytes;
}

}  // namespace

// Working memory of one encodeText() call, reused from piece to piece.
struct BpeTokenizer::Scratch {
  std::vector<Symbol> symbols;
  std::vector<Bigram> heap;
};

BpeTokenizer::BpeTokenizer(Vocab vocab)
    : Tokenizer(std::move(vocab)),
      m_pre(PreTokenizer::forName(m_vocab.pre)),
      m_index(m_vocab.tokens),
      m_special(m_vocab) {
  const int32_t n = size();

  // Merges are keyed by symbol ids, not text, so a lookup is one integer hash. Texts that occur
  // in the merge list but are not tokens get ids past the vocabulary, so merging still follows
  // the text-keyed ranks of llama.cpp exactly.
  std::unordered_map<std::string, int32_t, TransparentStringHash, std::equal_to<>> mergeOnly;
  const auto symbolOf = [&](std::string_view text, bool create) -> int32_t {
    if (const TokenId id = m_index.find(text); id >= 0) return id;
    if (const auto it = mergeOnly.find(text); it != mergeOnly.end()) return it->second;
    if (!create) return -1;
    const auto id = static_cast<int32_t>(n + mergeOnly.size());
    mergeOnly.emplace(std::string(text), id);
    return id;
  };
  m_merges.reserve(m_vocab.merges.size());
  for (size_t rank = 0; rank < m_vocab.merges.size(); ++rank) {
    const std::string& merge = m_vocab.merges[rank];
    // "left right", split at the first space after the first byte (llama.cpp reads it so).
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) continue;  // llama.cpp keeps it, but it can never apply
    const std::string_view left = std::string_view(merge).substr(0, space);
    const std::string_view right = std::string_view(merge).substr(space + 1);
    const int32_t l = symbolOf(left, true);
    const int32_t r = symbolOf(right, true);
    const int32_t result = symbolOf(std::string(left) + std::string(right), true);
    if (rank > static_cast<size_t>(INT32_MAX)) throw Error("tokenizer.ggml.merges: too many");
    m_merges.try_emplace(pairKey(l, r), Merge{static_cast<int32_t>(rank), result});  // first wins
  }
  for (int b = 0; b < 256; ++b) {
    m_byteSymbol[b] = symbolOf(unicode::byteToUnicode(static_cast<uint8_t>(b)), false);
    m_singleByteToken[b] = m_index.find(std::string(1, static_cast<char>(b)));
  }

  m_pieces = tokenPieces(m_vocab, [](const std::string& text) { return unspell(text); });
}

std::vector<TokenId> BpeTokenizer::encode(std::string_view text, bool addSpecial,
                                          bool parseSpecial) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 2);
  if (addSpecial && m_vocab.addBos) out.push_back(*m_vocab.bos);
  for (const Fragment& f : m_special.split(text, parseSpecial)) {
    if (f.isToken()) {
      out.push_back(f.token);
    } else {
      encodeText(text.substr(f.offset, f.length), out);
    }
  }
  if (addSpecial && m_vocab.addEos) out.push_back(*m_vocab.eos);
  return out;
}

void BpeTokenizer::encodeText(std::string_view text, std::vector<TokenId>& out) const {
  // Invalid UTF-8 is read as U+FFFD and re-encoded, like llama.cpp, so pieces are valid UTF-8.
  const std::vector<uint32_t> cpts = unicode::decodeUtf8Lenient(text);
  Scratch scratch;
  std::string piece;
  size_t offset = 0;
  for (size_t length : m_pre.split(cpts)) {
    piece.clear();
    for (size_t i = offset; i < offset + length; ++i) unicode::appendUtf8(piece, cpts[i]);
    offset += length;
    encodePiece(piece, scratch, out);
  }
}

void BpeTokenizer::encodePiece(std::string_view bytes, Scratch& scratch,
                               std::vector<TokenId>& out) const {
  const int32_t n = size();
  if (m_pre.spec().ignoreMerges) {
    std::string spelled;
    for (char c : bytes) spelled += unicode::byteToUnicode(static_cast<uint8_t>(c));
    if (const TokenId id = m_index.find(spelled); id >= 0) {
      out.push_back(id);
      return;
    }
  }

  // One symbol per byte: each byte is one letter of the byte alphabet.
  std::vector<Symbol>& symbols = scratch.symbols;
  symbols.resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    symbols[i] = Symbol{m_byteSymbol[static_cast<uint8_t>(bytes[i])], static_cast<int32_t>(i) - 1,
                        i + 1 < bytes.size() ? static_cast<int32_t>(i + 1) : -1,
                        static_cast<uint32_t>(i), 1};
  }
  std::vector<Bigram>& heap = scratch.heap;
  heap.clear();
  const auto queuePair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t l = symbols[left].id;
    const int32_t r = symbols[right].id;
    if (l < 0 || r < 0) return;
    const auto it = m_merges.find(pairKey(l, r));
    if (it == m_merges.end()) return;
    heap.push_back({it->second.rank, left, right, l, r, it->second.result});
    std::push_heap(heap.begin(), heap.end(), lowerPriority);
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
    if (left.length == 0 || right.length == 0 || left.id != b.leftId || right.id != b.rightId) {
      continue;  // one side was merged since this pair was queued
    }
    left.id = b.result;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    queuePair(left.prev, b.left);
    queuePair(b.left, left.next);
  }

  for (int32_t i = 0; i >= 0 && !symbols.empty(); i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0 && s.id < n) {
      out.push_back(s.id);
    } else {
      emitUnmerged(bytes.substr(s.start, s.length), out);
    }
  }
}

void BpeTokenizer::emitUnmerged(std::string_view bytes, std::vector<TokenId>& out) const {
  // A symbol that is no token: llama.cpp looks up each byte of its alphabet spelling as a
  // one-byte token and drops the bytes that are none (only printable ASCII spells itself).
  for (char b : bytes) {
    for (char c : unicode::byteToUnicode(static_cast<uint8_t>(b))) {
      if (const TokenId id = m_singleByteToken[static_cast<uint8_t>(c)]; id >= 0) out.push_back(id);
    }
  }
}

std::string BpeTokenizer::tokenBytes(TokenId id, bool renderSpecial) const {
  checkId(id);
  const TokenAttr attr = m_vocab.attrs[id];
  if (!renderSpecial && (attr == TokenAttr::Control || attr == TokenAttr::Unknown)) return {};
  return m_pieces[id];
}

}  // namespace shoal::model
