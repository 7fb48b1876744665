// shoal-node on three hosts of a throwaway LAN (network namespaces joined by a bridge, veth
// links: tests/integration/netns), the coordinator on a fourth: weights stream over the LAN to
// nodes that lack the model, and greedy generation through 1, 2 and 3 remote stages gives the
// tokens one local stage gives (shoal-hop-overhead --verify runs as the coordinator). And a config
// dir copied to a second host: discovery reports the identity clash and the nodes move to new
// device IDs, keeping their trust stores. Skips without root.

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QThread>
#include <QtTest>
#include <filesystem>

#include "tests/integration/netns/netns_hosts.h"

using shoal::test::NetnsHosts;

namespace {

constexpr int kNodes = 3;
const QString kPort = QStringLiteral("7000");

std::filesystem::path defaultModel() {
  return std::filesystem::path(SHOAL_MODELS_DIR) / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

QString deviceIdOf(const std::filesystem::path& configDir) {
  QProcess p;
  p.start(SHOAL_NODE_EXE,
          {"--print-device-id", "--config-dir", QString::fromStdString(configDir.string())});
  p.waitForFinished(60000);
  return QString::fromUtf8(p.readAllStandardOutput()).trimmed();
}

}  // namespace

class TestNodeNetns : public QObject {
  Q_OBJECT

  std::filesystem::path m_dir;

 private slots:
  void initTestCase() {
    if (const QString why = NetnsHosts::unavailableReason(); !why.isEmpty()) {
      QSKIP(qPrintable(why));
    }
    if (!std::filesystem::exists(defaultModel())) QSKIP("default model not downloaded");
    m_dir = std::filesystem::temp_directory_path() /
            ("shoal-node-netns-" + std::to_string(QCoreApplication::applicationPid()));
    std::filesystem::remove_all(m_dir);
    std::filesystem::create_directories(m_dir);
  }
  void cleanupTestCase() {
    if (!m_dir.empty()) std::filesystem::remove_all(m_dir);
  }

  void pipelineAcrossThreeHostsGeneratesWhatOneStageGenerates() {
    NetnsHosts lan(kNodes + 1);
    const auto coordinatorDir = m_dir / "coordinator";
    const QString coordinatorId = deviceIdOf(coordinatorDir);
    QVERIFY(!coordinatorId.isEmpty());
    QStringList benchArgs = {"--model",        QString::fromStdString(defaultModel().string()),
                             "--identity-dir", QString::fromStdString(coordinatorDir.string()),
                             "--tokens",       "64",
                             "--repeats",      "1",
                             "--threads",      "1",
                             "--verify"};
    static const QRegularExpression startLine("device (\\S+) port (\\d+)");
    for (int h = 1; h <= kNodes; ++h) {
      const auto cfg = m_dir / ("node" + std::to_string(h));
      const QString id = deviceIdOf(cfg);
      // No models dir: every stage's weights stream over the bridge.
      // Pinned to the CPU shoal-hop-overhead computes on (its method: bench/hop_overhead).
      QStringList args = {"--config-dir",
                          QString::fromStdString(cfg.string()),
                          "--port",
                          kPort,
                          "--no-discovery",
                          "--threads",
                          "1",
                          "--name",
                          "h" + QString::number(h),
                          "--trust",
                          coordinatorId};
      const int cpus = QThread::idealThreadCount();
      if (cpus >= 2) args = QStringList{"-c", QString::number(cpus - 1), SHOAL_NODE_EXE} + args;
      QProcess* node = lan.start(h, cpus >= 2 ? "taskset" : SHOAL_NODE_EXE, args);
      QString out;
      while (!startLine.match(out).hasMatch() && node->waitForReadyRead(60000)) {
        out += QString::fromUtf8(node->readAllStandardOutput());
      }
      QVERIFY2(startLine.match(out).hasMatch(), qPrintable("node did not start: " + out));
      QCOMPARE(startLine.match(out).captured(1), id);
      benchArgs << "--connect" << lan.ipv4(h) + ":" + kPort << "--trust" << id;
    }
    QByteArray output;
    const int rc = lan.run(kNodes + 1, SHOAL_HOP_OVERHEAD_EXE, benchArgs, &output, 600000);
    const int jsonStart = output.indexOf('{');
    const QJsonObject result =
        QJsonDocument::fromJson(jsonStart >= 0 ? output.mid(jsonStart) : QByteArray()).object();
    QVERIFY2(rc == 0, output.constData());
    QCOMPARE(result.value("transport").toString(), QString("connect"));
    const QJsonArray remote = result.value("remote").toArray();
    QCOMPARE(remote.size(), kNodes);
    for (const auto& r : remote) {
      QCOMPARE(r.toObject().value("load_source").toString(), QString("streamed"));
      QVERIFY(r.toObject().value("tokens_match_local").toBool());
    }
    qInfo("veth: local %.2f ms/token; 3 stages %.2f ms/token",
          result.value("local_ms_per_token").toDouble(),
          remote.last().toObject().value("ms_per_token").toDouble());
  }

  void copiedConfigDirOnTwoHostsEndsWithTwoDeviceIds() {
    NetnsHosts lan(2);
    const auto original = m_dir / "clash-original";
    const auto copy = m_dir / "clash-copy";
    const QString oldId = deviceIdOf(original);
    QVERIFY(!oldId.isEmpty());
    std::filesystem::copy(original, copy, std::filesystem::copy_options::recursive);
    // Someone both nodes trust: the trust store must survive the new identity.
    const QString coordinatorId = deviceIdOf(m_dir / "clash-coordinator");
    static const QRegularExpression startLine("device (\\S+) port (\\d+)");
    static const QRegularExpression clashLine("identity clash: .* new device ID (\\S+)");
    std::vector<QProcess*> nodes;
    int h = 1;
    for (const auto& cfg : {original, copy}) {
      // Discovery on (the default): each hears the other's beacons with its own ID.
      QProcess* node = lan.start(
          h, SHOAL_NODE_EXE,
          {"--config-dir", QString::fromStdString(cfg.string()), "--port", kPort, "--threads", "1",
           "--name", "h" + QString::number(h), "--trust", coordinatorId});
      QString out;
      while (!startLine.match(out).hasMatch() && node->waitForReadyRead(60000)) {
        out += QString::fromUtf8(node->readAllStandardOutput());
      }
      QCOMPARE(startLine.match(out).captured(1), oldId);
      nodes.push_back(node);
      ++h;
    }
    // Beacons go out every second; a node logs one line when it has moved. Usually only the
    // first to hear the other moves (the other then hears only the new ID); both may.
    std::vector<QString> logs(nodes.size());
    std::vector<QString> newIds(nodes.size());
    const auto readLogs = [&] {
      for (size_t i = 0; i < nodes.size(); ++i) {
        nodes[i]->waitForReadyRead(50);
        logs[i] += QString::fromUtf8(nodes[i]->readAllStandardError());
        if (const auto m = clashLine.match(logs[i]); m.hasMatch()) newIds[i] = m.captured(1);
      }
    };
    for (int attempt = 0; attempt < 300 && newIds[0].isEmpty() && newIds[1].isEmpty(); ++attempt) {
      readLogs();
    }
    QVERIFY2(!newIds[0].isEmpty() || !newIds[1].isEmpty(),
             qPrintable("no identity clash handled:\n" + logs[0] + "\n" + logs[1]));
    // A few more beacon intervals: the other node may move too, but nothing else happens.
    for (int attempt = 0; attempt < 40; ++attempt) readLogs();
    size_t i = 0;
    std::vector<QString> ids;
    for (const auto& cfg : {original, copy}) {
      ids.push_back(deviceIdOf(cfg));
      if (newIds[i].isEmpty()) {
        QCOMPARE(ids.back(), oldId);  // this one kept its identity
      } else {
        QVERIFY(newIds[i] != oldId);
        QCOMPARE(ids.back(), newIds[i]);
        QVERIFY(std::filesystem::exists(cfg / "identity.replaced" / "cert.pem"));
      }
      QFile trusted(QString::fromStdString((cfg / "trusted.json").string()));
      QVERIFY(trusted.open(QIODevice::ReadOnly));
      QVERIFY(trusted.readAll().contains(coordinatorId.toUtf8()));
      ++i;
    }
    QVERIFY(ids[0] != ids[1]);  // the clash is resolved
    qInfo("moved: h1 %s, h2 %s", newIds[0].isEmpty() ? "no" : "yes",
          newIds[1].isEmpty() ? "no" : "yes");
  }
};

QTEST_GUILESS_MAIN(TestNodeNetns)
#include "test_node_netns.moc"
