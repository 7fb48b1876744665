#pragma once
// One shoal-node process for the multi-process tests: started on loopback with its own config
// dir, --port 0 and no discovery; its port and device ID read from its start line; stopped with
// SIGTERM (then SIGKILL) by the destructor. Also its resident memory, for tests that bound it.

#include <QProcess>
#include <QRegularExpression>
#include <QString>
#include <QStringList>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace shoal::lan::test {

class NodeProcess {
 public:
  // Runs `exe` with --config-dir configDir --port 0 --bind 127.0.0.1 --no-discovery --threads 1
  // and `extra`; waits (up to a minute) for its start line "device <ID> port <port>".
  NodeProcess(const QString& exe, const std::filesystem::path& configDir,
              const QStringList& extra = {}) {
    QStringList args{"--config-dir",
                     QString::fromStdString(configDir.string()),
                     "--port",
                     "0",
                     "--bind",
                     "127.0.0.1",
                     "--no-discovery",
                     "--threads",
                     "1"};
    args << extra;
    m_process.setProcessChannelMode(QProcess::ForwardedErrorChannel);
    m_process.start(exe, args);
    static const QRegularExpression line("device (\\S+) port (\\d+)");
    while (m_process.waitForReadyRead(60000)) {
      m_stdout += QString::fromUtf8(m_process.readAllStandardOutput());
      const auto m = line.match(m_stdout);
      if (m.hasMatch()) {
        m_deviceId = m.captured(1).toStdString();
        m_port = static_cast<uint16_t>(m.captured(2).toUInt());
        return;
      }
    }
  }
  ~NodeProcess() {
    m_process.terminate();
    if (!m_process.waitForFinished(30000)) m_process.kill();
  }
  NodeProcess(const NodeProcess&) = delete;
  NodeProcess& operator=(const NodeProcess&) = delete;

  // 0 when the node did not start.
  uint16_t port() const { return m_port; }
  const std::string& deviceId() const { return m_deviceId; }

  // What the node printed on stdout so far (waiting up to timeoutMs for more).
  QString stdoutText(int timeoutMs = 0) {
    if (timeoutMs > 0) m_process.waitForReadyRead(timeoutMs);
    m_stdout += QString::fromUtf8(m_process.readAllStandardOutput());
    return m_stdout;
  }

  // Stops the node (SIGTERM) and returns its exit code; -1 when it did not exit normally.
  int exitCodeAfterStop() {
    m_process.terminate();
    m_process.waitForFinished(30000);
    return m_process.exitStatus() == QProcess::NormalExit ? m_process.exitCode() : -1;
  }

  // Sends the node a signal (SIGUSR1: a new pairing code).
  void signal(int sig) { ::kill(static_cast<pid_t>(m_process.processId()), sig); }

  // The node's resident memory (VmRSS of /proc/<pid>/status) in bytes; 0 when unreadable.
  uint64_t residentBytes() const {
    std::ifstream status("/proc/" + std::to_string(m_process.processId()) + "/status");
    std::string key;
    while (status >> key) {
      if (key == "VmRSS:") {
        uint64_t kib = 0;
        status >> kib;
        return kib * 1024;
      }
      status.ignore(1 << 12, '\n');
    }
    return 0;
  }

 private:
  QProcess m_process;
  uint16_t m_port = 0;
  std::string m_deviceId;
  QString m_stdout;
};

}  // namespace shoal::lan::test
