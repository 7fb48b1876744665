#include "lan/node/node_service.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "engine/error.h"
#include "kernels/backend_registry.h"
#include "lan/discovery/discovery.h"
#include "lan/transport/connect.h"
#include "lan/transport/host_port.h"
#include "lan/transport/identity.h"
#include "lan/transport/listener.h"
#include "lan/transport/pairing.h"
#include "lan/transport/session_ops.h"
#include "lan/transport/tls_connection.h"
#include "lan/transport/trust_store.h"

namespace shoal::lan {

namespace {

constexpr auto kTelemetryInterval = std::chrono::milliseconds(500);

std::string hostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == 0) return "shoal-node";
  return buf;
}

// One line for the discovery beacon: "cpu0: <name>, 31 GiB; ..." cut to the beacon's limit.
std::string deviceSummary(const std::vector<runtime::DeviceInfo>& devices) {
  std::string s;
  for (const auto& d : devices) {
    if (!s.empty()) s += "; ";
    s += d.id + ": " + d.name + ", " + std::to_string(d.memoryTotal >> 30) + " GiB";
  }
  if (s.size() > 500) s.resize(500);
  return s;
}

// The CPU devices' measured figures (device_profile.h), from the config dir's cache or probed
// now; one log line each. Other backends' devices are not probed (they report 0 and the planner
// uses its fallbacks).
std::map<std::string, DeviceProfile> profileCpuDevices(
    const std::vector<std::unique_ptr<runtime::Backend>>& backends, const NodeServiceOptions& o) {
  std::map<std::string, DeviceProfile> out;
  for (const auto& b : backends) {
    if (b->name() != "cpu") continue;
    for (const auto& d : b->devices()) {
      bool measured = false;
      const auto t0 = std::chrono::steady_clock::now();
      const DeviceProfile p = cachedProfile(o.configDir, "cpu: " + d.name, o.reprofile, [&] {
        measured = true;
        return measureCpuProfile(o.cpuThreads);
      });
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const std::string how =
          measured ? "measured in " + std::to_string(static_cast<int>(ms)) + " ms" : "cached";
      std::fprintf(stderr,
                   "shoal-node: %s profile: %.1f GB/s decode read, %.1f GFLOP/s Q4_0 matmul (%s)\n",
                   d.id.c_str(), p.bandwidthBytesPerS / 1e9, p.flopsPerS / 1e9, how.c_str());
      out[d.id] = p;
    }
  }
  return out;
}

// "10.0.0.5:7000", "[fe80::1%eth0]:7000".
std::string endpointText(const std::string& address, uint16_t port) {
  const bool v6 = address.find(':') != std::string::npos;
  return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

// A fresh token for one clash probe (Listener::sawSelfProbe). Not a secret: knowing it only lets
// a client holding our key make the probe look relayed.
std::string probeToken() {
  static std::atomic<uint64_t> counter{0};
  std::random_device random;
  char text[64] = {};
  std::snprintf(text, sizeof text, "%08x%08x-%llu", random(), random(),
                static_cast<unsigned long long>(++counter));
  return text;
}

// identity.replaced.<UTC time>[-n]: a fresh name, so no earlier identity is ever overwritten.
std::filesystem::path asideDirectory(const std::filesystem::path& configDir) {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32] = {};
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  const std::filesystem::path base = configDir / ("identity.replaced." + std::string(stamp));
  std::filesystem::path candidate = base;
  for (int n = 2; std::filesystem::exists(candidate); ++n) {
    candidate = base.string() + "-" + std::to_string(n);
  }
  return candidate;
}

}  // namespace

std::filesystem::path defaultConfigDir() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "shoal";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / ".config" / "shoal";
  }
  return ".shoal";
}

std::string nodeDeviceId(const std::filesystem::path& configDir) {
  return loadOrCreateIdentity(configDir).deviceId;
}

NodeService::NodeService(NodeServiceOptions options) : m_options(std::move(options)) {
  if (m_options.name.empty()) m_options.name = hostName();
  if (m_options.configDir.empty()) m_options.configDir = defaultConfigDir();
  m_identity = std::make_unique<Identity>(loadOrCreateIdentity(m_options.configDir));
  m_trust = std::make_unique<TrustStore>();
  m_trust->load(m_options.configDir);
  for (const auto& id : m_options.trust) {
    const std::string canonical = normalizeDeviceId(id);
    if (!m_trust->isTrusted(canonical)) m_trust->add(canonical, "added with --trust");
  }

  kernels::BackendOptions bo;
  bo.cpuThreads = m_options.cpuThreads;
  std::vector<std::unique_ptr<runtime::Backend>> backends;
  for (const auto& name : kernels::backendNames()) {
    try {
      auto b = kernels::createBackend(name, bo);
      if (const auto a = b->availability(); !a.available) {
        std::fprintf(stderr, "shoal-node: %s backend unavailable: %s\n", name.c_str(),
                     a.reason.c_str());
        continue;
      }
      backends.push_back(std::move(b));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shoal-node: %s backend: %s\n", name.c_str(), e.what());
    }
  }
  NodeHostOptions ho;
  ho.name = m_options.name;
  ho.deviceId = m_identity->deviceId;
  ho.configDir = m_options.configDir;
  ho.shardCacheMaxBytes = m_options.shardCacheMaxBytes;
  if (m_options.profile) ho.profiles = profileCpuDevices(backends, m_options);
  // Links to the next stage's node (direct forwarding): TLS with this node's identity, the peer
  // pinned to the one device ID the coordinator named.
  ho.linkConnector = [this](const std::string& address, const std::string& deviceId) {
    const HostPort hp = splitHostPort(address);
    Identity identity;
    {
      std::lock_guard lock(m_netMutex);
      identity = *m_identity;
    }
    TrustStore pinned;  // in memory only
    pinned.add(deviceId, "next stage");
    return connectTo(hp.host, hp.port, identity, pinned, kLinkConnectTimeout);
  };
  m_host = std::make_unique<NodeHost>(
      ho, std::move(backends),
      std::make_shared<ModelCatalog>(m_options.modelsDir, m_options.configDir));
  // node_info also carries what the user should know (a proven identity clash) and discovery's
  // counters (what a beacon flood did to this node).
  m_host->setInfoExtras([this] {
    nlohmann::json extras = nlohmann::json::object();
    std::lock_guard lock(m_netMutex);
    if (!m_warnings.empty()) extras["warnings"] = m_warnings;
    if (m_discovery) {
      const DiscoveryStats s = m_discovery->stats();
      extras["discovery"] = {{"udp_port", m_discovery->udpPort()},
                             {"peers", s.peers},
                             {"received", s.received},
                             {"accepted", s.accepted},
                             {"dropped", s.dropped},
                             {"dropped_off_link", s.droppedOffLink},
                             {"dropped_rate_limited", s.droppedRateLimited},
                             {"dropped_table_full", s.droppedTableFull},
                             {"identity_clash_claims", s.identityClashes},
                             {"identity_clash_checks", m_clashChecks.load()},
                             {"identity_clashes_proven", m_clashesProven.load()}};
    }
    return extras;
  });

  {
    std::lock_guard lock(m_netMutex);
    startListener(m_options.port);
    if (m_options.discovery) startDiscovery();
  }

  m_telemetryThread = std::thread([this] {
    while (!m_stop.load()) {
      m_host->sampleTelemetry();
      closeRevokedSessions();
      std::this_thread::sleep_for(kTelemetryInterval);
    }
  });
  // Clash claims are checked here, never on discovery's thread (a check takes up to
  // kClashProbeTimeout, and a rotation stops discovery).
  m_clashThread = std::thread([this] { runClashChecks(); });
}

void NodeService::startListener(uint16_t port) {
  m_listener = std::make_unique<Listener>(
      m_options.bindHost, port, *m_identity, *m_trust,
      [this](std::unique_ptr<Connection> c) { onConnection(std::move(c)); });
  m_listener->setLocalName(m_options.name);
  m_listener->setIntroduced([this](const std::string& id) { return m_host->isIntroduced(id); });
  const auto now = std::chrono::steady_clock::now();
  if (!m_pairingCode.empty() && m_pairingUntil > now) {
    m_listener->setPairingCode(
        m_pairingCode, std::chrono::duration_cast<std::chrono::seconds>(m_pairingUntil - now));
  }
}

void NodeService::startDiscovery() {
  try {
    DiscoveryOptions d;
    d.deviceId = m_identity->deviceId;
    d.name = m_options.name.substr(0, 128);
    d.tcpPort = m_listener->port();
    d.summary = deviceSummary(m_host->devices());
    d.udpPort = m_options.discoveryPort;
    d.onIdentityClash = [this](const IdentityClash& c) { reportIdentityClash(c); };
    m_discovery = std::make_unique<Discovery>(std::move(d));
    m_discovery->start();
    std::fprintf(stderr, "shoal-node: discovery on UDP port %u\n",
                 unsigned(m_discovery->udpPort()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shoal-node: discovery off: %s\n", e.what());
    m_discovery.reset();
  }
}

void NodeService::reportIdentityClash(const IdentityClash& clash) {
  {
    std::lock_guard lock(m_netMutex);
    if (clash.deviceId != m_identity->deviceId) return;
    if (m_clashClaims.size() >= kMaxPendingClashClaims) return;  // a flood of claims
    const bool queued = std::any_of(m_clashClaims.begin(), m_clashClaims.end(), [&](const auto& c) {
      return c.address == clash.address && c.tcpPort == clash.tcpPort;
    });
    if (queued) return;
    m_clashClaims.push_back(clash);
  }
  m_clashWake.notify_one();
}

void NodeService::runClashChecks() {
  std::unique_lock lock(m_netMutex);
  for (;;) {
    m_clashWake.wait(lock, [this] { return m_stop.load() || !m_clashClaims.empty(); });
    if (m_stop.load()) return;
    const IdentityClash claim = m_clashClaims.front();
    m_clashClaims.erase(m_clashClaims.begin());
    lock.unlock();
    checkClashClaim(claim);
    lock.lock();
    m_clashWake.wait_for(lock, kClashProbeMinGap, [this] { return m_stop.load(); });
  }
}

void NodeService::checkClashClaim(const IdentityClash& clash) {
  const std::string endpoint = endpointText(clash.address, clash.tcpPort);
  Identity ours;
  Listener* listener = nullptr;  // ours; only this thread replaces it
  {
    std::lock_guard lock(m_netMutex);
    if (clash.deviceId != m_identity->deviceId) return;  // we moved meanwhile
    const auto now = std::chrono::steady_clock::now();
    if (const auto it = m_clashChecked.find(endpoint);
        it != m_clashChecked.end() && now - it->second < kClashProbeCooldown) {
      return;
    }
    if (m_clashChecked.size() >= kMaxCheckedClashEndpoints) {
      m_clashChecked.erase(
          std::min_element(m_clashChecked.begin(), m_clashChecked.end(),
                           [](const auto& a, const auto& b) { return a.second < b.second; }));
    }
    m_clashChecked[endpoint] = now;
    ours = *m_identity;
    listener = m_listener.get();
  }
  // The proof: a TLS 1.3 server signs the handshake with its certificate's key, so presenting a
  // certificate whose SHA-256 is our device ID takes our private key. But that holder may be
  // this very node behind a TCP relay the claimant runs at that endpoint. So the probe (which
  // presents our certificate too) sends a fresh token in its first frame and waits for any
  // reply: had the connection led back here, our own listener recorded the token before
  // replying (Listener::sawSelfProbe).
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + kClashProbeTimeout;
  const auto remaining = [&] {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  const std::string token = probeToken();
  std::string presented;
  std::string failure;
  try {
    auto probe = openTlsClient(clash.address, clash.tcpPort, ours, remaining());
    presented = probe->peerDeviceId();
    if (presented == ours.deviceId) {
      Message hello;
      hello.control = {{"op", ops::kHello}, {"version", ops::kSessionVersion}, {"probe", token}};
      probe->send(hello, remaining());
      probe->receive(remaining());  // "refused" or "welcome": the peer read our token
    }
    probe->close();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  ++m_clashChecks;
  if (failure.empty() && presented == ours.deviceId && listener && listener->sawSelfProbe(token)) {
    std::fprintf(stderr,
                 "shoal-node: identity clash claim from %s (%s) not proven: that endpoint leads "
                 "back to this node (a relay to our own port): ignored, device ID %s unchanged\n",
                 endpoint.c_str(), clash.theirName.c_str(), ours.deviceId.c_str());
    return;
  }
  if (!failure.empty() || presented != ours.deviceId) {
    if (failure.empty()) failure = "it presents device ID " + presented + ", not ours";
    std::fprintf(stderr,
                 "shoal-node: identity clash claim from %s (%s) not proven (%s): ignored, device "
                 "ID %s unchanged\n",
                 endpoint.c_str(), clash.theirName.c_str(), failure.c_str(), ours.deviceId.c_str());
    return;
  }
  ++m_clashesProven;
  // At most one rotation per run: a second proven clash (the new identity copied again, or
  // something we cannot explain) is only reported; rotating again would not end it.
  const bool rotate = m_options.rotateIdentityOnProvenClash && !m_rotationTried;
  std::string warning = "identity clash: " + endpoint + " (" + clash.theirName +
                        ") presents this node's certificate (device ID " + ours.deviceId +
                        "): a copy of this node's identity (a copied config dir or cloned VM) "
                        "runs there";
  if (rotate) {
    warning += "; this node takes a new identity (--rotate-identity-on-clash)";
  } else if (m_options.rotateIdentityOnProvenClash) {
    warning +=
        "; this node already took a new identity once in this run and does not again: "
        "give one of the two a new identity by hand (stop it, move " +
        (m_options.configDir / "identity").string() + " aside, start it again)";
  } else {
    warning += "; give one of the two a new identity: stop it, move " +
               (m_options.configDir / "identity").string() +
               " aside, start it again (or run with --rotate-identity-on-clash)";
  }
  std::fprintf(stderr, "shoal-node: %s\n", warning.c_str());
  {
    std::lock_guard lock(m_netMutex);
    m_warnings.push_back(warning);
    if (m_warnings.size() > kMaxNodeWarnings) m_warnings.erase(m_warnings.begin());
  }
  if (rotate) {
    m_rotationTried = true;
    regenerateIdentity(clash);
  }
}

std::vector<std::string> NodeService::warnings() const {
  std::lock_guard lock(m_netMutex);
  return m_warnings;
}

uint16_t NodeService::discoveryPort() const {
  std::lock_guard lock(m_netMutex);
  return m_discovery ? m_discovery->udpPort() : 0;
}

void NodeService::regenerateIdentity(const IdentityClash& clash) {
  // Discovery is stopped without the lock: its thread may be waiting for it in
  // reportIdentityClash. (Only this thread replaces m_discovery while the service runs.)
  std::unique_ptr<Discovery> discovery;
  {
    std::lock_guard lock(m_netMutex);
    if (m_stop.load() || clash.deviceId != m_identity->deviceId) return;
    discovery = std::move(m_discovery);
  }
  if (discovery) discovery->stop();
  discovery.reset();

  std::lock_guard lock(m_netMutex);
  const std::string oldId = m_identity->deviceId;
  const uint16_t port = m_listener ? m_listener->port() : m_options.port;
  if (m_listener) m_listener->stop();
  m_listener.reset();
  // The connections were authenticated under the old certificate; their coordinators must
  // trust the new ID before they talk to this node again.
  {
    std::lock_guard served(m_servedMutex);
    for (auto& s : m_served) s->connection->close();
  }
  bool renewed = false;
  std::filesystem::path aside;
  try {
    // Kept, never deleted or overwritten: it is still the other machine's identity, and a
    // mistaken rotation must be undoable (move it back).
    const auto dir = m_options.configDir / "identity";
    aside = asideDirectory(m_options.configDir);
    std::filesystem::rename(dir, aside);
    m_identity = std::make_unique<Identity>(loadOrCreateIdentity(m_options.configDir));
    renewed = true;
  } catch (const std::exception& e) {
    // Keep serving under the old ID rather than not at all.
    std::fprintf(stderr, "shoal-node: identity clash with %s, but no new identity: %s\n",
                 clash.address.c_str(), e.what());
  }
  m_host->setDeviceId(m_identity->deviceId);
  // The same port, so coordinators find the node where they knew it; if it was taken meanwhile,
  // the configured one, then any.
  for (const uint16_t p : {port, m_options.port, uint16_t{0}}) {
    try {
      startListener(p);
      break;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shoal-node: listener on port %u: %s\n", unsigned(p), e.what());
    }
  }
  if (m_options.discovery && m_listener) startDiscovery();
  if (!renewed) return;
  ++m_regenerations;
  std::fprintf(stderr,
               "shoal-node: identity clash: %s (%s) runs with our device ID %s (a copied config "
               "dir); new device ID %s (port %u), the old identity kept in %s: coordinators must "
               "trust it again\n",
               clash.address.c_str(), clash.theirName.c_str(), oldId.c_str(),
               m_identity->deviceId.c_str(), m_listener ? unsigned(m_listener->port()) : 0u,
               aside.string().c_str());
}

NodeService::~NodeService() { stop(); }

std::string NodeService::deviceId() const {
  std::lock_guard lock(m_netMutex);
  return m_identity->deviceId;
}

uint16_t NodeService::port() const {
  std::lock_guard lock(m_netMutex);
  return m_listener ? m_listener->port() : 0;
}

std::string NodeService::startPairing(std::chrono::seconds validFor) {
  std::string code = generatePairingCode();
  std::lock_guard lock(m_netMutex);
  if (m_listener) m_listener->setPairingCode(code, validFor);
  m_pairingCode = code;
  m_pairingUntil = std::chrono::steady_clock::now() + validFor;
  return code;
}

void NodeService::onConnection(std::unique_ptr<Connection> connection) {
  std::lock_guard lock(m_servedMutex);
  // Reap the threads of connections that ended.
  std::erase_if(m_served, [](std::unique_ptr<Served>& s) {
    if (!s->done.load()) return false;
    s->thread.join();
    return true;
  });
  if (m_stop.load()) return;
  // A device the listener welcomed without trusting it was introduced by a coordinator: it may
  // only push hidden states down a link (NodeHost::serve with linkOnly).
  const bool linkOnly = !m_trust->isTrusted(connection->peerDeviceId());
  if (!linkOnly) {
    std::fprintf(stderr, "shoal-node: coordinator %s connected (%s)\n",
                 connection->peerAddress().c_str(), connection->peerDeviceId().c_str());
  }
  auto served = std::make_unique<Served>();
  served->connection = std::move(connection);
  served->link = linkOnly;
  Served* s = served.get();
  s->thread = std::thread([this, s] {
    m_host->serve(*s->connection, m_stop, s->link);
    s->connection->close();
    if (!s->link) {
      std::fprintf(stderr, "shoal-node: coordinator %s disconnected\n",
                   s->connection->peerAddress().c_str());
    }
    s->done.store(true);
  });
  m_served.push_back(std::move(served));
}

void NodeService::closeRevokedSessions() {
  try {
    m_trust->refresh();
  } catch (const std::exception& e) {
    // Reported once per bad version of the file; meanwhile the store trusts nobody.
    std::fprintf(stderr, "shoal-node: %s; every session is closed until it is fixed\n", e.what());
  }
  // The trust store is asked without m_servedMutex held: a slow query must not hold up
  // onConnection (and through it the listener).
  std::set<std::string> peers;
  {
    std::lock_guard lock(m_servedMutex);
    for (const auto& s : m_served)
      if (!s->done.load() && !s->revoked && !s->link) peers.insert(s->connection->peerDeviceId());
  }
  std::erase_if(peers, [this](const std::string& id) { return m_trust->isTrusted(id); });
  if (peers.empty()) return;
  std::lock_guard lock(m_servedMutex);
  for (auto& s : m_served) {
    if (s->done.load() || s->revoked || s->link || !peers.count(s->connection->peerDeviceId()))
      continue;
    s->revoked = true;
    std::fprintf(stderr, "shoal-node: %s (%s) is no longer trusted: closing its session\n",
                 s->connection->peerAddress().c_str(), s->connection->peerDeviceId().c_str());
    s->connection->close();
  }
}

void NodeService::stop() {
  if (m_stop.exchange(true)) return;
  // First the thread that may regenerate the identity: after it, nothing replaces the listener
  // or discovery. Discovery is stopped without the lock (its callback takes it).
  { std::lock_guard lock(m_netMutex); }  // the clash thread is waiting or sees m_stop
  m_clashWake.notify_all();
  if (m_clashThread.joinable()) m_clashThread.join();
  if (m_telemetryThread.joinable()) m_telemetryThread.join();
  {
    std::lock_guard lock(m_netMutex);
    if (m_listener) m_listener->stop();
  }
  if (m_discovery) m_discovery->stop();
  std::vector<std::unique_ptr<Served>> served;
  {
    std::lock_guard lock(m_servedMutex);
    served = std::move(m_served);
  }
  for (auto& s : served) s->connection->close();
  for (auto& s : served) s->thread.join();
}

}  // namespace shoal::lan
