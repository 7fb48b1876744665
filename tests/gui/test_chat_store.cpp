// ChatStore: what is saved can be read back by a new store on the same directory (a restart),
// in WAL mode, and deleting a conversation removes its messages. A database of schema 1 (before
// the reasoning settings) opens with its conversations and messages intact and the reasoning
// defaults, then stores them; a database of a newer schema is refused, unchanged.

#include <QSqlDatabase>
#include <QSqlError>
#include <QSqlQuery>
#include <QTemporaryDir>
#include <QtTest>

#include "app/gui/chat_store.h"

using namespace shoal::gui;

class TestChatStore : public QObject {
  Q_OBJECT

 private slots:
  void savedMessagesAreReadBackByANewStore() {
    QTemporaryDir dir;
    GenerationSettings s;
    s.temperature = 0.0;
    s.topK = 7;
    s.maxTokens = 99;
    s.seed = 1234;
    s.thinking = false;
    s.reasoningEffort = "high";
    ReplyStats stats;
    stats.promptTokens = 12;
    stats.generatedTokens = 5;
    stats.contextUsed = 17;
    stats.contextLength = 2048;
    stats.tokensPerSecond = 42.5;
    stats.finishReason = "eog";
    qint64 id = -1;
    {
      ChatStore store(dir.path());
      QVERIFY2(store.ok(), qPrintable(store.error()));
      id = store.createConversation("Title", "Be brief.", s);
      QVERIFY(id > 0);
      QVERIFY(store.addMessage(id, "user", "Hi") > 0);
      QVERIFY(store.addMessage(id, "assistant", "Hello!", stats) > 0);
    }
    ChatStore store(dir.path());
    QVERIFY2(store.ok(), qPrintable(store.error()));
    const auto c = store.conversation(id);
    QVERIFY(c.has_value());
    QCOMPARE(c->title, QString("Title"));
    QCOMPARE(c->systemPrompt, QString("Be brief."));
    QCOMPARE(c->settings.temperature, 0.0);
    QCOMPARE(c->settings.topK, 7);
    QCOMPARE(c->settings.maxTokens, 99);
    QCOMPARE(c->settings.seed, qint64(1234));
    QCOMPARE(c->settings.thinking, false);
    QCOMPARE(c->settings.reasoningEffort, QString("high"));
    const QList<StoredMessage> m = store.messages(id);
    QCOMPARE(m.size(), 2);
    QCOMPARE(m[0].content, QString("Hi"));
    QVERIFY(!m[0].hasStats);
    QCOMPARE(m[1].content, QString("Hello!"));
    QVERIFY(m[1].hasStats);
    QCOMPARE(m[1].stats.generatedTokens, 5);
    QCOMPARE(m[1].stats.contextUsed, 17);
    QCOMPARE(m[1].stats.tokensPerSecond, 42.5);
    QCOMPARE(m[1].stats.finishReason, QString("eog"));
  }

  void theDatabaseIsInWalMode() {
    QTemporaryDir dir;
    ChatStore store(dir.path());
    QVERIFY(store.ok());
    {
      QSqlDatabase db = QSqlDatabase::addDatabase("QSQLITE", "probe");
      db.setDatabaseName(store.filePath());
      QVERIFY(db.open());
      QSqlQuery q(db);
      QVERIFY(q.exec("PRAGMA journal_mode"));
      QVERIFY(q.next());
      QCOMPARE(q.value(0).toString().toLower(), QString("wal"));
    }
    QSqlDatabase::removeDatabase("probe");
  }

  void deletingAConversationDeletesItsMessages() {
    QTemporaryDir dir;
    ChatStore store(dir.path());
    const qint64 keep = store.createConversation("keep", "", {});
    const qint64 gone = store.createConversation("gone", "", {});
    QVERIFY(store.addMessage(keep, "user", "a") > 0);
    QVERIFY(store.addMessage(gone, "user", "b") > 0);
    QVERIFY(store.deleteConversation(gone));
    QVERIFY(!store.conversation(gone).has_value());
    QVERIFY(store.messages(gone).isEmpty());
    QCOMPARE(store.messages(keep).size(), 1);
  }

  void aNullSystemPromptIsStoredAsEmpty() {
    QTemporaryDir dir;
    ChatStore store(dir.path());
    const qint64 id = store.createConversation("t", QString(), {});
    QVERIFY2(id > 0, qPrintable(store.error()));
    QCOMPARE(store.conversation(id)->systemPrompt, QString(""));
  }

  void conversationsAreListedNewestFirst() {
    QTemporaryDir dir;
    ChatStore store(dir.path());
    const qint64 a = store.createConversation("a", "", {});
    const qint64 b = store.createConversation("b", "", {});
    QCOMPARE(store.conversations().front().id, b);
    QTest::qWait(5);  // updated_at has millisecond resolution
    QVERIFY(store.addMessage(a, "user", "newer") > 0);
    QCOMPARE(store.conversations().front().id, a);
  }

  void aReplySavedWhileStreamingIsCompletedInPlace() {
    QTemporaryDir dir;
    ChatStore store(dir.path());
    const qint64 c = store.createConversation("T", "", {});
    QVERIFY(store.addMessage(c, "user", "Hi") > 0);
    const qint64 reply = store.addMessage(c, "assistant", "Hel");
    QVERIFY(reply > 0);
    QVERIFY(!store.messages(c)[1].hasStats);  // cut off, as far as anyone reading now knows
    QVERIFY(store.updateMessage(reply, "Hello"));
    QCOMPARE(store.messages(c)[1].content, QString("Hello"));
    ReplyStats stats;
    stats.generatedTokens = 2;
    stats.finishReason = "eog";
    QVERIFY(store.updateMessage(reply, "Hello!", stats));
    const QList<StoredMessage> saved = ChatStore(dir.path()).messages(c);
    QCOMPARE(saved.size(), 2);
    QCOMPARE(saved[1].id, reply);
    QCOMPARE(saved[1].content, QString("Hello!"));
    QVERIFY(saved[1].hasStats);
    QCOMPARE(saved[1].stats.generatedTokens, 2);
    QCOMPARE(saved[1].stats.finishReason, QString("eog"));
  }

  void aSchema1DatabaseIsMigratedWithNothingLost() {
    QTemporaryDir dir;
    {
      // The version-1 schema and rows, as the previous release wrote them.
      QSqlDatabase db = QSqlDatabase::addDatabase("QSQLITE", "v1");
      db.setDatabaseName(dir.filePath("shoal-chats.sqlite"));
      QVERIFY(db.open());
      QSqlQuery q(db);
      for (const char* sql :
           {"CREATE TABLE conversations (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT "
            "NULL, system_prompt TEXT NOT NULL DEFAULT '', temperature REAL NOT NULL, top_p REAL "
            "NOT NULL, top_k INTEGER NOT NULL, max_tokens INTEGER NOT NULL, seed INTEGER NOT "
            "NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL)",
            "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id "
            "INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE, role TEXT NOT "
            "NULL, content TEXT NOT NULL, created_at INTEGER NOT NULL, has_stats INTEGER NOT "
            "NULL DEFAULT 0, prompt_tokens INTEGER, generated_tokens INTEGER, context_used "
            "INTEGER, context_length INTEGER, dropped_turns INTEGER, tokens_per_second REAL, "
            "prefill_seconds REAL, finish_reason TEXT)",
            "INSERT INTO conversations VALUES (7, 'Old chat', 'Be kind.', 0.3, 0.9, 20, 64, 5, "
            "1000, 2000)",
            "INSERT INTO messages (conversation_id, role, content, created_at) VALUES (7, "
            "'user', 'Hello from v1', 1500)",
            "PRAGMA user_version = 1"}) {
        QVERIFY2(q.exec(sql), qPrintable(q.lastError().text()));
      }
      q.finish();
      db.close();
    }
    QSqlDatabase::removeDatabase("v1");
    {
      ChatStore store(dir.path());
      QVERIFY2(store.ok(), qPrintable(store.error()));
      const auto c = store.conversation(7);
      QVERIFY(c.has_value());
      QCOMPARE(c->title, QString("Old chat"));
      QCOMPARE(c->systemPrompt, QString("Be kind."));
      QCOMPARE(c->settings.topK, 20);
      QCOMPARE(c->settings.thinking, true);  // what every v1 conversation did
      QCOMPARE(c->settings.reasoningEffort, QString());
      const QList<StoredMessage> m = store.messages(7);
      QCOMPARE(m.size(), 1);
      QCOMPARE(m[0].content, QString("Hello from v1"));
      GenerationSettings s = c->settings;
      s.thinking = false;
      s.reasoningEffort = "low";
      QVERIFY(store.updateConversationSettings(7, c->systemPrompt, s));
    }
    ChatStore again(dir.path());
    QVERIFY2(again.ok(), qPrintable(again.error()));
    QCOMPARE(again.conversation(7)->settings.thinking, false);
    QCOMPARE(again.conversation(7)->settings.reasoningEffort, QString("low"));
    QCOMPARE(again.messages(7).size(), 1);
  }

  void aDatabaseOfANewerSchemaIsRefusedUnchanged() {
    QTemporaryDir dir;
    {
      ChatStore store(dir.path());
      QVERIFY(store.createConversation("Kept", "", GenerationSettings{}) > 0);
    }
    {
      QSqlDatabase db = QSqlDatabase::addDatabase("QSQLITE", "future");
      db.setDatabaseName(dir.filePath("shoal-chats.sqlite"));
      QVERIFY(db.open());
      QSqlQuery q(db);
      QVERIFY(q.exec("PRAGMA user_version = 99"));
      q.finish();
      db.close();
    }
    QSqlDatabase::removeDatabase("future");
    ChatStore store(dir.path());
    QVERIFY(!store.ok());
    QVERIFY2(store.error().contains("newer Shoal"), qPrintable(store.error()));
  }

  void updatingAMissingMessageFails() {
    QTemporaryDir dir;
    ChatStore store(dir.path());
    QVERIFY(!store.updateMessage(12345, "x"));
    QVERIFY(store.error().contains("12345"));
  }
};

QTEST_MAIN(TestChatStore)
#include "test_chat_store.moc"
