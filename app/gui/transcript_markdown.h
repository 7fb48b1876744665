#pragma once
// The transcript of a conversation as Markdown, for QTextDocument::setMarkdown (which renders
// headings, emphasis, lists and fenced code blocks).

#include <QList>
#include <QSet>
#include <QString>
#include <QUrl>

#include "app/gui/chat_store.h"

namespace shoal::gui {

// One line under a reply: speed, prompt and context use, and why it ended.
QString replyStatsLine(const ReplyStats& stats);

// Every message with a heading per speaker; `streaming` (when `streamingActive`) is the reply
// being generated, shown last. A reply's reasoning (a leading <think> block) is collapsed into a
// "Show reasoning" link, or shown as a quote under a "Hide reasoning" link when its message id
// is in `expandedReasoning` (kStreamingMessageId for the reply being generated).
inline constexpr qint64 kStreamingMessageId = -1;
QString transcriptMarkdown(const QList<StoredMessage>& messages, const QString& streaming,
                           bool streamingActive, const QSet<qint64>& expandedReasoning = {});

// The message id a reasoning link toggles, or nullopt-like false for any other link.
bool reasoningLinkTarget(const QUrl& link, qint64& messageId);

}  // namespace shoal::gui
