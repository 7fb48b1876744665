#pragma once
// The Models page: the GGUF files of the models directory with what their headers say
// (architecture, quantization, size, context, layers) and whether this machine can run each,
// with the reason when it cannot. "Add GGUF file…" links (or, across file systems, copies) a file
// into the directory; "Delete…" removes the selected model's file (every part of a split model)
// after a confirmation; "Open folder" shows the directory in the file manager; "Load" asks the
// window to load the selected model on the engine thread, and a busy bar runs until the engine
// answers.

#include <QFutureWatcher>
#include <QList>
#include <QWidget>

#include "app/gui/model_catalog.h"

class QLabel;
class QProgressBar;
class QPushButton;
class QTableWidget;

namespace shoal::gui {

class ModelManager : public QWidget {
  Q_OBJECT

 public:
  explicit ModelManager(const QString& modelsDirectory, QWidget* parent = nullptr);

  QString modelsDirectory() const { return m_directory; }
  // As of the last finished scan (refreshed()).
  const QList<ModelEntry>& entries() const { return m_entries; }
  bool isScanning() const { return m_scan.isRunning(); }
  // Row of `fileName` in the table, -1 when not listed.
  int rowOf(const QString& fileName) const;

 public slots:
  void setModelsDirectory(const QString& directory);
  // Re-read the directory and the free memory, off the GUI thread (a directory of large models
  // has large headers: vocabularies); emits refreshed() when the table shows the result.
  void refresh();
  // Link or copy `source` into the models directory (a copy runs off the GUI thread); the list
  // refreshes when it is there. Refuses a file whose name is taken.
  void addModelFile(const QString& source);
  void selectRow(int row);
  // refresh(), then select `fileName` once the table lists it (a model just downloaded).
  void refreshAndSelect(const QString& fileName);
  void loadSelected();
  // Asks to confirm (a QMessageBox named "deleteModelConfirm"), then deletes the selected
  // model's files.
  void deleteSelected();
  // The files of the selected model (a split model's every part present in the directory).
  QStringList selectedModelFiles() const;
  // From the engine, through the window: a load began / ended (ok, or the reason it failed).
  void onLoadStarted(const QString& path);
  void onLoadFinished(bool ok, const QString& message);

 signals:
  void loadRequested(const QString& path);
  void refreshed();

 private:
  void showDetails();
  void showEntries(const QList<ModelEntry>& entries);

  QString m_directory;
  QList<ModelEntry> m_entries;
  QLabel* m_directoryLabel = nullptr;
  QTableWidget* m_table = nullptr;
  QLabel* m_details = nullptr;  // the selected model's facts, or why it cannot run
  QLabel* m_status = nullptr;   // load progress / result, add errors
  QProgressBar* m_progress = nullptr;
  QPushButton* m_add = nullptr;
  QPushButton* m_load = nullptr;
  QPushButton* m_refresh = nullptr;
  QPushButton* m_delete = nullptr;
  QPushButton* m_openFolder = nullptr;
  QString m_selectAfterScan;       // refreshAndSelect()'s file, until the scan lists it
  QFutureWatcher<QString> m_copy;  // the running copy; its result is the error ("" on success)
  QFutureWatcher<QList<ModelEntry>> m_scan;  // the running directory scan
  bool m_rescan = false;                     // refresh() asked for while a scan ran
};

}  // namespace shoal::gui
