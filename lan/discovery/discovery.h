#pragma once
// LAN discovery: every node announces itself with a beacon (beacon.h) once per interval and
// keeps a table of the peers it hears, dropping those silent for longer than the expiry.
//
// Where beacons go, on every up interface (or only those in bindInterfaces):
//   - IPv4 multicast to 239.255.47.47 (organization-local scope, RFC 2365) port 47474, TTL 1;
//   - IPv6 multicast to ff02::7368:6f61 ("shoa", link-local scope) port 47474, hop limit 1;
//   - IPv4 broadcast to the interface's broadcast address (for networks that drop multicast);
//   - unicast to each configured target (static peers; the loopback unit tests).
// A receiver sees the same beacon several ways; the peer table merges them by device ID.
//
// Threading: Discovery runs its own io thread. Callbacks run on that thread, without internal
// locks held; they may call peers()/stats() but must not call stop() or destroy the object.
// All public methods are thread-safe.

#include <asio/ip/address_v4.hpp>
#include <asio/ip/address_v6.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lan/discovery/beacon.h"
#include "lan/discovery/display_name.h"
#include "lan/discovery/peer_table.h"
#include "lan/discovery/rate_limiter.h"

namespace shoal::lan {

inline constexpr uint16_t kDefaultDiscoveryPort = 47474;
inline const asio::ip::address_v4 kDiscoveryGroupV4 = asio::ip::make_address_v4("239.255.47.47");
inline const asio::ip::address_v6 kDiscoveryGroupV6 = asio::ip::make_address_v6("ff02::7368:6f61");
// How long changes are gathered before onPeersChanged: a flood of new IDs costs one table copy
// per 50 ms, not one per datagram; well inside "discovered within 3 s".
inline constexpr std::chrono::milliseconds kPeersChangedDelay{50};
// Clash nonces remembered so each is reported once; beyond, the oldest is forgotten (a flood of
// forged nonces cannot grow memory, it only re-reports old ones, which the receiver rate-limits).
inline constexpr size_t kMaxRememberedClashNonces = 64;
// Off-link sources named in the log; later ones are only counted (droppedOffLink).
inline constexpr size_t kMaxLoggedOffLinkSources = 16;

// A beacon with our device ID but another instance's nonce, from an on-link address that is not
// this machine's. It is only a CLAIM: our device ID is public (every beacon and certificate
// carries it), so anyone can forge such a beacon. It may mean a second machine runs with a copy
// of our identity files (cloned VM, copied config dir); the receiver must check it before acting
// (NodeService connects to address:tcpPort and requires the peer to present our certificate over
// TLS, which only a holder of our private key can do). (The same from one of our own addresses
// is another process here sharing the config dir, e.g. shoal-cli next to shoal-node: not a
// clash.)
struct IdentityClash {
  std::string deviceId;    // ours
  std::string theirNonce;  // the other instance's
  std::string theirName;   // sanitized (display_name.h)
  std::string address;     // where the beacon came from ("10.0.0.5", "fe80::1%eth0")
  std::string interfaceName;
  uint16_t tcpPort = 0;  // the TCP port the beacon announces: where to ask for proof
};

struct DiscoveryOptions {
  std::string deviceId;  // ours, as formatDeviceId writes it
  std::string name;      // display name, 1..128 bytes
  uint16_t tcpPort = 0;  // where our Listener accepts connections
  std::string summary;   // devices in one line, at most 512 bytes (beacon.h)
  // UDP port beacons are sent to and received on. 0 binds an ephemeral port (tests; nobody
  // else will find us except through unicast targets).
  uint16_t udpPort = kDefaultDiscoveryPort;
  std::chrono::milliseconds interval{1000};  // between beacons
  std::chrono::milliseconds expiry{5000};    // silence after which a peer is dropped
  // Interface names to announce on and accept beacons from; empty = every up, non-loopback
  // interface. Naming "lo" is allowed (it carries unicast targets only: no multicast flag).
  std::vector<std::string> bindInterfaces;
  // Also send to each interface's IPv4 broadcast address (for networks that drop multicast).
  bool broadcast = true;
  // Extra "ip:port" destinations (IPv4, or IPv6 in brackets: "[fe80::1%eth0]:47474"), sent
  // every beacon. More can be added after start() with addUnicastTarget().
  std::vector<std::string> unicastTargets;
  // Called with the whole table after changes (peer or address added/expired, name, port,
  // summary, nonce or confirmation changed), at most once per kPeersChangedDelay: a burst of
  // changes is reported once, with the table as it is then. Optional.
  std::function<void(const std::vector<Peer>&)> onPeersChanged;
  // Called once per distinct clashing nonce (see IdentityClash: a claim, not proof; the last
  // kMaxRememberedClashNonces nonces are remembered). Optional; a line is logged either way.
  std::function<void(const IdentityClash&)> onIdentityClash;
  // Where warnings go (one line each, no newline); default stderr with a "shoal discovery: "
  // prefix.
  std::function<void(const std::string&)> log;
};

struct DiscoveryStats {
  uint64_t sent = 0;        // datagrams handed to the kernel
  uint64_t sendErrors = 0;  // send failures (interface went down, no route, ...)
  uint64_t received = 0;    // datagrams read; = accepted + dropped
  uint64_t accepted = 0;    // valid beacons from other instances (clashes included)
  uint64_t dropped = 0;     // sum of the dropped* counters below
  // Our own beacons coming back (multicast loop, broadcast echo), and beacons with our device
  // ID from another process on this machine (one of our addresses as source).
  uint64_t droppedOwn = 0;
  uint64_t droppedTooLarge = 0;    // longer than kMaxBeaconBytes
  uint64_t droppedBadMagic = 0;    // not a Shoal beacon
  uint64_t droppedBadVersion = 0;  // a Shoal beacon of another protocol version
  uint64_t droppedMalformed = 0;   // right header, bad JSON or fields
  uint64_t droppedInterface = 0;   // arrived on an interface outside bindInterfaces
  // From a source that is not on the arrival interface's link (isOnLink, interfaces.h) and not
  // a configured unicast target: someone across a router.
  uint64_t droppedOffLink = 0;
  uint64_t droppedRateLimited = 0;  // over the per-source token bucket (rate_limiter.h)
  // Valid beacons the peer table refused: a new device ID while it held kMaxPeers, or a new
  // address of a peer holding kMaxAddressesPerPeer (peer_table.h).
  uint64_t droppedTableFull = 0;
  uint64_t identityClashes = 0;  // beacons with our ID and a foreign nonce (each one counted)
  // Beacons of a peer with a confirmed endpoint from another address or port: recorded as
  // candidates, not applied (peer_table.h).
  uint64_t unconfirmedEndpointClaims = 0;
  uint64_t peers = 0;  // device IDs in the table now
};

class Discovery {
 public:
  // Validates the options (the beacon must encode: beacon.h limits) and draws the instance
  // nonce. Throws shoal::Error naming the bad option. Does not touch the network.
  explicit Discovery(DiscoveryOptions options);
  ~Discovery();  // stop()
  Discovery(const Discovery&) = delete;
  Discovery& operator=(const Discovery&) = delete;

  // Binds the UDP sockets, starts the io thread and sends the first beacon at once. Throws
  // shoal::Error when neither IPv4 nor IPv6 can bind the port. A second call does nothing.
  void start();
  // Stops the thread and closes the sockets; the peer table is kept. Idempotent.
  void stop();

  std::vector<Peer> peers() const;
  DiscoveryStats stats() const;
  // The bound UDP port (useful when options.udpPort was 0); 0 before start().
  uint16_t udpPort() const;
  // This process's beacon nonce.
  const std::string& nonce() const;
  // Adds a unicast destination ("ip:port" as in DiscoveryOptions). Throws shoal::Error if it
  // does not parse. Beacons from a target's address are accepted even when it is off-link.
  void addUnicastTarget(const std::string& target);
  // A pinned TLS connection to `deviceId` at address:port succeeded (the caller connected with
  // its trust store and saw that device ID): dial it there from now on, whatever beacons claim
  // (PeerTable::confirm). Call it after each successful connection to a discovered peer.
  void confirmEndpoint(const std::string& deviceId, const std::string& address, uint16_t port);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace shoal::lan
