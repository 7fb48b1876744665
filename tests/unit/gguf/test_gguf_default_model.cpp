// The default model (SmolLM2-135M-Instruct Q4_1, fetched by scripts/setup) opens and reads as
// llama.cpp and gguf-py describe it.

#include <QtTest>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "engine/gguf/dequantize.h"
#include "engine/gguf/gguf_file.h"

using namespace shoal::gguf;

namespace {

// SHOAL_DEFAULT_MODEL overrides the location (e.g. a model kept outside the checkout).
std::filesystem::path defaultModelPath() {
  if (const char* env = std::getenv("SHOAL_DEFAULT_MODEL"); env && *env) return env;
  return std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace

class GgufDefaultModelTest : public QObject {
  Q_OBJECT

 private slots:
  void init() {
    if (!std::filesystem::exists(defaultModelPath())) {
      QSKIP(qPrintable(QString("default model not found at %1 (run scripts/setup, or set "
                               "SHOAL_DEFAULT_MODEL)")
                           .arg(defaultModelPath().c_str())));
    }
  }

  void headerAndMetadataMatchTheModel() {
    const File f = File::open(defaultModelPath());
    QCOMPARE(f.version(), 3u);
    QCOMPARE(f.alignment(), size_t{32});
    QCOMPARE(f.tensors().size(), size_t{272});
    QCOMPARE(f.getString("general.architecture"), std::string("llama"));
    QCOMPARE(f.getInt("llama.block_count"), int64_t{30});
    QCOMPARE(f.getInt("llama.embedding_length"), int64_t{576});
    QCOMPARE(f.getString("tokenizer.ggml.pre"), std::string("smollm"));
    const Array* tokens = f.find("tokenizer.ggml.tokens")->asArray();
    QVERIFY(tokens != nullptr);
    QCOMPARE(tokens->elementType, ValueType::String);
    QCOMPARE(tokens->items.size(), size_t{49152});
  }

  void tokenEmbeddingIsQ8_0() {
    const File f = File::open(defaultModelPath());
    const TensorInfo* t = f.findTensor("token_embd.weight");
    QVERIFY(t != nullptr);
    QCOMPARE(t->type, TensorType::Q8_0);
    QCOMPARE(t->dims, (std::vector<int64_t>{576, 49152}));
    QCOMPARE(t->nbytes, size_t{576 / 32 * 34} * 49152);
  }

  void everyTensorsFirstRowDequantizesToFiniteValues() {
    const File f = File::open(defaultModelPath());
    for (const TensorInfo& t : f.tensors()) {
      QVERIFY2(typeTraits(t.type).dequantizable, t.name.c_str());
      std::vector<float> row(static_cast<size_t>(t.dims[0]));
      dequantizeRow(t.type, t.data, row.data(), t.dims[0]);
      for (float v : row) QVERIFY2(std::isfinite(v), t.name.c_str());
    }
  }
};

QTEST_GUILESS_MAIN(GgufDefaultModelTest)
#include "test_gguf_default_model.moc"
