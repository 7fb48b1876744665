// The tokenizers of real model families, from the vocab-only GGUF files llama.cpp keeps for its
// own tokenizer test (models/ggml-vocab-*.gguf, with .inp test strings and .out token ids that
// the families' Hugging Face tokenizers produced; llama.cpp's test-tokenizer-0 reads them with
// add_special and parse_special off). They come with the pinned llama-cpp-python sdist that
// tools/llamacpp/build_llama_bench.sh and venv.sh unpack (SHOAL_LLAMACPP_DIR, default
// ~/.cache/shoal/llama.cpp-0.3.36); without it the test skips, saying so.
//
// Qwen3 and Qwen2.5 share qwen2's vocabulary, Llama 3 is llama-bpe, Llama 2 and Mistral v1
// llama-spm. A vocabulary Shoal does not support (the pre-tokenizers of qwen35, deepseek-llm,
// deepseek-coder and falcon; gemma-4's tokenizer model) must be refused by name.

#include <QtTest>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/tokenizer.h"

using namespace shoal;

namespace {

std::filesystem::path vocabDir() {
  const char* env = std::getenv("SHOAL_LLAMACPP_DIR");
  const char* home = std::getenv("HOME");
  const std::filesystem::path root = env != nullptr && *env != '\0'
                                         ? std::filesystem::path(env)
                                         : std::filesystem::path(home != nullptr ? home : "/root") /
                                               ".cache/shoal/llama.cpp-0.3.36";
  return root / "src/vendor/llama.cpp/models";
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The .inp file's texts: each followed by "\n__ggml_vocab_test__\n".
std::vector<std::string> texts(const std::filesystem::path& inp) {
  const std::string all = slurp(inp);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  for (size_t at = 0, next; (next = all.find(sep, at)) != std::string::npos;
       at = next + sep.size()) {
    out.push_back(all.substr(at, next - at));
  }
  return out;
}

// The .out file's ids, a line per text.
std::vector<std::vector<model::TokenId>> ids(const std::filesystem::path& out) {
  std::ifstream in(out);
  std::vector<std::vector<model::TokenId>> all;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::vector<model::TokenId> row;
    for (model::TokenId id; words >> id;) row.push_back(id);
    all.push_back(std::move(row));
  }
  return all;
}

}  // namespace

class TestTokenizerVocabFiles : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(vocabDir() / "ggml-vocab-qwen2.gguf")) {
      QSKIP(qPrintable(QString("llama.cpp's vocab files are not at %1 (tools/llamacpp/venv.sh "
                               "unpacks the pinned sdist there)")
                           .arg(QString::fromStdString(vocabDir().string()))));
    }
  }

  void tokensEqualTheFamilysOwnTokenizer_data() {
    QTest::addColumn<QString>("name");
    for (const char* name : {"qwen2", "phi-3", "llama-bpe", "llama-spm", "gpt-2", "starcoder",
                             "command-r", "refact"}) {
      QTest::newRow(name) << QString(name);
    }
  }

  void tokensEqualTheFamilysOwnTokenizer() {
    QFETCH(QString, name);
    const std::filesystem::path base = vocabDir() / ("ggml-vocab-" + name.toStdString() + ".gguf");
    const std::unique_ptr<model::Tokenizer> tok =
        model::Tokenizer::create(model::Vocab::fromGguf(gguf::File::open(base)));
    const std::vector<std::string> in = texts(base.string() + ".inp");
    const std::vector<std::vector<model::TokenId>> want = ids(base.string() + ".out");
    QCOMPARE(in.size(), want.size());
    QVERIFY(in.size() >= 40);
    for (size_t i = 0; i < in.size(); ++i) {
      const std::vector<model::TokenId> got = tok->encode(in[i], false, false);
      QVERIFY2(got == want[i],
               qPrintable(
                   QString("text %1: %2").arg(i).arg(QString::fromStdString(in[i].substr(0, 60)))));
    }
  }

  void unsupportedVocabulariesAreRefusedByName() {
    for (const auto& [name, says] : {std::pair{"qwen35", "\"qwen35\""},
                                     {"gemma-4", "\"gemma4\""},
                                     {"deepseek-llm", "\"deepseek-llm\""},
                                     {"deepseek-coder", "\"deepseek-coder\""},
                                     {"falcon", "\"falcon\""}}) {
      const std::filesystem::path base = vocabDir() / (std::string("ggml-vocab-") + name + ".gguf");
      if (!std::filesystem::exists(base)) continue;
      try {
        model::Tokenizer::create(model::Vocab::fromGguf(gguf::File::open(base)));
        QFAIL(qPrintable(QString("%1 was accepted").arg(name)));
      } catch (const Error& e) {
        QVERIFY2(std::string(e.what()).find(says) != std::string::npos, e.what());
      }
    }
  }
};

QTEST_GUILESS_MAIN(TestTokenizerVocabFiles)
#include "test_tokenizer_vocab_files.moc"
