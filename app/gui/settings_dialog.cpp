#include "app/gui/settings_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QStandardItemModel>
#include <QThread>
#include <QVBoxLayout>

#include "app/gui/model_catalog.h"

namespace shoal::gui {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kMaxPort = 65535;

}  // namespace

SettingsDialog::SettingsDialog(const AppSettings& settings, const QList<BackendStatus>& backends,
                               QWidget* parent)
    : QDialog(parent), m_initial(settings), m_backends(backends) {
  setWindowTitle(tr("Settings"));
  auto* layout = new QVBoxLayout(this);

  auto* compute = new QGroupBox(tr("Compute"));
  auto* computeForm = new QFormLayout(compute);
  m_threads = new QSpinBox;
  m_threads->setObjectName("threads");
  m_threads->setRange(0, kMaxThreads);
  m_threads->setSpecialValueText(tr("automatic (physical cores)"));
  m_threads->setValue(settings.threads);
  computeForm->addRow(tr("CPU threads"), m_threads);
  m_backend = new QComboBox;
  m_backend->setObjectName("backend");
  auto* items = new QStandardItemModel(m_backend);
  for (const BackendStatus& b : m_backends) {
    auto* item = new QStandardItem(b.available ? b.name : tr("%1 (unavailable)").arg(b.name));
    item->setData(b.name, Qt::UserRole);
    item->setToolTip(b.reason);
    if (!b.available) item->setFlags(item->flags() & ~Qt::ItemIsEnabled);
    items->appendRow(item);
  }
  m_backend->setModel(items);
  computeForm->addRow(tr("Backend"), m_backend);
  m_backendReason = new QLabel;
  m_backendReason->setObjectName("backendReasons");
  m_backendReason->setWordWrap(true);
  QStringList reasons;
  for (const BackendStatus& b : m_backends) {
    if (!b.available) reasons << tr("%1: %2").arg(b.name, b.reason);
  }
  m_backendReason->setText(reasons.join('\n'));
  m_backendReason->setVisible(!reasons.isEmpty());
  computeForm->addRow(QString(), m_backendReason);
  m_device = new QComboBox;
  m_device->setObjectName("device");
  computeForm->addRow(tr("Device"), m_device);
  m_draftModel = new QLineEdit(settings.draftModel);
  m_draftModel->setObjectName("draftModel");
  m_draftModel->setPlaceholderText(tr("auto, none, or a GGUF file"));
  m_draftModel->setToolTip(
      tr("A small model with the same vocabulary that drafts tokens for the loaded one to "
         "verify (speculative decoding: the replies are unchanged, only faster where drafts "
         "pay). auto: the largest such model at most an eighth of the loaded one's size, next "
         "to it or in the model folders."));
  computeForm->addRow(tr("Draft model"), m_draftModel);
  computeForm->addRow(QString(), new QLabel(tr("Compute settings apply to the next model load.")));
  layout->addWidget(compute);

  auto* models = new QGroupBox(tr("Models and node"));
  auto* modelsForm = new QFormLayout(models);
  auto* dirRow = new QHBoxLayout;
  m_modelsDir = new QLineEdit(settings.effectiveModelsDir());
  m_modelsDir->setObjectName("modelsDir");
  auto* browse = new QPushButton(tr("Browse…"));
  dirRow->addWidget(m_modelsDir, 1);
  dirRow->addWidget(browse);
  modelsForm->addRow(tr("Models directory"), dirRow);
  m_nodeName = new QLineEdit(settings.nodeName);
  m_nodeName->setObjectName("nodeName");
  modelsForm->addRow(tr("Node name"), m_nodeName);
  layout->addWidget(models);

  auto* apiBox = new QGroupBox(tr("OpenAI-compatible API"));
  auto* apiForm = new QFormLayout(apiBox);
  m_apiEnabled = new QCheckBox(tr("Serve the loaded model over HTTP"));
  m_apiEnabled->setObjectName("apiEnabled");
  m_apiEnabled->setChecked(settings.apiEnabled);
  apiForm->addRow(m_apiEnabled);
  m_apiHost = new QLineEdit(settings.apiHost);
  m_apiHost->setObjectName("apiHost");
  m_apiHost->setToolTip(
      tr("127.0.0.1 serves this machine only; 0.0.0.0 serves the network, which needs an API key "
         "in the SHOAL_API_KEY environment variable when the app starts"));
  apiForm->addRow(tr("Host"), m_apiHost);
  m_apiPort = new QSpinBox;
  m_apiPort->setObjectName("apiPort");
  m_apiPort->setRange(0, kMaxPort);
  m_apiPort->setSpecialValueText(tr("any free port"));
  m_apiPort->setValue(settings.apiPort);
  apiForm->addRow(tr("Port"), m_apiPort);
  m_apiStatus = new QLabel;
  m_apiStatus->setObjectName("apiStatus");
  m_apiStatus->setWordWrap(true);
  m_apiStatus->setTextInteractionFlags(Qt::TextSelectableByMouse);
  apiForm->addRow(m_apiStatus);
  layout->addWidget(apiBox);

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
  layout->addWidget(buttons);

  connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, tr("Models directory"), m_modelsDir->text());
    if (!dir.isEmpty()) m_modelsDir->setText(dir);
  });
  connect(m_backend, &QComboBox::currentIndexChanged, this, &SettingsDialog::fillDevices);
  const auto syncApi = [this] {
    m_apiHost->setEnabled(m_apiEnabled->isChecked());
    m_apiPort->setEnabled(m_apiEnabled->isChecked());
  };
  connect(m_apiEnabled, &QCheckBox::toggled, this, syncApi);
  syncApi();

  int selected = 0;
  for (int i = 0; i < m_backends.size(); ++i) {
    if (m_backends[i].name == settings.backend) selected = i;
  }
  m_backend->setCurrentIndex(selected);
  fillDevices();
}

void SettingsDialog::fillDevices() {
  m_device->clear();
  const int i = m_backend->currentIndex();
  if (i < 0 || i >= m_backends.size()) return;
  for (const runtime::DeviceInfo& d : m_backends[i].devices) {
    const QString label = QString("%1 — %2 (%3 free of %4)")
                              .arg(QString::fromStdString(d.id), QString::fromStdString(d.name),
                                   formatBytes(d.memoryFree), formatBytes(d.memoryTotal));
    m_device->addItem(label, QString::fromStdString(d.id));
    if (QString::fromStdString(d.id) == m_initial.device)
      m_device->setCurrentIndex(m_device->count() - 1);
  }
}

AppSettings SettingsDialog::values() const {
  AppSettings s = m_initial;
  s.threads = m_threads->value();
  s.backend = m_backend->currentData(Qt::UserRole).toString();
  s.device = m_device->currentData().toString();
  s.draftModel = m_draftModel->text().trimmed().isEmpty() ? QStringLiteral("auto")
                                                          : m_draftModel->text().trimmed();
  s.modelsDir = m_modelsDir->text().trimmed();
  s.nodeName = m_nodeName->text().trimmed();
  s.apiEnabled = m_apiEnabled->isChecked();
  s.apiHost = m_apiHost->text().trimmed();
  s.apiPort = m_apiPort->value();
  return s;
}

void SettingsDialog::setApiStatus(const QString& text) { m_apiStatus->setText(text); }

}  // namespace shoal::gui
