#pragma once
// The app's Settings dialog: CPU threads, preferred backend and device (every backend of the
// registry, an unavailable one disabled with its reason), the models directory, this node's
// name, and the OpenAI-compatible API server (on/off, host, port). It edits an AppSettings
// value; the window applies and saves it when the dialog is accepted.

#include <QDialog>
#include <QList>

#include "app/gui/app_settings.h"
#include "app/gui/device_list.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace shoal::gui {

class SettingsDialog : public QDialog {
  Q_OBJECT

 public:
  SettingsDialog(const AppSettings& settings, const QList<BackendStatus>& backends,
                 QWidget* parent = nullptr);

  AppSettings values() const;
  // The API server's state as the engine last reported it ("Serving on http://…", an error).
  void setApiStatus(const QString& text);

 private:
  void fillDevices();

  AppSettings m_initial;
  QList<BackendStatus> m_backends;
  QSpinBox* m_threads = nullptr;
  QComboBox* m_backend = nullptr;
  QLabel* m_backendReason = nullptr;
  QComboBox* m_device = nullptr;
  QLineEdit* m_draftModel = nullptr;
  QLineEdit* m_modelsDir = nullptr;
  QLineEdit* m_nodeName = nullptr;
  QCheckBox* m_apiEnabled = nullptr;
  QLineEdit* m_apiHost = nullptr;
  QSpinBox* m_apiPort = nullptr;
  QLabel* m_apiStatus = nullptr;
};

}  // namespace shoal::gui
