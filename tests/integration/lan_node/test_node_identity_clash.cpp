// Identity clash (exo issue #1599): a config dir copied to a second machine makes two nodes with
// one device ID. Two NodeServices on loopback share a copied config dir; discovery's clash
// report (simulated: beacons from our own addresses are never a clash, so loopback cannot
// produce one) makes the node regenerate its identity: a new device ID served on the same port,
// the trust store kept, the old identity set aside, the connections made under the old ID
// closed; the other node keeps its ID.

#include <QtTest>
#include <chrono>
#include <filesystem>
#include <thread>

#include "lan/discovery/discovery.h"
#include "lan/node/node_service.h"
#include "lan/transport/connect.h"
#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"
#include "tests/integration/lan_node/node_test_support.h"

using namespace shoal;
using namespace shoal::lan;

namespace {

NodeServiceOptions optionsFor(const std::filesystem::path& configDir, const std::string& name,
                              const std::string& coordinatorId) {
  NodeServiceOptions o;
  o.name = name;
  o.configDir = configDir;
  o.bindHost = "127.0.0.1";
  o.port = 0;
  o.trust = {coordinatorId};
  o.cpuThreads = 1;
  o.discovery = false;  // the clash is reported by hand (see above)
  o.profile = false;    // not what this test is about; keeps the start instant
  return o;
}

// Waits (up to 20 s) for the service's clash handling, which runs on its own thread.
bool waitForRegeneration(const NodeService& s, int count) {
  for (int i = 0; i < 200 && s.identityRegenerations() < count; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return s.identityRegenerations() >= count;
}

}  // namespace

class TestNodeIdentityClash : public QObject {
  Q_OBJECT

  std::filesystem::path m_dir;
  Identity m_coordinator;

 private slots:
  void initTestCase() {
    m_dir = std::filesystem::temp_directory_path() /
            ("shoal-identity-clash-" + std::to_string(QCoreApplication::applicationPid()));
    std::filesystem::remove_all(m_dir);
    m_coordinator = createIdentity();
  }
  void cleanupTestCase() { std::filesystem::remove_all(m_dir); }

  void aClashRegeneratesTheIdentityAndKeepsTheTrustStore() {
    const auto original = m_dir / "original";
    const auto copy = m_dir / "copy";
    const std::string oldId = nodeDeviceId(original);
    {
      TrustStore t;
      t.load(original);
      t.add(m_coordinator.deviceId, "coordinator");
    }
    std::filesystem::copy(original, copy, std::filesystem::copy_options::recursive);

    NodeService a(optionsFor(original, "a", m_coordinator.deviceId));
    NodeService b(optionsFor(copy, "b", m_coordinator.deviceId));
    QCOMPARE(a.deviceId(), oldId);
    QCOMPARE(b.deviceId(), oldId);
    const uint16_t port = b.port();

    TrustStore oldTrust;
    oldTrust.add(oldId, "b");
    auto before = connectTo("127.0.0.1", port, m_coordinator, oldTrust);
    QCOMPARE(test::rawCall(*before, {{"op", "ping"}, {"t", 1}}).control.value("op", ""),
             std::string("pong"));

    b.reportIdentityClash(IdentityClash{oldId, "their-nonce", "a", "192.0.2.7", "eth0"});
    QVERIFY(waitForRegeneration(b, 1));
    const std::string newId = b.deviceId();
    QVERIFY(newId != oldId);
    QCOMPARE(a.deviceId(), oldId);  // the other node was not told: it keeps its ID
    QCOMPARE(b.port(), port);
    // On disk: the new identity, the old one set aside, the trust store untouched.
    QCOMPARE(nodeDeviceId(copy), newId);
    QFile asideCert(QString::fromStdString((copy / "identity.replaced" / "cert.pem").string()));
    QVERIFY(asideCert.open(QIODevice::ReadOnly));
    const std::string asidePem = asideCert.readAll().toStdString();
    QCOMPARE(deviceIdFromCertificatePem(asidePem), oldId);
    TrustStore kept;
    kept.load(copy);
    QVERIFY(kept.isTrusted(m_coordinator.deviceId));

    // The connection made under the old ID is closed.
    QVERIFY_THROWS_EXCEPTION(TransportError, test::rawCall(*before, {{"op", "ping"}, {"t", 2}}));
    // A coordinator that trusts the new ID is served, and node_info names it.
    TrustStore newTrust;
    newTrust.add(newId, "b");
    auto after = connectTo("127.0.0.1", port, m_coordinator, newTrust);
    QCOMPARE(test::rawCall(*after, {{"op", "node_info"}}).control.value("device_id", ""), newId);
    // One that still expects the old ID is refused.
    QVERIFY_THROWS_EXCEPTION(TransportError, connectTo("127.0.0.1", port, m_coordinator, oldTrust));
  }

  void aReportForAnIdNoLongerHeldIsIgnored() {
    const auto dir = m_dir / "stale";
    NodeService s(optionsFor(dir, "s", m_coordinator.deviceId));
    const std::string first = s.deviceId();
    s.reportIdentityClash(IdentityClash{first, "n1", "x", "192.0.2.8", "eth0"});
    QVERIFY(waitForRegeneration(s, 1));
    const std::string second = s.deviceId();
    // A late second report about the first ID (another beacon of the same clash) changes
    // nothing; a report about the current ID still regenerates, which shows reports are read.
    s.reportIdentityClash(IdentityClash{first, "n2", "x", "192.0.2.8", "eth0"});
    s.reportIdentityClash(IdentityClash{second, "n3", "x", "192.0.2.9", "eth0"});
    QVERIFY(waitForRegeneration(s, 2));
    QCOMPARE(s.identityRegenerations(), 2);
    QVERIFY(s.deviceId() != second);
    QVERIFY(s.deviceId() != first);
  }
};

QTEST_GUILESS_MAIN(TestNodeIdentityClash)
#include "test_node_identity_clash.moc"
