// Un-pairing from the "Devices & pool" page: every device the app trusts is listed, heard on the
// LAN or not, with a Forget button that removes it from the app's trusted.json; forgetting a
// member (a real shoal-node on loopback) also takes it out of the pool.

#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTreeWidget>
#include <QtTest>

#include "app/gui/pool_controller.h"
#include "app/gui/pool_setup_panel.h"
#include "app/gui/pool_view.h"
#include "lan/transport/identity.h"
#include "lan/transport/trust_store.h"

using namespace shoal;
using namespace shoal::gui;

namespace {

// Bounded waits, never asserted as timings.
constexpr int kStartMs = 30000;
constexpr int kNetworkMs = 60000;

QTreeWidgetItem* rowNamed(QTreeWidget* list, const QString& name) {
  for (int i = 0; i < list->topLevelItemCount(); ++i) {
    if (list->topLevelItem(i)->text(0) == name) return list->topLevelItem(i);
  }
  return nullptr;
}

QPushButton* forgetButtonOf(QTreeWidget* list, const QString& name) {
  QTreeWidgetItem* row = rowNamed(list, name);
  return row ? qobject_cast<QPushButton*>(list->itemWidget(row, 4)) : nullptr;
}

bool trustedOnDisk(const QString& configDir, const std::string& id) {
  lan::TrustStore store;
  store.load(configDir.toStdString());
  return store.isTrusted(id);
}

}  // namespace

class TestPoolForget : public QObject {
  Q_OBJECT

  QTemporaryDir m_dir;

  // Starts the controller (no discovery) on `configDir`, attached to `view`.
  static void start(PoolControllerThread& thread, PoolView& view, const QString& configDir) {
    view.attachController(thread.controller());
    PoolController* c = thread.controller();
    QSignalSpy started(c, &PoolController::started);
    QMetaObject::invokeMethod(
        c, [c, configDir] { c->start(configDir, "test-app", false, 0); }, Qt::QueuedConnection);
    QTRY_COMPARE_WITH_TIMEOUT(started.count(), 1, kStartMs);
  }

 private slots:
  void aTrustedDeviceNotHeardIsListedAndForgottenWithItsButton() {
    const QString config = m_dir.filePath("offline");
    const std::string laptop = lan::createIdentity().deviceId;
    {
      lan::TrustStore store;
      store.load(config.toStdString());
      store.add(laptop, "old-laptop");
    }
    PoolControllerThread thread;
    PoolView view;
    view.show();
    start(thread, view, config);
    QTreeWidget* list = view.setupPanel()->nodeList();
    QTRY_VERIFY(rowNamed(list, "old-laptop") != nullptr);
    QCOMPARE(rowNamed(list, "old-laptop")->text(2), QString("trusted"));
    QPushButton* forget = forgetButtonOf(list, "old-laptop");
    QVERIFY(forget);
    QCOMPARE(forget->objectName(), QString("forgetButton"));

    QSignalSpy forgotten(thread.controller(), &PoolController::forgotten);
    QTest::mouseClick(forget, Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(forgotten.count(), 1, kStartMs);
    QVERIFY(!trustedOnDisk(config, laptop));
    QTRY_VERIFY(rowNamed(list, "old-laptop") == nullptr);
    QVERIFY(view.setupPanel()->statusText().contains("Forgot old-laptop"));
  }

  void forgettingAMemberTakesItOutOfThePool() {
    const QString config = m_dir.filePath("member");
    const QString nodeConfig = m_dir.filePath("member-node");
    const std::string appId = lan::loadOrCreateIdentity(config.toStdString()).deviceId;
    QProcess idRun;
    idRun.start(SHOAL_NODE_BINARY, {"--print-device-id", "--config-dir", nodeConfig});
    QVERIFY(idRun.waitForFinished(kNetworkMs) && idRun.exitCode() == 0);
    const std::string nodeId = idRun.readAllStandardOutput().trimmed().toStdString();
    {
      lan::TrustStore store;
      store.load(config.toStdString());
      store.add(nodeId, "node-f");
    }
    QProcess node;
    node.setProcessChannelMode(QProcess::ForwardedErrorChannel);
    node.start(SHOAL_NODE_BINARY, {"--name", "node-f", "--port", "0", "--bind", "127.0.0.1",
                                   "--no-discovery", "--threads", "1", "--config-dir", nodeConfig,
                                   "--trust", QString::fromStdString(appId)});
    QString out;
    static const QRegularExpression portLine("device \\S+ port (\\d+)");
    while (!portLine.match(out).hasMatch() && node.waitForReadyRead(kNetworkMs))
      out += QString::fromUtf8(node.readAllStandardOutput());
    QVERIFY2(portLine.match(out).hasMatch(), qPrintable(out));
    const QString address = "127.0.0.1:" + portLine.match(out).captured(1);

    PoolControllerThread thread;
    PoolView view;
    view.show();
    start(thread, view, config);
    PoolController* c = thread.controller();
    QSignalSpy added(c, &PoolController::nodeAdded);
    QSignalSpy failed(c, &PoolController::failed);
    QMetaObject::invokeMethod(
        c, [c, address] { c->addNode(address); }, Qt::QueuedConnection);
    QTRY_VERIFY_WITH_TIMEOUT(added.count() == 1 || !failed.isEmpty(), kNetworkMs);
    QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
    QTreeWidget* list = view.setupPanel()->nodeList();
    QTRY_COMPARE(rowNamed(list, "node-f") ? rowNamed(list, "node-f")->text(2) : QString(),
                 QString("in the pool"));

    QTest::mouseClick(forgetButtonOf(list, "node-f"), Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(view.setupPanel()->members().isEmpty(), kNetworkMs);
    QVERIFY(!trustedOnDisk(config, nodeId));
    QTRY_VERIFY(rowNamed(list, "node-f") == nullptr);
    // Adding it again is refused: it is no longer trusted.
    QMetaObject::invokeMethod(
        c, [c, address] { c->addNode(address); }, Qt::QueuedConnection);
    QTRY_VERIFY_WITH_TIMEOUT(!failed.isEmpty(), kNetworkMs);
    QCOMPARE(added.count(), 1);

    node.terminate();
    if (!node.waitForFinished(30000)) node.kill();
  }
};

QTEST_MAIN(TestPoolForget)
#include "test_pool_forget.moc"
