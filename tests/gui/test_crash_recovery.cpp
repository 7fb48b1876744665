// Killing the app (SIGKILL, no chance to clean up) while a reply streams loses nothing that was
// saved before: earlier conversations, the user's message, the part of the reply saved while it
// was being generated, and the database itself survive. The real `shoal` executable runs as a
// child process on a temporary data directory.

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QSqlDatabase>
#include <QSqlQuery>
#include <QTemporaryDir>
#include <QtTest>

#include "app/gui/chat_store.h"

using namespace shoal::gui;

namespace {

// Model loading and the first token on a busy machine: generous, never a timing assertion.
constexpr int kStreamingTimeoutMs = 180000;

QString modelPath() { return QDir(SHOAL_MODELS_DIR).filePath("SmolLM2-135M-Instruct.Q4_1.gguf"); }

// Reads the child's stdout line by line until `line` appears or the timeout passes.
bool waitForLine(QProcess& p, const QByteArray& line, int timeoutMs, QByteArray& seen) {
  QDeadlineTimer deadline(timeoutMs);
  while (!deadline.hasExpired()) {
    while (p.canReadLine()) {
      const QByteArray l = p.readLine().trimmed();
      seen += l + '\n';
      if (l == line) return true;
    }
    if (p.state() == QProcess::NotRunning) return false;
    p.waitForReadyRead(static_cast<int>(std::min<qint64>(deadline.remainingTime(), 1000)));
  }
  return false;
}

// The content of the newest assistant message saved without stats (a reply still being
// generated), read through a connection of our own while the app writes; empty when none.
QString partialReply(const QString& dbPath) {
  QString content;
  {
    QSqlDatabase db = QSqlDatabase::addDatabase("QSQLITE", "poll");
    db.setDatabaseName(dbPath);
    db.setConnectOptions("QSQLITE_OPEN_READONLY");
    if (db.open()) {
      QSqlQuery q(db);
      if (q.exec("SELECT content FROM messages WHERE role = 'assistant' AND has_stats = 0 "
                 "ORDER BY id DESC LIMIT 1") &&
          q.next()) {
        content = q.value(0).toString();
      }
    }
  }
  QSqlDatabase::removeDatabase("poll");
  return content;
}

}  // namespace

class TestCrashRecovery : public QObject {
  Q_OBJECT

 private slots:
  void killDuringAStreamedReplyKeepsEverythingSavedBefore() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    QTemporaryDir dataDir;
    QVERIFY(dataDir.isValid());

    // An earlier conversation, saved by a previous run.
    qint64 earlier = -1;
    {
      ChatStore store(dataDir.path());
      QVERIFY2(store.ok(), qPrintable(store.error()));
      earlier = store.createConversation("Earlier chat", "Be brief.", GenerationSettings{});
      QVERIFY(earlier > 0);
      QVERIFY(store.addMessage(earlier, "user", "Hello there") > 0);
      ReplyStats stats;
      stats.generatedTokens = 3;
      stats.finishReason = "eog";
      QVERIFY(store.addMessage(earlier, "assistant", "Hi! How can I help?", stats) > 0);
      // The newest conversation, still empty: the app opens it and sends into it, with its
      // settings (greedy and long, so the reply is still running when we kill the app).
      QTest::qSleep(5);  // a later updated_at than the earlier chat's
      GenerationSettings longGreedy;
      longGreedy.temperature = 0.0;
      longGreedy.maxTokens = 2000;
      QVERIFY(store.createConversation("Crash", "", longGreedy) > 0);
    }

    // A question whose greedy reply is long (about 2,000 tokens, many seconds): the app saves a
    // partial reply once a second, and the counting question used before got a 122-token reply
    // that a quiet machine finished within that second, so no partial was ever saved.
    const QString question = "Write a long story about a fisherman, at least 1000 words.";
    QProcess app;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("SHOAL_DATA_DIR", dataDir.path());
    env.insert("QT_QPA_PLATFORM", "offscreen");
    app.setProcessEnvironment(env);
    app.setProcessChannelMode(QProcess::SeparateChannels);
    app.start(SHOAL_GUI_BINARY, {"-m", modelPath(), "--send-on-start", question});
    QVERIFY2(app.waitForStarted(), qPrintable(app.errorString()));

    QByteArray seen;
    const bool streaming = waitForLine(app, "shoal: streaming", kStreamingTimeoutMs, seen);
    if (!streaming) {
      app.kill();
      app.waitForFinished();
      QFAIL(qPrintable("the app never started streaming; stdout:\n" + seen + "\nstderr:\n" +
                       app.readAllStandardError()));
    }
    // Wait until the app has saved part of the running reply, then kill it without warning
    // (QProcess::kill is SIGKILL).
    const QString dbPath = QDir(dataDir.path()).filePath("shoal-chats.sqlite");
    QString partial;
    QDeadlineTimer deadline(kStreamingTimeoutMs);
    while ((partial = partialReply(dbPath)).isEmpty() && !deadline.hasExpired() &&
           app.state() == QProcess::Running) {
      QTest::qWait(50);
    }
    app.kill();
    QVERIFY(app.waitForFinished());
    QCOMPARE(app.exitStatus(), QProcess::CrashExit);
    QVERIFY2(!partial.isEmpty(), "the app never saved part of the running reply");

    // The database opens and SQLite finds nothing wrong with it (the WAL is replayed on open).
    {
      QSqlDatabase db = QSqlDatabase::addDatabase("QSQLITE", "integrity");
      db.setDatabaseName(QDir(dataDir.path()).filePath("shoal-chats.sqlite"));
      QVERIFY(db.open());
      QSqlQuery q(db);
      QVERIFY(q.exec("PRAGMA integrity_check"));
      QVERIFY(q.next());
      QCOMPARE(q.value(0).toString(), QString("ok"));
    }
    QSqlDatabase::removeDatabase("integrity");

    ChatStore store(dataDir.path());
    QVERIFY2(store.ok(), qPrintable(store.error()));
    const QList<StoredConversation> all = store.conversations();
    QCOMPARE(all.size(), 2);

    const QList<StoredMessage> old = store.messages(earlier);
    QCOMPARE(old.size(), 2);
    QCOMPARE(old[0].content, QString("Hello there"));
    QCOMPARE(old[1].content, QString("Hi! How can I help?"));
    QCOMPARE(old[1].stats.finishReason, QString("eog"));
    QCOMPARE(store.conversation(earlier)->systemPrompt, QString("Be brief."));

    const qint64 killed = all[0].id == earlier ? all[1].id : all[0].id;
    const QList<StoredMessage> asked = store.messages(killed);
    QCOMPARE(asked.size(), 2);
    QCOMPARE(asked[0].role, QString("user"));
    QCOMPARE(asked[0].content, question);
    // The reply as far as it was saved: at least what we saw, marked as cut off (no stats).
    QCOMPARE(asked[1].role, QString("assistant"));
    QVERIFY(!asked[1].hasStats);
    QVERIFY2(asked[1].content.startsWith(partial), qPrintable(asked[1].content));
  }
};

QTEST_MAIN(TestCrashRecovery)
#include "test_crash_recovery.moc"
