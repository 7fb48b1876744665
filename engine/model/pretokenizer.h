#pragma once
// The pre-tokenizer of a byte-level BPE vocabulary: cuts text into pieces ("words") before BPE
// merges run inside each piece. llama.cpp picks a list of regexes by tokenizer.ggml.pre and
// applies each regex in turn to the pieces the previous one produced (unicode_regex_split in
// llama.cpp's unicode.cpp). Here every regex llama.cpp uses for a supported name is a
// hand-written matcher (SplitRule) with the same results, over llama.cpp's Unicode classes
// (unicode_props.h), so no regex engine runs while tokenizing.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::model {

enum class SplitRule : uint8_t {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)   (GPT-2), as
  // llama.cpp's custom matcher runs it: a lone whitespace before non-space is a piece of its own.
  Gpt2,
  // (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|
  // \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (Llama 3)
  Llama3,
  // The Llama 3 pattern with \p{N} instead of \p{N}{1,3}: digits one by one (Qwen2).
  Qwen2,
  EachNumber,         // \p{N}                     every number codepoint is a piece
  NumberRuns,         // \p{N}+
  PunctuationRuns,    // [\p{P}\$\+<=>\^~\|]+
  AsciiDigitTriples,  // [0-9][0-9][0-9]
};

// What tokenizer.ggml.pre selects, beyond the split rules (llama-vocab.cpp, llama_vocab::load).
struct PreTokenizerSpec {
  std::string name;
  std::vector<SplitRule> rules;  // applied in order
  bool ignoreMerges = false;     // a piece that is itself a token is emitted without merging
};

class PreTokenizer {
 public:
  // The pre-tokenizer for a tokenizer.ggml.pre value ("" means llama.cpp's "default", which it
  // uses when the key is missing). Throws shoal::Error naming an unsupported value.
  static PreTokenizer forName(std::string_view pre);

  // Splits codepoints into pieces; returns their lengths in codepoints, in order (they add up to
  // cpts.size(); none is 0).
  std::vector<size_t> split(std::span<const uint32_t> cpts) const;

  const PreTokenizerSpec& spec() const { return m_spec; }

 private:
  explicit PreTokenizer(PreTokenizerSpec spec) : m_spec(std::move(spec)) {}
  PreTokenizerSpec m_spec;
};

// Whether llama.cpp turns add_bos_token on by default (key absent) for this tokenizer.ggml.pre
// of a "gpt2" vocabulary (llama3 family, tekken, chameleon).
bool preTokenizerAddsBosByDefault(std::string_view pre);

// Names accepted by PreTokenizer::forName, for error messages and documentation.
std::vector<std::string_view> supportedPreTokenizers();

}  // namespace shoal::model
