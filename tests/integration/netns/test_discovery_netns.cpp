// Discovery between real interfaces: three network-namespace hosts (NetnsHosts) each run
// discovery_probe with the default port, interval (1 s) and expiry (5 s). Each must see the
// other two — over IPv4 and IPv6 link-local — and drop one that was killed. Skips without root.

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QtTest>
#include <map>
#include <memory>

#include "tests/integration/netns/netns_hosts.h"

using shoal::test::NetnsHosts;

namespace {

// One probe's output, parsed as it arrives: the latest peer table and the events seen.
class Probe {
 public:
  Probe(NetnsHosts& lan, int host, const QString& id, const QStringList& extraArgs = {})
      : m_process(lan.start(
            host, QStringLiteral(SHOAL_DISCOVERY_PROBE),
            QStringList{"--id", id, "--name", QStringLiteral("host%1").arg(host)} + extraArgs)) {}

  // Reads whatever the probe printed since the last call.
  void poll() {
    m_buffer += m_process->readAllStandardOutput();
    qsizetype newline;
    while ((newline = m_buffer.indexOf('\n')) >= 0) {
      const QJsonObject line = QJsonDocument::fromJson(m_buffer.left(newline)).object();
      m_buffer.remove(0, newline + 1);
      const QString event = line.value("event").toString();
      if (event == "started") m_started = true;
      if (event == "peers") m_peers = line.value("peers").toArray();
      if (event == "identity_clash") ++m_clashes;
    }
  }

  bool started() {
    poll();
    return m_started;
  }
  int clashes() {
    poll();
    return m_clashes;
  }
  QStringList peerIds() {
    poll();
    QStringList ids;
    for (const QJsonValue& p : m_peers) ids << p.toObject().value("id").toString();
    ids.sort();
    return ids;
  }
  // "address interface" strings of one peer.
  QStringList addressesOf(const QString& id) {
    poll();
    QStringList found;
    for (const QJsonValue& p : m_peers) {
      if (p.toObject().value("id").toString() != id) continue;
      for (const QJsonValue& a : p.toObject().value("addresses").toArray()) {
        found << a.toObject().value("address").toString() + " " +
                     a.toObject().value("interface").toString();
      }
    }
    return found;
  }
  QProcess* process() const { return m_process; }

 private:
  QProcess* m_process;
  QByteArray m_buffer;
  bool m_started = false;
  int m_clashes = 0;
  QJsonArray m_peers;
};

QString deviceId(int host) { return QStringLiteral("HOST%1AA-BBBBBBB").arg(host); }

}  // namespace

class TestDiscoveryNetns : public QObject {
  Q_OBJECT

 private slots:
  void init() {
    if (const QString why = NetnsHosts::unavailableReason(); !why.isEmpty()) QSKIP(qPrintable(why));
  }

  void threeHostsEachSeeTheOtherTwoThenForgetAKilledOne() {
    NetnsHosts lan(3);
    std::vector<std::unique_ptr<Probe>> probes;
    for (int h = 1; h <= 3; ++h) probes.push_back(std::make_unique<Probe>(lan, h, deviceId(h)));
    QTRY_VERIFY_WITH_TIMEOUT(probes[0]->started() && probes[1]->started() && probes[2]->started(),
                             10000);
    // The brief's bound: seen within 3 s (the first beacon leaves at start, then every 1 s).
    const auto allSeeAll = [&] {
      for (int h = 1; h <= 3; ++h) {
        QStringList expected;
        for (int other = 1; other <= 3; ++other) {
          if (other != h) expected << deviceId(other);
        }
        if (probes[h - 1]->peerIds() != expected) return false;
      }
      return true;
    };
    QTRY_VERIFY_WITH_TIMEOUT(allSeeAll(), 3000);

    // Host 1 knows host 2 by its IPv4 address and by its IPv6 link-local one, both on eth0.
    const QString ll2 = lan.linkLocalIpv6(2);
    QVERIFY(!ll2.isEmpty());
    QTRY_VERIFY_WITH_TIMEOUT(probes[0]->addressesOf(deviceId(2)).size() == 2, 3000);
    const QStringList addresses = probes[0]->addressesOf(deviceId(2));
    QVERIFY2(addresses.contains(lan.ipv4(2) + " eth0"), qPrintable(addresses.join(", ")));
    QVERIFY2(addresses.contains(ll2 + "%eth0 eth0"), qPrintable(addresses.join(", ")));

    // Host 3 dies without a goodbye: the others drop it once the 5 s expiry has passed.
    lan.kill(probes[2]->process());
    QTRY_VERIFY_WITH_TIMEOUT(probes[0]->peerIds() == QStringList{deviceId(2)} &&
                                 probes[1]->peerIds() == QStringList{deviceId(1)},
                             15000);
  }

  void multiHomedHostSeesPeersOnEachLanThroughItsInterface() {
    // h1 on LAN 0 (eth0) with h2 and on LAN 1 (eth1) with h3; h3's eth0 is down, so h2 and h3
    // share no link. Beacons must leave h1 on each interface.
    NetnsHosts lan(3);
    lan.addLan({1, 3});
    QCOMPARE(lan.run(3, "ip", {"link", "set", "eth0", "down"}), 0);
    // Without broadcast, h3 learns h1's IPv4 address on eth1 only if h1 picks the outgoing
    // interface of each multicast beacon (its multicast route points at eth0).
    Probe one(lan, 1, deviceId(1), {"--no-broadcast"});
    Probe two(lan, 2, deviceId(2), {"--no-broadcast"});
    Probe three(lan, 3, deviceId(3), {"--no-broadcast"});
    QTRY_VERIFY_WITH_TIMEOUT(one.peerIds() == (QStringList{deviceId(2), deviceId(3)}), 5000);
    QTRY_VERIFY_WITH_TIMEOUT(two.peerIds() == QStringList{deviceId(1)}, 5000);
    QTRY_VERIFY_WITH_TIMEOUT(three.peerIds() == QStringList{deviceId(1)}, 5000);
    QVERIFY2(one.addressesOf(deviceId(2)).contains(lan.ipv4(2) + " eth0"),
             qPrintable(one.addressesOf(deviceId(2)).join(", ")));
    QVERIFY2(one.addressesOf(deviceId(3)).contains(lan.ipv4(3, 1) + " eth1"),
             qPrintable(one.addressesOf(deviceId(3)).join(", ")));
    QVERIFY2(three.addressesOf(deviceId(1)).contains(lan.ipv4(1, 1) + " eth1"),
             qPrintable(three.addressesOf(deviceId(1)).join(", ")));
    // A second beacon round cannot leak h3 to h2 either.
    QTest::qWait(1500);
    QCOMPARE(two.peerIds(), QStringList{deviceId(1)});
  }

  void ipv4MulticastAloneReachesPeers() {
    NetnsHosts lan(2);
    // No broadcast; only IPv4 counted: the IPv4 address can only come from the multicast group.
    Probe one(lan, 1, deviceId(1), {"--no-broadcast"});
    Probe two(lan, 2, deviceId(2), {"--no-broadcast"});
    QTRY_VERIFY_WITH_TIMEOUT(one.addressesOf(deviceId(2)).contains(lan.ipv4(2) + " eth0"), 5000);
  }

  void copiedIdentityOnAnotherHostIsReportedAsAClash() {
    NetnsHosts lan(2);
    Probe one(lan, 1, deviceId(1));
    Probe copy(lan, 2, deviceId(1));
    QTRY_VERIFY_WITH_TIMEOUT(one.clashes() == 1 && copy.clashes() == 1, 5000);
    QVERIFY(one.peerIds().isEmpty());
  }
};

QTEST_GUILESS_MAIN(TestDiscoveryNetns)
#include "test_discovery_netns.moc"
