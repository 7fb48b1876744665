#pragma once
// Splits a streamed reply into its reasoning and its answer: models that think before they
// answer (Qwen3, QwQ, DeepSeek-R1 and their distills) open the reply with a <think> ... </think>
// block. The reasoning is the text inside it (without the tags and the newlines around it), the
// answer what follows (without the newlines right after </think>). A reply that does not begin
// with <think> (leading whitespace aside) is all answer.
//
// gpt-oss writes its reply in harmony channels instead (a reply that opens with <|channel|>): a
// header <|channel|>NAME<|message|>, the text, <|end|>, then <|start|>assistant and the next
// header. The analysis channel is the reasoning; every other channel (final, commentary) is
// answer; the headers and tags are neither. A message addressed to a recipient (" to=NAME"
// after <|start|>assistant or in its channel header: a tool call, "functions.get_weather") is
// neither too: it comes out whole, with its recipient, once it ends. So one splitter serves
// every chat format.
//
// Tags may arrive split across pushes: text that might still turn into a tag is held back until
// it cannot.

#include <string>
#include <string_view>
#include <vector>

namespace shoal::runtime {

class ReasoningSplit {
 public:
  // A harmony message to a recipient (a tool call: its text is the arguments).
  struct Addressed {
    std::string recipient;  // "functions.get_weather"
    std::string text;
  };
  struct Parts {
    std::string reasoning;
    std::string content;
    std::vector<Addressed> addressed = {};
  };

  // startsInReasoning: the prompt already opened the block (its template ends the assistant
  // prefix with "<think>\n"), so the reply begins inside it.
  explicit ReasoningSplit(bool startsInReasoning = false);

  // The parts that became final with this text (either may be empty).
  Parts push(std::string_view text);
  // End of the reply: what was held back (an unterminated block is reasoning).
  Parts finish();

  // A whole reply at once (push then finish).
  static Parts split(std::string_view reply, bool startsInReasoning = false);

 private:
  enum class State {
    Start,       // nothing but whitespace yet: a <think> or a harmony header may still open
    Reasoning,   // inside the block
    AfterThink,  // right after </think>: newlines are dropped
    Content,     // the answer, passed through
    // Harmony:
    Header,   // before a message: <|start|>assistant and <|channel|>NAME<|message|> expected
    Message,  // inside a message, up to <|end|> (its channel in m_analysis)
  };
  void run(Parts& out);
  bool runHarmony(Parts& out);  // one step of the Header/Message states; false: wait for text

  State m_state;
  bool m_analysis = false;          // the current harmony message is reasoning
  std::string m_held;               // text not yet given out
  bool m_reasoningStarted = false;  // a non-newline character of reasoning was given out
  std::string m_recipient;          // the current harmony message's recipient, if any
  std::string m_addressed;          // that message's text so far
};

}  // namespace shoal::runtime
