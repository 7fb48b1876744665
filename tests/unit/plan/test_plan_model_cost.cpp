// Model costs from GGUF metadata: the formulas of model_cost.h on hand-built facts, and on the
// default model (SmolLM2-135M: 30 layers, n_embd 576, 9 heads, 3 KV heads, vocab 49152, tied
// embeddings; per-layer figures computed with gguf-py from the file).

#include <QtTest>
#include <cstdlib>
#include <filesystem>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/plan/model_cost.h"

using namespace shoal::plan;

namespace {

ModelFacts twoLayerFacts() {
  ModelFacts f;
  f.arch = "llama";
  f.blockCount = 2;
  f.embeddingLength = 8;
  f.headCount = 2;
  f.headCountKv = 1;
  f.vocabSize = 100;
  // Layer 0: 300 bytes / 400 elements; layer 1: 500 bytes / 400 elements.
  f.tensors = {{"token_embd.weight", 1000, 800, 100}, {"blk.0.attn_q.weight", 100, 64, 8},
               {"blk.0.ffn_up.weight", 200, 336, 42}, {"blk.1.attn_q.weight", 300, 64, 8},
               {"blk.1.ffn_up.weight", 200, 336, 42}, {"output.weight", 700, 800, 100},
               {"output_norm.weight", 32, 8, 1}};
  return f;
}

std::filesystem::path defaultModelPath() {
  if (const char* env = std::getenv("SHOAL_DEFAULT_MODEL"); env && *env) return env;
  return std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace

class PlanModelCostTest : public QObject {
  Q_OBJECT

 private slots:
  void computesEveryCostFromTheFacts() {
    const ModelCost m = modelCostFromFacts(twoLayerFacts(), 10);
    QCOMPARE(m.layers, 2);
    QCOMPARE(m.layerWeightBytes, 400.0);                           // (300 + 500) / 2
    QCOMPARE(m.layerFlopsPerToken, 2.0 * 400 + 4.0 * 2 * 4 * 10);  // weights + attention at C=10
    QCOMPARE(m.kvBytesPerTokenPerLayer, 1.0 * (4 + 4) * 2);  // 1 KV head × (K 4 + V 4) × f16
    QCOMPARE(m.hiddenBytesPerToken, 32.0);                   // 8 × f32
    QCOMPARE(m.embedBytes, 1000.0);
    QCOMPARE(m.headBytes, 732.0);  // output + output_norm
    QCOMPARE(m.headFlopsPerToken, 2.0 * 8 * 100);
  }

  void tiedHeadUsesTheEmbedding() {
    ModelFacts f = twoLayerFacts();
    f.tensors.erase(f.tensors.begin() + 5);  // no output.weight
    f.vocabSize = 0;                         // and no vocab_size: rows of the embedding
    const ModelCost m = modelCostFromFacts(f, 0);
    QCOMPARE(m.headBytes, 1000.0 + 32.0);
    QCOMPARE(m.headFlopsPerToken, 2.0 * 8 * 100);
  }

  void missingLayerIsAnError() {
    ModelFacts f = twoLayerFacts();
    f.blockCount = 3;
    QVERIFY_THROWS_EXCEPTION(shoal::Error, modelCostFromFacts(f, 0));
  }

  void missingEmbeddingIsAnError() {
    ModelFacts f = twoLayerFacts();
    f.tensors.erase(f.tensors.begin());
    try {
      modelCostFromFacts(f, 0);
      QFAIL("expected an error");
    } catch (const shoal::Error& e) {
      QVERIFY2(std::string(e.what()).find("token_embd.weight") != std::string::npos, e.what());
    }
  }

  void defaultModelCosts() {
    if (!std::filesystem::exists(defaultModelPath())) QSKIP("default model not found");
    const shoal::gguf::File file = shoal::gguf::File::open(defaultModelPath());
    const ModelCost m = modelCostFromGguf(file, 0);
    QCOMPARE(m.layers, 30);
    QCOMPARE(m.layerWeightBytes, 66493440.0 / 30);
    QCOMPARE(m.layerFlopsPerToken, 2.0 * 106202880 / 30);
    QCOMPARE(m.kvBytesPerTokenPerLayer, 3.0 * (64 + 64) * 2);
    QCOMPARE(m.hiddenBytesPerToken, 576.0 * 4);
    QCOMPARE(m.embedBytes, 30081024.0);
    QCOMPARE(m.headBytes, 30081024.0 + 2304);
    QCOMPARE(m.headFlopsPerToken, 2.0 * 576 * 49152);
  }
};

QTEST_GUILESS_MAIN(PlanModelCostTest)
#include "test_plan_model_cost.moc"
