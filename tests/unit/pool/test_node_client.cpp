// NodeClient against a scripted peer: replies are matched by id (late replies skipped), several
// requests may be in flight on one connection (each reply reaches its request, whichever thread
// waits for it), and every malformed or hostile reply is a clear error, never a crash or a
// wrong value.

#include <QtTest>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>

#include "engine/error.h"
#include "lan/pool/node_client.h"
#include "tests/integration/lan_node/memory_connection.h"

using namespace shoal;
using namespace shoal::lan;
using nlohmann::json;

namespace {

// A peer whose answer to each request is computed by a test-supplied function.
class ScriptedConnection final : public Connection {
 public:
  using Script = std::function<std::vector<Message>(const Message& request)>;
  explicit ScriptedConnection(Script script) : m_script(std::move(script)) {}

  void send(const Message& m, std::chrono::milliseconds) override {
    if (!m_open) throw TransportError(TransportError::Kind::Closed, "closed");
    sent.push_back(m);
    for (Message& r : m_script(m)) m_replies.push_back(std::move(r));
  }
  Message receive(std::chrono::milliseconds) override {
    if (!m_open) throw TransportError(TransportError::Kind::Closed, "closed");
    if (m_replies.empty()) throw TransportError(TransportError::Kind::Timeout, "timeout");
    Message m = std::move(m_replies.front());
    m_replies.pop_front();
    return m;
  }
  const std::string& peerDeviceId() const override { return m_id; }
  const std::string& peerAddress() const override { return m_address; }
  void close() override { m_open = false; }
  bool isOpen() const override { return m_open; }
  ConnectionStats stats() const override { return {}; }

  std::vector<Message> sent;

 private:
  Script m_script;
  std::deque<Message> m_replies;
  std::string m_id = "PEER";
  std::string m_address = "peer:1";
  bool m_open = true;
};

Message reply(const Message& request, json control, std::vector<uint8_t> blob = {}) {
  Message m;
  m.control = std::move(control);
  m.control["id"] = request.control.at("id");
  m.blob = std::move(blob);
  return m;
}

std::unique_ptr<NodeClient> client(ScriptedConnection::Script script,
                                   ScriptedConnection** raw = nullptr) {
  auto c = std::make_unique<ScriptedConnection>(std::move(script));
  if (raw) *raw = c.get();
  return std::make_unique<NodeClient>(std::move(c), std::chrono::milliseconds(100));
}

ForwardRequest hiddenRequest(const std::vector<float>& hidden) {
  ForwardRequest r;
  r.stageId = "stage-1";
  r.count = 1;
  r.hidden = hidden;
  return r;
}

// A forward_result echoing the request's blob (a stage that returns its input).
std::vector<Message> echoForward(const Message& m) {
  return std::vector<Message>{reply(m, {{"op", "forward_result"}}, m.blob)};
}

// Answers the node protocol's forward (echo) and ping on its own thread, in order, until the
// connection closes.
class EchoPeer {
 public:
  explicit EchoPeer(std::shared_ptr<Connection> c)
      : m_connection(std::move(c)), m_thread([this] { run(); }) {}
  ~EchoPeer() {
    m_connection->close();
    m_thread.join();
  }

 private:
  void run() {
    for (;;) {
      Message m;
      try {
        m = m_connection->receive(std::chrono::seconds(30));
      } catch (const TransportError&) {
        return;
      }
      const std::string op = m.control.value("op", "");
      try {
        m_connection->send(op == "ping" ? reply(m, {{"op", "pong"}}) : echoForward(m).front(),
                           std::chrono::seconds(30));
      } catch (const TransportError&) {
        return;
      }
    }
  }

  std::shared_ptr<Connection> m_connection;
  std::thread m_thread;
};

}  // namespace

class TestNodeClient : public QObject {
  Q_OBJECT

 private slots:
  void lateReplyToAnEarlierRequestIsSkipped() {
    int calls = 0;
    auto c = client([&](const Message& m) {
      std::vector<Message> out;
      if (++calls == 2) {  // a stale pong for request 1 arrives before the real reply
        Message stale;
        stale.control = {{"op", "pong"}, {"id", 1}};
        out.push_back(stale);
      }
      if (calls >= 2) out.push_back(reply(m, {{"op", "pong"}}));
      return out;
    });
    QVERIFY_THROWS_EXCEPTION(TransportError, c->ping());  // request 1 times out
    QVERIFY(c->ping() >= 0);                              // request 2 skips the stale reply
  }

  void errorReplyIsAnErrorWithTheNodesMessage() {
    auto c = client([](const Message& m) {
      return std::vector<Message>{reply(m, {{"op", "error"}, {"message", "no such stage"}})};
    });
    try {
      c->truncate("stage-9", 0, 0);
      QFAIL("no error");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("no such stage") != std::string::npos, e.what());
    }
  }

  void replyWithAFutureIdIsAnError() {
    auto c = client([](const Message&) {
      Message m;
      m.control = {{"op", "pong"}, {"id", 99}};
      return std::vector<Message>{m};
    });
    QVERIFY_THROWS_EXCEPTION(Error, c->ping());
  }

  void replyWithoutAnIdIsAnError() {
    auto c = client([](const Message&) {
      Message m;
      m.control = {{"op", "pong"}};
      return std::vector<Message>{m};
    });
    QVERIFY_THROWS_EXCEPTION(Error, c->ping());
  }

  void nodeInfoClaimingAnotherIdentityIsRefused() {
    auto c = client([](const Message& m) {
      return std::vector<Message>{reply(m, {{"op", "node_info"},
                                            {"name", "n"},
                                            {"device_id", "SOMEONE-ELSE"},
                                            {"devices", json::array()}})};
    });
    QVERIFY_THROWS_EXCEPTION(Error, c->info());
  }

  void hiddenStateBlobOfPartialFloatsIsRefused() {
    auto c = client([](const Message& m) {
      return std::vector<Message>{reply(m, {{"op", "forward_result"}}, {1, 2, 3})};
    });
    std::vector<float> hidden(4, 0.f);
    QVERIFY_THROWS_EXCEPTION(Error, c->forward(hiddenRequest(hidden)));
  }

  void forwardReturnsTheHiddenStatesSent() {
    auto c = client([](const Message& m) {
      return std::vector<Message>{reply(m, {{"op", "forward_result"}}, m.blob)};
    });
    std::vector<float> hidden{1.5f, -2.f, 3.25f};
    const ForwardReply r = c->forward(hiddenRequest(hidden));
    QCOMPARE(r.values, hidden);
    QCOMPARE(r.token, -1);
  }

  void negativeSampledTokenIsRefused() {
    auto c = client([](const Message& m) {
      return std::vector<Message>{reply(m, {{"op", "forward_result"}, {"token", -4}})};
    });
    std::vector<float> hidden(1, 0.f);
    QVERIFY_THROWS_EXCEPTION(Error, c->forward(hiddenRequest(hidden)));
  }

  void forwardSendsTheSamplingParameters() {
    ScriptedConnection* raw = nullptr;
    auto c = client(
        [](const Message& m) {
          return std::vector<Message>{reply(m, {{"op", "forward_result"}, {"token", 7}})};
        },
        &raw);
    std::vector<float> hidden(1, 0.f);
    runtime::SampleRequest s;
    s.temperature = 0;
    s.seed = 42;
    ForwardRequest r = hiddenRequest(hidden);
    r.sample = &s;
    QCOMPARE(c->forward(r).token, 7);
    QCOMPARE(raw->sent.back().control.at("sample").at("seed").get<uint64_t>(), uint64_t(42));
    QCOMPARE(raw->sent.back().control.at("sample").at("temperature").get<double>(), 0.0);
    QCOMPARE(raw->sent.back().control.at("logits").get<std::string>(), std::string("last"));
  }

  void twoForwardsInFlightBothCompleteInOrder() {
    ScriptedConnection* raw = nullptr;
    auto c = client(echoForward, &raw);
    const std::vector<float> a{1.f, 2.f}, b{3.f, 4.f};
    const NodeClient::RequestId first = c->sendForward(hiddenRequest(a));
    const NodeClient::RequestId second = c->sendForward(hiddenRequest(b));
    QVERIFY(second > first);
    QCOMPARE(raw->sent.size(), size_t(2));  // both sent before either reply was read
    QCOMPARE(c->receiveForward(first).values, a);
    QCOMPARE(c->receiveForward(second).values, b);
  }

  void eachReplyReachesItsRequestWhateverOrderTheyAreAwaitedIn() {
    auto c = client([](const Message& m) {
      if (m.control.value("op", "") == "ping") {
        return std::vector<Message>{reply(m, {{"op", "pong"}})};
      }
      return echoForward(m);
    });
    const std::vector<float> a{1.f}, b{2.f};
    const NodeClient::RequestId first = c->sendForward(hiddenRequest(a));
    const NodeClient::RequestId second = c->sendForward(hiddenRequest(b));
    QVERIFY(c->ping() >= 0);  // reads past both forward replies, keeping them
    QCOMPARE(c->receiveForward(second).values, b);
    QCOMPARE(c->receiveForward(first).values, a);
  }

  void abandonedRequestsReplyIsSkipped() {
    auto c = client(echoForward);
    const std::vector<float> a{1.f}, b{2.f};
    c->abandon(c->sendForward(hiddenRequest(a)));
    QCOMPARE(c->forward(hiddenRequest(b)).values, b);
  }

  void closedConnectionFailsEveryRequestInFlight() {
    ScriptedConnection* raw = nullptr;
    auto c = client([](const Message&) { return std::vector<Message>{}; }, &raw);
    const std::vector<float> a{1.f}, b{2.f};
    const NodeClient::RequestId first = c->sendForward(hiddenRequest(a));
    const NodeClient::RequestId second = c->sendForward(hiddenRequest(b));
    raw->close();
    QVERIFY_THROWS_EXCEPTION(TransportError, c->receiveForward(first));
    QVERIFY_THROWS_EXCEPTION(TransportError, c->receiveForward(second));
  }

  void pingsFromAnotherThreadInterleaveWithPipelinedForwards() {
    auto [mine, theirs] = test::memoryConnectionPair("PEER");
    EchoPeer peer(theirs);
    NodeClient c(mine, std::chrono::seconds(30));
    std::atomic<int> pongs{0};
    std::thread poller([&] {
      for (int i = 0; i < 200; ++i) {
        if (c.ping() >= 0) ++pongs;
      }
    });
    bool allMatch = true;
    for (int i = 0; i < 200; ++i) {
      const std::vector<float> a{float(i)}, b{float(-i)};
      const NodeClient::RequestId first = c.sendForward(hiddenRequest(a));
      const NodeClient::RequestId second = c.sendForward(hiddenRequest(b));
      allMatch = allMatch && c.receiveForward(first).values == a;
      allMatch = allMatch && c.receiveForward(second).values == b;
    }
    poller.join();
    QVERIFY(allMatch);
    QCOMPARE(pongs.load(), 200);
  }

  void telemetryReplyWithoutDevicesIsRefused() {
    auto c = client([](const Message& m) {
      return std::vector<Message>{reply(m, {{"op", "telemetry"}})};
    });
    QVERIFY_THROWS_EXCEPTION(Error, c->telemetry());
  }

  void closedConnectionIsATransportError() {
    ScriptedConnection* raw = nullptr;
    auto c = client([](const Message&) { return std::vector<Message>{}; }, &raw);
    raw->close();
    QVERIFY_THROWS_EXCEPTION(TransportError, c->ping());
  }
};

QTEST_GUILESS_MAIN(TestNodeClient)
#include "test_node_client.moc"
