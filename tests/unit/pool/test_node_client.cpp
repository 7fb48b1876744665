// NodeClient against a scripted peer: replies are matched by id (late replies skipped), and
// every malformed or hostile reply is a clear error, never a crash or a wrong value.

#include <QtTest>
#include <cstring>
#include <deque>
#include <functional>

#include "engine/error.h"
#include "lan/pool/node_client.h"

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

ForwardRequest hiddenRequest(std::vector<float>& hidden) {
  ForwardRequest r;
  r.stageId = "stage-1";
  r.count = 1;
  r.hidden = hidden;
  return r;
}

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
    RemoteSampling s;
    s.temperature = 0;
    s.seed = 42;
    ForwardRequest r = hiddenRequest(hidden);
    r.sample = &s;
    QCOMPARE(c->forward(r).token, 7);
    QCOMPARE(raw->sent.back().control.at("sample").at("seed").get<uint64_t>(), uint64_t(42));
    QCOMPARE(raw->sent.back().control.at("sample").at("temperature").get<double>(), 0.0);
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
