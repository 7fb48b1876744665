#pragma once
// Text <-> token ids, matching llama.cpp's tokenizer on the same GGUF vocabulary.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/vocab.h"

namespace shoal::model {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Build the tokenizer the vocabulary asks for; throws shoal::Error naming an unsupported
  // tokenizer.ggml.model or tokenizer.ggml.pre.
  static std::unique_ptr<Tokenizer> create(Vocab vocab);

  // addSpecial: prepend BOS (append EOS) when the vocabulary says so (llama.cpp's add_special).
  // parseSpecial: text matching a control/user-defined token's text becomes that token
  // (llama.cpp's parse_special) instead of being tokenized as plain text.
  virtual std::vector<TokenId> encode(std::string_view text, bool addSpecial,
                                      bool parseSpecial) const = 0;

  // The bytes of one token (byte tokens decoded, gpt2 byte-level mapping undone); control tokens
  // give "" unless renderSpecial.
  virtual std::string tokenBytes(TokenId id, bool renderSpecial = false) const = 0;

  std::string decode(const std::vector<TokenId>& ids, bool renderSpecial = false) const;

  const Vocab& vocab() const { return m_vocab; }
  int32_t size() const { return static_cast<int32_t>(m_vocab.tokens.size()); }
  bool isEndOfGeneration(TokenId id) const;  // EOS, EOT, or another end-of-turn control token

 protected:
  explicit Tokenizer(Vocab vocab);
  Vocab m_vocab;
};

// Streams token bytes out as complete UTF-8 only: a multi-byte character split across tokens is
// held back until it is whole, so a streaming callback never sees half a character.
class Utf8StreamDecoder {
 public:
  // Append bytes; returns the longest prefix of pending bytes that is complete UTF-8.
  std::string push(std::string_view bytes);
  // End of stream: whatever is left (invalid tails become U+FFFD).
  std::string flush();

 private:
  std::string m_pending;
};

}  // namespace shoal::model
