#pragma once
// Starts tests/hub/fake_hub.py (a local stand-in for the Hugging Face Hub) as a child process for
// a QtTest: writes its config, waits for its port file, reads its request log. Header-only; the
// test defines SHOAL_SOURCE_DIR (shoal_add_test does).

#include <QByteArray>
#include <QCryptographicHash>
#include <QDeadlineTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QString>
#include <QThread>
#include <vector>

namespace shoal::testing {

class FakeHubProcess {
 public:
  FakeHubProcess() = default;
  FakeHubProcess(const FakeHubProcess&) = delete;
  FakeHubProcess& operator=(const FakeHubProcess&) = delete;
  ~FakeHubProcess() { stop(); }

  // Starts the server with `config` (fake_hub.py's CONFIG.json) in `dir`; false and `error` set
  // when it does not come up within 20 s.
  bool start(const QString& dir, const QJsonObject& config, QString* error) {
    m_dir = dir;
    const QString configPath = dir + "/fake_hub_config.json";
    m_portFile = dir + "/fake_hub.port";
    m_logFile = dir + "/fake_hub_log.jsonl";
    QFile::remove(m_portFile);
    QFile::remove(m_logFile);
    QFile f(configPath);
    if (!f.open(QIODevice::WriteOnly)) return fail(error, "cannot write " + configPath);
    f.write(QJsonDocument(config).toJson());
    f.close();
    m_process.setProcessChannelMode(QProcess::ForwardedChannels);
    m_process.start("python3", {QString(SHOAL_SOURCE_DIR) + "/tests/hub/fake_hub.py", "--config",
                                configPath, "--port-file", m_portFile, "--log", m_logFile});
    if (!m_process.waitForStarted(10000)) return fail(error, "python3 did not start");
    QDeadlineTimer deadline(20000);
    while (!deadline.hasExpired()) {
      QFile portFile(m_portFile);
      if (portFile.open(QIODevice::ReadOnly)) {
        m_port = portFile.readAll().trimmed().toInt();
        if (m_port > 0) return true;
      }
      if (m_process.state() == QProcess::NotRunning) return fail(error, "fake_hub.py exited");
      QThread::msleep(20);
    }
    return fail(error, "fake_hub.py wrote no port file within 20 s");
  }

  void stop() {
    if (m_process.state() != QProcess::NotRunning) {
      m_process.kill();
      m_process.waitForFinished(10000);
    }
  }

  int port() const { return m_port; }
  QString endpoint() const { return "http://127.0.0.1:" + QString::number(m_port); }

  // Every request the server received so far, in order (the server logs before answering).
  std::vector<QJsonObject> requests() const {
    std::vector<QJsonObject> out;
    QFile f(m_logFile);
    if (!f.open(QIODevice::ReadOnly)) return out;
    for (const QByteArray& line : f.readAll().split('\n')) {
      if (!line.trimmed().isEmpty()) out.push_back(QJsonDocument::fromJson(line).object());
    }
    return out;
  }

 private:
  static bool fail(QString* error, const QString& why) {
    if (error) *error = why;
    return false;
  }

  QProcess m_process;
  QString m_dir;
  QString m_portFile;
  QString m_logFile;
  int m_port = 0;
};

// A file of `size` deterministic pseudo-random bytes (the client never parses model bytes).
inline bool writeBytesFile(const QString& path, qint64 size, quint32 seed) {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly)) return false;
  QByteArray data(size, '\0');
  quint32 x = seed * 2654435761u + 1;
  for (qint64 i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    data[i] = static_cast<char>(x & 0xff);
  }
  return f.write(data) == size;
}

inline QString sha256Of(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  QCryptographicHash hash(QCryptographicHash::Sha256);
  hash.addData(&f);
  return QString::fromLatin1(hash.result().toHex());
}

}  // namespace shoal::testing
