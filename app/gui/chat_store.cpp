#include "app/gui/chat_store.h"

#include <QDir>
#include <QSqlError>
#include <QSqlQuery>
#include <QStandardPaths>
#include <QUuid>
#include <QVariant>

namespace shoal::gui {
namespace {

// Schema version 2 (kSchemaVersion). Settings live in columns (not a blob) so they can be queried
// and migrated. Version 1 lacked the reasoning settings (thinking, reasoning_effort):
// migrateSchema adds them, with the defaults every conversation had before.
constexpr int kSchemaVersion = 2;
const char* const kSchema[] = {
    "CREATE TABLE IF NOT EXISTS conversations ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " title TEXT NOT NULL,"
    " system_prompt TEXT NOT NULL DEFAULT '',"
    " temperature REAL NOT NULL, top_p REAL NOT NULL, top_k INTEGER NOT NULL,"
    " max_tokens INTEGER NOT NULL, seed INTEGER NOT NULL,"
    " created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
    " thinking INTEGER NOT NULL DEFAULT 1, reasoning_effort TEXT NOT NULL DEFAULT '')",
    "CREATE TABLE IF NOT EXISTS messages ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,"
    " role TEXT NOT NULL, content TEXT NOT NULL, created_at INTEGER NOT NULL,"
    " has_stats INTEGER NOT NULL DEFAULT 0,"
    " prompt_tokens INTEGER, generated_tokens INTEGER, context_used INTEGER,"
    " context_length INTEGER, dropped_turns INTEGER, tokens_per_second REAL,"
    " prefill_seconds REAL, finish_reason TEXT)",
    "CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id)",
};

// What a version-1 database gains to become version 2.
const char* const kMigrationFrom1[] = {
    "ALTER TABLE conversations ADD COLUMN thinking INTEGER NOT NULL DEFAULT 1",
    "ALTER TABLE conversations ADD COLUMN reasoning_effort TEXT NOT NULL DEFAULT ''",
};

// A null QString binds as SQL NULL; the text columns are NOT NULL, so bind "" instead.
QVariant text(const QString& s) { return QVariant(s.isNull() ? QStringLiteral("") : s); }

qint64 nowMs() { return QDateTime::currentMSecsSinceEpoch(); }

StoredConversation readConversation(const QSqlQuery& q) {
  StoredConversation c;
  c.id = q.value(0).toLongLong();
  c.title = q.value(1).toString();
  c.systemPrompt = q.value(2).toString();
  c.settings.temperature = q.value(3).toDouble();
  c.settings.topP = q.value(4).toDouble();
  c.settings.topK = q.value(5).toInt();
  c.settings.maxTokens = q.value(6).toInt();
  c.settings.seed = q.value(7).toLongLong();
  c.updatedAt = QDateTime::fromMSecsSinceEpoch(q.value(8).toLongLong());
  c.settings.thinking = q.value(9).toInt() != 0;
  c.settings.reasoningEffort = q.value(10).toString();
  return c;
}

const char* const kConversationColumns =
    "SELECT id, title, system_prompt, temperature, top_p, top_k, max_tokens, seed, updated_at, "
    "thinking, reasoning_effort FROM conversations";

}  // namespace

QString ChatStore::defaultDirectory() {
  const QByteArray env = qgetenv("SHOAL_DATA_DIR");
  if (!env.isEmpty()) return QString::fromLocal8Bit(env);
  return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
}

ChatStore::ChatStore(const QString& directory)
    : m_connection("shoal-chats-" + QUuid::createUuid().toString(QUuid::WithoutBraces)) {
  if (!QDir().mkpath(directory)) {
    m_error = QObject::tr("cannot create the data directory %1").arg(directory);
    return;
  }
  m_path = QDir(directory).filePath("shoal-chats.sqlite");
  QSqlDatabase db = QSqlDatabase::addDatabase("QSQLITE", m_connection);
  db.setDatabaseName(m_path);
  if (!db.open()) {
    fail(QObject::tr("cannot open %1").arg(m_path), db.lastError().text());
    return;
  }
  // WAL: a reader never blocks the writer, and a committed transaction survives a kill.
  QSqlQuery q(db);
  if (!q.exec("PRAGMA journal_mode=WAL") || !q.next() ||
      q.value(0).toString().compare("wal", Qt::CaseInsensitive) != 0) {
    fail(QObject::tr("cannot switch %1 to WAL journal mode").arg(m_path), q.lastError().text());
    return;
  }
  q.finish();  // an open statement would keep the schema transaction from committing
  if (!exec("PRAGMA foreign_keys = ON")) return;
  if (!migrateSchema()) return;
}

// Brings the file to kSchemaVersion in one transaction, so a failure leaves it as it was: a new
// file gets the tables, a version-1 file the reasoning columns. A file from a newer Shoal is
// refused rather than written with columns this one does not know.
bool ChatStore::migrateSchema() {
  QSqlDatabase db = QSqlDatabase::database(m_connection);
  QSqlQuery version(db);
  if (!version.exec("PRAGMA user_version") || !version.next()) {
    return fail(QObject::tr("cannot read the schema version of %1").arg(m_path),
                version.lastError().text());
  }
  const int found = version.value(0).toInt();
  version.finish();
  if (found == kSchemaVersion) return true;
  if (found > kSchemaVersion) {
    return fail(QObject::tr("%1 was written by a newer Shoal (schema %2; this one reads %3)")
                    .arg(m_path)
                    .arg(found)
                    .arg(kSchemaVersion),
                QString());
  }
  if (!db.transaction()) {
    return fail(QObject::tr("cannot start a transaction on %1").arg(m_path), db.lastError().text());
  }
  bool ok = true;
  for (const char* sql : kSchema) ok = ok && exec(sql);
  if (found == 1) {
    for (const char* sql : kMigrationFrom1) ok = ok && exec(sql);
  }
  ok = ok && exec(QString("PRAGMA user_version = %1").arg(kSchemaVersion));
  if (!ok) {
    db.rollback();
    return false;
  }
  if (!db.commit()) {
    return fail(QObject::tr("cannot commit the schema of %1").arg(m_path), db.lastError().text());
  }
  return true;
}

ChatStore::~ChatStore() {
  {
    QSqlDatabase db = QSqlDatabase::database(m_connection, false);
    if (db.isValid()) db.close();
  }  // every handle to the connection must be gone before it is removed
  QSqlDatabase::removeDatabase(m_connection);
}

bool ChatStore::exec(const QString& sql) {
  QSqlQuery q(QSqlDatabase::database(m_connection));
  if (!q.exec(sql)) return fail(QObject::tr("SQL failed: %1").arg(sql), q.lastError().text());
  return true;
}

bool ChatStore::fail(const QString& what, const QString& sqlError) {
  m_error = sqlError.isEmpty() ? what : what + ": " + sqlError;
  return false;
}

QList<StoredConversation> ChatStore::conversations() {
  QList<StoredConversation> out;
  QSqlQuery q(QSqlDatabase::database(m_connection));
  if (!q.exec(QString(kConversationColumns) + " ORDER BY updated_at DESC, id DESC")) {
    fail(QObject::tr("cannot list conversations"), q.lastError().text());
    return out;
  }
  while (q.next()) out.push_back(readConversation(q));
  return out;
}

std::optional<StoredConversation> ChatStore::conversation(qint64 id) {
  QSqlQuery q(QSqlDatabase::database(m_connection));
  q.prepare(QString(kConversationColumns) + " WHERE id = ?");
  q.addBindValue(id);
  if (!q.exec()) {
    fail(QObject::tr("cannot read conversation %1").arg(id), q.lastError().text());
    return std::nullopt;
  }
  if (!q.next()) return std::nullopt;
  return readConversation(q);
}

qint64 ChatStore::createConversation(const QString& title, const QString& systemPrompt,
                                     const GenerationSettings& s) {
  QSqlQuery q(QSqlDatabase::database(m_connection));
  q.prepare(
      "INSERT INTO conversations (title, system_prompt, temperature, top_p, top_k, max_tokens, "
      "seed, created_at, updated_at, thinking, reasoning_effort) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  const qint64 now = nowMs();
  for (const QVariant& v :
       {text(title), text(systemPrompt), QVariant(s.temperature), QVariant(s.topP),
        QVariant(s.topK), QVariant(s.maxTokens), QVariant(s.seed), QVariant(now), QVariant(now),
        QVariant(s.thinking ? 1 : 0), text(s.reasoningEffort)}) {
    q.addBindValue(v);
  }
  if (!q.exec()) {
    fail(QObject::tr("cannot create a conversation"), q.lastError().text());
    return -1;
  }
  return q.lastInsertId().toLongLong();
}

bool ChatStore::renameConversation(qint64 id, const QString& title) {
  QSqlQuery q(QSqlDatabase::database(m_connection));
  q.prepare("UPDATE conversations SET title = ? WHERE id = ?");
  q.addBindValue(text(title));
  q.addBindValue(id);
  if (!q.exec())
    return fail(QObject::tr("cannot rename conversation %1").arg(id), q.lastError().text());
  return true;
}

bool ChatStore::updateConversationSettings(qint64 id, const QString& systemPrompt,
                                           const GenerationSettings& s) {
  QSqlQuery q(QSqlDatabase::database(m_connection));
  q.prepare(
      "UPDATE conversations SET system_prompt = ?, temperature = ?, top_p = ?, top_k = ?, "
      "max_tokens = ?, seed = ?, thinking = ?, reasoning_effort = ? WHERE id = ?");
  for (const QVariant& v : {text(systemPrompt), QVariant(s.temperature), QVariant(s.topP),
                            QVariant(s.topK), QVariant(s.maxTokens), QVariant(s.seed),
                            QVariant(s.thinking ? 1 : 0), text(s.reasoningEffort), QVariant(id)}) {
    q.addBindValue(v);
  }
  if (!q.exec())
    return fail(QObject::tr("cannot save settings of conversation %1").arg(id),
                q.lastError().text());
  return true;
}

bool ChatStore::deleteConversation(qint64 id) {
  QSqlDatabase db = QSqlDatabase::database(m_connection);
  if (!db.transaction())
    return fail(QObject::tr("cannot begin a transaction"), db.lastError().text());
  QSqlQuery q(db);
  // Messages explicitly too: the cascade depends on foreign_keys being on for this connection.
  q.prepare("DELETE FROM messages WHERE conversation_id = ?");
  q.addBindValue(id);
  bool good = q.exec();
  if (good) {
    q.prepare("DELETE FROM conversations WHERE id = ?");
    q.addBindValue(id);
    good = q.exec();
  }
  if (!good || !db.commit()) {
    const QString err = good ? db.lastError().text() : q.lastError().text();
    db.rollback();
    return fail(QObject::tr("cannot delete conversation %1").arg(id), err);
  }
  return true;
}

QList<StoredMessage> ChatStore::messages(qint64 conversationId) {
  QList<StoredMessage> out;
  QSqlQuery q(QSqlDatabase::database(m_connection));
  q.prepare(
      "SELECT id, role, content, has_stats, prompt_tokens, generated_tokens, context_used, "
      "context_length, dropped_turns, tokens_per_second, prefill_seconds, finish_reason "
      "FROM messages WHERE conversation_id = ? ORDER BY id");
  q.addBindValue(conversationId);
  if (!q.exec()) {
    fail(QObject::tr("cannot read messages of conversation %1").arg(conversationId),
         q.lastError().text());
    return out;
  }
  while (q.next()) {
    StoredMessage m;
    m.id = q.value(0).toLongLong();
    m.role = q.value(1).toString();
    m.content = q.value(2).toString();
    m.hasStats = q.value(3).toInt() != 0;
    if (m.hasStats) {
      m.stats.promptTokens = q.value(4).toInt();
      m.stats.generatedTokens = q.value(5).toInt();
      m.stats.contextUsed = q.value(6).toInt();
      m.stats.contextLength = q.value(7).toInt();
      m.stats.droppedTurns = q.value(8).toInt();
      m.stats.tokensPerSecond = q.value(9).toDouble();
      m.stats.prefillSeconds = q.value(10).toDouble();
      m.stats.finishReason = q.value(11).toString();
    }
    out.push_back(m);
  }
  return out;
}

qint64 ChatStore::addMessage(qint64 conversationId, const QString& role, const QString& content,
                             const std::optional<ReplyStats>& stats) {
  QSqlDatabase db = QSqlDatabase::database(m_connection);
  if (!db.transaction()) {
    fail(QObject::tr("cannot begin a transaction"), db.lastError().text());
    return -1;
  }
  const qint64 now = nowMs();
  QSqlQuery q(db);
  q.prepare(
      "INSERT INTO messages (conversation_id, role, content, created_at, has_stats, "
      "prompt_tokens, generated_tokens, context_used, context_length, dropped_turns, "
      "tokens_per_second, prefill_seconds, finish_reason) "
      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  const ReplyStats s = stats.value_or(ReplyStats{});
  for (const QVariant& v :
       {QVariant(conversationId), text(role), text(content), QVariant(now), QVariant(stats ? 1 : 0),
        QVariant(s.promptTokens), QVariant(s.generatedTokens), QVariant(s.contextUsed),
        QVariant(s.contextLength), QVariant(s.droppedTurns), QVariant(s.tokensPerSecond),
        QVariant(s.prefillSeconds), text(s.finishReason)}) {
    q.addBindValue(v);
  }
  bool good = q.exec();
  QString err = good ? QString() : q.lastError().text();
  const qint64 id = good ? q.lastInsertId().toLongLong() : -1;
  if (good) {
    QSqlQuery touch(db);
    touch.prepare("UPDATE conversations SET updated_at = ? WHERE id = ?");
    touch.addBindValue(now);
    touch.addBindValue(conversationId);
    good = touch.exec();
    if (!good) err = touch.lastError().text();
  }
  if (!good || !db.commit()) {
    if (good) err = db.lastError().text();
    db.rollback();
    fail(QObject::tr("cannot save a message of conversation %1").arg(conversationId), err);
    return -1;
  }
  return id;
}

bool ChatStore::updateMessage(qint64 id, const QString& content,
                              const std::optional<ReplyStats>& stats) {
  QSqlQuery q(QSqlDatabase::database(m_connection));
  if (stats) {
    q.prepare(
        "UPDATE messages SET content = ?, has_stats = 1, prompt_tokens = ?, generated_tokens = ?, "
        "context_used = ?, context_length = ?, dropped_turns = ?, tokens_per_second = ?, "
        "prefill_seconds = ?, finish_reason = ? WHERE id = ?");
    for (const QVariant& v :
         {text(content), QVariant(stats->promptTokens), QVariant(stats->generatedTokens),
          QVariant(stats->contextUsed), QVariant(stats->contextLength),
          QVariant(stats->droppedTurns), QVariant(stats->tokensPerSecond),
          QVariant(stats->prefillSeconds), text(stats->finishReason), QVariant(id)}) {
      q.addBindValue(v);
    }
  } else {
    q.prepare("UPDATE messages SET content = ? WHERE id = ?");
    q.addBindValue(text(content));
    q.addBindValue(id);
  }
  if (!q.exec()) return fail(QObject::tr("cannot update message %1").arg(id), q.lastError().text());
  if (q.numRowsAffected() != 1) {
    return fail(QObject::tr("cannot update message %1").arg(id), QObject::tr("no such message"));
  }
  return true;
}

bool ChatStore::deleteMessage(qint64 id) {
  QSqlQuery q(QSqlDatabase::database(m_connection));
  q.prepare("DELETE FROM messages WHERE id = ?");
  q.addBindValue(id);
  if (!q.exec()) return fail(QObject::tr("cannot delete message %1").arg(id), q.lastError().text());
  return true;
}

}  // namespace shoal::gui
