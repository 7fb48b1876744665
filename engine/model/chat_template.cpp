// Native renderers for the chat formats Shoal knows, and recognition of them from the Jinja
// source a GGUF carries. The text of each format follows the model family's own template
// (cited per renderer); the leading BOS those templates write is left to the tokenizer.

#include "engine/model/chat_template.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdio>

#include "engine/error.h"
#include "engine/model/harmony_tools.h"

namespace shoal::model {
namespace {

struct FormatName {
  ChatFormat format;
  std::string_view name;
};

constexpr std::array<FormatName, 10> kFormatNames = {{
    {ChatFormat::ChatML, "chatml"},
    {ChatFormat::Qwen3, "qwen3"},
    {ChatFormat::Llama3, "llama3"},
    {ChatFormat::Llama31, "llama3.1"},
    {ChatFormat::Llama2, "llama2"},
    {ChatFormat::Gemma, "gemma"},
    {ChatFormat::Mistral, "mistral"},
    {ChatFormat::Phi3, "phi3"},
    {ChatFormat::MistralV7, "mistral-v7"},
    {ChatFormat::Harmony, "harmony"},
}};

bool isJinjaSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Jinja's `| trim` and Python's str.strip() on ASCII whitespace: the templates trim contents.
std::string_view trim(std::string_view text) {
  while (!text.empty() && isJinjaSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && isJinjaSpace(text.back())) text.remove_suffix(1);
  return text;
}

bool asciiEqualIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// The formats without a role of their own for anything but system/user/assistant refuse other
// roles instead of guessing where a "tool" message would go.
void requireKnownRole(ChatFormat format, const std::vector<ChatMessage>& messages, size_t index) {
  const std::string& role = messages[index].role;
  if (role == "system" || role == "user" || role == "assistant") return;
  throw Error("chat format " + std::string(chatFormatName(format)) + ": message " +
              std::to_string(index) + " has role '" + role +
              "'; this format writes only system, user and assistant messages");
}

// Collects system messages of the formats that fold the system prompt into a user turn.
void appendSystem(std::string& pending, std::string_view content) {
  if (!pending.empty()) pending += "\n\n";
  pending += content;
}

// ---- The Hermes tool convention (Qwen2.5's and Qwen3's templates) ----------------------------
// With tools, the first system turn is the system prompt (if any), a blank line, and the tools
// block; an assistant's calls follow its content, each as a <tool_call> block; tool results are
// a user turn of <tool_response> blocks, one per consecutive "tool" message.

// The system turn that offers the tools, and whether it consumed the first message (a system
// one). Empty without tools.
std::string hermesToolsTurn(const std::vector<ChatMessage>& messages,
                            const std::vector<std::string>& tools, bool& consumedSystem) {
  consumedSystem = false;
  if (tools.empty()) return {};
  std::string out = "<|im_start|>system\n";
  if (!messages.empty() && messages.front().role == "system") {
    out += messages.front().content + "\n\n";
    consumedSystem = true;
  }
  out +=
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const std::string& tool : tools) out += "\n" + tool;
  out +=
      "\n</tools>\n\nFor each function call, return a json object with function name and "
      "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
      "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  return out;
}

// An assistant turn's calls, after its content; a newline before each but the first, and before
// the first too where `newlineFirst`.
void appendHermesToolCalls(std::string& out, const std::vector<ToolCall>& calls,
                           bool newlineFirst) {
  for (size_t c = 0; c < calls.size(); ++c) {
    if (c > 0 || newlineFirst) out += '\n';
    out += std::string(kToolCallOpen) + "\n{\"name\": \"" + calls[c].name +
           "\", \"arguments\": " + calls[c].arguments + "}\n" + std::string(kToolCallClose);
  }
}

// A "tool" message: its result in the user turn that consecutive tool messages share.
void appendHermesToolResult(std::string& out, const std::vector<ChatMessage>& messages, size_t i) {
  if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
  out += "\n<tool_response>\n" + messages[i].content + "\n</tool_response>";
  if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
}

// The frame the Hermes formats share: the tools turn, tool results, and the assistant prefix;
// writeTurn(out, i) writes every other message.
template <typename WriteTurn>
std::string renderHermes(const std::vector<ChatMessage>& messages, bool addAssistantPrefix,
                         const std::vector<std::string>& tools, WriteTurn writeTurn) {
  bool consumedSystem = false;
  std::string out = hermesToolsTurn(messages, tools, consumedSystem);
  for (size_t i = consumedSystem ? 1 : 0; i < messages.size(); ++i) {
    if (messages[i].role == "tool") {
      appendHermesToolResult(out, messages, i);
    } else {
      writeTurn(out, i);
    }
  }
  if (addAssistantPrefix) out += "<|im_start|>assistant\n";
  return out;
}

// ChatML (e.g. Qwen2, SmolLM2): <|im_start|>{role}\n{content}<|im_end|>\n, contents untouched;
// with tools, Qwen2.5's template (the Hermes convention above).
std::string renderChatMl(const std::vector<ChatMessage>& messages, bool addAssistantPrefix,
                         const std::vector<std::string>& tools) {
  return renderHermes(messages, addAssistantPrefix, tools, [&](std::string& out, size_t i) {
    const ChatMessage& m = messages[i];
    out += "<|im_start|>";
    out += m.role;
    if (m.role == "assistant" && !m.toolCalls.empty()) {
      if (!m.content.empty()) out += '\n' + m.content;
      appendHermesToolCalls(out, m.toolCalls, true);
    } else {
      out += '\n';
      out += m.content;
    }
    out += "<|im_end|>\n";
  });
}

// Python's str.strip/lstrip/rstrip of newlines only, as the Qwen3 template uses them.
std::string_view stripNewlines(std::string_view s, bool left, bool right) {
  while (left && !s.empty() && s.front() == '\n') s.remove_prefix(1);
  while (right && !s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// Qwen3's template (Qwen/Qwen3-*'s chat_template): ChatML, where an assistant turn's content is
// what follows its last "</think>" (newlines stripped) and its reasoning what precedes the first
// one, after the last "<think>". Turns before the last user query (a user message that is not
// only a <tool_response>) are written without reasoning; after it (the turns of the current
// answer: a reply being continued, tool steps) with a <think> block, an empty one for the last
// turn without reasoning. Tools, calls and results as the Hermes convention above.
std::string renderQwen3(const std::vector<ChatMessage>& messages, bool addAssistantPrefix,
                        const std::vector<std::string>& tools) {
  size_t lastQuery = messages.empty() ? 0 : messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string& c = messages[i].content;
    if (messages[i].role == "user" &&
        !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) {
      lastQuery = i;
      break;
    }
  }
  return renderHermes(messages, addAssistantPrefix, tools, [&](std::string& out, size_t i) {
    const ChatMessage& m = messages[i];
    out += "<|im_start|>" + m.role + "\n";
    if (m.role != "assistant") {
      out += m.content + "<|im_end|>\n";
      return;
    }
    std::string_view content = m.content, reasoning;
    if (const size_t close = content.rfind("</think>"); close != std::string_view::npos) {
      std::string_view before = content.substr(0, content.find("</think>"));
      before = stripNewlines(before, false, true);
      if (const size_t open = before.rfind("<think>"); open != std::string_view::npos) {
        before.remove_prefix(open + 7);
      }
      reasoning = stripNewlines(before, true, false);
      content = stripNewlines(content.substr(close + 8), true, false);
    }
    const bool last = i + 1 == messages.size();
    if (i > lastQuery && (last || !reasoning.empty())) {
      out += "<think>\n";
      out += stripNewlines(reasoning, true, true);
      out += "\n</think>\n\n";
      out += stripNewlines(content, true, false);
    } else {
      out += content;
    }
    appendHermesToolCalls(out, m.toolCalls, !content.empty());
    out += "<|im_end|>\n";
  });
}

// Phi-3.5 (microsoft/Phi-3.5-mini-instruct's template, llama.cpp's LLM_CHAT_TEMPLATE_PHI_3):
// <|role|>\n{content}<|end|>\n per message (an empty system message left out), then
// <|assistant|>\n, or the EOS text <|endoftext|> without the prefix; any role passes through.
std::string renderPhi3(const std::vector<ChatMessage>& messages, bool addAssistantPrefix) {
  std::string out;
  for (const ChatMessage& m : messages) {
    if (m.role == "system" && m.content.empty()) continue;  // the template skips it
    out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  }
  out += addAssistantPrefix ? "<|assistant|>\n" : "<|endoftext|>";
  return out;
}

// Mistral v7-tekken (Mistral-Small-3.1-24B-Instruct-2503's template, as llama.cpp's
// LLM_CHAT_TEMPLATE_MISTRAL_V7_TEKKEN writes it): no spaces around the contents; an assistant
// turn ends with </s>, and the reply begins right after the last [/INST].
std::string renderMistralV7(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      out += "[SYSTEM_PROMPT]" + m.content + "[/SYSTEM_PROMPT]";
    } else if (m.role == "user") {
      out += "[INST]" + m.content + "[/INST]";
    } else if (m.role == "assistant") {
      out += m.content + "</s>";
    } else {
      throw Error("chat format mistral-v7: role '" + m.role + "' cannot be written");
    }
  }
  return out;
}

// Today's date, UTC, as YYYY-MM-DD (the harmony template's strftime_now("%Y-%m-%d")).
std::string todayUtc() {
  const auto days = std::chrono::floor<std::chrono::days>(std::chrono::system_clock::now());
  const std::chrono::year_month_day ymd{days};
  char text[16];
  std::snprintf(text, sizeof text, "%04d-%02u-%02u", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
  return text;
}

// OpenAI's gpt-oss template (openai/gpt-oss-*'s chat_template.jinja, custom tools but no
// built-in ones): the system message (identity, knowledge cutoff, date, reasoning effort, valid
// channels, and with tools where their calls go); a leading system or developer message as the
// developer's "# Instructions", and the tools as a TypeScript namespace (harmony_tools.h);
// user turns; earlier assistant turns as their final channel only (their reasoning is dropped,
// as the template drops it); an assistant's call (one per message) as a commentary message to
// functions.NAME ending in <|call|>, after its text as analysis unless a later assistant turn
// answered; a tool's result as a message from functions.NAME holding its content as a JSON
// string; a closing assistant turn without a generation prompt ends with <|return|>; the
// prompt is <|start|>assistant (the model writes its channel header itself).
std::string renderHarmony(const std::vector<ChatMessage>& messages, bool addAssistantPrefix,
                          std::string_view effort, std::string_view date,
                          const std::vector<std::string>& tools) {
  std::string out = "<|start|>system<|message|>";
  out += "You are ChatGPT, a large language model trained by OpenAI.\n";
  out += "Knowledge cutoff: 2024-06\n";
  out += "Current date: " + (date.empty() ? todayUtc() : std::string(date)) + "\n\n";
  out += "Reasoning: " + std::string(effort.empty() ? "medium" : effort) + "\n\n";
  out +=
      "# Valid channels: analysis, commentary, final. Channel must be included for every "
      "message.";
  if (!tools.empty())
    out += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  out += "<|end|>";
  size_t first = 0;
  std::string_view developer;
  if (!messages.empty() && (messages[0].role == "system" || messages[0].role == "developer")) {
    developer = messages[0].content;
    first = 1;
  }
  if (!developer.empty() || !tools.empty()) {
    out += "<|start|>developer<|message|>";
    if (!developer.empty()) out += "# Instructions\n\n" + std::string(developer) + "\n\n";
    if (!tools.empty()) out += "# Tools\n\n" + harmonyToolNamespace(tools);
    out += "<|end|>";
  }
  std::string lastCall;  // the function the latest call went to, for the results after it
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      out += "<|start|>user<|message|>" + m.content + "<|end|>";
    } else if (m.role == "assistant" && !m.toolCalls.empty()) {
      if (m.toolCalls.size() != 1) {
        throw Error("chat format harmony: message " + std::to_string(i) + " makes " +
                    std::to_string(m.toolCalls.size()) + " tool calls; this format takes one");
      }
      const bool answeredLater =
          std::any_of(messages.begin() + static_cast<std::ptrdiff_t>(i) + 1, messages.end(),
                      [](const ChatMessage& later) {
                        return later.role == "assistant" && later.toolCalls.empty();
                      });
      if (!m.content.empty() && !answeredLater) {
        out += "<|start|>assistant<|channel|>analysis<|message|>" + m.content + "<|end|>";
      }
      lastCall = m.toolCalls[0].name;
      out += "<|start|>assistant to=functions." + lastCall +
             "<|channel|>commentary json<|message|>" + m.toolCalls[0].arguments + "<|call|>";
    } else if (m.role == "tool") {
      if (lastCall.empty()) {
        throw Error("chat format harmony: message " + std::to_string(i) +
                    " is a tool's result with no call before it");
      }
      out += "<|start|>functions." + lastCall + " to=assistant<|channel|>commentary<|message|>" +
             pythonJsonQuote(m.content) + "<|end|>";
    } else if (m.role == "assistant") {
      const bool closing = i + 1 == messages.size() && !addAssistantPrefix;
      out += "<|start|>assistant<|channel|>final<|message|>" + harmonyFinalText(m.content) +
             (closing ? "<|return|>" : "<|end|>");
      lastCall.clear();
    } else {
      throw Error("chat format harmony: message " + std::to_string(i) + " has role '" + m.role +
                  "'; a system or developer message is only written first");
    }
  }
  if (addAssistantPrefix) out += "<|start|>assistant";
  return out;
}

// Meta-Llama-3-*-Instruct: <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>
// after a <|begin_of_text|> BOS. (Llama 3.1 and later: renderLlama31.)
std::string renderLlama3(const std::vector<ChatMessage>& messages, bool addAssistantPrefix) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|start_header_id|>";
    out += m.role;
    out += "<|end_header_id|>\n\n";
    out += trim(m.content);
    out += "<|eot_id|>";
  }
  if (addAssistantPrefix) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Python's json.dumps(indent=4) of the JSON text `compact` (as pythonJsonText writes it: ", "
// and ": " separators): each member and element on a line of its own, indented by four spaces
// per level, "," ending a line, and empty containers as "{}" and "[]". Lexical: strings are
// copied as they are.
std::string indentJson(std::string_view compact) {
  std::string out;
  int depth = 0;
  bool inString = false;
  auto newline = [&](int level) {
    out += '\n';
    out.append(static_cast<size_t>(4 * level), ' ');
  };
  for (size_t i = 0; i < compact.size(); ++i) {
    const char c = compact[i];
    if (inString) {
      out += c;
      if (c == '\\' && i + 1 < compact.size()) {
        out += compact[++i];
      } else if (c == '"') {
        inString = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        inString = true;
        out += c;
        break;
      case '{':
      case '[':
        out += c;
        if (i + 1 < compact.size() && (compact[i + 1] == '}' || compact[i + 1] == ']')) {
          out += compact[++i];  // an empty container stays on its line
        } else {
          newline(++depth);
        }
        break;
      case '}':
      case ']':
        newline(--depth);
        out += c;
        break;
      case ',':
        out += ',';
        newline(depth);
        if (i + 1 < compact.size() && compact[i + 1] == ' ') ++i;
        break;
      default:
        out += c;
    }
  }
  return out;
}

// "26 Jul 2024" (strftime's "%d %b %Y") for a YYYY-MM-DD date.
std::string llamaDate(std::string_view isoDate) {
  static constexpr std::array<std::string_view, 12> kMonths = {
      "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::string iso(isoDate);
  int year = 0, month = 0, day = 0;
  if (std::sscanf(iso.c_str(), "%d-%d-%d", &year, &month, &day) != 3 || month < 1 || month > 12) {
    throw Error("chat template: the date '" + iso + "' is not YYYY-MM-DD");
  }
  char text[32];
  std::snprintf(text, sizeof text, "%02d %s %04d", day,
                std::string(kMonths[static_cast<size_t>(month - 1)]).c_str(), year);
  return text;
}

// Llama 3.1/3.2/3.3 (meta-llama/Llama-3.x-*-Instruct's chat_template, custom tools in the first
// user message as the templates do by default; no built-in tools): the system turn first,
// always: "Environment: ipython" when tools are offered, the knowledge cutoff, the date and the
// system prompt (trimmed). With tools, the first message after it becomes a user turn that
// lists them (json.dumps with indent 4) before its text. An assistant's call (one per message)
// is written as {"name": ..., "parameters": ...}, its content dropped; a tool's result is an
// ipython turn holding its content as a JSON string. Other contents are trimmed.
std::string renderLlama31(const std::vector<ChatMessage>& messages, bool addAssistantPrefix,
                          const std::vector<std::string>& tools, std::string_view date) {
  size_t next = 0;
  std::string_view system;
  if (!messages.empty() && messages.front().role == "system") {
    system = trim(messages.front().content);
    next = 1;
  }
  std::string out = "<|start_header_id|>system<|end_header_id|>\n\n";
  if (!tools.empty()) out += "Environment: ipython\n";
  out += "Cutting Knowledge Date: December 2023\nToday Date: " + std::string(date) + "\n\n";
  out += std::string(system) + "<|eot_id|>";
  if (!tools.empty()) {
    if (next == messages.size()) {
      throw Error("chat format llama3.1: tools go in the first user message, and there is none");
    }
    out +=
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please "
        "respond with a JSON for a function call with its proper arguments that best answers the "
        "given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
        "dictionary of argument name and its value}.Do not use variables.\n\n";
    for (const std::string& tool : tools) out += indentJson(tool) + "\n\n";
    out += std::string(trim(messages[next].content)) + "<|eot_id|>";
    ++next;
  }
  for (size_t i = next; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (!m.toolCalls.empty()) {
      if (m.toolCalls.size() != 1) {
        throw Error("chat format llama3.1: message " + std::to_string(i) + " makes " +
                    std::to_string(m.toolCalls.size()) + " tool calls; this format takes one");
      }
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"" +
             m.toolCalls[0].name + "\", \"parameters\": " + m.toolCalls[0].arguments +
             "}<|eot_id|>";
    } else if (m.role == "tool" || m.role == "ipython") {
      out += "<|start_header_id|>ipython<|end_header_id|>\n\n" + pythonJsonQuote(m.content) +
             "<|eot_id|>";
    } else {
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" +
             std::string(trim(m.content)) + "<|eot_id|>";
    }
  }
  if (addAssistantPrefix) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Llama-2-*-chat (Meta's reference dialog format and the Hugging Face template):
//   <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] {user}
//   [/INST]
// The system block sits inside the first [INST] and the whole [INST] content is stripped, as in
// the reference. Every turn but the first starts with its own "<s>"; the first one's is the
// tokenizer's BOS. The reply begins right after "[/INST]", so there is no assistant prefix.
std::string renderLlama2(const std::vector<ChatMessage>& messages) {
  std::string out;
  std::string pendingSystem;
  bool firstTurn = true;
  auto writeUser = [&](std::string_view content) {
    std::string text;
    if (!pendingSystem.empty()) {
      text = "<<SYS>>\n" + pendingSystem + "\n<</SYS>>\n\n";
      pendingSystem.clear();
    }
    text += content;
    out += firstTurn ? "[INST] " : "<s>[INST] ";
    out += trim(text);
    out += " [/INST]";
    firstTurn = false;
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    requireKnownRole(ChatFormat::Llama2, messages, i);
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      appendSystem(pendingSystem, m.content);
    } else if (m.role == "user") {
      writeUser(m.content);
    } else {
      out += ' ';
      out += trim(m.content);
      out += " </s>";
      firstTurn = false;
    }
  }
  // A system prompt with no user turn after it still reaches the model, in a turn of its own.
  if (!pendingSystem.empty()) writeUser("");
  return out;
}

// Gemma (gemma-2/gemma-3 -it templates):
// <start_of_turn>{user|model}\n{content|trim}<end_of_turn>\n. Gemma has no system role: the system
// prompt and "\n\n" open the next user turn (Gemma 3's first_user_prefix).
std::string renderGemma(const std::vector<ChatMessage>& messages, bool addAssistantPrefix) {
  std::string out;
  std::string pendingSystem;
  auto writeUser = [&](std::string_view content) {
    out += "<start_of_turn>user\n";
    if (!pendingSystem.empty()) {
      out += pendingSystem;
      out += "\n\n";
      pendingSystem.clear();
    }
    out += trim(content);
    out += "<end_of_turn>\n";
  };
  for (size_t i = 0; i < messages.size(); ++i) {
    requireKnownRole(ChatFormat::Gemma, messages, i);
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      appendSystem(pendingSystem, m.content);
    } else if (m.role == "user") {
      writeUser(m.content);
    } else {
      out += "<start_of_turn>model\n";
      out += trim(m.content);
      out += "<end_of_turn>\n";
    }
  }
  if (!pendingSystem.empty()) writeUser("");
  if (addAssistantPrefix) out += "<start_of_turn>model\n";
  return out;
}

// Mistral v3 (Mistral-7B-Instruct-v0.3 template, mistral-common's v3 tokenizer):
//   <s>[INST] {user}[/INST] {assistant|trim}</s>[INST] {system}\n\n{last user}[/INST]
// One BOS for the whole conversation; the system prompt goes into the LAST user turn, so it
// moves as the chat grows (that is how Mistral trained it). No assistant prefix.
std::string renderMistral(const std::vector<ChatMessage>& messages) {
  std::string system;
  size_t lastUser = messages.size();
  for (size_t i = 0; i < messages.size(); ++i) {
    requireKnownRole(ChatFormat::Mistral, messages, i);
    if (messages[i].role == "system") appendSystem(system, messages[i].content);
    if (messages[i].role == "user") lastUser = i;
  }
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      out += "[INST] ";
      if (i == lastUser && !system.empty()) {
        out += system;
        out += "\n\n";
      }
      out += m.content;
      out += "[/INST]";
    } else if (m.role == "assistant") {
      out += ' ';
      out += trim(m.content);
      out += "</s>";
    }
  }
  // No user turn to carry the system prompt: it gets one of its own.
  if (lastUser == messages.size() && !system.empty()) out += "[INST] " + system + "[/INST]";
  return out;
}

// At a backslash inside a Jinja string literal: appends what the escape stands for and moves
// past it (an unknown escape stays as written). False when source[pos] is not a backslash.
bool decodeEscape(std::string_view source, size_t& pos, std::string& text) {
  if (source[pos] != '\\' || pos + 1 >= source.size()) return false;
  const char e = source[pos + 1];
  switch (e) {
    case 'n':
      text += '\n';
      break;
    case 't':
      text += '\t';
      break;
    case 'r':
      text += '\r';
      break;
    case '\\':
    case '\'':
    case '"':
      text += e;
      break;
    default:
      text += '\\';
      text += e;
  }
  pos += 2;
  return true;
}

// Reads one newline, written raw or as the escape "\n" inside a Jinja string literal.
bool skipNewline(std::string_view source, size_t& pos) {
  if (pos < source.size() && source[pos] == '\n') {
    pos += 1;
    return true;
  }
  if (source.substr(pos, 2) == "\\n") {
    pos += 2;
    return true;
  }
  return false;
}

// The text of a system turn the template writes as a constant, e.g. SmolLM2's
//   {{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\n' }}
// Looks at each place the system header appears; the turn counts only when the text between
// the header (and its newlines) and endMarker is one plain string: no quote closing the literal
// (then the content is an expression such as message['content']) and no Jinja tag. Escapes of
// Jinja string literals are decoded. Empty when no occurrence qualifies.
std::string literalSystemTurn(std::string_view source, std::string_view header, int newlines,
                              std::string_view endMarker) {
  for (size_t at = source.find(header); at != std::string_view::npos;
       at = source.find(header, at + 1)) {
    // The quote that opened the literal, when the header starts it; a quote of the other kind
    // is then ordinary text ("You're ...").
    const char opening =
        at > 0 && (source[at - 1] == '\'' || source[at - 1] == '"') ? source[at - 1] : '\0';
    size_t pos = at + header.size();
    bool headerComplete = true;
    for (int i = 0; i < newlines && headerComplete; ++i) {
      headerComplete = skipNewline(source, pos);
    }
    if (!headerComplete) continue;
    std::string text;
    while (pos < source.size()) {
      if (source.substr(pos, endMarker.size()) == endMarker) {
        if (!text.empty()) return text;
        break;
      }
      const char c = source[pos];
      const bool closesLiteral = opening != '\0' ? c == opening : (c == '\'' || c == '"');
      if (closesLiteral) break;
      if (c == '{' && pos + 1 < source.size() &&
          (source[pos + 1] == '{' || source[pos + 1] == '%' || source[pos + 1] == '#')) {
        break;
      }
      if (decodeEscape(source, pos, text)) continue;
      text += c;
      pos += 1;
    }
  }
  return {};
}

// A default system prompt the template assigns from string literals and its date, as Mistral
// Small 3.x's does:
//   {%- set today = strftime_now("%Y-%m-%d") %}
//   {%- set default_system_message = "You are Mistral Small 3, ... The current date is " +
//   today + ".\n\n..." %}
// The literals decoded and joined, `today` as kTodayMarker; empty when the template has no such
// assignment or it is anything else.
std::string assignedDefaultSystem(std::string_view source) {
  constexpr std::string_view kAssign = "set default_system_message =";
  const size_t at = source.find(kAssign);
  if (at == std::string_view::npos) return {};
  size_t pos = at + kAssign.size();
  auto skipSpace = [&] {
    while (pos < source.size() && isJinjaSpace(source[pos])) ++pos;
  };
  std::string text;
  for (;;) {
    skipSpace();
    if (pos >= source.size()) return {};
    const char quote = source[pos];
    if (quote == '"' || quote == '\'') {
      for (++pos; pos < source.size() && source[pos] != quote;) {
        if (decodeEscape(source, pos, text)) continue;
        text += source[pos++];
      }
      if (pos >= source.size()) return {};
      ++pos;  // the closing quote
    } else if (source.substr(pos, 5) == "today" &&
               source.find("set today = strftime_now(\"%Y-%m-%d\")") != std::string_view::npos) {
      text += kTodayMarker;
      pos += 5;
    } else {
      return {};
    }
    skipSpace();
    if (source.substr(pos, 2) == "%}" || source.substr(pos, 3) == "-%}") return text;
    if (pos >= source.size() || source[pos] != '+') return {};
    ++pos;
  }
}

}  // namespace

std::string_view chatFormatName(ChatFormat format) {
  for (const FormatName& entry : kFormatNames) {
    if (entry.format == format) return entry.name;
  }
  throw Error("chat format: unknown enum value " + std::to_string(static_cast<int>(format)));
}

std::optional<ChatFormat> chatFormatFromName(std::string_view name) {
  for (const FormatName& entry : kFormatNames) {
    if (asciiEqualIgnoreCase(entry.name, name)) return entry.format;
  }
  return std::nullopt;
}

std::vector<std::string_view> chatFormatNames() {
  std::vector<std::string_view> names;
  for (const FormatName& entry : kFormatNames) names.push_back(entry.name);
  return names;
}

// Marker strings as llama.cpp's llm_chat_detect_template uses them: each format's turn tokens
// are specific enough that a substring test identifies it. Order matters only for [INST]:
// Llama 2 writes a <<SYS>> block, Mistral does not.
ChatTemplate detectChatTemplate(std::string_view jinjaTemplate) {
  auto contains = [&](std::string_view s) {
    return jinjaTemplate.find(s) != std::string_view::npos;
  };
  ChatTemplate result;
  if (contains("<|start|>") && contains("<|channel|>")) {
    result.format = ChatFormat::Harmony;
  } else if (contains("<|im_start|>")) {
    result.format = contains("<think>") ? ChatFormat::Qwen3 : ChatFormat::ChatML;
    result.defaultSystemPrompt =
        literalSystemTurn(jinjaTemplate, "<|im_start|>system", 1, "<|im_end|>");
  } else if (contains("<|start_header_id|>") && contains("<|end_header_id|>") &&
             contains("Cutting Knowledge Date")) {
    result.format = ChatFormat::Llama31;
    // 3.1 and 3.3 set date_string to a literal; 3.2 asks strftime_now for today's.
    constexpr std::string_view kDateLiteral = "set date_string = \"";
    if (const size_t at = jinjaTemplate.find(kDateLiteral);
        at != std::string_view::npos && !contains("strftime_now")) {
      const size_t from = at + kDateLiteral.size();
      const size_t end = jinjaTemplate.find('"', from);
      if (end != std::string_view::npos) {
        result.fixedDate = std::string(jinjaTemplate.substr(from, end - from));
      }
    }
  } else if (contains("<|start_header_id|>") && contains("<|end_header_id|>")) {
    result.format = ChatFormat::Llama3;
    result.defaultSystemPrompt = literalSystemTurn(
        jinjaTemplate, "<|start_header_id|>system<|end_header_id|>", 2, "<|eot_id|>");
  } else if (contains("<|assistant|>") && contains("<|end|>")) {
    result.format = ChatFormat::Phi3;
  } else if (contains("<start_of_turn>")) {
    result.format = ChatFormat::Gemma;
  } else if (contains("[SYSTEM_PROMPT]")) {
    result.format = ChatFormat::MistralV7;
    result.defaultSystemPrompt = assignedDefaultSystem(jinjaTemplate);
  } else if (contains("[INST]")) {
    result.format = contains("<<SYS>>") ? ChatFormat::Llama2 : ChatFormat::Mistral;
  }
  return result;
}

ChatFormat detectChatFormat(std::string_view jinjaTemplate) {
  return detectChatTemplate(jinjaTemplate).format;
}

bool chatFormatHasToolCalls(ChatFormat format) {
  return toolCallSyntaxOf(format) != ToolCallSyntax::None;
}

ToolCallSyntax toolCallSyntaxOf(ChatFormat format) {
  switch (format) {
    case ChatFormat::ChatML:
    case ChatFormat::Qwen3:
      return ToolCallSyntax::HermesTags;
    case ChatFormat::Llama31:
      return ToolCallSyntax::JsonReply;
    case ChatFormat::Harmony:
      return ToolCallSyntax::HarmonyRecipient;
    default:
      return ToolCallSyntax::None;
  }
}

std::string pythonJsonQuote(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

namespace {

// Throws shoal::Error where a format without tool calls is given tools or a message with calls.
void refuseToolsWithout(ChatFormat format, const std::vector<ChatMessage>& messages,
                        const std::vector<std::string>& tools) {
  if (chatFormatHasToolCalls(format)) return;
  const std::string refusal =
      "chat format " + std::string(chatFormatName(format)) + " has no tool calls in Shoal";
  if (!tools.empty()) throw Error(refusal + ": tools cannot be offered");
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].toolCalls.empty()) {
      throw Error(refusal + ": message " + std::to_string(i) + " calls tools");
    }
  }
}

// The Llama 3.1 "Today Date:" a template writes: its fixed one, else the current date.
std::string llama31DateOf(const ChatTemplate& chatTemplate) {
  if (!chatTemplate.fixedDate.empty()) return chatTemplate.fixedDate;
  return llamaDate(chatTemplate.currentDate.empty() ? todayUtc() : chatTemplate.currentDate);
}

// `options` supplies the render options (tools, dates); its format is not read.
std::string renderFormat(ChatFormat format, const std::vector<ChatMessage>& messages,
                         bool addAssistantPrefix, const ChatTemplate& options) {
  const std::vector<std::string>& tools = options.tools;
  refuseToolsWithout(format, messages, tools);
  switch (format) {
    case ChatFormat::ChatML:
      return renderChatMl(messages, addAssistantPrefix, tools);
    case ChatFormat::Qwen3:
      return renderQwen3(messages, addAssistantPrefix, tools);
    case ChatFormat::Llama3:
      return renderLlama3(messages, addAssistantPrefix);
    case ChatFormat::Llama31:
      return renderLlama31(messages, addAssistantPrefix, tools, llama31DateOf(options));
    case ChatFormat::Llama2:
      return renderLlama2(messages);
    case ChatFormat::Gemma:
      return renderGemma(messages, addAssistantPrefix);
    case ChatFormat::Mistral:
      return renderMistral(messages);
    case ChatFormat::Phi3:
      return renderPhi3(messages, addAssistantPrefix);
    case ChatFormat::MistralV7:
      return renderMistralV7(messages);
    case ChatFormat::Harmony:
      return renderHarmony(messages, addAssistantPrefix, {}, {}, tools);
  }
  throw Error("chat format: unknown enum value " + std::to_string(static_cast<int>(format)));
}

}  // namespace

std::string renderChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                       bool addAssistantPrefix) {
  return renderFormat(format, messages, addAssistantPrefix, ChatTemplate{});
}

std::string harmonyFinalText(std::string_view reply) {
  constexpr std::string_view kFinal = "<|channel|>final<|message|>";
  const size_t at = reply.rfind(kFinal);
  if (at != std::string_view::npos) reply.remove_prefix(at + kFinal.size());
  for (std::string_view end : {"<|end|>", "<|return|>"}) {
    if (reply.ends_with(end)) reply.remove_suffix(end.size());
  }
  return std::string(reply);
}

namespace {

std::string renderWithDefaultSystem(const ChatTemplate& chatTemplate,
                                    const std::vector<ChatMessage>& messages,
                                    bool addAssistantPrefix) {
  // Like SmolLM2's template ("if loop.first and messages[0]['role'] != 'system'"): only a
  // conversation that has messages, and does not open with a system one, gets the default.
  if (chatTemplate.format == ChatFormat::Harmony) {
    const std::string effort = !chatTemplate.reasoningEffort.empty() ? chatTemplate.reasoningEffort
                               : chatTemplate.thinking               ? "medium"
                                                                     : "low";
    return renderHarmony(messages, addAssistantPrefix, effort, chatTemplate.currentDate,
                         chatTemplate.tools);
  }
  if (chatTemplate.defaultSystemPrompt.empty() || messages.empty() ||
      messages.front().role == "system") {
    return renderFormat(chatTemplate.format, messages, addAssistantPrefix, chatTemplate);
  }
  std::string system = chatTemplate.defaultSystemPrompt;
  for (size_t at = system.find(kTodayMarker); at != std::string::npos;
       at = system.find(kTodayMarker, at)) {
    const std::string date =
        chatTemplate.currentDate.empty() ? todayUtc() : chatTemplate.currentDate;
    system.replace(at, kTodayMarker.size(), date);
    at += date.size();
  }
  std::vector<ChatMessage> withSystem;
  withSystem.reserve(messages.size() + 1);
  withSystem.push_back({"system", std::move(system)});
  withSystem.insert(withSystem.end(), messages.begin(), messages.end());
  return renderFormat(chatTemplate.format, withSystem, addAssistantPrefix, chatTemplate);
}

}  // namespace

std::string renderChat(const ChatTemplate& chatTemplate, const std::vector<ChatMessage>& messages,
                       bool addAssistantPrefix) {
  std::string out = renderWithDefaultSystem(chatTemplate, messages, addAssistantPrefix);
  // Qwen3's template with enable_thinking=false.
  if (!chatTemplate.thinking && chatTemplate.format == ChatFormat::Qwen3 && addAssistantPrefix) {
    out += "<think>\n\n</think>\n\n";
  }
  return out;
}

std::vector<std::string> chatStopStrings(ChatFormat format) {
  switch (format) {
    case ChatFormat::ChatML:
    case ChatFormat::Qwen3:
      return {"<|im_end|>"};
    case ChatFormat::Llama3:
      return {"<|eot_id|>"};
    // <|eom_id|> ends a turn that hands over to a tool (Llama 3.1's ipython mode).
    case ChatFormat::Llama31:
      return {"<|eot_id|>", "<|eom_id|>"};
    case ChatFormat::Gemma:
      return {"<end_of_turn>"};
    case ChatFormat::Phi3:
      return {"<|end|>", "<|endoftext|>"};
    // "</s>" is EOS; "[INST]" catches a model that runs on into writing the next user turn.
    case ChatFormat::Llama2:
    case ChatFormat::Mistral:
    case ChatFormat::MistralV7:
      return {"</s>", "[INST]"};
    // The end of a final answer and of a tool call (<|end|> closes the reasoning: not a stop).
    case ChatFormat::Harmony:
      return {"<|return|>", "<|call|>"};
  }
  throw Error("chat format: unknown enum value " + std::to_string(static_cast<int>(format)));
}

}  // namespace shoal::model
