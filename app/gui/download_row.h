#pragma once
// The Discover tab's download bar: which model is being fetched, a progress bar, the rate and
// the time left, and Pause / Resume / Cancel. A pause stops the transfer and keeps the partial
// file; Resume downloads again, which continues it with a Range request; Cancel stops and removes
// the partial file. The transfer itself runs in the HubWorker (hub_worker.h).

#include <QWidget>

#include "lan/hub/hub_types.h"

class QLabel;
class QProgressBar;
class QPushButton;

namespace shoal::gui {

class HubWorker;

class DownloadRow : public QWidget {
  Q_OBJECT

 public:
  enum class State { Idle, Running, Paused, Stopping };

  DownloadRow(HubWorker* worker, QWidget* parent = nullptr);

  State state() const { return m_state; }
  // Starts (or, when `model` is the paused one, resumes) a download into modelsDir. False when
  // another download runs.
  bool start(const QString& repo, const lan::hub::ModelFile& model, const QString& modelsDir);

 public slots:
  void pause();
  void resume();
  void cancel();

 signals:
  void finished(const QString& path);  // the first part's path in the models directory
  void failed(const QString& message);
  void stateChanged();

 private:
  void setState(State s);
  void onProgress(const lan::hub::DownloadProgress& p);
  void onFinished(const QString& path);
  void onFailed(const QString& message, bool cancelled);

  HubWorker* m_worker;
  State m_state = State::Idle;
  bool m_cancelling = false;  // the stop in flight is a Cancel, not a pause
  QString m_repo;
  lan::hub::ModelFile m_model;
  QString m_modelsDir;
  QLabel* m_name = nullptr;
  QProgressBar* m_bar = nullptr;
  QLabel* m_rate = nullptr;  // "12.3 MiB/s · 1 min 20 s left"
  QPushButton* m_pause = nullptr;
  QPushButton* m_resume = nullptr;
  QPushButton* m_cancel = nullptr;
};

// "1 h 5 min", "3 min 20 s", "12 s": the time left for people.
QString formatEta(double seconds);

}  // namespace shoal::gui
