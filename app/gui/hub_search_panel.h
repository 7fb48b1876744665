#pragma once
// The Models page's Discover tab: search the Hugging Face Hub for GGUF repositories (text, sorted
// by downloads or recency), pick one to list its models — each with its size, quantization,
// parts, and whether it runs on this computer and on the current pool with the planner's
// predicted speed, from its header fetched before any download — and download the selected one
// (download_row.h). Nothing touches the network before the user presses Search. Every Hub call
// runs in a HubWorker; the cells of the fit columns say "checking…" until their answer arrives.

#include <QWidget>
#include <functional>
#include <vector>

#include "engine/plan/types.h"
#include "lan/hub/hub_types.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QTableWidget;

namespace shoal::gui {

class DownloadRow;
class HubWorker;
struct HubModelFit;

class HubSearchPanel : public QWidget {
  Q_OBJECT

 public:
  // modelsDir: where downloads go (asked at each download: Settings may change it);
  // nodeConfigDir: the cache of this computer's measured profile (fit_estimator.h);
  // currentPool: the current pool's members (empty: no pool), read on the GUI thread.
  HubSearchPanel(std::function<QString()> modelsDir, QString nodeConfigDir,
                 std::function<plan::Pool()> currentPool, QWidget* parent = nullptr);
  ~HubSearchPanel() override;

  // Rows of the results and files tables, as last shown.
  const std::vector<lan::hub::RepoSummary>& repos() const { return m_repos; }
  const std::vector<lan::hub::ModelFile>& models() const { return m_models; }
  // Fit answers still outstanding for the shown repository (0: every fit cell is filled).
  int pendingFits() const { return static_cast<int>(m_fitTickets.size()); }
  DownloadRow* downloadRow() const { return m_download; }

 public slots:
  void search();
  void selectRepo(int row);
  void selectModel(int row);
  void downloadSelected();

 signals:
  void searchShown();  // the results table shows a search's answer
  void modelsShown();  // the files table lists the selected repository's models
  void fitsShown();    // every fit cell of the files table is filled
  void downloaded(const QString& path);
  void statusChanged(const QString& text);

 private:
  void setStatus(const QString& text);
  void showRepos(const std::vector<lan::hub::RepoSummary>& repos);
  void showModels(const QString& repo, const std::vector<lan::hub::ModelFile>& models);
  void showFit(int row, const HubModelFit& fit);
  void updateButtons();

  std::function<QString()> m_modelsDir;
  QString m_nodeConfigDir;
  std::function<plan::Pool()> m_currentPool;
  HubWorker* m_worker = nullptr;
  quint64 m_searchTicket = 0;
  quint64 m_listTicket = 0;
  std::vector<std::pair<quint64, int>> m_fitTickets;  // outstanding (ticket, files row)
  std::vector<lan::hub::RepoSummary> m_repos;
  QString m_repo;  // whose models the files table lists
  std::vector<lan::hub::ModelFile> m_models;

  QLineEdit* m_query = nullptr;
  QComboBox* m_sort = nullptr;
  QPushButton* m_searchButton = nullptr;
  QTableWidget* m_results = nullptr;
  QTableWidget* m_files = nullptr;
  QPushButton* m_downloadButton = nullptr;
  DownloadRow* m_download = nullptr;
  QLabel* m_status = nullptr;
};

}  // namespace shoal::gui
