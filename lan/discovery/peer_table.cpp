#include "lan/discovery/peer_table.h"

#include <algorithm>

namespace shoal::lan {

std::optional<PeerEndpoint> dialEndpoint(const Peer& peer) {
  if (peer.confirmed) {
    // Confirmed where its address still beacons: no beacon from elsewhere moves it. Once that
    // address went silent (expired) the node moved or left: a confirmation kept forever would
    // dial a dead endpoint forever, so the newest beacon's endpoint is dialled instead (the
    // connection is pinned: a forged one can only fail).
    const bool live =
        std::any_of(peer.addresses.begin(), peer.addresses.end(),
                    [&](const PeerAddress& a) { return a.address == peer.confirmed->address; });
    if (live || peer.addresses.empty()) return peer.confirmed;
    const PeerAddress* newest = &peer.addresses.front();
    for (const PeerAddress& a : peer.addresses) {
      if (a.lastSeen > newest->lastSeen) newest = &a;
    }
    return PeerEndpoint{newest->address, newest->tcpPort};
  }
  for (const PeerAddress& a : peer.addresses) {
    if (a.address.find(':') == std::string::npos) return PeerEndpoint{a.address, a.tcpPort};
  }
  if (peer.addresses.empty()) return std::nullopt;
  return PeerEndpoint{peer.addresses.front().address, peer.addresses.front().tcpPort};
}

std::vector<PeerEndpoint> candidateEndpoints(const Peer& peer) {
  std::vector<PeerEndpoint> out;
  for (const PeerAddress& a : peer.addresses) {
    PeerEndpoint e{a.address, a.tcpPort};
    if (!peer.confirmed || e != *peer.confirmed) out.push_back(std::move(e));
  }
  return out;
}

bool PeerTable::observe(const Beacon& beacon, const std::string& address,
                        const std::string& interfaceName, DiscoveryClock::time_point now) {
  auto peer = m_peers.find(beacon.deviceId);
  bool changed = false;
  if (peer == m_peers.end()) {
    const auto confirmed = m_confirmed.find(beacon.deviceId);
    // A confirmed device gets in even when forged IDs fill the table: it is a trusted peer.
    if (m_peers.size() >= kMaxPeers && confirmed == m_confirmed.end()) {
      ++m_stats.refusedPeers;
      return false;
    }
    Peer fresh;
    fresh.deviceId = beacon.deviceId;
    if (confirmed != m_confirmed.end()) {
      fresh.confirmed = confirmed->second;
      fresh.tcpPort = confirmed->second.port;
    }
    peer = m_peers.emplace(beacon.deviceId, std::move(fresh)).first;
    changed = true;
  }
  Peer& p = peer->second;
  auto& addresses = p.addresses;
  auto slot = std::lower_bound(
      addresses.begin(), addresses.end(), address,
      [](const PeerAddress& a, const std::string& text) { return a.address < text; });
  if (slot == addresses.end() || slot->address != address) {
    if (addresses.size() >= kMaxAddressesPerPeer) {
      ++m_stats.refusedAddresses;
      if (addresses.empty()) m_peers.erase(peer);  // unreachable with a cap > 0; keeps it sound
      return changed;
    }
    slot = addresses.insert(slot, PeerAddress{address, interfaceName, beacon.tcpPort, now});
    changed = true;
  } else if (slot->interfaceName != interfaceName || slot->tcpPort != beacon.tcpPort) {
    slot->interfaceName = interfaceName;
    slot->tcpPort = beacon.tcpPort;
    changed = true;
  }
  slot->lastSeen = now;
  p.lastSeen = std::max(p.lastSeen, now);

  // A confirmed peer takes its name, summary and nonce only from beacons of its confirmed
  // endpoint; anything else is a candidate (kept in its address entry above), never applied.
  const bool fromConfirmed =
      !p.confirmed || (p.confirmed->address == address && p.confirmed->port == beacon.tcpPort);
  if (!fromConfirmed) {
    ++m_stats.candidateBeacons;
    return changed;
  }
  const uint16_t port = p.confirmed ? p.confirmed->port : beacon.tcpPort;
  if (p.name != beacon.name || p.tcpPort != port || p.summary != beacon.summary ||
      p.nonce != beacon.nonce) {
    p.name = beacon.name;
    p.tcpPort = port;
    p.summary = beacon.summary;
    p.nonce = beacon.nonce;
    changed = true;
  }
  return changed;
}

bool PeerTable::confirm(const std::string& deviceId, const PeerEndpoint& endpoint) {
  if (auto it = m_confirmed.find(deviceId); it != m_confirmed.end()) {
    it->second = endpoint;
    std::erase(m_confirmOrder, deviceId);
  } else {
    if (m_confirmed.size() >= kMaxConfirmedEndpoints) {
      const std::string oldest = m_confirmOrder.front();
      m_confirmOrder.erase(m_confirmOrder.begin());
      m_confirmed.erase(oldest);
      if (auto evicted = m_peers.find(oldest); evicted != m_peers.end()) {
        evicted->second.confirmed.reset();
      }
    }
    m_confirmed.emplace(deviceId, endpoint);
  }
  m_confirmOrder.push_back(deviceId);
  const auto peer = m_peers.find(deviceId);
  if (peer == m_peers.end()) return false;
  Peer& p = peer->second;
  if (p.confirmed == endpoint && p.tcpPort == endpoint.port) return false;
  p.confirmed = endpoint;
  p.tcpPort = endpoint.port;
  return true;
}

bool PeerTable::expire(DiscoveryClock::time_point now) {
  const DiscoveryClock::time_point cutoff = now - m_expiry;
  bool changed = false;
  for (auto it = m_peers.begin(); it != m_peers.end();) {
    auto& addresses = it->second.addresses;
    const size_t before = addresses.size();
    std::erase_if(addresses, [cutoff](const PeerAddress& a) { return a.lastSeen < cutoff; });
    changed = changed || addresses.size() != before;
    if (addresses.empty()) {
      it = m_peers.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  return changed;
}

std::vector<Peer> PeerTable::peers() const {
  std::vector<Peer> out;
  out.reserve(m_peers.size());
  for (const auto& [id, peer] : m_peers) out.push_back(peer);
  return out;
}

}  // namespace shoal::lan
