// The shared context policy of the chat front-ends: drop the oldest turns (never the system
// message or the newest user message) until the prompt leaves room for the reply.

#include <QtTest>
#include <filesystem>

#include "engine/gguf/gguf_file.h"
#include "engine/model/chat_prompt.h"

using namespace shoal;

class TestChatPrompt : public QObject {
  Q_OBJECT

  std::unique_ptr<model::Tokenizer> m_tok;
  model::ChatTemplate m_template;

  std::vector<model::ChatMessage> conversation(int turns) const {
    std::vector<model::ChatMessage> m = {{"system", "Be brief."}};
    for (int i = 0; i < turns; ++i) {
      m.push_back(
          {"user", "Question number " + std::to_string(i) + " about the sea and its fish?"});
      m.push_back({"assistant", "Answer number " + std::to_string(i) + ": fish swim in shoals."});
    }
    m.push_back({"user", "And the last question?"});
    return m;
  }

 private slots:
  void initTestCase() {
    const auto path = std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path)) QSKIP("default model absent (run scripts/setup)");
    m_tok = model::Tokenizer::create(model::Vocab::fromGguf(gguf::File::open(path)));
    m_template = model::detectChatTemplate(m_tok->vocab().chatTemplate);
  }

  void promptThatFitsIsLeftWhole() {
    auto messages = conversation(2);
    const auto p = model::buildChatPrompt(*m_tok, m_template, messages, 4096, 256);
    QVERIFY(p.fits);
    QCOMPARE(p.droppedTurns, 0);
    QCOMPARE(messages.size(), size_t(6));
    QCOMPARE(p.tokens, m_tok->encode(model::renderChat(m_template, messages, true), true, true));
  }

  void oldestTurnsAreDroppedUntilTheReplyFits() {
    auto messages = conversation(10);
    const auto whole = m_tok->encode(model::renderChat(m_template, messages, true), true, true);
    const int32_t ctx = static_cast<int32_t>(whole.size()) / 2;
    const auto p = model::buildChatPrompt(*m_tok, m_template, messages, ctx, 16);
    QVERIFY(p.fits);
    QVERIFY(p.droppedTurns > 0);
    QVERIFY(static_cast<int32_t>(p.tokens.size()) + 16 <= ctx);
    QCOMPARE(QString::fromStdString(messages.front().role), QString("system"));
    QCOMPARE(QString::fromStdString(messages.back().content), QString("And the last question?"));
    // The kept turns are the newest ones: the first kept user turn is number droppedTurns.
    QVERIFY(QString::fromStdString(messages[1].content)
                .contains(QString("number %1 ").arg(p.droppedTurns)));
  }

  void aToolExchangeIsDroppedWithItsTurn() {
    // Turn 0 calls a tool (call, two results, the answer); turn 1 is plain; then the question.
    model::ChatMessage call{"assistant", ""};
    call.toolCalls.push_back({"lookup", R"({"q": "fish"})"});
    std::vector<model::ChatMessage> messages = {{"system", "Be brief."},
                                                {"user", "Question number 0 about shoals?"},
                                                call,
                                                {"tool", std::string(400, 'r')},
                                                {"tool", "second result"},
                                                {"assistant", "Answer number 0."},
                                                {"user", "Question number 1?"},
                                                {"assistant", "Answer number 1."},
                                                {"user", "And the last question?"}};
    const auto whole = m_tok->encode(model::renderChat(m_template, messages, true), true, true);
    const auto p = model::buildChatPrompt(*m_tok, m_template, messages,
                                          static_cast<int32_t>(whole.size()) - 16, 16);
    QVERIFY(p.fits);
    QCOMPARE(p.droppedTurns, 1);
    // Nothing of turn 0 is left: no orphaned tool results after the system message.
    QCOMPARE(messages.size(), size_t(4));
    QCOMPARE(QString::fromStdString(messages[1].content), QString("Question number 1?"));
  }

  void newestMessageThatCannotFitIsReported() {
    std::vector<model::ChatMessage> messages = {{"user", std::string(2000, 'x')}};
    const auto p = model::buildChatPrompt(*m_tok, m_template, messages, 64, 16);
    QVERIFY(!p.fits);
    QCOMPARE(messages.size(), size_t(1));  // never dropped
  }
};

QTEST_GUILESS_MAIN(TestChatPrompt)
#include "test_chat_prompt.moc"
