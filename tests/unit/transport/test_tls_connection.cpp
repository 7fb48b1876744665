// TLS connections over loopback: who may talk to whom (device-ID pinning both ways), timeouts,
// big blobs, concurrent use, closing, and peers that send malformed or stalled streams.

#include <QtTest>
#include <atomic>
#include <thread>

#include "lan/transport/connect.h"
#include "lan/transport/listener.h"
#include "lan/transport/session_ops.h"
#include "lan/transport/wire_format.h"
#include "transport_test_util.h"

using namespace shoal::lan;
using namespace shoal::lan::test;
using namespace std::chrono_literals;

namespace {

Message op(const std::string& name, nlohmann::json extra = nlohmann::json::object()) {
  Message m;
  m.control = std::move(extra);
  m.control["op"] = name;
  return m;
}

TransportError::Kind connectError(uint16_t port, const Node& client, std::string* message = nullptr,
                                  std::chrono::milliseconds timeout = 10s) {
  try {
    connectTo("127.0.0.1", port, client.identity, client.trust, timeout);
  } catch (const TransportError& e) {
    if (message) *message = e.what();
    return e.kind();
  }
  return TransportError::Kind::Io;  // "no error" is never expected by the callers
}

// A server and a client that trust each other, and one open connection between them.
struct Pair {
  Node server, client;
  Inbox inbox;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Connection> clientSide, serverSide;
  Pair() {
    server.trust.add(client.identity.deviceId, "client");
    client.trust.add(server.identity.deviceId, "server");
    listener =
        std::make_unique<Listener>("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    clientSide = connectTo("127.0.0.1", listener->port(), client.identity, client.trust, 10s);
    serverSide = inbox.take();
  }
};

}  // namespace

class TestTlsConnection : public QObject {
  Q_OBJECT

 private slots:
  void trustedPeersExchangeMessagesAndSeeEachOthersIds() {
    Pair p;
    QVERIFY(p.serverSide);
    QCOMPARE(p.clientSide->peerDeviceId(), p.server.identity.deviceId);
    QCOMPARE(p.serverSide->peerDeviceId(), p.client.identity.deviceId);
    // Stats count the session opening (hello/welcome) too, so compare against a baseline.
    const ConnectionStats before = p.clientSide->stats();
    p.clientSide->send(op("ping", {{"t", 42}}));
    const Message atServer = p.serverSide->receive(10s);
    QCOMPARE(atServer.control["t"].get<int>(), 42);
    p.serverSide->send(op("pong", {{"t", 42}}));
    QCOMPARE(p.clientSide->receive(10s).control["op"].get<std::string>(), std::string("pong"));
    QCOMPARE(p.clientSide->stats().messagesSent - before.messagesSent, uint64_t{1});
    QCOMPARE(p.clientSide->stats().messagesReceived - before.messagesReceived, uint64_t{1});
    QVERIFY(p.clientSide->stats().bytesSent > before.bytesSent);
  }

  void anUntrustedClientIsRefusedWithAReason() {
    Node server, stranger;
    stranger.trust.add(server.identity.deviceId, "server");
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    std::string message;
    QCOMPARE(connectError(listener.port(), stranger, &message), TransportError::Kind::Auth);
    QVERIFY2(message.find("not trusted") != std::string::npos, message.c_str());
    QCOMPARE(inbox.count(), 0);
  }

  void anUntrustedClientReceivesNothingButTheRefusal() {
    Node server, stranger;
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    RawTlsClient raw(listener.port(), stranger.identity);
    raw.write(encodeFrame(op(ops::kHello, {{"version", 1}})));
    raw.write(encodeFrame(op("node_info", {{"id", 1}})));  // a request it must never answer
    const auto [bytes, closedByPeer] = raw.readUntilClosed();
    QVERIFY(closedByPeer);
    FrameDecoder d;
    d.feed(bytes);
    auto first = d.next();
    QVERIFY(first.has_value());
    QCOMPARE(first->control["op"].get<std::string>(), std::string(ops::kRefused));
    QVERIFY(!d.next().has_value());
    QCOMPARE(d.partialBytes(), size_t{0});
    QCOMPARE(inbox.count(), 0);
  }

  void anUntrustedServerIsRefusedByTheClient() {
    Node server, client;
    server.trust.add(client.identity.deviceId, "client");  // the server would accept
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    std::string message;
    QCOMPARE(connectError(listener.port(), client, &message), TransportError::Kind::Auth);
    QVERIFY2(message.find(server.identity.deviceId) != std::string::npos, message.c_str());
    QCOMPARE(inbox.count(), 0);
  }

  void connectingToAServerThatNeverHandshakesTimesOut() {
    asio::io_context io;
    asio::ip::tcp::acceptor silent(io, {asio::ip::make_address("127.0.0.1"), 0});  // never accepts
    Node client;
    QCOMPARE(connectError(silent.local_endpoint().port(), client, nullptr, 300ms),
             TransportError::Kind::Timeout);
  }

  void connectingToAClosedPortIsAnIoError() {
    uint16_t port = 0;
    {
      asio::io_context io;
      asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
      port = a.local_endpoint().port();
    }
    Node client;
    QCOMPARE(connectError(port, client), TransportError::Kind::Io);
  }

  void receiveTimesOutAndTheConnectionStaysUsable() {
    Pair p;
    try {
      p.clientSide->receive(50ms);
      QFAIL("no timeout");
    } catch (const TransportError& e) {
      QCOMPARE(e.kind(), TransportError::Kind::Timeout);
    }
    QVERIFY(p.clientSide->isOpen());
    p.serverSide->send(op("late"));
    QCOMPARE(p.clientSide->receive(10s).control["op"].get<std::string>(), std::string("late"));
  }

  void aTenMegabyteBlobRoundTrips() {
    Pair p;
    Message big = op("weights_chunk", {{"offset", 0}});
    big.blob.resize(10'000'000);
    for (size_t i = 0; i < big.blob.size(); ++i)
      big.blob[i] = static_cast<uint8_t>((i * 7919) >> 3);
    p.clientSide->send(big);
    Message atServer = p.serverSide->receive(30s);
    QCOMPARE(atServer.blob.size(), big.blob.size());
    QVERIFY(atServer.blob == big.blob);
    p.serverSide->send(atServer);
    QVERIFY(p.clientSide->receive(30s).blob == big.blob);
    QCOMPARE(p.serverSide->stats().blobBytesReceived, uint64_t{10'000'000});
  }

  void twoThreadsSendWhileAThirdReceives() {
    Pair p;
    constexpr int kPerThread = 200;
    std::thread echo([&] {
      for (int i = 0; i < 2 * kPerThread; ++i) p.serverSide->send(p.serverSide->receive(30s));
    });
    std::vector<Message> got;
    std::thread reader([&] {
      for (int i = 0; i < 2 * kPerThread; ++i) got.push_back(p.clientSide->receive(30s));
    });
    auto sender = [&](int who) {
      for (int i = 0; i < kPerThread; ++i) {
        Message m = op("seq", {{"who", who}, {"n", i}});
        m.blob.assign(static_cast<size_t>(100 + i), static_cast<uint8_t>(who));
        p.clientSide->send(m);
      }
    };
    std::thread a(sender, 0), b(sender, 1);
    a.join();
    b.join();
    reader.join();
    echo.join();
    QCOMPARE(got.size(), size_t{2 * kPerThread});
    int next[2] = {0, 0};
    for (const Message& m : got) {
      const int who = m.control["who"].get<int>();
      QCOMPARE(m.control["n"].get<int>(), next[who]);  // each sender's order is kept
      QCOMPARE(m.blob.size(), static_cast<size_t>(100 + next[who]));
      QVERIFY(std::all_of(m.blob.begin(), m.blob.end(), [&](uint8_t v) { return v == who; }));
      ++next[who];
    }
  }

  void aSendThePeerNeverReadsTimesOutAndClosesTheConnection() {
    // The server side never calls receive(): it stops reading once 64 MiB wait in its queue, TCP
    // fills up, and the client's send has to give up.
    Pair p;
    Message chunk = op("weights_chunk");
    chunk.blob.assign(32u << 20, 0x5a);
    bool timedOut = false;
    for (int i = 0; i < 10 && !timedOut; ++i) {
      try {
        p.clientSide->send(chunk, 300ms);
      } catch (const TransportError& e) {
        QCOMPARE(e.kind(), TransportError::Kind::Timeout);
        timedOut = true;
      }
    }
    QVERIFY(timedOut);
    QVERIFY(!p.clientSide->isOpen());  // a frame may be half on the wire: the stream is unusable
  }

  void aFloodOfJsonOnlyFramesHitsBackpressure() {
    // Like the blob case, with frames that carry no blob: the server must stop reading too,
    // long before 128 MiB of JSON are in its queue.
    Pair p;
    Message chunk = op("note", {{"text", std::string((1u << 20) - 64, 'j')}});
    bool timedOut = false;
    for (int i = 0; i < 128 && !timedOut; ++i) {
      try {
        p.clientSide->send(chunk, 1s);
      } catch (const TransportError& e) {
        QCOMPARE(e.kind(), TransportError::Kind::Timeout);
        timedOut = true;
      }
    }
    QVERIFY(timedOut);
  }

  void anUntrustedPeersBlobIsRefusedAtItsHeader() {
    // Before trust only small frames are read: a header announcing a blob closes the connection
    // at once instead of buffering up to 64 MiB for a peer nobody vouched for.
    Node server, stranger;
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    RawTlsClient raw(listener.port(), stranger.identity);
    const std::string json = R"({"op":"hello","version":1})";
    auto frame = encodeFrameHeader(static_cast<uint32_t>(json.size()), 64u << 20);
    std::vector<uint8_t> start(frame.begin(), frame.end());
    start.insert(start.end(), json.begin(), json.end());
    QVERIFY(raw.tryWrite(start));
    // 32 MiB of the blob: more than socket buffers hold, so the writes fail once the server has
    // hung up, and succeed only if it reads (buffers) them.
    bool refused = false;
    for (int i = 0; i < 32 && !refused; ++i)
      refused = !raw.tryWrite(std::vector<uint8_t>(1u << 20));
    QVERIFY(refused);
    QCOMPARE(inbox.count(), 0);
  }

  void closeUnblocksAReceiveInAnotherThread() {
    Pair p;
    std::atomic<int> kind{-1};
    std::thread waiter([&] {
      try {
        p.clientSide->receive(60s);
      } catch (const TransportError& e) {
        kind = static_cast<int>(e.kind());
      }
    });
    std::this_thread::sleep_for(50ms);  // let it block (not a timing assertion: any order works)
    p.clientSide->close();
    waiter.join();
    QCOMPARE(kind.load(), static_cast<int>(TransportError::Kind::Closed));
    QVERIFY(!p.clientSide->isOpen());
  }

  void whenThePeerClosesMessagesSentBeforeStillArrive() {
    Pair p;
    p.serverSide->send(op("last words"));
    p.serverSide->close();
    p.serverSide.reset();
    QCOMPARE(p.clientSide->receive(10s).control["op"].get<std::string>(),
             std::string("last words"));
    try {
      p.clientSide->receive(10s);
      QFAIL("no error after the peer closed");
    } catch (const TransportError& e) {
      QCOMPARE(e.kind(), TransportError::Kind::Closed);
    }
  }

  void sendingOnAClosedConnectionThrowsClosed() {
    Pair p;
    p.clientSide->close();
    try {
      p.clientSide->send(op("x"));
      QFAIL("no error");
    } catch (const TransportError& e) {
      QCOMPARE(e.kind(), TransportError::Kind::Closed);
    }
  }

  void garbageFromATrustedPeerIsAProtocolErrorAndCloses() {
    Node server, client;
    server.trust.add(client.identity.deviceId, "client");
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    RawTlsClient raw(listener.port(), client.identity);
    raw.write(encodeFrame(op(ops::kHello, {{"version", 1}})));
    auto conn = inbox.take();
    QVERIFY(conn);
    raw.write({'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P'});
    try {
      conn->receive(20s);
      QFAIL("garbage was accepted");
    } catch (const TransportError& e) {
      QCOMPARE(e.kind(), TransportError::Kind::Protocol);
    }
    QVERIFY(!conn->isOpen());
    QVERIFY(raw.readUntilClosed().second);  // and the server hung up
  }

  void aHeaderAnnouncingFourGibibytesIsAProtocolError() {
    Node server, client;
    server.trust.add(client.identity.deviceId, "client");
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    RawTlsClient raw(listener.port(), client.identity);
    raw.write(encodeFrame(op(ops::kHello, {{"version", 1}})));
    auto conn = inbox.take();
    QVERIFY(conn);
    const auto h = encodeFrameHeader(16, 0xffffffffu);
    raw.write(std::vector<uint8_t>(h.begin(), h.end()));
    try {
      conn->receive(20s);
      QFAIL("accepted");
    } catch (const TransportError& e) {
      QCOMPARE(e.kind(), TransportError::Kind::Protocol);
      QVERIFY2(std::string(e.what()).find("4294967295") != std::string::npos, e.what());
    }
  }

  void aTruncatedFrameThenCloseIsReportedAsClosed() {
    Node server, client;
    server.trust.add(client.identity.deviceId, "client");
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    std::unique_ptr<Connection> conn;
    {
      RawTlsClient raw(listener.port(), client.identity);
      raw.write(encodeFrame(op(ops::kHello, {{"version", 1}})));
      conn = inbox.take();
      QVERIFY(conn);
      auto frame = encodeFrame(op("forward"));
      frame.resize(frame.size() - 3);
      raw.write(frame);
    }  // the raw client goes away mid-frame
    try {
      conn->receive(20s);
      QFAIL("a partial frame was delivered");
    } catch (const TransportError& e) {
      QCOMPARE(e.kind(), TransportError::Kind::Closed);
    }
  }

  void halfAHeaderThenSilenceTimesOutTheReader() {
    Node server, client;
    server.trust.add(client.identity.deviceId, "client");
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    RawTlsClient raw(listener.port(), client.identity);
    raw.write(encodeFrame(op(ops::kHello, {{"version", 1}})));
    auto conn = inbox.take();
    QVERIFY(conn);
    const auto h = encodeFrameHeader(16, 0);
    raw.write(std::vector<uint8_t>(h.begin(), h.begin() + 6));
    try {
      conn->receive(200ms);
      QFAIL("no timeout");
    } catch (const TransportError& e) {
      QCOMPARE(e.kind(), TransportError::Kind::Timeout);
    }
    conn->close();  // what a node does with a peer that stalls
    QVERIFY(raw.readUntilClosed().second);
  }

  void aSlowLorisBeforeTheHandshakeIsDropped() {
    Node server;
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    listener.setHandshakeTimeout(200ms);
    asio::io_context io;
    asio::ip::tcp::socket sock(io);
    sock.connect({asio::ip::make_address("127.0.0.1"), listener.port()});
    asio::write(sock, asio::buffer(std::string("\x16\x03\x01")));  // half a TLS record header
    auto* s = &sock;
    const auto result = readUntilClosed(
        [s](asio::mutable_buffer b, asio::error_code& ec) { return s->read_some(b, ec); },
        sock.native_handle());
    QVERIFY(result.second);
    QCOMPARE(inbox.count(), 0);
  }

  void aStalledFirstFrameAfterTheHandshakeIsDropped() {
    Node server, client;
    server.trust.add(client.identity.deviceId, "client");
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    listener.setHandshakeTimeout(200ms);
    RawTlsClient raw(listener.port(), client.identity);
    raw.write({'S', 'H', 'L'});  // and nothing more
    QVERIFY(raw.readUntilClosed().second);
    QCOMPARE(inbox.count(), 0);
  }

  void theListenerKeepsServingAfterMisbehavingClients() {
    Pair p;
    for (int i = 0; i < 3; ++i) {
      RawTlsClient raw(p.listener->port(), p.client.identity);
      raw.write({0xde, 0xad, 0xbe, 0xef});
      raw.readUntilClosed();
    }
    auto again = connectTo("127.0.0.1", p.listener->port(), p.client.identity, p.client.trust, 10s);
    QVERIFY(again->isOpen());
    QVERIFY(p.inbox.take());
  }

  void stoppingTheListenerRefusesNewConnections() {
    Pair p;
    const uint16_t port = p.listener->port();
    p.listener->stop();
    QCOMPARE(connectError(port, p.client), TransportError::Kind::Io);
    QVERIFY(p.clientSide->isOpen());  // connections already handed out live on
  }
};

QTEST_APPLESS_MAIN(TestTlsConnection)
#include "test_tls_connection.moc"
