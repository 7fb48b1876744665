// What an unauthenticated client can hold of a Listener: vetting slots per source address and in
// all (with a share kept for addresses trusted peers connected from), and how long an idle or
// stalled connection keeps one. The slot rules on their own (VettingSlots), then over loopback,
// where each 127.0.0.x address plays another host.

#include <QtTest>

#include "lan/transport/connect.h"
#include "lan/transport/listener.h"
#include "lan/transport/vetting_slots.h"
#include "transport_test_util.h"

using namespace shoal::lan;
using namespace shoal::lan::test;
using namespace std::chrono_literals;

namespace {

// The start of a TLS record header (handshake, TLS 1.0 record version): what a slow-loris client
// sends to look like a handshake under way, then nothing more.
const std::string kPartialClientHello("\x16\x03\x01", 3);

// prefix + n (built with +=: GCC 12 misreads "literal" + std::string as an overlapping copy).
std::string numbered(const char* prefix, size_t n) {
  std::string text = prefix;
  text += std::to_string(n);
  return text;
}

std::string address(int host) { return numbered("127.0.1.", size_t(host)); }

// A socket from `from` that has sent kPartialClientHello: it holds a vetting slot, if it got one,
// until the handshake timeout.
std::unique_ptr<asio::ip::tcp::socket> stalledHandshake(asio::io_context& io,
                                                        const std::string& from, uint16_t port) {
  auto s = std::make_unique<asio::ip::tcp::socket>(io);
  connectFrom(*s, from, port);
  asio::write(*s, asio::buffer(kPartialClientHello));
  return s;
}

// Why a trusted client's connectTo failed; empty when it succeeded.
std::string connectError(uint16_t port, const Node& client) {
  try {
    connectTo("127.0.0.1", port, client.identity, client.trust, 10s);
  } catch (const TransportError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

class TestTlsListener : public QObject {
  Q_OBJECT

 private slots:
  void oneSourceGetsAtMostFourSlots() {
    VettingSlots table;
    for (size_t i = 0; i < kMaxVettingPerSource; ++i) QVERIFY(table.admit("10.0.0.9"));
    QVERIFY(!table.admit("10.0.0.9"));
    QVERIFY(table.admit("10.0.0.10"));  // another address is not held back
  }

  void aReleasedSlotCanBeTakenAgain() {
    VettingSlots table;
    std::vector<VettingSlots::Slot> held;
    for (size_t i = 0; i < kMaxVettingPerSource; ++i) held.push_back(*table.admit("10.0.0.9"));
    table.release(held.back());
    QVERIFY(table.admit("10.0.0.9"));
    QCOMPARE(table.vetting("10.0.0.9"), kMaxVettingPerSource);
  }

  void unknownSourcesLeaveTheReservedSlotsFree() {
    VettingSlots table;
    size_t admitted = 0;
    for (int host = 1; host <= 64; ++host)
      for (size_t i = 0; i < kMaxVettingPerSource; ++i)
        if (table.admit(numbered("10.0.1.", size_t(host)))) ++admitted;
    QCOMPARE(admitted, kMaxVetting - kReservedForKnownSources);
    QVERIFY(!table.admit("10.0.2.1"));
  }

  void aKnownSourceUsesTheReservedSlots() {
    VettingSlots table;
    table.rememberTrusted("10.0.0.1");
    for (int host = 1; host <= 64; ++host)
      for (size_t i = 0; i < kMaxVettingPerSource; ++i)
        table.admit(numbered("10.0.1.", size_t(host)));
    for (size_t i = 0; i < kMaxVettingPerSource; ++i) QVERIFY(table.admit("10.0.0.1"));
    QVERIFY(!table.admit("10.0.0.1"));  // its per-source limit still holds
  }

  void theTotalIsBoundedForKnownSourcesToo() {
    VettingSlots table;
    size_t admitted = 0;
    for (int host = 1; host <= 64; ++host) {
      const std::string source = numbered("10.0.1.", size_t(host));
      table.rememberTrusted(source);
      for (size_t i = 0; i < kMaxVettingPerSource; ++i)
        if (table.admit(source)) ++admitted;
    }
    QCOMPARE(admitted, kMaxVetting);
  }

  void theKnownSourcesAreBounded() {
    VettingSlots table;
    for (size_t i = 0; i <= kMaxKnownSources; ++i) table.rememberTrusted(numbered("k", i));
    QVERIFY(!table.isKnown("k0"));  // the least recently trusted one went
    QVERIFY(table.isKnown(numbered("k", kMaxKnownSources)));
  }

  void ipv6SourcesAreCountedPerSlash64ButLinkLocalOnesOneByOne() {
    using asio::ip::make_address;
    QCOMPARE(sourceKey(make_address("2001:db8:1:2:aaaa::1")),
             sourceKey(make_address("2001:db8:1:2:bbbb::2")));
    QVERIFY(sourceKey(make_address("2001:db8:1:2::1")) !=
            sourceKey(make_address("2001:db8:1:3::1")));
    QVERIFY(sourceKey(make_address("fe80::1")) != sourceKey(make_address("fe80::2")));
    QCOMPARE(sourceKey(make_address("::ffff:192.0.2.7")), std::string("192.0.2.7"));
    QCOMPARE(sourceKey(make_address("192.0.2.7")), std::string("192.0.2.7"));
  }

  void anIdleConnectionIsDroppedWithoutAClientHello() {
    // The handshake timeout is long here; an idle socket must go after kClientHelloTimeout.
    Node server;
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    listener.setHandshakeTimeout(120s);
    asio::io_context io;
    asio::ip::tcp::socket idle(io);
    connectFrom(idle, "127.0.0.1", listener.port());
    QVERIFY(closedByServerWithin(idle, 30s));
  }

  void aFifthConnectionFromOneAddressIsClosedAtOnce() {
    Node server, client;
    server.trust.add(client.identity.deviceId, "client");
    client.trust.add(server.identity.deviceId, "server");
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    listener.setHandshakeTimeout(120s);
    asio::io_context io;
    std::vector<std::unique_ptr<asio::ip::tcp::socket>> held;
    for (size_t i = 0; i < kMaxVettingPerSource; ++i)
      held.push_back(stalledHandshake(io, "127.0.0.2", listener.port()));
    auto fifth = stalledHandshake(io, "127.0.0.2", listener.port());
    QVERIFY(closedByServerWithin(*fifth, 30s));  // it would otherwise wait out the 120 s
    // Another address is served meanwhile.
    const std::string why = connectError(listener.port(), client);
    QVERIFY2(why.empty(), why.c_str());
  }

  void aKnownCoordinatorGetsInWhileManyAddressesHoldTheOtherSlots() {
    Node server, client;
    server.trust.add(client.identity.deviceId, "client");
    client.trust.add(server.identity.deviceId, "server");
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    listener.setHandshakeTimeout(120s);
    // The coordinator has connected from 127.0.0.1 before.
    QVERIFY(connectTo("127.0.0.1", listener.port(), client.identity, client.trust, 10s));
    // 16 attacker addresses at 4 stalled handshakes each: 64, as many as all table.
    asio::io_context io;
    std::vector<std::unique_ptr<asio::ip::tcp::socket>> held;
    for (int host = 1; host <= 16; ++host)
      for (size_t i = 0; i < kMaxVettingPerSource; ++i)
        held.push_back(stalledHandshake(io, address(host), listener.port()));
    const std::string why = connectError(listener.port(), client);
    QVERIFY2(why.empty(), why.c_str());
  }
};

QTEST_APPLESS_MAIN(TestTlsListener)
#include "test_tls_listener.moc"
