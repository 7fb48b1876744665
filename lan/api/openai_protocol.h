#pragma once
// The OpenAI wire format, as far as Shoal speaks it: request bodies parsed and validated into
// plain structs, and response bodies, stream chunks and errors built as JSON. No HTTP and no
// model here, so the rules can be read (and tested) on their own.
//
// Reference: the OpenAI API reference for /v1/chat/completions, /v1/completions and /v1/models
// (field names, "chat.completion" / "chat.completion.chunk" / "text_completion" objects, the
// `{"error": {"message", "type", "param", "code"}}` error shape, "data: [DONE]" ending a stream).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/chat_template.h"

namespace shoal::api {

// An error the client caused (or an overload), carried to the HTTP layer with its status code and
// OpenAI's error fields. `type` is one of OpenAI's types ("invalid_request_error",
// "authentication_error", "not_found_error", "rate_limit_error", "server_error").
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, std::string code, const std::string& message,
           std::string param = {})
      : std::runtime_error(message),
        m_status(status),
        m_type(std::move(type)),
        m_code(std::move(code)),
        m_param(std::move(param)) {}

  int status() const { return m_status; }
  const std::string& type() const { return m_type; }
  const std::string& code() const { return m_code; }
  const std::string& param() const { return m_param; }
  // {"error": {"message", "type", "param", "code"}}; param is null when empty.
  nlohmann::json toJson() const;

 private:
  int m_status;
  std::string m_type;
  std::string m_code;
  std::string m_param;
};

// Sampling and length parameters common to both endpoints. Fields the client left out stay
// nullopt; the server fills in its defaults.
struct SamplingRequest {
  std::string model;
  std::optional<float> temperature;   // [0, 2]
  std::optional<float> topP;          // (0, 1]
  std::optional<int32_t> maxTokens;   // >= 1 (max_tokens, or max_completion_tokens for chat)
  std::vector<std::string> stop;      // at most 4, none empty
  std::optional<uint64_t> seed;       // any integer (negative ones wrap, as a bit pattern)
  bool stream = false;                //
  bool includeUsageInStream = false;  // stream_options.include_usage
  bool ignoreEos = false;             // extension (as llama.cpp's server): benchmarks, tests
};

struct ChatRequest {
  SamplingRequest sampling;
  // At least one; roles system, user, assistant and tool (a tool's result; "developer" is read
  // as system). An assistant message's tool_calls come with their arguments as the templates'
  // tojson writes them (pythonJsonText, tool_calls.h).
  std::vector<model::ChatMessage> messages;
  // "reasoning_format": "auto" (default; "deepseek" too) returns a leading <think> block as
  // message.reasoning_content (delta.reasoning_content when streaming), as llama-server and
  // DeepSeek's API do; "none" leaves it in the content.
  bool splitReasoning = true;
  // "chat_template_kwargs": {"enable_thinking": false} (as llama-server and vLLM take it): a
  // thinking model (Qwen3) answers without reasoning.
  bool thinking = true;
  // "reasoning_effort": "low", "medium" or "high" (OpenAI's parameter; also taken from
  // chat_template_kwargs, as llama-server does): the effort a harmony model (gpt-oss) is asked
  // for; empty: the template's default. Other formats ignore it.
  std::string reasoningEffort;
  // "tools": each function offered, as the templates' tojson writes it (pythonJsonText). Empty
  // when none were offered or "tool_choice" is "none". A reply may then call them (the server
  // finds the calls); "tool_choice" "required" or a named function is refused, since nothing
  // here can force a call.
  std::vector<std::string> tools;
};

struct CompletionRequest {
  SamplingRequest sampling;
  std::string prompt;  // a string, or an array holding exactly one string
};

// Bounds on a request body's JSON, checked by one linear scan before the body is parsed, so no
// part of the server (nlohmann's recursive dump() and copies, our field walk) ever recurses deeper
// or allocates more nodes than this. A chat request nests 4 deep ({messages:[{content:[{text}]}]});
// 64 leaves room for what clients send and we ignore (tool schemas). A value is the unit of the
// parsed tree (~16-100 bytes each): 128k of them bound its memory to ~13 MB per request, while a
// conversation of thousands of messages needs a few tens of thousands.
inline constexpr size_t kMaxJsonDepth = 64;
inline constexpr size_t kMaxJsonValues = size_t{1} << 17;
// How much of a client's value an error message quotes (strings, parser context).
inline constexpr size_t kMaxEchoBytes = 64;

// At most kMaxEchoBytes of `s` (with its full size when cut), for quoting a client's value in
// an error message.
std::string clipForMessage(std::string_view s, size_t maxBytes = kMaxEchoBytes);

// Throws ApiError 400 (code "invalid_json") when `body` nests arrays/objects deeper than
// kMaxJsonDepth or holds more than kMaxJsonValues values; strings (and escapes in them) are
// skipped as the JSON grammar says. Malformed JSON that stays within the bounds passes: the
// parser reports it.
void checkJsonBounds(std::string_view body);

// Parse and validate; throws ApiError (400) naming the offending parameter. `body` is the raw
// request body; malformed JSON is reported with the parser's position. Checks checkJsonBounds()
// first; error messages quote at most kMaxEchoBytes of any value the client sent.
ChatRequest parseChatRequest(const std::string& body);
CompletionRequest parseCompletionRequest(const std::string& body);

struct Usage {
  int32_t promptTokens = 0;
  int32_t completionTokens = 0;
  nlohmann::json toJson() const;
};

// "length" for Length/ContextFull, "stop" for EndOfGeneration/StopString (and Cancelled, which
// only a client that has gone away could see).
std::string finishReasonFor(std::string_view shoalFinishName);

// Whole responses (stream = false).
// reasoning: the reply's reasoning_content (omitted when empty). toolCalls: message.tool_calls
// (omitted when empty; content is then null where the reply had no text).
nlohmann::json chatCompletionJson(const std::string& id, int64_t created, const std::string& model,
                                  const std::string& text, const std::string& finishReason,
                                  const Usage& usage, const std::string& reasoning = {},
                                  const nlohmann::json& toolCalls = nlohmann::json::array());
nlohmann::json completionJson(const std::string& id, int64_t created, const std::string& model,
                              const std::string& text, const std::string& finishReason,
                              const Usage& usage);

// One stream chunk. For chat: the first chunk carries the role, later ones content, the last one
// an empty delta with the finish reason; `finishReason` empty means null. `usage` set: the
// trailing usage chunk (empty choices), sent when stream_options.include_usage asked for it.
// `reasoning` set: delta.reasoning_content. `toolCalls` non-empty: delta.tool_calls.
nlohmann::json chatChunkJson(const std::string& id, int64_t created, const std::string& model,
                             const std::optional<std::string>& role,
                             const std::optional<std::string>& content,
                             const std::string& finishReason, const Usage* usage = nullptr,
                             const std::optional<std::string>& reasoning = std::nullopt,
                             const nlohmann::json& toolCalls = nlohmann::json::array());
nlohmann::json completionChunkJson(const std::string& id, int64_t created, const std::string& model,
                                   const std::string& text, const std::string& finishReason,
                                   const Usage* usage = nullptr);

// "data: <json>\n\n" — one server-sent event.
std::string sseEvent(const nlohmann::json& payload);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// GET /v1/models with one model.
nlohmann::json modelsJson(const std::string& modelId, int64_t created);

}  // namespace shoal::api
