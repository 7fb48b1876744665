#include "lan/discovery/discovery.h"

#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "lan/discovery/interfaces.h"
#include "lan/transport/host_port.h"

namespace shoal::lan {

namespace {

using udp = asio::ip::udp;

// Larger than any beacon so an oversized datagram is seen whole enough to be counted as such
// (recvmsg's MSG_TRUNC reports the real length anyway).
constexpr size_t kReceiveBufferBytes = 2048;

// "ip:port" or "[ipv6]:port" (the one host:port parser), and the host must be an IP address.
udp::endpoint parseTarget(const std::string& text) {
  HostPort target;
  try {
    target = splitHostPort(text);
  } catch (const shoal::Error& e) {
    throw shoal::Error(std::string("discovery unicast target: ") + e.what());
  }
  asio::error_code ec;
  const asio::ip::address address = asio::ip::make_address(target.host, ec);
  if (ec) {
    throw shoal::Error("discovery unicast target '" + text + "': '" + target.host +
                       "' is not an IP address (" + ec.message() + ")");
  }
  return udp::endpoint(address, target.port);
}

std::string interfaceNameOf(unsigned index) {
  char name[IF_NAMESIZE] = {};
  if (index == 0 || if_indextoname(index, name) == nullptr) return {};
  return name;
}

asio::ip::address sourceAddress(const sockaddr_storage& from) {
  if (from.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(from);
    return asio::ip::address_v4(ntohl(in.sin_addr.s_addr));
  }
  const auto& in6 = reinterpret_cast<const sockaddr_in6&>(from);
  asio::ip::address_v6::bytes_type bytes;
  std::memcpy(bytes.data(), in6.sin6_addr.s6_addr, bytes.size());
  return asio::ip::address_v6(bytes);
}

// The sender as a connectable string; link-local IPv6 gets its zone ("fe80::1%eth0").
std::string formatSource(const asio::ip::address& address, const std::string& interfaceName) {
  std::string text = address.to_string();
  if (address.is_v6() && address.to_v6().is_link_local() && !interfaceName.empty()) {
    text += "%" + interfaceName;
  }
  return text;
}

}  // namespace

struct Discovery::Impl {
  explicit Impl(DiscoveryOptions o) : options(std::move(o)), table(options.expiry) {}

  DiscoveryOptions options;
  std::string nonce;
  std::vector<uint8_t> datagram;  // our beacon, encoded once

  std::mutex lifecycle;  // start/stop
  asio::io_context io;
  std::optional<udp::socket> v4;
  std::optional<udp::socket> v6;
  std::optional<asio::steady_timer> beaconTimer;
  std::optional<asio::steady_timer> sweepTimer;
  std::optional<asio::steady_timer> notifyTimer;
  std::thread thread;
  std::atomic<uint16_t> boundPort{0};

  mutable std::mutex mutex;  // everything below
  PeerTable table;
  DiscoveryStats stats;
  std::vector<udp::endpoint> targets;
  std::set<std::string> reportedClashNonces;  // bounded: kMaxRememberedClashNonces
  std::deque<std::string> clashNonceOrder;    // oldest first
  bool notifyPending = false;                 // a onPeersChanged is scheduled

  // io thread only
  std::set<unsigned> joinedV4;
  std::set<unsigned> joinedV6;
  std::set<std::string> loggedSendErrors;
  // This machine's addresses: a beacon with our ID from one of them is another process here
  // sharing our config dir (shoal-cli next to shoal-node), not a copied identity.
  std::set<asio::ip::address> localAddresses;
  std::vector<NetworkInterface> interfaces;  // as of the last beacon: who is on-link
  SourceRateLimiter rateLimiter;
  std::set<std::string> loggedOffLinkSources;  // bounded: kMaxLoggedOffLinkSources
  std::vector<uint8_t> receiveBuffer = std::vector<uint8_t>(kReceiveBufferBytes);

  void log(const std::string& line) const {
    if (options.log) {
      options.log(line);
    } else {
      std::fprintf(stderr, "shoal discovery: %s\n", line.c_str());
    }
  }

  bool interfaceAllowed(const std::string& name) const {
    const auto& names = options.bindInterfaces;
    return names.empty() || std::find(names.begin(), names.end(), name) != names.end();
  }

  void openSockets();
  void rememberLocalAddresses(const std::vector<NetworkInterface>& all);
  void scheduleBeacon();
  void scheduleSweep();
  void schedulePeersChanged();                                  // mutex held
  bool isUnicastTarget(const asio::ip::address& source) const;  // mutex held
  void sendBeacons();
  void joinGroups(const std::vector<NetworkInterface>& eligible);
  void sendTo(udp::socket& socket, const udp::endpoint& to, const std::string& where);
  void waitForDatagrams(udp::socket& socket);
  void drain(udp::socket& socket);
  void handleDatagram(std::span<const uint8_t> bytes, const sockaddr_storage& from,
                      unsigned interfaceIndex);
};

void Discovery::Impl::openSockets() {
  asio::error_code ec4;
  asio::error_code ec6;
  v4.emplace(io);
  v4->open(udp::v4(), ec4);
  if (!ec4) v4->set_option(asio::socket_base::reuse_address(true), ec4);
  if (!ec4) v4->bind(udp::endpoint(asio::ip::address_v4::any(), options.udpPort), ec4);
  if (!ec4) {
    asio::error_code ignored;  // best effort: without them we still send unicast
    v4->set_option(asio::socket_base::broadcast(true), ignored);
    v4->set_option(asio::ip::multicast::hops(1), ignored);
    v4->set_option(asio::ip::multicast::enable_loopback(true), ignored);
    const int on = 1;
    setsockopt(v4->native_handle(), IPPROTO_IP, IP_PKTINFO, &on, sizeof on);
    v4->non_blocking(true, ignored);
    boundPort = v4->local_endpoint(ignored).port();
  } else {
    v4.reset();
  }
  // Same port number as IPv4 even when it was ephemeral: peers send to one port.
  const uint16_t port = v4 ? boundPort.load() : options.udpPort;
  v6.emplace(io);
  v6->open(udp::v6(), ec6);
  if (!ec6) v6->set_option(asio::ip::v6_only(true), ec6);
  if (!ec6) v6->set_option(asio::socket_base::reuse_address(true), ec6);
  if (!ec6) v6->bind(udp::endpoint(asio::ip::address_v6::any(), port), ec6);
  if (!ec6) {
    asio::error_code ignored;
    v6->set_option(asio::ip::multicast::hops(1), ignored);
    v6->set_option(asio::ip::multicast::enable_loopback(true), ignored);
    const int on = 1;
    setsockopt(v6->native_handle(), IPPROTO_IPV6, IPV6_RECVPKTINFO, &on, sizeof on);
    v6->non_blocking(true, ignored);
    if (!v4) boundPort = v6->local_endpoint(ignored).port();
  } else {
    v6.reset();
  }
  if (!v4 && !v6) {
    throw shoal::Error("discovery: cannot bind UDP port " + std::to_string(options.udpPort) +
                       " (IPv4: " + ec4.message() + "; IPv6: " + ec6.message() + ")");
  }
  if (!v4) log("IPv4 unavailable (" + ec4.message() + "), IPv6 only");
  if (!v6) log("IPv6 unavailable (" + ec6.message() + "), IPv4 only");
}

void Discovery::Impl::rememberLocalAddresses(const std::vector<NetworkInterface>& all) {
  interfaces = all;
  localAddresses.clear();
  for (const NetworkInterface& ni : all) {
    localAddresses.insert(ni.ipv4.begin(), ni.ipv4.end());
    localAddresses.insert(ni.ipv6.begin(), ni.ipv6.end());
  }
}

void Discovery::Impl::scheduleBeacon() {
  beaconTimer->expires_after(options.interval);
  beaconTimer->async_wait([this](const asio::error_code& ec) {
    if (ec) return;
    sendBeacons();
    scheduleBeacon();
  });
}

void Discovery::Impl::scheduleSweep() {
  // Often enough that a peer goes within ~1/5 of the expiry after it is due, never busier than
  // the beacon interval.
  const auto period = std::clamp(options.expiry / 5, std::chrono::milliseconds(10),
                                 std::max(options.interval, std::chrono::milliseconds(10)));
  sweepTimer->expires_after(period);
  sweepTimer->async_wait([this](const asio::error_code& ec) {
    if (ec) return;
    {
      std::lock_guard lock(mutex);
      if (table.expire(DiscoveryClock::now())) schedulePeersChanged();
    }
    scheduleSweep();
  });
}

void Discovery::Impl::schedulePeersChanged() {
  if (notifyPending || !options.onPeersChanged || !notifyTimer) return;
  notifyPending = true;
  notifyTimer->expires_after(kPeersChangedDelay);
  notifyTimer->async_wait([this](const asio::error_code& ec) {
    std::vector<Peer> snapshot;
    {
      std::lock_guard lock(mutex);
      notifyPending = false;
      if (ec) return;
      snapshot = table.peers();
    }
    options.onPeersChanged(snapshot);
  });
}

bool Discovery::Impl::isUnicastTarget(const asio::ip::address& source) const {
  return std::any_of(targets.begin(), targets.end(),
                     [&](const udp::endpoint& t) { return t.address() == source; });
}

void Discovery::Impl::joinGroups(const std::vector<NetworkInterface>& eligible) {
  // Forget interfaces that went away: the kernel dropped their memberships with them.
  const auto present = [&](unsigned index) {
    return std::any_of(eligible.begin(), eligible.end(),
                       [&](const NetworkInterface& i) { return i.index == index; });
  };
  std::erase_if(joinedV4, [&](unsigned index) { return !present(index); });
  std::erase_if(joinedV6, [&](unsigned index) { return !present(index); });
  for (const NetworkInterface& ni : eligible) {
    if (!ni.multicast) continue;
    if (v4 && !ni.ipv4.empty() && !joinedV4.count(ni.index)) {
      ip_mreqn request{};
      request.imr_multiaddr.s_addr = htonl(kDiscoveryGroupV4.to_uint());
      request.imr_ifindex = static_cast<int>(ni.index);
      if (setsockopt(v4->native_handle(), IPPROTO_IP, IP_ADD_MEMBERSHIP, &request,
                     sizeof request) == 0 ||
          errno == EADDRINUSE) {
        joinedV4.insert(ni.index);
      } else if (loggedSendErrors.insert("join4 " + ni.name).second) {
        log("cannot join " + kDiscoveryGroupV4.to_string() + " on " + ni.name + ": " +
            std::strerror(errno));
      }
    }
    if (v6 && ni.ipv6LinkLocal && !joinedV6.count(ni.index)) {
      asio::error_code ec;
      v6->set_option(asio::ip::multicast::join_group(kDiscoveryGroupV6, ni.index), ec);
      if (!ec || ec == asio::error::address_in_use) {
        joinedV6.insert(ni.index);
      } else if (loggedSendErrors.insert("join6 " + ni.name).second) {
        log("cannot join " + kDiscoveryGroupV6.to_string() + " on " + ni.name + ": " +
            ec.message());
      }
    }
  }
}

void Discovery::Impl::sendTo(udp::socket& socket, const udp::endpoint& to,
                             const std::string& where) {
  asio::error_code ec;
  socket.send_to(asio::buffer(datagram), to, 0, ec);
  {
    std::lock_guard lock(mutex);
    ++(ec ? stats.sendErrors : stats.sent);
  }
  // One line per destination and error, not one per second (loggedSendErrors: io thread only).
  if (ec && loggedSendErrors.insert(where + " " + ec.message()).second) {
    log("beacon to " + where + " failed: " + ec.message());
  }
}

void Discovery::Impl::sendBeacons() {
  std::vector<NetworkInterface> all = listNetworkInterfaces();
  rememberLocalAddresses(all);
  std::vector<NetworkInterface> eligible;
  for (NetworkInterface& ni : all) {
    const bool wanted = options.bindInterfaces.empty() ? !ni.loopback : interfaceAllowed(ni.name);
    if (ni.up && wanted && ni.index != 0) eligible.push_back(std::move(ni));
  }
  joinGroups(eligible);
  const uint16_t port = boundPort;
  for (const NetworkInterface& ni : eligible) {
    if (v4 && ni.multicast && !ni.ipv4.empty()) {
      ip_mreqn outbound{};
      outbound.imr_ifindex = static_cast<int>(ni.index);
      setsockopt(v4->native_handle(), IPPROTO_IP, IP_MULTICAST_IF, &outbound, sizeof outbound);
      sendTo(*v4, udp::endpoint(kDiscoveryGroupV4, port),
             kDiscoveryGroupV4.to_string() + "%" + ni.name);
    }
    if (v4 && ni.broadcast && options.broadcast) {
      for (const asio::ip::address_v4& broadcast : ni.ipv4Broadcast) {
        sendTo(*v4, udp::endpoint(broadcast, port), broadcast.to_string() + "%" + ni.name);
      }
    }
    if (v6 && ni.multicast && ni.ipv6LinkLocal) {
      asio::ip::address_v6 group = kDiscoveryGroupV6;
      group.scope_id(ni.index);
      asio::error_code ignored;
      v6->set_option(asio::ip::multicast::outbound_interface(ni.index), ignored);
      sendTo(*v6, udp::endpoint(group, port), kDiscoveryGroupV6.to_string() + "%" + ni.name);
    }
  }
  std::vector<udp::endpoint> unicast;
  {
    std::lock_guard lock(mutex);
    unicast = targets;
  }
  for (const udp::endpoint& to : unicast) {
    udp::socket* socket = to.address().is_v4() ? (v4 ? &*v4 : nullptr) : (v6 ? &*v6 : nullptr);
    if (socket != nullptr) {
      std::string where = to.address().to_string() + ":" + std::to_string(to.port());
      sendTo(*socket, to, where);
    }
  }
}

void Discovery::Impl::waitForDatagrams(udp::socket& socket) {
  socket.async_wait(udp::socket::wait_read, [this, &socket](const asio::error_code& ec) {
    if (ec) return;  // cancelled by stop()
    drain(socket);
    waitForDatagrams(socket);
  });
}

// Reads every queued datagram with recvmsg (Asio has no way to get IP_PKTINFO, which says which
// interface a datagram arrived on).
void Discovery::Impl::drain(udp::socket& socket) {
  for (;;) {
    sockaddr_storage from{};
    iovec iov{receiveBuffer.data(), receiveBuffer.size()};
    alignas(cmsghdr) unsigned char control[256];
    msghdr message{};
    message.msg_name = &from;
    message.msg_namelen = sizeof from;
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    const ssize_t length = recvmsg(socket.native_handle(), &message, MSG_DONTWAIT | MSG_TRUNC);
    if (length < 0) {
      if (errno == EINTR) continue;
      return;  // EAGAIN: drained; anything else: wait for the next readiness
    }
    unsigned interfaceIndex = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
        in_pktinfo info{};
        std::memcpy(&info, CMSG_DATA(c), sizeof info);
        interfaceIndex = static_cast<unsigned>(info.ipi_ifindex);
      } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
        in6_pktinfo info{};
        std::memcpy(&info, CMSG_DATA(c), sizeof info);
        interfaceIndex = info.ipi6_ifindex;
      }
    }
    // A datagram longer than the buffer shows up as the whole buffer: still "too large".
    const size_t seen = std::min(static_cast<size_t>(length), receiveBuffer.size());
    handleDatagram(std::span<const uint8_t>(receiveBuffer.data(), seen), from, interfaceIndex);
  }
}

void Discovery::Impl::handleDatagram(std::span<const uint8_t> bytes, const sockaddr_storage& from,
                                     unsigned interfaceIndex) {
  const std::string interfaceName = interfaceNameOf(interfaceIndex);
  const asio::ip::address source = sourceAddress(from);
  const std::string address = formatSource(source, interfaceName);
  const auto now = DiscoveryClock::now();
  std::optional<IdentityClash> clash;
  std::optional<std::string> offLinkLine;
  {
    std::lock_guard lock(mutex);
    ++stats.received;
    const auto drop = [&](uint64_t& counter) {
      ++counter;
      ++stats.dropped;
    };
    if (!options.bindInterfaces.empty() && !interfaceAllowed(interfaceName)) {
      return drop(stats.droppedInterface);
    }
    // Cheap checks first, before any parsing: where it came from, then how often.
    if (!isOnLink(source, interfaceIndex, interfaces) && !isUnicastTarget(source)) {
      drop(stats.droppedOffLink);
      if (loggedOffLinkSources.size() < kMaxLoggedOffLinkSources &&
          loggedOffLinkSources.insert(address).second) {
        offLinkLine = "dropping beacons from " + address + " on " +
                      (interfaceName.empty() ? std::string("?") : interfaceName) +
                      ": not on that interface's link (routed from elsewhere) and not a "
                      "configured unicast target";
      }
    } else if (!rateLimiter.allow(address, now)) {
      drop(stats.droppedRateLimited);
    } else {
      Beacon beacon;
      bool valid = true;
      try {
        beacon = decodeBeacon(bytes);
      } catch (const BeaconError& e) {
        valid = false;
        switch (e.kind()) {
          case BeaconError::Kind::TooLarge:
            drop(stats.droppedTooLarge);
            break;
          case BeaconError::Kind::BadMagic:
            drop(stats.droppedBadMagic);
            break;
          case BeaconError::Kind::UnsupportedVersion:
            drop(stats.droppedBadVersion);
            break;
          case BeaconError::Kind::Malformed:
            drop(stats.droppedMalformed);
            break;
        }
      }
      if (valid) {
        // Names and summaries reach logs, terminals and the app: one safe line each.
        beacon.name = sanitizeDisplayText(beacon.name, kMaxNameBytes);
        beacon.summary = sanitizeDisplayText(beacon.summary, kMaxSummaryBytes);
        if (beacon.deviceId == options.deviceId) {
          if (beacon.nonce == nonce || localAddresses.count(source) != 0) {
            drop(stats.droppedOwn);
          } else {
            ++stats.accepted;
            ++stats.identityClashes;
            if (reportedClashNonces.insert(beacon.nonce).second) {
              clashNonceOrder.push_back(beacon.nonce);
              if (clashNonceOrder.size() > kMaxRememberedClashNonces) {
                reportedClashNonces.erase(clashNonceOrder.front());
                clashNonceOrder.pop_front();
              }
              clash = IdentityClash{beacon.deviceId, beacon.nonce,  beacon.name,
                                    address,         interfaceName, beacon.tcpPort};
            }
          }
        } else {
          const PeerTableStats before = table.stats();
          const bool changed = table.observe(beacon, address, interfaceName, now);
          const PeerTableStats& after = table.stats();
          if (after.refusedPeers != before.refusedPeers ||
              after.refusedAddresses != before.refusedAddresses) {
            drop(stats.droppedTableFull);
          } else {
            ++stats.accepted;
            stats.unconfirmedEndpointClaims += after.candidateBeacons - before.candidateBeacons;
          }
          if (changed) schedulePeersChanged();
        }
      }
    }
  }
  if (offLinkLine) log(*offLinkLine);
  if (clash) {
    log("beacon from " + clash->address + " (" + clash->theirName + ", TCP port " +
        std::to_string(clash->tcpPort) + ") claims our device ID " + clash->deviceId +
        " with another instance nonce: a copy of our identity, or a forged beacon (unproven)");
    if (options.onIdentityClash) options.onIdentityClash(*clash);
  }
}

Discovery::Discovery(DiscoveryOptions options)
    : m_impl(std::make_unique<Impl>(std::move(options))) {
  Impl& d = *m_impl;
  if (d.options.interval.count() <= 0 || d.options.expiry <= d.options.interval) {
    throw shoal::Error("discovery options: interval " + std::to_string(d.options.interval.count()) +
                       " ms and expiry " + std::to_string(d.options.expiry.count()) +
                       " ms: need 0 < interval < expiry");
  }
  // SHOAL_DISCOVERY_INTERFACES (comma-separated names) stands in for an empty bindInterfaces:
  // the test suite sets "lo" (tests/CMakeLists.txt, scripts/test) so that no beacon of a test
  // leaves the machine; tests across hosts run in network namespaces, where it is unset.
  if (const char* env = std::getenv("SHOAL_DISCOVERY_INTERFACES");
      env && *env && d.options.bindInterfaces.empty()) {
    std::string list = env;
    for (size_t start = 0; start <= list.size();) {
      const size_t comma = std::min(list.find(',', start), list.size());
      if (comma > start) d.options.bindInterfaces.push_back(list.substr(start, comma - start));
      start = comma + 1;
    }
  }
  d.nonce = makeBeaconNonce();
  Beacon own{d.options.deviceId, d.options.name, d.options.tcpPort, d.nonce, d.options.summary};
  try {
    d.datagram = encodeBeacon(own);
  } catch (const BeaconError& e) {
    throw shoal::Error(std::string("discovery options: ") + e.what());
  }
  for (const std::string& target : d.options.unicastTargets)
    d.targets.push_back(parseTarget(target));
}

Discovery::~Discovery() { stop(); }

void Discovery::start() {
  Impl& d = *m_impl;
  std::lock_guard lock(d.lifecycle);
  if (d.thread.joinable()) return;
  d.io.restart();
  d.openSockets();
  d.beaconTimer.emplace(d.io);
  d.sweepTimer.emplace(d.io);
  d.notifyTimer.emplace(d.io);
  d.joinedV4.clear();
  d.joinedV6.clear();
  d.rememberLocalAddresses(listNetworkInterfaces());
  if (d.v4) d.waitForDatagrams(*d.v4);
  if (d.v6) d.waitForDatagrams(*d.v6);
  asio::post(d.io, [&d] {
    d.sendBeacons();
    d.scheduleBeacon();
  });
  d.scheduleSweep();
  d.thread = std::thread([&d] { d.io.run(); });
}

void Discovery::stop() {
  Impl& d = *m_impl;
  std::lock_guard lock(d.lifecycle);
  if (!d.thread.joinable()) return;
  if (std::this_thread::get_id() == d.thread.get_id()) {
    // Joining our own thread would deadlock.
    throw shoal::Error("Discovery::stop() called from a Discovery callback");
  }
  d.io.stop();
  d.thread.join();
  d.beaconTimer.reset();
  d.sweepTimer.reset();
  d.notifyTimer.reset();
  {
    std::lock_guard tableLock(d.mutex);
    d.notifyPending = false;
  }
  d.v4.reset();  // closes the socket (and leaves the groups)
  d.v6.reset();
}

std::vector<Peer> Discovery::peers() const {
  std::lock_guard lock(m_impl->mutex);
  return m_impl->table.peers();
}

DiscoveryStats Discovery::stats() const {
  std::lock_guard lock(m_impl->mutex);
  DiscoveryStats s = m_impl->stats;
  s.peers = m_impl->table.size();
  return s;
}

uint16_t Discovery::udpPort() const { return m_impl->boundPort; }

const std::string& Discovery::nonce() const { return m_impl->nonce; }

void Discovery::addUnicastTarget(const std::string& target) {
  const udp::endpoint endpoint = parseTarget(target);
  std::lock_guard lock(m_impl->mutex);
  m_impl->targets.push_back(endpoint);
}

void Discovery::confirmEndpoint(const std::string& deviceId, const std::string& address,
                                uint16_t port) {
  Impl& d = *m_impl;
  bool changed = false;
  {
    std::lock_guard lock(d.mutex);
    changed = d.table.confirm(deviceId, PeerEndpoint{address, port});
  }
  // The notify timer belongs to the io thread (Asio timers are not thread-safe).
  if (changed) {
    asio::post(d.io, [&d] {
      std::lock_guard lock(d.mutex);
      d.schedulePeersChanged();
    });
  }
}

}  // namespace shoal::lan
