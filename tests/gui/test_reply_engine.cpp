// ReplyEngine, the part of a reply that the app's two engines (this computer's and the pool's)
// share: what it asks the engine for, what it reports back. A fake engine stands in for the
// chain: it records what it is asked and streams pieces of its own, on its own thread as the real
// ones do; the model is a small synthetic one (tokenizer and chat template are all that is used).

#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "app/gui/reply_engine.h"
#include "app/gui/worker_thread.h"
#include "engine/model/chat_prompt.h"
#include "engine/model/model.h"
#include "engine/model/synthetic_model.h"
#include "engine/runtime/session.h"

using namespace shoal;
using namespace shoal::gui;

namespace {

constexpr int kSignalMs = 30000;

// Set up by the test before a request, read on the engine thread (the queued request orders the
// two); what it records is read by the test after the engine's answer arrived (ordered the same
// way).
class FakeEngine : public ReplyEngine {
 public:
  const model::Model* model = nullptr;
  int32_t contextLength = 512;
  std::vector<std::string> pieces{"Hel", "lo", "!"};
  bool untilStopped = false;  // stream until told to stop
  bool fail = false;          // throw instead of replying
  std::atomic<int> runs{0};
  std::vector<int32_t> prompt;
  runtime::GenerateOptions options;

 protected:
  ReplyTarget replyTarget() const override {
    if (!model) return {nullptr, "nothing to reply with", 0, {}};
    return {model, {}, contextLength, "the test context"};
  }

  runtime::GenerateResult runReply(const std::vector<int32_t>& p, const runtime::GenerateOptions& o,
                                   const std::function<bool(std::string_view)>& onText) override {
    ++runs;
    prompt = p;
    options = o;
    if (fail) throw std::runtime_error("the chain broke");
    runtime::GenerateResult r;
    r.promptTokens = static_cast<int32_t>(p.size());
    r.decodeSeconds = 0.5;
    for (size_t i = 0; untilStopped || i < pieces.size(); ++i) {
      const std::string piece = untilStopped ? "x" : pieces[i];
      if (!onText(piece) || (o.cancel && o.cancel->load())) {
        r.finish = runtime::FinishReason::Cancelled;
        return r;
      }
      r.text += piece;
      r.tokens.push_back(static_cast<int32_t>(i));
      if (untilStopped) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return r;
  }
};

class FakeEngineThread : public WorkerThread<FakeEngine> {
 public:
  FakeEngineThread() : WorkerThread("test-reply-engine") {}
  FakeEngine* engine() const { return worker(); }
};

QString streamedText(const QSignalSpy& spy) {
  QString out;
  for (const QList<QVariant>& args : spy) out += args.at(1).toString();
  return out;
}

}  // namespace

class TestReplyEngine : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  std::unique_ptr<model::Model> m_model;

  // What the engine should have been asked for: the shared context policy over the turns.
  model::ChatPrompt expectedPrompt(const QList<ChatTurn>& turns, int32_t context,
                                   int maxTokens) const {
    std::vector<model::ChatMessage> messages;
    for (const ChatTurn& t : turns) {
      messages.push_back({t.role.toStdString(), t.content.toStdString()});
    }
    return model::buildChatPrompt(m_model->tokenizer(), m_model->chatTemplate(), messages, context,
                                  maxTokens);
  }

 private slots:
  void initTestCase() {
    QVERIFY(m_dir.isValid());
    model::SyntheticModelSpec spec;
    spec.nLayer = 1;
    spec.nEmbd = 64;
    spec.nHead = 2;
    spec.nHeadKv = 2;
    spec.nFf = 128;
    spec.nVocab = 300;
    const std::string path = m_dir.filePath("tiny.gguf").toStdString();
    model::writeSyntheticModel(spec, path);
    m_model = model::Model::load(path);
  }

  void withoutAModelTheReplyFailsWithTheEnginesReason() {
    FakeEngineThread thread;
    FakeEngine* e = thread.engine();
    QSignalSpy failed(e, &ReplyEngine::generateFailed);
    e->requestReply(3, {{"user", "hi"}}, GenerationSettings{});
    QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, kSignalMs);
    QCOMPARE(failed.first().at(0).toLongLong(), 3);
    QCOMPARE(failed.first().at(1).toString(), QString("nothing to reply with"));
    QCOMPARE(e->runs.load(), 0);
  }

  void aReplyStreamsAndReportsItsStatistics() {
    FakeEngineThread thread;
    FakeEngine* e = thread.engine();
    e->model = m_model.get();
    QSignalSpy streamed(e, &ReplyEngine::tokenStreamed);
    QSignalSpy finished(e, &ReplyEngine::replyFinished);
    GenerationSettings s;
    s.temperature = 0.25;
    s.topP = 0.5;
    s.topK = 7;
    s.maxTokens = 0;  // still at least one token
    s.seed = 42;
    const QList<ChatTurn> turns{{"system", "Be brief."}, {"user", "Say hello."}};
    e->requestReply(9, turns, s);
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, kSignalMs);

    // Asked for: the rendered, fitted prompt with the conversation's sampling settings.
    const model::ChatPrompt expected = expectedPrompt(turns, e->contextLength, s.maxTokens);
    QVERIFY(expected.fits);
    QCOMPARE(e->prompt, expected.tokens);
    QCOMPARE(e->options.maxTokens, 1);
    QCOMPARE(e->options.sampler.temperature, 0.25f);
    QCOMPARE(e->options.sampler.topP, 0.5f);
    QCOMPARE(e->options.sampler.topK, 7);
    QCOMPARE(e->options.sampler.seed, uint64_t(42));
    QCOMPARE(e->options.stop, model::chatStopStrings(m_model->chatTemplate().format));
    QVERIFY(e->options.cancel != nullptr);

    // Reported: every piece, then the whole text and its statistics.
    QCOMPARE(finished.first().at(0).toLongLong(), 9);
    QCOMPARE(finished.first().at(1).toString(), QString("Hello!"));
    QCOMPARE(streamedText(streamed), QString("Hello!"));
    for (const QList<QVariant>& args : streamed) QCOMPARE(args.at(0).toLongLong(), 9);
    const ReplyStats stats = finished.first().at(2).value<ReplyStats>();
    const int promptTokens = static_cast<int>(expected.tokens.size());
    QCOMPARE(stats.promptTokens, promptTokens);
    QCOMPARE(stats.generatedTokens, 3);
    QCOMPARE(stats.contextUsed, promptTokens + 3);
    QCOMPARE(stats.contextLength, e->contextLength);
    QCOMPARE(stats.droppedTurns, 0);
    QCOMPARE(stats.tokensPerSecond, 4.0);  // the two tokens after the first in 0.5 s
    QCOMPARE(stats.finishReason, QString("length"));
  }

  void oldTurnsAreDroppedToFitTheContext() {
    FakeEngineThread thread;
    FakeEngine* e = thread.engine();
    e->model = m_model.get();
    e->contextLength = 160;
    QSignalSpy finished(e, &ReplyEngine::replyFinished);
    const QString longText(60, QChar('a'));
    QList<ChatTurn> turns;
    for (int i = 0; i < 3; ++i) {
      turns.push_back({"user", longText});
      turns.push_back({"assistant", longText});
    }
    turns.push_back({"user", "And now?"});
    GenerationSettings s;
    s.maxTokens = 16;
    e->requestReply(1, turns, s);
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, kSignalMs);
    const model::ChatPrompt expected = expectedPrompt(turns, e->contextLength, s.maxTokens);
    QVERIFY(expected.fits);
    QVERIFY(expected.droppedTurns > 0);
    QCOMPARE(e->prompt, expected.tokens);
    QCOMPARE(finished.first().at(2).value<ReplyStats>().droppedTurns, expected.droppedTurns);
  }

  void aMessageThatCannotFitFailsNamingTheContext() {
    FakeEngineThread thread;
    FakeEngine* e = thread.engine();
    e->model = m_model.get();
    e->contextLength = 32;
    QSignalSpy failed(e, &ReplyEngine::generateFailed);
    e->requestReply(2, {{"user", QString(200, QChar('b'))}}, GenerationSettings{});
    QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, kSignalMs);
    const QString reason = failed.first().at(1).toString();
    QVERIFY2(reason.contains("does not fit the test context of 32 tokens"), qPrintable(reason));
    QCOMPARE(e->runs.load(), 0);
  }

  void stopEndsTheReplyAndTheNextRequestRunsAgain() {
    FakeEngineThread thread;
    FakeEngine* e = thread.engine();
    e->model = m_model.get();
    e->untilStopped = true;
    QSignalSpy streamed(e, &ReplyEngine::tokenStreamed);
    QSignalSpy finished(e, &ReplyEngine::replyFinished);
    e->requestReply(4, {{"user", "Go on."}}, GenerationSettings{});
    QTRY_VERIFY_WITH_TIMEOUT(!streamed.isEmpty(), kSignalMs);
    e->stop();  // from this thread, as the Stop button does
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, kSignalMs);
    QCOMPARE(finished.first().at(2).value<ReplyStats>().finishReason, QString("cancelled"));

    // A stop belongs to the reply it ended: the next request starts with the flag cleared.
    e->untilStopped = false;  // the engine is idle; the request below publishes this
    e->requestReply(5, {{"user", "Again."}}, GenerationSettings{});
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 2, kSignalMs);
    QCOMPARE(finished.last().at(1).toString(), QString("Hello!"));
    QCOMPARE(finished.last().at(2).value<ReplyStats>().finishReason, QString("length"));
  }

  void anErrorOfTheEngineBecomesAFailedReply() {
    FakeEngineThread thread;
    FakeEngine* e = thread.engine();
    e->model = m_model.get();
    e->fail = true;
    QSignalSpy failed(e, &ReplyEngine::generateFailed);
    QSignalSpy finished(e, &ReplyEngine::replyFinished);
    e->requestReply(6, {{"user", "hi"}}, GenerationSettings{});
    QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, kSignalMs);
    QCOMPARE(failed.first().at(1).toString(), QString("the chain broke"));
    QVERIFY(finished.isEmpty());
  }
};

QTEST_GUILESS_MAIN(TestReplyEngine)
#include "test_reply_engine.moc"
