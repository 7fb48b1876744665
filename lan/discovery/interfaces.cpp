#include "lan/discovery/interfaces.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

namespace shoal::lan {

namespace {

asio::ip::address_v4 toAddress(const sockaddr* sa) {
  const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
  return asio::ip::address_v4(ntohl(in->sin_addr.s_addr));
}

}  // namespace

std::vector<NetworkInterface> listNetworkInterfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  std::vector<NetworkInterface> result;
  for (const ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_name == nullptr) continue;
    auto entry = std::find_if(result.begin(), result.end(),
                              [&](const NetworkInterface& i) { return i.name == it->ifa_name; });
    if (entry == result.end()) {
      NetworkInterface fresh;
      fresh.name = it->ifa_name;
      fresh.index = if_nametoindex(it->ifa_name);
      fresh.up = (it->ifa_flags & IFF_UP) != 0 && (it->ifa_flags & IFF_RUNNING) != 0;
      fresh.loopback = (it->ifa_flags & IFF_LOOPBACK) != 0;
      fresh.multicast = (it->ifa_flags & IFF_MULTICAST) != 0;
      fresh.broadcast = (it->ifa_flags & IFF_BROADCAST) != 0;
      result.push_back(std::move(fresh));
      entry = result.end() - 1;
    }
    if (it->ifa_addr == nullptr) continue;
    if (it->ifa_addr->sa_family == AF_INET) {
      entry->ipv4.push_back(toAddress(it->ifa_addr));
      if (it->ifa_netmask != nullptr && it->ifa_netmask->sa_family == AF_INET) {
        entry->ipv4Networks.emplace_back(toAddress(it->ifa_addr), toAddress(it->ifa_netmask));
      }
      if ((it->ifa_flags & IFF_BROADCAST) != 0 && it->ifa_broadaddr != nullptr &&
          it->ifa_broadaddr->sa_family == AF_INET) {
        entry->ipv4Broadcast.push_back(toAddress(it->ifa_broadaddr));
      }
    } else if (it->ifa_addr->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
      asio::ip::address_v6::bytes_type bytes;
      std::memcpy(bytes.data(), in6->sin6_addr.s6_addr, bytes.size());
      entry->ipv6.emplace_back(bytes);
      if (it->ifa_netmask != nullptr && it->ifa_netmask->sa_family == AF_INET6) {
        const auto* mask = reinterpret_cast<const sockaddr_in6*>(it->ifa_netmask);
        unsigned short prefix = 0;
        for (const uint8_t byte : mask->sin6_addr.s6_addr) {
          prefix = static_cast<unsigned short>(prefix + std::popcount(byte));
        }
        entry->ipv6Networks.emplace_back(asio::ip::address_v6(bytes), prefix);
      }
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) entry->ipv6LinkLocal = true;
    }
  }
  freeifaddrs(list);
  return result;
}

bool isOnLink(const asio::ip::address& source, unsigned interfaceIndex,
              const std::vector<NetworkInterface>& interfaces) {
  asio::ip::address address = source;
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  }
  if (address.is_v6() && address.to_v6().is_link_local()) return true;
  for (const NetworkInterface& ni : interfaces) {
    if (interfaceIndex != 0 && ni.index != interfaceIndex) continue;
    if (address.is_v4()) {
      const asio::ip::address_v4 v4 = address.to_v4();
      for (const auto& net : ni.ipv4Networks) {
        const uint32_t mask = net.netmask().to_uint();
        if ((v4.to_uint() & mask) == (net.address().to_uint() & mask)) return true;
      }
    } else {
      const asio::ip::address_v6 v6(address.to_v6().to_bytes());  // without the scope id
      for (const auto& net : ni.ipv6Networks) {
        if (asio::ip::network_v6(v6, net.prefix_length()).network() == net.network()) return true;
      }
    }
  }
  return false;
}

}  // namespace shoal::lan
