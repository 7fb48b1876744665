// Speculative decoding by prompt lookup: the drafter, the policy that sizes drafts, rows computed
// in decode order (Segment::decodeOrder) equal to decoding them one at a time, and the promise
// that matters: greedy replies with speculation are byte for byte the replies without it, on the
// CPU backend with the default model, across a lost stage too.

#include <QtTest>
#include <cstring>
#include <filesystem>
#include <memory>

#include "engine/model/model.h"
#include "engine/model/synthetic_model.h"
#include "engine/model/truncated_model.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/draft_policy.h"
#include "engine/runtime/model_drafter.h"
#include "engine/runtime/prompt_lookup.h"
#include "engine/runtime/session.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/unit/runtime/failing_stage.h"

using namespace shoal;
using model::TokenId;
using test::FailingStage;

namespace {

std::vector<TokenId> drafted(const std::vector<TokenId>& history, runtime::PromptLookupParams p,
                             int32_t limit = 64) {
  std::vector<TokenId> out = {-1};  // must be cleared
  runtime::draftByPromptLookup(history, p, limit, out);
  return out;
}

}  // namespace

class TestSpeculative : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  std::unique_ptr<model::Model> m_model;
  std::unique_ptr<cpu::CpuBackend> m_cpu;

  std::unique_ptr<runtime::Stage> stage(const model::Model& m, int32_t first, int32_t last,
                                        int32_t context = 512) {
    runtime::StageSpec spec;
    spec.firstLayer = first;
    spec.lastLayer = last;
    spec.hasEmbedding = first == 0;
    spec.hasHead = last == m.config().nLayer;
    spec.contextLength = context;
    spec.maxBatch = 64;
    runtime::ModelSource src{&m.file(), &m.config(), &m.weights()};
    return m_cpu->createStage("cpu0", src, spec);
  }

  std::unique_ptr<runtime::Chain> chain(const model::Model& m) {
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(stage(m, 0, m.config().nLayer));
    return std::make_unique<runtime::Chain>(std::move(stages));
  }

  // A prompt that the reply is likely to quote: a list the model is asked to repeat.
  std::vector<TokenId> quotingPrompt() const {
    const std::string text =
        "<|im_start|>user\nRepeat this list exactly:\n- apples, pears and plums\n- red, green "
        "and blue\n- one, two, three, four, five\n- north, south, east and west<|im_end|>\n"
        "<|im_start|>assistant\n- apples, pears and plums\n";
    return m_model->tokenizer().encode(text, false, true);
  }

  static runtime::GenerateOptions greedy(int32_t maxTokens, int32_t maxDraft, bool adaptive) {
    runtime::GenerateOptions o;
    o.maxTokens = maxTokens;
    o.sampler.temperature = 0;
    o.lookup.maxDraft = maxDraft;
    o.lookup.adaptive = adaptive;
    return o;
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    m_cpu = std::make_unique<cpu::CpuBackend>(2);
    const auto path = std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (std::filesystem::exists(path)) m_model = model::Model::load(path);
  }

  void lookupProposesWhatFollowedTheLongestMostRecentMatch() {
    runtime::PromptLookupParams p;
    p.maxDraft = 3;
    p.minNgram = 2;
    p.maxNgram = 3;
    // "7 8" occurs twice before the end; the later occurrence (followed by 30 31 32) wins.
    QCOMPARE(drafted({7, 8, 10, 11, 12, 7, 8, 30, 31, 32, 33, 7, 8}, p),
             (std::vector<TokenId>{30, 31, 32}));
    // The 3-gram "5 7 8" beats the more recent 2-gram "7 8".
    QCOMPARE(drafted({5, 7, 8, 10, 11, 12, 7, 8, 30, 31, 5, 7, 8}, p),
             (std::vector<TokenId>{10, 11, 12}));
    // The draft stops where the history does, and at the caller's limit.
    QCOMPARE(drafted({1, 2, 3, 1, 2}, p), (std::vector<TokenId>{3, 1, 2}));
    QCOMPARE(drafted({7, 8, 10, 11, 12, 7, 8}, p, 1), (std::vector<TokenId>{10}));
  }

  void lookupProposesNothingWithoutAMatch() {
    runtime::PromptLookupParams p;
    QVERIFY(drafted({1, 2, 3, 4, 5, 6}, p).empty());
    QVERIFY(drafted({9}, p).empty());
    QVERIFY(drafted({}, p).empty());
    // A lone repeated token is below minNgram 2.
    QVERIFY(drafted({4, 1, 2, 3, 4}, p).empty());
    p.maxDraft = 0;
    QVERIFY(drafted({1, 2, 3, 1, 2}, p).empty());
  }

  void policyDraftsOnlyWhereItPays() {
    // Cheap rows (a pool's round trip dominates a step) and good acceptance: long drafts.
    runtime::DraftPolicy cheap;
    QCOMPARE(cheap.length(8), 0);  // a plain step is measured first
    cheap.plainStep(0.010);
    for (int i = 0; i < 10; ++i) {
      const int32_t d = cheap.length(8);
      QVERIFY(d > 0);
      cheap.verifyStep(d, d, 0.010 + 0.0002 * d);
    }
    QCOMPARE(cheap.length(8), 8);
    // Rows as expensive as a whole step (attention over a long context) and most drafts
    // rejected: plain steps, with a probe now and then.
    runtime::DraftPolicy dear;
    dear.plainStep(0.010);
    for (int i = 0; i < 10; ++i) dear.verifyStep(4, 0, 0.050);
    QVERIFY(dear.acceptance() < 0.1);
    int drafts = 0;
    for (int i = 0; i < 64; ++i) drafts += dear.length(4) > 0 ? 1 : 0;
    QCOMPARE(drafts, 2);  // one probe every 32 plain steps
    // A draft model's probes draft one token: they cost the draft model's time to make.
    runtime::DraftPolicy model(1);
    model.plainStep(0.010);
    for (int i = 0; i < 10; ++i) model.verifyStep(4, 0, 0.050);
    std::vector<int32_t> probes;
    for (int i = 0; i < 64; ++i) {
      if (const int32_t d = model.length(8); d > 0) probes.push_back(d);
    }
    QCOMPARE(probes, (std::vector<int32_t>{1, 1}));
    // Probes that confirm nothing come ever more rarely: after 32 plain steps, then 64, 128.
    runtime::DraftPolicy futile(1);
    futile.plainStep(0.010);
    for (int i = 0; i < 10; ++i) futile.verifyStep(4, 0, 0.050);
    std::vector<int> at;
    for (int i = 1; i <= 300; ++i) {
      if (futile.length(8) > 0) {
        at.push_back(i);
        futile.verifyStep(1, 0, 0.020);
      }
    }
    QCOMPARE(at, (std::vector<int>{32, 96, 224}));
  }

  // Nine rows of one segment in decode order give, bit for bit, what nine one-row steps give;
  // in batch order they do not (the K-quant tiled and F16 tinyBLAS orders take over), which is
  // why verification asks for decode order.
  void decodeOrderRowsEqualRowsDecodedOneAtATime() {
    model::SyntheticModelSpec spec;
    spec.nLayer = 2;
    spec.nEmbd = 256;
    spec.nHead = 4;
    spec.nHeadKv = 2;
    spec.nFf = 512;
    spec.nVocab = 300;
    spec.weightType = gguf::TensorType::Q4_K;
    spec.embedType = gguf::TensorType::F16;
    const std::string path = m_dir.filePath("orders.gguf").toStdString();
    model::writeSyntheticModel(spec, path);
    const auto m = model::Model::load(path);
    const std::vector<int32_t> prefix = {5, 17, 230, 42};
    const std::vector<int32_t> rows = {9, 88, 120, 7, 7, 250, 31, 64, 2};

    auto forwardAll = [&](runtime::Chain& c, int32_t first, const std::vector<int32_t>& tokens,
                          bool decodeOrder) {
      runtime::StageOutput out;
      c.forward(0, first, tokens, out, runtime::LogitRows::All, nullptr, decodeOrder);
      return out.logits;
    };
    auto oneAtATime = chain(*m);
    auto inDecodeOrder = chain(*m);
    auto inBatchOrder = chain(*m);
    std::vector<float> want;
    forwardAll(*oneAtATime, 0, prefix, false);
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto l = forwardAll(*oneAtATime, int32_t(prefix.size() + i), {rows[i]}, false);
      want.insert(want.end(), l.begin(), l.end());
    }
    forwardAll(*inDecodeOrder, 0, prefix, false);
    forwardAll(*inBatchOrder, 0, prefix, false);
    const auto got = forwardAll(*inDecodeOrder, int32_t(prefix.size()), rows, true);
    const auto batched = forwardAll(*inBatchOrder, int32_t(prefix.size()), rows, false);
    QCOMPARE(got.size(), want.size());
    QVERIFY(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
    QVERIFY(std::memcmp(batched.data(), want.data(), want.size() * sizeof(float)) != 0);
  }

  void greedyReplyIsUnchangedBySpeculation() {
    if (!m_model) QSKIP("default model absent (run scripts/setup)");
    const auto prompt = quotingPrompt();
    auto plainChain = chain(*m_model);
    runtime::Session plain(*plainChain, m_model->tokenizer());
    const auto want = plain.generate(prompt, greedy(96, 0, true));
    QCOMPARE(want.draftedTokens, 0);
    for (const bool adaptive : {false, true}) {
      auto c = chain(*m_model);
      runtime::Session s(*c, m_model->tokenizer());
      const auto got = s.generate(prompt, greedy(96, 8, adaptive));
      QCOMPARE(got.tokens, want.tokens);
      QCOMPARE(got.text, want.text);
      QCOMPARE(got.finish, want.finish);
      if (!adaptive) {
        // Drafts were verified, and some were right (the reply quotes its prompt).
        QVERIFY(got.verifySteps > 0);
        QVERIFY2(got.acceptedTokens > 0, qPrintable(QString::fromStdString(got.text)));
        QVERIFY(got.acceptedTokens <= got.draftedTokens);
      }
      // A follow-up turn on the same session, after a reply whose rejected drafts were left in
      // the cache, reuses the prefix and still matches.
      auto next = prompt;
      next.insert(next.end(), want.tokens.begin(), want.tokens.end());
      const auto more = m_model->tokenizer().encode("\n- again", false, true);
      next.insert(next.end(), more.begin(), more.end());
      const auto got2 = s.generate(next, greedy(32, 8, adaptive));
      const auto want2 = plain.generate(next, greedy(32, 0, true));
      QCOMPARE(got2.tokens, want2.tokens);
    }
  }

  // A draft model proposes where prompt lookup has nothing: the reply is the plain one token for
  // token, whether the draft model is the model itself (every draft confirmed: the verifying rows
  // in decode order give the draft model's own decode bits) or a weaker one with the same
  // vocabulary (the default model cut to its first 12 layers: some drafts rejected).
  void greedyReplyIsUnchangedByADraftModel() {
    if (!m_model) QSKIP("default model absent (run scripts/setup)");
    const auto prompt = m_model->tokenizer().encode(
        "<|im_start|>user\nWrite two sentences about a lighthouse keeper.<|im_end|>\n"
        "<|im_start|>assistant\n",
        false, true);
    auto plainChain = chain(*m_model);
    runtime::Session plain(*plainChain, m_model->tokenizer());
    const auto want = plain.generate(prompt, greedy(48, 0, true));

    const auto truncatedPath = std::filesystem::path(m_dir.path().toStdString()) / "draft12.gguf";
    model::writeTruncatedModel(m_model->path(), 12, truncatedPath);
    const auto truncated = model::Model::load(truncatedPath);
    QCOMPARE(runtime::draftVocabularyMismatch(m_model->tokenizer(), truncated->tokenizer()),
             std::string());
    for (const model::Model* draftModel : {m_model.get(), truncated.get()}) {
      auto draftChain = chain(*draftModel);
      runtime::ModelDrafter drafter(*draftChain);
      auto c = chain(*m_model);
      runtime::Session s(*c, m_model->tokenizer());
      s.setDrafter(&drafter);
      const auto got = s.generate(prompt, greedy(48, 4, false));
      QCOMPARE(got.tokens, want.tokens);
      QVERIFY(got.modelDraftedTokens > 0);
      QCOMPARE(got.modelDraftedTokens, static_cast<int32_t>(drafter.draftedTokens()));
      if (draftModel == m_model.get()) {
        QCOMPARE(got.modelAcceptedTokens, got.modelDraftedTokens);
      } else {
        QVERIFY(got.modelAcceptedTokens < got.modelDraftedTokens);
      }
      // The next turn rolls the draft model back to what it shares with the new history.
      auto next = prompt;
      next.insert(next.end(), want.tokens.begin(), want.tokens.end());
      const auto more = m_model->tokenizer().encode("\nAnd one more.", false, true);
      next.insert(next.end(), more.begin(), more.end());
      QCOMPARE(s.generate(next, greedy(24, 4, false)).tokens,
               plain.generate(next, greedy(24, 0, true)).tokens);
    }
  }

  void draftModelNeedsTheSameVocabulary() {
    if (!m_model) QSKIP("default model absent (run scripts/setup)");
    model::SyntheticModelSpec spec;
    spec.nLayer = 1;
    spec.nEmbd = 64;
    spec.nHead = 2;
    spec.nHeadKv = 2;
    spec.nFf = 128;
    spec.nVocab = 300;
    const auto path = std::filesystem::path(m_dir.path().toStdString()) / "other-vocab.gguf";
    model::writeSyntheticModel(spec, path);
    const auto other = model::Model::load(path);
    QVERIFY(!runtime::draftVocabularyMismatch(m_model->tokenizer(), other->tokenizer()).empty());
  }

  // Sampled replies speculate too (the rejection rule's distribution is tested in test_sampler):
  // drafts are verified and accepted, and a seed still fixes the reply.
  void sampledReplySpeculatesAndASeedFixesIt() {
    if (!m_model) QSKIP("default model absent (run scripts/setup)");
    auto options = greedy(64, 8, false);
    options.sampler.temperature = 0.3f;
    options.sampler.seed = 7;
    std::vector<runtime::GenerateResult> runs;
    for (int i = 0; i < 2; ++i) {
      auto c = chain(*m_model);
      runtime::Session s(*c, m_model->tokenizer());
      runs.push_back(s.generate(quotingPrompt(), options));
    }
    QVERIFY(runs[0].verifySteps > 0);
    QVERIFY2(runs[0].acceptedTokens > 0, qPrintable(QString::fromStdString(runs[0].text)));
    QCOMPARE(runs[1].tokens, runs[0].tokens);
  }

  void greedyReplyIsUnchangedAcrossALostStage() {
    if (!m_model) QSKIP("default model absent (run scripts/setup)");
    const auto prompt = quotingPrompt();
    auto plainChain = chain(*m_model);
    runtime::Session plain(*plainChain, m_model->tokenizer());
    const auto want = plain.generate(prompt, greedy(48, 0, true));

    const int32_t layers = m_model->config().nLayer;
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(stage(*m_model, 0, 15));
    stages.push_back(std::make_unique<FailingStage>(stage(*m_model, 15, layers), 6));
    runtime::Chain c(std::move(stages));
    int recoveries = 0;
    runtime::Session s(c, m_model->tokenizer(), 0, [&](const std::exception&, size_t) {
      ++recoveries;
      c.truncate(0, 0);
      return true;
    });
    const auto got = s.generate(prompt, greedy(48, 8, false));
    QCOMPARE(recoveries, 1);
    QCOMPARE(got.recoveries, 1);
    QVERIFY(got.verifySteps > 0);
    QCOMPARE(got.tokens, want.tokens);
  }
};

QTEST_GUILESS_MAIN(TestSpeculative)
#include "test_speculative.moc"
