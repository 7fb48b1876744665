// Node addresses as text: what splitHostPort accepts (names, IPv4, bracketed IPv6 with or without
// a zone), what it refuses with a shoal::Error naming the text, and that joinHostPort writes an
// address back so that it parses to the same host and port.

#include <QtTest>

#include "engine/error.h"
#include "lan/transport/host_port.h"

using namespace shoal::lan;

namespace {

// The message of the shoal::Error splitHostPort throws, or "" when it accepts the text.
QString refusal(const char* text) {
  try {
    splitHostPort(text);
  } catch (const shoal::Error& e) {
    return QString::fromStdString(e.what());
  }
  return {};
}

}  // namespace

class TestHostPort : public QObject {
  Q_OBJECT

 private slots:
  void acceptsNamesAndAddresses_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("host");
    QTest::addColumn<int>("port");
    QTest::newRow("name") << "node-a.local:7070"
                          << "node-a.local" << 7070;
    QTest::newRow("ipv4") << "192.0.2.7:1"
                          << "192.0.2.7" << 1;
    QTest::newRow("highest port") << "localhost:65535"
                                  << "localhost" << 65535;
    QTest::newRow("leading zeros") << "h:0080"
                                   << "h" << 80;
    QTest::newRow("ipv6") << "[2001:db8::1]:443"
                          << "2001:db8::1" << 443;
    QTest::newRow("loopback v6") << "[::1]:9"
                                 << "::1" << 9;
    QTest::newRow("zone") << "[fe80::1%eth0]:7070"
                          << "fe80::1%eth0" << 7070;
  }
  void acceptsNamesAndAddresses() {
    QFETCH(QString, text);
    QFETCH(QString, host);
    QFETCH(int, port);
    const HostPort hp = splitHostPort(text.toStdString());
    QCOMPARE(QString::fromStdString(hp.host), host);
    QCOMPARE(int(hp.port), port);
  }

  void refusesWhatIsNoAddress_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("why");
    QTest::newRow("empty") << ""
                           << "no port";
    QTest::newRow("no colon") << "node-a"
                              << "no port";
    QTest::newRow("empty port") << "node-a:"
                                << "no port";
    QTest::newRow("empty host") << ":7070"
                                << "no host";
    QTest::newRow("empty brackets") << "[]:7070"
                                    << "no host";
    QTest::newRow("port zero") << "h:0"
                               << "bad port";
    QTest::newRow("port too big") << "h:65536"
                                  << "bad port";
    QTest::newRow("port overflows") << "h:99999999999999999999"
                                    << "bad port";
    QTest::newRow("signed port") << "h:+80"
                                 << "bad port";
    QTest::newRow("negative port") << "h:-1"
                                   << "bad port";
    QTest::newRow("hex port") << "h:0x50"
                              << "bad port";
    QTest::newRow("text after port") << "h:80x"
                                     << "bad port";
    QTest::newRow("bare ipv6") << "::1:7070"
                               << "brackets";
    QTest::newRow("bare ipv6 no port") << "2001:db8::1"
                                       << "brackets";
    QTest::newRow("unclosed bracket") << "[::1:7070"
                                      << "without ']'";
    QTest::newRow("no port after bracket") << "[::1]"
                                           << "no port";
    QTest::newRow("text after bracket") << "[::1]x:7070"
                                        << "between ']' and ':'";
    QTest::newRow("bracketed name") << "[localhost]:7070"
                                    << "no IPv6";
    QTest::newRow("stray close") << "host]:7070"
                                 << "stray bracket";
    QTest::newRow("stray open") << "ho[st:7070"
                                << "stray bracket";
    QTest::newRow("double open") << "[[::1]:7070"
                                 << "stray bracket";
    QTest::newRow("space") << "node a:7070"
                           << "whitespace";
    QTest::newRow("leading space") << " node-a:7070"
                                   << "whitespace";
    QTest::newRow("space in port") << "node-a: 7070"
                                   << "whitespace";
  }
  void refusesWhatIsNoAddress() {
    QFETCH(QString, text);
    QFETCH(QString, why);
    const QString message = refusal(text.toUtf8().constData());
    QVERIFY2(!message.isEmpty(), qPrintable("accepted: " + text));
    QVERIFY2(message.contains("'" + text + "'"), qPrintable(message));  // names the text
    QVERIFY2(message.contains(why), qPrintable(message));
  }

  void joinWritesWhatSplitReads_data() {
    QTest::addColumn<QString>("host");
    QTest::addColumn<int>("port");
    QTest::addColumn<QString>("text");
    QTest::newRow("name") << "node-a" << 7070 << "node-a:7070";
    QTest::newRow("ipv4") << "127.0.0.1" << 1 << "127.0.0.1:1";
    QTest::newRow("ipv6") << "2001:db8::1" << 65535 << "[2001:db8::1]:65535";
    QTest::newRow("zone") << "fe80::1%eth0" << 80 << "[fe80::1%eth0]:80";
  }
  void joinWritesWhatSplitReads() {
    QFETCH(QString, host);
    QFETCH(int, port);
    QFETCH(QString, text);
    const std::string joined = joinHostPort(host.toStdString(), static_cast<uint16_t>(port));
    QCOMPARE(QString::fromStdString(joined), text);
    const HostPort back = splitHostPort(joined);
    QCOMPARE(back, (HostPort{host.toStdString(), static_cast<uint16_t>(port)}));
  }
};

QTEST_APPLESS_MAIN(TestHostPort)
#include "test_host_port.moc"
