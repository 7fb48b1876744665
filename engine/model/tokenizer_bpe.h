#pragma once
// Byte-level BPE (tokenizer.ggml.model = "gpt2"), as llama.cpp's llm_tokenizer_bpe_session:
// special tokens cut out first, the pre-tokenizer splits the rest into pieces, each piece is
// spelled in GPT-2's byte alphabet and merged pair by pair, lowest merge rank first.
// Internal to engine/model: use Tokenizer::create.

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model/pretokenizer.h"
#include "engine/model/tokenizer.h"
#include "engine/model/tokenizer_special.h"

namespace shoal::model {

class BpeTokenizer final : public Tokenizer {
 public:
  // Throws shoal::Error for an unsupported tokenizer.ggml.pre or a malformed vocabulary.
  explicit BpeTokenizer(Vocab vocab);

  std::vector<TokenId> encode(std::string_view text, bool addSpecial,
                              bool parseSpecial) const override;
  std::string tokenBytes(TokenId id, bool renderSpecial = false) const override;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of the merged text
  };

  // Symbol ids: a token id when the text is a token, an id >= size() for a text that only
  // appears inside the merge list, -1 for a text BPE can never merge.
  static uint64_t pairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  struct Scratch;
  void encodeText(std::string_view text, std::vector<TokenId>& out) const;
  void encodePiece(std::string_view bytes, Scratch& scratch, std::vector<TokenId>& out) const;
  void emitUnmerged(std::string_view bytes, std::vector<TokenId>& out) const;

  PreTokenizer m_pre;
  TokenTextIndex m_index;
  SpecialTokenSplitter m_special;
  std::unordered_map<uint64_t, Merge> m_merges;  // (left symbol, right symbol) -> merge
  std::array<int32_t, 256> m_byteSymbol{};       // symbol of each byte's alphabet letter
  std::array<TokenId, 256> m_singleByteToken{};  // token whose text is this one byte, or -1
  std::vector<std::string> m_pieces;             // bytes of each token, specials as their text
};

}  // namespace shoal::model
