// NetnsHosts (the C++ face of netns.sh): hosts reach each other, start() runs a program inside a
// host, and the destructor removes every namespace. Skips without root / ip netns.

#include <QProcess>
#include <QtTest>

#include "tests/integration/netns/netns_hosts.h"

using shoal::test::NetnsHosts;

namespace {

// netns.sh's netns_ping (iputils ping, else a raw-socket Python helper) from host `from`.
bool ping(const NetnsHosts& lan, int from, const QString& address) {
  QProcess p;
  p.setProcessChannelMode(QProcess::ForwardedChannels);
  p.start(
      QStringLiteral("bash"),
      {"-c", "source \"$0\" && NETNS_PREFIX=\"$1\" && netns_ping \"$2\" \"$3\"",
       QStringLiteral(SHOAL_NETNS_SCRIPT), lan.prefix(), QStringLiteral("h%1").arg(from), address});
  return p.waitForFinished(20000) && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
}

QStringList namespacesWithPrefix(const QString& prefix) {
  QProcess p;
  p.start(QStringLiteral("ip"), {"netns", "list"});
  p.waitForFinished(10000);
  QStringList found;
  for (const QString& line : QString::fromUtf8(p.readAllStandardOutput()).split('\n')) {
    if (line.startsWith(prefix + '-')) found << line.section(' ', 0, 0);
  }
  return found;
}

}  // namespace

class TestNetnsHosts : public QObject {
  Q_OBJECT

 private slots:
  void init() {
    if (const QString why = NetnsHosts::unavailableReason(); !why.isEmpty()) QSKIP(qPrintable(why));
  }

  void hostsHaveDistinctAddressesOnOneSubnet() {
    NetnsHosts lan(3);
    QCOMPARE(lan.count(), 3);
    QCOMPARE(lan.ipv4(1), QStringLiteral("10.77.1.1"));
    QCOMPARE(lan.ipv4(3), QStringLiteral("10.77.1.3"));
    QVERIFY(lan.linkLocalIpv6(1).startsWith("fe80:"));
    QVERIFY(lan.linkLocalIpv6(1) != lan.linkLocalIpv6(2));
  }

  void hostsPingEachOtherOverIpv4AndIpv6LinkLocal() {
    NetnsHosts lan(2);
    QVERIFY(ping(lan, 1, lan.ipv4(2)));
    QVERIFY(ping(lan, 2, lan.ipv4(1)));
    QVERIFY(ping(lan, 1, lan.linkLocalIpv6(2) + "%eth0"));
  }

  void hostsDoNotReachAnAddressOutsideTheSet() {
    NetnsHosts lan(2);
    QVERIFY(!ping(lan, 1, QStringLiteral("10.77.1.9")));
  }

  void addedLanConnectsOnlyItsHostsThroughASecondInterface() {
    NetnsHosts lan(3);
    QCOMPARE(lan.addLan({1, 3}), 1);
    QCOMPARE(lan.ipv4(1, 1), QStringLiteral("10.77.2.1"));
    QCOMPARE(lan.ipv4(3, 1), QStringLiteral("10.77.2.3"));
    QVERIFY(lan.ipv4(2, 1).isEmpty());
    QVERIFY(ping(lan, 1, lan.ipv4(3, 1)));
    QVERIFY(!ping(lan, 2, lan.ipv4(3, 1)));  // h2 has no eth1 and no route to 10.77.2.0/24
  }

  void runExecutesInsideTheHostNamespace() {
    NetnsHosts lan(2);
    QByteArray out;
    QCOMPARE(lan.run(2, "ip", {"-4", "-o", "addr", "show", "dev", "eth0"}, &out), 0);
    QVERIFY2(out.contains("10.77.1.2/24"), out.constData());
  }

  void startedProcessRunsUntilKilled() {
    NetnsHosts lan(1);
    QProcess* sleeper = lan.start(1, "sleep", {"60"});
    QCOMPARE(sleeper->state(), QProcess::Running);
    lan.kill(sleeper);
    QCOMPARE(sleeper->state(), QProcess::NotRunning);
  }

  void destructorRemovesNamespacesAndTheirProcesses() {
    QString prefix;
    {
      NetnsHosts lan(2);
      prefix = lan.prefix();
      lan.start(1, "sleep", {"60"});
      QCOMPARE(namespacesWithPrefix(prefix).size(), 3);  // bridge + 2 hosts
    }
    QVERIFY(namespacesWithPrefix(prefix).isEmpty());
  }
};

QTEST_GUILESS_MAIN(TestNetnsHosts)
#include "test_netns_hosts.moc"
