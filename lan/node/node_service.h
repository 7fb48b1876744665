#pragma once
// A pool member: the node's identity and trust store, a TLS Listener for coordinators, a
// NodeHost serving the node protocol on each trusted connection (one thread per connection),
// telemetry sampled every 500 ms, and LAN discovery beacons. What `shoal-node` runs.
//
// Identity clash (a config dir copied to another machine, a cloned VM; exo issue #1599). A beacon
// is never proof of one: our device ID is public, so anyone on the LAN can send a beacon with it
// (issue 14: three forged datagrams used to rotate a node's identity three times and delete the
// original key). So:
//   - discovery's report is a *claim* (address, announced TCP port). The service checks it on
//     its own thread: it opens a TLS connection to that address and port and requires the peer to
//     present a certificate whose SHA-256 is our device ID. TLS 1.3 makes the server sign the
//     handshake with the certificate's key, so only a holder of our private key can pass. At most
//     one check runs at a time, at most one per kClashProbeMinGap, each endpoint at most once per
//     kClashProbeCooldown, each bounded by kClashProbeTimeout, with at most kMaxPendingClashClaims
//     waiting; an unproven claim is logged (one line) and changes nothing.
//   - a proven clash is reported, not acted on: one log line, and node_info's "warnings" (which
//     `shoal-cli pool status` prints) says which address holds a copy of our identity. The user
//     decides which machine gets a new identity (the one whose identity/ is moved aside gets a
//     new one at its next start). Rotating by itself would not help anyway: the copy keeps the
//     key, and coordinators that trust the old ID still trust it.
//   - the holder of our key at the claimed endpoint may be this very node behind a TCP relay
//     the claimant runs there (forwarding to our own port). The probe presents our certificate
//     and sends a fresh token in its first frame, then waits for any reply; our own Listener
//     records tokens of clients presenting our certificate before it replies
//     (Listener::sawSelfProbe), so a probe whose token our listener saw led back here: not
//     proven (one log line). A real copy's probe of us carries its own token, so two copies
//     checking each other at once still both prove the clash.
//   - only when options.rotateIdentityOnProvenClash (`shoal-node --rotate-identity-on-clash`)
//     asks does a proven clash regenerate our identity, at most once per run (a later proven
//     clash is reported only): the old identity/ is moved to
//     identity.replaced.<UTC time>/ (never deleted or overwritten: every earlier identity is
//     kept), a new certificate (new device ID) is created, the trust store is kept, the
//     connections made under the old ID are closed, and the listener (same port) and discovery
//     restart with the new ID; one line is logged. Coordinators trust (or pair with) it again.
//
// State lives in the config directory: identity/{cert,key}.pem, trusted.json,
// model_hashes.json, device_profiles.json, shards/<model sha256>/<first>-<last>.gguf.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lan/node/node_host.h"

namespace shoal::lan {

class Discovery;
class Listener;
class TrustStore;
struct Identity;
struct IdentityClash;

inline constexpr uint16_t kDefaultNodePort = 47475;  // TCP; discovery beacons use UDP 47474

// Checking identity-clash claims (see above). A TLS handshake on a LAN takes milliseconds; 3 s
// covers a loaded peer and bounds what a claim pointing at a black hole costs.
inline constexpr std::chrono::milliseconds kClashProbeTimeout{3000};
// At most one check per second: a flood of claims cannot make the node a connection cannon.
inline constexpr std::chrono::milliseconds kClashProbeMinGap{1000};
// An endpoint checked once is not checked again for a minute (a copy beacons every second).
inline constexpr std::chrono::seconds kClashProbeCooldown{60};
// Claims waiting for a check; more are dropped (discovery reports each nonce once, a real copy's
// is in the queue unless a flood filled it: then its warning waits, nothing else is at stake).
inline constexpr size_t kMaxPendingClashClaims = 8;
// Endpoints whose last check time is remembered for the cooldown; the oldest is forgotten.
inline constexpr size_t kMaxCheckedClashEndpoints = 64;
// Proven-clash warnings kept for node_info (the newest).
inline constexpr size_t kMaxNodeWarnings = 4;

struct NodeServiceOptions {
  std::string name;  // display name; the host name when empty
  std::filesystem::path configDir;
  std::filesystem::path modelsDir;  // GGUF files this node can load itself (may be empty)
  std::string bindHost = "0.0.0.0";
  uint16_t port = kDefaultNodePort;  // 0: an ephemeral port
  std::vector<std::string> trust;    // device IDs to add to the trust store at start
  int cpuThreads = 0;                // <= 0: one per physical core
  bool discovery = true;
  bool profile = true;     // measure (or read cached) CPU figures at start: device_profile.h
  bool reprofile = false;  // measure again even when cached (--reprofile)
  // UDP port of discovery (DiscoveryOptions::udpPort); 0 binds an ephemeral one (tests: several
  // nodes on one machine, each told apart by its port, see discoveryPort()).
  uint16_t discoveryPort = 47474;  // kDefaultDiscoveryPort (lan/discovery/discovery.h)
  // Regenerate the identity after a *proven* identity clash (see above) instead of only
  // reporting it. Off by default: the user chooses which copy moves.
  bool rotateIdentityOnProvenClash = false;
  // Cap of the streamed-shard cache in bytes (NodeHostOptions::shardCacheMaxBytes); 0: the
  // default, 1/4 of the free disk, at most 256 GiB (--shard-cache-max-gb).
  uint64_t shardCacheMaxBytes = 0;
};

// $XDG_CONFIG_HOME/shoal, else ~/.config/shoal, else ./.shoal.
std::filesystem::path defaultConfigDir();

// The device ID of the identity in configDir (created when absent). Throws shoal::Error.
std::string nodeDeviceId(const std::filesystem::path& configDir);

class NodeService {
 public:
  // Loads (or creates) the identity, adds options.trust to the trust store, scans the models
  // directory, binds the listener and starts discovery (a discovery failure is logged, not
  // fatal). Throws shoal::Error / TransportError when the identity or the port is unusable.
  explicit NodeService(NodeServiceOptions options);
  ~NodeService();  // stop()
  NodeService(const NodeService&) = delete;
  NodeService& operator=(const NodeService&) = delete;

  std::string deviceId() const;  // changes when the identity is regenerated
  const std::string& name() const { return m_options.name; }
  uint16_t port() const;  // 0 if a regeneration could bind no port at all
  // Allow pairing for `validFor` with a fresh code, returned as "ABCD-EFGH".
  std::string startPairing(std::chrono::seconds validFor);
  NodeHost& host() { return *m_host; }

  // Stop accepting, close every connection (their stages unload), stop discovery. Idempotent.
  void stop();

  // What discovery's onIdentityClash does: queue the claim for the check described above (on
  // the service's own thread) and return at once. Public so that a claim can be made where
  // discovery would not report one (both instances on one machine: beacons from our own
  // addresses are never a clash). A claim for an ID we no longer have is ignored.
  void reportIdentityClash(const IdentityClash& clash);
  // Identity regenerations so far (tests wait on it).
  int identityRegenerations() const { return m_regenerations.load(); }
  // Clash claims checked so far, and how many of them were proven (tests wait on them).
  int clashClaimsChecked() const { return m_clashChecks.load(); }
  int clashesProven() const { return m_clashesProven.load(); }
  // What node_info's "warnings" says now (a proven identity clash); empty when all is well.
  std::vector<std::string> warnings() const;
  // The bound discovery UDP port; 0 when discovery is off.
  uint16_t discoveryPort() const;

 private:
  struct Served {
    std::shared_ptr<Connection> connection;
    std::thread thread;
    std::atomic<bool> done{false};
    bool revoked = false;  // closed because its device is no longer trusted (m_servedMutex)
    // An introduced node's link (stage_links.h), not a coordinator: closed when its route is
    // revoked, never by the trust check.
    bool link = false;
  };
  void onConnection(std::unique_ptr<Connection> connection);
  // On the telemetry thread, every tick: re-reads trusted.json when it changed (shoal-cli pool
  // forget, the app) and closes at once every connection whose device it no longer trusts; new
  // connections from it are refused by the listener, which asks the same store.
  void closeRevokedSessions();
  void startListener(uint16_t port);  // m_listener on m_identity (m_netMutex held)
  void startDiscovery();              // m_discovery for m_identity (m_netMutex held)
  void regenerateIdentity(const IdentityClash& clash);
  void runClashChecks();                             // m_clashThread
  void checkClashClaim(const IdentityClash& clash);  // on m_clashThread

  NodeServiceOptions m_options;
  // m_netMutex guards the identity, the listener and discovery, which a regeneration replaces,
  // and the pairing code a new listener must be given again.
  mutable std::mutex m_netMutex;
  std::unique_ptr<Identity> m_identity;
  std::unique_ptr<TrustStore> m_trust;
  std::unique_ptr<NodeHost> m_host;
  std::unique_ptr<Listener> m_listener;
  std::unique_ptr<Discovery> m_discovery;
  std::string m_pairingCode;
  std::chrono::steady_clock::time_point m_pairingUntil;
  // Claims waiting for m_clashThread (guarded by m_netMutex; at most kMaxPendingClashClaims),
  // and when each endpoint ("address:port") was last checked (bounded, oldest forgotten).
  std::vector<IdentityClash> m_clashClaims;
  std::map<std::string, std::chrono::steady_clock::time_point> m_clashChecked;
  std::condition_variable m_clashWake;
  std::thread m_clashThread;
  // A proven identity clash, as node_info reports it (m_netMutex).
  std::vector<std::string> m_warnings;
  std::atomic<int> m_regenerations{0};
  // A rotation was attempted in this run (m_clashThread only): at most one per run.
  bool m_rotationTried = false;
  std::atomic<int> m_clashChecks{0};
  std::atomic<int> m_clashesProven{0};
  std::atomic<bool> m_stop{false};
  std::mutex m_servedMutex;
  std::vector<std::unique_ptr<Served>> m_served;
  std::thread m_telemetryThread;
};

}  // namespace shoal::lan
