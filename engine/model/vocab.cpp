#include "engine/model/vocab.h"

#include <string>
#include <string_view>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/pretokenizer.h"

namespace shoal::model {

namespace {

// GGUF tokenizer keys (gguf-py constants.py, Keys.Tokenizer).
constexpr std::string_view kModelKey = "tokenizer.ggml.model";
constexpr std::string_view kPreKey = "tokenizer.ggml.pre";
constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kScoresKey = "tokenizer.ggml.scores";
constexpr std::string_view kTokenTypeKey = "tokenizer.ggml.token_type";
constexpr std::string_view kMergesKey = "tokenizer.ggml.merges";
constexpr std::string_view kAddBosKey = "tokenizer.ggml.add_bos_token";
constexpr std::string_view kAddEosKey = "tokenizer.ggml.add_eos_token";
constexpr std::string_view kAddSpacePrefixKey = "tokenizer.ggml.add_space_prefix";
constexpr std::string_view kChatTemplateKey = "tokenizer.chat_template";

std::string where(const gguf::File& file, std::string_view key) {
  return file.displayName() + ": " + std::string(key);
}

const gguf::Array& requireArray(const gguf::File& file, std::string_view key) {
  const gguf::Value* value = file.find(key);
  if (value == nullptr) throw Error(where(file, key) + ": missing");
  const gguf::Array* array = value->asArray();
  if (array == nullptr) {
    throw Error(where(file, key) + ": expected an array, got " +
                std::string(gguf::valueTypeName(value->type)));
  }
  return *array;
}

std::vector<std::string> readStrings(const gguf::File& file, std::string_view key) {
  const gguf::Array& array = requireArray(file, key);
  std::vector<std::string> out;
  out.reserve(array.items.size());
  for (size_t i = 0; i < array.items.size(); ++i) {
    const std::string* s = array.items[i].asString();
    if (s == nullptr) {
      throw Error(where(file, key) + ": element " + std::to_string(i) + " is " +
                  std::string(gguf::valueTypeName(array.items[i].type)) + ", expected string");
    }
    out.push_back(*s);
  }
  return out;
}

// An array with at least `count` elements (llama.cpp accepts longer ones and reads the first
// `count`), each of which `convert` accepts.
template <typename T, typename Convert>
std::vector<T> readNumbers(const gguf::File& file, std::string_view key, size_t count,
                           Convert convert) {
  const gguf::Array& array = requireArray(file, key);
  if (array.items.size() < count) {
    throw Error(where(file, key) + ": " + std::to_string(array.items.size()) + " elements for " +
                std::to_string(count) + " tokens");
  }
  std::vector<T> out(count);
  for (size_t i = 0; i < count; ++i) {
    const auto v = convert(array.items[i]);
    if (!v) {
      throw Error(where(file, key) + ": element " + std::to_string(i) + " has type " +
                  std::string(gguf::valueTypeName(array.items[i].type)));
    }
    out[i] = static_cast<T>(*v);
  }
  return out;
}

TokenAttr attrFromType(int64_t type) {
  // Types outside 0..6 are read as Undefined, as llama.cpp does.
  return type >= 0 && type <= 6 ? static_cast<TokenAttr>(type) : TokenAttr::Undefined;
}

// Reads one special-token id key: a value inside the vocabulary replaces `id`, anything else is
// ignored (llama.cpp logs "bad special token" and keeps the default).
void readTokenId(const gguf::File& file, std::string_view key, size_t tokenCount,
                 std::optional<TokenId>& id) {
  const gguf::Value* value = file.find(key);
  if (value == nullptr || value->type == gguf::ValueType::Bool) return;
  const auto v = value->asInt();
  if (v && *v >= 0 && static_cast<uint64_t>(*v) < tokenCount) id = static_cast<TokenId>(*v);
}

}  // namespace

Vocab Vocab::fromGguf(const gguf::File& file) {
  Vocab vocab;
  vocab.model = file.getString(kModelKey);
  vocab.pre = file.getStringOr(kPreKey, "");
  vocab.tokens = readStrings(file, kTokensKey);
  const size_t n = vocab.tokens.size();
  if (n == 0) throw Error(where(file, kTokensKey) + ": no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) {
    throw Error(where(file, kTokensKey) + ": " + std::to_string(n) + " tokens (too many)");
  }

  if (file.find(kScoresKey) != nullptr) {
    vocab.scores = readNumbers<float>(file, kScoresKey, n, [](const gguf::Value& v) {
      return v.type == gguf::ValueType::Bool ? std::nullopt : v.asFloat();
    });
  }
  if (file.find(kTokenTypeKey) != nullptr) {
    const auto types = readNumbers<int64_t>(file, kTokenTypeKey, n, [](const gguf::Value& v) {
      return v.type == gguf::ValueType::Bool ? std::nullopt : v.asInt();
    });
    vocab.attrs.reserve(n);
    for (int64_t t : types) vocab.attrs.push_back(attrFromType(t));
  } else {
    vocab.attrs.assign(n, TokenAttr::Normal);  // llama.cpp's default without token types
  }

  // Defaults per tokenizer model (llama_vocab::impl::load).
  if (vocab.model == "llama") {
    vocab.bos = 1;
    vocab.eos = 2;
    vocab.unk = 0;
    vocab.addBos = true;
    vocab.addSpacePrefix = true;
  } else if (vocab.model == "gpt2") {
    vocab.bos = 11;
    vocab.eos = 11;
    vocab.addBos = preTokenizerAddsBosByDefault(vocab.pre);
    if (file.find(kMergesKey) == nullptr) throw Error(where(file, kMergesKey) + ": missing");
  }
  if (file.find(kMergesKey) != nullptr) vocab.merges = readStrings(file, kMergesKey);
  for (std::optional<TokenId>* id : {&vocab.bos, &vocab.eos, &vocab.unk}) {
    if (*id && static_cast<size_t>(**id) >= n) id->reset();
  }

  readTokenId(file, "tokenizer.ggml.bos_token_id", n, vocab.bos);
  readTokenId(file, "tokenizer.ggml.eos_token_id", n, vocab.eos);
  readTokenId(file, "tokenizer.ggml.eot_token_id", n, vocab.eot);
  readTokenId(file, "tokenizer.ggml.eom_token_id", n, vocab.eom);
  readTokenId(file, "tokenizer.ggml.unknown_token_id", n, vocab.unk);
  readTokenId(file, "tokenizer.ggml.padding_token_id", n, vocab.pad);
  readTokenId(file, "tokenizer.ggml.fim_pre_token_id", n, vocab.fimPre);
  readTokenId(file, "tokenizer.ggml.fim_suf_token_id", n, vocab.fimSuf);
  readTokenId(file, "tokenizer.ggml.fim_mid_token_id", n, vocab.fimMid);
  readTokenId(file, "tokenizer.ggml.fim_pad_token_id", n, vocab.fimPad);
  readTokenId(file, "tokenizer.ggml.fim_rep_token_id", n, vocab.fimRep);
  readTokenId(file, "tokenizer.ggml.fim_sep_token_id", n, vocab.fimSep);
  // Deprecated spellings of the first three FIM ids; llama.cpp reads them after the new ones.
  readTokenId(file, "tokenizer.ggml.prefix_token_id", n, vocab.fimPre);
  readTokenId(file, "tokenizer.ggml.suffix_token_id", n, vocab.fimSuf);
  readTokenId(file, "tokenizer.ggml.middle_token_id", n, vocab.fimMid);

  vocab.addBos = file.getBoolOr(kAddBosKey, vocab.addBos);
  vocab.addEos = file.getBoolOr(kAddEosKey, vocab.addEos);
  vocab.addSpacePrefix = file.getBoolOr(kAddSpacePrefixKey, vocab.addSpacePrefix);
  if (vocab.addBos && !vocab.bos) {
    throw Error(file.displayName() + ": " + std::string(kAddBosKey) +
                " is true, but there is no BOS token");
  }
  if (vocab.addEos && !vocab.eos) {
    throw Error(file.displayName() + ": " + std::string(kAddEosKey) +
                " is true, but there is no EOS token");
  }
  vocab.chatTemplate = file.getStringOr(kChatTemplateKey, "");
  return vocab;
}

}  // namespace shoal::model
