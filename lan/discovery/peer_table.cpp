#include "lan/discovery/peer_table.h"

#include <algorithm>

namespace shoal::lan {

bool PeerTable::observe(const Beacon& beacon, const std::string& address,
                        const std::string& interfaceName, DiscoveryClock::time_point now) {
  auto peer =
      std::lower_bound(m_peers.begin(), m_peers.end(), beacon.deviceId,
                       [](const Peer& p, const std::string& id) { return p.deviceId < id; });
  bool changed = false;
  if (peer == m_peers.end() || peer->deviceId != beacon.deviceId) {
    Peer fresh;
    fresh.deviceId = beacon.deviceId;
    peer = m_peers.insert(peer, std::move(fresh));
    changed = true;
  }
  if (peer->name != beacon.name || peer->tcpPort != beacon.tcpPort ||
      peer->summary != beacon.summary || peer->nonce != beacon.nonce) {
    peer->name = beacon.name;
    peer->tcpPort = beacon.tcpPort;
    peer->summary = beacon.summary;
    peer->nonce = beacon.nonce;
    changed = true;
  }
  auto& addresses = peer->addresses;
  auto slot = std::lower_bound(
      addresses.begin(), addresses.end(), address,
      [](const PeerAddress& a, const std::string& text) { return a.address < text; });
  if (slot == addresses.end() || slot->address != address) {
    slot = addresses.insert(slot, PeerAddress{address, interfaceName, now});
    changed = true;
  } else if (slot->interfaceName != interfaceName) {
    slot->interfaceName = interfaceName;
    changed = true;
  }
  slot->lastSeen = now;
  peer->lastSeen = std::max(peer->lastSeen, now);
  return changed;
}

bool PeerTable::expire(DiscoveryClock::time_point now) {
  const DiscoveryClock::time_point cutoff = now - m_expiry;
  bool changed = false;
  for (Peer& peer : m_peers) {
    const auto stale = [cutoff](const PeerAddress& a) { return a.lastSeen < cutoff; };
    const auto removed = std::remove_if(peer.addresses.begin(), peer.addresses.end(), stale);
    if (removed != peer.addresses.end()) {
      peer.addresses.erase(removed, peer.addresses.end());
      changed = true;
    }
  }
  const auto gone = std::remove_if(m_peers.begin(), m_peers.end(),
                                   [](const Peer& p) { return p.addresses.empty(); });
  if (gone != m_peers.end()) {
    m_peers.erase(gone, m_peers.end());
    changed = true;
  }
  return changed;
}

}  // namespace shoal::lan
