// "Let other computers use this one" on the pool page (share_panel.h), against the app's real
// in-process node (PoolController::shareThisComputer) on loopback: the panel shows the node's
// device ID and address, Show pairing code gets a fresh code from the controller's thread, and
// another computer's coordinator — the real shoal-cli, `pool pair ADDRESS CODE` with its own
// config dir — pairs with it: both sides then trust each other. A code replaced by New code
// pairs no one. No model is needed.

#include <QClipboard>
#include <QGuiApplication>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>

#include "app/gui/pool_controller.h"
#include "app/gui/pool_view.h"
#include "app/gui/share_panel.h"
#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"

using namespace shoal;
using namespace shoal::gui;

namespace {

// Bounded waits, never asserted as timings (the node measures this CPU when it starts).
constexpr int kStartMs = 60000;
constexpr int kNetworkMs = 60000;

bool trusts(const QString& configDir, const QString& deviceId) {
  lan::TrustStore store;
  store.load(configDir.toStdString());
  return store.isTrusted(deviceId.toStdString());
}

struct PairRun {
  int exitCode = -1;
  QString out;
};

// `shoal-cli pool pair ADDRESS CODE` as the other computer runs it.
PairRun pairFromCli(const QString& clientConfig, const QString& address, const QString& code) {
  QProcess p;
  p.setProcessChannelMode(QProcess::MergedChannels);
  p.start(SHOAL_CLI_BINARY, {"pool", "pair", address, code, "--config-dir", clientConfig, "--name",
                             "other-computer", "--json"});
  PairRun r;
  if (!p.waitForFinished(kNetworkMs)) return r;
  r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.out = QString::fromUtf8(p.readAll());
  return r;
}

}  // namespace

class TestPoolShare : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;

 private slots:
  void initTestCase() {
    // Discovery runs as in the app, confined to loopback (CTest sets it too).
    if (!qEnvironmentVariableIsSet("SHOAL_DISCOVERY_INTERFACES"))
      qputenv("SHOAL_DISCOVERY_INTERFACES", "lo");
    QVERIFY(m_dir.isValid());
  }

  void anotherComputerPairsWithTheCodeThePageShows() {
    const QString config = m_dir.filePath("app-pool");
    const QString models = m_dir.filePath("models");
    QVERIFY(QDir().mkpath(models));

    PoolControllerThread thread;
    PoolView view;
    view.attachController(thread.controller());
    view.show();
    SharePanel* share = view.sharePanel();
    QVERIFY(share);
    QVERIFY(!share->showCodeButton()->isEnabled());  // nothing to pair with yet
    QVERIFY(!share->showCodeButton()->isVisibleTo(&view));

    PoolController* c = thread.controller();
    QSignalSpy started(c, &PoolController::started);
    QSignalSpy sharing(c, &PoolController::sharing);
    QMetaObject::invokeMethod(
        c,
        [c, config, models] {
          c->start(config, "test-app", true, 0);
          c->shareThisComputer(models);
        },
        Qt::QueuedConnection);
    QTRY_COMPARE_WITH_TIMEOUT(started.count(), 1, kStartMs);
    QTRY_COMPARE_WITH_TIMEOUT(sharing.count(), 1, kStartMs);
    const QString nodeId = sharing.first().at(0).toString();
    const int port = sharing.first().at(1).toInt();

    // The panel: the node's ID (not the coordinator's), where it listens, a code on request.
    QTRY_COMPARE(share->deviceIdText(), nodeId);
    QVERIFY(share->showCodeButton()->isVisibleTo(&view));
    QVERIFY(nodeId != started.first().at(0).toString());
    QVERIFY(share->copyButton()->isEnabled());
    QTest::mouseClick(share->copyButton(), Qt::LeftButton);
    QCOMPARE(QGuiApplication::clipboard()->text(), nodeId);
    const QString loopback = QStringLiteral("127.0.0.1:%1").arg(port);
    QVERIFY2(share->addressText().split(", ").contains(loopback), qPrintable(share->addressText()));
    QTRY_VERIFY(share->showCodeButton()->isEnabled());
    QVERIFY(share->codeText().isEmpty());
    QTest::mouseClick(share->showCodeButton(), Qt::LeftButton);
    static const QRegularExpression codeShape("^[A-Z0-9]{4}-[A-Z0-9]{4}$");
    QTRY_VERIFY_WITH_TIMEOUT(codeShape.match(share->codeText()).hasMatch(), kNetworkMs);
    const QString code = share->codeText();
    QVERIFY2(share->expiryText().startsWith("valid for "), qPrintable(share->expiryText()));
    QVERIFY(share->newCodeButton()->isVisible());

    // The other computer pairs with the address and code the page shows.
    const QString client = m_dir.filePath("other-computer");
    const QString clientId =
        QString::fromStdString(lan::loadOrCreateIdentity(client.toStdString()).deviceId);
    QVERIFY(!trusts(config + "/node", clientId));
    const PairRun ok = pairFromCli(client, loopback, code);
    QVERIFY2(ok.exitCode == 0, qPrintable(ok.out));
    const QJsonObject answer = QJsonDocument::fromJson(ok.out.trimmed().toUtf8()).object();
    QCOMPARE(answer.value("device_id").toString(), nodeId);  // the ID the page showed
    QVERIFY(trusts(config + "/node", clientId));             // this computer's node trusts it now
    QVERIFY(trusts(client, nodeId));                         // and it pinned this computer's node

    // New code: the one shown before stops working; another computer cannot pair with it.
    QTest::mouseClick(share->newCodeButton(), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(
        codeShape.match(share->codeText()).hasMatch() && share->codeText() != code, kNetworkMs);
    const QString intruder = m_dir.filePath("intruder");
    const QString intruderId =
        QString::fromStdString(lan::loadOrCreateIdentity(intruder.toStdString()).deviceId);
    const PairRun wrong = pairFromCli(intruder, loopback, code);
    QVERIFY2(wrong.exitCode == 1, qPrintable(wrong.out));
    QVERIFY2(wrong.out.contains("pairing with " + loopback + " failed"), qPrintable(wrong.out));
    QVERIFY(!trusts(config + "/node", intruderId));
    QVERIFY(!trusts(intruder, nodeId));
  }

  void withoutSharingNoCodeIsGiven() {
    PoolControllerThread thread;
    PoolView view;
    view.attachController(thread.controller());
    PoolController* c = thread.controller();
    QSignalSpy started(c, &PoolController::started);
    QSignalSpy failed(c, &PoolController::failed);
    QSignalSpy codes(c, &PoolController::pairingCodeReady);
    const QString config = m_dir.filePath("not-shared");
    QMetaObject::invokeMethod(
        c,
        [c, config] {
          c->start(config, "test-app", false, 0);
          c->showPairingCode(SharePanel::kCodeValidSeconds);
        },
        Qt::QueuedConnection);
    QTRY_COMPARE_WITH_TIMEOUT(started.count(), 1, kStartMs);
    QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, kStartMs);
    QVERIFY(failed.first().at(0).toString().contains("not shared"));
    QCOMPARE(codes.count(), 0);
    QVERIFY(!view.sharePanel()->showCodeButton()->isEnabled());
  }
};

QTEST_MAIN(TestPoolShare)
#include "test_pool_share.moc"
