#pragma once
// Parts shared by the BPE and SentencePiece tokenizers (internal to engine/model): looking up a
// token by its text, and cutting input text at special-token occurrences before tokenizing.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/model/vocab.h"

namespace shoal::model {

struct TransparentStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Token text -> id. With duplicate texts the highest id wins, as llama.cpp's token_to_id did
// before it started refusing duplicates.
class TokenTextIndex {
 public:
  explicit TokenTextIndex(const std::vector<std::string>& tokens);
  // -1 when no token has exactly this text.
  TokenId find(std::string_view text) const {
    const auto it = m_ids.find(text);
    return it == m_ids.end() ? -1 : it->second;
  }

 private:
  std::unordered_map<std::string, TokenId, TransparentStringHash, std::equal_to<>> m_ids;
};

// A run of input text, or one special token found in it.
struct Fragment {
  TokenId token = -1;  // >= 0 for a special token; the text range is then unused
  size_t offset = 0;   // byte range of raw text
  size_t length = 0;
  bool isToken() const { return token >= 0; }
};

// llama.cpp's tokenizer_st_partition: the candidates are the control, user-defined and unknown
// tokens, longest text first; each one in turn splits every remaining text fragment at all its
// (non-overlapping, leftmost-first) occurrences. Without parseSpecial only user-defined tokens
// are candidates: Hugging Face tokenizers always split those out.
class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const Vocab& vocab);
  std::vector<Fragment> split(std::string_view text, bool parseSpecial) const;

 private:
  struct Candidate {
    TokenId id;
    std::string text;
    bool onlyWhenParsingSpecial;  // control or unknown
  };
  std::vector<Candidate> m_candidates;
};

// The byte a byte-fallback token stands for: its text is "<0xXX>" with two hex digits.
std::optional<uint8_t> byteTokenValue(std::string_view text);

// The bytes each token stands for, by its attribute: control, unknown and user-defined tokens
// are their text, byte tokens the byte, normal tokens normalText(text) (the tokenizer's own
// spelling undone); undefined and unused tokens are empty, as llama.cpp renders them.
std::vector<std::string> tokenPieces(
    const Vocab& vocab, const std::function<std::string(const std::string&)>& normalText);

}  // namespace shoal::model
