// The node's trust and state files against the real binaries: `shoal-cli pool forget` on a
// running shoal-node's config dir closes the forgotten coordinator's live session at once and
// refuses its next connection, while another coordinator keeps its session; an empty
// trusted.json or a half-written identity stops the node with one clear line and is left as it
// was; under systemd (stdout is the journal) the pairing code goes to a private file, not the log.

#include <sys/stat.h>

#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>
#include <filesystem>
#include <fstream>

#include "lan/transport/connect.h"
#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"
#include "tests/integration/lan_node/node_test_support.h"

using namespace shoal;
using namespace shoal::lan;

namespace {

// Bounded waits (never asserted as timings): a node start, a CLI run, a session's end.
constexpr int kStartMs = 60000;
constexpr int kRunMs = 60000;
constexpr auto kSessionEnd = std::chrono::seconds(20);
constexpr auto kConnect = std::chrono::seconds(30);

struct Run {
  int exitCode = -1;
  QString out;
  QString err;
};

Run run(const QString& program, const QStringList& args,
        const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  QProcess p;
  p.setProcessEnvironment(env);
  p.start(program, args);
  Run r;
  if (!p.waitForFinished(kRunMs)) {
    p.kill();
    p.waitForFinished();
    return r;
  }
  r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

QString qs(const std::filesystem::path& p) { return QString::fromStdString(p.string()); }

// One shoal-node on loopback without discovery, trusting `trust`; SIGTERM at the end.
class Node {
 public:
  Node(const std::filesystem::path& configDir, const QStringList& trust) {
    QStringList args{"--config-dir", qs(configDir),    "--port",    "0", "--bind",
                     "127.0.0.1",    "--no-discovery", "--threads", "1"};
    for (const QString& id : trust) args << "--trust" << id;
    m_process.setProcessChannelMode(QProcess::ForwardedErrorChannel);
    m_process.start(SHOAL_NODE_EXE, args);
    static const QRegularExpression line("device (\\S+) port (\\d+)");
    QString out;
    while (m_process.waitForReadyRead(kStartMs)) {
      out += QString::fromUtf8(m_process.readAllStandardOutput());
      const auto m = line.match(out);
      if (m.hasMatch()) {
        m_port = static_cast<uint16_t>(m.captured(2).toUInt());
        return;
      }
    }
  }
  ~Node() {
    m_process.terminate();
    if (!m_process.waitForFinished(30000)) m_process.kill();
  }
  uint16_t port() const { return m_port; }

 private:
  QProcess m_process;
  uint16_t m_port = 0;
};

bool answersPing(Connection& c) {
  try {
    return test::rawCall(c, {{"op", "ping"}, {"t", 1}}).control.value("op", "") == "pong";
  } catch (const std::exception&) {
    return false;
  }
}

// Whether the node ended the session: a receive on it ends with Closed within kSessionEnd
// (the node sends nothing unasked, so any other ending means it is still open).
bool sessionEnds(Connection& c) {
  try {
    c.receive(std::chrono::duration_cast<std::chrono::milliseconds>(kSessionEnd));
  } catch (const TransportError& e) {
    return e.kind() == TransportError::Kind::Closed;
  }
  return false;
}

}  // namespace

class TestNodeTrustFiles : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;

  std::filesystem::path dir(const QString& name) {
    const std::filesystem::path d = m_dir.filePath(name).toStdString();
    std::filesystem::create_directories(d);
    return d;
  }

 private slots:
  void forgettingACoordinatorClosesItsLiveSessionAndRefusesItAfterwards() {
    const auto cfg = dir("forget");
    const Identity revoked = createIdentity(), kept = createIdentity();
    const QString nodeId =
        run(SHOAL_NODE_EXE, {"--print-device-id", "--config-dir", qs(cfg)}).out.trimmed();
    QVERIFY(!nodeId.isEmpty());
    TrustStore mine;  // the coordinators trust the node (in memory)
    mine.add(nodeId.toStdString(), "node");
    Node node(cfg,
              {QString::fromStdString(revoked.deviceId), QString::fromStdString(kept.deviceId)});
    QVERIFY(node.port() != 0);
    auto doomed = connectTo("127.0.0.1", node.port(), revoked, mine, kConnect);
    auto other = connectTo("127.0.0.1", node.port(), kept, mine, kConnect);
    QVERIFY(answersPing(*doomed));

    const Run forget =
        run(SHOAL_CLI_EXE, {"pool", "forget", QString::fromStdString(revoked.deviceId).toLower(),
                            "--config-dir", qs(cfg)});
    QVERIFY2(forget.exitCode == 0, qPrintable(forget.err));
    QVERIFY(forget.out.contains("Forgot"));

    QVERIFY(sessionEnds(*doomed));
    try {
      connectTo("127.0.0.1", node.port(), revoked, mine, kConnect);
      QFAIL("a forgotten coordinator was given a new session");
    } catch (const TransportError& e) {
      QCOMPARE(e.kind(), TransportError::Kind::Auth);
    }
    QVERIFY(answersPing(*other));  // the revocation is of one device only
  }

  void forgettingAnUntrustedDeviceSaysSoAndExitsOne() {
    const auto cfg = dir("forget-unknown");
    const Run r =
        run(SHOAL_CLI_EXE, {"pool", "forget", QString::fromStdString(createIdentity().deviceId),
                            "--config-dir", qs(cfg)});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains("is not trusted"), qPrintable(r.err));
  }

  void aNodeWithAnEmptyTrustFileStopsWithOneClearLineAndKeepsTheFile() {
    const auto cfg = dir("empty-trust");
    std::ofstream(cfg / "trusted.json").flush();
    const Run r = run(SHOAL_NODE_EXE, {"--config-dir", qs(cfg), "--port", "0", "--bind",
                                       "127.0.0.1", "--no-discovery", "--threads", "1"});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains(qs(cfg / "trusted.json") + " is empty"), qPrintable(r.err));
    QCOMPARE(std::filesystem::file_size(cfg / "trusted.json"), uintmax_t{0});
  }

  void forgetOnACorruptTrustFileFailsAndLeavesIt() {
    const auto cfg = dir("corrupt-trust");
    const std::string garbage = "{\"devices\": [";
    std::ofstream(cfg / "trusted.json") << garbage;
    const Run r =
        run(SHOAL_CLI_EXE, {"pool", "forget", QString::fromStdString(createIdentity().deviceId),
                            "--config-dir", qs(cfg)});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("not valid JSON"), qPrintable(r.err));
    QCOMPARE(std::filesystem::file_size(cfg / "trusted.json"), uintmax_t{garbage.size()});
  }

  void aHalfWrittenIdentityStopsTheNodeWithOneClearLine() {
    const auto cfg = dir("half-identity");
    std::filesystem::create_directories(cfg / "identity");
    std::ofstream(cfg / "identity" / "key.pem") << createIdentity().keyPem;
    const Run r = run(SHOAL_NODE_EXE, {"--print-device-id", "--config-dir", qs(cfg)});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains(qs(cfg / "identity" / "cert.pem") + " does not"), qPrintable(r.err));
    QCOMPARE(r.err.trimmed().count('\n'), 0);
    QVERIFY(!std::filesystem::exists(cfg / "identity" / "cert.pem"));
  }

  void aNewNodesStateIsPrivate() {
    const auto cfg = m_dir.filePath("fresh/config").toStdString();  // created by the node
    QCOMPARE(run(SHOAL_NODE_EXE, {"--print-device-id", "--config-dir", qs(cfg)}).exitCode, 0);
    struct stat st {};
    QCOMPARE(::stat(cfg.c_str(), &st), 0);
    QCOMPARE(st.st_mode & 0777, 0700u);
    QCOMPARE(::stat((cfg + "/identity").c_str(), &st), 0);
    QCOMPARE(st.st_mode & 0777, 0700u);
    QCOMPARE(::stat((cfg + "/identity/key.pem").c_str(), &st), 0);
    QCOMPARE(st.st_mode & 0777, 0600u);
  }

  void underSystemdThePairingCodeGoesToAPrivateFileNotTheLog() {
    const auto cfg = dir("journal");
    // What systemd does: JOURNAL_STREAM names the stream stdout and stderr are connected to
    // (here the pipe QProcess gives the shell, which the node inherits; /proc/$$: inside $(...)
    // fd 1 is the substitution's own pipe).
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start("/bin/sh", {"-c", "JOURNAL_STREAM=$(stat -L -c %d:%i /proc/$$/fd/1) exec \"$0\" \"$@\"",
                        SHOAL_NODE_EXE, "--config-dir", qs(cfg), "--port", "0", "--bind",
                        "127.0.0.1", "--no-discovery", "--threads", "1", "--pair"});
    QString out;
    static const QRegularExpression named("pairing code in (\\S+)");
    while (!named.match(out).hasMatch() && p.waitForReadyRead(kStartMs))
      out += QString::fromUtf8(p.readAll());
    const auto file = cfg / "pairing-code";
    QVERIFY2(named.match(out).hasMatch(), qPrintable(out));
    QCOMPARE(named.match(out).captured(1), qs(file));
    std::string code;
    std::ifstream(file) >> code;
    QVERIFY(
        QRegularExpression("^[A-Z0-9]+-[A-Z0-9]+$").match(QString::fromStdString(code)).hasMatch());
    struct stat st {};
    QCOMPARE(::stat(file.c_str(), &st), 0);
    QCOMPARE(st.st_mode & 0777, 0600u);
    p.terminate();
    QVERIFY(p.waitForFinished(30000));
    out += QString::fromUtf8(p.readAll());
    QVERIFY2(!out.contains(QString::fromStdString(code)), qPrintable(out));  // nowhere in the log
    QVERIFY(!std::filesystem::exists(file));                                 // removed at exit
  }
};

QTEST_GUILESS_MAIN(TestNodeTrustFiles)
#include "test_node_trust_files.moc"
