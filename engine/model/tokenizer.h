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

  // The vocabulary as llama.cpp uses it after loading: eot/eom/FIM ids found by token text when
  // the file does not give them, and end-of-turn-looking tokens forced to Control.
  const Vocab& vocab() const { return m_vocab; }
  int32_t size() const { return static_cast<int32_t>(m_vocab.tokens.size()); }
  bool isEndOfGeneration(TokenId id) const;  // EOS, EOT, or another end-of-turn control token
  // Every id isEndOfGeneration accepts, ascending (llama.cpp's special_eog_ids).
  const std::vector<TokenId>& endOfGenerationIds() const { return m_endOfGeneration; }

 protected:
  // Validates the vocabulary (lengths, ids; throws shoal::Error) and applies llama.cpp's
  // load-time adjustments (see vocab()).
  explicit Tokenizer(Vocab vocab);
  // Throws shoal::Error for an id outside the vocabulary.
  void checkId(TokenId id) const;
  Vocab m_vocab;

 private:
  std::vector<TokenId> m_endOfGeneration;
};

// Streams token bytes out as complete UTF-8 only: a multi-byte character split across tokens is
// held back until it is whole, so a streaming callback never sees half a character.
class Utf8StreamDecoder {
 public:
  // Append bytes; returns the longest prefix of pending bytes that is complete UTF-8. Bytes that
  // can never become valid UTF-8 (a stray continuation byte, 0xC0/0xC1/0xF5..0xFF, an overlong
  // or surrogate form, a sequence cut short by the next lead byte) are returned as U+FFFD right
  // away, one per maximal invalid subpart (the WHATWG/Unicode "substitution of maximal
  // subparts" rule), so the output is always valid UTF-8 and only a possibly-valid incomplete
  // tail is held back.
  std::string push(std::string_view bytes);
  // End of stream: whatever is left (an incomplete tail becomes one U+FFFD).
  std::string flush();

 private:
  std::string m_pending;
};

}  // namespace shoal::model
