#pragma once
// SentencePiece BPE (tokenizer.ggml.model = "llama"), as llama.cpp's llm_tokenizer_spm_session:
// spaces become U+2581 "▁" (with one prepended when add_space_prefix is set and the text starts
// the input or follows a special token), then neighbouring pieces merge greedily, the merge whose
// result has the highest score first; what never becomes a token falls back to <0xXX> byte
// tokens. Internal to engine/model: use Tokenizer::create.

#include <array>
#include <string>
#include <vector>

#include "engine/model/tokenizer.h"
#include "engine/model/tokenizer_special.h"

namespace shoal::model {

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab vocab);

  std::vector<TokenId> encode(std::string_view text, bool addSpecial,
                              bool parseSpecial) const override;
  std::string tokenBytes(TokenId id, bool renderSpecial = false) const override;

 private:
  void encodeEscaped(std::string_view text, std::vector<TokenId>& out) const;

  TokenTextIndex m_index;
  SpecialTokenSplitter m_special;
  // Token for each byte: "<0xXX>", else the one-byte token, else unk (llama.cpp would throw),
  // else -1 (encode then throws).
  std::array<TokenId, 256> m_byteToken{};
  std::vector<std::string> m_pieces;  // bytes of each token, specials as their text
};

}  // namespace shoal::model
