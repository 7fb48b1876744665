#pragma once
// The tokenizer's vocabulary as read from GGUF metadata (tokenizer.ggml.*), independent of the
// file so tokenizers can be built from tests too.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shoal::gguf {
class File;
}

namespace shoal::model {

using TokenId = int32_t;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type / gguf-py TokenType).
enum class TokenAttr : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

struct Vocab {
  std::string model;  // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre;    // tokenizer.ggml.pre: pre-tokenizer name ("smollm", "llama3", "qwen2", ...)
  std::vector<std::string> tokens;
  std::vector<float> scores;        // SentencePiece only (may be empty for gpt2)
  std::vector<TokenAttr> attrs;     // same length as tokens
  std::vector<std::string> merges;  // BPE merges, "left right" in rank order
  std::optional<TokenId> bos, eos, eot, unk, pad;
  // End-of-message and fill-in-the-middle tokens (tokenizer.ggml.eom_token_id, fim_*_token_id).
  // llama.cpp counts eom, fimPad, fimRep and fimSep as end of generation.
  std::optional<TokenId> eom, fimPre, fimSuf, fimMid, fimPad, fimRep, fimSep;
  bool addBos = false;  // tokenizer.ggml.add_bos_token (default depends on model, see fromGguf)
  bool addEos = false;
  bool addSpacePrefix = false;  // tokenizer.ggml.add_space_prefix
  std::string chatTemplate;     // tokenizer.chat_template (Jinja source, may be empty)

  // Read from a GGUF file; validates lengths and ids. Throws shoal::Error.
  // Keys that are absent take llama.cpp's defaults (llama_vocab::impl::load): for "llama"
  // (SentencePiece) bos 1, eos 2, unk 0, add_bos true, add_space_prefix true; for "gpt2" bos and
  // eos 11, add_bos false except for the llama3 family of tokenizer.ggml.pre. A default id outside
  // the vocabulary is dropped; a stored id outside it is ignored (the default stays), as
  // llama.cpp does.
  static Vocab fromGguf(const gguf::File& file);
};

}  // namespace shoal::model
