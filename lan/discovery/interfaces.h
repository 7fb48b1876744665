#pragma once
// The machine's network interfaces as discovery needs them (getifaddrs): which can carry
// multicast/broadcast, their IPv4 addresses and broadcast addresses, and whether they have an
// IPv6 link-local address. Read afresh on every beacon, since interfaces come and go (Wi-Fi,
// VPNs, docker bridges).

#include <asio/ip/address_v4.hpp>
#include <asio/ip/address_v6.hpp>
#include <string>
#include <vector>

namespace shoal::lan {

struct NetworkInterface {
  std::string name;
  unsigned index = 0;  // if_nametoindex
  bool up = false;     // IFF_UP and IFF_RUNNING
  bool loopback = false;
  bool multicast = false;
  bool broadcast = false;
  std::vector<asio::ip::address_v4> ipv4;
  std::vector<asio::ip::address_v4> ipv4Broadcast;  // for interfaces with IFF_BROADCAST
  std::vector<asio::ip::address_v6> ipv6;           // without scope ids
  bool ipv6LinkLocal = false;
};

// Every interface, one entry per name, in the order getifaddrs lists them. Empty when
// getifaddrs fails.
std::vector<NetworkInterface> listNetworkInterfaces();

}  // namespace shoal::lan
