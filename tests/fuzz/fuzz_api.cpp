// libFuzzer target for the API's request parsing: the head checks (lan/api/request_guard.h) and
// the body parsers (lan/api/openai_protocol.h). An input is a request as the guard and parsers
// see it:
//
//   METHOD PATH\n
//   Name: value\n        (any number of header lines; "\r" before "\n" is dropped)
//   \n
//   body                 (the rest, given to parseChatRequest and parseCompletionRequest)
//
// Any input either passes or is refused with an ApiError carrying a 4xx status and a short
// message (never a flood quoted back), under two policies (loopback without a key; beyond
// loopback with a key); never a crash, a deep recursion, an over-read or another exception.
// The body is also read as a model's reply with tool calls in it (ToolCallSplit, readToolCall):
// what a model writes is as untrusted as what a client sends.
//
//   ./build-fuzz/tests/fuzz/fuzz_api -max_total_time=60 tests/fuzz/corpus/api

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/runtime/tool_call_split.h"
#include "lan/api/openai_protocol.h"
#include "lan/api/request_guard.h"
#include "lan/api/tool_calls.h"

namespace {

using namespace shoal::api;

// The longest refusal message any check may produce: a few fixed sentences plus quoted pieces
// of at most kMaxEchoBytes (the parser's message at most 4 times that).
constexpr size_t kMaxMessageBytes = 2048;

void checkError(const ApiError& e) {
  if (e.status() < 400 || e.status() > 499) std::abort();
  if (std::string_view(e.what()).size() > kMaxMessageBytes) std::abort();
}

// Splits off the next line (without "\r\n"/"\n"); false at the end of the input.
bool nextLine(std::string_view& rest, std::string_view& line) {
  if (rest.empty()) return false;
  const size_t end = rest.find('\n');
  line = rest.substr(0, end);
  rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return true;
}

void fuzzHead(const RequestHead& head) {
  for (const bool loopbackBind : {true, false}) {
    GuardPolicy policy;
    policy.loopbackBind = loopbackBind;
    policy.port = 8080;
    policy.apiKey = loopbackBind ? "" : "s3cret";
    if (const auto e = checkRequestHead(head, policy)) checkError(*e);
  }
  for (const auto& [name, value] : head.headers) {
    // The pure helpers on every value: they must hold for any string.
    (void)isLoopbackHost(value);
    (void)isLoopbackHostHeader(value, 8080);
    (void)isLoopbackOrigin(value);
    (void)isJsonContentType(value);
    (void)parseContentLength(value);
    if (apiKeyMatches(value, "s3cret") && value.find("s3cret") == std::string::npos) std::abort();
  }
}

void fuzzBody(const std::string& body) {
  try {
    const ChatRequest r = parseChatRequest(body);
    if (r.messages.empty() || r.sampling.model.empty()) std::abort();
  } catch (const ApiError& e) {
    checkError(e);
  }
  try {
    const CompletionRequest r = parseCompletionRequest(body);
    if (r.prompt.empty() || r.sampling.model.empty()) std::abort();
  } catch (const ApiError& e) {
    checkError(e);
  }
  // As a reply: every call found either reads as a call with a name and an object's arguments,
  // or is refused; nothing throws.
  for (const auto syntax :
       {shoal::model::ToolCallSyntax::HermesTags, shoal::model::ToolCallSyntax::JsonReply}) {
    for (const auto& call : shoal::runtime::ToolCallSplit::split(body, syntax).calls) {
      const auto read = readToolCall(call.body);
      if (!read) continue;
      if (read->name.empty() || read->arguments.empty() || read->arguments.front() != '{') {
        std::abort();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::string_view line;
  RequestHead head;
  if (nextLine(rest, line)) {
    const size_t space = line.find(' ');
    head.method = line.substr(0, space);
    head.path = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
  }
  while (nextLine(rest, line) && !line.empty()) {
    const size_t colon = line.find(':');
    std::string_view value =
        colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    head.headers.emplace_back(std::string(line.substr(0, colon)), std::string(value));
  }
  fuzzHead(head);
  fuzzBody(std::string(rest));
  return 0;
}
