// The transcript's Markdown: a reply's <think> reasoning is collapsed into a link that names its
// length, quoted under a "Hide reasoning" link once expanded, and never mixed into the answer;
// the reply's stats line.

#include <QTextDocument>
#include <QtTest>

#include "app/gui/transcript_markdown.h"

using namespace shoal::gui;

namespace {

QList<StoredMessage> conversation() {
  StoredMessage user;
  user.id = 1;
  user.role = "user";
  user.content = "2+2? /think";
  StoredMessage reply;
  reply.id = 2;
  reply.role = "assistant";
  reply.content = "<think>\nAdd two and two.\n</think>\n\nIt is **4**.";
  reply.hasStats = true;
  return {user, reply};
}

}  // namespace

class TestTranscriptMarkdown : public QObject {
  Q_OBJECT

 private slots:
  // A reply decoded speculatively shows the share of drafts the model confirmed next to its
  // speed; one without drafts does not mention them.
  void statsLineShowsTheDraftsAccepted() {
    ReplyStats s;
    s.tokensPerSecond = 42.0;
    s.generatedTokens = 100;
    s.finishReason = "eog";
    QVERIFY(!replyStatsLine(s).contains("drafts"));
    s.draftedTokens = 40;
    s.acceptedTokens = 30;
    QVERIFY2(replyStatsLine(s).contains("42.0 tokens/s · 100 tokens"),
             qPrintable(replyStatsLine(s)));
    QVERIFY2(replyStatsLine(s).contains("drafts 75% accepted"), qPrintable(replyStatsLine(s)));
  }

  void reasoningIsCollapsedUntilExpanded() {
    const QString collapsed = transcriptMarkdown(conversation(), {}, false);
    QVERIFY2(collapsed.contains("Show reasoning (4 words)"), qPrintable(collapsed));
    QVERIFY(collapsed.contains("(shoal-reasoning:2)"));
    QVERIFY(!collapsed.contains("Add two"));
    QVERIFY(!collapsed.contains("<think>"));
    QVERIFY(collapsed.contains("It is **4**."));

    const QString expanded = transcriptMarkdown(conversation(), {}, false, {2});
    QVERIFY(expanded.contains("Hide reasoning"));
    QVERIFY(expanded.contains("> Add two and two."));
    QTextDocument doc;
    doc.setMarkdown(expanded);
    QVERIFY(doc.toPlainText().contains("It is 4."));
  }

  void theReplyBeingWrittenShowsThatItIsThinking() {
    const QString md = transcriptMarkdown({}, "<think>\nWeighing the options", true);
    QVERIFY2(md.contains("Thinking… (3 words)"), qPrintable(md));
    QVERIFY(md.contains(QString("(shoal-reasoning:%1)").arg(kStreamingMessageId)));
  }

  void reasoningLinksNameTheirMessage() {
    qint64 id = 0;
    QVERIFY(reasoningLinkTarget(QUrl("shoal-reasoning:42"), id));
    QCOMPARE(id, qint64{42});
    QVERIFY(!reasoningLinkTarget(QUrl("https://example.org/"), id));
  }
};

QTEST_MAIN(TestTranscriptMarkdown)
#include "test_transcript_markdown.moc"
