#include "lan/node/node_service.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "engine/error.h"
#include "kernels/backend_registry.h"
#include "lan/discovery/discovery.h"
#include "lan/transport/identity.h"
#include "lan/transport/listener.h"
#include "lan/transport/pairing.h"
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
                   "shoal-node: %s profile: %.1f GB/s read, %.1f GFLOP/s Q4_0 matmul (%s)\n",
                   d.id.c_str(), p.bandwidthBytesPerS / 1e9, p.flopsPerS / 1e9, how.c_str());
      out[d.id] = p;
    }
  }
  return out;
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
  if (m_options.profile) ho.profiles = profileCpuDevices(backends, m_options);
  m_host = std::make_unique<NodeHost>(
      ho, std::move(backends),
      std::make_shared<ModelCatalog>(m_options.modelsDir, m_options.configDir));

  {
    std::lock_guard lock(m_netMutex);
    startListener(m_options.port);
    if (m_options.discovery) startDiscovery();
  }

  // Telemetry every 500 ms; identity regeneration, which must not run on discovery's thread
  // (it stops discovery), waits here for the next tick.
  m_telemetryThread = std::thread([this] {
    while (!m_stop.load()) {
      m_host->sampleTelemetry();
      std::unique_ptr<IdentityClash> clash;
      {
        std::lock_guard lock(m_netMutex);
        clash = std::move(m_pendingClash);
      }
      if (clash) regenerateIdentity(*clash);
      std::this_thread::sleep_for(kTelemetryInterval);
    }
  });
}

void NodeService::startListener(uint16_t port) {
  m_listener = std::make_unique<Listener>(
      m_options.bindHost, port, *m_identity, *m_trust,
      [this](std::unique_ptr<Connection> c) { onConnection(std::move(c)); });
  m_listener->setLocalName(m_options.name);
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
    d.onIdentityClash = [this](const IdentityClash& c) { reportIdentityClash(c); };
    m_discovery = std::make_unique<Discovery>(std::move(d));
    m_discovery->start();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shoal-node: discovery off: %s\n", e.what());
    m_discovery.reset();
  }
}

void NodeService::reportIdentityClash(const IdentityClash& clash) {
  std::lock_guard lock(m_netMutex);
  if (clash.deviceId != m_identity->deviceId || m_pendingClash) return;
  m_pendingClash = std::make_unique<IdentityClash>(clash);
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
  try {
    // Kept (one generation) rather than deleted: it is still the other machine's identity.
    const auto dir = m_options.configDir / "identity";
    const auto aside = m_options.configDir / "identity.replaced";
    std::filesystem::remove_all(aside);
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
               "dir); new device ID %s (port %u): coordinators must trust it again\n",
               clash.address.c_str(), clash.theirName.c_str(), oldId.c_str(),
               m_identity->deviceId.c_str(), m_listener ? unsigned(m_listener->port()) : 0u);
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
  std::fprintf(stderr, "shoal-node: coordinator %s connected (%s)\n",
               connection->peerAddress().c_str(), connection->peerDeviceId().c_str());
  auto served = std::make_unique<Served>();
  served->connection = std::move(connection);
  Served* s = served.get();
  s->thread = std::thread([this, s] {
    m_host->serve(*s->connection, m_stop);
    s->connection->close();
    std::fprintf(stderr, "shoal-node: coordinator %s disconnected\n",
                 s->connection->peerAddress().c_str());
    s->done.store(true);
  });
  m_served.push_back(std::move(served));
}

void NodeService::stop() {
  if (m_stop.exchange(true)) return;
  // First the thread that may regenerate the identity: after it, nothing replaces the listener
  // or discovery. Discovery is stopped without the lock (its callback takes it).
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
