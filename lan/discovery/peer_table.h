#pragma once
// The peers discovery has heard from, by device ID, with expiry. Pure bookkeeping (time is passed
// in), so the rules are testable without sockets or sleeping. Not thread-safe: Discovery guards
// it with its mutex.
//
// A beacon proves nothing, and anyone on the LAN can send one, so the table is bounded and never
// lets a beacon move a peer that a pinned connection has confirmed:
//   - at most kMaxPeers device IDs (a flood of forged IDs fills it and is refused beyond, O(log n)
//     per beacon); a device ID with a confirmed endpoint is admitted even when it is full;
//   - at most kMaxAddressesPerPeer source addresses per device ID;
//   - once confirm() recorded where a pinned TLS connection to a device ID succeeded, beacons
//     never change that peer's dial port, name, summary or nonce unless they come from that very
//     address and announce that port. Beacons claiming another address or port are kept as
//     candidates (their address entry with its own port: candidateEndpoints()) for the caller to
//     try; only confirm() after a pinned connection there moves the peer. Confirmations outlive
//     the peer's expiry (a peer that goes quiet and comes back keeps its confirmed endpoint).
//     dialEndpoint() uses the confirmation only while its address still beacons (or the peer
//     has no other address): a node that moved is dialled where its newest beacon says.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lan/discovery/beacon.h"

namespace shoal::lan {

using DiscoveryClock = std::chrono::steady_clock;

// Device IDs the table holds at once. A Shoal pool is a handful to a few tens of machines on one
// LAN; 256 is every host of a /24. Each entry is at most ~2 KB (beacon fields + addresses), so
// the full table stays under 1 MB, and copying it for onPeersChanged stays cheap.
inline constexpr size_t kMaxPeers = 256;
// Source addresses kept per device ID: a machine with a few interfaces, each with an IPv4 and
// an IPv6 link-local address. A flood of spoofed sources for one real ID cannot grow it.
inline constexpr size_t kMaxAddressesPerPeer = 8;
// Confirmed endpoints remembered (only the caller adds them, after pinned connections: bounded
// like the table for hygiene; the oldest confirmation is forgotten beyond it).
inline constexpr size_t kMaxConfirmedEndpoints = kMaxPeers;

// Where to open a TCP connection to a peer.
struct PeerEndpoint {
  std::string address;  // as PeerAddress::address
  uint16_t port = 0;
  bool operator==(const PeerEndpoint&) const = default;
};

// One source address a peer's beacons arrived from.
struct PeerAddress {
  // Ready to connect to: "10.77.1.2", or link-local IPv6 with its zone, "fe80::1%eth0".
  std::string address;
  std::string interfaceName;  // our interface it arrived on, e.g. "eth0"
  uint16_t tcpPort = 0;       // the port the newest beacon from this address announced
  DiscoveryClock::time_point lastSeen;
};

struct Peer {
  std::string deviceId;
  std::string name;  // sanitized by Discovery (display_name.h) before it gets here
  // The port to dial: the confirmed endpoint's when there is one, else the newest beacon's.
  uint16_t tcpPort = 0;
  std::string summary;
  std::string nonce;                    // changes when the peer restarts
  std::vector<PeerAddress> addresses;   // sorted by address; each expires on its own
  DiscoveryClock::time_point lastSeen;  // newest of addresses[].lastSeen
  // Where a pinned TLS connection to deviceId succeeded (PeerTable::confirm). Beacons never set
  // or change it. Empty: nothing about this peer is confirmed; every endpoint is a beacon's claim.
  std::optional<PeerEndpoint> confirmed;
};

// The endpoint to dial: the confirmed one while its address is among the peer's live (unexpired)
// source addresses, or when the peer has no address; a confirmed peer whose confirmed address
// went silent is dialled at its newest beacon's endpoint (it moved; the connection is pinned).
// An unconfirmed peer: an IPv4 source address (no zone to carry) with the port announced from
// it, else the first address. Empty when the peer has no address and no confirmation.
std::optional<PeerEndpoint> dialEndpoint(const Peer& peer);

// The endpoints beacons claim for the peer (each source address with the port announced from
// it) that differ from the confirmed one; every endpoint when none is confirmed. Sorted by
// address.
std::vector<PeerEndpoint> candidateEndpoints(const Peer& peer);

// What the table refused (Discovery adds these to its stats).
struct PeerTableStats {
  uint64_t refusedPeers = 0;      // beacons of a new device ID while kMaxPeers were held
  uint64_t refusedAddresses = 0;  // new source addresses of a peer holding kMaxAddressesPerPeer
  uint64_t candidateBeacons = 0;  // beacons of a confirmed peer from elsewhere (not applied)
};

class PeerTable {
 public:
  // A peer (or one of its addresses) silent for longer than `expiry` is dropped.
  explicit PeerTable(std::chrono::milliseconds expiry) : m_expiry(expiry) {}

  // Records a beacon received from `address` on `interfaceName` at `now`. Returns true when what
  // peers() shows changed beyond timestamps: a new peer or address, or a new name, port, summary
  // or nonce. Refused (false, counted in stats()) when it would be a new peer beyond kMaxPeers or
  // a new address beyond kMaxAddressesPerPeer. O(log n) in the number of peers.
  bool observe(const Beacon& beacon, const std::string& address, const std::string& interfaceName,
               DiscoveryClock::time_point now);

  // A pinned TLS connection to `deviceId` at `endpoint` succeeded: from now on the peer is dialled
  // there, whatever beacons say (see the header comment). Returns true when peers() changed.
  bool confirm(const std::string& deviceId, const PeerEndpoint& endpoint);

  // Drops addresses and peers not heard from since now - expiry. Returns true if any went.
  // Confirmations are kept.
  bool expire(DiscoveryClock::time_point now);

  // Peers sorted by device ID (a copy).
  std::vector<Peer> peers() const;
  size_t size() const { return m_peers.size(); }
  const PeerTableStats& stats() const { return m_stats; }

 private:
  std::chrono::milliseconds m_expiry;
  std::map<std::string, Peer> m_peers;  // by device ID
  // deviceId -> endpoint and the order confirmations came in (oldest first, for the bound).
  std::map<std::string, PeerEndpoint> m_confirmed;
  std::vector<std::string> m_confirmOrder;
  PeerTableStats m_stats;
};

}  // namespace shoal::lan
