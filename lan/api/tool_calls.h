#pragma once
// Tool calling over the OpenAI API, the JSON half (the text half, rendering tools and finding
// the calls in a reply, is the engine's: model::renderChat, runtime::ToolCallSplit).
//
// What goes into the prompt is written as the models' own templates write it: their `tojson` is
// Python's json.dumps (", " and ": " separators, the client's key order, non-ASCII characters
// as they are), so a tool's schema and a past call's arguments reach the model as they would
// through llama.cpp's server and the Jinja template. What comes out of a reply is a call in
// OpenAI's shape, its arguments as a JSON string.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "engine/model/python_json.h"

namespace shoal::api {

using model::pythonJsonText;  // engine/model/python_json.h

// One call a reply made.
struct ReplyToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text (OpenAI's `function.arguments`)
};

// The call in a call's JSON text (ToolCallSplit's) — {"name": "...", "arguments": {...}}, or
// "parameters" for "arguments" as Llama 3.1 writes it (the arguments may also be a string
// holding the object, or absent: {}) — or nullopt where the model wrote something else (the
// caller then gives that text back as content).
std::optional<ReplyToolCall> readToolCall(std::string_view body);

// A harmony message to `recipient` ("functions.NAME", runtime::ReasoningSplit::Addressed) as
// a call: its text must be a JSON object; nullopt otherwise, or for another recipient.
std::optional<ReplyToolCall> readAddressedCall(std::string_view recipient, std::string_view text);

// {"index", "id", "type": "function", "function": {"name", "arguments"}}: an entry of a
// message's tool_calls (index omitted) or of a stream delta's (index set).
nlohmann::json toolCallJson(const ReplyToolCall& call, const std::string& id,
                            std::optional<int32_t> index = std::nullopt);

}  // namespace shoal::api
