#include "app/gui/hub_search_panel.h"

#include <QComboBox>
#include <QDateTime>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <utility>

#include "app/gui/download_row.h"
#include "app/gui/fit_estimator.h"
#include "app/gui/hub_worker.h"
#include "app/gui/model_catalog.h"

namespace shoal::gui {
namespace {

enum RepoColumn { kRepoId, kDownloads, kLikes, kUpdated, kGated, kRepoColumns };
enum FileColumn { kFileName, kQuant, kSize, kParts, kHere, kPool, kSpeed, kFileColumns };

const QColor kBad(0xc6, 0x28, 0x28);
const QColor kGood(0x2e, 0x7d, 0x32);

QTableWidgetItem* cell(const QString& text, Qt::Alignment align = Qt::AlignLeft) {
  auto* item = new QTableWidgetItem(text);
  item->setFlags(Qt::ItemIsSelectable | Qt::ItemIsEnabled);
  item->setTextAlignment(align | Qt::AlignVCenter);
  return item;
}

QTableWidget* makeTable(int columns, const QStringList& headers, int stretch) {
  auto* t = new QTableWidget(0, columns);
  t->setHorizontalHeaderLabels(headers);
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  t->setSelectionMode(QAbstractItemView::SingleSelection);
  t->verticalHeader()->hide();
  for (int c = 0; c < columns; ++c) {
    t->horizontalHeader()->setSectionResizeMode(
        c, c == stretch ? QHeaderView::Stretch : QHeaderView::ResizeToContents);
  }
  return t;
}

QString qs(const std::string& s) { return QString::fromStdString(s); }

// "2024-11-02" from the Hub's ISO 8601 time.
QString dayOf(const std::string& iso) {
  const QDateTime t = QDateTime::fromString(qs(iso), Qt::ISODateWithMs);
  return t.isValid() ? t.date().toString(Qt::ISODate) : qs(iso).left(10);
}

void setFitCell(QTableWidgetItem* item, const plan::FitEstimate& fit) {
  item->setText(fitVerdict(fit));
  item->setToolTip(fitDetails(fit));
  item->setForeground(fit.runs ? kGood : kBad);
}

}  // namespace

HubSearchPanel::HubSearchPanel(std::function<QString()> modelsDir, QString nodeConfigDir,
                               std::function<plan::Pool()> currentPool, QWidget* parent)
    : QWidget(parent),
      m_modelsDir(std::move(modelsDir)),
      m_nodeConfigDir(std::move(nodeConfigDir)),
      m_currentPool(std::move(currentPool)),
      m_worker(new HubWorker) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  m_query = new QLineEdit;
  m_query->setObjectName("hubSearchBox");
  m_query->setPlaceholderText(tr("Search GGUF models on Hugging Face, e.g. SmolLM2"));
  m_query->setClearButtonEnabled(true);
  m_sort = new QComboBox;
  m_sort->setObjectName("hubSortBox");
  m_sort->addItems({tr("Most downloaded"), tr("Recently updated")});
  m_searchButton = new QPushButton(tr("Search"));
  m_searchButton->setObjectName("hubSearchButton");
  bar->addWidget(m_query, 1);
  bar->addWidget(m_sort);
  bar->addWidget(m_searchButton);
  layout->addLayout(bar);

  m_results = makeTable(kRepoColumns,
                        {tr("Repository"), tr("Downloads"), tr("Likes"), tr("Updated"), QString()},
                        kRepoId);
  m_results->setObjectName("hubResults");
  m_files = makeTable(kFileColumns,
                      {tr("Model"), tr("Quantization"), tr("Size"), tr("Parts"),
                       tr("This computer"), tr("Pool"), tr("Predicted tok/s")},
                      kFileName);
  m_files->setObjectName("hubFiles");
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(m_results);
  split->addWidget(m_files);
  split->setStretchFactor(0, 2);
  split->setStretchFactor(1, 3);
  layout->addWidget(split, 1);

  auto* actions = new QHBoxLayout;
  m_status = new QLabel;
  m_status->setObjectName("hubStatus");
  m_status->setWordWrap(true);
  m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_downloadButton = new QPushButton(tr("Download"));
  m_downloadButton->setObjectName("hubDownloadButton");
  actions->addWidget(m_status, 1);
  actions->addWidget(m_downloadButton);
  layout->addLayout(actions);
  m_download = new DownloadRow(m_worker);
  m_download->setObjectName("downloadRow");
  layout->addWidget(m_download);

  connect(m_query, &QLineEdit::returnPressed, this, &HubSearchPanel::search);
  connect(m_searchButton, &QPushButton::clicked, this, &HubSearchPanel::search);
  connect(m_results, &QTableWidget::itemSelectionChanged, this,
          [this] { selectRepo(m_results->currentRow()); });
  connect(m_files, &QTableWidget::itemSelectionChanged, this, &HubSearchPanel::updateButtons);
  connect(m_downloadButton, &QPushButton::clicked, this, &HubSearchPanel::downloadSelected);
  connect(m_download, &DownloadRow::stateChanged, this, &HubSearchPanel::updateButtons);
  connect(m_download, &DownloadRow::failed, this, &HubSearchPanel::setStatus);
  connect(m_download, &DownloadRow::finished, this, [this](const QString& path) {
    setStatus(tr("Downloaded %1.").arg(path));
    emit downloaded(path);
  });

  connect(m_worker, &HubWorker::searchFinished, this,
          [this](quint64 ticket, const std::vector<lan::hub::RepoSummary>& repos) {
            if (ticket == m_searchTicket) showRepos(repos);
          });
  connect(
      m_worker, &HubWorker::modelsListed, this,
      [this](quint64 ticket, const QString& repo, const std::vector<lan::hub::ModelFile>& models) {
        if (ticket == m_listTicket) showModels(repo, models);
      });
  connect(m_worker, &HubWorker::fitReady, this, [this](quint64 ticket, const HubModelFit& fit) {
    const auto it = std::find_if(m_fitTickets.begin(), m_fitTickets.end(),
                                 [ticket](const auto& t) { return t.first == ticket; });
    if (it == m_fitTickets.end()) return;  // of a repository no longer shown
    const int row = it->second;
    m_fitTickets.erase(it);
    showFit(row, fit);
    if (m_fitTickets.empty()) emit fitsShown();
  });
  connect(m_worker, &HubWorker::failed, this, [this](quint64 ticket, const QString& message) {
    if (ticket != m_searchTicket && ticket != m_listTicket) return;
    // A failed listing may be asked again by selecting its repository again.
    if (ticket == m_listTicket) m_listTicket = 0;
    setStatus(message);
  });
  updateButtons();
}

HubSearchPanel::~HubSearchPanel() {
  // Stops a download and waits for the calls in flight before the widgets they report to go.
  delete m_worker;
}

void HubSearchPanel::setStatus(const QString& text) {
  m_status->setText(text);
  emit statusChanged(text);
}

void HubSearchPanel::search() {
  const QString text = m_query->text().trimmed();
  const auto sort =
      m_sort->currentIndex() == 1 ? lan::hub::SearchSort::Recent : lan::hub::SearchSort::Downloads;
  m_searchTicket = m_worker->search(text, sort);
  m_listTicket = 0;
  setStatus(tr("Searching…"));
}

void HubSearchPanel::showRepos(const std::vector<lan::hub::RepoSummary>& repos) {
  m_repos = repos;
  // A new result list: nothing selected, no files of the previous repository, no fetches for it.
  {
    const QSignalBlocker block(m_results);
    m_results->clearSelection();
    m_results->setCurrentItem(nullptr);
  }
  m_repo.clear();
  m_models.clear();
  m_fitTickets.clear();
  m_worker->cancelFits();
  m_files->setRowCount(0);
  m_results->setRowCount(static_cast<int>(repos.size()));
  for (int r = 0; r < static_cast<int>(repos.size()); ++r) {
    const lan::hub::RepoSummary& s = repos[static_cast<size_t>(r)];
    m_results->setItem(r, kRepoId, cell(qs(s.id)));
    m_results->setItem(r, kDownloads, cell(QLocale().toString(s.downloads), Qt::AlignRight));
    m_results->setItem(r, kLikes, cell(QLocale().toString(s.likes), Qt::AlignRight));
    m_results->setItem(r, kUpdated, cell(dayOf(s.lastModified)));
    QTableWidgetItem* gated = cell(s.gated ? tr("gated") : QString());
    if (s.gated) gated->setToolTip(tr("Needs an accepted licence and HF_TOKEN to download."));
    m_results->setItem(r, kGated, gated);
  }
  const auto n = static_cast<int>(repos.size());
  setStatus(n == 0   ? tr("No GGUF repositories found.")
            : n == 1 ? tr("1 repository.")
                     : tr("%1 repositories.").arg(n));
  emit searchShown();
}

void HubSearchPanel::selectRepo(int row) {
  if (row < 0 || row >= static_cast<int>(m_repos.size())) return;
  const QString repo = qs(m_repos[static_cast<size_t>(row)].id);
  if (repo == m_repo && m_listTicket != 0) return;
  m_repo = repo;
  m_models.clear();
  m_fitTickets.clear();
  m_worker->cancelFits();  // the previous repository's header fetches
  m_files->setRowCount(0);
  m_listTicket = m_worker->listModels(repo);
  setStatus(tr("Listing %1…").arg(repo));
  m_results->selectRow(row);  // re-enters here, answered by the check above
  updateButtons();
}

void HubSearchPanel::showModels(const QString& repo,
                                const std::vector<lan::hub::ModelFile>& models) {
  m_models = models;
  m_fitTickets.clear();
  const plan::Pool pool = m_currentPool ? m_currentPool() : plan::Pool{};
  m_files->setRowCount(static_cast<int>(models.size()));
  for (int r = 0; r < static_cast<int>(models.size()); ++r) {
    const lan::hub::ModelFile& m = models[static_cast<size_t>(r)];
    m_files->setItem(r, kFileName, cell(qs(m.name)));
    m_files->setItem(r, kQuant, cell(qs(m.quantization)));
    m_files->setItem(r, kSize, cell(formatBytes(m.totalBytes), Qt::AlignRight));
    QTableWidgetItem* parts = cell(QString::number(m.parts.size()), Qt::AlignRight);
    if (!m.complete) {
      parts->setText(tr("%1 (incomplete)").arg(m.parts.size()));
      parts->setForeground(kBad);
    }
    m_files->setItem(r, kParts, parts);
    m_files->setItem(r, kHere, cell(tr("checking…")));
    m_files->setItem(r, kPool, cell(pool.devices.empty() ? tr("no pool") : tr("checking…")));
    m_files->setItem(r, kSpeed, cell(QString(), Qt::AlignRight));
    m_fitTickets.emplace_back(m_worker->estimateFit(repo, m, m_nodeConfigDir, pool), r);
  }
  const auto n = static_cast<int>(models.size());
  setStatus(n == 0   ? tr("%1 has no GGUF models.").arg(repo)
            : n == 1 ? tr("%1: 1 model.").arg(repo)
                     : tr("%1: %2 models.").arg(repo).arg(n));
  if (!models.empty()) m_files->selectRow(0);
  updateButtons();
  emit modelsShown();
  if (m_fitTickets.empty()) emit fitsShown();
}

void HubSearchPanel::showFit(int row, const HubModelFit& fit) {
  if (row < 0 || row >= m_files->rowCount()) return;
  QTableWidgetItem* here = m_files->item(row, kHere);
  QTableWidgetItem* pool = m_files->item(row, kPool);
  QTableWidgetItem* speed = m_files->item(row, kSpeed);
  if (!fit.error.isEmpty()) {
    const QString text = tr("unknown: %1").arg(fit.error);
    here->setText(text);
    here->setToolTip(fit.error);
    if (pool->text() != tr("no pool")) pool->setText(text);
    return;
  }
  setFitCell(here, fit.thisComputer);
  if (fit.pool) setFitCell(pool, *fit.pool);
  QString tps;
  if (fit.thisComputer.runs) tps = QString::number(fit.thisComputer.tokensPerS, 'f', 1);
  if (fit.pool && fit.pool->runs) {
    tps += (tps.isEmpty() ? QString() : QStringLiteral(" · ")) +
           tr("pool %1").arg(fit.pool->tokensPerS, 0, 'f', 1);
  }
  speed->setText(tps);
  speed->setToolTip(
      tr("Predicted decode speed of one chat at context %1.").arg(fit.thisComputer.contextTokens));
}

void HubSearchPanel::selectModel(int row) { m_files->selectRow(row); }

void HubSearchPanel::downloadSelected() {
  const int row = m_files->currentRow();
  if (row < 0 || row >= static_cast<int>(m_models.size())) return;
  const lan::hub::ModelFile& m = m_models[static_cast<size_t>(row)];
  if (!m_download->start(m_repo, m, m_modelsDir())) {
    setStatus(tr("A download is running; pause or cancel it first."));
    return;
  }
  setStatus(tr("Downloading %1 from %2…").arg(qs(m.name), m_repo));
}

void HubSearchPanel::updateButtons() {
  const int row = m_files->currentRow();
  const bool busy = m_download->state() == DownloadRow::State::Running ||
                    m_download->state() == DownloadRow::State::Stopping;
  m_downloadButton->setEnabled(!busy && row >= 0 && row < static_cast<int>(m_models.size()) &&
                               m_models[static_cast<size_t>(row)].complete);
}

}  // namespace shoal::gui
