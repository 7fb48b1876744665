// The pool page on a REAL pool: shoal-node processes on loopback (TLS, the node protocol,
// weights streamed from this process), driven through the page's own widgets and a
// PoolController on its thread, exactly as the app wires them.
//   - two nodes added by address: the plan preview names both, Deploy sends the weights (the
//     progress bar fills), the cards show the two devices with layer ranges covering every layer,
//     and their charts gain points from live telemetry;
//   - chat over the pool: a reply streams and finishes, Stop ends it, and the chat window's
//     "Run on: Pool" sends the conversation to the pool;
//   - a node started with --pair: typing its code in the Pair dialog makes it a member, by
//     address, or from its row once LAN discovery has heard it.

#include <sys/prctl.h>

#include <QChart>
#include <QComboBox>
#include <QDir>
#include <QInputDialog>
#include <QLineEdit>
#include <QLineSeries>
#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <memory>

#include "app/gui/chat_window.h"
#include "app/gui/device_card.h"
#include "app/gui/pipeline_diagram.h"
#include "app/gui/pool_controller.h"
#include "app/gui/pool_setup_panel.h"
#include "app/gui/pool_view.h"
#include "engine/model/model.h"
#include "engine/plan/cost_model.h"
#include "engine/plan/model_cost.h"
#include "lan/discovery/discovery.h"
#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"

using namespace shoal;
using namespace shoal::gui;

namespace {

constexpr int kContext = 2048;          // the controller's pool context (pool_controller.cpp)
constexpr int kNodeStartMs = 60000;     // a node prints its port once its listener is up
constexpr int kDeployMs = 600000;       // hashing and streaming ~80 MB on a loaded machine
constexpr int kNetworkStepMs = 120000;  // connect + profile links, or plan

QString modelPath() { return QDir(SHOAL_MODELS_DIR).filePath("SmolLM2-135M-Instruct.Q4_1.gguf"); }

struct Node {
  std::unique_ptr<QProcess> process;
  QString name;
  QString address;
  QString pairingCode;  // with --pair
};

// Waits for a stdout line of `p` matching `re`; its first capture.
QString waitForLine(QProcess& p, const QRegularExpression& re, QByteArray& seen) {
  QElapsedTimer t;
  t.start();
  while (t.elapsed() < kNodeStartMs) {
    const QRegularExpressionMatch m = re.match(QString::fromUtf8(seen));
    if (m.hasMatch()) return m.captured(1);
    if (p.state() == QProcess::NotRunning) return {};
    p.waitForReadyRead(200);
    seen += p.readAllStandardOutput();
  }
  return {};
}

}  // namespace

// The discovery tests need a LAN: CTest runs this file in a private network namespace
// (private_lan.sh); where it cannot (no root), discovery stays on lo and they skip.
#define SKIP_WITHOUT_LAN()                                                                 \
  do {                                                                                     \
    const char* only = std::getenv("SHOAL_DISCOVERY_INTERFACES");                          \
    if (only && std::string(only) == "lo")                                                 \
      QSKIP("discovery is confined to lo here (private_lan.sh needs root to make a LAN)"); \
  } while (0)

class TestPoolLive : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;
  QString m_appConfig;  // the controller's config dir (identity, trusted.json)
  QString m_appId;
  uint64_t m_memoryCap = 0;
  std::deque<Node> m_nodes;  // deque: startNode hands out references that stay valid

  // Starts a shoal-node on a free port; `pair`: it shows a code instead of trusting us;
  // `discoverable`: it announces itself on the LAN (and listens on every address) instead of
  // listening on loopback only without discovery.
  Node& startNode(const QString& name, bool pair, bool discoverable = false) {
    const QString base = m_dir.filePath(name);
    const QString config = base + "/config", models = base + "/models";
    QDir().mkpath(config);
    QDir().mkpath(models);  // empty: the weights are streamed from the app
    QStringList args{"--name", name,           "--port", "0",         "--config-dir",
                     config,   "--models-dir", models,   "--threads", "1"};
    if (!discoverable)
      args << "--bind"
           << "127.0.0.1"
           << "--no-discovery";
    if (pair) {
      args << "--pair";
    } else {
      args << "--trust" << m_appId;
      // We trust it too: its ID from its own config dir, into the app's trust store.
      QProcess id;
      id.start(SHOAL_NODE_BINARY, {"--print-device-id", "--config-dir", config});
      if (id.waitForFinished(60000) && id.exitCode() == 0) {
        lan::TrustStore trust;
        trust.load(m_appConfig.toStdString());
        trust.add(id.readAllStandardOutput().trimmed().toStdString(), name.toStdString());
      }
    }
    Node n;
    n.name = name;
    n.process = std::make_unique<QProcess>();
    n.process->setProcessChannelMode(QProcess::ForwardedErrorChannel);
    // A node dies with the test, also when ctest kills the test at its timeout (cleanupTestCase
    // does not run then, and a surviving node would hold ctest's output pipe open).
    n.process->setChildProcessModifier([] { ::prctl(PR_SET_PDEATHSIG, SIGTERM); });
    n.process->start(SHOAL_NODE_BINARY, args);
    QByteArray out;
    const QString port =
        waitForLine(*n.process, QRegularExpression("device \\S+ port (\\d+)"), out);
    if (!port.isEmpty()) n.address = "127.0.0.1:" + port;  // discovery gives its LAN address
    if (pair) {
      n.pairingCode = waitForLine(*n.process, QRegularExpression("pairing code ([A-Z0-9-]+)"), out);
    }
    m_nodes.push_back(std::move(n));
    return m_nodes.back();
  }

  // Starts the controller on the app's config dir; every device capped at m_memoryCap unless
  // `uncapped`.
  void startController(PoolControllerThread& thread, PoolView& view, bool uncapped = false) {
    view.attachController(thread.controller());
    view.setModelPath(modelPath());
    PoolController* c = thread.controller();
    QSignalSpy started(c, &PoolController::started);
    const QString config = m_appConfig;
    const qint64 cap = uncapped ? qint64(0) : qint64(m_memoryCap);
    QMetaObject::invokeMethod(
        c, [c, config, cap] { c->start(config, "test-app", false, cap); }, Qt::QueuedConnection);
    QTRY_COMPARE_WITH_TIMEOUT(started.count(), 1, 30000);
    QCOMPARE(started.first().at(0).toString(), m_appId);  // the identity the nodes trust
  }

  // Adds node-a and node-b to `c`, plans and deploys, without the UI.
  void deployOverTwoNodes(PoolController* c) {
    QSignalSpy added(c, &PoolController::nodeAdded);
    QSignalSpy planned(c, &PoolController::planReady);
    QSignalSpy deployed(c, &PoolController::deployed);
    QSignalSpy failed(c, &PoolController::failed);
    for (int i = 0; i < 2; ++i) {
      const QString address = m_nodes[static_cast<size_t>(i)].address;
      QMetaObject::invokeMethod(
          c, [c, address] { c->addNode(address); }, Qt::QueuedConnection);
    }
    QMetaObject::invokeMethod(
        c, [c] { c->previewPlan(modelPath()); }, Qt::QueuedConnection);
    QMetaObject::invokeMethod(
        c, [c] { c->deploy(); }, Qt::QueuedConnection);
    QTRY_VERIFY_WITH_TIMEOUT(deployed.count() == 1 || !failed.isEmpty(), kDeployMs);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    QCOMPARE(added.count(), 2);
  }

  static void requestReply(PoolController* c, int maxTokens) {
    GenerationSettings g;
    g.temperature = 0;
    g.maxTokens = maxTokens;
    QList<ChatTurn> turns{{"user", "Tell me a long story about a lighthouse keeper."}};
    c->requestReply(7, turns, g);  // thread-safe: queues the reply on the controller's thread
  }
 private slots:
  void initTestCase() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    QVERIFY(m_dir.isValid());
    m_appConfig = PoolController::configDirOf(m_dir.filePath("app"));
    m_appId = QString::fromStdString(lan::loadOrCreateIdentity(m_appConfig.toStdString()).deviceId);
    // Each device may hold ~60% of the model: the plan needs both nodes.
    const auto m = model::Model::load(modelPath().toStdString());
    const plan::ModelCost cost = plan::modelCostFromGguf(m->file(), kContext);
    plan::Request r;
    r.contextTokens = kContext;
    m_memoryCap = static_cast<uint64_t>(0.6 * plan::splitMemoryBytes(cost, r));
    // node-a and node-b: trusted both ways, shared by the tests (each test connects anew).
    const Node& a = startNode("node-a", false);
    const Node& b = startNode("node-b", false);
    QVERIFY2(!a.address.isEmpty() && !b.address.isEmpty(), "a node did not print its port");
  }

  void cleanupTestCase() {
    for (Node& n : m_nodes) {
      if (n.process->state() != QProcess::NotRunning) {
        n.process->terminate();
        if (!n.process->waitForFinished(10000)) n.process->kill();
      }
    }
  }

  void twoNodesAddedByAddressArePlannedDeployedAndChartedLive() {
    const Node& a = m_nodes[0];
    const Node& b = m_nodes[1];
    const QString names[2] = {a.name, b.name};
    const QString addresses[2] = {a.address, b.address};

    PoolControllerThread thread;
    PoolView view;
    view.resize(1280, 800);
    view.show();
    startController(thread, view);
    PoolController* c = thread.controller();
    PoolSetupPanel* panel = view.setupPanel();

    QSignalSpy added(c, &PoolController::nodeAdded);
    QSignalSpy failed(c, &PoolController::failed);
    for (const QString& address : addresses) {
      panel->addressField()->setText(address);
      QTest::mouseClick(panel->findChild<QPushButton*>("addNodeButton"), Qt::LeftButton);
    }
    QTRY_VERIFY_WITH_TIMEOUT(added.count() == 2 || !failed.isEmpty(), kNetworkStepMs);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    // The spies hear the controller's thread; the panel gets the same signals queued.
    QTRY_COMPARE(panel->members().size(), 2);

    QSignalSpy planned(c, &PoolController::planReady);
    QTest::mouseClick(panel->previewButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(planned.count() == 1 || !failed.isEmpty(), kNetworkStepMs);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    const PlanPreview plan = planned.first().at(0).value<PlanPreview>();
    QVERIFY2(plan.feasible, qPrintable(plan.reason));
    QCOMPARE(plan.stages.size(), 2);  // the memory cap needs both devices
    QVERIFY(plan.tokensPerS > 0);
    QTRY_VERIFY(panel->deployButton()->isEnabled());
    for (const QString& name : names) {
      QVERIFY2(panel->planText().contains(name), qPrintable(panel->planText()));
    }
    QVERIFY2(panel->planText().contains(
                 QString("predicted %1 tokens/s").arg(plan.tokensPerS, 0, 'f', 1)),
             qPrintable(panel->planText()));

    QSignalSpy progress(c, &PoolController::deployProgress);
    QSignalSpy deployed(c, &PoolController::deployed);
    QTest::mouseClick(panel->deployButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(deployed.count() == 1 || !failed.isEmpty(), kDeployMs);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    // The nodes had no model: weights were streamed, and the progress said how much.
    qint64 streamed = 0;
    for (const QList<QVariant>& args : progress) {
      const DeployStatus s = args.at(0).value<DeployStatus>();
      if (s.stageDone) streamed += s.bytesTotal;
      QVERIFY(s.bytesSent <= s.bytesTotal);
    }
    QVERIFY2(streamed > 0, "no weight bytes reported");
    QTRY_COMPARE(panel->deployBar()->value(), panel->deployBar()->maximum());

    // Live telemetry: two cards whose layer ranges cover every layer in stage order.
    QTRY_VERIFY_WITH_TIMEOUT(view.cards().size() == 2 && !view.diagram()->segments().isEmpty() &&
                                 view.diagram()->segments().last().lastLayer == plan.modelLayers,
                             30000);
    const QList<PipelineDiagram::Segment>& segs = view.diagram()->segments();
    QCOMPARE(segs.size(), 2);
    QCOMPARE(segs.first().firstLayer, 0);
    QCOMPARE(segs[0].lastLayer, segs[1].firstLayer);
    QCOMPARE(segs[1].lastLayer, plan.modelLayers);
    for (int i = 0; i < 2; ++i) {
      QCOMPARE(segs[i].firstLayer, plan.stages[i].firstLayer);
      // Listed (grey) before the deployment, coloured as its diagram segment after it.
      QCOMPARE(view.cards()[i]->color(), PipelineDiagram::deviceColor(i));
      QVERIFY2(view.cards()[i]->layerText().contains(QString::number(segs[i].firstLayer)),
               qPrintable(view.cards()[i]->layerText()));
    }
    QVERIFY2(view.planText().contains("predicted"), qPrintable(view.planText()));
    QSignalSpy snapshots(c, &PoolController::snapshot);
    // Both charts gain points as snapshots arrive (node-b joined later: fewer points).
    const qsizetype beforeA = view.cards().front()->utilizationSeries()->count();
    const qsizetype beforeB = view.cards().back()->utilizationSeries()->count();
    QTRY_VERIFY_WITH_TIMEOUT(snapshots.count() >= 3, 30000);
    QTRY_VERIFY_WITH_TIMEOUT(view.cards().front()->utilizationSeries()->count() >= beforeA + 3 &&
                                 view.cards().back()->utilizationSeries()->count() >= beforeB + 3,
                             30000);
    for (DeviceCard* card : view.cards()) {
      QCOMPARE(card->tokensSeries()->count(), card->utilizationSeries()->count());
    }
  }

  void aReplyOnThePoolStreamsItsTextAndFinishes() {
    PoolControllerThread thread;
    PoolView view;
    startController(thread, view);
    PoolController* c = thread.controller();
    deployOverTwoNodes(c);
    QSignalSpy streamed(c, &PoolController::tokenStreamed);
    QSignalSpy finished(c, &PoolController::replyFinished);
    QSignalSpy generateFailed(c, &PoolController::generateFailed);
    requestReply(c, 16);
    QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1 || !generateFailed.isEmpty(), kNetworkStepMs);
    QVERIFY2(generateFailed.isEmpty(), qPrintable(generateFailed.value(0).value(1).toString()));
    QString pieces;
    for (const QList<QVariant>& args : streamed) {
      QCOMPARE(args.at(0).toLongLong(), 7);
      pieces += args.at(1).toString();
    }
    const QString text = finished.first().at(1).toString();
    const ReplyStats stats = finished.first().at(2).value<ReplyStats>();
    QVERIFY(!text.isEmpty());
    QCOMPARE(pieces, text);  // whole text streamed, nothing after the reply's end
    QVERIFY(stats.generatedTokens >= 1 && stats.generatedTokens <= 16);
    QVERIFY(stats.promptTokens > 0);
  }

  void stopEndsAPoolReplyBeforeItsLimit() {
    PoolControllerThread thread;
    PoolView view;
    startController(thread, view);
    PoolController* c = thread.controller();
    deployOverTwoNodes(c);
    QSignalSpy streamed(c, &PoolController::tokenStreamed);
    QSignalSpy finished(c, &PoolController::replyFinished);
    requestReply(c, 1500);
    QTRY_VERIFY_WITH_TIMEOUT(!streamed.isEmpty(), kNetworkStepMs);
    c->stop();  // from the GUI thread, as the Stop button does
    QTRY_VERIFY_WITH_TIMEOUT(finished.count() == 1, kNetworkStepMs);
    const ReplyStats stats = finished.first().at(2).value<ReplyStats>();
    QCOMPARE(stats.finishReason, QString("cancelled"));
    QVERIFY(stats.generatedTokens < 1500);
  }

  void theChatRunsOnThePoolOnceItIsDeployed() {
    qputenv("SHOAL_DATA_DIR", m_dir.filePath("app").toLocal8Bit());
    ChatWindow window(modelPath(), m_dir.filePath("app"));
    // Without its store the reply is never saved: fail here, not at a timeout.
    QVERIFY2(window.store().ok(), qPrintable(window.store().error()));
    window.show();
    QVERIFY(!window.runOnBox()->isVisible());             // no pool yet
    window.startPool(qint64(m_memoryCap), false, false);  // node-a and node-b only
    deployOverTwoNodes(window.poolController());
    QTRY_VERIFY(window.runOnBox()->isVisible());
    window.runOnBox()->setCurrentIndex(1);  // Run on: Pool
    QTRY_VERIFY_WITH_TIMEOUT(window.isModelLoaded(), 120000);
    QSignalSpy poolTokens(window.poolController(), &PoolController::tokenStreamed);
    QSignalSpy done(&window, &ChatWindow::replyDone);
    window.sendWhenLoaded("Say hello.");
    QTRY_VERIFY_WITH_TIMEOUT(done.count() == 1, kNetworkStepMs);
    QVERIFY2(!done.first().at(1).toString().isEmpty(), "the pool reply failed");
    QVERIFY(!poolTokens.isEmpty());  // the pool, not this computer, generated it
    const QList<StoredMessage> stored = window.store().messages(window.currentConversationId());
    QCOMPARE(stored.size(), 2);
    QCOMPARE(stored.last().role, QString("assistant"));
    QVERIFY(!stored.last().content.isEmpty());
    qunsetenv("SHOAL_DATA_DIR");
  }

  void aNodeHeardOnTheLanIsPairedFromItsRow() {
    SKIP_WITHOUT_LAN();
    Node& n = startNode("node-heard", true, true);
    QVERIFY2(!n.pairingCode.isEmpty(), "the node did not print a pairing code");

    PoolControllerThread thread;
    PoolView view;
    view.show();
    view.attachController(thread.controller());
    PoolController* c = thread.controller();
    QSignalSpy started(c, &PoolController::started);
    QSignalSpy failed(c, &PoolController::failed);
    QSignalSpy added(c, &PoolController::nodeAdded);
    const QString config = m_appConfig;
    QMetaObject::invokeMethod(
        c, [c, config] { c->start(config, "test-app", true, 0); }, Qt::QueuedConnection);
    QTRY_COMPARE_WITH_TIMEOUT(started.count(), 1, 30000);
    for (const QList<QVariant>& f : failed) {
      if (f.at(0).toString().contains("discovery")) QSKIP("LAN discovery cannot bind here");
    }
    // Its row, not paired yet, with a Pair… button (beacons go out once a second).
    QTreeWidget* list = view.setupPanel()->nodeList();
    const auto rowOf = [list, &n]() -> QTreeWidgetItem* {
      for (int i = 0; i < list->topLevelItemCount(); ++i) {
        if (list->topLevelItem(i)->text(0) == n.name) return list->topLevelItem(i);
      }
      return nullptr;
    };
    QTRY_VERIFY_WITH_TIMEOUT(rowOf() != nullptr, 15000);
    QCOMPARE(rowOf()->text(2), QString("not paired"));
    auto* pair = qobject_cast<QPushButton*>(list->itemWidget(rowOf(), 3));
    QVERIFY(pair);
    QCOMPARE(pair->objectName(), QString("pairPeerButton"));
    QTest::mouseClick(pair, Qt::LeftButton);
    QInputDialog* dialog = view.setupPanel()->pairDialog();
    QVERIFY(dialog);
    dialog->setTextValue(n.pairingCode);
    dialog->accept();
    QTRY_VERIFY_WITH_TIMEOUT(added.count() == 1 || failed.count() > 0, kNetworkStepMs);
    QVERIFY2(added.count() == 1, qPrintable(failed.value(0).value(0).toString()));
    QCOMPARE(added.first().at(1).toString(), n.name);
    QTRY_COMPARE(rowOf()->text(2), QString("in the pool"));
  }

  void aNewNodeNameIsAnnouncedAtOnce() {
    SKIP_WITHOUT_LAN();
    PoolControllerThread thread;
    PoolController* c = thread.controller();
    QSignalSpy started(c, &PoolController::started);
    QSignalSpy failed(c, &PoolController::failed);
    const QString config = m_appConfig;
    QMetaObject::invokeMethod(
        c, [c, config] { c->start(config, "before-rename", true, 0); }, Qt::QueuedConnection);
    QTRY_COMPARE_WITH_TIMEOUT(started.count(), 1, 30000);
    if (!failed.isEmpty()) QSKIP("LAN discovery cannot bind here");
    // A listener of our own on the LAN, as another machine's app would be.
    lan::DiscoveryOptions o;
    o.deviceId = lan::createIdentity().deviceId;
    o.name = "listener";
    o.tcpPort = 1;
    o.log = [](const std::string&) {};
    lan::Discovery listener(o);
    listener.start();
    const auto nameHeard = [&listener, this]() -> QString {
      for (const lan::Peer& p : listener.peers()) {
        if (QString::fromStdString(p.deviceId) == m_appId) return QString::fromStdString(p.name);
      }
      return {};
    };
    QTRY_COMPARE_WITH_TIMEOUT(nameHeard(), QString("before-rename"), 15000);
    QMetaObject::invokeMethod(
        c, [c] { c->setNodeName("after-rename"); }, Qt::QueuedConnection);
    QTRY_COMPARE_WITH_TIMEOUT(nameHeard(), QString("after-rename"), 15000);
  }

  void thisComputerJoinsItsOwnPoolWhenShared() {
    PoolControllerThread thread;
    PoolView view;
    view.show();
    startController(thread, view, true);
    PoolController* c = thread.controller();
    QSignalSpy added(c, &PoolController::nodeAdded);
    QSignalSpy failed(c, &PoolController::failed);
    const QString models = m_dir.filePath("app-models");
    QDir().mkpath(models);
    QMetaObject::invokeMethod(
        c, [c, models] { c->shareThisComputer(models); }, Qt::QueuedConnection);
    QTRY_VERIFY_WITH_TIMEOUT(added.count() == 1 || !failed.isEmpty(), kNetworkStepMs);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    // A node of its own (not the coordinator's identity), on this machine, under our name.
    QVERIFY(added.first().at(0).toString() != m_appId);
    QCOMPARE(added.first().at(1).toString(), QString("test-app"));
    QVERIFY(added.first().at(2).toString().startsWith("127.0.0.1:"));
    QTRY_VERIFY_WITH_TIMEOUT(view.cards().size() == 1, 30000);
    // It can hold the whole model: a one-stage plan on this computer deploys.
    QSignalSpy planned(c, &PoolController::planReady);
    QSignalSpy deployed(c, &PoolController::deployed);
    QMetaObject::invokeMethod(
        c, [c] { c->previewPlan(modelPath()); }, Qt::QueuedConnection);
    QTRY_VERIFY_WITH_TIMEOUT(planned.count() == 1 || !failed.isEmpty(), kNetworkStepMs);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    const PlanPreview plan = planned.first().at(0).value<PlanPreview>();
    QVERIFY2(plan.feasible, qPrintable(plan.reason));
    QCOMPARE(plan.stages.front().nodeName, QString("test-app"));
    QMetaObject::invokeMethod(
        c, [c] { c->deploy(); }, Qt::QueuedConnection);
    QTRY_VERIFY_WITH_TIMEOUT(deployed.count() == 1 || !failed.isEmpty(), kDeployMs);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
  }

  void aNodeShowingAPairingCodeJoinsThroughThePairDialog() {
    Node& n = startNode("node-pair", true);
    QVERIFY2(!n.address.isEmpty(), "the node did not print its port");
    QVERIFY2(!n.pairingCode.isEmpty(), "the node did not print a pairing code");

    PoolControllerThread thread;
    PoolView view;
    view.show();
    startController(thread, view);
    PoolController* c = thread.controller();
    PoolSetupPanel* panel = view.setupPanel();
    QSignalSpy paired(c, &PoolController::paired);
    QSignalSpy added(c, &PoolController::nodeAdded);
    QSignalSpy failed(c, &PoolController::failed);

    panel->addressField()->setText(n.address);
    QTest::mouseClick(panel->findChild<QPushButton*>("pairAddressButton"), Qt::LeftButton);
    QInputDialog* dialog = panel->pairDialog();
    QVERIFY(dialog);
    QTRY_VERIFY(dialog->isVisible());
    dialog->setTextValue(n.pairingCode.toLower());  // typed by a person: any case
    dialog->accept();

    QTRY_VERIFY_WITH_TIMEOUT(added.count() == 1 || !failed.isEmpty(), kNetworkStepMs);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    QCOMPARE(paired.count(), 1);
    QCOMPARE(added.first().at(1).toString(), n.name);
    lan::TrustStore trust;
    trust.load(m_appConfig.toStdString());
    QVERIFY(trust.isTrusted(paired.first().at(0).toString().toStdString()));
    // The member's device shows on the page from live telemetry.
    QTRY_VERIFY_WITH_TIMEOUT(view.cards().size() == 1, 30000);
    QTRY_VERIFY(panel->members().join(' ').contains(n.name));
  }
};

QTEST_MAIN(TestPoolLive)
#include "test_pool_live.moc"
