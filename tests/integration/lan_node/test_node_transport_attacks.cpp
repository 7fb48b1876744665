// A hostile LAN host against the real shoal-node's pool listener, on loopback (each 127.x.y.z
// address plays another host): idle connections and stalled handshakes do not lock the trusted
// coordinator out (per-address slots, a share kept for known coordinators, idle sockets dropped
// fast); unauthenticated peers announcing huge frames cost the node no memory; one host failing
// pairing again and again cannot burn the code for the person who has it, and an unpaired host
// cannot tell whether a code is shown. Every attack is bounded in sockets, bytes and time.

#include <sys/socket.h>

#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "lan/transport/connect.h"
#include "lan/transport/identity.h"
#include "lan/transport/pairing.h"
#include "lan/transport/trust_store.h"
#include "lan/transport/wire_format.h"
#include "tests/integration/lan_node/node_process.h"
#include "tests/integration/lan_node/node_test_support.h"
#include "tests/unit/transport/transport_test_util.h"

using namespace shoal;
using namespace shoal::lan;
using namespace std::chrono_literals;

namespace {

// Shuts down the sockets whose writes still block after `limit` (the node neither read nor closed
// them), so that such a regression fails the test instead of hanging it. A send timeout
// (SO_SNDTIMEO) cannot bound them: asio's blocking write polls again, without a limit, after the
// EAGAIN it gives.
class StalledWriteWatchdog {
 public:
  explicit StalledWriteWatchdog(std::chrono::seconds limit)
      : m_thread([this, limit] { watch(limit); }) {}
  ~StalledWriteWatchdog() { finish(); }

  void add(int fd) {
    std::lock_guard lock(m_mutex);
    m_fds.insert(fd);
  }
  void remove(int fd) {  // before the socket closes: its number may be reused
    std::lock_guard lock(m_mutex);
    m_fds.erase(fd);
  }
  // Stops watching; whether it had to cut writes off.
  bool finish() {
    {
      std::lock_guard lock(m_mutex);
      m_done = true;
    }
    m_wake.notify_all();
    if (m_thread.joinable()) m_thread.join();
    return m_fired;
  }

 private:
  void watch(std::chrono::seconds limit) {
    std::unique_lock lock(m_mutex);
    if (m_wake.wait_for(lock, limit, [&] { return m_done; })) return;
    m_fired = true;
    for (const int fd : m_fds) ::shutdown(fd, SHUT_RDWR);
  }

  std::mutex m_mutex;  // guards the fields below
  std::condition_variable m_wake;
  std::set<int> m_fds;
  bool m_done = false;
  bool m_fired = false;
  std::thread m_thread;  // last: starts once the fields above exist
};

constexpr auto kConnect = 5s;     // a coordinator's connect under attack (bounded wait)
constexpr auto kAttackFor = 6s;   // how long each flood runs
constexpr int kIdleSockets = 64;  // the idle flood from one address

// `prefix` + n, built with += (GCC 12 misreads "literal" + std::string as an overlapping copy).
std::string numbered(const char* prefix, int n) {
  std::string text = prefix;
  text += std::to_string(n);
  return text;
}

// Whether a connected socket is still open (not closed or reset by the node), without blocking.
bool stillOpen(asio::ip::tcp::socket& s) {
  char byte;
  const ssize_t n = ::recv(s.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// A coordinator's round: a fresh connection, node_info answered. Empty when it worked, else why.
std::string coordinatorRound(uint16_t port, const Identity& me, const TrustStore& trust) {
  try {
    auto c = connectTo("127.0.0.1", port, me, trust, kConnect);
    const Message r = test::rawCall(*c, {{"op", "node_info"}});
    if (r.control.value("op", "") != "node_info") return "reply " + r.control.dump();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Runs coordinator rounds until `attacking` turns false; returns the failures (empty: none) and
// counts the rounds.
std::vector<std::string> roundsWhile(const std::atomic<bool>& attacking, uint16_t port,
                                     const Identity& me, const TrustStore& trust, int& rounds) {
  std::vector<std::string> failures;
  rounds = 0;
  while (attacking.load()) {
    const std::string why = coordinatorRound(port, me, trust);
    ++rounds;
    if (!why.empty()) failures.push_back(why);
    std::this_thread::sleep_for(200ms);
  }
  return failures;
}

}  // namespace

class TestNodeTransportAttacks : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  Identity m_coordinator;
  int m_nodes = 0;

  std::filesystem::path freshConfig() {
    const std::filesystem::path d = m_dir.filePath(QString::number(m_nodes++)).toStdString();
    std::filesystem::create_directories(d);
    return d;
  }

  // A node trusting m_coordinator, and the coordinator's trust in it.
  std::unique_ptr<test::NodeProcess> trustedNode(TrustStore& trust, const QStringList& extra = {}) {
    auto node = std::make_unique<test::NodeProcess>(
        SHOAL_NODE_EXE, freshConfig(),
        QStringList{"--trust", QString::fromStdString(m_coordinator.deviceId)} + extra);
    trust.add(node->deviceId(), "node");
    return node;
  }

 private slots:
  void initTestCase() { m_coordinator = createIdentity(); }

  void idleConnectionsFromOneAddressDoNotLockOutTheCoordinator() {
    TrustStore trust;
    auto node = trustedNode(trust);
    QVERIFY(node->port() != 0);
    QVERIFY(coordinatorRound(node->port(), m_coordinator, trust).empty());
    // The attack of the issue: idle TCP connections, reopened as the node drops them.
    std::atomic<bool> attacking{true};
    std::thread attacker([&] {
      asio::io_context io;
      std::vector<std::unique_ptr<asio::ip::tcp::socket>> sockets;
      const auto until = std::chrono::steady_clock::now() + kAttackFor;
      while (std::chrono::steady_clock::now() < until) {
        std::erase_if(sockets, [](auto& s) { return !stillOpen(*s); });
        while (sockets.size() < size_t(kIdleSockets)) {
          auto s = std::make_unique<asio::ip::tcp::socket>(io);
          try {
            test::connectFrom(*s, "127.0.0.2", node->port());
          } catch (const std::exception&) {
            break;
          }
          sockets.push_back(std::move(s));
        }
        std::this_thread::sleep_for(100ms);
      }
      attacking = false;
    });
    int rounds = 0;
    const auto failures = roundsWhile(attacking, node->port(), m_coordinator, trust, rounds);
    attacker.join();
    QVERIFY(rounds > 0);
    QVERIFY2(failures.empty(), failures.empty() ? "" : failures.front().c_str());
  }

  void stalledHandshakesFromManyAddressesLeaveRoomForAKnownCoordinator() {
    TrustStore trust;
    auto node = trustedNode(trust);
    QVERIFY(node->port() != 0);
    QVERIFY(coordinatorRound(node->port(), m_coordinator, trust).empty());  // now it is known
    // 16 addresses x 4 connections that each sent the first bytes of a TLS record and stall:
    // as many as the node's vetting slots, held for the whole handshake timeout.
    asio::io_context io;
    std::vector<std::unique_ptr<asio::ip::tcp::socket>> stalled;
    for (int host = 1; host <= 16; ++host) {
      for (int i = 0; i < 4; ++i) {
        auto s = std::make_unique<asio::ip::tcp::socket>(io);
        test::connectFrom(*s, numbered("127.0.1.", host), node->port());
        asio::write(*s, asio::buffer(std::string("\x16\x03\x01", 3)));
        stalled.push_back(std::move(s));
      }
    }
    for (int round = 0; round < 5; ++round) {
      const std::string why = coordinatorRound(node->port(), m_coordinator, trust);
      QVERIFY2(why.empty(), why.c_str());
    }
  }

  void untrustedPeersAnnouncingHugeBlobsCostTheNodeNoMemory() {
    TrustStore trust;
    auto node = trustedNode(trust);
    QVERIFY(node->port() != 0);
    QVERIFY(coordinatorRound(node->port(), m_coordinator, trust).empty());
    const uint64_t before = node->residentBytes();
    QVERIFY(before > 0);
    // 16 strangers (4 addresses x 4), each past the TLS handshake, sending a frame that announces a
    // 64 MiB blob and then up to 16 MiB of it: 256 MiB if the node buffered them.
    constexpr int kStrangers = 16;
    constexpr int kMiBEach = 16;
    const Identity stranger = createIdentity();
    std::atomic<int> cutOff{0};
    std::atomic<bool> attacking{true};
    uint64_t peak = before;
    std::thread sampler([&] {
      while (attacking.load()) {
        peak = std::max(peak, node->residentBytes());
        std::this_thread::sleep_for(10ms);
      }
    });
    // The node cuts each stranger off at its first frame; a minute of blocked writes is a node
    // that neither reads nor closes.
    StalledWriteWatchdog watchdog(60s);
    std::vector<std::thread> strangers;
    for (int k = 0; k < kStrangers; ++k) {
      strangers.emplace_back([&, k] {
        try {
          test::RawTlsClient raw(node->port(), stranger, numbered("127.0.2.", k / 4 + 1));
          watchdog.add(raw.fd());
          struct Unwatch {
            StalledWriteWatchdog& watchdog;
            int fd;
            ~Unwatch() { watchdog.remove(fd); }
          } unwatch{watchdog, raw.fd()};
          const std::string json = R"({"op":"hello","version":1})";
          const auto h = encodeFrameHeader(static_cast<uint32_t>(json.size()), kMaxBlobBytes);
          std::vector<uint8_t> start(h.begin(), h.end());
          start.insert(start.end(), json.begin(), json.end());
          bool open = raw.tryWrite(start);
          const std::vector<uint8_t> mib(1u << 20, 0x42);
          for (int i = 0; i < kMiBEach && open; ++i) open = raw.tryWrite(mib);
          if (!open) ++cutOff;
        } catch (const std::exception&) {
          ++cutOff;  // refused during the handshake: cut off too
        }
      });
    }
    for (auto& t : strangers) t.join();
    const bool stalled = watchdog.finish();
    attacking = false;
    sampler.join();
    QVERIFY2(!stalled, "a stranger's write blocked for 60 s: the node neither read nor closed");
    const double grewMiB = double(peak - before) / double(1u << 20);
    qInfo("node RSS %.1f MiB before, peak %.1f MiB during the attack (+%.1f MiB)",
          double(before) / double(1u << 20), double(peak) / double(1u << 20), grewMiB);
    QCOMPARE(cutOff.load(), kStrangers);
    QVERIFY2(grewMiB < 48, qPrintable(QString("node RSS grew by %1 MiB").arg(grewMiB)));
    QVERIFY(coordinatorRound(node->port(), m_coordinator, trust).empty());
  }

  void oneAddressFailingPairingCannotBurnTheCodeForAnother() {
    auto node = std::make_unique<test::NodeProcess>(
        SHOAL_NODE_EXE, freshConfig(),
        QStringList{"--trust", QString::fromStdString(createIdentity().deviceId), "--pair"});
    QVERIFY(node->port() != 0);
    static const QRegularExpression codeLine("pairing code (\\S+)");
    QString out = node->stdoutText();
    for (int i = 0; i < 10 && !codeLine.match(out).hasMatch(); ++i) out = node->stdoutText(3000);
    QVERIFY2(codeLine.match(out).hasMatch(), qPrintable(out));
    const std::string code = codeLine.match(out).captured(1).toStdString();
    // Far more wrong attempts from one host than the 5 that used to burn a code.
    const Identity guesser = createIdentity();
    for (int i = 0; i < 40; ++i) test::wrongPairingAttempt(node->port(), guesser, "127.0.0.2");
    const Identity me = createIdentity();
    TrustStore mine;
    try {
      QCOMPARE(pairWith("127.0.0.1", node->port(), me, mine, code, "the-owner", 15s),
               node->deviceId());
    } catch (const TransportError& e) {
      QFAIL(e.what());
    }
    // Paired: the owner now simply connects.
    const std::string why = coordinatorRound(node->port(), me, mine);
    QVERIFY2(why.empty(), why.c_str());
  }

  void anUnpairedHostCannotTellWhetherAPairingCodeIsShown() {
    const QStringList trustNobody{"--trust", QString::fromStdString(createIdentity().deviceId)};
    test::NodeProcess showing(SHOAL_NODE_EXE, freshConfig(), trustNobody + QStringList{"--pair"});
    test::NodeProcess notShowing(SHOAL_NODE_EXE, freshConfig(), trustNobody);
    QVERIFY(showing.port() != 0 && notShowing.port() != 0);
    const Identity me = createIdentity();
    auto failure = [&](uint16_t port) {
      TrustStore mine;
      try {
        pairWith("127.0.0.1", port, me, mine, "2345-6789", "guesser", 15s);
      } catch (const TransportError& e) {
        std::string text = e.what();
        const std::string where = "127.0.0.1:" + std::to_string(port);
        if (const size_t at = text.find(where); at != std::string::npos)
          text.replace(at, where.size(), "ADDRESS");
        return text;
      }
      return std::string("paired");
    };
    const std::string withCode = failure(showing.port());
    QVERIFY2(withCode.find("wrong code") != std::string::npos, withCode.c_str());
    QCOMPARE(failure(notShowing.port()), withCode);
  }
};

QTEST_GUILESS_MAIN(TestNodeTransportAttacks)
#include "test_node_transport_attacks.moc"
