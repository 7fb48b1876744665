#pragma once
// The machine's network interfaces as discovery needs them (getifaddrs): which can carry
// multicast/broadcast, their IPv4 addresses and broadcast addresses, and whether they have an
// IPv6 link-local address. Read afresh on every beacon, since interfaces come and go (Wi-Fi,
// VPNs, docker bridges).

#include <asio/ip/address.hpp>
#include <asio/ip/address_v4.hpp>
#include <asio/ip/address_v6.hpp>
#include <asio/ip/network_v4.hpp>
#include <asio/ip/network_v6.hpp>
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
  // The subnets of ipv4 / ipv6 (address + netmask): who is on the link of this interface.
  std::vector<asio::ip::network_v4> ipv4Networks;
  std::vector<asio::ip::network_v6> ipv6Networks;
};

// Every interface, one entry per name, in the order getifaddrs lists them. Empty when
// getifaddrs fails.
std::vector<NetworkInterface> listNetworkInterfaces();

// Whether `source` is a neighbour on the link a datagram arrived on (`interfaceIndex`; 0 when
// unknown: any interface): inside one of that interface's subnets, or an IPv6 link-local
// address. A beacon is for the local link (multicast TTL 1); one from a routed, off-link source
// is someone across a router pretending to be on our LAN.
bool isOnLink(const asio::ip::address& source, unsigned interfaceIndex,
              const std::vector<NetworkInterface>& interfaces);

}  // namespace shoal::lan
