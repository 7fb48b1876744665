#include "app/gui/transcript_markdown.h"

#include <QObject>

namespace shoal::gui {
namespace {

// A reply cut off in the middle of a fenced code block would swallow everything after it into
// the block; close an odd fence so the next heading renders as a heading.
QString closedFences(const QString& text) {
  const qsizetype fences = text.count(QStringLiteral("```"));
  return fences % 2 ? text + QStringLiteral("\n```") : text;
}

QString finishText(const QString& reason) {
  if (reason == "eog" || reason == "stop") return QObject::tr("done");
  if (reason == "length") return QObject::tr("max tokens reached");
  if (reason == "context_full") return QObject::tr("context full");
  if (reason == "cancelled") return QObject::tr("stopped");
  return reason;
}

}  // namespace

QString replyStatsLine(const ReplyStats& s) {
  QString line = QObject::tr("%1 tokens/s · %2 tokens · prompt %3 · context %4/%5 · %6")
                     .arg(s.tokensPerSecond, 0, 'f', 1)
                     .arg(s.generatedTokens)
                     .arg(s.promptTokens)
                     .arg(s.contextUsed)
                     .arg(s.contextLength)
                     .arg(finishText(s.finishReason));
  if (s.droppedTurns > 0) {
    line +=
        QObject::tr(" · %n oldest turn(s) left out to fit the context", nullptr, s.droppedTurns);
  }
  return line;
}

QString transcriptMarkdown(const QList<StoredMessage>& messages, const QString& streaming,
                           bool streamingActive) {
  QString md;
  for (const StoredMessage& m : messages) {
    md += m.role == "user" ? QObject::tr("#### You") : QObject::tr("#### Assistant");
    md += "\n\n" + closedFences(m.content) + "\n\n";
    if (m.hasStats) {
      md += "*" + replyStatsLine(m.stats) + "*\n\n";
    } else if (m.role == "assistant") {
      md +=
          "*" + QObject::tr("cut off: the app ended while this reply was being written") + "*\n\n";
    }
  }
  if (streamingActive) {
    md += QObject::tr("#### Assistant") + "\n\n" + closedFences(streaming);
    md += streaming.isEmpty() ? QObject::tr("*…thinking*") : QStringLiteral(" ▍");
    md += "\n\n";
  }
  return md;
}

}  // namespace shoal::gui
