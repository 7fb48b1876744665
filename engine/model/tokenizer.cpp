// The tokenizer parts common to every vocabulary type: construction (validation and llama.cpp's
// load-time fix-ups of the vocabulary), the choice of implementation, decoding, and the
// end-of-generation set.

#include "engine/model/tokenizer.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "engine/error.h"
#include "engine/model/tokenizer_bpe.h"
#include "engine/model/tokenizer_spm.h"

namespace shoal::model {

namespace {

// Token texts llama.cpp recognises when the file does not name the token (llama-vocab.cpp,
// llama_vocab::impl::load, "auto-detect special tokens by text"). Each found token is also
// forced to Control.
constexpr std::array<std::string_view, 11> kEotTexts = {
    "<|eot_id|>",        "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>",   "<EOT>",      "_<EOT>",  "[EOT]",         "<｜end▁of▁sentence｜>",
    "<end_of_utterance>"};
constexpr std::array<std::string_view, 1> kEomTexts = {"<|eom_id|>"};
constexpr std::array<std::string_view, 8> kFimPreTexts = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",    "<｜fim▁begin｜>",
    "<PRE>",          "▁<PRE>",       "<|code_prefix|>", "<|prefix|>"};
constexpr std::array<std::string_view, 8> kFimSufTexts = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",    "<｜fim▁hole｜>",
    "<SUF>",          "▁<SUF>",       "<|code_suffix|>", "<|suffix|>"};
constexpr std::array<std::string_view, 8> kFimMidTexts = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>",    "<｜fim▁end｜>",
    "<MID>",          "▁<MID>",       "<|code_middle|>", "<|middle|>"};
constexpr std::array<std::string_view, 5> kFimPadTexts = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                                          "<PAD>", "[PAD]"};
constexpr std::array<std::string_view, 5> kFimRepTexts = {"<|fim_repo|>", "<|repo_name|>",
                                                          "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::array<std::string_view, 1> kFimSepTexts = {"<|file_sep|>"};

// Texts that always end generation (llama.cpp's special_eog_ids list).
constexpr std::array<std::string_view, 22> kEndOfGenerationTexts = {"<|eot_id|>",
                                                                    "<|im_end|>",
                                                                    "<|end|>",
                                                                    "<|return|>",
                                                                    "<|call|>",
                                                                    "<|flush|>",
                                                                    "<|calls|>",
                                                                    "<end_of_turn>",
                                                                    "<|endoftext|>",
                                                                    "</s>",
                                                                    "<|eom_id|>",
                                                                    "<EOT>",
                                                                    "_<EOT>",
                                                                    "[EOT]",
                                                                    "[EOS]",
                                                                    "<|end_of_text|>",
                                                                    "<end_of_utterance>",
                                                                    "<eos>",
                                                                    "<turn|>",
                                                                    "<|tool_response>",
                                                                    "<｜end▁of▁sentence｜>",
                                                                    "[e~["};

// gpt-oss channel markers: llama.cpp always renders them (forced to UserDefined).
constexpr std::array<std::string_view, 4> kAlwaysRenderedTexts = {"<|channel|>", "<|message|>",
                                                                  "<|start|>", "<|constrain|>"};

template <size_t N>
bool isOneOf(std::string_view text, const std::array<std::string_view, N>& list) {
  return std::find(list.begin(), list.end(), text) != list.end();
}

void validate(const Vocab& vocab) {
  const size_t n = vocab.tokens.size();
  if (n == 0) throw Error("vocabulary: no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) throw Error("vocabulary: too many tokens");
  if (vocab.attrs.size() != n) {
    throw Error("vocabulary: " + std::to_string(vocab.attrs.size()) + " token types for " +
                std::to_string(n) + " tokens");
  }
  if (!vocab.scores.empty() && vocab.scores.size() != n) {
    throw Error("vocabulary: " + std::to_string(vocab.scores.size()) + " scores for " +
                std::to_string(n) + " tokens");
  }
  const std::pair<const char*, const std::optional<TokenId>*> ids[] = {
      {"bos", &vocab.bos},        {"eos", &vocab.eos},        {"eot", &vocab.eot},
      {"unk", &vocab.unk},        {"pad", &vocab.pad},        {"eom", &vocab.eom},
      {"fim_pre", &vocab.fimPre}, {"fim_suf", &vocab.fimSuf}, {"fim_mid", &vocab.fimMid},
      {"fim_pad", &vocab.fimPad}, {"fim_rep", &vocab.fimRep}, {"fim_sep", &vocab.fimSep}};
  for (const auto& [name, id] : ids) {
    if (*id && (**id < 0 || static_cast<size_t>(**id) >= n)) {
      throw Error(std::string("vocabulary: ") + name + " token id " + std::to_string(**id) +
                  " outside the vocabulary (" + std::to_string(n) + " tokens)");
    }
  }
  if (vocab.addBos && !vocab.bos) throw Error("vocabulary: add_bos_token is set but no BOS token");
  if (vocab.addEos && !vocab.eos) throw Error("vocabulary: add_eos_token is set but no EOS token");
}

}  // namespace

Tokenizer::Tokenizer(Vocab vocab) : m_vocab(std::move(vocab)) {
  if (m_vocab.attrs.empty()) m_vocab.attrs.assign(m_vocab.tokens.size(), TokenAttr::Normal);
  validate(m_vocab);
  const auto n = static_cast<TokenId>(m_vocab.tokens.size());
  auto& tokens = m_vocab.tokens;
  auto& attrs = m_vocab.attrs;

  // llama.cpp reads token and merge texts as C strings, so each ends at its first NUL byte; a
  // token left empty gets a visible name so that it can never match text.
  for (TokenId id = 0; id < n; ++id) {
    if (const size_t nul = tokens[id].find('\0'); nul != std::string::npos) tokens[id].resize(nul);
    if (tokens[id].empty()) tokens[id] = "[EMPTY_" + std::to_string(id) + "]";
  }
  for (std::string& merge : m_vocab.merges) {
    if (const size_t nul = merge.find('\0'); nul != std::string::npos) merge.resize(nul);
  }

  // Special tokens the file does not name are found by text. llama.cpp walks a hash map, so
  // which of two candidates wins is unspecified there; here it is the lowest id.
  const auto detect = [&](std::optional<TokenId>& slot, auto texts) {
    if (slot) return;
    for (TokenId id = 0; id < n; ++id) {
      if (isOneOf(tokens[id], texts)) {
        slot = id;
        attrs[id] = TokenAttr::Control;
        return;
      }
    }
  };
  detect(m_vocab.eot, kEotTexts);
  detect(m_vocab.eom, kEomTexts);
  detect(m_vocab.fimPre, kFimPreTexts);
  detect(m_vocab.fimSuf, kFimSufTexts);
  detect(m_vocab.fimMid, kFimMidTexts);
  detect(m_vocab.fimPad, kFimPadTexts);
  detect(m_vocab.fimRep, kFimRepTexts);
  detect(m_vocab.fimSep, kFimSepTexts);

  std::vector<TokenId> eog;
  for (const auto& id : {m_vocab.fimPad, m_vocab.fimRep, m_vocab.fimSep}) {
    if (id) eog.push_back(*id);
  }
  for (TokenId id = 0; id < n; ++id) {
    if (isOneOf(tokens[id], kEndOfGenerationTexts)) {
      eog.push_back(id);
      attrs[id] = TokenAttr::Control;
    }
    if (isOneOf(tokens[id], kAlwaysRenderedTexts)) attrs[id] = TokenAttr::UserDefined;
  }
  for (const auto& id : {m_vocab.eos, m_vocab.eot, m_vocab.eom}) {
    if (id) eog.push_back(*id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());

  // gpt-oss (and solar-open) end a message with <|end|> but the turn only with <|return|> or
  // <|call|>: with those present llama.cpp takes <|end|> out again and renders it as text.
  const auto eogWithText = [&](std::string_view text) -> TokenId {
    for (TokenId id : eog) {
      if (tokens[id] == text) return id;
    }
    return -1;
  };
  const bool hasCall = eogWithText("<|call|>") >= 0 || eogWithText("<|calls|>") >= 0;
  const TokenId end = eogWithText("<|end|>");
  if (end >= 0 && hasCall && (eogWithText("<|return|>") >= 0 || eogWithText("<|flush|>") >= 0)) {
    eog.erase(std::find(eog.begin(), eog.end(), end));
    attrs[end] = TokenAttr::UserDefined;
  }
  // Gemma 4 ends turns with <|tool_response> and uses </s> as plain text.
  const TokenId closeS = eogWithText("</s>");
  if (closeS >= 0 && eogWithText("<|tool_response>") >= 0) {
    eog.erase(std::find(eog.begin(), eog.end(), closeS));
    attrs[closeS] = TokenAttr::Normal;
  }
  m_endOfGeneration = std::move(eog);
}

std::unique_ptr<Tokenizer> Tokenizer::create(Vocab vocab) {
  if (vocab.model == "gpt2") return std::make_unique<BpeTokenizer>(std::move(vocab));
  if (vocab.model == "llama") return std::make_unique<SpmTokenizer>(std::move(vocab));
  throw Error("tokenizer.ggml.model \"" + vocab.model +
              "\": tokenizer not supported (supported: \"gpt2\" byte-level BPE, \"llama\" "
              "SentencePiece)");
}

void Tokenizer::checkId(TokenId id) const {
  if (id < 0 || id >= size()) {
    throw Error("token id " + std::to_string(id) + " outside the vocabulary (" +
                std::to_string(size()) + " tokens)");
  }
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool renderSpecial) const {
  std::string text;
  // llama.cpp's detokenize drops one leading space of the first piece when the vocabulary adds
  // a space prefix while encoding, so encode/decode round-trips. Only the very first token
  // counts: after a BOS (which renders empty) the space stays, as there.
  bool removeSpace = m_vocab.addSpacePrefix;
  for (TokenId id : ids) {
    std::string piece = tokenBytes(id, renderSpecial);
    if (removeSpace && !piece.empty() && piece.front() == ' ') piece.erase(0, 1);
    removeSpace = false;
    text += piece;
  }
  return text;
}

bool Tokenizer::isEndOfGeneration(TokenId id) const {
  return std::binary_search(m_endOfGeneration.begin(), m_endOfGeneration.end(), id);
}

}  // namespace shoal::model
