#include "app/gui/pool_controller.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QSysInfo>
#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <utility>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/plan/types.h"
#include "engine/runtime/session.h"
#include "lan/discovery/discovery.h"
#include "lan/discovery/interfaces.h"
#include "lan/node/node_service.h"
#include "lan/pool/coordinator.h"
#include "lan/pool/pool_builder.h"
#include "lan/transport/connect.h"
#include "lan/transport/host_port.h"
#include "lan/transport/identity.h"
#include "lan/transport/listener.h"
#include "lan/transport/pairing.h"
#include "lan/transport/trust_store.h"

namespace shoal::gui {
namespace {

// KV capacity of every pooled stage: the nodes reserve it for the one chat the pool serves.
constexpr int32_t kPoolContext = 2048;
constexpr std::chrono::milliseconds kConnectTimeout{10000};
constexpr std::chrono::milliseconds kTelemetryInterval{500};

// Where to reach a discovered peer: where a pinned connection to it last succeeded, else what its
// beacons claim (lan::dialEndpoint), as "host:port" or "[v6]:port".
QString peerAddress(const lan::Peer& p) {
  const std::optional<lan::PeerEndpoint> e = lan::dialEndpoint(p);
  if (!e) return {};
  return QString::fromStdString(lan::joinHostPort(e->address, e->port));
}

QString qs(const std::string& s) { return QString::fromStdString(s); }

// Where other computers can reach a node listening on `port` on every IPv4 address: the
// addresses of the interfaces that are up, LAN ones first, loopback last (this machine only).
QStringList nodeAddresses(uint16_t port) {
  QStringList onLan, loopback;
  for (const lan::NetworkInterface& i : lan::listNetworkInterfaces()) {
    if (!i.up) continue;
    for (const asio::ip::address_v4& a : i.ipv4) {
      (i.loopback ? loopback : onLan) << qs(lan::joinHostPort(a.to_string(), port));
    }
  }
  return onLan + loopback;
}

}  // namespace

PoolController::PoolController(QObject* parent) : ReplyEngine(parent) {
  qRegisterMetaType<lan::PoolSnapshot>();
  qRegisterMetaType<DiscoveredNode>();
  qRegisterMetaType<QList<DiscoveredNode>>();
  qRegisterMetaType<PlanPreview>();
  qRegisterMetaType<DeployStatus>();
}

// Telemetry and discovery call back into this object from their threads: stop them first.
PoolController::~PoolController() {
  blockSignals(true);
  if (m_coordinator) m_coordinator->stopTelemetry();
  if (m_discovery) m_discovery->stop();
  m_discovery.reset();
  m_coordinator.reset();  // closes its connection to the local node before that stops
  m_localNode.reset();
  m_listener.reset();
}

QString PoolController::configDirOf(const QString& dataDirectory) {
  return QDir(dataDirectory).filePath("pool");
}

void PoolController::start(const QString& configDir, const QString& nodeName, bool discovery,
                           qint64 maxDeviceMemoryBytes) {
  if (m_coordinator) {
    emit failed(tr("The pool is already started."));
    return;
  }
  try {
    const std::filesystem::path dir = configDir.toStdString();
    m_configDir = configDir;
    m_identity = std::make_unique<lan::Identity>(lan::loadOrCreateIdentity(dir));
    m_trust = std::make_unique<lan::TrustStore>();
    m_trust->load(dir);
    m_nodeName = nodeName.isEmpty() ? QSysInfo::machineHostName() : nodeName;

    lan::CoordinatorOptions co;
    co.contextLength = kPoolContext;
    co.maxDeviceMemoryBytes = static_cast<uint64_t>(std::max<qint64>(maxDeviceMemoryBytes, 0));
    const lan::Identity* identity = m_identity.get();
    const lan::TrustStore* trust = m_trust.get();
    // A node forgotten by `shoal-cli pool forget` on this config directory leaves the pool too.
    co.isTrusted = [trust](const std::string& id) { return trust->isTrusted(id); };
    m_coordinator = std::make_unique<lan::Coordinator>(
        [identity, trust](const std::string& address) {
          const auto [host, port] = lan::splitHostPort(address);
          return lan::connectTo(host, port, *identity, *trust, kConnectTimeout);
        },
        co);

    // Discovery must announce a port that answers; the app hosts no stage, so the listener
    // refuses every connection (as shoal-cli's does) until it does.
    m_listener =
        std::make_unique<lan::Listener>("0.0.0.0", 0, *m_identity, *m_trust,
                                        [](std::unique_ptr<lan::Connection> c) { c->close(); });
    if (discovery) startDiscovery();
    emit started(qs(m_identity->deviceId), m_listener->port());
    emitTrustedDevices();
  } catch (const std::exception& e) {
    m_coordinator.reset();
    m_listener.reset();
    emit failed(tr("The pool could not start: %1").arg(qs(e.what())));
  }
}

void PoolController::startDiscovery() {
  lan::DiscoveryOptions d;
  // What others can use: this computer's node when it is shared, else the coordinator's
  // listener (which refuses connections: it hosts nothing).
  d.deviceId = m_localNode ? m_localNode->deviceId() : m_identity->deviceId;
  d.name = m_nodeName.toStdString();
  d.tcpPort = m_localNode ? m_localNode->port() : m_listener->port();
  d.summary = m_localNode ? "shoal desktop app (pool member)" : "shoal desktop app (coordinator)";
  d.onPeersChanged = [this](const std::vector<lan::Peer>& peers) {
    QList<DiscoveredNode> out;
    for (const lan::Peer& p : peers) {
      DiscoveredNode n;
      n.deviceId = qs(p.deviceId);
      n.name = qs(p.name);
      n.address = peerAddress(p);
      n.summary = qs(p.summary);
      n.trusted = m_trust->isTrusted(p.deviceId);  // the store is thread-safe
      out.push_back(n);
    }
    emit peersChanged(out);  // from the discovery thread: queued to the GUI
  };
  d.log = [](const std::string& line) { qWarning("discovery: %s", line.c_str()); };
  m_discovery = std::make_unique<lan::Discovery>(d);
  try {
    m_discovery->start();
  } catch (const std::exception& e) {
    // The pool still works by address; say why nothing will be discovered.
    m_discovery.reset();
    emit failed(tr("LAN discovery is off: %1").arg(qs(e.what())));
  }
}

void PoolController::shareThisComputer(const QString& modelsDir) {
  if (!m_coordinator) {
    emit failed(tr("The pool is not started."));
    return;
  }
  if (m_localNode) return;
  try {
    lan::NodeServiceOptions o;
    o.name = m_nodeName.toStdString();
    o.configDir = QDir(m_configDir).filePath("node").toStdString();
    o.modelsDir = modelsDir.toStdString();
    o.port = 0;
    o.trust = {m_identity->deviceId};
    o.discovery = false;  // ours announces it
    m_localNode = std::make_unique<lan::NodeService>(o);
    m_trust->add(m_localNode->deviceId(), m_nodeName.toStdString());
    emitTrustedDevices();
  } catch (const std::exception& e) {
    m_localNode.reset();
    emit failed(tr("This computer cannot join the pool: %1").arg(qs(e.what())));
    return;
  }
  emit sharing(qs(m_localNode->deviceId()), m_localNode->port(),
               nodeAddresses(m_localNode->port()));
  if (m_discovery) {
    m_discovery->stop();
    m_discovery.reset();
    startDiscovery();
  }
  addNode(QStringLiteral("127.0.0.1:%1").arg(m_localNode->port()));
}

void PoolController::showPairingCode(int validForSeconds) {
  if (!m_localNode) {
    emit failed(tr("This computer is not shared with the pool, so no other computer can use it."));
    return;
  }
  const int seconds = std::max(validForSeconds, 1);
  const std::string code = m_localNode->startPairing(std::chrono::seconds(seconds));
  emit pairingCodeReady(qs(code), QDateTime::currentMSecsSinceEpoch() + qint64{seconds} * 1000);
}

void PoolController::setNodeName(const QString& nodeName) {
  const QString name = nodeName.isEmpty() ? QSysInfo::machineHostName() : nodeName;
  if (name == m_nodeName) return;
  m_nodeName = name;
  if (!m_discovery) return;
  m_discovery->stop();
  m_discovery.reset();
  startDiscovery();
}

plan::Pool PoolController::currentPool() const {
  const std::lock_guard lock(m_poolMutex);
  return m_currentPool;
}

void PoolController::updateCurrentPool() {
  plan::Pool pool = m_coordinator ? m_coordinator->pool() : plan::Pool{};
  const std::lock_guard lock(m_poolMutex);
  m_currentPool = std::move(pool);
}

void PoolController::ensureTelemetry() {
  if (m_telemetry) return;
  m_telemetry = true;
  m_coordinator->startTelemetry([this](const lan::PoolSnapshot& s) { emit snapshot(s); },
                                kTelemetryInterval);
}

void PoolController::addNode(const QString& address) {
  if (!m_coordinator) {
    emit failed(tr("The pool is not started."));
    return;
  }
  try {
    const std::string id = m_coordinator->addNode(address.trimmed().toStdString());
    // The connection was pinned to `id`: from now on discovery dials it here, and a beacon that
    // claims another endpoint for it is only a candidate (lan/discovery/README.md).
    if (m_discovery) {
      const auto [host, port] = lan::splitHostPort(address.trimmed().toStdString());
      m_discovery->confirmEndpoint(id, host, port);
    }
    m_coordinator->profileLinks();
    QString name;
    for (const lan::NodeInfo& n : m_coordinator->nodes()) {
      if (n.deviceId == id) name = qs(n.name);
    }
    updateCurrentPool();
    emit nodeAdded(qs(id), name, address.trimmed());
    ensureTelemetry();
  } catch (const lan::TransportError& e) {
    emit failed(tr("Node %1: %2").arg(address, qs(e.what())));
  } catch (const std::exception& e) {
    emit failed(tr("Node %1: %2").arg(address, qs(e.what())));
  }
}

void PoolController::pair(const QString& address, const QString& code) {
  if (!m_coordinator) {
    emit failed(tr("The pool is not started."));
    return;
  }
  try {
    const auto [host, port] = lan::splitHostPort(address.trimmed().toStdString());
    const std::string id = lan::pairWith(host, port, *m_identity, *m_trust, code.toStdString(),
                                         m_nodeName.toStdString(), kConnectTimeout);
    emit paired(qs(id), address.trimmed());
    emitTrustedDevices();
  } catch (const std::exception& e) {
    emit failed(tr("Pairing with %1 failed: %2").arg(address, qs(e.what())));
    return;
  }
  addNode(address);
}

void PoolController::emitTrustedDevices() {
  QList<DiscoveredNode> out;
  for (const lan::TrustedDevice& d : m_trust->list()) {
    DiscoveredNode n;
    n.deviceId = qs(d.deviceId);
    n.name = qs(d.name);
    n.trusted = true;
    out.push_back(n);
  }
  emit trustedDevicesChanged(out);
}

void PoolController::forget(const QString& deviceId) {
  if (!m_coordinator) {
    emit failed(tr("The pool is not started."));
    return;
  }
  try {
    const std::string id = lan::normalizeDeviceId(deviceId.toStdString());
    m_trust->remove(id);
    // Its connection was made while it was trusted: close it now rather than at its next use.
    for (const lan::NodeInfo& n : m_coordinator->nodes()) {
      if (n.deviceId == id) m_coordinator->removeNode(id);
    }
    updateCurrentPool();
    emit forgotten(qs(id));
    emitTrustedDevices();
  } catch (const std::exception& e) {
    emit failed(tr("Forgetting %1 failed: %2").arg(deviceId, qs(e.what())));
  }
}

PlanPreview PoolController::previewOf(const plan::Plan& p) const {
  PlanPreview out;
  out.feasible = p.feasible;
  out.reason = qs(p.infeasibleReason);
  out.modelName = QFileInfo(m_modelPath).fileName();
  out.modelLayers = m_coordinator->modelCost().layers;
  if (!p.feasible || p.pipelines.empty()) return out;
  out.tokensPerS = p.pipelines.front().throughputTokS;
  out.latencyMs = p.pipelines.front().latencyS * 1e3;
  const std::vector<lan::NodeInfo> nodes = m_coordinator->nodes();
  for (const lan::StagePlacement& s : lan::pipelineStages(p)) {
    PlanStagePreview st;
    st.nodeId = qs(s.nodeId);
    for (const lan::NodeInfo& n : nodes) {
      if (n.deviceId == s.nodeId) st.nodeName = qs(n.name);
    }
    st.deviceId = qs(s.deviceId);
    st.firstLayer = s.firstLayer;
    st.lastLayer = s.lastLayer;
    st.hasEmbedding = s.hasEmbedding;
    st.hasHead = s.hasHead;
    out.stages.push_back(st);
  }
  return out;
}

void PoolController::previewPlan(const QString& modelPath) {
  if (!m_coordinator) {
    emit failed(tr("The pool is not started."));
    return;
  }
  try {
    if (m_coordinator->nodes().empty()) {
      emit failed(tr("Add a node to the pool first."));
      return;
    }
    if (modelPath != m_modelPath) {
      m_coordinator->setModel(modelPath.toStdString());
      m_modelPath = modelPath;
    }
    m_plan = std::make_unique<plan::Plan>(m_coordinator->makePlan());
    emit planReady(previewOf(*m_plan));
  } catch (const std::exception& e) {
    emit failed(tr("No plan for %1: %2").arg(QFileInfo(modelPath).fileName(), qs(e.what())));
  }
}

void PoolController::deploy() {
  if (!m_coordinator || !m_plan || !m_plan->feasible) {
    emit failed(tr("Preview a plan the pool can run first."));
    return;
  }
  try {
    m_coordinator->deploy(*m_plan, [this](const lan::DeployProgress& d) {
      DeployStatus s;
      s.stage = static_cast<int>(d.stage);
      s.stages = static_cast<int>(d.stages);
      s.nodeName = qs(d.nodeName);
      s.bytesSent = static_cast<qint64>(d.bytesSent);
      s.bytesTotal = static_cast<qint64>(d.bytesTotal);
      s.stageDone = d.done;
      emit deployProgress(s);
    });
    emit deployed(previewOf(*m_plan));
  } catch (const std::exception& e) {
    emit failed(tr("Deployment failed: %1").arg(qs(e.what())));
  }
}

PoolController::ReplyTarget PoolController::replyTarget() const {
  if (!m_coordinator || m_coordinator->deployed().empty()) {
    return {nullptr, tr("No model is deployed on the pool."), 0, {}};
  }
  return {&m_coordinator->model(), {}, kPoolContext, tr("the pool's context")};
}

runtime::GenerateResult PoolController::runReply(
    const std::vector<int32_t>& prompt, const runtime::GenerateOptions& options,
    const std::function<bool(std::string_view)>& onText) {
  return m_coordinator->generate(prompt, options, onText);
}

}  // namespace shoal::gui
