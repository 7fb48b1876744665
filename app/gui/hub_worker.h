#pragma once
// Runs the Models page's Hugging Face Hub calls (search, a repository's models, header fetches
// for the fit column, downloads) off the GUI thread and delivers each result as a signal on the
// thread the HubWorker lives on (the GUI thread): the GUI never blocks on the network. Every call
// builds its client from HubClient::fromEnvironment() (HF_ENDPOINT, HF_TOKEN) when it runs, so
// nothing is read or contacted before the user asks.
//
// Two pools: queries (search, listings, header fetches; a few side by side) and transfers (the
// download and the removal of a cancelled one's partial file, one at a time and in order, so a
// discard never runs under a download started after it and a download never waits behind a
// repository's dozen header fetches).
//
// Results carry the ticket the call returned, so a page that has moved on (a new search, another
// repository) can drop answers to questions it no longer asks; cancelFits() also stops the header
// fetches still running or queued. The destructor drops what is queued, stops the fetches and a
// running download (keeping its partial file), and waits for what runs to notice.

#include <QObject>
#include <QString>
#include <QThreadPool>
#include <memory>
#include <vector>

#include "app/gui/fit_estimator.h"
#include "engine/plan/types.h"
#include "lan/hub/hub_client.h"
#include "lan/hub/hub_types.h"

namespace shoal::gui {

class HubWorker : public QObject {
  Q_OBJECT

 public:
  explicit HubWorker(QObject* parent = nullptr);
  ~HubWorker() override;

  // Each returns the ticket its answer will carry.
  quint64 search(const QString& text, lan::hub::SearchSort sort, int limit = 50);
  quint64 listModels(const QString& repo);
  // Fit of `model` on this computer (nodeConfigDir: thisComputerPool) and on `pool` (empty:
  // no pool); answered by fitReady.
  quint64 estimateFit(const QString& repo, const lan::hub::ModelFile& model,
                      const QString& nodeConfigDir, const plan::Pool& pool);
  // Stops every estimateFit asked for so far (their answers never come).
  void cancelFits();
  // Downloads into modelsDir; at most one at a time (false when one runs). progress arrives
  // about ten times a second; then downloadFinished or downloadFailed.
  bool download(const QString& repo, const lan::hub::ModelFile& model, const QString& modelsDir);
  bool isDownloading() const { return m_control != nullptr; }
  // Stops the running download; the partial file is kept (a later download resumes it), or,
  // with discard, removed once the transfer has ended (downloadFailed reports cancelled).
  void stopDownload(bool discard);
  // Removes a paused download's partial file (nothing may be downloading it).
  void discardPartial(const lan::hub::ModelFile& model, const QString& modelsDir);

 signals:
  void searchFinished(quint64 ticket, const std::vector<shoal::lan::hub::RepoSummary>& repos);
  void modelsListed(quint64 ticket, const QString& repo,
                    const std::vector<shoal::lan::hub::ModelFile>& models);
  void fitReady(quint64 ticket, const shoal::gui::HubModelFit& fit);
  // A search or listing failed: the HubError's message, for the status label.
  void failed(quint64 ticket, const QString& message);
  void downloadProgress(const shoal::lan::hub::DownloadProgress& progress);
  void downloadFinished(const QString& path);
  // cancelled: stopped by stopDownload (a pause or a cancel), not an error.
  void downloadFailed(const QString& message, bool cancelled);

 private:
  // Runs `task` on `pool`; `task` posts its result back with deliver().
  template <class Task>
  static void run(QThreadPool& pool, Task task);
  template <class Fn>
  void deliver(Fn fn);

  QThreadPool m_queries;
  QThreadPool m_transfers;  // one thread: downloads and discards, in order
  quint64 m_nextTicket = 1;
  std::shared_ptr<lan::hub::DownloadControl> m_control;  // the running download's; null: none
  // Shared by the header fetches asked for since the last cancelFits(); stopped by it.
  std::shared_ptr<lan::hub::DownloadControl> m_fitControl;
  bool m_discardAfterStop = false;
};

}  // namespace shoal::gui
