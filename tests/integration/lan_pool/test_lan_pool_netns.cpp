// The pool across a real (namespaced) LAN: four shoal-node hosts and shoal-cli as the
// coordinator on a fifth (tests/integration/netns). Discovery finds the nodes; a pooled greedy
// reply of 200 tokens (the nodes forwarding to each other directly) survives a SIGKILL of the
// middle node and equals `shoal-cli generate` on one machine; direct forwarding gives the reply
// that relaying through the coordinator gives; and so do a mixture of experts over three nodes and
// a reply decoded speculatively; the fit estimate made from a model's header agrees with what the
// pool does. Needs root for the namespaces; skips otherwise.

#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "engine/gguf/gguf_file.h"
#include "engine/model/model.h"
#include "engine/model/synthetic_model.h"
#include "engine/plan/cost_model.h"
#include "engine/plan/fit.h"
#include "engine/plan/model_cost.h"
#include "engine/plan/pool_file.h"
#include "lan/transport/trust_store.h"
#include "tests/integration/netns/netns_hosts.h"

using shoal::test::NetnsHosts;

namespace {

constexpr int kNodes = 4;  // hosts 2..5; host 1 runs shoal-cli
constexpr int kPort = 7000;
constexpr int kContext = 512;
const char* kPrompt = "Write a short story about a lighthouse keeper.";

QString modelPath() { return QString(SHOAL_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf"; }

}  // namespace

class TestLanPoolNetns : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  std::unique_ptr<NetnsHosts> m_lan;
  QString m_cliConfig;
  QStringList m_nodeIds;  // of hosts 2..5
  std::vector<QProcess*> m_nodeProcesses;
  QString m_nodes;  // "10.77.1.2:7000,..."
  QString m_memoryCapMb;

  static QByteArray runLocal(const QString& program, const QStringList& args) {
    QProcess p;
    p.start(program, args);
    if (!p.waitForFinished(120000) || p.exitCode() != 0) {
      qWarning("%s failed: %s", qPrintable(program), p.readAllStandardError().constData());
      return {};
    }
    return p.readAllStandardOutput();
  }

 private slots:
  void initTestCase() {
    if (const QString why = NetnsHosts::unavailableReason(); !why.isEmpty()) {
      QSKIP(qPrintable(why));
    }
    if (!std::filesystem::exists(modelPath().toStdString())) QSKIP("default model not downloaded");
    QVERIFY(m_dir.isValid());
    m_lan = std::make_unique<NetnsHosts>(1 + kNodes);

    m_cliConfig = m_dir.filePath("cli");
    const QString cliId =
        runLocal(SHOAL_NODE_BINARY, {"--print-device-id", "--config-dir", m_cliConfig}).trimmed();
    QVERIFY(!cliId.isEmpty());
    shoal::lan::TrustStore trust;
    trust.load(m_cliConfig.toStdString());

    // Each device may hold ~40% of the model: three nodes are needed, one is the spare.
    const auto model = shoal::model::Model::load(modelPath().toStdString());
    const shoal::plan::ModelCost cost = shoal::plan::modelCostFromGguf(model->file(), kContext);
    shoal::plan::Request request;
    request.contextTokens = kContext;
    m_memoryCapMb =
        QString::number(0.4 * shoal::plan::splitMemoryBytes(cost, request) / 1e6, 'f', 3);

    QStringList addresses;
    for (int i = 0; i < kNodes; ++i) {
      const int host = 2 + i;
      const QString base = m_dir.filePath(QString("node%1").arg(i));
      const QString config = base + "/config", models = base + "/models";
      std::filesystem::create_directories(models.toStdString());
      if (i != kNodes - 1) {  // the last node has to be streamed to
        std::filesystem::create_symlink(modelPath().toStdString(),
                                        models.toStdString() + "/model.gguf");
      }
      const QString id =
          runLocal(SHOAL_NODE_BINARY, {"--print-device-id", "--config-dir", config}).trimmed();
      QVERIFY(!id.isEmpty());
      trust.add(id.toStdString(), QString("node%1").arg(i).toStdString());
      m_nodeIds << id;
      m_nodeProcesses.push_back(m_lan->start(
          host, SHOAL_NODE_BINARY,
          {"--name", QString("node%1").arg(i), "--port", QString::number(kPort), "--config-dir",
           config, "--models-dir", models, "--trust", cliId, "--threads", "1"}));
      addresses << m_lan->ipv4(host) + ":" + QString::number(kPort);
    }
    m_nodes = addresses.join(',');
    // Ready when the coordinator host can take a snapshot of every node.
    bool up = false;
    for (int attempt = 0; attempt < 60 && !up; ++attempt) {
      up = m_lan->run(
               1, SHOAL_CLI_BINARY,
               {"pool", "status", "--nodes", m_nodes, "--config-dir", m_cliConfig, "--json"}) == 0;
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    QVERIFY2(up, "the nodes did not come up");
  }

  void cleanupTestCase() { m_lan.reset(); }

  void discoverListsEveryNodeAsTrusted() {
    QByteArray out;
    QCOMPARE(
        m_lan->run(1, SHOAL_CLI_BINARY,
                   {"pool", "discover", "--seconds", "3", "--json", "--config-dir", m_cliConfig},
                   &out),
        0);
    // stderr may carry log lines: the JSON object starts at the first '{'.
    const nlohmann::json j = nlohmann::json::parse(out.mid(out.indexOf('{')).toStdString());
    std::set<std::string> trusted;
    for (const auto& p : j.at("peers")) {
      if (p.at("trusted").get<bool>() && p.at("port").get<int>() == kPort) {
        trusted.insert(p.at("device_id").get<std::string>());
      }
    }
    for (const QString& id : m_nodeIds) QVERIFY2(trusted.count(id.toStdString()), qPrintable(id));
  }

  void generateWithoutNodesUsesTheTrustedNodesDiscoveryFinds() {
    QByteArray out;
    QCOMPARE(m_lan->run(1, SHOAL_CLI_BINARY,
                        {"pool", "generate", "--config-dir", m_cliConfig, "-p", kPrompt, "-n", "8",
                         "--temp", "0", "--ignore-eos", "--ctx", QString::number(kContext),
                         "--max-device-memory-mb", m_memoryCapMb, "--json"},
                        &out, 120000),
             0);
    const nlohmann::json j = nlohmann::json::parse(out.mid(out.indexOf('{')).toStdString());
    QCOMPARE(j.at("tokens").size(), size_t(8));
    QCOMPARE(j.at("stages").size(), size_t(3));
    for (const auto& stage : j.at("stages")) {
      QVERIFY(m_nodeIds.contains(QString::fromStdString(stage.at("node").get<std::string>())));
    }
  }

  // --stages N places the model on exactly N stages without memory arithmetic by the user; a
  // count the pool cannot give is refused by name.
  void stagesOptionGivesExactlyThatManyStages() {
    for (const int stages : {1, 2, 3}) {
      QByteArray out;
      QCOMPARE(m_lan->run(1, SHOAL_CLI_BINARY,
                          {"pool", "plan", "--nodes", m_nodes, "--config-dir", m_cliConfig, "--ctx",
                           QString::number(kContext), "--stages", QString::number(stages)},
                          &out, 120000),
               0);
      const nlohmann::json j = nlohmann::json::parse(out.mid(out.indexOf('{')).toStdString());
      QCOMPARE(j.at("deploy").size(), size_t(stages));
    }
    QByteArray err;
    QCOMPARE(m_lan->run(1, SHOAL_CLI_BINARY,
                        {"pool", "plan", "--nodes", m_nodes, "--config-dir", m_cliConfig, "--ctx",
                         QString::number(kContext), "--stages", "9"},
                        &err, 120000),
             1);
    QVERIFY2(err.contains("no plan over exactly 9 stage(s)"), err.constData());
  }

  // Fit before download (the model library): the verdict estimateFit gives from a header
  // prefix, on the pool as the coordinator sees it, is what the pool then does — the default
  // model and a small synthetic one run, a synthetic one whose KV cache at a long context needs
  // more than the devices give is refused.
  void fitPredictionsAgreeWithWhatThePoolDoes() {
    shoal::model::SyntheticModelSpec small;
    small.nLayer = 4;
    small.nEmbd = 256;
    small.nHead = 4;
    small.nHeadKv = 2;
    small.nFf = 512;
    small.nVocab = 512;
    const QString smallPath = m_dir.filePath("synthetic-small.gguf");
    shoal::model::writeSyntheticModel(small, smallPath.toStdString());
    // ~22 MB of weights, but 512 KV values per layer and position: ~540 MB at 32k tokens.
    shoal::model::SyntheticModelSpec longContext = small;
    longContext.nLayer = 8;
    longContext.nEmbd = 512;
    longContext.nHeadKv = 4;
    longContext.nFf = 1024;
    longContext.nCtx = 32768;
    const QString longPath = m_dir.filePath("synthetic-long-context.gguf");
    shoal::model::writeSyntheticModel(longContext, longPath.toStdString());

    struct Case {
      QString path;
      int context;
      bool expectRuns;
    };
    for (const Case& c : {Case{modelPath(), kContext, true}, Case{smallPath, kContext, true},
                          Case{longPath, 32768, false}}) {
      const QStringList common = {"--nodes",
                                  m_nodes,
                                  "--config-dir",
                                  m_cliConfig,
                                  "-m",
                                  c.path,
                                  "--ctx",
                                  QString::number(c.context),
                                  "--max-device-memory-mb",
                                  m_memoryCapMb};
      QByteArray planOut;
      m_lan->run(1, SHOAL_CLI_BINARY, QStringList{"pool", "plan"} + common, &planOut, 120000);
      const nlohmann::json planJson =
          nlohmann::json::parse(planOut.mid(planOut.indexOf('{')).toStdString());
      const shoal::plan::Pool pool =
          shoal::plan::parsePoolFile(planJson.at("pool").dump(), false).pool;

      // The prediction, from the first 4 MiB of the file as a Range request would fetch them.
      QFile file(c.path);
      QVERIFY(file.open(QIODevice::ReadOnly));
      const QByteArray prefix = file.read(4 << 20);
      const auto header = shoal::gguf::File::fromHeader(
          std::span(reinterpret_cast<const uint8_t*>(prefix.constData()), size_t(prefix.size())),
          uint64_t(file.size()), c.path.toStdString());
      const shoal::plan::FitEstimate fit = shoal::plan::estimateFit(header, pool, c.context);
      QVERIFY2(fit.runs == c.expectRuns, qPrintable(c.path + ": " + fit.reason.c_str()));

      // What happens.
      QByteArray out;
      const int rc = m_lan->run(1, SHOAL_CLI_BINARY,
                                QStringList{"pool", "generate", "-p", "Hello", "-n", "4", "--temp",
                                            "0", "--ignore-eos", "--json"} +
                                    common,
                                &out, 240000);
      QVERIFY2((rc == 0) == fit.runs, qPrintable(c.path + ": exit " + QString::number(rc) + ", " +
                                                 QString::fromUtf8(out.right(400))));
      if (fit.runs) {
        const nlohmann::json j = nlohmann::json::parse(out.mid(out.indexOf('{')).toStdString());
        QCOMPARE(j.at("tokens").size(), size_t(4));
        QCOMPARE(int(j.at("stages").size()), fit.stages);
      }
    }
  }

  // A mixture of experts over three nodes, its weights streamed to them as shards, generates
  // greedily what one machine generates: qwen3moe (8 experts, top 2), and a gpt-oss-shaped model
  // (MXFP4 experts with biases, attention sinks, sliding-window layers, YaRN).
  void aMixtureOfExpertsOverThreeNodesGeneratesWhatOneMachineDoes_data() {
    QTest::addColumn<QString>("architecture");
    QTest::newRow("qwen3moe") << "qwen3moe";
    QTest::newRow("gpt-oss") << "gpt-oss";
  }

  void aMixtureOfExpertsOverThreeNodesGeneratesWhatOneMachineDoes() {
    QFETCH(QString, architecture);
    shoal::model::SyntheticModelSpec spec;
    spec.architecture = architecture.toStdString();
    spec.nLayer = 8;
    spec.nEmbd = 512;
    spec.nHead = 8;
    spec.nHeadKv = 4;
    spec.nFf = 1024;
    spec.nExpert = 8;
    spec.nExpertUsed = 2;
    spec.nFfExp = 512;  // layers of ~4.5 MB next to a 14 MB embedding and head: 3 stages
    spec.weightType = spec.embedType = shoal::gguf::TensorType::Q4_K;
    if (architecture == "gpt-oss") {
      spec.weightType = shoal::gguf::TensorType::Q8_0;
      for (const char* kind : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
        spec.typeOverrides[kind] = shoal::gguf::TensorType::MXFP4;
      }
      spec.slidingWindow = 16;  // the prompt and reply run past it on the even layers
      spec.ropeScaling = "yarn";
      spec.ropeScalingFactor = 32;
      spec.ropeOrigCtx = 64;
    }
    spec.vocabFrom = modelPath().toStdString();
    const QString path = m_dir.filePath("synthetic-" + architecture + ".gguf");
    shoal::model::writeSyntheticModel(spec, path.toStdString());
    const auto model = shoal::model::Model::load(path.toStdString());
    shoal::plan::Request request;
    request.contextTokens = kContext;
    const QString capMb =
        QString::number(0.4 *
                            shoal::plan::splitMemoryBytes(
                                shoal::plan::modelCostFromGguf(model->file(), kContext), request) /
                            1e6,
                        'f', 3);
    const QStringList generate = {"-m",
                                  path,
                                  "-p",
                                  kPrompt,
                                  "-n",
                                  "48",
                                  "--temp",
                                  "0",
                                  "--ignore-eos",
                                  "--ctx",
                                  QString::number(kContext)};
    const QByteArray reference =
        runLocal(SHOAL_CLI_BINARY, QStringList{"generate", "--threads", "1"} + generate);
    QVERIFY(!reference.isEmpty());
    QByteArray out;
    const int rc = m_lan->run(1, SHOAL_CLI_BINARY,
                              QStringList{"pool", "generate", "--nodes", m_nodes, "--config-dir",
                                          m_cliConfig, "--max-device-memory-mb", capMb, "--json"} +
                                  generate,
                              &out, 240000);
    QVERIFY2(rc == 0, out.right(400).constData());
    const nlohmann::json j = nlohmann::json::parse(out.mid(out.indexOf('{')).toStdString());
    QCOMPARE(int(j.at("stages").size()), 3);
    QCOMPARE(QString::fromStdString(j.at("text").get<std::string>()), QString::fromUtf8(reference));
  }

  // Speculative decoding over the pool (prompt lookup, drafts verified by one pass through the
  // three nodes, the head node returning one greedy token per row): the same text as without
  // it, and as one machine.
  void speculationOverThePoolLeavesTheReplyUnchanged() {
    const QString prompt =
        "<|im_start|>user\nRepeat this list exactly:\n- apples, pears and plums\n- red, green "
        "and blue\n- one, two, three, four, five<|im_end|>\n<|im_start|>assistant\n- apples";
    const QByteArray reference = runLocal(
        SHOAL_CLI_BINARY, {"generate", "-p", prompt, "-n", "48", "--temp", "0", "--threads", "1",
                           "--ctx", QString::number(kContext), "--draft-max", "0"});
    QVERIFY(!reference.isEmpty());
    nlohmann::json runs[2];
    for (int i = 0; i < 2; ++i) {
      QByteArray out;
      QCOMPARE(m_lan->run(1, SHOAL_CLI_BINARY,
                          {"pool", "generate", "--nodes", m_nodes, "--config-dir", m_cliConfig,
                           "-p", prompt, "-n", "48", "--temp", "0", "--ctx",
                           QString::number(kContext), "--max-device-memory-mb", m_memoryCapMb,
                           "--draft-max", i == 0 ? "0" : "8", "--json"},
                          &out, 120000),
               0);
      runs[i] = nlohmann::json::parse(out.mid(out.indexOf('{')).toStdString());
      QCOMPARE(runs[i].at("stages").size(), size_t(3));
      QCOMPARE(QByteArray::fromStdString(runs[i].at("text").get<std::string>()), reference);
    }
    QCOMPARE(runs[0].at("verify_steps").get<int>(), 0);
    QVERIFY2(runs[1].at("verify_steps").get<int>() > 0, runs[1].dump().c_str());
    QCOMPARE(runs[1].at("tokens"), runs[0].at("tokens"));
  }

  // Issue 20 item 1: each node sends its hidden states straight to the next one's host, and the
  // reply is the same as with every hop relayed through the coordinator, for a prompt longer than
  // a forward's batch (its micro-batches in flight through the linked nodes at once).
  void directForwardingGivesTheRelayedReply() {
    QString prompt;
    while (prompt.size() < 1400) prompt += "The keeper climbed the stairs to light the lamp. ";
    nlohmann::json runs[2];
    for (int i = 0; i < 2; ++i) {
      QByteArray out;
      QStringList args{"pool",
                       "generate",
                       "--nodes",
                       m_nodes,
                       "--config-dir",
                       m_cliConfig,
                       "-p",
                       prompt,
                       "-n",
                       "32",
                       "--temp",
                       "0",
                       "--ignore-eos",
                       "--ctx",
                       QString::number(kContext),
                       "--max-device-memory-mb",
                       m_memoryCapMb,
                       "--draft-max",
                       "0",
                       "--json"};
      if (i == 1) args << "--relay";
      QCOMPARE(m_lan->run(1, SHOAL_CLI_BINARY, args, &out, 120000), 0);
      runs[i] = nlohmann::json::parse(out.mid(out.indexOf('{')).toStdString());
      QCOMPARE(runs[i].at("stages").size(), size_t(3));
      QVERIFY2(runs[i].at("prompt_tokens").get<int>() > 256, runs[i].dump().c_str());
      QCOMPARE(runs[i].at("hops").size(), size_t(2));
      for (const auto& hop : runs[i].at("hops")) {
        QVERIFY2(hop.at("direct").get<bool>() == (i == 0), hop.dump().c_str());
      }
    }
    QCOMPARE(runs[0].at("tokens"), runs[1].at("tokens"));
  }

  void killedMiddleNodeDuringA200TokenReplyLeavesTheReplyUnchanged() {
    const QByteArray reference = runLocal(
        SHOAL_CLI_BINARY, {"generate", "-p", kPrompt, "-n", "200", "--temp", "0", "--ignore-eos",
                           "--threads", "1", "--ctx", QString::number(kContext)});
    QVERIFY(!reference.isEmpty());

    QProcess* cli =
        m_lan->start(1, SHOAL_CLI_BINARY,
                     {"pool", "generate", "--nodes", m_nodes, "--config-dir", m_cliConfig, "-p",
                      kPrompt, "-n", "200", "--temp", "0", "--ignore-eos", "--ctx",
                      QString::number(kContext), "--max-device-memory-mb", m_memoryCapMb, "-v"});
    // The middle stage's node, from the coordinator's deployment log.
    QByteArray log;
    QString middle;
    for (int i = 0; i < 600 && middle.isEmpty(); ++i) {
      cli->waitForReadyRead(100);
      log += cli->readAllStandardError();
      const QRegularExpression re("stage stage-2 layers \\[\\d+, \\d+\\) on (node\\d)/");
      if (const auto m = re.match(QString::fromUtf8(log)); m.hasMatch()) middle = m.captured(1);
    }
    QVERIFY2(!middle.isEmpty(), log.constData());
    const int victim = middle.mid(4).toInt();
    QVERIFY(victim >= 0 && victim < kNodes);
    // Let a good part of the reply stream out, then kill the node.
    QByteArray text;
    for (int i = 0; i < 600 && text.size() < 200 && cli->state() == QProcess::Running; ++i) {
      cli->waitForReadyRead(100);
      text += cli->readAllStandardOutput();
    }
    const QByteArray atKill = text;
    QVERIFY2(cli->state() == QProcess::Running, "the reply finished before the kill");
    m_lan->kill(m_nodeProcesses[static_cast<size_t>(victim)]);
    QVERIFY(cli->waitForFinished(120000));
    text += cli->readAllStandardOutput();
    log += cli->readAllStandardError();
    QCOMPARE(cli->exitCode(), 0);
    QVERIFY2(log.contains("failed after"), log.constData());
    // The nodes forwarded to each other directly before the kill, and the last to the first: the
    // reply was decoded in bursts round the ring (the plan line).
    QVERIFY2(log.contains("direct to"), log.constData());
    QVERIFY2(log.contains("ring back to"), log.constData());
    QVERIFY(reference.startsWith(atKill));
    QCOMPARE(text, reference);
  }
};

QTEST_GUILESS_MAIN(TestLanPoolNetns)
#include "test_lan_pool_netns.moc"
