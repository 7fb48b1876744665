// ReasoningSplit: a leading <think> block becomes the reasoning, the rest the answer, however
// the text is cut into pushes (tags split across tokens, newlines around the block).

#include <QtTest>
#include <string>
#include <vector>

#include "engine/runtime/reasoning_split.h"

using shoal::runtime::ReasoningSplit;

namespace {

struct Split {
  std::string reasoning, content;
  std::vector<std::string> addressed;  // "recipient|text"
};

// Push `pieces` one by one, then finish; the concatenated parts.
Split run(const std::vector<std::string>& pieces, bool startsInReasoning = false) {
  ReasoningSplit s(startsInReasoning);
  Split out;
  for (const std::string& p : pieces) {
    const ReasoningSplit::Parts parts = s.push(p);
    out.reasoning += parts.reasoning;
    out.content += parts.content;
    for (const auto& a : parts.addressed) out.addressed.push_back(a.recipient + "|" + a.text);
  }
  const ReasoningSplit::Parts last = s.finish();
  out.reasoning += last.reasoning;
  out.content += last.content;
  for (const auto& a : last.addressed) out.addressed.push_back(a.recipient + "|" + a.text);
  return out;
}

// Every way of cutting `text` in two and in single characters gives the same split.
void checkAllCuts(const std::string& text, const std::string& reasoning,
                  const std::string& content) {
  std::vector<std::string> chars;
  for (char c : text) chars.emplace_back(1, c);
  Split byChar = run(chars);
  QCOMPARE(byChar.reasoning, reasoning);
  QCOMPARE(byChar.content, content);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const Split s = run({text.substr(0, cut), text.substr(cut)});
    QVERIFY2(s.reasoning == reasoning && s.content == content,
             qPrintable(
                 QString("cut at %1: [%2] [%3]")
                     .arg(cut)
                     .arg(QString::fromStdString(s.reasoning), QString::fromStdString(s.content))));
  }
}

}  // namespace

class TestReasoningSplit : public QObject {
  Q_OBJECT

 private slots:
  void aThinkBlockIsTheReasoningAndTheRestTheAnswer() {
    checkAllCuts("<think>\nThe user greets me.\nBe brief.\n</think>\n\nHello!",
                 "The user greets me.\nBe brief.", "Hello!");
  }

  void anEmptyBlockGivesNoReasoning() {
    // Qwen3 with /no_think writes an empty block.
    checkAllCuts("<think>\n\n</think>\n\nHi there.", "", "Hi there.");
  }

  void aReplyWithoutABlockIsAllAnswer() {
    checkAllCuts("Hello <think> is just text here", "", "Hello <think> is just text here");
    checkAllCuts("<thinking>no</thinking>", "", "<thinking>no</thinking>");
    checkAllCuts("  \n<b>bold</b>", "", "  \n<b>bold</b>");
  }

  void aLaterBlockIsPartOfTheAnswer() {
    checkAllCuts("Answer first. <think>x</think> more", "", "Answer first. <think>x</think> more");
  }

  void anUnterminatedBlockIsReasoning() {
    checkAllCuts("<think>\nstill thinking when the tokens ran out\n",
                 "still thinking when the tokens ran out", "");
  }

  void aPromptThatOpenedTheBlockStartsInReasoning() {
    const Split s = run({"I should ", "answer.\n</th", "ink>\n\nYes."}, true);
    QCOMPARE(s.reasoning, std::string("I should answer."));
    QCOMPARE(s.content, std::string("Yes."));
  }

  void textIsGivenOutAsSoonAsItCannotBeATag() {
    ReasoningSplit s;
    QCOMPARE(s.push("<thi").content, std::string());
    QCOMPARE(s.push("nk>step one").reasoning, std::string("step one"));
    QCOMPARE(s.push(" </").reasoning, std::string(" "));
    const ReasoningSplit::Parts p = s.push("think>\n\nDone");
    QCOMPARE(p.reasoning, std::string());
    QCOMPARE(p.content, std::string("Done"));
  }

  // gpt-oss's harmony channels: analysis is the reasoning, final the answer; the headers,
  // <|end|> and <|start|>assistant between messages are neither.
  void harmonyAnalysisIsTheReasoningAndFinalTheAnswer() {
    checkAllCuts(
        "<|channel|>analysis<|message|>User greets. Reply briefly.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?",
        "User greets. Reply briefly.", "Hello! How can I help?");
    // A stop token kept in the text ends the final message too.
    checkAllCuts("<|channel|>final<|message|>Only an answer.<|return|>", "", "Only an answer.");
  }

  void harmonyCommentaryIsAnswerAndASecondAnalysisJoinsTheFirst() {
    checkAllCuts(
        "<|channel|>analysis<|message|>one<|end|><|start|>assistant<|channel|>commentary"
        "<|message|>Let me check.<|end|><|start|>assistant<|channel|>analysis<|message|>"
        "two<|end|><|start|>assistant<|channel|>final<|message|>Done.",
        "one\n\ntwo", "Let me check.Done.");
  }

  // Cut off mid-reasoning (max tokens), the analysis so far is reasoning; a reply that does not
  // open with a header is all answer, tags included.
  void harmonyUnfinishedAndHeaderlessReplies() {
    checkAllCuts("<|channel|>analysis<|message|>Thinking so f", "Thinking so f", "");
    checkAllCuts("Plain text <|channel|> here", "", "Plain text <|channel|> here");
    checkAllCuts("<|chan", "", "<|chan");
  }

  // Tool calls: a message to a recipient, named in the channel header or after
  // <|start|>assistant (or first thing in the reply, after the prompt's <|start|>assistant),
  // comes out whole as addressed, never as reasoning or answer. The reply ends at <|call|> (a
  // stop string, so usually absent).
  void harmonyMessagesToARecipientAreAddressed() {
    const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
        {"<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
         "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Rome\"}",
         {"functions.get_weather|{\"city\":\"Rome\"}"}},
        {"<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant "
         "to=functions.add<|channel|>commentary json<|message|>{\"a\": 1}<|call|>",
         {"functions.add|{\"a\": 1}"}},
        {" to=functions.now<|channel|>commentary json<|message|>{}", {"functions.now|{}"}},
    };
    for (const auto& [reply, addressed] : cases) {
      std::vector<std::string> chars;
      for (char c : reply) chars.emplace_back(1, c);
      for (const auto& pieces : {std::vector<std::string>{reply}, chars}) {
        const Split got = run(pieces);
        QCOMPARE(got.addressed, addressed);
        QCOMPARE(got.content, std::string());
        QCOMPARE(got.reasoning, std::string(reply.starts_with(" to=") ? "" : "Need the weather."));
      }
    }
    // "to=" that leads to no channel header is text.
    checkAllCuts("to= be or not", "", "to= be or not");
  }
};

QTEST_GUILESS_MAIN(TestReasoningSplit)
#include "test_reasoning_split.moc"
