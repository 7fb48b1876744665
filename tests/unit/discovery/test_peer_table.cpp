// The discovery peer table (lan/discovery/peer_table.h): merging beacons by device ID, what counts
// as a change, and expiry — with explicit time points, no sleeping. And what a forged-beacon
// flood cannot do (issue 14 item 6): grow the table past kMaxPeers or a peer past
// kMaxAddressesPerPeer, or move a peer whose endpoint a pinned connection confirmed.

#include <QtTest>
#include <chrono>

#include "lan/discovery/peer_table.h"

using shoal::lan::Beacon;
using shoal::lan::DiscoveryClock;
using shoal::lan::kMaxAddressesPerPeer;
using shoal::lan::kMaxPeers;
using shoal::lan::PeerEndpoint;
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
    const auto p = table.peers()[0];  // peers() returns a copy
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

  void tableHoldsAtMostMaxPeersAndRefusesNewIdsBeyond() {
    PeerTable table(5s);
    for (size_t i = 0; i < kMaxPeers + 100; ++i) {
      table.observe(beacon("FORGED-" + std::to_string(i)), "10.0.0.9", "eth0", t0);
    }
    QCOMPARE(table.size(), kMaxPeers);
    QCOMPARE(table.peers().size(), kMaxPeers);
    QCOMPARE(table.stats().refusedPeers, uint64_t(100));
  }

  void peersAlreadyHeldKeepRefreshingWhenTheTableIsFull() {
    PeerTable table(5s);
    table.observe(beacon("REAL"), "10.0.0.2", "eth0", t0);
    for (size_t i = 0; i < kMaxPeers; ++i) {
      table.observe(beacon("FORGED-" + std::to_string(i)), "10.0.0.9", "eth0", t0);
    }
    table.observe(beacon("REAL"), "10.0.0.2", "eth0", t0 + 4s);
    table.expire(t0 + 6s);  // the forged ones, silent since t0, go; the real one stays
    QCOMPARE(table.size(), size_t(1));
    QCOMPARE(table.peers()[0].deviceId, std::string("REAL"));
  }

  void aConfirmedPeerIsAdmittedEvenWhenTheTableIsFull() {
    PeerTable table(5s);
    table.confirm("TRUSTED", PeerEndpoint{"10.0.0.2", 7000});
    for (size_t i = 0; i < kMaxPeers; ++i) {
      table.observe(beacon("FORGED-" + std::to_string(i)), "10.0.0.9", "eth0", t0);
    }
    QVERIFY(table.observe(beacon("TRUSTED"), "10.0.0.2", "eth0", t0));
    QCOMPARE(table.size(), kMaxPeers + 1);
  }

  void aPeerKeepsAtMostMaxAddresses() {
    PeerTable table(5s);
    for (size_t i = 0; i < kMaxAddressesPerPeer + 5; ++i) {
      table.observe(beacon("AAA"), "10.0.0." + std::to_string(10 + i), "eth0", t0);
    }
    QCOMPARE(table.peers()[0].addresses.size(), kMaxAddressesPerPeer);
    QCOMPARE(table.stats().refusedAddresses, uint64_t(5));
  }

  void aBeaconCannotMoveAConfirmedEndpoint() {
    PeerTable table(5s);
    table.observe(beacon("AAA", "real"), "10.0.0.2", "eth0", t0);
    QVERIFY(table.confirm("AAA", PeerEndpoint{"10.0.0.2", 7000}));
    Beacon forged = beacon("AAA", "evil");
    forged.tcpPort = 9999;
    forged.summary = "forged";
    table.observe(forged, "10.0.0.66", "eth0", t0 + 1s);  // elsewhere
    table.observe(forged, "10.0.0.2", "eth0", t0 + 1s);   // its address, another port
    const auto p = table.peers()[0];
    QCOMPARE(p.tcpPort, uint16_t(7000));
    QCOMPARE(p.name, std::string("real"));
    QCOMPARE(p.summary, std::string("cpu: 4 threads"));
    QVERIFY(p.confirmed == (PeerEndpoint{"10.0.0.2", 7000}));
    QVERIFY(shoal::lan::dialEndpoint(p) == (PeerEndpoint{"10.0.0.2", 7000}));
    QCOMPARE(table.stats().candidateBeacons, uint64_t(2));
  }

  void claimsOfAnotherEndpointAreKeptAsCandidates() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    table.confirm("AAA", PeerEndpoint{"10.0.0.2", 7000});
    Beacon moved = beacon("AAA");
    moved.tcpPort = 7001;
    table.observe(moved, "10.0.0.3", "eth0", t0 + 1s);
    const auto candidates = shoal::lan::candidateEndpoints(table.peers()[0]);
    QCOMPARE(candidates.size(), size_t(1));
    QVERIFY(candidates[0] == (PeerEndpoint{"10.0.0.3", 7001}));
  }

  void confirmingACandidateMovesThePeer() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    table.confirm("AAA", PeerEndpoint{"10.0.0.2", 7000});
    Beacon moved = beacon("AAA", "after restart");
    moved.tcpPort = 7001;
    table.observe(moved, "10.0.0.2", "eth0", t0 + 1s);
    QCOMPARE(table.peers()[0].tcpPort, uint16_t(7000));
    // The caller connected there with pinning and saw the device ID: now it moves.
    QVERIFY(table.confirm("AAA", PeerEndpoint{"10.0.0.2", 7001}));
    QCOMPARE(table.peers()[0].tcpPort, uint16_t(7001));
    table.observe(moved, "10.0.0.2", "eth0", t0 + 2s);
    QCOMPARE(table.peers()[0].name, std::string("after restart"));
  }

  void aConfirmationOutlivesThePeersExpiry() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    table.confirm("AAA", PeerEndpoint{"10.0.0.2", 7000});
    table.expire(t0 + 6s);
    QCOMPARE(table.size(), size_t(0));
    // Gone quiet; the first beacon heard again is a forgery from elsewhere, then the real one.
    Beacon forged = beacon("AAA", "evil");
    forged.tcpPort = 9999;
    table.observe(forged, "10.0.0.66", "eth0", t0 + 7s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0 + 8s);
    table.observe(forged, "10.0.0.66", "eth0", t0 + 9s);
    const auto p = table.peers()[0];
    QVERIFY(p.confirmed == (PeerEndpoint{"10.0.0.2", 7000}));
    QCOMPARE(p.tcpPort, uint16_t(7000));
    QCOMPARE(p.name, std::string("node"));
    QVERIFY(shoal::lan::dialEndpoint(p) == (PeerEndpoint{"10.0.0.2", 7000}));
  }

  void aConfirmedPeerWhoseAddressWentSilentIsDialledWhereItsNewestBeaconSays() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    table.confirm("AAA", PeerEndpoint{"10.0.0.2", 7000});
    // The node moved (a new DHCP lease, another port); its old address stops beaconing.
    Beacon moved = beacon("AAA");
    moved.tcpPort = 7001;
    table.observe(moved, "10.0.0.7", "eth0", t0 + 1s);
    table.observe(moved, "10.0.0.7", "eth0", t0 + 4s);
    // While the old address still counts as live, a beacon from elsewhere does not move it.
    QVERIFY(shoal::lan::dialEndpoint(table.peers()[0]) == (PeerEndpoint{"10.0.0.2", 7000}));
    table.expire(t0 + 6s);  // 10.0.0.2 silent since t0: gone
    const auto p = table.peers()[0];
    QCOMPARE(p.addresses.size(), size_t(1));
    QVERIFY(p.confirmed == (PeerEndpoint{"10.0.0.2", 7000}));  // kept, not dialled
    QVERIFY(shoal::lan::dialEndpoint(p) == (PeerEndpoint{"10.0.0.7", 7001}));
  }

  void aConfirmedPeerIsDialledAtItsNewestBeaconAmongSeveral() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    table.confirm("AAA", PeerEndpoint{"10.0.0.2", 7000});
    table.expire(t0 + 6s);
    Beacon older = beacon("AAA");
    older.tcpPort = 7001;
    Beacon newer = beacon("AAA");
    newer.tcpPort = 7002;
    table.observe(newer, "10.0.0.9", "eth0", t0 + 7s);
    table.observe(older, "10.0.0.8", "eth0", t0 + 7s);
    table.observe(newer, "10.0.0.9", "eth0", t0 + 8s);
    QVERIFY(shoal::lan::dialEndpoint(table.peers()[0]) == (PeerEndpoint{"10.0.0.9", 7002}));
  }

  void aConfirmedPeerWithNoAddressIsDialledAtItsConfirmation() {
    shoal::lan::Peer p;
    p.deviceId = "AAA";
    p.confirmed = PeerEndpoint{"10.0.0.2", 7000};
    QVERIFY(shoal::lan::dialEndpoint(p) == (PeerEndpoint{"10.0.0.2", 7000}));
  }

  void anUnconfirmedPeerIsDialledWhereItsBeaconsSay() {
    PeerTable table(5s);
    table.observe(beacon("AAA"), "fe80::1%eth0", "eth0", t0);
    table.observe(beacon("AAA"), "10.0.0.2", "eth0", t0);
    QVERIFY(!table.peers()[0].confirmed);
    QVERIFY(shoal::lan::dialEndpoint(table.peers()[0]) == (PeerEndpoint{"10.0.0.2", 7000}));
  }
};

QTEST_GUILESS_MAIN(TestPeerTable)
#include "test_peer_table.moc"
