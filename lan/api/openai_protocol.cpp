#include "lan/api/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "lan/api/tool_calls.h"
#include "lan/json/json_bounds.h"

namespace shoal::api {
namespace {

using nlohmann::json;

// OpenAI's documented bound on stop sequences.
constexpr size_t kMaxStopStrings = 4;
// The most members one object of a request with tools may have. Tools keep the client's key
// order, so such a request is parsed a second time into ordered objects, whose insertion is
// linear in their size: this bounds that second parse to about 10^8 steps at worst.
constexpr size_t kMaxObjectMembersWithTools = 1024;

[[noreturn]] void badParam(const std::string& param, const std::string& message) {
  throw ApiError(400, "invalid_request_error", "invalid_value", message, param);
}

// A client's value for an error message: scalars as they were written (strings clipped), arrays
// and objects by kind and size only. Never dump() a container: that recurses over the input.
std::string describe(const json& v) {
  if (v.is_string()) return "'" + clipForMessage(v.get_ref<const std::string&>()) + "'";
  if (v.is_array()) return "an array of " + std::to_string(v.size()) + " values";
  if (v.is_object()) return "an object";
  return v.dump();  // a number, boolean or null: short
}

// The JSON parser's message with at most kMaxEchoBytes of the input in it. The parser quotes the
// input after its first "'" (the last token read, "last read: '...'", or a number too large,
// "number overflow parsing '...'"), and that token can be a whole (huge) string; before the quote
// it says only where and why.
std::string parserMessage(const std::string& what) {
  const size_t quote = what.find('\'');
  if (quote == std::string::npos) return clipForMessage(what, 4 * kMaxEchoBytes);
  return clipForMessage(std::string_view(what).substr(0, quote + 1), 4 * kMaxEchoBytes) +
         clipForMessage(std::string_view(what).substr(quote + 1));
}

json parseBody(const std::string& body) {
  checkJsonBounds(body);
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 4e444
    throw ApiError(400, "invalid_request_error", "invalid_json",
                   "the request body is not valid JSON: " + parserMessage(e.what()));
  }
  if (!j.is_object()) {
    throw ApiError(400, "invalid_request_error", "invalid_json",
                   "the request body must be a JSON object, got " + std::string(j.type_name()));
  }
  return j;
}

// A present, non-null field of the given kind, or nullptr when absent/null.
const json* field(const json& j, const char* name) {
  const auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

// An object's string field, or "" when absent or of another type (json::value would throw a
// type_error for the latter, which a client's "type": {} must not turn into a crash).
std::string stringIn(const json& j, const char* name) {
  const json* v = field(j, name);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

std::optional<float> numberIn(const json& j, const char* name, double lo, double hi, bool loOpen) {
  const json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) badParam(name, std::string("'") + name + "' must be a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || d > hi || d < lo || (loOpen && d == lo)) {
    badParam(name, std::string("'") + name + "' must be in " + (loOpen ? "(" : "[") +
                       std::to_string(lo) + ", " + std::to_string(hi) + "], got " + describe(*v));
  }
  return static_cast<float>(d);
}

bool boolIn(const json& j, const char* name) {
  const json* v = field(j, name);
  if (!v) return false;
  if (!v->is_boolean()) badParam(name, std::string("'") + name + "' must be a boolean");
  return v->get<bool>();
}

SamplingRequest parseSampling(const json& j, bool chat) {
  SamplingRequest s;
  const json* model = field(j, "model");
  if (!model || !model->is_string() || model->get<std::string>().empty()) {
    badParam("model", "'model' is required (a string; see GET /v1/models)");
  }
  s.model = model->get<std::string>();
  s.temperature = numberIn(j, "temperature", 0.0, 2.0, false);
  s.topP = numberIn(j, "top_p", 0.0, 1.0, true);

  const char* maxName =
      (chat && field(j, "max_completion_tokens")) ? "max_completion_tokens" : "max_tokens";
  if (const json* v = field(j, maxName)) {
    if (!v->is_number_integer() || v->get<int64_t>() < 1 ||
        v->get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      badParam(maxName,
               std::string("'") + maxName + "' must be an integer >= 1, got " + describe(*v));
    }
    s.maxTokens = static_cast<int32_t>(v->get<int64_t>());
  }

  if (const json* v = field(j, "n")) {
    if (!v->is_number_integer() || v->get<int64_t>() != 1) {
      badParam("n", "only n = 1 is supported, got " + describe(*v));
    }
  }

  if (const json* v = field(j, "stop")) {
    if (v->is_string()) {
      s.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const json& e : *v) {
        if (!e.is_string()) badParam("stop", "'stop' must be a string or an array of strings");
        s.stop.push_back(e.get<std::string>());
      }
    } else {
      badParam("stop", "'stop' must be a string or an array of strings");
    }
    if (s.stop.size() > kMaxStopStrings) {
      badParam("stop", "at most 4 stop sequences, got " + std::to_string(s.stop.size()));
    }
    for (const std::string& st : s.stop) {
      if (st.empty()) badParam("stop", "stop sequences must not be empty");
    }
  }

  if (const json* v = field(j, "seed")) {
    if (v->is_number_unsigned()) {
      s.seed = v->get<uint64_t>();
    } else if (v->is_number_integer()) {
      s.seed = static_cast<uint64_t>(v->get<int64_t>());
    } else {
      badParam("seed", "'seed' must be an integer, got " + describe(*v));
    }
  }

  s.stream = boolIn(j, "stream");
  if (const json* v = field(j, "stream_options")) {
    if (!v->is_object()) badParam("stream_options", "'stream_options' must be an object");
    s.includeUsageInStream = boolIn(*v, "include_usage");
  }
  s.ignoreEos = boolIn(j, "ignore_eos");
  // logprobs are not computed; saying so beats returning a response without them.
  if (boolIn(j, "logprobs") || field(j, "top_logprobs") || (!chat && field(j, "logprobs"))) {
    badParam("logprobs", "logprobs are not supported by this server");
  }
  return s;
}

// Message content: a string, or an array of {"type": "text", "text": ...} parts (joined).
std::string contentText(const json& content, size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {
    std::string text;
    for (const json& part : content) {
      if (!part.is_object() || stringIn(part, "type") != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        badParam(param, "only text content parts are supported");
      }
      text += part["text"].get<std::string>();
    }
    return text;
  }
  badParam(param, "'" + param + "' must be a string or an array of text parts");
}

// The most members of any object in `v` (recursive: `v` passed checkJsonBounds).
size_t largestObject(const json& v) {
  size_t most = v.is_object() ? v.size() : 0;
  if (v.is_structured()) {
    for (const json& item : v) most = std::max(most, largestObject(item));
  }
  return most;
}

// "tools": an array of {"type": "function", "function": {"name": ..., ...}}, each returned as
// the templates' tojson writes it, in the client's key order (from `body`, parsed again).
std::vector<std::string> toolsIn(const json& j, const std::string& body) {
  const json* tools = field(j, "tools");
  if (!tools) return {};
  if (!tools->is_array()) badParam("tools", "'tools' must be an array");
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const std::string param = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || stringIn(t, "type") != "function") {
      badParam(param + ".type", "'" + param + "' must be {\"type\": \"function\", ...}");
    }
    const json* function = field(t, "function");
    const json* name = function && function->is_object() ? field(*function, "name") : nullptr;
    if (!name || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      badParam(param + ".function.name",
               "'" + param + ".function.name' must be a non-empty string");
    }
  }
  if (const size_t most = largestObject(j); most > kMaxObjectMembersWithTools) {
    badParam("tools", "a request with tools may not hold an object of more than " +
                          std::to_string(kMaxObjectMembersWithTools) + " members; it has one of " +
                          std::to_string(most));
  }
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body);
  // What was checked above must be what is used: both parses keep the last of a repeated key
  // (nlohmann assigns it again), and this holds them to it.
  const auto it = ordered.find("tools");
  if (it == ordered.end() || json(*it) != *tools) {
    badParam("tools", "'tools' reads differently when its key order is kept");
  }
  std::vector<std::string> out;
  for (const nlohmann::ordered_json& t : *it) out.push_back(pythonJsonText(t));
  return out;
}

// An assistant message's "tool_calls": [{"id", "type": "function", "function": {"name",
// "arguments": "<JSON object text>"}}].
std::vector<model::ToolCall> toolCallsIn(const json& m, const std::string& param) {
  const json* calls = field(m, "tool_calls");
  if (!calls) return {};
  if (!calls->is_array()) badParam(param + ".tool_calls", "'tool_calls' must be an array");
  std::vector<model::ToolCall> out;
  for (size_t c = 0; c < calls->size(); ++c) {
    const std::string at = param + ".tool_calls[" + std::to_string(c) + "]";
    const json& call = (*calls)[c];
    const json* function = call.is_object() ? field(call, "function") : nullptr;
    const json* name = function && function->is_object() ? field(*function, "name") : nullptr;
    if (!name || !name->is_string() || name->get_ref<const std::string&>().empty()) {
      badParam(at + ".function.name", "'" + at + ".function.name' must be a non-empty string");
    }
    const json* arguments = field(*function, "arguments");
    if (!arguments || !arguments->is_string()) {
      badParam(at + ".function.arguments",
               "'" + at + ".function.arguments' must be a string holding a JSON object");
    }
    const std::string& text = arguments->get_ref<const std::string&>();
    checkJsonBounds(text);
    const auto parsed = nlohmann::ordered_json::parse(text, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      badParam(at + ".function.arguments",
               "'" + at + ".function.arguments' is not a JSON object: " + clipForMessage(text));
    }
    out.push_back({name->get<std::string>(), pythonJsonText(parsed)});
  }
  return out;
}

}  // namespace

std::string clipForMessage(std::string_view s, size_t maxBytes) {
  if (s.size() <= maxBytes) return std::string(s);
  return std::string(s.substr(0, maxBytes)) + "… (" + std::to_string(s.size()) + " bytes)";
}

void checkJsonBounds(std::string_view body) {
  const std::string violation =
      lan::jsonBoundsViolation(body, lan::JsonBounds{kMaxJsonDepth, kMaxJsonValues});
  if (!violation.empty()) {
    throw ApiError(400, "invalid_request_error", "invalid_json", "the request body " + violation);
  }
}

json ApiError::toJson() const {
  return {{"error",
           {{"message", what()},
            {"type", m_type},
            {"param", m_param.empty() ? json(nullptr) : json(m_param)},
            {"code", m_code.empty() ? json(nullptr) : json(m_code)}}}};
}

ChatRequest parseChatRequest(const std::string& body) {
  const json j = parseBody(body);
  ChatRequest r;
  r.sampling = parseSampling(j, true);
  const json* messages = field(j, "messages");
  if (!messages || !messages->is_array() || messages->empty()) {
    badParam("messages", "'messages' must be a non-empty array");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) badParam(param, "'" + param + "' must be an object");
    const json* role = field(m, "role");
    if (!role || !role->is_string()) badParam(param + ".role", "'role' must be a string");
    std::string roleName = role->get<std::string>();
    // "developer" is OpenAI's newer name for the system role.
    if (roleName == "developer") roleName = "system";
    if (roleName != "system" && roleName != "user" && roleName != "assistant" &&
        roleName != "tool") {
      badParam(param + ".role",
               "role '" + clipForMessage(roleName) +
                   "' is not supported (system, developer, user, assistant, tool)");
    }
    model::ChatMessage message{roleName, ""};
    if (roleName == "assistant") message.toolCalls = toolCallsIn(m, param);
    const json* content = field(m, "content");
    // An assistant message that calls tools may have no text (OpenAI sends null).
    if (!content && message.toolCalls.empty()) {
      badParam(param + ".content", "'" + param + ".content' is required");
    }
    if (content) message.content = contentText(*content, i);
    r.messages.push_back(std::move(message));
  }
  if (r.messages.back().role == "assistant") {
    badParam("messages", "the last message must not be the assistant's (nothing to reply to)");
  }
  if (const json* kwargs = field(j, "chat_template_kwargs")) {
    if (!kwargs->is_object()) {
      badParam("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    }
    if (const json* thinking = field(*kwargs, "enable_thinking")) {
      if (!thinking->is_boolean()) {
        badParam("chat_template_kwargs.enable_thinking", "'enable_thinking' must be true or false");
      }
      r.thinking = thinking->get<bool>();
    }
  }
  // The top-level parameter wins over the template argument.
  for (const auto& [where, name] : {std::pair{field(j, "chat_template_kwargs"),
                                              std::string("chat_template_kwargs.reasoning_effort")},
                                    std::pair{&j, std::string("reasoning_effort")}}) {
    const json* effort = where && where->is_object() ? field(*where, "reasoning_effort") : nullptr;
    if (!effort) continue;
    const std::string value = effort->is_string() ? effort->get<std::string>() : std::string();
    if (value != "low" && value != "medium" && value != "high") {
      badParam(name, "'reasoning_effort' must be \"low\", \"medium\" or \"high\"");
    }
    r.reasoningEffort = value;
  }
  r.tools = toolsIn(j, body);
  if (const json* choice = field(j, "tool_choice")) {
    const std::string name = choice->is_string() ? choice->get<std::string>() : std::string();
    if (name == "none") {
      r.tools.clear();
    } else if (name != "auto") {
      badParam("tool_choice",
               "'tool_choice' must be \"auto\" or \"none\": this server cannot force a call "
               "(\"required\" or a named function)");
    }
  }
  if (const json* parallel = field(j, "parallel_tool_calls"); parallel && !parallel->is_boolean()) {
    badParam("parallel_tool_calls", "'parallel_tool_calls' must be true or false");
  }
  if (const json* format = field(j, "reasoning_format")) {
    const std::string name = format->is_string() ? format->get<std::string>() : std::string();
    if (name == "none") {
      r.splitReasoning = false;
    } else if (name != "auto" && name != "deepseek") {
      badParam("reasoning_format", "'reasoning_format' must be \"auto\", \"deepseek\" or \"none\"");
    }
  }
  return r;
}

CompletionRequest parseCompletionRequest(const std::string& body) {
  const json j = parseBody(body);
  CompletionRequest r;
  r.sampling = parseSampling(j, false);
  const json* prompt = field(j, "prompt");
  if (!prompt) badParam("prompt", "'prompt' is required");
  if (prompt->is_string()) {
    r.prompt = prompt->get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    r.prompt = (*prompt)[0].get<std::string>();
  } else {
    badParam("prompt", "'prompt' must be a string (or an array of exactly one string)");
  }
  if (r.prompt.empty()) badParam("prompt", "'prompt' must not be empty");
  return r;
}

json Usage::toJson() const {
  return {{"prompt_tokens", promptTokens},
          {"completion_tokens", completionTokens},
          {"total_tokens", promptTokens + completionTokens}};
}

std::string finishReasonFor(std::string_view name) {
  if (name == "length" || name == "context_full") return "length";
  return "stop";
}

json chatCompletionJson(const std::string& id, int64_t created, const std::string& model,
                        const std::string& text, const std::string& finishReason,
                        const Usage& usage, const std::string& reasoning, const json& toolCalls) {
  json message = {{"role", "assistant"}, {"content", text}};
  if (!reasoning.empty()) message["reasoning_content"] = reasoning;
  if (!toolCalls.empty()) {
    message["tool_calls"] = toolCalls;
    if (text.empty()) message["content"] = nullptr;
  }
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0},
                                    {"message", message},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finishReason}}})},
          {"usage", usage.toJson()}};
}

json completionJson(const std::string& id, int64_t created, const std::string& model,
                    const std::string& text, const std::string& finishReason, const Usage& usage) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0},
                                    {"text", text},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finishReason}}})},
          {"usage", usage.toJson()}};
}

json chatChunkJson(const std::string& id, int64_t created, const std::string& model,
                   const std::optional<std::string>& role,
                   const std::optional<std::string>& content, const std::string& finishReason,
                   const Usage* usage, const std::optional<std::string>& reasoning,
                   const json& toolCalls) {
  json out = {
      {"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model}};
  if (usage) {
    out["choices"] = json::array();
    out["usage"] = usage->toJson();
    return out;
  }
  json delta = json::object();
  if (role) delta["role"] = *role;
  if (content) delta["content"] = *content;
  if (reasoning) delta["reasoning_content"] = *reasoning;
  if (!toolCalls.empty()) delta["tool_calls"] = toolCalls;
  out["choices"] =
      json::array({{{"index", 0},
                    {"delta", delta},
                    {"logprobs", nullptr},
                    {"finish_reason", finishReason.empty() ? json(nullptr) : json(finishReason)}}});
  return out;
}

json completionChunkJson(const std::string& id, int64_t created, const std::string& model,
                         const std::string& text, const std::string& finishReason,
                         const Usage* usage) {
  json out = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model}};
  if (usage) {
    out["choices"] = json::array();
    out["usage"] = usage->toJson();
    return out;
  }
  out["choices"] =
      json::array({{{"index", 0},
                    {"text", text},
                    {"logprobs", nullptr},
                    {"finish_reason", finishReason.empty() ? json(nullptr) : json(finishReason)}}});
  return out;
}

std::string sseEvent(const json& payload) {
  // dump() escapes control characters, so the payload is one line, as SSE needs.
  return "data: " + payload.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

json modelsJson(const std::string& modelId, int64_t created) {
  return {
      {"object", "list"},
      {"data",
       json::array(
           {{{"id", modelId}, {"object", "model"}, {"created", created}, {"owned_by", "shoal"}}})}};
}

}  // namespace shoal::api
