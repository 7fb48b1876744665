// Identity clash (exo issue #1599): a config dir copied to a second machine makes two nodes with
// one device ID. Two NodeServices on loopback share a copied config dir. A clash claim (what
// discovery reports; made by hand here: beacons from our own addresses are never a claim) is
// checked by connecting to the claimed endpoint: only a peer presenting our certificate proves
// it (issue 14 item 1). A proven clash is reported (log, node_info "warnings") and the identity
// kept; with rotateIdentityOnProvenClash the node regenerates its identity: a new device ID
// served on the same port, the trust store kept, every old identity kept aside, the connections
// made under the old ID closed; the other node keeps its ID, and it rotates at most once per run.
// An unproven claim changes nothing, and so does one whose endpoint is a TCP relay back to the
// node itself (it presents our certificate, but it is us).

#include <QtTest>
#include <array>
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

#include "lan/discovery/discovery.h"
#include "lan/node/node_service.h"
#include "lan/pool/node_info.h"
#include "lan/transport/connect.h"
#include "lan/transport/identity.h"
#include "lan/transport/listener.h"
#include "lan/transport/trust_store.h"
#include "tests/integration/lan_node/node_test_support.h"

using namespace shoal;
using namespace shoal::lan;

namespace {

NodeServiceOptions optionsFor(const std::filesystem::path& configDir, const std::string& name,
                              const std::string& coordinatorId, bool rotate = false) {
  NodeServiceOptions o;
  o.name = name;
  o.configDir = configDir;
  o.bindHost = "127.0.0.1";
  o.port = 0;
  o.trust = {coordinatorId};
  o.cpuThreads = 1;
  o.discovery = false;  // the clash is reported by hand (see above)
  o.profile = false;    // not what this test is about; keeps the start instant
  o.rotateIdentityOnProvenClash = rotate;
  return o;
}

// A claim as discovery makes it: our ID, from address:port, with a foreign nonce.
IdentityClash claim(const std::string& id, uint16_t port, const std::string& nonce = "their-nonce",
                    const std::string& address = "127.0.0.1") {
  return IdentityClash{id, nonce, "a", address, "lo", port};
}

// Waits (up to 20 s) until `count` claims have been checked.
bool waitForChecks(const NodeService& s, int count) {
  for (int i = 0; i < 200 && s.clashClaimsChecked() < count; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return s.clashClaimsChecked() >= count;
}

// The identity.replaced* directories in a config dir.
QStringList asideDirs(const std::filesystem::path& configDir) {
  QStringList out;
  for (const auto& e : std::filesystem::directory_iterator(configDir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("identity.replaced", 0) == 0) out << QString::fromStdString(name);
  }
  out.sort();
  return out;
}

// The pair of services sharing one identity: `original` and a copy of it.
void makeCopiedConfig(const std::filesystem::path& original, const std::filesystem::path& copy,
                      const std::string& coordinatorId) {
  nodeDeviceId(original);
  {
    TrustStore t;
    t.load(original);
    t.add(coordinatorId, "coordinator");
  }
  std::filesystem::copy(original, copy, std::filesystem::copy_options::recursive);
}

// What an attacker's relay does: every connection to 127.0.0.1:port() is forwarded to
// 127.0.0.1:target, bytes both ways, on one io thread of its own.
class TcpRelay {
 public:
  explicit TcpRelay(uint16_t target)
      : m_target(asio::ip::make_address("127.0.0.1"), target),
        m_acceptor(m_io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    accept();
    m_thread = std::thread([this] { m_io.run(); });
  }
  ~TcpRelay() {
    m_io.stop();
    m_thread.join();
  }
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  uint16_t port() const { return m_acceptor.local_endpoint().port(); }
  int relayed() const { return m_relayed.load(); }  // connections forwarded so far

 private:
  using Socket = asio::ip::tcp::socket;
  using Buffer = std::array<char, 16384>;
  struct Pair {
    explicit Pair(Socket client) : in(std::move(client)), out(in.get_executor()) {}
    Socket in;
    Socket out;
    Buffer toTarget{};
    Buffer toClient{};
  };

  void accept() {
    m_acceptor.async_accept([this](const asio::error_code& ec, Socket client) {
      if (ec) return;
      auto pair = std::make_shared<Pair>(std::move(client));
      pair->out.async_connect(m_target, [this, pair](const asio::error_code& connectError) {
        if (connectError) return;
        ++m_relayed;
        pump(pair, pair->in, pair->out, pair->toTarget);
        pump(pair, pair->out, pair->in, pair->toClient);
      });
      accept();
    });
  }

  // Copies from -> to until either side ends, then closes both.
  static void pump(std::shared_ptr<Pair> pair, Socket& from, Socket& to, Buffer& buffer) {
    from.async_read_some(asio::buffer(buffer), [pair, &from, &to, &buffer](
                                                   const asio::error_code& ec, size_t n) {
      if (ec) return closeBoth(*pair);
      asio::async_write(to, asio::buffer(buffer.data(), n),
                        [pair, &from, &to, &buffer](const asio::error_code& writeError, size_t) {
                          if (writeError) return closeBoth(*pair);
                          pump(pair, from, to, buffer);
                        });
    });
  }
  static void closeBoth(Pair& pair) {
    asio::error_code ignored;
    pair.in.close(ignored);
    pair.out.close(ignored);
  }

  asio::io_context m_io;
  asio::ip::tcp::endpoint m_target;
  asio::ip::tcp::acceptor m_acceptor;
  std::atomic<int> m_relayed{0};
  std::thread m_thread;
};

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

  void aClaimNobodyCanProveChangesNothing() {
    const auto dir = m_dir / "unproven";
    const std::string id = nodeDeviceId(dir);
    NodeService s(optionsFor(dir, "s", m_coordinator.deviceId, /*rotate=*/true));
    // An impostor at the claimed endpoint presents its own certificate: it lacks our key.
    TrustStore nobody;
    Listener impostor("127.0.0.1", 0, createIdentity(), nobody,
                      [](std::unique_ptr<Connection> c) { c->close(); });
    s.reportIdentityClash(claim(id, impostor.port()));
    QVERIFY(waitForChecks(s, 1));
    QCOMPARE(s.clashesProven(), 0);
    QCOMPARE(s.deviceId(), id);
    QCOMPARE(s.identityRegenerations(), 0);
    QVERIFY(s.warnings().empty());
    QVERIFY(asideDirs(dir).isEmpty());
  }

  void aClaimPointingAtNothingChangesNothing() {
    const auto dir = m_dir / "nothing";
    const std::string id = nodeDeviceId(dir);
    NodeService s(optionsFor(dir, "s", m_coordinator.deviceId, /*rotate=*/true));
    uint16_t closed = 0;
    {
      TrustStore nobody;
      Listener gone("127.0.0.1", 0, createIdentity(), nobody,
                    [](std::unique_ptr<Connection> c) { c->close(); });
      closed = gone.port();
    }
    s.reportIdentityClash(claim(id, closed));
    QVERIFY(waitForChecks(s, 1));
    QCOMPARE(s.deviceId(), id);
    QCOMPARE(s.identityRegenerations(), 0);
  }

  void aClaimWhoseEndpointRelaysBackToThisNodeIsNotProven() {
    const auto dir = m_dir / "relay";
    const std::string id = nodeDeviceId(dir);
    NodeService s(optionsFor(dir, "s", m_coordinator.deviceId, /*rotate=*/true));
    // The attacker's beacon names its own endpoint, which forwards to our own port: the probe
    // meets our own listener, which presents our certificate.
    TcpRelay relay(s.port());
    s.reportIdentityClash(claim(id, relay.port()));
    QVERIFY(waitForChecks(s, 1));
    QVERIFY(relay.relayed() >= 1);  // the probe did go through the relay
    QCOMPARE(s.clashesProven(), 0);
    QCOMPARE(s.deviceId(), id);
    QCOMPARE(s.identityRegenerations(), 0);
    QVERIFY(s.warnings().empty());
    QVERIFY(asideDirs(dir).isEmpty());
  }

  void aProvenClashIsReportedAndTheIdentityKept() {
    const auto original = m_dir / "report-original";
    const auto copy = m_dir / "report-copy";
    makeCopiedConfig(original, copy, m_coordinator.deviceId);
    NodeService a(optionsFor(original, "a", m_coordinator.deviceId));
    NodeService b(optionsFor(copy, "b", m_coordinator.deviceId));
    const std::string id = a.deviceId();
    QCOMPARE(b.deviceId(), id);
    // b says a holds our identity: a presents it, so the claim is proven.
    b.reportIdentityClash(claim(id, a.port()));
    QVERIFY(waitForChecks(b, 1));
    QCOMPARE(b.clashesProven(), 1);
    QCOMPARE(b.deviceId(), id);  // reported, not acted on
    QCOMPARE(b.identityRegenerations(), 0);
    QVERIFY(asideDirs(copy).isEmpty());
    QCOMPARE(b.warnings().size(), size_t(1));
    const std::string where = "127.0.0.1:" + std::to_string(a.port());
    QVERIFY(b.warnings()[0].find(where) != std::string::npos);
    // node_info tells the coordinator (shoal-cli pool status prints it).
    TrustStore trust;
    trust.add(id, "b");
    auto c = connectTo("127.0.0.1", b.port(), m_coordinator, trust);
    const NodeInfo info = parseNodeInfo(test::rawCall(*c, {{"op", "node_info"}}).control);
    QCOMPARE(info.warnings.size(), size_t(1));
    QVERIFY(info.warnings[0].find("identity clash") != std::string::npos);
  }

  void aProvenClashRotatesWhenAskedAndKeepsEveryOldIdentity() {
    const auto original = m_dir / "rotate-original";
    const auto copy = m_dir / "rotate-copy";
    makeCopiedConfig(original, copy, m_coordinator.deviceId);
    const std::string oldId = nodeDeviceId(original);
    // Identities set aside earlier (the old single identity.replaced/ and a dated one) stay.
    std::filesystem::create_directories(copy / "identity.replaced");
    std::filesystem::create_directories(copy / "identity.replaced.20200101T000000Z");

    NodeService a(optionsFor(original, "a", m_coordinator.deviceId));
    NodeService b(optionsFor(copy, "b", m_coordinator.deviceId, /*rotate=*/true));
    const uint16_t port = b.port();
    TrustStore oldTrust;
    oldTrust.add(oldId, "b");
    auto before = connectTo("127.0.0.1", port, m_coordinator, oldTrust);
    QCOMPARE(test::rawCall(*before, {{"op", "ping"}, {"t", 1}}).control.value("op", ""),
             std::string("pong"));

    b.reportIdentityClash(claim(oldId, a.port()));
    QVERIFY(waitForRegeneration(b, 1));
    const std::string newId = b.deviceId();
    QVERIFY(newId != oldId);
    QCOMPARE(a.deviceId(), oldId);  // the other node was not told: it keeps its ID
    QCOMPARE(b.port(), port);
    // On disk: the new identity, the old one set aside under a new name, the earlier ones and
    // the trust store untouched.
    QCOMPARE(nodeDeviceId(copy), newId);
    const QStringList aside = asideDirs(copy);
    QCOMPARE(aside.size(), 3);
    QVERIFY(aside.contains("identity.replaced"));
    QVERIFY(aside.contains("identity.replaced.20200101T000000Z"));
    QString fresh;
    for (const QString& d : aside) {
      if (d != "identity.replaced" && d != "identity.replaced.20200101T000000Z") fresh = d;
    }
    QFile asideCert(QString::fromStdString((copy / fresh.toStdString() / "cert.pem").string()));
    QVERIFY(asideCert.open(QIODevice::ReadOnly));
    QCOMPARE(deviceIdFromCertificatePem(asideCert.readAll().toStdString()), oldId);
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

  void twoProvenClashesRotateOnlyOnce() {
    const auto original = m_dir / "once-original";
    const auto copy = m_dir / "once-copy";
    makeCopiedConfig(original, copy, m_coordinator.deviceId);
    NodeService a(optionsFor(original, "a", m_coordinator.deviceId));
    NodeService b(optionsFor(copy, "b", m_coordinator.deviceId, /*rotate=*/true));
    b.reportIdentityClash(claim(a.deviceId(), a.port(), "n1"));
    QVERIFY(waitForRegeneration(b, 1));
    const std::string newId = b.deviceId();
    // b's new identity gets copied too (a second clone): proven again, reported, kept.
    const auto again = m_dir / "once-again";
    std::filesystem::copy(copy, again, std::filesystem::copy_options::recursive);
    NodeService c(optionsFor(again, "c", m_coordinator.deviceId));
    QCOMPARE(c.deviceId(), newId);
    b.reportIdentityClash(claim(newId, c.port(), "n2"));
    QVERIFY(waitForChecks(b, 2));
    QCOMPARE(b.clashesProven(), 2);
    QCOMPARE(b.identityRegenerations(), 1);
    QCOMPARE(b.deviceId(), newId);
    QCOMPARE(nodeDeviceId(copy), newId);
    QCOMPARE(asideDirs(copy).size(), 1);
    const std::vector<std::string> warnings = b.warnings();
    QCOMPARE(warnings.size(), size_t(2));
    QVERIFY(warnings[1].find("already took a new identity") != std::string::npos);
  }

  void aClaimForAnIdNoLongerHeldIsIgnored() {
    const auto original = m_dir / "stale-original";
    const auto copy = m_dir / "stale-copy";
    makeCopiedConfig(original, copy, m_coordinator.deviceId);
    NodeService a(optionsFor(original, "a", m_coordinator.deviceId));
    NodeService s(optionsFor(copy, "s", m_coordinator.deviceId, /*rotate=*/true));
    const std::string first = s.deviceId();
    s.reportIdentityClash(claim(first, a.port(), "n1"));
    QVERIFY(waitForRegeneration(s, 1));
    const int checks = s.clashClaimsChecked();
    // A late second claim about the first ID (another beacon of the same clash) is not even
    // checked; the node keeps its new ID.
    s.reportIdentityClash(claim(first, a.port(), "n2", "127.0.0.3"));
    std::this_thread::sleep_for(kClashProbeMinGap * 2);  // would have been checked by now
    QCOMPARE(s.clashClaimsChecked(), checks);
    QCOMPARE(s.identityRegenerations(), 1);
    QVERIFY(s.deviceId() != first);
  }
};

QTEST_GUILESS_MAIN(TestNodeIdentityClash)
#include "test_node_identity_clash.moc"
