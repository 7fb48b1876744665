// RemoteStage's batch interface against a real NodeHost over in-memory connections: several
// batches in flight on one stage, a batch of several sequences (one forward request each),
// micro-batches in flight across a chain of nodes, which rows' logits come back, sampling on the
// node, and truncating with batches in flight. Every result is compared with a local CPU stage
// of the same spec.

#include <QtTest>
#include <filesystem>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/runtime/chain.h"
#include "kernels/cpu/cpu_backend.h"
#include "lan/pool/remote_stage.h"
#include "lan/pool/sha256.h"
#include "tests/integration/lan_node/node_test_support.h"
#include "tests/integration/lan_node/test_node.h"

using namespace shoal;
using namespace shoal::lan;
using test::TestNode;

namespace {

std::filesystem::path defaultModel() {
  return std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

runtime::Batch hiddenBatch(std::span<const float> hidden,
                           std::span<const runtime::Segment> segments) {
  runtime::Batch b;
  b.hidden = hidden;
  b.segments = segments;
  return b;
}

}  // namespace

class TestRemoteStage : public QObject {
  Q_OBJECT

  std::filesystem::path m_dir;
  std::unique_ptr<model::Model> m_model;
  std::string m_sha;
  std::vector<int32_t> m_prompt;
  std::unique_ptr<TestNode> m_node;  // has the model file

  // A stage of layers [first, last) on m_node; `sequences` KV slots.
  std::unique_ptr<RemoteStage> deploy(const std::string& stageId, int32_t first, int32_t last,
                                      bool head = false, int32_t sequences = 1) {
    LoadStageRequest r;
    r.stageId = stageId;
    r.model = {m_sha, "m", m_model->file().fileSize()};
    r.placement = {"ID-alpha", "cpu0", first, last, first == 0, head};
    r.contextLength = 32;
    r.maxSequences = sequences;
    return RemoteStage::deploy(m_node->client(), m_model->file(), r);
  }

  // What the remote stage computes, on this process's CPU.
  std::unique_ptr<runtime::Stage> reference(const runtime::StageSpec& spec) {
    m_cpu = std::make_unique<cpu::CpuBackend>(test::kTestNodeThreads);
    const runtime::ModelSource src{&m_model->file(), &m_model->config(), &m_model->weights()};
    return m_cpu->createStage("cpu0", src, spec);
  }
  std::unique_ptr<cpu::CpuBackend> m_cpu;

  std::vector<float> hidden(float x) const {
    return std::vector<float>(size_t(m_model->config().nEmbd), x);
  }

 private slots:
  void initTestCase() {
    if (!std::filesystem::exists(defaultModel())) QSKIP("default model not downloaded");
    m_dir = std::filesystem::temp_directory_path() /
            ("shoal-remote-stage-" + std::to_string(QCoreApplication::applicationPid()));
    std::filesystem::remove_all(m_dir);
    std::filesystem::create_directories(m_dir / "models");
    std::filesystem::create_symlink(defaultModel(), m_dir / "models" / "m.gguf");
    m_model = model::Model::load(defaultModel());
    m_sha = sha256FileHex(defaultModel());
    m_prompt = m_model->tokenizer().encode("The capital of France is", true, false);
    m_node = std::make_unique<TestNode>("alpha", m_dir / "config", m_dir / "models");
  }
  void cleanupTestCase() {
    m_node.reset();
    std::filesystem::remove_all(m_dir);
  }

  void twoBatchesInFlightOnOneStageCompleteInOrder() {
    auto stage = deploy("inflight", 1, 3);
    const std::vector<float> a = hidden(0.01f), b = hidden(-0.02f);
    const runtime::Segment first{0, 0, 1, runtime::LogitRows::None};
    const runtime::Segment second{0, 1, 1, runtime::LogitRows::None};
    runtime::StageOutput gotA, gotB;
    const auto ticketA = stage->submit(hiddenBatch(a, std::span(&first, 1)), gotA);
    const auto ticketB = stage->submit(hiddenBatch(b, std::span(&second, 1)), gotB);
    QCOMPARE(stage->cachedPositions(0), 2);  // counted as submitted
    stage->wait(ticketA);
    stage->wait(ticketB);

    auto local = reference(stage->spec());
    runtime::StageOutput wantA, wantB;
    test::forwardHidden(*local, a, 0, wantA);
    test::forwardHidden(*local, b, 1, wantB);
    QVERIFY(!wantA.hidden.empty());
    QVERIFY(gotA.hidden == wantA.hidden);
    QVERIFY(gotB.hidden == wantB.hidden);
  }

  void batchOfTwoSequencesIsComputedAsEachAlone() {
    auto stage = deploy("two-seq", 1, 3, false, 2);
    // Sequence 1 gets two rows, sequence 0 one.
    std::vector<float> rows = hidden(0.03f);
    const std::vector<float> more = hidden(-0.01f);
    rows.insert(rows.end(), more.begin(), more.end());
    rows.insert(rows.end(), more.begin(), more.end());
    const runtime::Segment segments[] = {{1, 0, 2, runtime::LogitRows::None},
                                         {0, 0, 1, runtime::LogitRows::None}};
    runtime::StageOutput got;
    stage->forward(hiddenBatch(rows, segments), got);
    QCOMPARE(stage->cachedPositions(1), 2);
    QCOMPARE(stage->cachedPositions(0), 1);

    auto local = reference(stage->spec());
    const size_t nEmbd = size_t(m_model->config().nEmbd);
    runtime::StageOutput seq1, seq0;
    const runtime::Segment alone1{1, 0, 2, runtime::LogitRows::None};
    local->forward(hiddenBatch(std::span(rows).first(2 * nEmbd), std::span(&alone1, 1)), seq1);
    const runtime::Segment alone0{0, 0, 1, runtime::LogitRows::None};
    local->forward(hiddenBatch(std::span(rows).subspan(2 * nEmbd), std::span(&alone0, 1)), seq0);
    std::vector<float> want = seq1.hidden;
    want.insert(want.end(), seq0.hidden.begin(), seq0.hidden.end());
    QCOMPARE(got.hidden.size(), 3 * nEmbd);
    QVERIFY(got.hidden == want);
  }

  void chainOfNodesInMicroBatchesReturnsTheLocalLogits() {
    constexpr int32_t kBatch = 2;  // the prompt is several micro-batches in flight at once
    QVERIFY(m_prompt.size() > size_t(2 * kBatch));
    std::vector<std::unique_ptr<TestNode>> nodes;
    std::vector<std::shared_ptr<NodeClient>> clients;
    for (int k = 0; k < 3; ++k) {
      const std::string name = "n" + std::to_string(k);
      nodes.push_back(
          std::make_unique<TestNode>(name, m_dir / ("chain-" + name), m_dir / "models"));
      clients.push_back(nodes.back()->client());
    }
    auto remote = test::deploySplit(clients, *m_model, m_sha, "chain", 32, {}, kBatch);
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    for (auto& s : remote) stages.push_back(std::move(s));
    runtime::Chain chain(std::move(stages));

    runtime::StageSpec spec;
    spec.lastLayer = m_model->config().nLayer;
    spec.hasEmbedding = spec.hasHead = true;
    spec.contextLength = 32;
    spec.maxBatch = kBatch;
    std::vector<std::unique_ptr<runtime::Stage>> one;
    one.push_back(reference(spec));
    runtime::Chain local(std::move(one));

    // Every row's logits ("logits": "all"), then the last row's of a continuation.
    std::vector<float> got, want;
    chain.forward(0, 0, m_prompt, got, true);
    local.forward(0, 0, m_prompt, want, true);
    QCOMPARE(got.size(), m_prompt.size() * size_t(m_model->config().nVocab));
    QVERIFY(got == want);
    const int32_t next[] = {m_prompt.back()};
    const auto at = static_cast<int32_t>(m_prompt.size());
    chain.forward(0, at, next, got);
    local.forward(0, at, next, want);
    QCOMPARE(got.size(), size_t(m_model->config().nVocab));
    QVERIFY(got == want);
    // Again with only the last row's logits: the earlier micro-batches ask for none.
    chain.truncate(0, 0);
    local.truncate(0, 0);
    chain.forward(0, 0, m_prompt, got);
    local.forward(0, 0, m_prompt, want);
    QCOMPARE(got.size(), size_t(m_model->config().nVocab));
    QVERIFY(got == want);
  }

  void headSamplesOnTheNodeOnlyWhenAsked() {
    auto stage = deploy("whole", 0, m_model->config().nLayer, true);
    const runtime::Segment segment{0, 0, int32_t(m_prompt.size()), runtime::LogitRows::Last};
    runtime::Batch batch;
    batch.tokens = m_prompt;
    batch.segments = std::span(&segment, 1);
    runtime::StageOutput logits;
    stage->forward(batch, logits);
    QCOMPARE(logits.logits.size(), size_t(m_model->config().nVocab));
    QVERIFY(logits.tokens.empty());

    stage->truncate(0, 0);
    const runtime::SampleRequest greedy;
    batch.sample = &greedy;
    runtime::StageOutput sampled;
    stage->forward(batch, sampled);
    QVERIFY(sampled.logits.empty());  // no logits crossed the network
    QCOMPARE(sampled.tokens.size(), size_t(1));
    const auto best = std::max_element(logits.logits.begin(), logits.logits.end());
    QCOMPARE(sampled.tokens[0], int32_t(best - logits.logits.begin()));
  }

  void truncateDropsTheBatchesInFlight() {
    auto stage = deploy("drop", 1, 2);
    const std::vector<float> a = hidden(0.01f);
    const runtime::Segment first{0, 0, 1, runtime::LogitRows::None};
    runtime::StageOutput dropped;
    const auto ticket = stage->submit(hiddenBatch(a, std::span(&first, 1)), dropped);
    stage->truncate(0, 0);
    QCOMPARE(stage->cachedPositions(0), 0);
    QVERIFY_THROWS_EXCEPTION(Error, stage->wait(ticket));
    // The node applied the truncate after the dropped forward: position 0 is free again.
    runtime::StageOutput got, want;
    test::forwardHidden(*stage, a, 0, got);
    auto local = reference(stage->spec());
    test::forwardHidden(*local, a, 0, want);
    QVERIFY(got.hidden == want.hidden);
  }

  void batchThatDoesNotFollowTheCachedPositionsIsRefusedBeforeSending() {
    auto stage = deploy("gap", 1, 2);
    const std::vector<float> a = hidden(0.01f);
    const runtime::Segment gap{0, 3, 1, runtime::LogitRows::None};
    runtime::StageOutput out;
    QVERIFY_THROWS_EXCEPTION(Error, stage->submit(hiddenBatch(a, std::span(&gap, 1)), out));
    QCOMPARE(stage->cachedPositions(0), 0);
  }
};

QTEST_GUILESS_MAIN(TestRemoteStage)
#include "test_remote_stage.moc"
