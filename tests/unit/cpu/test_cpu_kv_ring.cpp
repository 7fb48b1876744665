// The CPU stage's sliding-window rings (engine/model/kv_ring.h): a gemma2-shaped model whose
// even layers attend over their last 48 positions (a ring of 576) is run by a stage whose
// context takes the ring (2048) and by one whose context does not (864: the ring would cost as
// much). Across a history that wraps the ring — prompt chunks longer than the ring's
// write chunk, decode steps, rows in decode order, a rewind of a few positions, two sequences
// in one batch — both give the same logits bit for bit. The ring holds less memory; a rewind
// within its slack is kept, one beyond it is refused, and truncate() then starts the sequence
// over; a Session whose next prompt shares only an early prefix with its cache recomputes it and
// replies as a fresh one.

#include <QTemporaryDir>
#include <QtTest>
#include <memory>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/kv_ring.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/synthetic_model.h"
#include "engine/model/tokenizer.h"
#include "engine/model/vocab.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/session.h"
#include "engine/runtime/stage.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_stage.h"
#include "loaded_model.h"

using namespace shoal;

namespace {

constexpr int32_t kWindow = 48;
constexpr int32_t kPeriod = model::kvRingPeriod(kWindow);
constexpr int32_t kRingContext = 2048;
constexpr int32_t kWholeContext = model::kvRingPositions(kWindow);  // the most without a ring
constexpr int32_t kMaxBatch = 300;  // above the ring's 256-row write chunk
static_assert(model::kvRingPeriodFor(kWindow, kRingContext) == kPeriod);
static_assert(model::kvRingPeriodFor(kWindow, kWholeContext) == 0);

using cpu::test::Loaded;

std::unique_ptr<runtime::Stage> stageOf(cpu::CpuBackend& backend, Loaded& m,
                                        int32_t contextLength) {
  runtime::StageSpec s;
  s.lastLayer = m.config.nLayer;
  s.hasEmbedding = s.hasHead = true;
  s.contextLength = contextLength;
  s.maxBatch = kMaxBatch;
  s.maxSequences = 2;
  runtime::ModelSource src{&m.file, &m.config, &m.weights};
  return backend.createStage("cpu0", src, s);
}

std::vector<int32_t> tokensFrom(int32_t seed, int32_t n) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < n; ++i) t.push_back(1 + (seed * 131 + i * 37) % 298);
  return t;
}

// Logits of every row of the batch.
std::vector<float> run(runtime::Stage& stage, const std::vector<runtime::Segment>& segments,
                       const std::vector<int32_t>& tokens) {
  runtime::Batch batch;
  batch.tokens = tokens;
  batch.segments = segments;
  runtime::StageOutput out;
  stage.forward(batch, out);
  return out.logits;
}

std::vector<float> run(runtime::Stage& stage, int32_t sequence, int32_t first,
                       const std::vector<int32_t>& tokens, bool decodeOrder = false) {
  runtime::Segment s{sequence, first, static_cast<int32_t>(tokens.size()), runtime::LogitRows::All,
                     decodeOrder};
  return run(stage, {s}, tokens);
}

}  // namespace

class CpuKvRingTest : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  std::unique_ptr<Loaded> m_model;

  // The same batch on both stages: equal logits.
  void same(runtime::Stage& ring, runtime::Stage& whole,
            const std::vector<runtime::Segment>& segments, const std::vector<int32_t>& tokens) {
    const auto a = run(ring, segments, tokens);
    const auto b = run(whole, segments, tokens);
    QCOMPARE(a.size(), b.size());
    QVERIFY2(cpu::test::firstBitDifference(a.data(), b.data(), b.size()) < 0,
             ("first segment at " + std::to_string(segments.front().firstPosition)).c_str());
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    model::SyntheticModelSpec spec;
    spec.architecture = "gemma2";
    spec.nLayer = 2;  // layer 0 slides over the window, layer 1 attends globally
    spec.nEmbd = 128;
    spec.nHead = 4;
    spec.nHeadKv = 2;
    spec.nFf = 256;
    spec.nVocab = 300;
    spec.nCtx = kRingContext;
    spec.slidingWindow = kWindow;
    spec.tiedOutput = true;
    spec.weightType = gguf::TensorType::Q8_0;
    spec.embedType = gguf::TensorType::Q8_0;
    const std::string path = m_dir.filePath("gemma2-swa.gguf").toStdString();
    model::writeSyntheticModel(spec, path);
    m_model = std::make_unique<Loaded>(path);
  }

  void ringHoldsLessThanTheWholeContext() {
    cpu::CpuBackend backend(2);
    auto ring = stageOf(backend, *m_model, kRingContext);
    const auto& cpu = dynamic_cast<cpu::CpuStage&>(*ring);
    const uint64_t kvDim = static_cast<uint64_t>(m_model->config.kvDim());
    // Per sequence, in halfs: the ring layer's keys (one period) and values (two), the global
    // layer's keys and values (the whole context each).
    const uint64_t halfs = kvDim * (kPeriod + 2 * kPeriod) + kvDim * (2 * kRingContext);
    QCOMPARE(cpu.kvCacheBytes(), 2 * sizeof(uint16_t) * halfs);
  }

  void ringGivesTheWholeContextsLogits() {
    cpu::CpuBackend backend(2);
    auto ring = stageOf(backend, *m_model, kRingContext);
    auto whole = stageOf(backend, *m_model, kWholeContext);
    auto both = [&](int32_t seq, int32_t first, const std::vector<int32_t>& t, bool decode) {
      same(*ring, *whole,
           {{seq, first, static_cast<int32_t>(t.size()), runtime::LogitRows::All, decode}}, t);
    };
    // Prompt chunks of 300 rows (two write chunks each): past the period at 600.
    int32_t pos = 0;
    for (int i = 0; i < 2; ++i, pos += kMaxBatch) both(0, pos, tokensFrom(i, kMaxBatch), false);
    // Decode steps across the ring's second lap.
    for (int i = 0; i < 20; ++i, ++pos) both(0, pos, {static_cast<int32_t>(7 + i)}, false);
    // Verified drafts: five rows in decode order, then a rewind of three (rejected drafts are
    // overwritten without a truncate).
    both(0, pos, tokensFrom(9, 5), true);
    pos += 2;
    both(0, pos, tokensFrom(10, 4), true);
    pos += 4;
    // A second sequence's prompt beside a decode row of the first.
    const std::vector<int32_t> second = tokensFrom(11, 200);
    std::vector<int32_t> batch = {42};
    batch.insert(batch.end(), second.begin(), second.end());
    same(*ring, *whole,
         {{0, pos, 1, runtime::LogitRows::All}, {1, 0, 200, runtime::LogitRows::All}}, batch);
    ++pos;
    // Up to the whole-context stage's end.
    while (pos + 50 <= kWholeContext) {
      both(0, pos, tokensFrom(pos, 50), false);
      pos += 50;
    }
    QVERIFY(pos > kWholeContext - 50);
  }

  void rewindsBeyondTheSlackStartOver() {
    cpu::CpuBackend backend(2);
    auto ring = stageOf(backend, *m_model, kRingContext);
    auto whole = stageOf(backend, *m_model, kWholeContext);
    int32_t pos = 0;
    for (int i = 0; i < 2; ++i, pos += kMaxBatch) {
      run(*ring, 0, pos, tokensFrom(i, kMaxBatch));
      run(*whole, 0, pos, tokensFrom(i, kMaxBatch));
    }
    for (; pos < 800; pos += 100) {
      run(*ring, 0, pos, tokensFrom(pos, 100));
      run(*whole, 0, pos, tokensFrom(pos, 100));
    }
    const int32_t floor = model::kvRingResumeFloor(kPeriod, kWindow, pos);
    QVERIFY(floor > 0 && floor < pos);
    // Resuming below the floor without a truncate is refused, naming why; nothing changes.
    try {
      run(*ring, 0, floor - 1, {5});
      QFAIL("a batch below the ring's floor was accepted");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("sliding-window") != std::string::npos, e.what());
    }
    QCOMPARE(ring->cachedPositions(0), pos);
    // Within the slack the positions are kept, and the rewritten history matches.
    QCOMPARE(ring->truncate(0, floor), floor);
    QCOMPARE(whole->truncate(0, floor), floor);
    same(*ring, *whole, {{0, floor, 10, runtime::LogitRows::All}}, tokensFrom(20, 10));
    // Beyond it the ring keeps nothing (the whole context keeps all): recomputing from 0 gives
    // what the whole-context stage gives.
    QCOMPARE(ring->truncate(0, floor - 200), 0);
    QCOMPARE(ring->cachedPositions(0), 0);
    QCOMPARE(whole->truncate(0, 0), 0);
    same(*ring, *whole, {{0, 0, 120, runtime::LogitRows::All}}, tokensFrom(21, 120));
  }

  void sessionRecomputesWhatTheRingLost() {
    cpu::CpuBackend backend(2);
    const auto tokenizer = model::Tokenizer::create(model::Vocab::fromGguf(m_model->file));
    auto chainOf = [&] {
      std::vector<std::unique_ptr<runtime::Stage>> stages;
      stages.push_back(stageOf(backend, *m_model, kRingContext));
      return std::make_unique<runtime::Chain>(std::move(stages));
    };
    runtime::GenerateOptions options;
    options.maxTokens = 8;
    options.ignoreEndOfGeneration = true;
    auto used = chainOf();
    runtime::Session session(*used, *tokenizer);
    const std::vector<int32_t> first = tokensFrom(30, 700);
    session.generate(first, options);
    // A prompt that shares the first 100 tokens: the ring lost the window before position 100.
    std::vector<int32_t> second(first.begin(), first.begin() + 100);
    for (int32_t t : tokensFrom(31, 50)) second.push_back(t);
    const auto got = session.generate(second, options);
    QCOMPARE(got.reusedTokens, 0);
    auto fresh = chainOf();
    runtime::Session freshSession(*fresh, *tokenizer);
    const auto want = freshSession.generate(second, options);
    QCOMPARE(got.tokens, want.tokens);
    // A prompt that extends the cache reuses it.
    std::vector<int32_t> third = second;
    third.insert(third.end(), got.tokens.begin(), got.tokens.end());
    third.push_back(5);
    QVERIFY(session.generate(third, options).reusedTokens > 100);
  }
};

QTEST_GUILESS_MAIN(CpuKvRingTest)
#include "test_cpu_kv_ring.moc"
