#pragma once
// Node addresses as text, "host:port": one parser and one formatter for everything that takes an
// address from a person or passes one on (shoal-cli pool, the app's pool page, the coordinator's
// connector), so that they all accept and refuse the same things.

#include <cstdint>
#include <string>
#include <string_view>

namespace shoal::lan {

struct HostPort {
  std::string host;  // a name, an IPv4 address, or an IPv6 address without its brackets
  uint16_t port = 0;
  bool operator==(const HostPort&) const = default;
};

// Parses "name:port", "192.0.2.7:port" or "[2001:db8::1]:port" (a zone stays in the host:
// "[fe80::1%eth0]:port"). There is no default port: a node's port is chosen when it starts, so
// an address without one is a mistake. Throws shoal::Error naming the text when the port is
// missing or not a decimal number in 1..65535, the host is empty, an IPv6 address is not in
// brackets ("::1:80" could mean two things) or brackets hold something else, brackets do not pair
// up, or there is whitespace. Whatever it accepts, joinHostPort() writes back the same way.
HostPort splitHostPort(std::string_view text);

// The inverse: "host:port", with brackets around a host that contains ':' (IPv6).
std::string joinHostPort(std::string_view host, uint16_t port);

}  // namespace shoal::lan
