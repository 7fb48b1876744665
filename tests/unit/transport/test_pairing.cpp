// Pairing: a right code makes two strangers trust each other (persisted on both sides); a wrong
// code, a burnt or expired code, or a transcript bound to another certificate (a man in the
// middle) trusts nobody. Failures are counted per address (back-off) and in all (burning), and
// whether a code is active is never told. Plus the SPAKE2 exchange and the code format on their
// own.

#include <QTemporaryDir>
#include <QtTest>

#include "engine/error.h"
#include "lan/transport/connect.h"
#include "lan/transport/pairing.h"
#include "lan/transport/session_ops.h"
#include "lan/transport/spake2.h"
#include "transport_test_util.h"

using namespace shoal::lan;
using namespace shoal::lan::test;
using namespace std::chrono_literals;

namespace {

std::filesystem::path dirOf(const QTemporaryDir& d) { return d.path().toStdString(); }

// A pairWith that returns the TransportError it threw (kind and message) or fails the caller.
std::optional<TransportError> pairError(uint16_t port, Node& client, const std::string& code) {
  try {
    pairWith("127.0.0.1", port, client.identity, client.trust, code, "client", 10s);
  } catch (const TransportError& e) {
    return e;
  }
  return std::nullopt;
}

std::string otherCode(const std::string& code) {
  std::string wrong = normalizePairingCode(code);
  wrong[0] = wrong[0] == 'A' ? 'B' : 'A';
  return wrong;
}

std::vector<uint8_t> bytes(const char* s) { return std::vector<uint8_t>(s, s + std::strlen(s)); }

std::vector<uint8_t> hex(const char* h) {
  std::vector<uint8_t> out;
  for (size_t i = 0; h[i] && h[i + 1]; i += 2)
    out.push_back(static_cast<uint8_t>(std::stoi(std::string(h + i, 2), nullptr, 16)));
  return out;
}

// RFC 9382 Appendix B, first P-256 vector (A = "server", B = "client", no AAD).
constexpr const char* kRfcW = "2ee57912099d31560b3a44b1184b9b4866e904c49d12ac5042c97dca461b1a5f";
constexpr const char* kRfcX = "43dd0fd7215bdcb482879fca3220c6a968e66d70b1356cac18bb26c84a78d729";
constexpr const char* kRfcY = "dcb60106f276b02606d8ef0a328c02e4b629f84f89786af5befb0bc75b6e66be";
constexpr const char* kRfcPA =
    "04a56fa807caaa53a4d28dbb9853b9815c61a411118a6fe516a8798434751470f9010153ac33d0d5f2047ffdb1a3e4"
    "2c9b4e6be662766e1eeb4116988ede5f912c";
constexpr const char* kRfcPB =
    "0406557e482bd03097ad0cbaa5df82115460d951e3451962f1eaf4367a420676d09857ccbc522686c83d1852abfa8e"
    "d6e4a1155cf8f1543ceca528afb591a1e0b7";
constexpr const char* kRfcKe = "0e0672dc86f8e45565d338b0540abe69";
constexpr const char* kRfcCA = "58ad4aa88e0b60d5061eb6b5dd93e80d9c4f00d127c65b3b35b1b5281fee38f0";
constexpr const char* kRfcCB = "d3e2e547f1ae04f2dbdbf0fc4b79f8ecff2dff314b5d32fe9fcef2fb26dc459b";

}  // namespace

class TestPairing : public QObject {
  Q_OBJECT

 private slots:
  void generatedCodesAreEightUnambiguousCharactersInTwoGroups() {
    for (int i = 0; i < 50; ++i) {
      const std::string code = generatePairingCode();
      QCOMPARE(code.size(), size_t{9});
      QCOMPARE(code[4], '-');
      QCOMPARE(normalizePairingCode(code).size(), size_t{8});
      for (char c : std::string("01IO")) QVERIFY(code.find(c) == std::string::npos);
    }
  }

  void codesAreReadCaseInsensitivelyWithoutSeparators() {
    QCOMPARE(normalizePairingCode("abcd efgh"), std::string("ABCDEFGH"));
    QCOMPARE(normalizePairingCode("ABCD-EFGH"), std::string("ABCDEFGH"));
  }

  void malformedCodesAreRefused() {
    QVERIFY_THROWS_EXCEPTION(shoal::Error, normalizePairingCode("ABCD-EFG"));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, normalizePairingCode("ABCD-EFG0"));  // 0 is not used
  }

  void spake2ReproducesTheRfc9382KnownAnswers() {
    Spake2 a(Spake2::Role::A, hex(kRfcW), hex(kRfcX), bytes("server"), bytes("client"), "");
    Spake2 b(Spake2::Role::B, hex(kRfcW), hex(kRfcY), bytes("server"), bytes("client"), "");
    QCOMPARE(a.share(), hex(kRfcPA));
    QCOMPARE(b.share(), hex(kRfcPB));
    a.finish(b.share());
    b.finish(a.share());
    QCOMPARE(a.sharedKey(), hex(kRfcKe));
    QCOMPARE(b.sharedKey(), hex(kRfcKe));
    QCOMPARE(a.confirmation(), hex(kRfcCA));
    QCOMPARE(b.confirmation(), hex(kRfcCB));
    QVERIFY(a.verifyPeer(hex(kRfcCB)));
    QVERIFY(b.verifyPeer(hex(kRfcCA)));
  }

  void spake2SidesWithTheSameCodeConfirmEachOtherAndShareAKey() {
    Spake2 a(Spake2::Role::A, "ABCDEFGH", bytes("alice"), bytes("bob"), "aad");
    Spake2 b(Spake2::Role::B, "ABCDEFGH", bytes("alice"), bytes("bob"), "aad");
    a.finish(b.share());
    b.finish(a.share());
    QVERIFY(a.verifyPeer(b.confirmation()));
    QVERIFY(b.verifyPeer(a.confirmation()));
    QCOMPARE(a.sharedKey(), b.sharedKey());
    QVERIFY(a.confirmation() != b.confirmation());
  }

  void spake2SidesWithDifferentCodesFailConfirmation() {
    Spake2 a(Spake2::Role::A, "ABCDEFGH", bytes("alice"), bytes("bob"), "aad");
    Spake2 b(Spake2::Role::B, "ABCDEFGJ", bytes("alice"), bytes("bob"), "aad");
    a.finish(b.share());
    b.finish(a.share());
    QVERIFY(!a.verifyPeer(b.confirmation()));
    QVERIFY(!b.verifyPeer(a.confirmation()));
  }

  void spake2SidesThatSeeDifferentIdentitiesFailConfirmation() {
    Spake2 a(Spake2::Role::A, "ABCDEFGH", bytes("alice"), bytes("mallory"), "aad");
    Spake2 b(Spake2::Role::B, "ABCDEFGH", bytes("mallory"), bytes("bob"), "aad");
    a.finish(b.share());
    b.finish(a.share());
    QVERIFY(!a.verifyPeer(b.confirmation()));
    QVERIFY(!b.verifyPeer(a.confirmation()));
  }

  void spake2SharesAreFreshEachTime() {
    Spake2 a1(Spake2::Role::A, "ABCDEFGH", bytes("a"), bytes("b"), "");
    Spake2 a2(Spake2::Role::A, "ABCDEFGH", bytes("a"), bytes("b"), "");
    QVERIFY(a1.share() != a2.share());
    QCOMPARE(a1.share().size(), size_t{65});
  }

  void spake2RefusesAShareThatIsNotACurvePoint() {
    Spake2 a(Spake2::Role::A, "ABCDEFGH", bytes("a"), bytes("b"), "");
    std::vector<uint8_t> bad(65, 0);
    bad[0] = 4;
    bad[64] = 1;
    QVERIFY_THROWS_EXCEPTION(shoal::Error, a.finish(bad));
    QVERIFY_THROWS_EXCEPTION(shoal::Error, a.finish(std::vector<uint8_t>{0}));
  }

  void theRightCodePairsAndBothTrustStoresPersistThePeer() {
    QTemporaryDir serverDir, clientDir;
    Node server, client;
    server.trust.load(dirOf(serverDir));
    client.trust.load(dirOf(clientDir));
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    listener.setLocalName("server-node");
    const std::string code = generatePairingCode();
    listener.setPairingCode(code, 60s);
    const std::string peer = pairWith("127.0.0.1", listener.port(), client.identity, client.trust,
                                      code, "client-node", 10s);
    QCOMPARE(peer, server.identity.deviceId);

    TrustStore serverAgain, clientAgain;
    serverAgain.load(dirOf(serverDir));
    clientAgain.load(dirOf(clientDir));
    QCOMPARE(serverAgain.nameOf(client.identity.deviceId).value_or(""), std::string("client-node"));
    QCOMPARE(clientAgain.nameOf(server.identity.deviceId).value_or(""), std::string("server-node"));
    QVERIFY(!listener.pairingCodeActive());  // single use

    // And now they simply connect.
    auto conn = connectTo("127.0.0.1", listener.port(), client.identity, client.trust, 10s);
    QVERIFY(conn->isOpen());
    QVERIFY(inbox.take());
  }

  void aWrongCodeFailsAndTrustsNobody() {
    Node server, client;
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    const std::string code = generatePairingCode();
    listener.setPairingCode(code, 60s);
    const auto err = pairError(listener.port(), client, otherCode(code));
    QVERIFY(err.has_value());
    QCOMPARE(err->kind(), TransportError::Kind::Auth);
    QVERIFY2(std::string(err->what()).find("wrong code") != std::string::npos, err->what());
    QVERIFY(client.trust.list().empty());
    QVERIFY(server.trust.list().empty());
    QVERIFY(listener.pairingCodeActive());  // one failure does not burn it
    QCOMPARE(inbox.count(), 0);
  }

  void theCodeBurnsAfterTheGlobalFailureLimit() {
    // kPairingMaxFailures wrong attempts, each from another address (so no back-off slows them):
    // the code is gone, for the right code too.
    Node server, client;
    const Identity guesser = createIdentity();
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    const std::string code = generatePairingCode();
    listener.setPairingCode(code, 600s);
    for (int i = 0; i < kPairingMaxFailures; ++i) {
      const std::string from =
          "127.1." + std::to_string(i / 200) + "." + std::to_string(i % 200 + 1);
      const auto reply = wrongPairingAttempt(listener.port(), guesser, from);
      QVERIFY(reply.has_value());
      QCOMPARE(reply->control.value("op", ""), std::string(ops::kPairReply));
    }
    QVERIFY(!listener.pairingCodeActive());
    const auto err = pairError(listener.port(), client, code);  // even the right code now fails
    QVERIFY(err.has_value());
    QCOMPARE(err->kind(), TransportError::Kind::Auth);
    QVERIFY(client.trust.list().empty());
    QVERIFY(server.trust.list().empty());
  }

  void oneAddressFailingRepeatedlyCannotBurnTheCodeForAnother() {
    Node server, client;
    const Identity guesser = createIdentity();
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    const std::string code = generatePairingCode();
    listener.setPairingCode(code, 60s);
    // Far more than the 5 attempts that used to burn a code, as fast as the guesser can.
    for (int i = 0; i < 40; ++i) wrongPairingAttempt(listener.port(), guesser, "127.0.0.2");
    QVERIFY(listener.pairingCodeActive());
    const auto err = pairError(listener.port(), client, code);
    QVERIFY2(!err.has_value(), err ? err->what() : "");
    QVERIFY(client.trust.isTrusted(server.identity.deviceId));
  }

  void anAddressThatJustFailedMustWaitBeforeItsNextAttempt() {
    Node server;
    const Identity guesser = createIdentity();
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    listener.setPairingCode(generatePairingCode(), 60s);
    const auto first = wrongPairingAttempt(listener.port(), guesser, "127.0.0.2");
    QVERIFY(first.has_value());
    QCOMPARE(first->control.value("op", ""), std::string(ops::kPairReply));
    const auto second = wrongPairingAttempt(listener.port(), guesser, "127.0.0.2");
    QVERIFY(second.has_value());
    QCOMPARE(second->control.value("op", ""), std::string(ops::kRefused));
    const std::string why = second->control.value("message", "");
    QVERIFY2(why.find("try again in") != std::string::npos, why.c_str());
    // Another address is not held back by it.
    const auto other = wrongPairingAttempt(listener.port(), guesser, "127.0.0.3");
    QVERIFY(other.has_value());
    QCOMPARE(other->control.value("op", ""), std::string(ops::kPairReply));
  }

  void withoutAnActiveCodePairingFailsExactlyAsAWrongCodeDoes() {
    // An unpaired host must not learn whether a code is shown: no code and a wrong code give the
    // same exchange and the same error (but for the address it names).
    Node server, otherServer, client;
    Inbox inbox;
    Listener withCode("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    Listener withoutCode("127.0.0.1", 0, otherServer.identity, otherServer.trust, inbox.callback());
    const std::string code = generatePairingCode();
    withCode.setPairingCode(code, 60s);
    const auto wrong = pairError(withCode.port(), client, otherCode(code));
    const auto none = pairError(withoutCode.port(), client, code);
    QVERIFY(wrong.has_value() && none.has_value());
    QCOMPARE(wrong->kind(), TransportError::Kind::Auth);
    QCOMPARE(none->kind(), TransportError::Kind::Auth);
    auto withoutAddress = [](const TransportError& e, uint16_t port) {
      std::string text = e.what();
      const std::string where = "127.0.0.1:" + std::to_string(port);
      const size_t at = text.find(where);
      if (at != std::string::npos) text.replace(at, where.size(), "ADDRESS");
      return text;
    };
    QCOMPARE(withoutAddress(*none, withoutCode.port()), withoutAddress(*wrong, withCode.port()));
    QVERIFY(client.trust.list().empty());
    QVERIFY(otherServer.trust.list().empty());
  }

  void anExpiredCodeIsRefused() {
    Node server, client;
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    const std::string code = generatePairingCode();
    listener.setPairingCode(code, 0s);
    const auto err = pairError(listener.port(), client, code);
    QVERIFY(err.has_value());
    QCOMPARE(err->kind(), TransportError::Kind::Auth);
    QVERIFY(server.trust.list().empty());
  }

  void aClientWhoseTlsCertIsNotTheOneBoundInPairingFails() {
    // What a man in the middle produces: the TLS peer the server sees (identity) is not the
    // certificate the code's owner bound into the exchange (bound).
    Node server, client;
    const Identity bound = createIdentity();
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    const std::string code = generatePairingCode();
    listener.setPairingCode(code, 60s);
    try {
      detail::pairWithBinding("127.0.0.1", listener.port(), client.identity, bound.certPem,
                              client.trust, code, "client", 10s);
      QFAIL("pairing succeeded across a certificate mismatch");
    } catch (const TransportError& e) {
      QCOMPARE(e.kind(), TransportError::Kind::Auth);
    }
    QVERIFY(client.trust.list().empty());
    QVERIFY(server.trust.list().empty());
  }

  void aPairedButUnrelatedDeviceIsStillRefusedANormalConnection() {
    // Pairing trusts exactly the device that paired, not whoever connects next.
    Node server, client, stranger;
    Inbox inbox;
    Listener listener("127.0.0.1", 0, server.identity, server.trust, inbox.callback());
    const std::string code = generatePairingCode();
    listener.setPairingCode(code, 60s);
    pairWith("127.0.0.1", listener.port(), client.identity, client.trust, code, "client", 10s);
    stranger.trust.add(server.identity.deviceId, "server");
    try {
      connectTo("127.0.0.1", listener.port(), stranger.identity, stranger.trust, 10s);
      QFAIL("a stranger got in");
    } catch (const TransportError& e) {
      QCOMPARE(e.kind(), TransportError::Kind::Auth);
    }
  }
};

QTEST_APPLESS_MAIN(TestPairing)
#include "test_pairing.moc"
