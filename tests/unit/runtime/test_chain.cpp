// A chain of stages: joining rules, input validation, and the core promise of the design — a
// model split into several stages computes exactly what one stage computes.

#include <QtTest>
#include <filesystem>
#include <memory>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/runtime/chain.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/runtime/scripted_stage.h"

using namespace shoal;

class TestChain : public QObject {
  Q_OBJECT

  std::unique_ptr<model::Model> m_model;
  std::unique_ptr<cpu::CpuBackend> m_cpu;

  std::unique_ptr<runtime::Stage> cpuStage(int32_t first, int32_t last, int32_t maxBatch = 512,
                                           int32_t sequences = 1) {
    runtime::StageSpec spec;
    spec.maxBatch = maxBatch;
    spec.maxSequences = sequences;
    spec.firstLayer = first;
    spec.lastLayer = last;
    spec.hasEmbedding = first == 0;
    spec.hasHead = last == m_model->config().nLayer;
    spec.contextLength = 64;
    runtime::ModelSource src{&m_model->file(), &m_model->config(), &m_model->weights()};
    return m_cpu->createStage("cpu0", src, spec);
  }

  std::unique_ptr<runtime::Chain> chainOf(std::vector<std::pair<int32_t, int32_t>> ranges,
                                          int32_t maxBatch = 512, int32_t sequences = 1) {
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    for (auto [a, b] : ranges) stages.push_back(cpuStage(a, b, maxBatch, sequences));
    return std::make_unique<runtime::Chain>(std::move(stages));
  }

 private slots:
  void initTestCase() {
    const auto path = std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path)) QSKIP("default model absent (run scripts/setup)");
    m_model = model::Model::load(path);
    m_cpu = std::make_unique<cpu::CpuBackend>(2);
  }

  void stagesThatDoNotJoinAreRefused() {
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(cpuStage(0, 10));
    stages.push_back(cpuStage(12, 30));
    QVERIFY_THROWS_EXCEPTION(Error, runtime::Chain(std::move(stages)));
  }

  void chainWithoutHeadIsRefused() {
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(cpuStage(0, 10));
    QVERIFY_THROWS_EXCEPTION(Error, runtime::Chain(std::move(stages)));
  }

  void threeStagesComputeWhatOneStageComputes() {
    const std::vector<int32_t> prompt =
        m_model->tokenizer().encode("The capital of France is", false, true);
    auto one = chainOf({{0, 30}});
    auto three = chainOf({{0, 7}, {7, 22}, {22, 30}});
    std::vector<float> a, b;
    one->forward(0, 0, prompt, a);
    three->forward(0, 0, prompt, b);
    QCOMPARE(a.size(), b.size());
    QVERIFY(a == b);  // same ops in the same order: bit-identical
    // And one decode step on top of the cached prompt.
    const int32_t next = 7042;
    one->forward(0, static_cast<int32_t>(prompt.size()), std::span(&next, 1), a);
    three->forward(0, static_cast<int32_t>(prompt.size()), std::span(&next, 1), b);
    QVERIFY(a == b);
  }

  // A prompt longer than maxBatch goes through in micro-batches, several stages working on
  // different micro-batches at once: the same result as one stage taking them in turn.
  void microBatchesInFlightAcrossStagesComputeWhatOneStageComputes() {
    const std::vector<int32_t> prompt = m_model->tokenizer().encode(
        "A pipeline of stages keeps every stage busy with a different micro-batch.", false, true);
    QVERIFY(prompt.size() > 12);
    auto one = chainOf({{0, 30}}, 4);
    auto three = chainOf({{0, 7}, {7, 22}, {22, 30}}, 4);
    std::vector<float> a, b;
    one->forward(0, 0, prompt, a, true);
    three->forward(0, 0, prompt, b, true);
    QCOMPARE(a.size(), prompt.size() * static_cast<size_t>(m_model->config().nVocab));
    QVERIFY(a == b);
  }

  // Two sequences in one batch through three stages: what one stage computes.
  void batchOfTwoSequencesThroughThreeStages() {
    auto& tok = m_model->tokenizer();
    const auto p0 = tok.encode("The capital of France is", false, true);
    const auto p1 = tok.encode("Water boils at", false, true);
    std::vector<int32_t> tokens = p0;
    tokens.insert(tokens.end(), p1.begin(), p1.end());
    const runtime::Segment segments[] = {
        {0, 0, static_cast<int32_t>(p0.size()), runtime::LogitRows::Last},
        {1, 0, static_cast<int32_t>(p1.size()), runtime::LogitRows::All}};
    runtime::Batch batch;
    batch.tokens = tokens;
    batch.segments = segments;
    auto one = chainOf({{0, 30}}, 512, 2);
    auto three = chainOf({{0, 7}, {7, 22}, {22, 30}}, 512, 2);
    runtime::StageOutput a, b;
    one->forwardBatch(batch, a);
    three->forwardBatch(batch, b);
    QCOMPARE(a.logits.size(), (1 + p1.size()) * static_cast<size_t>(m_model->config().nVocab));
    QVERIFY(a.logits == b.logits);
    QVERIFY(a.tokens.empty() && b.tokens.empty());
  }

  void tokenOutsideTheVocabularyIsRejected() {
    auto chain = chainOf({{0, 30}});
    const std::vector<int32_t> bad = {1, 999999};
    std::vector<float> logits;
    QVERIFY_THROWS_EXCEPTION(Error, chain->forward(0, 0, bad, logits));
  }

  void positionsBeyondTheCacheAreRejected() {
    auto chain = chainOf({{0, 30}});
    const std::vector<int32_t> tokens = {1, 2};
    std::vector<float> logits;
    QVERIFY_THROWS_EXCEPTION(Error, chain->forward(0, 5, tokens, logits));   // gap: nothing cached
    QVERIFY_THROWS_EXCEPTION(Error, chain->forward(0, 63, tokens, logits));  // past the context
  }

  void truncateRewindsTheCache() {
    auto chain = chainOf({{0, 30}});
    const std::vector<int32_t> tokens = {504, 3575, 282};
    std::vector<float> first, again;
    chain->forward(0, 0, tokens, first);
    chain->truncate(0, 0);
    chain->forward(0, 0, tokens, again);
    QVERIFY(first == again);
    QCOMPARE(chain->stage(0).cachedPositions(0), 3);
  }
};

QTEST_GUILESS_MAIN(TestChain)
#include "test_chain.moc"
