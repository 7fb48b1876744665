#pragma once
// Splits a reply's answer into its text and the tool calls it writes, in the formats whose
// templates follow the Hermes convention (model::chatFormatHasToolCalls): each call is a JSON
// object between <tool_call> and </tool_call>. The calls come out as the raw text between the
// tags; reading them as JSON is the caller's (the API's) job, and a caller that cannot read one
// gives it back as text.
//
// Streamed like ReasoningSplit: a tag split across pushes is held back until it cannot be one.
// Whitespace after a call is dropped unless text follows it (models put newlines between calls
// and before the end of the turn).

#include <string>
#include <string_view>
#include <vector>

namespace shoal::runtime {

class ToolCallSplit {
 public:
  struct Parts {
    std::string content;             // answer text that became final
    std::vector<std::string> calls;  // each completed call: the text between its tags
  };

  Parts push(std::string_view text);
  // End of the reply: what was held back. An unterminated call (the reply was cut off) is text,
  // its opening tag included.
  Parts finish();

  // A whole reply at once (push then finish).
  static Parts split(std::string_view reply);

 private:
  void run(Parts& out);

  bool m_inCall = false;     // between <tool_call> and </tool_call>
  bool m_afterCall = false;  // a call ended and no text has followed it yet
  std::string m_held;        // text not yet given out
};

}  // namespace shoal::runtime
