// Discovery on this host's loopback (lan/discovery/discovery.h): instances bound to "lo" exchange
// beacons through unicast targets ("lo" has no multicast flag; tests/integration/netns covers
// multicast and broadcast between real interfaces). Raw datagrams forged here exercise the
// drop counters and the identity-clash report.

#include <QtTest>
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>

#include "lan/discovery/discovery.h"
#include "lan/discovery/interfaces.h"

using shoal::lan::Beacon;
using shoal::lan::Discovery;
using shoal::lan::DiscoveryOptions;
using shoal::lan::IdentityClash;
using shoal::lan::Peer;
using namespace std::chrono_literals;

namespace {

constexpr int kWaitMs = 10000;  // generous: "eventually", not a timing assertion

DiscoveryOptions loopbackOptions(const std::string& id, const std::string& name) {
  DiscoveryOptions o;
  o.deviceId = id;
  o.name = name;
  o.tcpPort = 7000;
  o.summary = "cpu: 1 thread";
  o.udpPort = 0;  // ephemeral: never collides with a real node on 47474
  o.interval = 50ms;
  o.expiry = 400ms;
  o.bindInterfaces = {"lo"};
  o.log = [](const std::string&) {};  // keep the test output clean
  return o;
}

std::string loopbackTarget(const Discovery& d) {
  return "127.0.0.1:" + std::to_string(d.udpPort());
}

// Sends one raw datagram to a Discovery on loopback, from `source` (a loopback address).
void sendRaw(const Discovery& to, const std::vector<uint8_t>& datagram,
             const char* source = "127.0.0.1") {
  asio::io_context io;
  asio::ip::udp::socket socket(io, asio::ip::udp::v4());
  socket.bind(asio::ip::udp::endpoint(asio::ip::make_address_v4(source), 0));
  socket.send_to(asio::buffer(datagram),
                 asio::ip::udp::endpoint(asio::ip::address_v4::loopback(), to.udpPort()));
}

bool hasPeer(const Discovery& d, const std::string& id) {
  for (const Peer& p : d.peers()) {
    if (p.deviceId == id) return true;
  }
  return false;
}

}  // namespace

class TestDiscovery : public QObject {
  Q_OBJECT

 private slots:
  void twoInstancesSeeEachOther() {
    Discovery a(loopbackOptions("AAAA-AAAA", "alpha"));
    Discovery b(loopbackOptions("BBBB-BBBB", "beta"));
    a.start();
    b.start();
    a.addUnicastTarget(loopbackTarget(b));
    b.addUnicastTarget(loopbackTarget(a));
    QTRY_VERIFY_WITH_TIMEOUT(hasPeer(a, "BBBB-BBBB") && hasPeer(b, "AAAA-AAAA"), kWaitMs);
    const Peer seen = a.peers().front();
    QCOMPARE(seen.name, std::string("beta"));
    QCOMPARE(seen.tcpPort, uint16_t(7000));
    QCOMPARE(seen.summary, std::string("cpu: 1 thread"));
    QCOMPARE(seen.nonce, b.nonce());
    QCOMPARE(seen.addresses.front().address, std::string("127.0.0.1"));
    QCOMPARE(seen.addresses.front().interfaceName, std::string("lo"));
  }

  void stoppedPeerExpires() {
    Discovery a(loopbackOptions("AAAA-AAAA", "alpha"));
    auto b = std::make_unique<Discovery>(loopbackOptions("BBBB-BBBB", "beta"));
    a.start();
    b->start();
    b->addUnicastTarget(loopbackTarget(a));
    QTRY_VERIFY_WITH_TIMEOUT(hasPeer(a, "BBBB-BBBB"), kWaitMs);
    b.reset();
    QTRY_VERIFY_WITH_TIMEOUT(a.peers().empty(), kWaitMs);
  }

  void peersChangedCallbackReportsTheNewTable() {
    std::mutex mutex;
    std::vector<Peer> reported;
    DiscoveryOptions options = loopbackOptions("AAAA-AAAA", "alpha");
    options.onPeersChanged = [&](const std::vector<Peer>& peers) {
      std::lock_guard lock(mutex);
      reported = peers;
    };
    Discovery a(std::move(options));
    Discovery b(loopbackOptions("BBBB-BBBB", "beta"));
    a.start();
    b.start();
    b.addUnicastTarget(loopbackTarget(a));
    const auto reportedB = [&] {
      std::lock_guard lock(mutex);
      return reported.size() == 1 && reported[0].deviceId == "BBBB-BBBB";
    };
    QTRY_VERIFY_WITH_TIMEOUT(reportedB(), kWaitMs);
  }

  void ownBeaconsComingBackAreDroppedAsOwn() {
    Discovery a(loopbackOptions("AAAA-AAAA", "alpha"));
    a.start();
    a.addUnicastTarget(loopbackTarget(a));
    QTRY_VERIFY_WITH_TIMEOUT(a.stats().droppedOwn >= 2, kWaitMs);
    QVERIFY(a.peers().empty());
    QCOMPARE(a.stats().identityClashes, uint64_t(0));
  }

  void malformedDatagramsAreDroppedAndCounted() {
    Discovery a(loopbackOptions("AAAA-AAAA", "alpha"));
    a.start();
    const Beacon valid{"CCCC-CCCC", "gamma", 7000, "0123456789abcdef0123456789abcdef", ""};
    std::vector<uint8_t> badMagic = shoal::lan::encodeBeacon(valid);
    badMagic[0] = 'Z';
    std::vector<uint8_t> badVersion = shoal::lan::encodeBeacon(valid);
    badVersion[3] = 9;
    std::vector<uint8_t> tooLarge = shoal::lan::encodeBeacon(valid);
    tooLarge.resize(4000, ' ');
    const std::string garbage = "SHD\x01{not json";
    sendRaw(a, badMagic);
    sendRaw(a, badVersion);
    sendRaw(a, tooLarge);
    sendRaw(a, std::vector<uint8_t>(garbage.begin(), garbage.end()));
    QTRY_VERIFY_WITH_TIMEOUT(a.stats().received >= 4, kWaitMs);
    const auto s = a.stats();
    QCOMPARE(s.droppedBadMagic, uint64_t(1));
    QCOMPARE(s.droppedBadVersion, uint64_t(1));
    QCOMPARE(s.droppedTooLarge, uint64_t(1));
    QCOMPARE(s.droppedMalformed, uint64_t(1));
    QCOMPARE(s.dropped, uint64_t(4));
    QCOMPARE(s.accepted, uint64_t(0));
    QVERIFY(a.peers().empty());
  }

  void forgedValidBeaconIsAcceptedAsAPeer() {
    Discovery a(loopbackOptions("AAAA-AAAA", "alpha"));
    a.start();
    sendRaw(a, shoal::lan::encodeBeacon(
                   {"CCCC-CCCC", "gamma", 7123, "0123456789abcdef0123456789abcdef", "x"}));
    QTRY_VERIFY_WITH_TIMEOUT(hasPeer(a, "CCCC-CCCC"), kWaitMs);
    QCOMPARE(a.peers().front().tcpPort, uint16_t(7123));
    QCOMPARE(a.stats().accepted, uint64_t(1));
  }

  void ourDeviceIdWithAnotherNonceFromElsewhereIsReportedOnceAsAnIdentityClash() {
    std::atomic<int> calls{0};
    std::mutex mutex;
    IdentityClash reported;
    DiscoveryOptions options = loopbackOptions("AAAA-AAAA", "alpha");
    options.onIdentityClash = [&](const IdentityClash& clash) {
      std::lock_guard lock(mutex);
      reported = clash;
      ++calls;
    };
    Discovery a(std::move(options));
    a.start();
    std::string otherNonce = "ffffffffffffffffffffffffffffffff";
    QVERIFY(otherNonce != a.nonce());
    const auto forged = shoal::lan::encodeBeacon({"AAAA-AAAA", "copy", 7000, otherNonce, ""});
    // 127.0.0.2 reaches us through lo but is none of this machine's interface addresses: as far
    // as discovery can tell, another machine.
    sendRaw(a, forged, "127.0.0.2");
    sendRaw(a, forged, "127.0.0.2");
    QTRY_VERIFY_WITH_TIMEOUT(a.stats().identityClashes == 2, kWaitMs);
    QCOMPARE(calls.load(), 1);
    std::lock_guard lock(mutex);
    QCOMPARE(reported.deviceId, std::string("AAAA-AAAA"));
    QCOMPARE(reported.theirNonce, otherNonce);
    QCOMPARE(reported.theirName, std::string("copy"));
    QCOMPARE(reported.address, std::string("127.0.0.2"));
    QCOMPARE(reported.tcpPort, uint16_t(7000));  // where the receiver asks for proof
    QVERIFY(a.peers().empty());                  // a clash is not a peer
  }

  void ourDeviceIdFromAnotherProcessOnThisMachineIsNotAClash() {
    // shoal-cli and shoal-node sharing one config dir: same identity, different nonces.
    std::atomic<int> clashes{0};
    DiscoveryOptions options = loopbackOptions("AAAA-AAAA", "node");
    options.onIdentityClash = [&](const IdentityClash&) { ++clashes; };
    Discovery node(std::move(options));
    Discovery cli(loopbackOptions("AAAA-AAAA", "cli"));
    node.start();
    cli.start();
    cli.addUnicastTarget(loopbackTarget(node));
    QTRY_VERIFY_WITH_TIMEOUT(node.stats().droppedOwn >= 2, kWaitMs);
    QCOMPARE(clashes.load(), 0);
    QCOMPARE(node.stats().identityClashes, uint64_t(0));
    QVERIFY(node.peers().empty());
  }

  void optionsThatCannotEncodeAreRejected() {
    DiscoveryOptions o = loopbackOptions("AAAA-AAAA", "alpha");
    o.summary = std::string(600, 's');
    QVERIFY_THROWS_EXCEPTION(shoal::Error, Discovery{o});
    o = loopbackOptions("not an id", "alpha");
    QVERIFY_THROWS_EXCEPTION(shoal::Error, Discovery{o});
  }

  void expiryNotLongerThanTheIntervalIsRejected() {
    DiscoveryOptions o = loopbackOptions("AAAA-AAAA", "alpha");
    o.expiry = o.interval;
    QVERIFY_THROWS_EXCEPTION(shoal::Error, Discovery{o});
  }

  void unicastTargetMustBeAnAddressAndPort() {
    Discovery a(loopbackOptions("AAAA-AAAA", "alpha"));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, a.addUnicastTarget("localhost:47474"));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, a.addUnicastTarget("10.0.0.1"));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, a.addUnicastTarget("10.0.0.1:0"));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, a.addUnicastTarget("[fe80::1:47474"));
    a.addUnicastTarget("[::1]:47474");
    a.addUnicastTarget("10.0.0.1:47474");
  }

  void aFloodFromOneSourceIsRateLimited() {
    Discovery a(loopbackOptions("AAAA-AAAA", "alpha"));
    a.start();
    // 100 forged IDs at once (a socket buffer's worth) from one source: the burst gets in.
    for (int i = 0; i < 100; ++i) {
      sendRaw(a,
              shoal::lan::encodeBeacon({"FLOOD-" + std::to_string(i), "x", 7000,
                                        "0123456789abcdef0123456789abcdef", ""}),
              "127.0.0.3");
    }
    QTRY_VERIFY_WITH_TIMEOUT(a.stats().droppedRateLimited > 0, kWaitMs);
    QVERIFY(a.peers().size() < 100);
    // One snapshot: datagrams still arriving would change the counters between three reads.
    const shoal::lan::DiscoveryStats s = a.stats();
    QCOMPARE(s.dropped, s.received - s.accepted);
  }

  void namesFromBeaconsAreSanitizedBeforeAnyoneSeesThem() {
    Discovery a(loopbackOptions("AAAA-AAAA", "alpha"));
    a.start();
    sendRaw(a, shoal::lan::encodeBeacon({"CCCC-CCCC", "\x1b[2Jevil\nshoal-node: fake line", 7000,
                                         "0123456789abcdef0123456789abcdef", "cpu\r\n\x07"}));
    QTRY_VERIFY_WITH_TIMEOUT(hasPeer(a, "CCCC-CCCC"), kWaitMs);
    QCOMPARE(a.peers().front().name, std::string("[2Jevil shoal-node: fake line"));
    QCOMPARE(a.peers().front().summary, std::string("cpu"));
  }

  void aBeaconCannotMoveAConfirmedPeer() {
    Discovery a(loopbackOptions("AAAA-AAAA", "alpha"));
    a.start();
    const std::string nonce = "0123456789abcdef0123456789abcdef";
    sendRaw(a, shoal::lan::encodeBeacon({"CCCC-CCCC", "gamma", 7123, nonce, ""}));
    QTRY_VERIFY_WITH_TIMEOUT(hasPeer(a, "CCCC-CCCC"), kWaitMs);
    // The caller connected to 127.0.0.1:7123 with pinning and saw CCCC-CCCC there.
    a.confirmEndpoint("CCCC-CCCC", "127.0.0.1", 7123);
    sendRaw(a, shoal::lan::encodeBeacon({"CCCC-CCCC", "evil", 9999, nonce, ""}), "127.0.0.5");
    QTRY_VERIFY_WITH_TIMEOUT(a.stats().unconfirmedEndpointClaims == 1, kWaitMs);
    const Peer p = a.peers().front();
    QCOMPARE(p.tcpPort, uint16_t(7123));
    QCOMPARE(p.name, std::string("gamma"));
    QVERIFY(shoal::lan::dialEndpoint(p) == (shoal::lan::PeerEndpoint{"127.0.0.1", 7123}));
  }

  void onLinkSourcesAreThoseInTheArrivalInterfacesSubnets() {
    shoal::lan::NetworkInterface eth0;
    eth0.name = "eth0";
    eth0.index = 2;
    eth0.ipv4Networks = {asio::ip::make_network_v4("10.77.1.1/24")};
    eth0.ipv6Networks = {asio::ip::make_network_v6("2001:db8:1::1/64")};
    shoal::lan::NetworkInterface eth1;
    eth1.name = "eth1";
    eth1.index = 3;
    eth1.ipv4Networks = {asio::ip::make_network_v4("192.168.5.1/24")};
    const std::vector<shoal::lan::NetworkInterface> all = {eth0, eth1};
    using asio::ip::make_address;
    QVERIFY(shoal::lan::isOnLink(make_address("10.77.1.2"), 2, all));
    QVERIFY(shoal::lan::isOnLink(make_address("2001:db8:1::9"), 2, all));
    QVERIFY(shoal::lan::isOnLink(make_address("fe80::1"), 2, all));     // link-local: always
    QVERIFY(!shoal::lan::isOnLink(make_address("10.99.0.2"), 2, all));  // routed
    QVERIFY(!shoal::lan::isOnLink(make_address("2001:db8:2::9"), 2, all));
    // On a subnet of another interface than the one it arrived on: spoofed or misrouted.
    QVERIFY(!shoal::lan::isOnLink(make_address("192.168.5.7"), 2, all));
    QVERIFY(shoal::lan::isOnLink(make_address("192.168.5.7"), 0, all));  // arrival unknown
  }

  void interfaceListGivesLoopbacksSubnet() {
    const auto interfaces = shoal::lan::listNetworkInterfaces();
    const auto lo = std::find_if(interfaces.begin(), interfaces.end(),
                                 [](const auto& i) { return i.name == "lo"; });
    QVERIFY(lo != interfaces.end());
    QVERIFY(shoal::lan::isOnLink(asio::ip::make_address("127.0.0.2"), lo->index, interfaces));
  }

  void interfaceListShowsLoopbackAsLoopbackWithItsAddress() {
    const auto interfaces = shoal::lan::listNetworkInterfaces();
    const auto lo = std::find_if(interfaces.begin(), interfaces.end(),
                                 [](const auto& i) { return i.name == "lo"; });
    QVERIFY(lo != interfaces.end());
    QVERIFY(lo->loopback);
    QVERIFY(lo->index != 0);
    QVERIFY(std::find(lo->ipv4.begin(), lo->ipv4.end(), asio::ip::address_v4::loopback()) !=
            lo->ipv4.end());
  }

  void beaconsSentAreCounted() {
    Discovery a(loopbackOptions("AAAA-AAAA", "alpha"));
    a.start();
    a.addUnicastTarget(loopbackTarget(a));
    QTRY_VERIFY_WITH_TIMEOUT(a.stats().sent >= 2, kWaitMs);
    QCOMPARE(a.stats().sendErrors, uint64_t(0));
  }

  void stopThenStartAgainResumesBeacons() {
    Discovery a(loopbackOptions("AAAA-AAAA", "alpha"));
    Discovery b(loopbackOptions("BBBB-BBBB", "beta"));
    a.start();
    b.start();
    b.addUnicastTarget(loopbackTarget(a));
    QTRY_VERIFY_WITH_TIMEOUT(hasPeer(a, "BBBB-BBBB"), kWaitMs);
    a.stop();
    a.stop();  // idempotent
    // a keeps its bound port number only if free: send to whatever it binds now.
    a.start();
    b.addUnicastTarget(loopbackTarget(a));
    const uint64_t before = a.stats().accepted;
    QTRY_VERIFY_WITH_TIMEOUT(a.stats().accepted > before, kWaitMs);
  }
};

QTEST_GUILESS_MAIN(TestDiscovery)
#include "test_discovery.moc"
