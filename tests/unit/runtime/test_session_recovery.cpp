// The one generation loop over a multi-stage chain: micro-batches in flight across stages give
// the same result as one batch, a remote-style head that samples is used as is, and a stage that
// fails mid-reply is recovered from (the chain repaired, the history replayed in the same steps)
// with the reply unchanged.
//
// The stages form a toy model whose next token depends on every cached token and its position,
// so a wrong replay (a position skipped, a cache not rebuilt) changes the reply.

#include <QtTest>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/tokenizer.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/session.h"
#include "engine/runtime/stage_sequences.h"

using namespace shoal;

namespace {

constexpr int32_t kEmbd = 2;

// Stage 0: token id -> hidden {id, position}.
class EmbedStage final : public runtime::LocalStage {
 public:
  EmbedStage(int32_t nVocab, int32_t context, int32_t lastLayer)
      : m_spec{0, lastLayer, true, false, context, 1, 4},
        m_book("embed stage", m_spec, lastLayer, nVocab, kEmbd) {}
  const runtime::StageSpec& spec() const override { return m_spec; }
  int32_t truncate(int32_t s, int32_t from) override { return m_book.truncate(s, from); }
  int32_t cachedPositions(int32_t s) const override { return m_book.cached(s); }

 protected:
  void run(const runtime::Batch& b, runtime::StageOutput& out) override {
    m_book.check(b);
    out.hidden.clear();
    size_t row = 0;
    for (const runtime::Segment& seg : b.segments) {
      for (int32_t i = 0; i < seg.count; ++i, ++row) {
        out.hidden.push_back(static_cast<float>(b.tokens[row]));
        out.hidden.push_back(static_cast<float>(seg.firstPosition + i));
      }
    }
    m_book.commit(b);
  }

 private:
  runtime::StageSpec m_spec;
  runtime::SequenceBook m_book;
};

// Stage 1 (head): caches every row's id * (position + 1); the next token is that sum modulo the
// vocabulary (a one-hot logit row). Can sample itself, like a remote head, when asked to. Throws
// std::runtime_error at the `failAt`-th submit (counted from 1; 0: never).
class HeadStage final : public runtime::Stage {
 public:
  HeadStage(int32_t nVocab, int32_t context, int32_t firstLayer, int32_t nLayer, bool samples,
            int failAt)
      : m_spec{firstLayer, nLayer, false, true, context, 1, 4},
        m_book("head stage", m_spec, nLayer, nVocab, kEmbd),
        m_nVocab(nVocab),
        m_samples(samples),
        m_failAt(failAt),
        m_cache(static_cast<size_t>(context), 0) {}
  const runtime::StageSpec& spec() const override { return m_spec; }
  Ticket submit(const runtime::Batch& b, runtime::StageOutput& out) override {
    if (++m_submits == m_failAt) throw std::runtime_error("node lost");
    m_book.check(b);
    out.logits.clear();
    out.tokens.clear();
    size_t row = 0;
    for (const runtime::Segment& seg : b.segments) {
      for (int32_t i = 0; i < seg.count; ++i, ++row) {
        const auto id = static_cast<int64_t>(b.hidden[row * kEmbd]);
        const auto pos = static_cast<int64_t>(b.hidden[row * kEmbd + 1]);
        if (pos != seg.firstPosition + i) throw std::logic_error("hidden row of a wrong position");
        m_cache[static_cast<size_t>(pos)] = id * (pos + 1);
        const bool wanted = seg.logits == runtime::LogitRows::All ||
                            (seg.logits == runtime::LogitRows::Last && i + 1 == seg.count);
        if (!wanted) continue;
        int64_t sum = 0;
        for (int64_t p = 0; p <= pos; ++p) sum += m_cache[static_cast<size_t>(p)];
        const int32_t next = static_cast<int32_t>(sum % m_nVocab);
        if (m_samples && b.sample) {
          out.tokens.push_back(next);
        } else {
          std::vector<float> logits(static_cast<size_t>(m_nVocab), 0.f);
          logits[static_cast<size_t>(next)] = 1.f;
          out.logits.insert(out.logits.end(), logits.begin(), logits.end());
        }
      }
    }
    m_book.commit(b);
    return ++m_ticket;
  }
  void wait(Ticket t) override {
    if (t > m_ticket) throw std::logic_error("wait for a batch never submitted");
  }
  int32_t truncate(int32_t s, int32_t from) override { return m_book.truncate(s, from); }
  int32_t cachedPositions(int32_t s) const override { return m_book.cached(s); }
  int submits() const { return m_submits; }

 private:
  runtime::StageSpec m_spec;
  runtime::SequenceBook m_book;
  int32_t m_nVocab;
  bool m_samples;
  int m_failAt;
  int m_submits = 0;
  Ticket m_ticket = 0;
  std::vector<int64_t> m_cache;
};

}  // namespace

class TestSessionRecovery : public QObject {
  Q_OBJECT

  std::unique_ptr<model::Tokenizer> m_tok;
  std::vector<model::TokenId> m_prompt;

  std::vector<std::shared_ptr<runtime::Stage>> stages(bool samples, int failAt) const {
    return {std::make_shared<EmbedStage>(m_tok->size(), 64, 1),
            std::make_shared<HeadStage>(m_tok->size(), 64, 1, 2, samples, failAt)};
  }

  runtime::GenerateResult generate(runtime::Chain& chain, runtime::Session::Recovery recovery) {
    runtime::Session session(chain, *m_tok, 0, std::move(recovery));
    runtime::GenerateOptions o;
    o.maxTokens = 12;
    o.sampler.temperature = 0;
    o.ignoreEndOfGeneration = true;
    return session.generate(m_prompt, o);
  }

 private slots:
  void initTestCase() {
    const std::filesystem::path path =
        std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path)) QSKIP("default model absent (run scripts/setup)");
    const auto file = gguf::File::open(path);
    m_tok = model::Tokenizer::create(model::Vocab::fromGguf(file));
    // Ten tokens: with maxBatch 4 the prompt goes in three micro-batches.
    m_prompt = m_tok->encode("one two three four five six seven eight nine ten", false, false);
    m_prompt.resize(10);
  }

  void headSamplingEqualsLocalSampling() {
    runtime::Chain local(stages(false, 0));
    runtime::Chain remote(stages(true, 0));
    const auto a = generate(local, {});
    const auto b = generate(remote, {});
    QCOMPARE(a.tokens.size(), size_t(12));
    QCOMPARE(a.tokens, b.tokens);
  }

  void microBatchesGiveTheResultOfOneBatch() {
    // The toy model checks positions row by row; a wavefront that mixed micro-batches up would
    // fail its QCOMPAREs or change the sum.
    runtime::Chain chain(stages(false, 0));
    runtime::StageOutput out;
    chain.forward(0, 0, m_prompt, out, runtime::LogitRows::All);
    QCOMPARE(out.logits.size(), m_prompt.size() * size_t(m_tok->size()));
  }

  void aFailedStageIsRecoveredAndTheReplyIsUnchanged() {
    runtime::Chain reference(stages(true, 0));
    const auto expected = generate(reference, {});
    // Fail during the prompt (2nd micro-batch) and during the reply (9th submit).
    for (int failAt : {2, 9}) {
      runtime::Chain chain(stages(true, failAt));
      int recoveries = 0;
      auto recover = [&](const std::exception& e, size_t failedStage) {
        if (std::string(e.what()) != "node lost") return false;
        if (failedStage != 1) return false;
        ++recoveries;
        chain = runtime::Chain(stages(true, 0));  // fresh stages: empty caches
        return true;
      };
      const auto got = generate(chain, recover);
      QCOMPARE(recoveries, 1);
      QCOMPARE(got.recoveries, 1);
      QCOMPARE(got.tokens, expected.tokens);
      QCOMPARE(got.text, expected.text);
    }
  }

  void withoutRecoveryTheErrorEndsGeneration() {
    runtime::Chain chain(stages(true, 3));
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, generate(chain, {}));
    // The session forgot the failed step: the same session generates again (the stage fails
    // only once), reusing exactly what the stages hold.
    runtime::Chain reference(stages(true, 0));
    const auto expected = generate(reference, {});
    runtime::Chain flaky(stages(true, 11));
    runtime::Session session(flaky, *m_tok);
    runtime::GenerateOptions o;
    o.maxTokens = 12;
    o.sampler.temperature = 0;
    o.ignoreEndOfGeneration = true;
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, session.generate(m_prompt, o));
    const auto retried = session.generate(m_prompt, o);
    QCOMPARE(retried.tokens, expected.tokens);
    QVERIFY(retried.reusedTokens > 0);
    runtime::Chain again(stages(true, 3));
    QVERIFY_THROWS_EXCEPTION(std::runtime_error,
                             generate(again, [](const std::exception&, size_t) { return false; }));
  }
};

QTEST_GUILESS_MAIN(TestSessionRecovery)
#include "test_session_recovery.moc"
