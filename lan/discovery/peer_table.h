#pragma once
// The peers discovery has heard from, by device ID, with expiry. Pure bookkeeping (time is passed
// in), so the rules are testable without sockets or sleeping. Not thread-safe: Discovery guards
// it with its mutex.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "lan/discovery/beacon.h"

namespace shoal::lan {

using DiscoveryClock = std::chrono::steady_clock;

// One source address a peer's beacons arrived from.
struct PeerAddress {
  // Ready to connect to: "10.77.1.2", or link-local IPv6 with its zone, "fe80::1%eth0".
  std::string address;
  std::string interfaceName;  // our interface it arrived on, e.g. "eth0"
  DiscoveryClock::time_point lastSeen;
};

struct Peer {
  std::string deviceId;
  std::string name;
  uint16_t tcpPort = 0;
  std::string summary;
  std::string nonce;                    // changes when the peer restarts
  std::vector<PeerAddress> addresses;   // sorted by address; each expires on its own
  DiscoveryClock::time_point lastSeen;  // newest of addresses[].lastSeen
};

class PeerTable {
 public:
  // A peer (or one of its addresses) silent for longer than `expiry` is dropped.
  explicit PeerTable(std::chrono::milliseconds expiry) : m_expiry(expiry) {}

  // Records a beacon received from `address` on `interfaceName` at `now`. Returns true when what
  // peers() shows changed beyond timestamps: a new peer or address, or a new name, port, summary
  // or nonce.
  bool observe(const Beacon& beacon, const std::string& address, const std::string& interfaceName,
               DiscoveryClock::time_point now);

  // Drops addresses and peers not heard from since now - expiry. Returns true if any went.
  bool expire(DiscoveryClock::time_point now);

  // Peers sorted by device ID.
  const std::vector<Peer>& peers() const { return m_peers; }

 private:
  std::chrono::milliseconds m_expiry;
  std::vector<Peer> m_peers;
};

}  // namespace shoal::lan
