// shoal-node on three hosts of a throwaway LAN (network namespaces joined by a bridge, veth
// links: tests/integration/netns), the coordinator on a fourth: weights stream over the LAN to
// nodes that lack the model, and greedy generation through 1, 2 and 3 remote stages gives the
// tokens one local stage gives (shoal-hop-overhead --verify runs as the coordinator). Skips
// without root.

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
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
      QProcess* node = lan.start(
          h, SHOAL_NODE_EXE,
          {"--config-dir", QString::fromStdString(cfg.string()), "--port", kPort, "--no-discovery",
           "--threads", "1", "--name", "h" + QString::number(h), "--trust", coordinatorId});
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
};

QTEST_GUILESS_MAIN(TestNodeNetns)
#include "test_node_netns.moc"
