// Byte-level BPE pieces by hand: where each pre-tokenizer cuts text, how merges apply by rank,
// how special tokens are split out, how unsupported vocabularies are refused, and how
// Vocab::fromGguf reads keys and llama.cpp's defaults.

#include <QtTest>
#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/gguf/gguf_writer.h"
#include "engine/model/pretokenizer.h"
#include "engine/model/tokenizer.h"
#include "engine/model/unicode_utf8.h"

using shoal::gguf::Value;
using shoal::gguf::ValueType;
using shoal::model::PreTokenizer;
using shoal::model::TokenAttr;
using shoal::model::TokenId;
using shoal::model::Tokenizer;
using shoal::model::Vocab;

namespace {

using Pieces = std::vector<std::string>;
using Ids = std::vector<TokenId>;

Pieces split(const char* pre, const std::string& text) {
  const auto cpts = shoal::model::unicode::decodeUtf8Lenient(text);
  Pieces pieces;
  size_t offset = 0;
  for (size_t length : PreTokenizer::forName(pre).split(cpts)) {
    std::string piece;
    for (size_t i = offset; i < offset + length; ++i) {
      shoal::model::unicode::appendUtf8(piece, cpts[i]);
    }
    pieces.push_back(piece);
    offset += length;
  }
  return pieces;
}

// A tiny byte-level vocabulary: a b c, the space letter Ġ (U+0120), some merged tokens, and
// special tokens. Merges are given per test.
Vocab bpeVocab(std::vector<std::string> merges, const char* pre = "gpt-2") {
  Vocab v;
  v.model = "gpt2";
  v.pre = pre;
  const auto add = [&](std::string text, TokenAttr attr = TokenAttr::Normal) {
    v.tokens.push_back(std::move(text));
    v.attrs.push_back(attr);
  };
  add("a");         // 0
  add("b");         // 1
  add("c");         // 2
  add("\xC4\xA0");  // 3  Ġ, the letter for ' '
  add("ab");        // 4
  add("bc");        // 5
  add("abc");       // 6
  add("\xC4\xA0"
      "a");                                 // 7  " a"
  add("<|end|>", TokenAttr::Control);       // 8
  add("<|end|>x", TokenAttr::UserDefined);  // 9
  add("<tool>", TokenAttr::UserDefined);    // 10
  v.merges = std::move(merges);
  v.eos = 8;
  return v;
}

std::vector<uint8_t> ggufBytes(const std::vector<std::pair<std::string, Value>>& keys) {
  shoal::gguf::Writer w;
  for (const auto& [k, v] : keys) w.set(k, v);
  return w.toBytes();
}

Value strings(const std::vector<std::string>& items) {
  std::vector<Value> values;
  for (const auto& s : items) values.push_back(Value::string(s));
  return Value::array(ValueType::String, std::move(values));
}

Value int32s(const std::vector<int32_t>& items) {
  std::vector<Value> values;
  for (int32_t i : items) values.push_back(Value::i32(i));
  return Value::array(ValueType::Int32, std::move(values));
}

Vocab vocabFrom(const std::vector<std::pair<std::string, Value>>& keys) {
  const auto bytes = ggufBytes(keys);
  const auto file = shoal::gguf::File::fromBuffer(bytes);
  return Vocab::fromGguf(file);
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const shoal::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

class TestTokenizerBpe : public QObject {
  Q_OBJECT

 private slots:
  // GPT-2: an optional space joins the run after it; of a whitespace run before a word, all
  // but the last character is a piece; contractions are lower-case only.
  void gpt2Pieces() {
    QCOMPARE(split("gpt-2", "Hello world's 123  x\n"),
             (Pieces{"Hello", " world", "'s", " 123", " ", " x", "\n"}));
    QCOMPARE(split("gpt-2", "I'M"), (Pieces{"I", "'", "M"}));
    QCOMPARE(split("gpt-2", "caf\xC3\xA9!?"), (Pieces{"caf\xC3\xA9", "!?"}));
  }

  // SmolLM: every digit stands alone before the GPT-2 rule runs, so " 12" loses its space.
  void smollmSplitsDigitsFirst() {
    QCOMPARE(split("smollm", "a 12b"), (Pieces{"a", " ", "1", "2", "b"}));
    QCOMPARE(split("smollm", "x\xD9\xA3y"), (Pieces{"x", "\xD9\xA3", "y"}));  // Arabic-Indic 3
  }

  // Llama 3: contractions any case, digits in threes, newlines kept with the whitespace
  // before them, a leading non-letter joins a word.
  void llama3Pieces() {
    QCOMPARE(split("llama3", "I'M 12345 ok\r\n\nx"),
             (Pieces{"I", "'M", " ", "123", "45", " ok", "\r\n\n", "x"}));
    QCOMPARE(split("llama3", "(hello) \n  world"), (Pieces{"(hello", ")", " \n", " ", " world"}));
  }

  void qwen2SplitsDigitsOneByOne() {
    QCOMPARE(split("qwen2", "I'M 12345 ok"),
             (Pieces{"I", "'M", " ", "1", "2", "3", "4", "5", " ok"}));
  }

  // llama.cpp's "default": punctuation runs first, then GPT-2, then number runs, then ASCII
  // digit triples.
  void defaultPieces() {
    QCOMPARE(split("default", "a$+b!!"), (Pieces{"a", "$+", "b", "!!"}));
    QCOMPARE(split("default", "x 12345"), (Pieces{"x", " ", "123", "45"}));
    QCOMPARE(split("", "x 12345"), split("default", "x 12345"));  // missing key = default
  }

  void unsupportedPreTokenizerIsRefusedByName() {
    const std::string message = errorOf([] { Tokenizer::create(bpeVocab({}, "deepseek-llm")); });
    QVERIFY2(message.find("deepseek-llm") != std::string::npos, message.c_str());
    QVERIFY2(message.find("tokenizer.ggml.pre") != std::string::npos, message.c_str());
  }

  void unsupportedModelIsRefusedByName() {
    Vocab v = bpeVocab({});
    v.model = "bert";
    const std::string message = errorOf([&] { Tokenizer::create(v); });
    QVERIFY2(message.find("bert") != std::string::npos, message.c_str());
  }

  // "abc": the pairs a+b (rank 0) and b+c (rank 1); a+b goes first, then ab+c -> abc.
  void lowestRankMergesFirst() {
    const auto tok = Tokenizer::create(bpeVocab({"a b", "b c", "ab c"}));
    QCOMPARE(tok->encode("abc", false, false), (Ids{6}));
  }

  // With b+c ranked first, "a bc" is needed next; without that merge the result stays a, bc.
  void rankOrderChangesTheResult() {
    const auto tok = Tokenizer::create(bpeVocab({"b c", "a b", "ab c"}));
    QCOMPARE(tok->encode("abc", false, false), (Ids{0, 5}));
  }

  // " a" is spelled "Ġa" in the byte alphabet and merges like any text.
  void spaceIsSpelledAsItsByteLetter() {
    const auto tok = Tokenizer::create(bpeVocab({"\xC4\xA0 a"}));
    QCOMPARE(tok->encode(" a", false, false), (Ids{7}));
    QCOMPARE(tok->tokenBytes(7), std::string(" a"));
  }

  // A byte whose letter is no token is dropped (llama.cpp only retries single-byte texts).
  void bytesWithoutATokenAreDropped() {
    const auto tok = Tokenizer::create(bpeVocab({}));
    QCOMPARE(tok->encode("a\xC3\xA9"
                         "b",
                         false, false),
             (Ids{0, 1}));
  }

  // Llama 3 takes a piece that is a token as it is, even where the merges could not build it.
  void llama3IgnoresMergesForWholeTokens() {
    QCOMPARE(Tokenizer::create(bpeVocab({"a b"}, "gpt-2"))->encode("abc", false, false),
             (Ids{4, 2}));
    QCOMPARE(Tokenizer::create(bpeVocab({"a b"}, "llama3"))->encode("abc", false, false), (Ids{6}));
  }

  // Control tokens only with parseSpecial; user-defined ones always; the longest text first.
  void specialTokensAreSplitOutLongestFirst() {
    const auto tok = Tokenizer::create(bpeVocab({}));
    QCOMPARE(tok->encode("a<|end|>b", false, true), (Ids{0, 8, 1}));
    QCOMPARE(tok->encode("a<|end|>xb", false, true), (Ids{0, 9, 1}));
    QCOMPARE(tok->encode("<tool>a", false, false), (Ids{10, 0}));
    const auto plain = tok->encode("<|end|>", false, false);
    QVERIFY(std::find(plain.begin(), plain.end(), TokenId{8}) == plain.end());
  }

  // User-defined tokens render as their text; control tokens only when asked.
  void specialTokenRendering() {
    const auto tok = Tokenizer::create(bpeVocab({}));
    QCOMPARE(tok->tokenBytes(10), std::string("<tool>"));
    QCOMPARE(tok->tokenBytes(8), std::string());
    QCOMPARE(tok->tokenBytes(8, true), std::string("<|end|>"));
    QVERIFY(tok->isEndOfGeneration(8));  // eos, and a text llama.cpp treats as end of turn
  }

  // Invalid UTF-8 is tokenized as U+FFFD (llama.cpp does the same), so decode gives U+FFFD back.
  void invalidUtf8IsReadAsReplacementCharacter() {
    Vocab v = bpeVocab({});
    v.tokens.push_back("\xC3\xAF\xC2\xBF\xC2\xBD");  // U+FFFD's bytes EF BF BD, spelled
    v.attrs.push_back(TokenAttr::Normal);
    v.merges = {"\xC3\xAF \xC2\xBF", "\xC3\xAF\xC2\xBF \xC2\xBD"};
    v.tokens.push_back("\xC3\xAF\xC2\xBF");
    v.attrs.push_back(TokenAttr::Normal);
    const auto tok = Tokenizer::create(v);
    const Ids ids = tok->encode("a\xFF", false, false);
    QCOMPARE(ids, (Ids{0, 11}));
    QCOMPARE(tok->decode(ids), std::string("a\xEF\xBF\xBD"));
  }

  void fromGgufAppliesSentencePieceDefaults() {
    const Vocab v = vocabFrom({{"tokenizer.ggml.model", Value::string("llama")},
                               {"tokenizer.ggml.tokens", strings({"<unk>", "<s>", "</s>", "x"})}});
    QCOMPARE(v.bos, std::optional<TokenId>(1));
    QCOMPARE(v.eos, std::optional<TokenId>(2));
    QCOMPARE(v.unk, std::optional<TokenId>(0));
    QVERIFY(v.addBos);
    QVERIFY(v.addSpacePrefix);
    QCOMPARE(v.attrs, std::vector<TokenAttr>(4, TokenAttr::Normal));
  }

  // gpt2: BOS is added by default only for the llama3 family of pre-tokenizers; the default
  // bos/eos id 11 is dropped when the vocabulary is smaller.
  void fromGgufAppliesBpeDefaults() {
    const auto keys = [](const char* pre) {
      return std::vector<std::pair<std::string, Value>>{
          {"tokenizer.ggml.model", Value::string("gpt2")},
          {"tokenizer.ggml.pre", Value::string(pre)},
          {"tokenizer.ggml.tokens", strings({"a", "b"})},
          {"tokenizer.ggml.merges", strings({"a b"})},
          {"tokenizer.ggml.bos_token_id", Value::u32(0)}};
    };
    QVERIFY(vocabFrom(keys("llama-bpe")).addBos);
    QVERIFY(!vocabFrom(keys("smollm")).addBos);
    const Vocab v = vocabFrom(keys("smollm"));
    QCOMPARE(v.bos, std::optional<TokenId>(0));
    QCOMPARE(v.eos, std::optional<TokenId>());
    QCOMPARE(v.merges, std::vector<std::string>{"a b"});
  }

  void fromGgufIgnoresIdsOutsideTheVocabulary() {
    const Vocab v = vocabFrom({{"tokenizer.ggml.model", Value::string("llama")},
                               {"tokenizer.ggml.tokens", strings({"<unk>", "<s>", "</s>"})},
                               {"tokenizer.ggml.eos_token_id", Value::u32(7)},
                               {"tokenizer.ggml.eot_token_id", Value::u32(1)}});
    QCOMPARE(v.eos, std::optional<TokenId>(2));  // the default stays
    QCOMPARE(v.eot, std::optional<TokenId>(1));
  }

  void fromGgufNamesMissingAndMalformedKeys() {
    std::string m = errorOf([] {
      vocabFrom({{"tokenizer.ggml.model", Value::string("gpt2")},
                 {"tokenizer.ggml.tokens", strings({"a"})}});
    });
    QVERIFY2(m.find("tokenizer.ggml.merges") != std::string::npos, m.c_str());
    m = errorOf([] {
      vocabFrom({{"tokenizer.ggml.model", Value::string("llama")},
                 {"tokenizer.ggml.tokens", strings({"a", "b"})},
                 {"tokenizer.ggml.token_type", int32s({1})}});
    });
    QVERIFY2(m.find("tokenizer.ggml.token_type") != std::string::npos, m.c_str());
    m = errorOf([] { vocabFrom({{"tokenizer.ggml.model", Value::string("llama")}}); });
    QVERIFY2(m.find("tokenizer.ggml.tokens") != std::string::npos, m.c_str());
  }
};

QTEST_APPLESS_MAIN(TestTokenizerBpe)
#include "test_tokenizer_bpe.moc"
