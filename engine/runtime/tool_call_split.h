#pragma once
// Splits a reply's answer into its text and the tool calls it writes, in the formats with tool
// calls (model::toolCallSyntaxOf):
// - HermesTags (ChatML, Qwen3): each call is a JSON object between <tool_call> and
//   </tool_call>, anywhere in the answer. Whitespace after a call is dropped unless text follows
//   it (models put newlines between calls and before the end of the turn). A tag cut across
//   pushes is held back until it cannot be one.
// - JsonReply (Llama 3.1): an answer that opens (after whitespace) with "{" or <|python_tag|> is
//   one call, held back until the end; any other answer streams as text.
// The calls come out as the raw JSON text; reading it is the caller's (the API's) job, and a
// caller that cannot read one gives back its `original` text as content.

#include <string>
#include <string_view>
#include <vector>

#include "engine/model/chat_template.h"

namespace shoal::runtime {

class ToolCallSplit {
 public:
  struct Call {
    std::string body;      // the JSON text of the call
    std::string original;  // the answer's text it came from, tags included
  };
  struct Parts {
    std::string content;      // answer text that became final
    std::vector<Call> calls;  // each completed call
  };

  explicit ToolCallSplit(model::ToolCallSyntax syntax = model::ToolCallSyntax::HermesTags);

  Parts push(std::string_view text);
  // End of the reply: what was held back. An unterminated Hermes call (the reply was cut off) is
  // text, its opening tag included.
  Parts finish();

  // A whole reply at once (push then finish).
  static Parts split(std::string_view reply,
                     model::ToolCallSyntax syntax = model::ToolCallSyntax::HermesTags);

 private:
  void runTags(Parts& out);
  void runJsonReply(Parts& out);

  model::ToolCallSyntax m_syntax;
  bool m_inCall = false;     // HermesTags: between <tool_call> and </tool_call>
  bool m_afterCall = false;  // HermesTags: a call ended and no text has followed it yet
  // JsonReply: 0 = only whitespace so far, 1 = the answer is a call (held), 2 = it is text.
  int m_replyKind = 0;
  std::string m_held;  // text not yet given out
};

}  // namespace shoal::runtime
