// The chat window, driven through its widgets with the default model on the CPU: a message gets
// a streamed reply, Stop ends a reply early, conversations (with their sampling and reasoning
// settings) survive a restart, a model that cannot be loaded is explained in the window, and the
// conversation list can be searched, renamed and pruned.

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTextBrowser>
#include <QtTest>
#include <memory>

#include "app/gui/app_settings.h"
#include "app/gui/chat_engine.h"
#include "app/gui/chat_input.h"
#include "app/gui/chat_store.h"
#include "app/gui/chat_window.h"
#include "engine/error.h"
#include "engine/model/model.h"

using namespace shoal::gui;

namespace {

// Model loading and CPU generation on a busy machine: generous, never a timing assertion.
constexpr int kLoadTimeoutMs = 120000;
constexpr int kReplyTimeoutMs = 300000;

QString modelPath() { return QDir(SHOAL_MODELS_DIR).filePath("SmolLM2-135M-Instruct.Q4_1.gguf"); }

template <typename T>
T* child(QWidget* w, const char* name) {
  T* c = w->findChild<T*>(name);
  if (!c) qFatal("widget %s not found", name);
  return c;
}

}  // namespace

class TestChatWindow : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<QTemporaryDir> m_dataDir;

  std::unique_ptr<ChatWindow> openWindow(const QString& model) {
    auto w = std::make_unique<ChatWindow>(model, ChatStore::defaultDirectory());
    w->show();
    // Window shortcuts (Ctrl+N, Esc) fire only in the active window.
    w->activateWindow();
    if (!QTest::qWaitForWindowActive(w.get())) qWarning("the chat window did not become active");
    return w;
  }

  // Greedy, short replies: the same text every run.
  void setGreedy(ChatWindow& w, int maxTokens) {
    child<QDoubleSpinBox>(&w, "temperature")->setValue(0.0);
    child<QSpinBox>(&w, "maxTokens")->setValue(maxTokens);
  }

  void typeAndSend(ChatWindow& w, const QString& text) {
    ChatInput* input = child<ChatInput>(&w, "input");
    input->setFocus();
    QTest::keyClicks(input, text);
    QTest::keyClick(input, Qt::Key_Return);
  }

 private slots:
  void init() {
    m_dataDir = std::make_unique<QTemporaryDir>();
    QVERIFY(m_dataDir->isValid());
    qputenv("SHOAL_DATA_DIR", m_dataDir->path().toLocal8Bit());
  }

  void cleanup() {
    qunsetenv("SHOAL_DATA_DIR");
    m_dataDir.reset();
  }

  void sendingAMessageStreamsAReplyAndSavesBoth() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    auto w = openWindow(modelPath());
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kLoadTimeoutMs);
    setGreedy(*w, 16);
    QSignalSpy tokens(w->engine(), &ChatEngine::tokenStreamed);
    QSignalSpy done(w.get(), &ChatWindow::replyDone);

    typeAndSend(*w, "What is the capital of France?");
    QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, kReplyTimeoutMs);

    QVERIFY(tokens.count() > 0);
    const QString finish = done.at(0).at(1).toString();
    QVERIFY2(!finish.isEmpty() && finish != "cancelled", qPrintable(finish));
    QCOMPARE(child<ChatInput>(w.get(), "input")->toPlainText(), QString());

    const QList<StoredMessage> saved = w->store().messages(w->currentConversationId());
    QCOMPARE(saved.size(), 2);
    QCOMPARE(saved[0].role, QString("user"));
    QCOMPARE(saved[0].content, QString("What is the capital of France?"));
    QCOMPARE(saved[1].role, QString("assistant"));
    QVERIFY(!saved[1].content.trimmed().isEmpty());
    QVERIFY(saved[1].hasStats);
    QVERIFY(saved[1].stats.generatedTokens > 0);
    QVERIFY(saved[1].stats.contextUsed > saved[1].stats.promptTokens);

    // The streamed pieces are the reply.
    QString streamed;
    for (const QList<QVariant>& args : tokens) streamed += args.at(1).toString();
    QCOMPARE(streamed, saved[1].content);

    const QString shown = child<QTextBrowser>(w.get(), "transcript")->toPlainText();
    QVERIFY(shown.contains("What is the capital of France?"));
    QVERIFY(shown.contains(saved[1].content.trimmed().left(20)));
    QVERIFY(shown.contains("tokens/s"));

    // For documentation: a picture of the window, when asked for.
    if (const QByteArray dir = qgetenv("SHOAL_GUI_SCREENSHOT_DIR"); !dir.isEmpty()) {
      QVERIFY(w->grab().save(QDir(QString::fromLocal8Bit(dir)).filePath("chat.png")));
    }
  }

  void escapeStopsTheReply() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    auto w = openWindow(modelPath());
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kLoadTimeoutMs);
    setGreedy(*w, 2000);
    QSignalSpy tokens(w->engine(), &ChatEngine::tokenStreamed);
    QSignalSpy done(w.get(), &ChatWindow::replyDone);
    typeAndSend(*w, "Write a very long story about a dragon who learns to sing.");
    QTRY_VERIFY_WITH_TIMEOUT(tokens.count() > 0, kReplyTimeoutMs);
    QTest::keyClick(child<ChatInput>(w.get(), "input"), Qt::Key_Escape);
    QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, kReplyTimeoutMs);
    QCOMPARE(done.at(0).at(1).toString(), QString("cancelled"));
  }

  void escapeStopsTheReplyWhereverTheFocusIs() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    auto w = openWindow(modelPath());
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kLoadTimeoutMs);
    setGreedy(*w, 2000);
    QSignalSpy tokens(w->engine(), &ChatEngine::tokenStreamed);
    QSignalSpy done(w.get(), &ChatWindow::replyDone);
    typeAndSend(*w, "Write a very long story about a dragon who learns to sing.");
    QTRY_VERIFY_WITH_TIMEOUT(tokens.count() > 0, kReplyTimeoutMs);
    child<QListWidget>(w.get(), "conversationList")->setFocus();
    // Through the window system, where the window's Esc shortcut matches.
    QTest::keyClick(w->windowHandle(), Qt::Key_Escape);
    QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, kReplyTimeoutMs);
    QCOMPARE(done.at(0).at(1).toString(), QString("cancelled"));
  }

  void regenerateReplacesTheLastReply() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    auto w = openWindow(modelPath());
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kLoadTimeoutMs);
    setGreedy(*w, 12);
    QSignalSpy done(w.get(), &ChatWindow::replyDone);
    typeAndSend(*w, "Name a color.");
    QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, kReplyTimeoutMs);
    const QList<StoredMessage> first = w->store().messages(w->currentConversationId());
    QCOMPARE(first.size(), 2);

    QTest::mouseClick(child<QPushButton>(w.get(), "regenerateButton"), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(done.count(), 2, kReplyTimeoutMs);
    const QList<StoredMessage> second = w->store().messages(w->currentConversationId());
    QCOMPARE(second.size(), 2);
    QVERIFY(second[1].id != first[1].id);
    QCOMPARE(second[1].content, first[1].content);  // greedy: the same reply again
  }

  void ctrlNStartsANewConversation() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    auto w = openWindow(modelPath());
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kLoadTimeoutMs);
    setGreedy(*w, 4);
    QSignalSpy done(w.get(), &ChatWindow::replyDone);
    typeAndSend(*w, "Hi.");
    QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, kReplyTimeoutMs);
    const qint64 first = w->currentConversationId();

    // Through the window system, as a real key press arrives (that is where shortcuts match).
    QTest::keyClick(w->windowHandle(), Qt::Key_N, Qt::ControlModifier);
    QVERIFY(w->currentConversationId() != first);
    QCOMPARE(child<QListWidget>(w.get(), "conversationList")->count(), 2);
    QVERIFY(child<QTextBrowser>(w.get(), "transcript")->toPlainText().trimmed().isEmpty());
    // A second Ctrl+N on the still-empty conversation does not pile up empty ones.
    QTest::keyClick(w->windowHandle(), Qt::Key_N, Qt::ControlModifier);
    QCOMPARE(child<QListWidget>(w.get(), "conversationList")->count(), 2);
  }

  void shiftEnterInsertsANewlineInsteadOfSending() {
    auto w = openWindow(m_dataDir->filePath("no-model.gguf"));
    ChatInput* input = child<ChatInput>(w.get(), "input");
    QTest::keyClicks(input, "one");
    QTest::keyClick(input, Qt::Key_Return, Qt::ShiftModifier);
    QTest::keyClicks(input, "two");
    QCOMPARE(input->toPlainText(), QString("one\ntwo"));
    QCOMPARE(w->currentConversationId(), qint64(-1));
  }

  void stopEndsTheReplyEarlyAndKeepsWhatWasGenerated() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    auto w = openWindow(modelPath());
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kLoadTimeoutMs);
    setGreedy(*w, 2000);
    QSignalSpy tokens(w->engine(), &ChatEngine::tokenStreamed);
    QSignalSpy done(w.get(), &ChatWindow::replyDone);

    typeAndSend(*w, "Write a very long story about a dragon who learns to sing.");
    QTRY_VERIFY_WITH_TIMEOUT(tokens.count() > 0, kReplyTimeoutMs);
    QPushButton* stop = child<QPushButton>(w.get(), "stopButton");
    QVERIFY(stop->isEnabled());
    QTest::mouseClick(stop, Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, kReplyTimeoutMs);

    QCOMPARE(done.at(0).at(1).toString(), QString("cancelled"));
    QVERIFY(!stop->isEnabled());
    const QList<StoredMessage> saved = w->store().messages(w->currentConversationId());
    QCOMPARE(saved.size(), 2);
    QCOMPARE(saved[1].stats.finishReason, QString("cancelled"));
    QVERIFY(saved[1].stats.generatedTokens < 2000);
    QVERIFY(!saved[1].content.isEmpty());
  }

  void conversationsSurviveARestart() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    qint64 id = -1;
    QString reply;
    {
      auto w = openWindow(modelPath());
      QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kLoadTimeoutMs);
      setGreedy(*w, 8);
      child<QCheckBox>(w.get(), "thinking")->setChecked(false);
      QComboBox* effort = child<QComboBox>(w.get(), "reasoningEffort");
      effort->setCurrentIndex(effort->findData(QStringLiteral("high")));
      QSignalSpy done(w.get(), &ChatWindow::replyDone);
      typeAndSend(*w, "Say hello.");
      QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, kReplyTimeoutMs);
      id = w->currentConversationId();
      const QList<StoredMessage> saved = w->store().messages(id);
      QCOMPARE(saved.size(), 2);
      reply = saved[1].content;
    }
    auto w = openWindow(modelPath());
    QListWidget* list = child<QListWidget>(w.get(), "conversationList");
    QCOMPARE(list->count(), 1);
    QCOMPARE(list->item(0)->text(), QString("Say hello."));
    QCOMPARE(w->currentConversationId(), id);
    const QList<StoredMessage> saved = w->store().messages(id);
    QCOMPARE(saved.size(), 2);
    QCOMPARE(saved[0].content, QString("Say hello."));
    QCOMPARE(saved[1].content, reply);
    QCOMPARE(child<QDoubleSpinBox>(w.get(), "temperature")->value(), 0.0);
    QCOMPARE(child<QSpinBox>(w.get(), "maxTokens")->value(), 8);
    QCOMPARE(child<QCheckBox>(w.get(), "thinking")->isChecked(), false);
    QCOMPARE(child<QComboBox>(w.get(), "reasoningEffort")->currentData().toString(),
             QString("high"));
    QCOMPARE(w->store().conversation(id)->settings.reasoningEffort, QString("high"));
    QVERIFY(child<QTextBrowser>(w.get(), "transcript")->toPlainText().contains("Say hello."));
  }

  // The draft model named in Settings (here the model itself, which drafts exactly its own
  // tokens) is loaded beside the model and said so; the greedy reply is the one without it. A
  // draft model that cannot be read is skipped with the reason, and the chat still works.
  void aDraftModelFromTheSettingsLeavesTheReplyUnchanged() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    const QString question = "Name three colours.";
    // The greedy reply to `question` with this draft model setting (empty when the window did
    // not load or answer in time), the engine's notices and the tokens a draft model drafted.
    auto replyWith = [&](const QString& draft, QString& notice, int& modelDrafted) -> QString {
      AppSettings settings = AppSettings::load();
      settings.draftModel = draft;
      settings.save();
      auto w = openWindow(modelPath());
      QSignalSpy notices(w->engine(), &ChatEngine::notice);
      if (!QTest::qWaitFor([&] { return w->isModelLoaded(); }, kLoadTimeoutMs)) return {};
      // A new conversation each time (the window reopens the last one).
      QTest::keyClick(w->windowHandle(), Qt::Key_N, Qt::ControlModifier);
      setGreedy(*w, 24);
      QSignalSpy finished(w->engine(), &ChatEngine::replyFinished);
      typeAndSend(*w, question);
      if (!QTest::qWaitFor([&] { return finished.count() == 1; }, kReplyTimeoutMs)) return {};
      for (const QList<QVariant>& args : notices) notice += args.at(0).toString();
      modelDrafted = finished.at(0).at(2).value<ReplyStats>().modelDraftedTokens;
      return finished.at(0).at(1).toString();
    };
    QString none, drafted, broken;
    int fromNone = -1, fromDraft = -1, fromBroken = -1;
    const QString plain = replyWith("none", none, fromNone);
    QVERIFY(!plain.trimmed().isEmpty());
    QVERIFY2(!none.contains("Drafting"), qPrintable(none));
    QCOMPARE(fromNone, 0);
    const QString withDraft = replyWith(modelPath(), drafted, fromDraft);
    QVERIFY2(drafted.contains("Drafting with SmolLM2"), qPrintable(drafted));
    QVERIFY(fromDraft > 0);
    QCOMPARE(withDraft, plain);
    const QString missing = m_dataDir->filePath("no-such-draft.gguf");
    const QString withBroken = replyWith(missing, broken, fromBroken);
    QVERIFY2(broken.contains("is not used"), qPrintable(broken));
    QCOMPARE(fromBroken, 0);
    QCOMPARE(withBroken, plain);
  }

  void aModelThatCannotBeLoadedIsExplainedInTheWindow() {
    const QString garbage = m_dataDir->filePath("garbage.gguf");
    QFile f(garbage);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QByteArray(4096, 'x'));
    f.close();
    QString reason;  // what the engine says about this file
    try {
      shoal::model::Model::load(garbage.toStdString());
    } catch (const shoal::Error& e) {
      reason = QString::fromStdString(e.what());
    }
    QVERIFY(!reason.isEmpty());

    auto w = openWindow(garbage);
    QSignalSpy failed(w->engine(), &ChatEngine::loadFailed);
    QLabel* banner = child<QLabel>(w.get(), "banner");
    QTRY_VERIFY_WITH_TIMEOUT(banner->isVisible(), kLoadTimeoutMs);
    QVERIFY2(banner->text().contains(reason), qPrintable(banner->text()));
    QVERIFY(!w->isModelLoaded());
    QTest::keyClicks(child<ChatInput>(w.get(), "input"), "hello");
    QVERIFY(!child<QPushButton>(w.get(), "sendButton")->isEnabled());
  }

  void conversationListFiltersRenamesAndDeletes() {
    {
      ChatStore store(ChatStore::defaultDirectory());
      QVERIFY(store.createConversation("Rust lifetimes", "", {}) > 0);
      QVERIFY(store.createConversation("Pasta recipes", "", {}) > 0);
      QVERIFY(store.createConversation("Rust macros", "", {}) > 0);
    }
    auto w = openWindow(m_dataDir->filePath("no-model.gguf"));
    QListWidget* list = child<QListWidget>(w.get(), "conversationList");
    QCOMPARE(list->count(), 3);

    QTest::keyClicks(child<QLineEdit>(w.get(), "searchBox"), "rust");
    int visible = 0;
    for (int i = 0; i < list->count(); ++i) visible += list->item(i)->isHidden() ? 0 : 1;
    QCOMPARE(visible, 2);
    child<QLineEdit>(w.get(), "searchBox")->clear();

    // Rename in place, as editing the item does.
    const qint64 id = w->currentConversationId();
    QListWidgetItem* current = list->currentItem();
    QVERIFY(current);
    current->setText("Renamed");
    QCOMPARE(w->store().conversation(id)->title, QString("Renamed"));

    QTest::mouseClick(child<QPushButton>(w.get(), "deleteButton"), Qt::LeftButton);
    QMessageBox* confirm = nullptr;
    QTRY_VERIFY((confirm = w->findChild<QMessageBox*>("confirmDelete")) != nullptr);
    QTest::mouseClick(confirm->button(QMessageBox::Yes), Qt::LeftButton);
    QTRY_COMPARE(list->count(), 2);
    QVERIFY(!w->store().conversation(id).has_value());
    QCOMPARE(w->store().conversations().size(), 2);
  }
};

QTEST_MAIN(TestChatWindow)
#include "test_chat_window.moc"
