#pragma once
// ChatStore: conversations and their messages in an SQLite database (QtSql), one file
// `shoal-chats.sqlite` in the data directory.
//
// Durability: the database runs in WAL journal mode with SQLite's default synchronous=FULL, and
// every change is its own transaction, committed before the call returns. The GUI saves a user
// message when it is sent, the reply being generated about once a second (a message without
// stats), and the reply with its stats when it is finished or stopped, so killing the app loses
// at most the last second of the reply.
//
// Used from the GUI thread only (a QSqlDatabase connection belongs to the thread that made it).

#include <QDateTime>
#include <QList>
#include <QSqlDatabase>
#include <QString>
#include <optional>

#include "app/gui/chat_types.h"

namespace shoal::gui {

struct StoredConversation {
  qint64 id = 0;
  QString title;
  QString systemPrompt;  // empty: the model template's default system prompt
  GenerationSettings settings;
  QDateTime updatedAt;  // last message or change
};

struct StoredMessage {
  qint64 id = 0;
  QString role;  // "user" or "assistant"
  QString content;
  bool hasStats = false;  // finished replies carry the stats of their generation; a reply
                          // without them was cut off (the app ended while generating it)
  ReplyStats stats;
};

class ChatStore {
 public:
  // $SHOAL_DATA_DIR when set (tests), else QStandardPaths::AppDataLocation.
  static QString defaultDirectory();

  // Opens (creating the directory, file and tables as needed). Check ok()/error() after.
  explicit ChatStore(const QString& directory);
  ~ChatStore();
  ChatStore(const ChatStore&) = delete;
  ChatStore& operator=(const ChatStore&) = delete;

  bool ok() const { return m_error.isEmpty(); }
  QString error() const { return m_error; }  // the last failure, with the SQL error text
  QString filePath() const { return m_path; }

  // Newest first (by updatedAt).
  QList<StoredConversation> conversations();
  std::optional<StoredConversation> conversation(qint64 id);
  // The new conversation's id, or -1 on failure.
  qint64 createConversation(const QString& title, const QString& systemPrompt,
                            const GenerationSettings& settings);
  bool renameConversation(qint64 id, const QString& title);
  bool updateConversationSettings(qint64 id, const QString& systemPrompt,
                                  const GenerationSettings& settings);
  bool deleteConversation(qint64 id);  // and its messages

  // Oldest first.
  QList<StoredMessage> messages(qint64 conversationId);
  // Saves one complete message (and touches the conversation); the new id, or -1 on failure.
  qint64 addMessage(qint64 conversationId, const QString& role, const QString& content,
                    const std::optional<ReplyStats>& stats = std::nullopt);
  // Replaces a message's content (and, when given, sets its stats): a reply saved while it was
  // being generated, then finished.
  bool updateMessage(qint64 id, const QString& content,
                     const std::optional<ReplyStats>& stats = std::nullopt);
  bool deleteMessage(qint64 id);

 private:
  bool exec(const QString& sql);
  bool migrateSchema();
  bool fail(const QString& what, const QString& sqlError);

  QString m_connection;  // unique QSqlDatabase connection name of this store
  QString m_path;
  QString m_error;
};

}  // namespace shoal::gui
