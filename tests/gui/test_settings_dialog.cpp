// The Settings dialog: its values persist in QSettings, every backend is listed with the reason
// an unavailable one cannot be used, and the API toggle starts the OpenAI-compatible server in
// the app (GET /health answers on its port) and stops it again (the port refuses connections).

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QEventLoop>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QtTest>
#include <memory>

#include "app/gui/app_settings.h"
#include "app/gui/chat_engine.h"
#include "app/gui/chat_window.h"
#include "app/gui/settings_dialog.h"
#include "kernels/backend_registry.h"

using namespace shoal::gui;

namespace {

constexpr int kLoadTimeoutMs = 120000;
constexpr int kApiTimeoutMs = 60000;

QString modelPath() { return QDir(SHOAL_MODELS_DIR).filePath("SmolLM2-135M-Instruct.Q4_1.gguf"); }

template <typename T>
T* child(QWidget* w, const char* name) {
  T* c = w->findChild<T*>(name);
  if (!c) qFatal("widget %s not found", name);
  return c;
}

// GET http://127.0.0.1:port/path; the HTTP status, or -1 when no answer came.
int httpGet(int port, const QString& path, QByteArray* body = nullptr) {
  QNetworkAccessManager net;
  QNetworkRequest request(QUrl(QString("http://127.0.0.1:%1%2").arg(port).arg(path)));
  request.setTransferTimeout(kApiTimeoutMs);
  std::unique_ptr<QNetworkReply> reply(net.get(request));
  QEventLoop loop;
  QObject::connect(reply.get(), &QNetworkReply::finished, &loop, &QEventLoop::quit);
  loop.exec();
  if (body) *body = reply->readAll();
  const QVariant status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute);
  return status.isValid() ? status.toInt() : -1;
}

// POST a JSON body; the HTTP status, or -1 when no answer came.
int httpPost(int port, const QString& path, const QByteArray& json, QByteArray* body) {
  QNetworkAccessManager net;
  QNetworkRequest request(QUrl(QString("http://127.0.0.1:%1%2").arg(port).arg(path)));
  request.setHeader(QNetworkRequest::ContentTypeHeader, "application/json");
  request.setTransferTimeout(kApiTimeoutMs);
  std::unique_ptr<QNetworkReply> reply(net.post(request, json));
  QEventLoop loop;
  QObject::connect(reply.get(), &QNetworkReply::finished, &loop, &QEventLoop::quit);
  loop.exec();
  *body = reply->readAll();
  const QVariant status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute);
  return status.isValid() ? status.toInt() : -1;
}

}  // namespace

class TestSettingsDialog : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<QTemporaryDir> m_dataDir;

 private slots:
  void init() {
    m_dataDir = std::make_unique<QTemporaryDir>();
    QVERIFY(m_dataDir->isValid());
    qputenv("SHOAL_DATA_DIR", m_dataDir->path().toLocal8Bit());
  }

  void cleanup() {
    qunsetenv("SHOAL_DATA_DIR");
    m_dataDir.reset();
  }

  void acceptedValuesAreSavedAndReadBack() {
    ChatWindow w(m_dataDir->filePath("none.gguf"), m_dataDir->path());
    SettingsDialog* d = w.openSettings();
    child<QSpinBox>(d, "threads")->setValue(3);
    child<QLineEdit>(d, "nodeName")->setText("kitchen");
    child<QLineEdit>(d, "modelsDir")->setText(m_dataDir->path());
    child<QSpinBox>(d, "apiPort")->setValue(9123);
    d->accept();
    const AppSettings s = AppSettings::load();
    QCOMPARE(s.threads, 3);
    QCOMPARE(s.nodeName, QString("kitchen"));
    QCOMPARE(s.modelsDir, m_dataDir->path());
    QCOMPARE(s.apiPort, 9123);
    QVERIFY(!s.apiEnabled);
    QCOMPARE(w.appSettings().threads, 3);
  }

  void everyBackendIsListedAndAnUnavailableOneSaysWhy() {
    ChatWindow w(m_dataDir->filePath("none.gguf"), m_dataDir->path());
    SettingsDialog* d = w.openSettings();
    auto* combo = child<QComboBox>(d, "backend");
    const std::vector<std::string> names = shoal::kernels::backendNames();
    QCOMPARE(combo->count(), static_cast<int>(names.size()));
    const QString reasons = child<QLabel>(d, "backendReasons")->text();
    auto* items = qobject_cast<QStandardItemModel*>(combo->model());
    QVERIFY(items);
    for (int i = 0; i < combo->count(); ++i) {
      const std::string name = combo->itemData(i, Qt::UserRole).toString().toStdString();
      const auto backend = shoal::kernels::createBackend(name, {});
      const auto a = backend->availability();
      QCOMPARE(items->item(i)->isEnabled(), a.available);
      if (!a.available) {
        QVERIFY2(reasons.contains(QString::fromStdString(a.reason)), qPrintable(reasons));
      }
    }
    QVERIFY(child<QComboBox>(d, "device")->count() >= 1);  // the CPU is always there
    d->reject();
  }

  void closingTheWindowWhileTheApiServesReturns() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    auto w = std::make_unique<ChatWindow>(modelPath(), m_dataDir->path());
    QTRY_VERIFY_WITH_TIMEOUT(w->isModelLoaded(), kLoadTimeoutMs);
    QSignalSpy started(w->engine(), &ChatEngine::apiStarted);
    SettingsDialog* d = w->openSettings();
    child<QCheckBox>(d, "apiEnabled")->setChecked(true);
    child<QLineEdit>(d, "apiHost")->setText("127.0.0.1");
    child<QSpinBox>(d, "apiPort")->setValue(0);
    d->accept();
    QTRY_VERIFY_WITH_TIMEOUT(started.count() > 0, kApiTimeoutMs);
    const int port = started.at(0).at(1).toInt();
    QByteArray body;
    QCOMPARE(httpGet(port, "/health", &body), 200);
    w.reset();  // must stop the server and return (QtTest's watchdog fails a hang)
    QTcpSocket socket;
    socket.connectToHost(QHostAddress::LocalHost, static_cast<quint16>(port));
    QVERIFY(!socket.waitForConnected(2000));
  }

  void apiToggleServesHealthAndStopsServing() {
    if (!QFile::exists(modelPath())) QSKIP("default model not present");
    ChatWindow w(modelPath(), m_dataDir->path());
    QTRY_VERIFY_WITH_TIMEOUT(w.isModelLoaded(), kLoadTimeoutMs);
    QSignalSpy started(w.engine(), &ChatEngine::apiStarted);
    QSignalSpy stopped(w.engine(), &ChatEngine::apiStopped);
    QSignalSpy failed(w.engine(), &ChatEngine::apiFailed);

    SettingsDialog* d = w.openSettings();
    child<QCheckBox>(d, "apiEnabled")->setChecked(true);
    child<QLineEdit>(d, "apiHost")->setText("127.0.0.1");
    child<QSpinBox>(d, "apiPort")->setValue(0);  // any free port: the engine reports which
    d->accept();
    QTRY_VERIFY_WITH_TIMEOUT(started.count() + failed.count() > 0, kApiTimeoutMs);
    QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.at(0).at(0).toString()));
    const int port = started.at(0).at(1).toInt();
    QVERIFY(port > 0);
    // The window hears of it through a queued signal, after the spy (which listens directly).
    QTRY_VERIFY_WITH_TIMEOUT(w.apiStatus().contains(QString::number(port)), kApiTimeoutMs);

    QByteArray body;
    QCOMPARE(httpGet(port, "/health", &body), 200);
    // One engine: the API's requests and the chat's replies share the chain's slots (the chat's
    // one and kApiParallel more, reloaded with them when the API was turned on).
    const QJsonObject queue = QJsonDocument::fromJson(body).object().value("queue").toObject();
    QCOMPARE(queue.value("slots").toInt(), 1 + kApiParallel);
    QByteArray models;
    QCOMPARE(httpGet(port, "/v1/models", &models), 200);
    QVERIFY2(models.contains("SmolLM2"), models.constData());
    // The server generates with the loaded model, on the chat's engine.
    QByteArray completion;
    QCOMPARE(
        httpPost(port, "/v1/chat/completions",
                 R"({"model":"default","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,)"
                 R"("temperature":0})",
                 &completion),
        200);
    QVERIFY2(completion.contains("\"choices\""), completion.constData());

    d = w.openSettings();
    QVERIFY(child<QCheckBox>(d, "apiEnabled")->isChecked());
    child<QCheckBox>(d, "apiEnabled")->setChecked(false);
    d->accept();
    QTRY_COMPARE_WITH_TIMEOUT(stopped.count(), 1, kApiTimeoutMs);
    QTRY_VERIFY_WITH_TIMEOUT(w.apiStatus().isEmpty(), kApiTimeoutMs);

    QTcpSocket socket;
    socket.connectToHost(QHostAddress::LocalHost, static_cast<quint16>(port));
    QVERIFY(!socket.waitForConnected(kApiTimeoutMs));
    QCOMPARE(socket.error(), QAbstractSocket::ConnectionRefusedError);
  }
};

QTEST_MAIN(TestSettingsDialog)
#include "test_settings_dialog.moc"
