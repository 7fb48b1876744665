#include "lan/api/tool_calls.h"

#include "engine/model/chat_template.h"
#include "lan/json/json_bounds.h"

namespace shoal::api {
namespace {

using Ordered = nlohmann::ordered_json;

// Parses model-written JSON that stays within the API's bounds; nullopt otherwise.
std::optional<Ordered> parseBounded(std::string_view text) {
  if (!lan::jsonBoundsViolation(text, lan::JsonBounds{}).empty()) return std::nullopt;
  Ordered v = Ordered::parse(text, nullptr, false);
  if (v.is_discarded()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<ReplyToolCall> readToolCall(std::string_view body) {
  const std::optional<Ordered> call = parseBounded(body);
  if (!call || !call->is_object()) return std::nullopt;
  const auto name = call->find("name");
  if (name == call->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  ReplyToolCall out{name->get<std::string>(), "{}"};
  auto arguments = call->find("arguments");
  if (arguments == call->end()) arguments = call->find("parameters");  // Llama 3.1's name
  if (arguments == call->end() || arguments->is_null()) return out;
  if (arguments->is_object()) {
    out.arguments = arguments->dump();
  } else if (arguments->is_string()) {
    const std::optional<Ordered> inner = parseBounded(arguments->get_ref<const std::string&>());
    if (!inner || !inner->is_object()) return std::nullopt;
    out.arguments = inner->dump();
  } else {
    return std::nullopt;
  }
  return out;
}

std::optional<ReplyToolCall> readAddressedCall(std::string_view recipient, std::string_view text) {
  constexpr std::string_view kFunctions = "functions.";
  if (!recipient.starts_with(kFunctions) || recipient.size() == kFunctions.size()) {
    return std::nullopt;
  }
  const std::optional<Ordered> arguments = parseBounded(text);
  if (!arguments || !arguments->is_object()) return std::nullopt;
  return ReplyToolCall{std::string(recipient.substr(kFunctions.size())), arguments->dump()};
}

nlohmann::json toolCallJson(const ReplyToolCall& call, const std::string& id,
                            std::optional<int32_t> index) {
  nlohmann::json j = {{"id", id},
                      {"type", "function"},
                      {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
  if (index) j["index"] = *index;
  return j;
}

}  // namespace shoal::api
