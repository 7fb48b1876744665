#pragma once
// What the API checks in a request's head before it reads the body: who may ask (API key, Host,
// Origin) and what body it may send (method, Content-Length, Transfer-Encoding, Content-Type).
// Pure functions over strings, no HTTP library, so the rules can be read, unit-tested and fuzzed
// on their own (tests/fuzz/fuzz_api.cpp); api_server.cpp runs checkRequestHead() in cpp-httplib's
// pre-routing handler, which runs after the headers are read and before any body byte is.
//
// Why each rule (the threat model is in lan/api/README.md):
// - Bodies must have a Content-Length no larger than the limit, and no Transfer-Encoding:
//   Debian's cpp-httplib 0.11.4 applies its payload limit only to Content-Length bodies; a chunked
//   body (or a POST without a length, read until the peer closes) grows without bound, and its
//   chunk-size lines are read into an unbounded buffer. Refusing them before they are read is the
//   only bound the library leaves us. OpenAI clients (openai-python's httpx, curl --data, fetch
//   with a string) send Content-Length for JSON bodies.
// - POST bodies must be application/json: a browser page may POST text/plain, form data or a
//   typeless Blob to any address without a CORS preflight; JSON forces the preflight, which this
//   server does not grant.
// - On a loopback bind, Host must name loopback (localhost, 127.0.0.1, [::1], with our port or
//   none): a DNS-rebinding page reaches 127.0.0.1 under its own name, and its Host says so. An
//   Origin, when present, must be a loopback origin too.
// - The API key is compared in constant time (SHA-256 of both sides, then CRYPTO_memcmp), so
//   neither its content nor its length leaks through timing.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lan/api/openai_protocol.h"

namespace shoal::api {

// The largest request body: far above any prompt that fits a context (a 128k-token prompt is
// ~0.5 MB of text, ~1.5 MB with every character \u-escaped), and small enough that every HTTP
// thread holding one at once stays far below a small machine's memory.
inline constexpr size_t kMaxBodyBytes = 4u << 20;
// The largest request head (request line, headers, blank line), enforced as it is read
// (bounded_http_server.h): cpp-httplib allows 8 KiB per line, and a real client's head is under
// 2 KiB; 64 KiB leaves room for long cookies or tokens and bounds an endless line.
inline constexpr size_t kMaxHeadBytes = 64u << 10;

// The request's head as the guard needs it. Header names compare case-insensitively.
struct RequestHead {
  std::string_view method;                                   // "GET", "POST", …
  std::string_view path;                                     // "/v1/chat/completions"
  std::vector<std::pair<std::string, std::string>> headers;  // every header, repeats kept
};

// What the guard enforces; from the server's options and its bound port.
struct GuardPolicy {
  bool loopbackBind = true;  // the API listens on loopback only: check Host and Origin
  int port = 0;              // the bound port, as a Host header may carry it
  std::string_view apiKey;   // non-empty: /v1/* needs "Authorization: Bearer <key>"
  size_t maxBodyBytes = kMaxBodyBytes;
};

// The first rule the request breaks, as the error to send (403 host/origin, 401 key, 405 method,
// 411 no length or chunked, 400 bad length, 413 too large, 415 not JSON); nullopt when it may
// proceed and its body (if any) be read.
std::optional<ApiError> checkRequestHead(const RequestHead& head, const GuardPolicy& policy);

// True when `bindHost` is a loopback address: 127.0.0.0/8, ::1, or the name "localhost".
bool isLoopbackHost(std::string_view bindHost);

// True when a Host header value names loopback: localhost, 127.0.0.1 or [::1], optionally with
// ":<port>" equal to `port`. Case-insensitive; no trailing dot, no other name.
bool isLoopbackHostHeader(std::string_view host, int port);

// True when an Origin header value is a loopback origin: http(s)://localhost|127.0.0.1|[::1]
// with any port (a local page is as trusted as the local user).
bool isLoopbackOrigin(std::string_view origin);

// True for application/json with optional parameters ("application/json; charset=utf-8").
bool isJsonContentType(std::string_view contentType);

// A Content-Length value: decimal digits only (no sign, no space inside), no overflow.
std::optional<size_t> parseContentLength(std::string_view value);

// True when `authorization` is "Bearer <key>" (scheme case-insensitive) with exactly `key`;
// constant time in the key's content and length.
bool apiKeyMatches(std::string_view authorization, std::string_view key);

// True when the request carries the key (or none is required); for /health's detail.
bool hasApiKey(const RequestHead& head, std::string_view apiKey);

}  // namespace shoal::api
