#include "app/gui/transcript_markdown.h"

#include <QObject>
#include <QStringList>

#include "engine/runtime/reasoning_split.h"

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

constexpr const char* kReasoningScheme = "shoal-reasoning";

// A reply's text with its reasoning collapsed or quoted (see transcriptMarkdown).
QString replyMarkdown(const QString& text, qint64 id, bool expanded, bool streaming) {
  const shoal::runtime::ReasoningSplit::Parts parts =
      shoal::runtime::ReasoningSplit::split(text.toStdString());
  const QString reasoning = QString::fromStdString(parts.reasoning).trimmed();
  const QString content = QString::fromStdString(parts.content);
  if (reasoning.isEmpty()) return closedFences(content);
  const QString link = QString("%1:%2").arg(kReasoningScheme).arg(id);
  const int words = static_cast<int>(reasoning.split(' ', Qt::SkipEmptyParts).size());
  QString md;
  if (expanded) {
    md = QString("[%1](%2)\n\n").arg(QObject::tr("▾ Hide reasoning"), link);
    for (const QString& line : closedFences(reasoning).split('\n')) md += "> " + line + "\n";
    md += "\n";
  } else {
    const QString label = streaming && content.isEmpty()
                              ? QObject::tr("▸ Thinking… (%n words)", nullptr, words)
                              : QObject::tr("▸ Show reasoning (%n words)", nullptr, words);
    md = QString("[%1](%2)\n\n").arg(label, link);
  }
  return md + closedFences(content);
}

}  // namespace

bool reasoningLinkTarget(const QUrl& link, qint64& messageId) {
  if (link.scheme() != kReasoningScheme) return false;
  bool ok = false;
  messageId = link.path().toLongLong(&ok);
  return ok;
}

QString replyStatsLine(const ReplyStats& s) {
  QString line = QObject::tr("%1 tokens/s · %2 tokens · prompt %3 · context %4/%5 · %6")
                     .arg(s.tokensPerSecond, 0, 'f', 1)
                     .arg(s.generatedTokens)
                     .arg(s.promptTokens)
                     .arg(s.contextUsed)
                     .arg(s.contextLength)
                     .arg(finishText(s.finishReason));
  if (s.draftedTokens > 0) {
    line += QObject::tr(" · drafts %1% accepted")
                .arg(100.0 * s.acceptedTokens / s.draftedTokens, 0, 'f', 0);
  }
  if (s.droppedTurns > 0) {
    line +=
        QObject::tr(" · %n oldest turn(s) left out to fit the context", nullptr, s.droppedTurns);
  }
  return line;
}

QString transcriptMarkdown(const QList<StoredMessage>& messages, const QString& streaming,
                           bool streamingActive, const QSet<qint64>& expandedReasoning) {
  QString md;
  for (const StoredMessage& m : messages) {
    md += m.role == "user" ? QObject::tr("#### You") : QObject::tr("#### Assistant");
    md += "\n\n" +
          (m.role == "assistant"
               ? replyMarkdown(m.content, m.id, expandedReasoning.contains(m.id), false)
               : closedFences(m.content)) +
          "\n\n";
    if (m.hasStats) {
      md += "*" + replyStatsLine(m.stats) + "*\n\n";
    } else if (m.role == "assistant") {
      md +=
          "*" + QObject::tr("cut off: the app ended while this reply was being written") + "*\n\n";
    }
  }
  if (streamingActive) {
    md += QObject::tr("#### Assistant") + "\n\n" +
          replyMarkdown(streaming, kStreamingMessageId,
                        expandedReasoning.contains(kStreamingMessageId), true);
    md += streaming.isEmpty() ? QObject::tr("*…thinking*") : QStringLiteral(" ▍");
    md += "\n\n";
  }
  return md;
}

}  // namespace shoal::gui
