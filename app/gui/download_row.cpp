#include "app/gui/download_row.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <cmath>

#include "app/gui/hub_worker.h"
#include "app/gui/model_catalog.h"

namespace shoal::gui {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kBarSteps = 1000;  // QProgressBar counts in int: permille of the bytes

}  // namespace

QString formatEta(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return QString();
  const auto s = static_cast<qint64>(std::llround(seconds));
  if (s >= 3600) return QObject::tr("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60);
  if (s >= 60) return QObject::tr("%1 min %2 s").arg(s / 60).arg(s % 60);
  return QObject::tr("%1 s").arg(s);
}

DownloadRow::DownloadRow(HubWorker* worker, QWidget* parent) : QWidget(parent), m_worker(worker) {
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  m_name = new QLabel;
  m_name->setObjectName("downloadName");
  m_bar = new QProgressBar;
  m_bar->setObjectName("downloadProgress");
  m_bar->setRange(0, kBarSteps);
  m_rate = new QLabel;
  m_rate->setObjectName("downloadRate");
  m_pause = new QPushButton(tr("Pause"));
  m_pause->setObjectName("pauseDownloadButton");
  m_resume = new QPushButton(tr("Resume"));
  m_resume->setObjectName("resumeDownloadButton");
  m_cancel = new QPushButton(tr("Cancel"));
  m_cancel->setObjectName("cancelDownloadButton");
  layout->addWidget(m_name);
  layout->addWidget(m_bar, 1);
  layout->addWidget(m_rate);
  layout->addWidget(m_pause);
  layout->addWidget(m_resume);
  layout->addWidget(m_cancel);
  connect(m_pause, &QPushButton::clicked, this, &DownloadRow::pause);
  connect(m_resume, &QPushButton::clicked, this, &DownloadRow::resume);
  connect(m_cancel, &QPushButton::clicked, this, &DownloadRow::cancel);
  connect(m_worker, &HubWorker::downloadProgress, this, &DownloadRow::onProgress);
  connect(m_worker, &HubWorker::downloadFinished, this, &DownloadRow::onFinished);
  connect(m_worker, &HubWorker::downloadFailed, this, &DownloadRow::onFailed);
  setState(State::Idle);
}

bool DownloadRow::start(const QString& repo, const lan::hub::ModelFile& model,
                        const QString& modelsDir) {
  if (m_state == State::Running || m_state == State::Stopping) return false;
  if (m_state == State::Paused && (repo != m_repo || model.name != m_model.name)) {
    // Another model: the paused one stays in .partial and resumes when downloaded again.
    m_bar->setValue(0);
  }
  m_repo = repo;
  m_model = model;
  m_modelsDir = modelsDir;
  m_cancelling = false;
  if (!m_worker->download(repo, model, modelsDir)) return false;
  m_name->setText(QString::fromStdString(model.name));
  m_rate->setText(tr("starting…"));
  setState(State::Running);
  return true;
}

void DownloadRow::pause() {
  if (m_state != State::Running) return;
  m_cancelling = false;
  m_worker->stopDownload(false);
  setState(State::Stopping);
}

void DownloadRow::resume() {
  if (m_state == State::Paused) start(m_repo, m_model, m_modelsDir);
}

void DownloadRow::cancel() {
  if (m_state == State::Running) {
    m_cancelling = true;
    m_worker->stopDownload(true);
    setState(State::Stopping);
  } else if (m_state == State::Paused) {
    m_worker->discardPartial(m_model, m_modelsDir);
    m_rate->setText(tr("cancelled"));
    m_bar->setValue(0);
    setState(State::Idle);
  }
}

void DownloadRow::onProgress(const lan::hub::DownloadProgress& p) {
  if (m_state != State::Running) return;
  if (p.totalBytes > 0) {
    m_bar->setValue(static_cast<int>(static_cast<double>(p.doneBytes) * kBarSteps /
                                     static_cast<double>(p.totalBytes)));
  }
  QString text = p.verifying
                     ? tr("checking SHA-256…")
                     : tr("%1 / %2").arg(formatBytes(p.doneBytes), formatBytes(p.totalBytes));
  if (!p.verifying && p.bytesPerS > 0) {
    text += tr(" · %1 MiB/s").arg(p.bytesPerS / kMiB, 0, 'f', 1);
    if (p.totalBytes > p.doneBytes) {
      text += tr(" · %1 left")
                  .arg(formatEta(static_cast<double>(p.totalBytes - p.doneBytes) / p.bytesPerS));
    }
  }
  if (p.parts > 1) text += tr(" · part %1 of %2").arg(p.part + 1).arg(p.parts);
  m_rate->setText(text);
}

void DownloadRow::onFinished(const QString& path) {
  m_bar->setValue(kBarSteps);
  m_rate->setText(tr("done"));
  setState(State::Idle);
  emit finished(path);
}

void DownloadRow::onFailed(const QString& message, bool cancelled) {
  if (cancelled && !m_cancelling) {
    m_rate->setText(tr("paused"));
    setState(State::Paused);
    return;
  }
  if (cancelled) {
    m_rate->setText(tr("cancelled"));
    m_bar->setValue(0);
    setState(State::Idle);
    return;
  }
  // The partial file is kept: Resume tries again from where it stopped.
  m_rate->setText(tr("failed"));
  setState(State::Paused);
  emit failed(message);
}

void DownloadRow::setState(State s) {
  m_state = s;
  setVisible(s != State::Idle || !m_name->text().isEmpty());
  m_pause->setVisible(s == State::Running || s == State::Stopping);
  m_pause->setEnabled(s == State::Running);
  m_resume->setVisible(s == State::Paused);
  m_cancel->setEnabled(s == State::Running || s == State::Paused);
  emit stateChanged();
}

}  // namespace shoal::gui
