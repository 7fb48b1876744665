#include "lan/api/request_guard.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <limits>

namespace shoal::api {
namespace {

// How much of a header value an error message quotes: enough to recognise it, never a flood.
constexpr size_t kMaxQuotedChars = 64;

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

bool startsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && equalsIgnoreCase(s.substr(0, prefix.size()), prefix);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string quoted(std::string_view s) {
  // Appends rather than operator+ chains: GCC 12 warns falsely (-Wrestrict) on those.
  std::string out = "'";
  out.append(s.substr(0, kMaxQuotedChars));
  out.append(s.size() > kMaxQuotedChars ? "…'" : "'");
  if (s.size() > kMaxQuotedChars) out.append(" (" + std::to_string(s.size()) + " bytes)");
  return out;
}

// Every value of header `name`, in order.
std::vector<std::string_view> headerValues(const RequestHead& head, std::string_view name) {
  std::vector<std::string_view> values;
  for (const auto& [key, value] : head.headers) {
    if (equalsIgnoreCase(key, name)) values.push_back(value);
  }
  return values;
}

// ":<port>" (or nothing) after a host name: a decimal port equal to `port`.
bool portSuffixMatches(std::string_view rest, int port) {
  if (rest.empty()) return true;
  if (rest.front() != ':') return false;
  rest.remove_prefix(1);
  const std::optional<size_t> p = parseContentLength(rest);  // the same "digits only" rule
  return p && *p == static_cast<size_t>(port);
}

// "localhost", "127.0.0.1" or "[::1]" at the start of `s`; the rest after it, or nullopt.
std::optional<std::string_view> stripLoopbackName(std::string_view s) {
  for (const std::string_view name : {"localhost", "127.0.0.1", "[::1]"}) {
    if (startsWithIgnoreCase(s, name)) return s.substr(name.size());
  }
  return std::nullopt;
}

std::array<unsigned char, 32> sha256(std::string_view data) {
  std::array<unsigned char, 32> digest{};
  unsigned int size = 0;
  // EVP_Digest cannot fail for SHA-256 on in-memory data short of allocation failure; a zero
  // digest then still compares unequal to the key's with overwhelming probability.
  EVP_Digest(data.data(), data.size(), digest.data(), &size, EVP_sha256(), nullptr);
  return digest;
}

ApiError refuse(int status, const char* code, const std::string& message) {
  return ApiError(status, "invalid_request_error", code, message);
}

// The body rules for a POST (see the header for why).
std::optional<ApiError> checkBody(const RequestHead& head, const GuardPolicy& policy) {
  if (!headerValues(head, "Transfer-Encoding").empty()) {
    return refuse(411, "length_required",
                  "request bodies with Transfer-Encoding (chunked) are not accepted; send the "
                  "body with a Content-Length");
  }
  const std::vector<std::string_view> lengths = headerValues(head, "Content-Length");
  if (lengths.empty()) {
    return refuse(411, "length_required", "a POST needs a Content-Length header");
  }
  if (lengths.size() > 1) {
    return refuse(400, "invalid_content_length", "more than one Content-Length header");
  }
  const std::optional<size_t> length = parseContentLength(trim(lengths.front()));
  if (!length) {
    return refuse(400, "invalid_content_length",
                  "Content-Length " + quoted(lengths.front()) + " is not a decimal byte count");
  }
  if (*length > policy.maxBodyBytes) {
    return refuse(413, "request_too_large",
                  "the request body is too large: " + std::to_string(*length) +
                      " bytes, the limit is " + std::to_string(policy.maxBodyBytes));
  }
  const std::vector<std::string_view> types = headerValues(head, "Content-Type");
  if (types.size() != 1 || !isJsonContentType(types.front())) {
    return refuse(
        415, "unsupported_media_type",
        "the request body must be sent as Content-Type: application/json" +
            (types.empty() ? std::string(" (none given)") : ", got " + quoted(types.front())));
  }
  return std::nullopt;
}

}  // namespace

bool isLoopbackHost(std::string_view bindHost) {
  if (equalsIgnoreCase(bindHost, "localhost")) return true;
  const std::string host(bindHost);
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    static const in6_addr loopback = IN6ADDR_LOOPBACK_INIT;
    return std::equal(std::begin(v6.s6_addr), std::end(v6.s6_addr), std::begin(loopback.s6_addr));
  }
  return false;
}

bool isLoopbackHostHeader(std::string_view host, int port) {
  const std::optional<std::string_view> rest = stripLoopbackName(trim(host));
  return rest && portSuffixMatches(*rest, port);
}

bool isLoopbackOrigin(std::string_view origin) {
  origin = trim(origin);
  for (const std::string_view scheme : {"http://", "https://"}) {
    if (!startsWithIgnoreCase(origin, scheme)) continue;
    const std::optional<std::string_view> rest = stripLoopbackName(origin.substr(scheme.size()));
    if (!rest) return false;
    if (rest->empty()) return true;
    if (rest->front() != ':') return false;
    const std::optional<size_t> port = parseContentLength(rest->substr(1));
    return port && *port <= 65535;
  }
  return false;
}

bool isJsonContentType(std::string_view contentType) {
  const size_t semicolon = contentType.find(';');
  return equalsIgnoreCase(trim(contentType.substr(0, semicolon)), "application/json");
}

std::optional<size_t> parseContentLength(std::string_view value) {
  if (value.empty()) return std::nullopt;
  size_t n = 0;
  for (const char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    const size_t digit = static_cast<size_t>(c - '0');
    if (n > (std::numeric_limits<size_t>::max() - digit) / 10) return std::nullopt;
    n = n * 10 + digit;
  }
  return n;
}

bool apiKeyMatches(std::string_view authorization, std::string_view key) {
  authorization = trim(authorization);
  constexpr std::string_view kScheme = "bearer ";
  if (!startsWithIgnoreCase(authorization, kScheme)) return false;
  // Digests have one length whatever the key's, so CRYPTO_memcmp's constant time covers both
  // the content and the length of what the client sent.
  const auto given = sha256(trim(authorization.substr(kScheme.size())));
  const auto expected = sha256(key);
  return CRYPTO_memcmp(given.data(), expected.data(), given.size()) == 0;
}

bool hasApiKey(const RequestHead& head, std::string_view apiKey) {
  if (apiKey.empty()) return true;
  const std::vector<std::string_view> auth = headerValues(head, "Authorization");
  return auth.size() == 1 && apiKeyMatches(auth.front(), apiKey);
}

std::optional<ApiError> checkRequestHead(const RequestHead& head, const GuardPolicy& policy) {
  if (policy.loopbackBind) {
    const std::vector<std::string_view> hosts = headerValues(head, "Host");
    if (hosts.size() > 1) return refuse(400, "invalid_host", "more than one Host header");
    // No Host at all is HTTP/1.0 from a program; every browser sends one.
    if (hosts.size() == 1 && !isLoopbackHostHeader(hosts.front(), policy.port)) {
      return refuse(403, "invalid_host",
                    "Host " + quoted(hosts.front()) +
                        " is not this loopback server (localhost, 127.0.0.1 or [::1], port " +
                        std::to_string(policy.port) + ")");
    }
    for (const std::string_view origin : headerValues(head, "Origin")) {
      if (!isLoopbackOrigin(origin)) {
        return refuse(
            403, "invalid_origin",
            "requests from web pages of other origins are refused (Origin " + quoted(origin) + ")");
      }
    }
  }
  // /health stays open for liveness probes; it tells nothing but "ok" without the key.
  if (head.path != "/health" && !hasApiKey(head, policy.apiKey)) {
    return refuse(401, "invalid_api_key", "missing or wrong API key (Authorization: Bearer <key>)");
  }
  if (head.method == "GET" || head.method == "HEAD") return std::nullopt;
  if (head.method != "POST") {
    return refuse(405, "method_not_allowed",
                  "method " + quoted(head.method) + " is not served (GET and POST are)");
  }
  return checkBody(head, policy);
}

}  // namespace shoal::api
