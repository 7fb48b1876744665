#include "app/gui/welcome_page.h"

#include <signal.h>
#include <unistd.h>

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QStandardPaths>
#include <QVBoxLayout>

#include "engine/model/default_model.h"

namespace shoal::gui {
namespace {

constexpr const char* kScript = "shoal-fetch-default-model";
constexpr int kKillWaitMs = 3000;

}  // namespace

QString fetchDefaultModelScript() {
  const QString env = qEnvironmentVariable("SHOAL_FETCH_DEFAULT_MODEL");
  if (!env.isEmpty()) return env;
  const QString beside = QDir(QCoreApplication::applicationDirPath()).filePath(kScript);
  if (QFileInfo(beside).isFile()) return beside;
#if defined(SHOAL_GUI_SOURCE_DIR)
  // Only from the build tree (compared path component by component): an installed app never
  // reaches into a source checkout.
  if (model::runsFromBuildTree()) {
    const QString source =
        QDir(QStringLiteral(SHOAL_GUI_SOURCE_DIR)).filePath("installers/" + QString(kScript));
    if (QFileInfo(source).isFile()) return source;
  }
#endif
  return QStandardPaths::findExecutable(kScript);
}

WelcomePage::WelcomePage(const QString& modelsDir, QWidget* parent)
    : QWidget(parent), m_modelsDir(modelsDir) {
  auto* outer = new QVBoxLayout(this);
  outer->addStretch(1);
  auto* title = new QLabel(tr("<h1>Welcome to Shoal</h1>"));
  title->setAlignment(Qt::AlignCenter);
  auto* text = new QLabel(
      tr("Shoal chats with language models that run on this computer (and on the other computers "
         "of your pool). There is no model here yet: download a small one to start, or find "
         "another on Hugging Face — Shoal tells you before downloading whether it runs here."));
  text->setWordWrap(true);
  text->setAlignment(Qt::AlignCenter);
  text->setMaximumWidth(640);
  outer->addWidget(title);
  auto* textRow = new QHBoxLayout;
  textRow->addStretch(1);
  textRow->addWidget(text);
  textRow->addStretch(1);
  outer->addLayout(textRow);

  m_fetch = new QPushButton(tr("Download the default model (SmolLM2-135M-Instruct, ~100 MB)"));
  m_fetch->setObjectName("fetchDefaultModelButton");
  m_fetch->setDefault(true);
  m_find = new QPushButton(tr("Find a model"));
  m_find->setObjectName("findModelButton");
  auto* buttons = new QHBoxLayout;
  buttons->addStretch(1);
  buttons->addWidget(m_fetch);
  buttons->addWidget(m_find);
  buttons->addStretch(1);
  outer->addLayout(buttons);

  m_busy = new QProgressBar;
  m_busy->setObjectName("fetchProgress");
  m_busy->setRange(0, 0);  // the script reports no fraction
  m_busy->setMaximumWidth(480);
  m_cancel = new QPushButton(tr("Cancel"));
  m_cancel->setObjectName("cancelFetchButton");
  auto* busyRow = new QHBoxLayout;
  busyRow->addStretch(1);
  busyRow->addWidget(m_busy, 1);
  busyRow->addWidget(m_cancel);
  busyRow->addStretch(1);
  outer->addLayout(busyRow);
  m_status = new QLabel;
  m_status->setObjectName("welcomeStatus");
  m_status->setAlignment(Qt::AlignCenter);
  m_status->setWordWrap(true);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  outer->addWidget(m_status);
  m_log = new QPlainTextEdit;
  m_log->setObjectName("fetchLog");
  m_log->setReadOnly(true);
  m_log->setMaximumHeight(140);
  m_log->hide();
  outer->addWidget(m_log);
  outer->addStretch(2);

  m_process.setProcessChannelMode(QProcess::MergedChannels);
  connect(&m_process, &QProcess::readyRead, this, &WelcomePage::onOutput);
  connect(&m_process, &QProcess::finished, this, &WelcomePage::onFinished);
  connect(&m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;  // the others end in finished()
    setBusy(false);
    m_status->setText(tr("Could not run %1: %2").arg(m_process.program(), m_process.errorString()));
  });
  connect(m_fetch, &QPushButton::clicked, this, &WelcomePage::fetchDefaultModel);
  connect(m_find, &QPushButton::clicked, this, &WelcomePage::findModelRequested);
  connect(m_cancel, &QPushButton::clicked, this, &WelcomePage::cancel);
  setBusy(false);
}

WelcomePage::~WelcomePage() {
  if (isFetching()) {
    signalFetch(SIGTERM);
    if (!m_process.waitForFinished(kKillWaitMs)) {
      signalFetch(SIGKILL);
      m_process.waitForFinished(kKillWaitMs);
    }
  }
}

void WelcomePage::fetchDefaultModel() {
  if (isFetching()) return;
  const QString script = fetchDefaultModelScript();
  if (script.isEmpty()) {
    m_status->setText(
        tr("shoal-fetch-default-model was not found; reinstall Shoal, or use "
           "\"Find a model\"."));
    return;
  }
  m_cancelled = false;
  m_lastLine.clear();
  m_log->clear();
  m_log->show();
  m_status->setText(
      tr("Downloading the default model into %1…").arg(QDir::toNativeSeparators(m_modelsDir)));
  setBusy(true);
  // Its own process group, so Cancel stops the whole fetch (the script and the pip it runs).
  m_process.setChildProcessModifier([] { ::setpgid(0, 0); });
  // An executable script runs itself; one that lost its mode bit (a copied tree) runs in sh.
  if (QFileInfo(script).isExecutable()) {
    m_process.start(script, {m_modelsDir});
  } else {
    m_process.start(QStringLiteral("/bin/sh"), {script, m_modelsDir});
  }
}

void WelcomePage::cancel() {
  if (!isFetching()) return;
  m_cancelled = true;
  signalFetch(SIGTERM);
}

void WelcomePage::signalFetch(int signal) {
  // The script runs in a process group of its own (see fetchDefaultModel): the signal reaches
  // pip too, which a shell waiting on it would not pass on; the script's TERM trap then exits
  // and its EXIT trap removes the temporary directory.
  const qint64 pid = m_process.processId();
  if (pid > 0) ::kill(-static_cast<pid_t>(pid), signal);
}

void WelcomePage::onOutput() {
  while (m_process.canReadLine()) {
    const QString line = QString::fromLocal8Bit(m_process.readLine()).trimmed();
    if (line.isEmpty()) continue;
    m_lastLine = line;
    m_log->appendPlainText(line);
  }
}

void WelcomePage::onFinished(int exitCode, QProcess::ExitStatus status) {
  const QString rest = QString::fromLocal8Bit(m_process.readAll()).trimmed();
  for (const QString& line : rest.split('\n', Qt::SkipEmptyParts)) {
    m_lastLine = line.trimmed();
    m_log->appendPlainText(m_lastLine);
  }
  setBusy(false);
  const QString path = QDir(m_modelsDir).filePath(model::kDefaultModelFile);
  if (m_cancelled) {
    m_status->setText(tr("Cancelled."));
  } else if (status == QProcess::NormalExit && exitCode == 0 && QFileInfo(path).isFile()) {
    m_status->setText(tr("Downloaded %1.").arg(QDir::toNativeSeparators(path)));
    emit modelReady(path);
  } else {
    m_status->setText(
        tr("The download failed: %1")
            .arg(m_lastLine.isEmpty() ? tr("exit code %1").arg(exitCode) : m_lastLine));
  }
}

void WelcomePage::setBusy(bool busy) {
  m_busy->setVisible(busy);
  m_cancel->setVisible(busy);
  m_fetch->setEnabled(!busy);
}

}  // namespace shoal::gui
