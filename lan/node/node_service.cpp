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

  m_listener = std::make_unique<Listener>(
      m_options.bindHost, m_options.port, *m_identity, *m_trust,
      [this](std::unique_ptr<Connection> c) { onConnection(std::move(c)); });
  m_listener->setLocalName(m_options.name);

  m_telemetryThread = std::thread([this] {
    while (!m_stop.load()) {
      m_host->sampleTelemetry();
      std::this_thread::sleep_for(kTelemetryInterval);
    }
  });

  if (m_options.discovery) {
    try {
      DiscoveryOptions d;
      d.deviceId = m_identity->deviceId;
      d.name = m_options.name.substr(0, 128);
      d.tcpPort = m_listener->port();
      d.summary = deviceSummary(m_host->devices());
      m_discovery = std::make_unique<Discovery>(std::move(d));
      m_discovery->start();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shoal-node: discovery off: %s\n", e.what());
      m_discovery.reset();
    }
  }
}

NodeService::~NodeService() { stop(); }

const std::string& NodeService::deviceId() const { return m_identity->deviceId; }

uint16_t NodeService::port() const { return m_listener->port(); }

std::string NodeService::startPairing(std::chrono::seconds validFor) {
  std::string code = generatePairingCode();
  m_listener->setPairingCode(code, validFor);
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
  if (m_listener) m_listener->stop();
  if (m_discovery) m_discovery->stop();
  std::vector<std::unique_ptr<Served>> served;
  {
    std::lock_guard lock(m_servedMutex);
    served = std::move(m_served);
  }
  for (auto& s : served) s->connection->close();
  for (auto& s : served) s->thread.join();
  if (m_telemetryThread.joinable()) m_telemetryThread.join();
}

}  // namespace shoal::lan
