#pragma once
// NetnsHosts: a throwaway LAN of N hosts (Linux network namespaces joined by a bridge) for QtTest
// integration tests — the C++ face of netns.sh (see README.md). Needs root; tests QSKIP with
// unavailableReason() otherwise:
//
//   if (const QString why = NetnsHosts::unavailableReason(); !why.isEmpty())
//     QSKIP(qPrintable(why));
//   NetnsHosts lan(3);                                   // h1..h3 = 10.77.1.1 .. 10.77.1.3
//   QProcess* node = lan.start(2, nodePath, {"--port", "7000"});
//   QCOMPARE(lan.run(1, "curl", {"-s", lan.ipv4(2) + ":7000"}), 0);
//
// Not thread-safe: use one NetnsHosts from the test's thread. Hosts are numbered from 1.

#include <QByteArray>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <map>
#include <memory>
#include <vector>

namespace shoal::test {

class NetnsHosts {
 public:
  // Empty when namespaces can be created here; otherwise the reason (not root, no `ip`, ...).
  static QString unavailableReason();

  // Creates `count` hosts (1..250). Throws std::runtime_error with netns.sh's message on failure
  // (after removing whatever was built). Also removes leftovers of crashed earlier runs.
  explicit NetnsHosts(int count);
  // Kills the processes started here (and anything else left in the namespaces), then deletes
  // the namespaces.
  ~NetnsHosts();
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  int count() const { return static_cast<int>(m_hosts.size()); }
  // Name prefix shared by this set's namespaces ("shoalns<pid>-<k>").
  const QString& prefix() const { return m_prefix; }
  // Namespace of host i, for `ip netns exec`.
  QString namespaceName(int host) const;
  // IPv4 address of host i on the shared subnet (10.77.1.i).
  QString ipv4(int host) const;
  // Adds LAN k = 1, 2, ... (its own bridge) and an interface eth<k> with 10.77.(k+1).i on each
  // listed host: multi-homed hosts. Returns k. Throws std::runtime_error on failure.
  int addLan(const std::vector<int>& hosts);
  // IPv4 address of host i on LAN k (0 = the first, eth0); empty if the host is not on it.
  QString ipv4(int host, int lan) const;

  // IPv6 link-local address of host i's eth0 without zone ("fe80::..."); empty if none.
  QString linkLocalIpv6(int host) const;
  // The interface name every host has on the LAN.
  static QString interfaceName() { return QStringLiteral("eth0"); }

  // argv that runs program inside host i: {"ip","netns","exec",ns,program,args...}. For callers
  // that manage their own QProcess.
  QStringList command(int host, const QString& program, const QStringList& args) const;

  // Starts program inside host i and returns its process (owned by this object, alive until
  // the destructor or kill()). stdout and stderr are separate channels; read them as the
  // process runs. Throws std::runtime_error if it cannot start.
  QProcess* start(int host, const QString& program, const QStringList& args);
  // SIGKILLs a process returned by start() and waits for it.
  void kill(QProcess* process);

  // Runs program inside host i to completion (or timeoutMs, then kills it and returns -1).
  // Returns the exit code; stdout+stderr go to *output when given.
  int run(int host, const QString& program, const QStringList& args, QByteArray* output = nullptr,
          int timeoutMs = 30000) const;

 private:
  struct Host {
    QString namespaceName;
    QString ipv4;
  };
  const Host& host(int i) const;

  QString m_prefix;
  std::vector<Host> m_hosts;
  std::map<std::pair<int, int>, QString> m_lanAddresses;  // (host, lan >= 1) -> IPv4
  int m_lans = 1;
  std::vector<std::unique_ptr<QProcess>> m_processes;
};

}  // namespace shoal::test
