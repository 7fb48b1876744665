#include "app/gui/model_manager.h"

#include <QDesktopServices>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QUrl>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <filesystem>
#include <system_error>
#include <utility>

#include "app/gui/chat_types.h"
#include "lan/hub/hub_client.h"

namespace shoal::gui {
namespace {

enum Column { kName, kArch, kQuant, kSize, kContext, kLayers, kParams, kStatus, kColumnCount };

// "135 M", "5.1 B".
QString formatCount(qint64 n) {
  return n >= 1000000000 ? QString::number(static_cast<double>(n) / 1e9, 'f', 1) + " B"
                         : QString::number(static_cast<double>(n) / 1e6, 'f', 0) + " M";
}

QTableWidgetItem* cell(const QString& text, Qt::Alignment align = Qt::AlignLeft) {
  auto* item = new QTableWidgetItem(text);
  item->setFlags(Qt::ItemIsSelectable | Qt::ItemIsEnabled);
  item->setTextAlignment(align | Qt::AlignVCenter);
  return item;
}

}  // namespace

ModelManager::ModelManager(const QString& modelsDirectory, QWidget* parent)
    : QWidget(parent), m_directory(modelsDirectory) {
  auto* layout = new QVBoxLayout(this);
  m_directoryLabel = new QLabel;
  m_directoryLabel->setObjectName("modelsDirectory");
  m_directoryLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_directoryLabel);

  m_table = new QTableWidget(0, kColumnCount);
  m_table->setObjectName("modelTable");
  m_table->setHorizontalHeaderLabels({tr("Model"), tr("Architecture"), tr("Quantization"),
                                      tr("Size"), tr("Context"), tr("Layers"), tr("Parameters"),
                                      tr("Status")});
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->verticalHeader()->hide();
  m_table->horizontalHeader()->setSectionResizeMode(kName, QHeaderView::Stretch);
  for (int c = kArch; c < kColumnCount; ++c) {
    m_table->horizontalHeader()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
  }
  layout->addWidget(m_table, 1);

  m_details = new QLabel;
  m_details->setObjectName("modelDetails");
  m_details->setWordWrap(true);
  m_details->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(m_details);

  auto* buttons = new QHBoxLayout;
  m_add = new QPushButton(tr("Add GGUF file…"));
  m_add->setObjectName("addModelButton");
  m_refresh = new QPushButton(tr("Refresh"));
  m_refresh->setObjectName("refreshModelsButton");
  m_delete = new QPushButton(tr("Delete…"));
  m_delete->setObjectName("deleteModelButton");
  m_openFolder = new QPushButton(tr("Open folder"));
  m_openFolder->setObjectName("openModelsFolderButton");
  m_load = new QPushButton(tr("Load"));
  m_load->setObjectName("loadModelButton");
  m_progress = new QProgressBar;
  m_progress->setObjectName("loadProgress");
  m_progress->setRange(0, 0);  // the engine reports no fraction: a busy bar
  m_progress->setMaximumWidth(160);
  m_progress->hide();
  m_status = new QLabel;
  m_status->setObjectName("modelStatus");
  m_status->setWordWrap(true);
  buttons->addWidget(m_add);
  buttons->addWidget(m_refresh);
  buttons->addWidget(m_delete);
  buttons->addWidget(m_openFolder);
  buttons->addWidget(m_status, 1);
  buttons->addWidget(m_progress);
  buttons->addWidget(m_load);
  layout->addLayout(buttons);

  connect(m_table, &QTableWidget::itemSelectionChanged, this, &ModelManager::showDetails);
  connect(m_table, &QTableWidget::cellDoubleClicked, this, &ModelManager::loadSelected);
  connect(m_refresh, &QPushButton::clicked, this, &ModelManager::refresh);
  connect(m_load, &QPushButton::clicked, this, &ModelManager::loadSelected);
  connect(m_delete, &QPushButton::clicked, this, &ModelManager::deleteSelected);
  connect(m_openFolder, &QPushButton::clicked, this, [this] {
    QDir().mkpath(m_directory);
    QDesktopServices::openUrl(QUrl::fromLocalFile(m_directory));
  });
  connect(m_add, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Add a GGUF model"), QString(),
                                                      tr("GGUF models (*.gguf)"));
    if (!path.isEmpty()) addModelFile(path);
  });
  connect(&m_scan, &QFutureWatcher<QList<ModelEntry>>::finished, this, [this] {
    if (std::exchange(m_rescan, false)) {
      refresh();
      return;
    }
    showEntries(m_scan.result());
    if (!m_selectAfterScan.isEmpty()) {
      const int row = rowOf(m_selectAfterScan);
      if (row >= 0) selectRow(row);
      m_selectAfterScan.clear();
    }
    emit refreshed();
  });
  connect(&m_copy, &QFutureWatcher<QString>::finished, this, [this] {
    const QString error = m_copy.result();
    m_add->setEnabled(true);
    m_progress->hide();
    m_status->setText(error.isEmpty() ? tr("Added.") : error);
    refresh();
  });
  refresh();
}

void ModelManager::setModelsDirectory(const QString& directory) {
  m_directory = directory;
  refresh();
}

int ModelManager::rowOf(const QString& fileName) const {
  for (int i = 0; i < m_entries.size(); ++i) {
    if (m_entries[i].fileName == fileName) return i;
  }
  return -1;
}

void ModelManager::refresh() {
  m_directoryLabel->setText(tr("Models in %1").arg(QDir::toNativeSeparators(m_directory)));
  if (m_scan.isRunning()) {
    m_rescan = true;  // the directory may have changed after that scan read it
    return;
  }
  const QString dir = m_directory;
  // Headers only: a few pages of each file, never the weights.
  m_scan.setFuture(QtConcurrent::run([dir] { return scanModels(dir, availableMemoryBytes()); }));
}

void ModelManager::showEntries(const QList<ModelEntry>& entries) {
  const QString selected = m_table->currentRow() >= 0 && m_table->currentRow() < m_entries.size()
                               ? m_entries[m_table->currentRow()].fileName
                               : QString();
  m_entries = entries;
  m_table->setRowCount(static_cast<int>(m_entries.size()));
  for (int r = 0; r < m_entries.size(); ++r) {
    const ModelEntry& e = m_entries[r];
    m_table->setItem(r, kName, cell(e.fileName));
    m_table->setItem(r, kArch,
                     cell(e.experts > 0 ? tr("%1, %2 experts (%3 per token)")
                                              .arg(e.architecture)
                                              .arg(e.experts)
                                              .arg(e.expertsUsed)
                                        : e.architecture));
    m_table->setItem(r, kQuant, cell(e.quantization));
    m_table->setItem(r, kSize,
                     cell(formatBytes(static_cast<quint64>(e.fileBytes)), Qt::AlignRight));
    m_table->setItem(
        r, kContext,
        cell(e.contextLength > 0 ? QString::number(e.contextLength) : QString(), Qt::AlignRight));
    m_table->setItem(r, kLayers,
                     cell(e.layers > 0 ? QString::number(e.layers) : QString(), Qt::AlignRight));
    QString params = e.parameters > 0 ? formatCount(e.parameters) : QString();
    if (e.activeParameters > 0 && e.activeParameters < e.parameters) {
      params = tr("%1 (%2 active)").arg(params, formatCount(e.activeParameters));
    }
    m_table->setItem(r, kParams, cell(params, Qt::AlignRight));
    QTableWidgetItem* status = cell(e.runnable ? tr("Ready") : tr("Cannot run"));
    status->setToolTip(e.problem);
    if (!e.runnable) status->setForeground(QColor(0xc6, 0x28, 0x28));
    m_table->setItem(r, kStatus, status);
  }
  const int keep = rowOf(selected);
  if (keep >= 0 || !m_entries.isEmpty()) selectRow(keep >= 0 ? keep : 0);
  showDetails();
}

void ModelManager::selectRow(int row) { m_table->selectRow(row); }

void ModelManager::refreshAndSelect(const QString& fileName) {
  m_selectAfterScan = fileName;
  refresh();
}

QStringList ModelManager::selectedModelFiles() const {
  const int r = m_table->currentRow();
  if (r < 0 || r >= m_entries.size()) return {};
  const QString name = m_entries[r].fileName;
  const lan::hub::SplitName split = lan::hub::parseSplitName(name.toStdString());
  if (split.part == 0) return {m_entries[r].path};
  // Every part of "<base>-0000k-of-0000n.gguf" that is there.
  QStringList files;
  for (const ModelEntry& e : m_entries) {
    const lan::hub::SplitName other = lan::hub::parseSplitName(e.fileName.toStdString());
    if (other.part > 0 && other.base == split.base && other.count == split.count) {
      files.push_back(e.path);
    }
  }
  return files;
}

void ModelManager::deleteSelected() {
  const QStringList files = selectedModelFiles();
  if (files.isEmpty()) return;
  QStringList names;
  for (const QString& f : files) names.push_back(QFileInfo(f).fileName());
  auto* box = new QMessageBox(
      QMessageBox::Question, tr("Delete model"),
      tr("Delete %1 from %2? This cannot be undone.")
          .arg(names.join(QStringLiteral(", ")), QDir::toNativeSeparators(m_directory)),
      QMessageBox::Yes | QMessageBox::Cancel, this);
  box->setObjectName("deleteModelConfirm");
  box->setAttribute(Qt::WA_DeleteOnClose);
  connect(box, &QMessageBox::buttonClicked, this, [this, box, files](QAbstractButton* button) {
    if (box->standardButton(button) != QMessageBox::Yes) return;
    QStringList failed;
    for (const QString& f : files) {
      if (!QFile::remove(f)) failed.push_back(QFileInfo(f).fileName());
    }
    m_status->setText(failed.isEmpty() ? tr("Deleted.")
                                       : tr("Could not delete %1.").arg(failed.join(", ")));
    refresh();
  });
  box->open();
}

void ModelManager::showDetails() {
  const int r = m_table->currentRow();
  if (r < 0 || r >= m_entries.size()) {
    m_details->setText(m_entries.isEmpty() ? tr("No GGUF models in this directory.") : QString());
    m_load->setEnabled(false);
    m_delete->setEnabled(false);
    return;
  }
  m_delete->setEnabled(true);
  const ModelEntry& e = m_entries[r];
  if (e.runnable) {
    m_details->setText(tr("%1: weights %2, KV cache %3 at context %4.")
                           .arg(e.fileName, formatBytes(e.weightBytes), formatBytes(e.kvCacheBytes))
                           .arg(std::min(e.contextLength, kMaxChatContext)));
  } else {
    m_details->setText(QString("%1: %2").arg(e.fileName, e.problem));
  }
  m_load->setEnabled(e.runnable && !m_progress->isVisible());
}

void ModelManager::loadSelected() {
  const int r = m_table->currentRow();
  if (r < 0 || r >= m_entries.size() || !m_entries[r].runnable) return;
  emit loadRequested(m_entries[r].path);
}

void ModelManager::onLoadStarted(const QString& path) {
  m_status->setText(tr("Loading %1…").arg(QFileInfo(path).fileName()));
  m_progress->show();
  m_load->setEnabled(false);
}

void ModelManager::onLoadFinished(bool ok, const QString& message) {
  m_progress->hide();
  m_status->setText(ok ? tr("Loaded %1.").arg(message) : tr("Loading failed: %1").arg(message));
  showDetails();
}

void ModelManager::addModelFile(const QString& source) {
  const QFileInfo from(source);
  const QString target = QDir(m_directory).filePath(from.fileName());
  if (QFileInfo::exists(target)) {
    m_status->setText(tr("%1 is already in the models directory.").arg(from.fileName()));
    return;
  }
  if (!QDir().mkpath(m_directory)) {
    m_status->setText(tr("Cannot create %1.").arg(m_directory));
    return;
  }
  // A hard link is instant and takes no space; across file systems it fails and we copy.
  std::error_code ec;
  std::filesystem::create_hard_link(from.absoluteFilePath().toStdString(), target.toStdString(),
                                    ec);
  if (!ec) {
    m_status->setText(tr("Added %1.").arg(from.fileName()));
    refresh();
    return;
  }
  m_add->setEnabled(false);
  m_progress->show();
  m_status->setText(tr("Copying %1…").arg(from.fileName()));
  const QString src = from.absoluteFilePath();
  m_copy.setFuture(QtConcurrent::run([src, target]() -> QString {
    if (QFile::copy(src, target)) return QString();
    return QObject::tr("Copying %1 to %2 failed.").arg(src, target);
  }));
}

}  // namespace shoal::gui
