#pragma once
// Chat prompt formats. GGUF files carry a Jinja template (tokenizer.chat_template); Shoal does
// not run Jinja, it recognises which well-known format the template implements and renders that
// format natively. Users can override the choice by name.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shoal::model {

// A function call an assistant message made (OpenAI's tool_calls[].function).
struct ToolCall {
  std::string name;
  // The arguments object as the templates' `tojson` writes it: Python's json.dumps (", " and
  // ": " separators, the client's key order, non-ASCII characters as they are).
  std::string arguments;
};

struct ChatMessage {
  // "system", "user", "assistant"; "tool" (a tool's result) in the formats with tool calls.
  std::string role;
  std::string content;
  std::vector<ToolCall> toolCalls = {};  // an assistant message's calls (formats with tool calls)
};

// The formats Shoal renders. Each follows the model family's published template (the Jinja that
// ships with the model on Hugging Face); chat_template.cpp spells out each one's text.
enum class ChatFormat {
  ChatML,  // <|im_start|>role\n...<|im_end|>\n (Qwen, SmolLM, many fine-tunes)
  // ChatML for models that think first (Qwen3, QwQ, DeepSeek-R1 distills): earlier assistant
  // turns are written without their <think> block, as their templates do. Thinking is steered
  // by the model's own soft switches ("/think", "/no_think" in a user message).
  Qwen3,
  Llama3,  // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  // Llama 3.1, 3.2 and 3.3: Llama 3 with a system turn always written first ("Cutting Knowledge
  // Date: December 2023", "Today Date: ..." and the system prompt); with tools, "Environment:
  // ipython", the tools in the first user turn, a call as {"name": ..., "parameters": ...} and a
  // tool's result as an ipython turn.
  Llama31,
  Llama2,   // [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s><s>[INST] ...
  Gemma,    // <start_of_turn>user\n...<end_of_turn>\n, assistant is "model", no system role
  Mistral,  // [INST] ...[/INST] ...</s> (v3), system prompt folded into the last user turn
  Phi3,     // <|role|>\n...<|end|>\n (Phi-3, Phi-3.5)
  // Mistral's v7 (tekken) format, Mistral Small 3.x, Magistral, Devstral:
  // [SYSTEM_PROMPT]...[/SYSTEM_PROMPT][INST]...[/INST]...</s>
  MistralV7,
  // OpenAI's harmony format (gpt-oss): <|start|>role<|message|>...<|end|>, a system message
  // with the model identity, dates and reasoning effort, the system prompt as the developer's
  // instructions; replies come in channels (<|channel|>analysis<|message|>... for reasoning,
  // <|channel|>final<|message|>... for the answer).
  Harmony,
};

// Where a default system prompt holds the date of the conversation (see currentDate below).
inline constexpr std::string_view kTodayMarker = "{{today}}";

// A recognised template: its format plus what the template adds on its own.
struct ChatTemplate {
  ChatFormat format = ChatFormat::ChatML;
  // System prompt the template writes when the conversation does not start with a system
  // message (e.g. SmolLM2's "You are a helpful AI assistant named SmolLM, ..."); empty if none.
  // kTodayMarker stands where the template writes the current date (Mistral Small 3.x).
  std::string defaultSystemPrompt;
  // A render option rather than part of the template: false asks a thinking model (Qwen3) to
  // answer without reasoning, as its template's enable_thinking=false does (an empty <think>
  // block after the assistant prefix). Other formats ignore it.
  bool thinking = true;
  // Harmony: the "Reasoning:" effort of the system message (empty: "medium", or "low" when
  // thinking is false: gpt-oss always reasons, it can only be asked to reason less).
  std::string reasoningEffort;
  // The date templates write (harmony's "Current date:", kTodayMarker, Llama 3.2's "Today
  // Date:"), YYYY-MM-DD; empty: today, UTC.
  std::string currentDate;
  // Llama 3.1 and 3.3 write a fixed "Today Date: 26 Jul 2024" (their templates have no clock);
  // empty where the template writes the current date (Llama 3.2) or no date.
  std::string fixedDate;
  // A render option: the tools (OpenAI's `tools[]` entries) the reply may call, each as the
  // templates' `tojson` writes it (see ToolCall::arguments). Only formats with tool calls
  // (chatFormatHasToolCalls) take them; renderChat refuses tools for the others.
  std::vector<std::string> tools;
};

// Whether Shoal renders tools, tool calls and tool results in this format, and finds the calls
// in a reply: ChatML and Qwen3 (the Hermes convention Qwen2.5's and Qwen3's templates write,
// <tool_call>{"name": ..., "arguments": ...}</tool_call>), Llama31 (a reply that is one JSON
// object {"name": ..., "parameters": ...}) and Harmony (a message to functions.NAME); see
// toolCallSyntaxOf.
bool chatFormatHasToolCalls(ChatFormat format);

// How a format's replies write their calls.
enum class ToolCallSyntax {
  None,
  HermesTags,  // each call a JSON object between kToolCallOpen and kToolCallClose
  JsonReply,   // the whole reply is one JSON object (after an optional kPythonTag)
  // harmony: a message to functions.NAME (its header holds " to=functions.NAME"), its text the
  // arguments; runtime::ReasoningSplit finds them
  HarmonyRecipient,
};
ToolCallSyntax toolCallSyntaxOf(ChatFormat format);
// Llama 3.1's marker before a call (the models sometimes write it, the template never does).
inline constexpr std::string_view kPythonTag = "<|python_tag|>";

// A string as Python's json.dumps(s, ensure_ascii=False) writes it (the templates' `tojson` of
// a string): quoted, with '"', '\' and control characters escaped.
std::string pythonJsonQuote(std::string_view s);

// Where a reply in a format with tool calls writes each call: the JSON object between these.
inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";

std::string_view chatFormatName(ChatFormat format);  // "chatml", "llama3", "llama2", ...
// The format of a name as chatFormatName spells it (ASCII case ignored); nullopt if unknown.
std::optional<ChatFormat> chatFormatFromName(std::string_view name);
// Every format's name, for help texts and error messages ("chatml, llama3, ...").
std::vector<std::string_view> chatFormatNames();

// Recognise a Jinja template by the marker strings each format writes; ChatML when empty or
// unrecognised. Also extracts the default system prompt when the template writes a literal one.
ChatTemplate detectChatTemplate(std::string_view jinjaTemplate);
// detectChatTemplate(jinjaTemplate).format.
ChatFormat detectChatFormat(std::string_view jinjaTemplate);

// Render the conversation; with addAssistantPrefix the text ends where the assistant's reply
// begins. BOS is not included (the tokenizer adds it when the model wants one); BOS/EOS text
// inside the history (Llama 2's "</s><s>") is, so encode with parseSpecial. Roles other than
// system/user/assistant pass through in Llama 3 and are refused (shoal::Error) in the formats
// that have no way to write them; ChatML and Qwen3 write "tool" results as their templates do.
// Tool calls in a format without them are refused too.
std::string renderChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                       bool addAssistantPrefix);
// As above, and writes the template's default system prompt first when the conversation does
// not start with a system message, as the template itself does.
std::string renderChat(const ChatTemplate& chatTemplate, const std::vector<ChatMessage>& messages,
                       bool addAssistantPrefix);

// The answer of an assistant message as a harmony reply wrote it: the text of its last final
// channel (the reply without channels as it is), without a closing <|end|> or <|return|>.
std::string harmonyFinalText(std::string_view reply);

// Strings that end an assistant turn in this format (e.g. "<|im_end|>"), used as stop strings.
std::vector<std::string> chatStopStrings(ChatFormat format);

}  // namespace shoal::model
