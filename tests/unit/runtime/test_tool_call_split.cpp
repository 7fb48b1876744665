// ToolCallSplit: <tool_call> blocks (Hermes) or a whole JSON reply (Llama 3.1) come out as calls
// and the rest as text, however the reply is cut into pushes (tags split across tokens), with
// the whitespace around Hermes calls dropped; each call keeps the text it came from.

#include <QtTest>
#include <string>
#include <vector>

#include "engine/runtime/tool_call_split.h"

using shoal::model::ToolCallSyntax;
using shoal::runtime::ToolCallSplit;

namespace {

// Push `pieces` one by one, then finish; the concatenated parts.
ToolCallSplit::Parts run(const std::vector<std::string>& pieces, ToolCallSyntax syntax) {
  ToolCallSplit s(syntax);
  ToolCallSplit::Parts out;
  auto take = [&out](ToolCallSplit::Parts p) {
    out.content += p.content;
    for (ToolCallSplit::Call& c : p.calls) out.calls.push_back(std::move(c));
  };
  for (const std::string& p : pieces) take(s.push(p));
  take(s.finish());
  return out;
}

std::vector<std::string> bodies(const ToolCallSplit::Parts& p) {
  std::vector<std::string> out;
  for (const ToolCallSplit::Call& c : p.calls) out.push_back(c.body);
  return out;
}

// Whole, cut into single characters, and cut in two at every place: the same split.
void checkAllCuts(const std::string& reply, const std::string& content,
                  const std::vector<std::string>& calls,
                  ToolCallSyntax syntax = ToolCallSyntax::HermesTags) {
  std::vector<std::vector<std::string>> cuts = {{reply}};
  std::vector<std::string> chars;
  for (char c : reply) chars.emplace_back(1, c);
  cuts.push_back(chars);
  for (size_t at = 1; at < reply.size(); ++at)
    cuts.push_back({reply.substr(0, at), reply.substr(at)});
  for (const auto& pieces : cuts) {
    const ToolCallSplit::Parts got = run(pieces, syntax);
    QCOMPARE(got.content, content);
    QCOMPARE(bodies(got), calls);
  }
  const ToolCallSplit::Parts whole = ToolCallSplit::split(reply, syntax);
  QCOMPARE(whole.content, content);
  QCOMPARE(bodies(whole), calls);
}

}  // namespace

class TestToolCallSplit : public QObject {
  Q_OBJECT

 private slots:
  void textWithoutCallsPassesThrough() {
    checkAllCuts("Paris is the capital. a < b, <tool> is not a call.",
                 "Paris is the capital. a < b, <tool> is not a call.", {});
  }

  void callsComeOutWithoutTheWhitespaceBetweenThem() {
    checkAllCuts(
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
        "\"b\", \"arguments\": {\"x\": 1}}\n</tool_call>\n",
        "",
        {"\n{\"name\": \"a\", \"arguments\": {}}\n",
         "\n{\"name\": \"b\", \"arguments\": {\"x\": 1}}\n"});
  }

  void textBeforeAndAfterACallStays() {
    checkAllCuts("Let me check.\n<tool_call>{}</tool_call>\n\nDone.", "Let me check.\n\n\nDone.",
                 {"{}"});
  }

  void anUnterminatedCallIsText() {
    checkAllCuts("Sure. <tool_call>{\"name\": \"a\"", "Sure. <tool_call>{\"name\": \"a\"", {});
  }

  void aTagCutOffAtTheEndIsText() { checkAllCuts("Hmm <tool_ca", "Hmm <tool_ca", {}); }

  void partialTagIsHeldUntilItCannotBeOne() {
    ToolCallSplit s;
    QCOMPARE(s.push("ok <tool").content, std::string("ok "));
    QCOMPARE(s.push("box>").content, std::string("<toolbox>"));
    QCOMPARE(s.push("<tool_call>{\"n").content, std::string());
    const ToolCallSplit::Parts p = s.push("\": 1}</tool_call>  ");
    QCOMPARE(bodies(p), std::vector<std::string>{"{\"n\": 1}"});
    QCOMPARE(p.calls[0].original, std::string("<tool_call>{\"n\": 1}</tool_call>"));
    QCOMPARE(p.content, std::string());  // whitespace waits after a call
    QCOMPARE(s.push(" then").content, std::string("   then"));
  }

  void aJsonReplyIsOneCallWithOrWithoutThePythonTag() {
    checkAllCuts(" {\"name\": \"f\", \"parameters\": {}}", "",
                 {"{\"name\": \"f\", \"parameters\": {}}"}, ToolCallSyntax::JsonReply);
    checkAllCuts("<|python_tag|>{\"name\": \"f\"}", "", {"{\"name\": \"f\"}"},
                 ToolCallSyntax::JsonReply);
    const ToolCallSplit::Parts p =
        ToolCallSplit::split("\n<|python_tag|>{}", ToolCallSyntax::JsonReply);
    QCOMPARE(p.calls[0].original, std::string("\n<|python_tag|>{}"));
  }

  void aJsonReplyHoldsEverythingAndOtherRepliesStream() {
    ToolCallSplit json(ToolCallSyntax::JsonReply);
    QCOMPARE(json.push("  <|pyth").content, std::string());
    QCOMPARE(json.push("on_tag|>{\"a\"").content, std::string());
    QCOMPARE(json.finish().calls.size(), size_t(1));
    ToolCallSplit text(ToolCallSyntax::JsonReply);
    QCOMPARE(text.push(" <|py").content, std::string());
    QCOMPARE(text.push("x, I think").content, std::string(" <|pyx, I think"));
    QCOMPARE(text.push(" {not a call}").content, std::string(" {not a call}"));
    const ToolCallSplit::Parts end = text.finish();
    QVERIFY(end.calls.empty() && end.content.empty());
    // A Hermes tag means nothing to this syntax.
    checkAllCuts("Hi <tool_call>{}</tool_call>", "Hi <tool_call>{}</tool_call>", {},
                 ToolCallSyntax::JsonReply);
  }
};

QTEST_APPLESS_MAIN(TestToolCallSplit)
#include "test_tool_call_split.moc"
