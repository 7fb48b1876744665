#pragma once
// The transcript of a conversation as Markdown, for QTextDocument::setMarkdown (which renders
// headings, emphasis, lists and fenced code blocks).

#include <QList>
#include <QString>

#include "app/gui/chat_store.h"

namespace shoal::gui {

// One line under a reply: speed, prompt and context use, and why it ended.
QString replyStatsLine(const ReplyStats& stats);

// Every message with a heading per speaker; `streaming` (when `streamingActive`) is the reply
// being generated, shown last.
QString transcriptMarkdown(const QList<StoredMessage>& messages, const QString& streaming,
                           bool streamingActive);

}  // namespace shoal::gui
