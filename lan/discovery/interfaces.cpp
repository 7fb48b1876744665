#include "lan/discovery/interfaces.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
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
      if ((it->ifa_flags & IFF_BROADCAST) != 0 && it->ifa_broadaddr != nullptr &&
          it->ifa_broadaddr->sa_family == AF_INET) {
        entry->ipv4Broadcast.push_back(toAddress(it->ifa_broadaddr));
      }
    } else if (it->ifa_addr->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
      asio::ip::address_v6::bytes_type bytes;
      std::memcpy(bytes.data(), in6->sin6_addr.s6_addr, bytes.size());
      entry->ipv6.emplace_back(bytes);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr)) entry->ipv6LinkLocal = true;
    }
  }
  freeifaddrs(list);
  return result;
}

}  // namespace shoal::lan
