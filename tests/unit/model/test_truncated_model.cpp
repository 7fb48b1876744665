// writeTruncatedModel (the GPU checks' small real model): the first layers of a model as a model
// of its own — block_count rewritten, every kept tensor and metadata key copied byte for byte,
// the later blocks gone, the result loadable — and refusals for impossible layer counts.

#include <QTemporaryDir>
#include <QtTest>
#include <cstring>
#include <filesystem>
#include <string>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/model.h"
#include "engine/model/synthetic_model.h"
#include "engine/model/truncated_model.h"

using namespace shoal;

class TestTruncatedModel : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir m_dir;
  std::filesystem::path m_source;

  std::filesystem::path path(const char* name) const { return m_dir.filePath(name).toStdString(); }

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    model::SyntheticModelSpec spec;
    spec.nLayer = 4;
    spec.nVocab = 300;
    spec.nEmbd = 64;
    spec.nFf = 128;
    m_source = path("source.gguf");
    model::writeSyntheticModel(spec, m_source);
  }

  void keepsTheFirstLayersByteForByte() {
    const auto out = path("first2.gguf");
    model::writeTruncatedModel(m_source, 2, out);
    const auto src = gguf::File::open(m_source);
    const auto dst = gguf::File::open(out);
    QCOMPARE(dst.getInt("llama.block_count"), int64_t{2});
    QCOMPARE(dst.find("llama.block_count")->type, src.find("llama.block_count")->type);
    QCOMPARE(QString::fromStdString(dst.getString("general.architecture")), QString("llama"));
    QVERIFY(dst.find("tokenizer.ggml.tokens") != nullptr);
    size_t kept = 0;
    for (const gguf::TensorInfo& t : src.tensors()) {
      const gguf::TensorInfo* copy = dst.findTensor(t.name);
      const bool late = t.name.rfind("blk.2.", 0) == 0 || t.name.rfind("blk.3.", 0) == 0;
      QCOMPARE(copy == nullptr, late);
      if (!copy) continue;
      ++kept;
      QCOMPARE(copy->type, t.type);
      QVERIFY(copy->dims == t.dims);
      QCOMPARE(copy->nbytes, t.nbytes);
      QVERIFY2(std::memcmp(copy->data, t.data, t.nbytes) == 0, t.name.c_str());
    }
    QCOMPARE(dst.tensors().size(), kept);
    const auto m = model::Model::load(out);
    QCOMPARE(m->config().nLayer, 2);
  }

  void refusesImpossibleLayerCounts() {
    for (int layers : {0, -1, 5}) {
      bool threw = false;
      try {
        model::writeTruncatedModel(m_source, layers, path("bad.gguf"));
      } catch (const Error& e) {
        threw = true;
        QVERIFY2(std::string(e.what()).find("layers") != std::string::npos, e.what());
      }
      QVERIFY(threw);
      QVERIFY(!std::filesystem::exists(path("bad.gguf")));
    }
  }
};

QTEST_GUILESS_MAIN(TestTruncatedModel)
#include "test_truncated_model.moc"
