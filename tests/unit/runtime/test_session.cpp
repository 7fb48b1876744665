// Generation session: stop strings, end of generation, limits, cancellation, UTF-8-safe
// streaming, KV-cache prefix reuse, recovery after a failed stage and sampling on the head
// stage, driven by a scripted stage and the default model's tokenizer.

#include <QtTest>
#include <atomic>
#include <filesystem>
#include <memory>

#include "engine/error.h"
#include "engine/gguf/gguf_file.h"
#include "engine/model/tokenizer.h"
#include "engine/runtime/chain.h"
#include "engine/runtime/session.h"
#include "tests/unit/runtime/scripted_stage.h"

using namespace shoal;

namespace {

bool isCompleteUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80         ? 1
                       : (c >> 5) == 6  ? 2
                       : (c >> 4) == 14 ? 3
                       : (c >> 3) == 30 ? 4
                                        : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 2) return false;
    }
    i += len;
  }
  return true;
}

}  // namespace

class TestSession : public QObject {
  Q_OBJECT

  std::unique_ptr<model::Tokenizer> m_tok;
  std::vector<model::TokenId> m_prompt;

  // A chain whose single stage answers `reply` after m_prompt.
  std::unique_ptr<runtime::Chain> chainFor(const std::vector<model::TokenId>& reply,
                                           int32_t context = 256,
                                           test::ScriptedStage** stageOut = nullptr) {
    std::vector<int32_t> next(m_prompt.size() + reply.size() + 1, m_tok->vocab().eos.value_or(0));
    for (size_t i = 0; i < reply.size(); ++i) next[m_prompt.size() + i] = reply[i];
    auto stage = std::make_unique<test::ScriptedStage>(m_tok->size(), context, next);
    if (stageOut) *stageOut = stage.get();
    std::vector<std::unique_ptr<runtime::Stage>> stages;
    stages.push_back(std::move(stage));
    return std::make_unique<runtime::Chain>(std::move(stages));
  }

  std::vector<model::TokenId> encode(const std::string& text) const {
    return m_tok->encode(text, false, true);
  }

 private slots:
  // Bursts of decoding ahead grow 2, 4, 8, ... within about kDecodeAheadBurstSeconds, and are
  // fitted to what is left without leaving one token for a step (a round trip) of its own.
  void decodeAheadBurstsGrowAndLeaveNoSingleToken() {
    QCOMPARE(runtime::nextDecodeAheadBurst(0, 0), 2);
    QCOMPARE(runtime::nextDecodeAheadBurst(2, 0.001), 4);
    QCOMPARE(runtime::nextDecodeAheadBurst(16, 0.0625), 4);  // 0.25 s at 62.5 ms a token
    QCOMPARE(runtime::nextDecodeAheadBurst(16, 1.0), 2);     // never below 2
    QCOMPARE(runtime::fitDecodeAheadBurst(4, 5, 32), 5);     // not 4 and then 1
    QCOMPARE(runtime::fitDecodeAheadBurst(4, 9, 32), 4);
    QCOMPARE(runtime::fitDecodeAheadBurst(8, 3, 32), 3);
    QCOMPARE(runtime::fitDecodeAheadBurst(4, 5, 4), 4);  // the most one call may decode holds
    // A 39-token reply at 4 tokens per burst: 2, 4, 4, ... and a last burst of 5, not 4 + 1.
    int32_t left = 39, previous = 0, steps = 0;
    while (left > 0) {
      const int32_t n =
          runtime::fitDecodeAheadBurst(runtime::nextDecodeAheadBurst(previous, 0.0625), left, 32);
      QVERIFY(n >= 2);
      left -= n;
      previous = n;
      ++steps;
    }
    QCOMPARE(steps, 10);
  }

  void initTestCase() {
    const std::filesystem::path path =
        std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path)) QSKIP("default model absent (run scripts/setup)");
    const auto file = gguf::File::open(path);
    m_tok = model::Tokenizer::create(model::Vocab::fromGguf(file));
    m_prompt = encode("Say something:");
  }

  void stopStringEndsTheReplyBeforeIt() {
    auto chain = chainFor(encode(" Hello there. STOP and more text"));
    runtime::Session session(*chain, *m_tok);
    runtime::GenerateOptions o;
    o.sampler.temperature = 0;
    o.stop = {"STOP"};
    std::string streamed;
    const auto r = session.generate(m_prompt, o, [&](std::string_view p) {
      streamed += p;
      return true;
    });
    QCOMPARE(r.finish, runtime::FinishReason::StopString);
    QCOMPARE(QString::fromStdString(r.text), QString(" Hello there. "));
    QCOMPARE(streamed, r.text);
  }

  void stopStringPrefixIsHeldBackThenReleased() {
    // "ST" looks like the start of "STOP" but the reply goes on with "ay": it must be emitted.
    auto chain = chainFor(encode(" STay calm"));
    runtime::Session session(*chain, *m_tok);
    runtime::GenerateOptions o;
    o.sampler.temperature = 0;
    o.stop = {"STOP"};
    o.maxTokens = static_cast<int32_t>(encode(" STay calm").size());
    const auto r = session.generate(m_prompt, o);
    QCOMPARE(QString::fromStdString(r.text), QString(" STay calm"));
    QCOMPARE(r.finish, runtime::FinishReason::Length);
  }

  void endOfGenerationTokenStopsWithoutText() {
    auto reply = encode(" Done.");
    reply.push_back(*m_tok->vocab().eos);
    auto chain = chainFor(reply);
    runtime::Session session(*chain, *m_tok);
    runtime::GenerateOptions o;
    o.sampler.temperature = 0;
    const auto r = session.generate(m_prompt, o);
    QCOMPARE(r.finish, runtime::FinishReason::EndOfGeneration);
    QCOMPARE(QString::fromStdString(r.text), QString(" Done."));
  }

  void maxTokensLimitsTheReply() {
    auto chain = chainFor(encode(" one two three four five six"));
    runtime::Session session(*chain, *m_tok);
    runtime::GenerateOptions o;
    o.sampler.temperature = 0;
    o.maxTokens = 3;
    const auto r = session.generate(m_prompt, o);
    QCOMPARE(r.tokens.size(), size_t(3));
    QCOMPARE(r.finish, runtime::FinishReason::Length);
  }

  void replyStopsWhenTheContextIsFull() {
    const int32_t context = static_cast<int32_t>(m_prompt.size()) + 4;
    auto chain = chainFor(encode(" a b c d e f g h i j k"), context);
    runtime::Session session(*chain, *m_tok);
    runtime::GenerateOptions o;
    o.sampler.temperature = 0;
    o.maxTokens = 100;
    const auto r = session.generate(m_prompt, o);
    QCOMPARE(r.finish, runtime::FinishReason::ContextFull);
    QVERIFY(static_cast<int32_t>(session.cachedTokens().size()) < context);
  }

  void promptLongerThanTheContextIsRefused() {
    auto chain = chainFor({}, static_cast<int32_t>(m_prompt.size()));
    runtime::Session session(*chain, *m_tok);
    bool threw = false;
    try {
      session.generate(m_prompt, runtime::GenerateOptions{});
    } catch (const Error& e) {
      threw = QString(e.what()).contains("does not fit");
    }
    QVERIFY(threw);
  }

  void callbackReturningFalseCancels() {
    auto chain = chainFor(encode(" one two three four"));
    runtime::Session session(*chain, *m_tok);
    runtime::GenerateOptions o;
    o.sampler.temperature = 0;
    int pieces = 0;
    const auto r = session.generate(m_prompt, o, [&](std::string_view) { return ++pieces < 2; });
    QCOMPARE(r.finish, runtime::FinishReason::Cancelled);
    QCOMPARE(pieces, 2);
  }

  void cancelFlagStopsBeforeTheNextToken() {
    auto chain = chainFor(encode(" one two three four"));
    runtime::Session session(*chain, *m_tok);
    std::atomic<bool> cancel{false};
    runtime::GenerateOptions o;
    o.sampler.temperature = 0;
    o.cancel = &cancel;
    const auto r = session.generate(m_prompt, o, [&](std::string_view) {
      cancel = true;
      return true;
    });
    QCOMPARE(r.finish, runtime::FinishReason::Cancelled);
    QCOMPARE(r.tokens.size(), size_t(1));
  }

  void streamingNeverSplitsAUtf8Character() {
    const std::string text = " 😀 ok 你好 🇫🇷";
    const auto reply = encode(text);
    QVERIFY(reply.size() > 6);  // the emoji are several byte-level tokens each
    auto chain = chainFor(reply);
    runtime::Session session(*chain, *m_tok);
    runtime::GenerateOptions o;
    o.sampler.temperature = 0;
    o.maxTokens = static_cast<int32_t>(reply.size());
    std::vector<std::string> pieces;
    const auto r = session.generate(m_prompt, o, [&](std::string_view p) {
      pieces.emplace_back(p);
      return true;
    });
    for (const auto& p : pieces) QVERIFY2(isCompleteUtf8(p), p.c_str());
    QCOMPARE(QString::fromStdString(r.text), QString::fromStdString(text));
  }

  // (test_session_recovery covers recovery across stages; here: the replay's exact steps.)
  void failedStageIsRepairedAndTheHistoryReplayedInTheSameSteps() {
    const auto reply = encode(" one two three four five six");
    runtime::GenerateOptions o;
    o.sampler.temperature = 0;
    o.maxTokens = static_cast<int32_t>(reply.size());
    auto reference = chainFor(reply);
    const auto want = runtime::Session(*reference, *m_tok).generate(m_prompt, o);

    test::ScriptedStage* stage = nullptr;
    auto chain = chainFor(reply, 256, &stage);
    const auto p = static_cast<int32_t>(m_prompt.size());
    stage->failOnceAt(p + 2);  // the third decode step fails
    std::vector<size_t> failed;
    runtime::Session session(*chain, *m_tok, 0, [&](const std::exception&, size_t which) {
      failed.push_back(which);
      stage->truncate(0, 0);  // a replacement stage starts empty
      return true;
    });
    const auto got = session.generate(m_prompt, o);
    QVERIFY(got.tokens == want.tokens);
    QCOMPARE(got.text, want.text);
    QCOMPARE(got.recoveries, 1);
    QVERIFY(failed == std::vector<size_t>{0});
    // Computed: the prompt, two decode steps; then replayed in the same steps, and on.
    const auto& calls = stage->calls();
    QVERIFY(calls.size() >= 7);
    const std::vector<std::pair<int32_t, int32_t>> expected = {
        {0, p}, {p, 1}, {p + 1, 1}, {0, p}, {p, 1}, {p + 1, 1}, {p + 2, 1}};
    for (size_t i = 0; i < expected.size(); ++i) {
      QCOMPARE(calls[i].firstPosition, expected[i].first);
      QCOMPARE(calls[i].count, expected[i].second);
    }
  }

  void headSamplesWithASeedThatFollowsThePosition() {
    const auto reply = encode(" sampled far away");
    test::ScriptedStage* stage = nullptr;
    auto chain = chainFor(reply, 256, &stage);
    stage->sampleWhenAsked(true);
    runtime::Session session(*chain, *m_tok);
    runtime::GenerateOptions o;
    o.sampler.temperature = 0.7f;
    o.sampler.seed = 1000;
    o.maxTokens = static_cast<int32_t>(reply.size());
    const auto r = session.generate(m_prompt, o);
    QVERIFY(r.tokens == reply);
    // Each draw's seed follows the position it samples, so a replay would repeat it.
    for (const auto& call : stage->calls()) {
      QVERIFY(call.sampleRequested);
      QCOMPARE(call.seed, uint64_t{1000} + static_cast<uint64_t>(call.firstPosition + call.count));
    }
  }

  void followUpPromptReusesTheCachedPrefix() {
    const auto reply = encode(" first answer");
    test::ScriptedStage* stage = nullptr;
    auto chain = chainFor(reply, 256, &stage);
    runtime::Session session(*chain, *m_tok);
    runtime::GenerateOptions o;
    o.sampler.temperature = 0;
    o.maxTokens = static_cast<int32_t>(reply.size());
    session.generate(m_prompt, o);
    const size_t cached = session.cachedTokens().size();
    QCOMPARE(cached, m_prompt.size() + reply.size() - 1);  // the last token was never fed

    auto next = session.cachedTokens();
    next.push_back(reply.back());
    const auto more = encode(" and a follow-up");
    next.insert(next.end(), more.begin(), more.end());
    o.maxTokens = 1;
    const auto r = session.generate(next, o);
    QCOMPARE(r.reusedTokens, static_cast<int32_t>(cached));
    // The follow-up forward starts where the cache ended, not at 0.
    bool sawResume = false;
    for (const auto& call : stage->calls())
      sawResume |= call.firstPosition == static_cast<int32_t>(cached);
    QVERIFY(sawResume);
  }
};

QTEST_GUILESS_MAIN(TestSession)
#include "test_session.moc"
