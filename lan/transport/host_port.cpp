#include "lan/transport/host_port.h"

#include <algorithm>

#include "engine/error.h"

namespace shoal::lan {
namespace {

[[noreturn]] void refuse(std::string_view text, std::string_view why) {
  throw Error("address '" + std::string(text) + "' " + std::string(why));
}

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Decimal digits only: no sign, no spaces, nothing after; at most 5 digits so it cannot overflow.
uint16_t parsePort(std::string_view text, std::string_view port) {
  if (port.empty()) refuse(text, "has no port (expected host:port)");
  if (port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    refuse(text, "has a bad port '" + std::string(port) + "' (expected 1..65535)");
  }
  uint32_t value = 0;
  for (char c : port) value = value * 10 + static_cast<uint32_t>(c - '0');
  if (value < 1 || value > 65535) {
    refuse(text, "has a bad port '" + std::string(port) + "' (expected 1..65535)");
  }
  return static_cast<uint16_t>(value);
}

}  // namespace

HostPort splitHostPort(std::string_view text) {
  if (std::any_of(text.begin(), text.end(), isSpace)) refuse(text, "contains whitespace");
  std::string_view host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) refuse(text, "has '[' without ']'");
    host = text.substr(1, close - 1);
    if (close + 1 == text.size()) refuse(text, "has no port (expected [ipv6]:port)");
    if (text[close + 1] != ':') refuse(text, "has text between ']' and ':' (expected [ipv6]:port)");
    port = text.substr(close + 2);
    // Brackets say "IPv6 address" (RFC 3986's IP literal), so that formatting gives them back.
    if (!host.empty() && host.find(':') == std::string_view::npos) {
      refuse(text, "has brackets around a host that is no IPv6 address");
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) refuse(text, "has no port (expected host:port)");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      refuse(text, "is ambiguous: put an IPv6 address in brackets, [ipv6]:port");
    }
  }
  if (host.empty()) refuse(text, "has no host (expected host:port)");
  if (host.find_first_of("[]") != std::string_view::npos ||
      port.find(']') != std::string_view::npos) {
    refuse(text, "has a stray bracket");
  }
  return HostPort{std::string(host), parsePort(text, port)};
}

std::string joinHostPort(std::string_view host, uint16_t port) {
  const bool v6 = host.find(':') != std::string_view::npos;
  std::string out;
  out.reserve(host.size() + 8);
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out += ':';
  out += std::to_string(port);
  return out;
}

}  // namespace shoal::lan
