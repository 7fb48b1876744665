#include "tests/integration/netns/netns_hosts.h"

#include <QCoreApplication>
#include <stdexcept>
#include <string>

namespace shoal::test {

namespace {

// The script next to this file; the path is baked in at build time (see CMakeLists.txt).
QString scriptPath() { return QStringLiteral(SHOAL_NETNS_SCRIPT); }

struct ScriptResult {
  int exitCode = -1;
  QByteArray output;  // stdout
  QByteArray errors;  // stderr
};

ScriptResult runScript(const QStringList& args, int timeoutMs = 60000) {
  QProcess p;
  p.start(QStringLiteral("bash"), QStringList{scriptPath()} + args);
  ScriptResult r;
  if (!p.waitForStarted(timeoutMs)) {
    r.errors = "cannot start bash " + scriptPath().toUtf8();
    return r;
  }
  if (!p.waitForFinished(timeoutMs)) {
    p.kill();
    p.waitForFinished();
    r.errors = "netns.sh " + args.join(' ').toUtf8() + " timed out";
    return r;
  }
  r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.output = p.readAllStandardOutput();
  r.errors = p.readAllStandardError().trimmed();
  return r;
}

}  // namespace

QString NetnsHosts::unavailableReason() {
  const ScriptResult r = runScript({QStringLiteral("check")});
  if (r.exitCode == 0) return {};
  const QString why = QString::fromUtf8(r.errors);
  return QStringLiteral("network namespaces unavailable: ") +
         (why.isEmpty() ? QStringLiteral("netns.sh check exited %1").arg(r.exitCode) : why);
}

NetnsHosts::NetnsHosts(int count) {
  if (count < 1 || count > 250) {
    throw std::runtime_error("NetnsHosts: host count " + std::to_string(count) +
                             " outside 1..250 (one /24 subnet)");
  }
  // Several sets may exist in one test process, one after another or at once.
  static int sequence = 0;
  m_prefix = QStringLiteral("shoalns%1-%2").arg(QCoreApplication::applicationPid()).arg(++sequence);
  const ScriptResult r =
      runScript({QStringLiteral("create"), m_prefix, QString::number(count)}, 120000);
  if (r.exitCode != 0) {
    runScript({QStringLiteral("destroy"), m_prefix});
    throw std::runtime_error("NetnsHosts: netns.sh create " + m_prefix.toStdString() + " " +
                             std::to_string(count) + " failed (exit " + std::to_string(r.exitCode) +
                             "): " + r.errors.toStdString());
  }
  // One line per host: "h<i> <namespace> <ipv4>".
  for (const QByteArray& line : r.output.split('\n')) {
    const QList<QByteArray> fields = line.simplified().split(' ');
    if (fields.size() == 3) {
      m_hosts.push_back({QString::fromUtf8(fields[1]), QString::fromUtf8(fields[2])});
    }
  }
  if (static_cast<int>(m_hosts.size()) != count) {
    runScript({QStringLiteral("destroy"), m_prefix});
    throw std::runtime_error("NetnsHosts: netns.sh create listed " +
                             std::to_string(m_hosts.size()) + " hosts, expected " +
                             std::to_string(count));
  }
}

NetnsHosts::~NetnsHosts() {
  for (const auto& p : m_processes) {
    if (p->state() != QProcess::NotRunning) {
      p->kill();
      p->waitForFinished(5000);
    }
  }
  m_processes.clear();
  runScript({QStringLiteral("destroy"), m_prefix});
}

const NetnsHosts::Host& NetnsHosts::host(int i) const {
  if (i < 1 || i > count()) {
    throw std::runtime_error("NetnsHosts: host " + std::to_string(i) + " outside 1.." +
                             std::to_string(count()));
  }
  return m_hosts[static_cast<size_t>(i - 1)];
}

QString NetnsHosts::namespaceName(int i) const { return host(i).namespaceName; }

QString NetnsHosts::ipv4(int i) const { return host(i).ipv4; }

int NetnsHosts::addLan(const std::vector<int>& hosts) {
  QStringList args{QStringLiteral("add-lan"), m_prefix, QString::number(m_lans)};
  for (int i : hosts) {
    host(i);  // throws when i is not a host of this set
    args << QString::number(i);
  }
  const ScriptResult r = runScript(args);
  if (r.exitCode != 0) {
    throw std::runtime_error("NetnsHosts: netns.sh " + args.join(' ').toStdString() +
                             " failed (exit " + std::to_string(r.exitCode) +
                             "): " + r.errors.toStdString());
  }
  // One line per host: "h<i> eth<k> <ipv4>".
  for (const QByteArray& line : r.output.split('\n')) {
    const QList<QByteArray> fields = line.simplified().split(' ');
    if (fields.size() == 3) {
      m_lanAddresses[{fields[0].mid(1).toInt(), m_lans}] = QString::fromUtf8(fields[2]);
    }
  }
  return m_lans++;
}

QString NetnsHosts::ipv4(int i, int lan) const {
  if (lan == 0) return ipv4(i);
  const auto it = m_lanAddresses.find({i, lan});
  return it == m_lanAddresses.end() ? QString() : it->second;
}

QString NetnsHosts::linkLocalIpv6(int i) const {
  QByteArray out;
  if (run(i, QStringLiteral("ip"),
          {"-6", "-o", "addr", "show", "dev", interfaceName(), "scope", "link"}, &out,
          10000) != 0) {
    return {};
  }
  // "2: eth0    inet6 fe80::1/64 scope link ..." -> fe80::1
  const QList<QByteArray> fields = out.simplified().split(' ');
  for (qsizetype k = 0; k + 1 < fields.size(); ++k) {
    if (fields[k] == "inet6") return QString::fromUtf8(fields[k + 1].split('/').first());
  }
  return {};
}

QStringList NetnsHosts::command(int i, const QString& program, const QStringList& args) const {
  // env -u: the suite confines discovery to lo outside namespaces (SHOAL_DISCOVERY_INTERFACES);
  // inside one, the host's own LAN is the point.
  return QStringList{QStringLiteral("ip"),
                     QStringLiteral("netns"),
                     QStringLiteral("exec"),
                     namespaceName(i),
                     QStringLiteral("env"),
                     QStringLiteral("-u"),
                     QStringLiteral("SHOAL_DISCOVERY_INTERFACES"),
                     program} +
         args;
}

QProcess* NetnsHosts::start(int i, const QString& program, const QStringList& args) {
  QStringList argv = command(i, program, args);
  auto p = std::make_unique<QProcess>();
  p->start(argv.takeFirst(), argv);
  if (!p->waitForStarted(10000)) {
    throw std::runtime_error("NetnsHosts: cannot start " + program.toStdString() + " in host " +
                             std::to_string(i) + ": " + p->errorString().toStdString());
  }
  m_processes.push_back(std::move(p));
  return m_processes.back().get();
}

void NetnsHosts::kill(QProcess* process) {
  if (process != nullptr && process->state() != QProcess::NotRunning) {
    process->kill();
    process->waitForFinished(5000);
  }
}

int NetnsHosts::run(int i, const QString& program, const QStringList& args, QByteArray* output,
                    int timeoutMs) const {
  QStringList argv = command(i, program, args);
  QProcess p;
  p.setProcessChannelMode(QProcess::MergedChannels);
  p.start(argv.takeFirst(), argv);
  if (!p.waitForStarted(timeoutMs)) return -1;
  if (!p.waitForFinished(timeoutMs)) {
    p.kill();
    p.waitForFinished();
    return -1;
  }
  if (output != nullptr) *output = p.readAll();
  return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
}

}  // namespace shoal::test
