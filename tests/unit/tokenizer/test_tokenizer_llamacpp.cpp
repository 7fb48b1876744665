// The tokenizer of the default model (SmolLM2, byte-level BPE, pre-tokenizer "smollm") against
// llama.cpp: token ids for every string of tests/fixtures/llamacpp_smollm2.json (written by
// tools/llamacpp/gen_fixtures.py with llama-cpp-python), decoding back to the text, and what
// llama.cpp decides at load time (end-of-generation tokens, special-token rendering).

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/tokenizer.h"

using shoal::model::TokenAttr;
using shoal::model::TokenId;
using shoal::model::Tokenizer;
using shoal::model::Vocab;

namespace {

std::filesystem::path modelsDir() {
  const char* env = std::getenv("SHOAL_MODELS_DIR");
  return env != nullptr && *env != '\0' ? env : SHOAL_MODELS_DIR;
}

std::filesystem::path defaultModelPath() { return modelsDir() / "SmolLM2-135M-Instruct.Q4_1.gguf"; }

// SHOAL_LLAMACPP_FIXTURE points at another fixture file of the same format (e.g. one just
// regenerated); by default the committed one.
std::filesystem::path fixturePath() {
  const char* env = std::getenv("SHOAL_LLAMACPP_FIXTURE");
  if (env != nullptr && *env != '\0') return env;
  return std::filesystem::path(SHOAL_FIXTURES_DIR) / "llamacpp_smollm2.json";
}

std::string describe(const std::vector<TokenId>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

// The text as a C++-style literal, so whitespace and control characters show in messages.
std::string printable(const std::string& text) {
  std::string s = "\"";
  for (unsigned char c : text) {
    if (c == '\n') {
      s += "\\n";
    } else if (c == '\t') {
      s += "\\t";
    } else if (c == '\r') {
      s += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      s += hex;
    } else {
      s += static_cast<char>(c);
    }
  }
  return s + "\"";
}

struct TokenizeCase {
  std::string text;
  bool addSpecial = false;
  bool parseSpecial = false;
  std::vector<TokenId> ids;
};

std::vector<TokenizeCase> loadTokenizeCases(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const QByteArray bytes = QByteArray::fromStdString(buffer.str());
  QJsonParseError error{};
  const QJsonDocument doc = QJsonDocument::fromJson(bytes, &error);
  if (doc.isNull()) {
    throw shoal::Error(path.string() + ": " + error.errorString().toStdString());
  }
  std::vector<TokenizeCase> cases;
  for (const QJsonValue& v : doc.object().value("tokenize").toArray()) {
    const QJsonObject o = v.toObject();
    TokenizeCase c;
    c.text = o.value("text").toString().toStdString();
    c.addSpecial = o.value("add_special").toBool();
    c.parseSpecial = o.value("parse_special").toBool();
    for (const QJsonValue& id : o.value("ids").toArray()) c.ids.push_back(id.toInt());
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace

class TestTokenizerLlamaCpp : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<Tokenizer> m_tokenizer;
  std::string m_skipReason;

  // The default model's tokenizer, or nullptr with m_skipReason set.
  const Tokenizer* tokenizer() {
    if (!m_tokenizer && m_skipReason.empty()) {
      const auto path = defaultModelPath();
      if (!std::filesystem::exists(path)) {
        m_skipReason = "default model not found at " + path.string() +
                       " (run scripts/setup or set SHOAL_MODELS_DIR)";
      } else {
        const auto file = shoal::gguf::File::open(path);
        m_tokenizer = Tokenizer::create(Vocab::fromGguf(file));
      }
    }
    return m_tokenizer.get();
  }

 private slots:
  void vocabularyReadsLikeLlamaCpp() {
    const Tokenizer* tok = tokenizer();
    if (tok == nullptr) QSKIP(m_skipReason.c_str());
    const Vocab& v = tok->vocab();
    QCOMPARE(v.model, std::string("gpt2"));
    QCOMPARE(v.pre, std::string("smollm"));
    QCOMPARE(tok->size(), 49152);
    QCOMPARE(v.merges.size(), size_t{48900});
    QCOMPARE(v.bos, std::optional<TokenId>(1));
    QCOMPARE(v.eos, std::optional<TokenId>(2));
    QVERIFY(!v.addBos);  // the file says add_bos_token = false
    QVERIFY(!v.addEos);
    QVERIFY(!v.chatTemplate.empty());
  }

  // What llama-cpp-python 0.3.36 reports for this file: llama_vocab_eot = 0 (<|endoftext|>,
  // found by text), and llama_vocab_is_eog true exactly for 0, 2 (<|im_end|>, the EOS) and 4
  // (<reponame>, taken as the FIM repository token and so as end of generation).
  void endOfGenerationMatchesLlamaCpp() {
    const Tokenizer* tok = tokenizer();
    if (tok == nullptr) QSKIP(m_skipReason.c_str());
    QCOMPARE(tok->vocab().eot, std::optional<TokenId>(0));
    QCOMPARE(tok->endOfGenerationIds(), (std::vector<TokenId>{0, 2, 4}));
    QVERIFY(tok->isEndOfGeneration(2));
    QVERIFY(!tok->isEndOfGeneration(1));
    QVERIFY(!tok->isEndOfGeneration(1000));
  }

  void controlTokensRenderOnlyWhenAsked() {
    const Tokenizer* tok = tokenizer();
    if (tok == nullptr) QSKIP(m_skipReason.c_str());
    QCOMPARE(tok->tokenBytes(2), std::string());
    QCOMPARE(tok->tokenBytes(2, true), std::string("<|im_end|>"));
    QCOMPARE(tok->decode({1, 4093, 2}, true), std::string("<|im_start|>user<|im_end|>"));
    QCOMPARE(tok->decode({1, 4093, 2}, false), std::string("user"));
  }

  void outOfRangeIdIsAnError() {
    const Tokenizer* tok = tokenizer();
    if (tok == nullptr) QSKIP(m_skipReason.c_str());
    QVERIFY_THROWS_EXCEPTION(shoal::Error, tok->tokenBytes(49152));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, tok->tokenBytes(-1));
  }

  // Every "tokenize" entry of the fixture: our ids must equal llama.cpp's. All mismatches are
  // listed before failing.
  void encodeMatchesLlamaCppFixture() {
    const Tokenizer* tok = tokenizer();
    if (tok == nullptr) QSKIP(m_skipReason.c_str());
    const auto path = fixturePath();
    if (!std::filesystem::exists(path)) {
      QSKIP(("llama.cpp fixture " + path.string() +
             " not generated yet (tools/llamacpp/gen_fixtures.py writes it)")
                .c_str());
    }
    const auto cases = loadTokenizeCases(path);
    QVERIFY(!cases.empty());
    size_t mismatches = 0;
    for (const TokenizeCase& c : cases) {
      const auto ids = tok->encode(c.text, c.addSpecial, c.parseSpecial);
      if (ids != c.ids) {
        ++mismatches;
        qWarning("encode(%s, add_special=%d, parse_special=%d): got %s, llama.cpp %s",
                 printable(c.text).c_str(), c.addSpecial, c.parseSpecial, describe(ids).c_str(),
                 describe(c.ids).c_str());
      }
    }
    qInfo("%zu of %zu fixture strings tokenize as llama.cpp does", cases.size() - mismatches,
          cases.size());
    QCOMPARE(mismatches, size_t{0});
  }

  // Decoding llama.cpp's ids gives the text back (every corpus string is valid UTF-8, and this
  // vocabulary's detokenizer does no space clean-up), with special tokens rendered as text.
  void decodeReproducesFixtureText() {
    const Tokenizer* tok = tokenizer();
    if (tok == nullptr) QSKIP(m_skipReason.c_str());
    const auto path = fixturePath();
    if (!std::filesystem::exists(path)) {
      QSKIP(("llama.cpp fixture " + path.string() + " not generated yet").c_str());
    }
    size_t mismatches = 0;
    for (const TokenizeCase& c : loadTokenizeCases(path)) {
      std::vector<TokenId> ids = c.ids;
      // add_special adds BOS/EOS only where the vocabulary asks (not for this model); those
      // tokens are not part of the text.
      if (c.addSpecial && tok->vocab().addBos && !ids.empty()) ids.erase(ids.begin());
      if (c.addSpecial && tok->vocab().addEos && !ids.empty()) ids.pop_back();
      const std::string text = tok->decode(ids, true);
      if (text != c.text) {
        ++mismatches;
        qWarning("decode(%s) = %s, expected %s", describe(ids).c_str(), printable(text).c_str(),
                 printable(c.text).c_str());
      }
    }
    QCOMPARE(mismatches, size_t{0});
  }

  // Text that looks like a control token stays text unless parseSpecial is set.
  void controlTokenTextNeedsParseSpecial() {
    const Tokenizer* tok = tokenizer();
    if (tok == nullptr) QSKIP(m_skipReason.c_str());
    const std::string text = "<|im_start|>user\nHi<|im_end|>\n";
    const auto parsed = tok->encode(text, false, true);
    QCOMPARE(parsed.front(), TokenId{1});
    QVERIFY(std::find(parsed.begin(), parsed.end(), TokenId{2}) != parsed.end());
    const auto plain = tok->encode(text, false, false);
    QVERIFY(std::find(plain.begin(), plain.end(), TokenId{1}) == plain.end());
    QVERIFY(std::find(plain.begin(), plain.end(), TokenId{2}) == plain.end());
    QCOMPARE(tok->decode(plain), text);
  }

  // A tokenizer is shared by threads as a const object: encoding the same text concurrently
  // gives the same ids as encoding it alone.
  void concurrentEncodesAgree() {
    const Tokenizer* tok = tokenizer();
    if (tok == nullptr) QSKIP(m_skipReason.c_str());
    std::string text;
    for (int i = 0; i < 50; ++i)
      text += "Line " + std::to_string(i) + ": caf\xC3\xA9 \xF0\x9F\x98\x80 don't\n";
    const auto expected = tok->encode(text, false, true);
    std::vector<std::vector<TokenId>> results(4);
    std::vector<std::thread> threads;
    for (auto& r : results) {
      threads.emplace_back([&] {
        for (int k = 0; k < 20; ++k) r = tok->encode(text, false, true);
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& r : results) QCOMPARE(r, expected);
  }
};

QTEST_APPLESS_MAIN(TestTokenizerLlamaCpp)
#include "test_tokenizer_llamacpp.moc"
