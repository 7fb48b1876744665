// The discovery peer table (lan/discovery/peer_table.h): merging beacons by device ID, what counts
// as a change, and expiry — with explicit time points, no sleeping.

#include <QtTest>
#include <chrono>

#include "lan/discovery/peer_table.h"

using shoal::lan::Beacon;
using shoal::lan::DiscoveryClock;
using shoal::lan::PeerTable;
using namespace std::chrono_literals;

namespace {

Beacon beacon(const std::string& id, const std::string& name = "node") {
  return Beacon{id, name, 7000, "0123456789abcdef0123456789abcdef", "cpu: 4 threads"};
}

const DiscoveryClock::time_point t0 = DiscoveryClock::time_point() + 1h;

}  // namespace

class TestPeerTable : public QObject {
  Q_OBJECT

 private slots:
  void firstBeaconAddsAPeerWithItsFieldsAndAddress() {
    PeerTable table(5s);
    QVERIFY(table.observe(beacon("AAA", "alpha"), "10.0.0.2", "eth0", t0));
    QCOMPARE(table.peers().size(), size_t(1));
    const auto& p = table.peers()[0];
    QCOMPARE(p.deviceId, std::string("AAA"));
    QCOMPARE(p.name, std::string("alpha"));
    QCOMPARE(p.tcpPort, uint16_t(7000));
    QCOMPARE(p.summary, std::string("cpu: 4 threads"));
    QCOMPARE(p.addresses.size(), size_t(1));
    QCOMPARE(p.addresses[0].address, std::string("10.0.0.2"));
    QCOMPARE(p.addresses[0].interfaceName, std::string("eth0"));
    QVERIFY(p.lastSeen == t0);
  }

  void repeatedBeaconRefreshesButIsNoChange() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    QVERIFY(!table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0 + 1s));
    QVERIFY(table.peers()[0].lastSeen == t0 + 1s);
  }

  void sameDeviceFromASecondAddressKeepsBothAddresses() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    QVERIFY(table.observe(beacon("AAA"), "fe80::1%eth0", "eth0", t0));
    QCOMPARE(table.peers().size(), size_t(1));
    QCOMPARE(table.peers()[0].addresses.size(), size_t(2));
  }

  void changedNamePortSummaryOrNonceIsAChange() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    Beacon b = beacon("AAA", "renamed");
    QVERIFY(table.observe(b, "10.0.0.2", "eth0", t0));
    b.tcpPort = 7001;
    QVERIFY(table.observe(b, "10.0.0.2", "eth0", t0));
    b.summary = "cpu: 8 threads";
    QVERIFY(table.observe(b, "10.0.0.2", "eth0", t0));
    b.nonce = "ffffffffffffffffffffffffffffffff";  // the peer restarted
    QVERIFY(table.observe(b, "10.0.0.2", "eth0", t0));
    QCOMPARE(table.peers()[0].name, std::string("renamed"));
    QCOMPARE(table.peers()[0].tcpPort, uint16_t(7001));
    QCOMPARE(table.peers()[0].nonce, b.nonce);
  }

  void peerStaysUntilTheExpiryHasPassed() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    QVERIFY(!table.expire(t0 + 5s));
    QCOMPARE(table.peers().size(), size_t(1));
  }

  void silentPeerExpires() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    table.observe(beacon("BBB"), "10.0.0.3", "eth0", t0 + 3s);
    QVERIFY(table.expire(t0 + 5s + 1ms));
    QCOMPARE(table.peers().size(), size_t(1));
    QCOMPARE(table.peers()[0].deviceId, std::string("BBB"));
  }

  void silentAddressExpiresWhileThePeerIsHeardElsewhere() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    table.observe(beacon("AAA"), "192.168.1.2", "wlan0", t0 + 4s);
    QVERIFY(table.expire(t0 + 6s));
    QCOMPARE(table.peers().size(), size_t(1));
    QCOMPARE(table.peers()[0].addresses.size(), size_t(1));
    QCOMPARE(table.peers()[0].addresses[0].address, std::string("192.168.1.2"));
  }

  void peerHeardAgainAfterExpiryIsNewAgain() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    table.expire(t0 + 6s);
    QVERIFY(table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0 + 7s));
    QCOMPARE(table.peers().size(), size_t(1));
  }

  void peersAreSortedByDeviceId() {
    PeerTable table(5s);
    table.observe(beacon("CCC"), "10.0.0.4", "eth0", t0);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    table.observe(beacon("BBB"), "10.0.0.3", "eth0", t0);
    QCOMPARE(table.peers()[0].deviceId, std::string("AAA"));
    QCOMPARE(table.peers()[1].deviceId, std::string("BBB"));
    QCOMPARE(table.peers()[2].deviceId, std::string("CCC"));
  }
};

QTEST_GUILESS_MAIN(TestPeerTable)
#include "test_peer_table.moc"
