#pragma once
// A pool member: the node's identity and trust store, a TLS Listener for coordinators, a
// NodeHost serving the node protocol on each trusted connection (one thread per connection),
// telemetry sampled every 500 ms, and LAN discovery beacons. What `shoal-node` runs.
//
// Identity clash: when discovery hears our device ID from another machine (a config dir copied
// to it, a cloned VM; exo issue #1599), the node regenerates its identity: the old
// identity/ is kept as identity.replaced/, a new certificate (so a new device ID) is created,
// the trust store is kept, the connections made under the old ID are closed, and the listener
// (same port) and discovery restart with the new ID; one line is logged. Usually only the first
// machine to hear the other moves (within a beacon interval; the other then hears only the new
// ID); both may. Coordinators trust (or pair with) a node that moved again.
//
// State lives in the config directory: identity/{cert,key}.pem, trusted.json,
// model_hashes.json, device_profiles.json, shards/<model sha256>/<first>-<last>.gguf.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
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

  // What discovery's onIdentityClash does: regenerate the identity (see above) on the service's
  // own thread, within about 500 ms; returns at once. Public so that a clash can be simulated
  // where discovery cannot produce one (both instances on one machine: beacons from our own
  // addresses are never a clash). A report for an ID we no longer have is ignored.
  void reportIdentityClash(const IdentityClash& clash);
  // Identity regenerations so far (tests wait on it).
  int identityRegenerations() const { return m_regenerations.load(); }

 private:
  struct Served {
    std::shared_ptr<Connection> connection;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void onConnection(std::unique_ptr<Connection> connection);
  void startListener(uint16_t port);  // m_listener on m_identity (m_netMutex held)
  void startDiscovery();              // m_discovery for m_identity (m_netMutex held)
  void regenerateIdentity(const IdentityClash& clash);

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
  std::unique_ptr<IdentityClash> m_pendingClash;  // handled by the telemetry thread
  std::atomic<int> m_regenerations{0};
  std::atomic<bool> m_stop{false};
  std::mutex m_servedMutex;
  std::vector<std::unique_ptr<Served>> m_served;
  std::thread m_telemetryThread;
};

}  // namespace shoal::lan
