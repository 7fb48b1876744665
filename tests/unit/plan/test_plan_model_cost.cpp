// Model costs from GGUF metadata: the formulas of model_cost.h on hand-built facts (layers that
// differ, windows, experts), the KV footprint of a layer program, and the default model
// (SmolLM2-135M: 30 layers, n_embd 576, 9 heads, 3 KV heads, vocab 49152, tied embeddings;
// per-layer figures computed with gguf-py from the file).

#include <QTemporaryDir>
#include <QtTest>
#include <cstdlib>
#include <filesystem>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/architecture.h"
#include "engine/model/kv_footprint.h"
#include "engine/model/kv_ring.h"
#include "engine/model/layer_program.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic_model.h"
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

  void differingLayersKeepTheirOwnFigures() {
    // twoLayerFacts' layers differ in bytes (300 and 500): per-layer figures, means as W, F, K.
    const ModelCost m = modelCostFromFacts(twoLayerFacts(), 10);
    QCOMPARE(m.perLayer.size(), size_t{2});
    QCOMPARE(m.perLayer[0].weightBytes, 300.0);
    QCOMPARE(m.perLayer[1].weightBytes, 500.0);
    QCOMPARE(m.perLayer[1].readBytesPerToken, 500.0);
    QCOMPARE(m.perLayer[1].flopsPerToken, 2.0 * 400 + 4.0 * 2 * 4 * 10);
    QCOMPARE(m.perLayer[1].kvBytesPerPosition, 16.0);
    // Alike layers stay uniform (no per-layer list), as before.
    ModelFacts f = twoLayerFacts();
    f.tensors[3].bytes = 100;
    QVERIFY(modelCostFromFacts(f, 10).perLayer.empty());
  }

  void windowsBoundKvAndAttentionPerLayer() {
    ModelFacts f = twoLayerFacts();
    f.tensors[3].bytes = 100;                       // layers alike in weights
    f.layerKv = {{24, 0}, {24, 4}};                 // layer 1 attends over 4 positions
    const ModelCost m = modelCostFromFacts(f, 10);  // C = 10
    QCOMPARE(m.perLayer.size(), size_t{2});
    QCOMPARE(m.perLayer[0].kvBytesPerPosition, 24.0);
    QCOMPARE(m.perLayer[1].window, int64_t{4});
    QCOMPARE(m.perLayer[0].flopsPerToken, 2.0 * 400 + 4.0 * 2 * 4 * 10);
    QCOMPARE(m.perLayer[1].flopsPerToken, 2.0 * 400 + 4.0 * 2 * 4 * 4);
    f.layerKv.pop_back();
    QVERIFY_THROWS_EXCEPTION(shoal::Error, modelCostFromFacts(f, 10));
  }

  void expertsAreReadInPart() {
    // Layer 0 with 8 experts of which 2 are used: of its 400 expert bytes a token reads 100.
    ModelFacts f = twoLayerFacts();
    f.expertCount = 8;
    f.expertUsedCount = 2;
    f.tensors.push_back({"blk.0.ffn_up_exps.weight", 400, 800, 8});
    const ModelCost m = modelCostFromFacts(f, 0);
    QCOMPARE(m.perLayer.size(), size_t{2});
    QCOMPARE(m.perLayer[0].weightBytes, 300.0 + 400);
    QCOMPARE(m.perLayer[0].readBytesPerToken, 300.0 + 100);
    QCOMPARE(m.perLayer[0].flopsPerToken, 2.0 * (400 + 200));
    QCOMPARE(m.perLayer[1].readBytesPerToken, 500.0);
    f.expertUsedCount = 9;
    QVERIFY_THROWS_EXCEPTION(shoal::Error, modelCostFromFacts(f, 0));
  }

  // The same from a real file: a synthetic qwen3moe (8 experts, 2 per token) as the writer
  // lays it out. Each layer's memory counts every expert; a token reads and computes with the
  // shared tensors and a quarter of the experts.
  void aMixtureOfExpertsFileIsCostedByItsActiveExperts() {
    QTemporaryDir dir;
    shoal::model::SyntheticModelSpec spec;
    spec.architecture = "qwen3moe";
    spec.nLayer = 2;
    spec.nEmbd = 64;
    spec.nFf = 128;
    spec.nVocab = 300;
    spec.nExpert = 8;
    spec.nExpertUsed = 2;
    const std::string path = dir.filePath("moe.gguf").toStdString();
    shoal::model::writeSyntheticModel(spec, path);
    const auto file = shoal::gguf::File::open(path);
    double experts = 0, layer0 = 0;
    for (const auto& t : file.tensors()) {
      if (t.name.rfind("blk.0.", 0) != 0) continue;
      layer0 += static_cast<double>(t.nbytes);
      if (t.name.find("_exps.") != std::string::npos) experts += static_cast<double>(t.nbytes);
    }
    QVERIFY(experts > 0);
    const ModelCost m = modelCostFromGguf(file, 512);
    QCOMPARE(m.perLayer.size(), size_t{2});
    QCOMPARE(m.perLayer[0].weightBytes, layer0);
    QCOMPARE(m.perLayer[0].readBytesPerToken, layer0 - experts + experts * 2 / 8);
  }

  void kvFootprintFollowsTheLayerProgram() {
    // A test architecture whose odd layers attend over a window of 16 positions.
    static const auto program = [](const shoal::model::ModelConfig& c, int32_t layer) {
      shoal::model::LayerProgram p;
      p.kvDim = c.kvDim();
      p.window = layer % 2 ? 16 : 0;
      return p;
    };
    static const shoal::model::Architecture arch{{}, nullptr, {}, +program};
    shoal::model::ModelConfig c;
    c.nLayer = 4;
    c.nHead = 8;
    c.nHeadKv = 2;
    c.headDim = 32;
    c.arch = &arch;
    QCOMPARE(shoal::model::kvBytesPerPosition(c, 0), uint64_t{2 * 2 * 64});
    QCOMPARE(shoal::model::layerKv(c, 1).window, 16);
    // Layers 1-3 for 3 sequences of 100 positions: 100 + 16 + 100 positions of 256 bytes each.
    QCOMPARE(shoal::model::kvCacheBytes(c, 1, 4, 100, 3), uint64_t{256 * 3 * (16 + 100 + 16)});
    QCOMPARE(shoal::model::kvCacheBytes(c, 0, 4, 10, 1), uint64_t{256 * 4 * 10});
    QCOMPARE(shoal::model::kvCacheBytes(c, 2, 2, 100, 3), uint64_t{0});
    QVERIFY_THROWS_EXCEPTION(shoal::Error, shoal::model::kvCacheBytes(c, 0, 5, 10, 1));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, shoal::model::layerKv(c, 4));
  }

  // A sliding-window Attend costs what the stages' ring keeps (kv_ring.h): the context while
  // that is shorter, 1.5 ring periods beyond.
  void kvFootprintCountsSlidingWindowRings() {
    static const auto program = [](const shoal::model::ModelConfig& c, int32_t layer) {
      shoal::model::LayerProgram p;
      p.kvDim = c.kvDim();
      p.ops.push_back(shoal::model::attend({layer % 2 ? 16 : 0, 0.125f}));
      return p;
    };
    static const shoal::model::Architecture arch{{}, nullptr, {}, +program};
    shoal::model::ModelConfig c;
    c.nLayer = 2;
    c.nHead = 8;
    c.nHeadKv = 2;
    c.headDim = 32;
    c.arch = &arch;
    const int32_t ring = shoal::model::kvRingPositions(16);
    QCOMPARE(ring, (16 + 512 + 48) / 2 * 3);  // a period of 576
    QCOMPARE(shoal::model::layerKv(c, 0).window, 0);
    QCOMPARE(shoal::model::layerKv(c, 1).window, ring);
    QCOMPARE(shoal::model::kvCacheBytes(c, 0, 2, 100, 1), uint64_t{256 * (100 + 100)});
    QCOMPARE(shoal::model::kvCacheBytes(c, 0, 2, 4096, 1), uint64_t{256 * (4096 + ring)});
    QCOMPARE(shoal::model::kvRingPeriodFor(16, ring), 0);
    QCOMPARE(shoal::model::kvRingPeriodFor(16, ring + 1), 576);
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
    // The planner's KV is the layer program's, as the nodes size their caches.
    QVERIFY(m.perLayer.empty());
    const auto config = shoal::model::ModelConfig::fromGguf(file);
    QCOMPARE(m.kvBytesPerTokenPerLayer,
             static_cast<double>(shoal::model::kvBytesPerPosition(config, 0)));
    QCOMPARE(shoal::model::kvCacheBytes(config, 0, 30, 1000, 2), uint64_t{30} * 768 * 1000 * 2);
  }
};

QTEST_GUILESS_MAIN(PlanModelCostTest)
#include "test_plan_model_cost.moc"
