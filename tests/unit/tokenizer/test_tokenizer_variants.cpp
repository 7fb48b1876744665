// Tokenizers the default model does not exercise, against llama.cpp
// (tests/unit/tokenizer/llamacpp_variants.json, written by gen_variants_fixture.py next to it):
//   * the default model's BPE vocabulary under the pre-tokenizers "llama3", "qwen2", "default"
//     and "gpt-2";
//   * a SentencePiece vocabulary stored in the fixture, with and without parse_special.

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/tokenizer.h"

using shoal::model::TokenAttr;
using shoal::model::TokenId;
using shoal::model::Tokenizer;
using shoal::model::Vocab;

namespace {

std::filesystem::path defaultModelPath() {
  const char* env = std::getenv("SHOAL_MODELS_DIR");
  const std::filesystem::path dir = env != nullptr && *env != '\0' ? env : SHOAL_MODELS_DIR;
  return dir / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::filesystem::path fixturePath() {
  return std::filesystem::path(SHOAL_SOURCE_DIR) / "tests/unit/tokenizer/llamacpp_variants.json";
}

QJsonObject loadFixture() {
  std::ifstream in(fixturePath(), std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  QJsonParseError error{};
  const QJsonDocument doc =
      QJsonDocument::fromJson(QByteArray::fromStdString(buffer.str()), &error);
  if (doc.isNull()) {
    throw shoal::Error(fixturePath().string() + ": " + error.errorString().toStdString());
  }
  return doc.object();
}

std::vector<TokenId> toIds(const QJsonValue& value) {
  std::vector<TokenId> ids;
  for (const QJsonValue& id : value.toArray()) ids.push_back(id.toInt());
  return ids;
}

std::string describe(const std::vector<TokenId>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

std::string printable(const std::string& text) {
  std::string s = "\"";
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      s += hex;
    } else {
      s += static_cast<char>(c);
    }
  }
  return s + "\"";
}

// Compares encode() with llama.cpp's ids for every text; prints each mismatch, returns the count.
size_t countMismatches(const Tokenizer& tok, const std::vector<std::string>& texts,
                       const QJsonArray& expected, bool parseSpecial, const char* label) {
  size_t mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto want = toIds(expected.at(static_cast<qsizetype>(i)));
    const auto got = tok.encode(texts[i], false, parseSpecial);
    if (got != want) {
      ++mismatches;
      qWarning("%s: encode(%s): got %s, llama.cpp %s", label, printable(texts[i]).c_str(),
               describe(got).c_str(), describe(want).c_str());
    }
  }
  qInfo("%s: %zu of %zu strings tokenize as llama.cpp does", label, texts.size() - mismatches,
        texts.size());
  return mismatches;
}

// The SentencePiece vocabulary of the fixture, read as Vocab::fromGguf would read its GGUF.
Vocab spmVocab(const QJsonObject& spm) {
  Vocab v;
  v.model = "llama";
  for (const QJsonValue& t : spm.value("tokens").toArray()) {
    v.tokens.push_back(t.toString().toStdString());
  }
  for (const QJsonValue& s : spm.value("scores").toArray()) {
    v.scores.push_back(static_cast<float>(s.toDouble()));
  }
  for (const QJsonValue& t : spm.value("types").toArray()) {
    v.attrs.push_back(static_cast<TokenAttr>(t.toInt()));
  }
  v.bos = 1;
  v.eos = 2;
  v.unk = 0;
  v.addBos = true;
  v.addSpacePrefix = true;
  return v;
}

}  // namespace

class TestTokenizerVariants : public QObject {
  Q_OBJECT

 private:
  QJsonObject m_fixture;
  std::vector<std::string> m_texts;
  std::optional<Vocab> m_modelVocab;

 private slots:
  void initTestCase() {
    m_fixture = loadFixture();
    for (const QJsonValue& t : m_fixture.value("texts").toArray()) {
      m_texts.push_back(t.toString().toStdString());
    }
    QVERIFY(!m_texts.empty());
    if (std::filesystem::exists(defaultModelPath())) {
      m_modelVocab = Vocab::fromGguf(shoal::gguf::File::open(defaultModelPath()));
    }
  }

  void bpePreTokenizerMatchesLlamaCpp_data() {
    QTest::addColumn<QString>("pre");
    for (const char* pre : {"llama3", "qwen2", "default", "gpt-2"}) QTest::newRow(pre) << pre;
  }

  // The default model's vocabulary with another tokenizer.ggml.pre tokenizes like llama.cpp.
  void bpePreTokenizerMatchesLlamaCpp() {
    QFETCH(QString, pre);
    if (!m_modelVocab) {
      QSKIP(("default model not found at " + defaultModelPath().string()).c_str());
    }
    Vocab vocab = *m_modelVocab;
    vocab.pre = pre.toStdString();
    const auto tok = Tokenizer::create(std::move(vocab));
    const QJsonArray expected = m_fixture.value("bpe").toObject().value(pre).toArray();
    QCOMPARE(static_cast<size_t>(expected.size()), m_texts.size());
    QCOMPARE(countMismatches(*tok, m_texts, expected, true, pre.toUtf8().constData()), size_t{0});
  }

  void sentencePieceMatchesLlamaCpp_data() {
    QTest::addColumn<bool>("parseSpecial");
    QTest::newRow("parse_special") << true;
    QTest::newRow("plain") << false;
  }

  void sentencePieceMatchesLlamaCpp() {
    QFETCH(bool, parseSpecial);
    const QJsonObject spm = m_fixture.value("spm").toObject();
    const auto tok = Tokenizer::create(spmVocab(spm));
    const QJsonArray expected =
        spm.value("ids").toObject().value(parseSpecial ? "special" : "plain").toArray();
    QCOMPARE(static_cast<size_t>(expected.size()), m_texts.size());
    QCOMPARE(countMismatches(*tok, m_texts, expected, parseSpecial, "spm"), size_t{0});
  }

  // Decoding drops the space the encoder put in front (llama.cpp's detokenize does the same),
  // so text without special tokens comes back unchanged.
  void sentencePieceDecodeReproducesText() {
    const QJsonObject spm = m_fixture.value("spm").toObject();
    const auto tok = Tokenizer::create(spmVocab(spm));
    const QJsonArray plain = spm.value("ids").toObject().value("plain").toArray();
    size_t mismatches = 0;
    for (size_t i = 0; i < m_texts.size(); ++i) {
      // The user-defined token is split out even without parse_special, and a space prefix
      // follows it; such text does not round-trip, in llama.cpp either.
      if (m_texts[i].find("<|user|>") != std::string::npos) continue;
      const std::string text = tok->decode(toIds(plain.at(static_cast<qsizetype>(i))));
      if (text != m_texts[i]) {
        ++mismatches;
        qWarning("decode: %s, expected %s", printable(text).c_str(), printable(m_texts[i]).c_str());
      }
    }
    QCOMPARE(mismatches, size_t{0});
  }
};

QTEST_APPLESS_MAIN(TestTokenizerVariants)
#include "test_tokenizer_variants.moc"
