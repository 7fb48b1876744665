#include "app/gui/hub_worker.h"

#include <QMetaObject>
#include <exception>
#include <utility>

namespace shoal::gui {
namespace {

// Header fetches run side by side (a repository lists a dozen quants).
constexpr int kMaxQueryThreads = 4;

QString messageOf(const std::exception& e) { return QString::fromStdString(e.what()); }

}  // namespace

HubWorker::HubWorker(QObject* parent)
    : QObject(parent), m_fitControl(std::make_shared<lan::hub::DownloadControl>()) {
  m_queries.setMaxThreadCount(kMaxQueryThreads);
  m_transfers.setMaxThreadCount(1);
}

HubWorker::~HubWorker() {
  m_queries.clear();  // queued calls never start
  m_transfers.clear();
  m_fitControl->cancel();
  if (m_control) m_control->cancel();
  // Running calls end at their next transfer callback (or, for a search or listing, with the
  // request); results they post to this object after this point are dropped with it.
  m_queries.waitForDone();
  m_transfers.waitForDone();
}

template <class Task>
void HubWorker::run(QThreadPool& pool, Task task) {
  pool.start(std::move(task));
}

template <class Fn>
void HubWorker::deliver(Fn fn) {
  // Called on a pool thread: the lambda runs on this object's thread, queued.
  QMetaObject::invokeMethod(this, std::move(fn), Qt::QueuedConnection);
}

quint64 HubWorker::search(const QString& text, lan::hub::SearchSort sort, int limit) {
  const quint64 ticket = m_nextTicket++;
  run(m_queries, [this, ticket, text = text.toStdString(), sort, limit] {
    try {
      auto repos = lan::hub::HubClient::fromEnvironment().search(text, sort, limit);
      deliver([this, ticket, repos = std::move(repos)] { emit searchFinished(ticket, repos); });
    } catch (const std::exception& e) {
      deliver([this, ticket, m = messageOf(e)] { emit failed(ticket, m); });
    }
  });
  return ticket;
}

quint64 HubWorker::listModels(const QString& repo) {
  const quint64 ticket = m_nextTicket++;
  run(m_queries, [this, ticket, repo] {
    try {
      auto models = lan::hub::HubClient::fromEnvironment().listModels(repo.toStdString());
      deliver([this, ticket, repo, models = std::move(models)] {
        emit modelsListed(ticket, repo, models);
      });
    } catch (const std::exception& e) {
      deliver([this, ticket, m = messageOf(e)] { emit failed(ticket, m); });
    }
  });
  return ticket;
}

quint64 HubWorker::estimateFit(const QString& repo, const lan::hub::ModelFile& model,
                               const QString& nodeConfigDir, const plan::Pool& pool) {
  const quint64 ticket = m_nextTicket++;
  run(m_queries, [this, ticket, repo, model, nodeConfigDir, pool, control = m_fitControl] {
    if (control->stop.load()) return;  // cancelled while queued
    HubModelFit fit;
    try {
      fit = estimateHubModelFit(lan::hub::HubClient::fromEnvironment(), repo, model,
                                thisComputerPool(nodeConfigDir), pool, control.get());
    } catch (const std::exception& e) {
      fit.error = messageOf(e);
    }
    if (control->stop.load()) return;  // nobody waits for it any more
    deliver([this, ticket, fit = std::move(fit)] { emit fitReady(ticket, fit); });
  });
  return ticket;
}

void HubWorker::cancelFits() {
  m_fitControl->cancel();
  m_fitControl = std::make_shared<lan::hub::DownloadControl>();
}

bool HubWorker::download(const QString& repo, const lan::hub::ModelFile& model,
                         const QString& modelsDir) {
  if (m_control) return false;
  m_control = std::make_shared<lan::hub::DownloadControl>();
  m_discardAfterStop = false;
  run(m_transfers, [this, control = m_control, repo, model, modelsDir] {
    const std::filesystem::path dir = modelsDir.toStdString();
    try {
      const auto path = lan::hub::HubClient::fromEnvironment().download(
          repo.toStdString(), model, dir,
          [this](const lan::hub::DownloadProgress& p) {
            deliver([this, p] { emit downloadProgress(p); });
          },
          control.get());
      deliver([this, p = QString::fromStdString(path.string())] {
        m_control.reset();
        emit downloadFinished(p);
      });
    } catch (const lan::hub::HubError& e) {
      const bool cancelled = e.kind() == lan::hub::HubError::Kind::Cancelled;
      deliver([this, cancelled, model, dir, m = messageOf(e)] {
        m_control.reset();
        if (cancelled && std::exchange(m_discardAfterStop, false)) {
          discardPartial(model, QString::fromStdString(dir.string()));
        }
        emit downloadFailed(m, cancelled);
      });
    } catch (const std::exception& e) {
      deliver([this, m = messageOf(e)] {
        m_control.reset();
        emit downloadFailed(m, false);
      });
    }
  });
  return true;
}

void HubWorker::stopDownload(bool discard) {
  if (!m_control) return;
  m_discardAfterStop = discard;
  m_control->cancel();
}

void HubWorker::discardPartial(const lan::hub::ModelFile& model, const QString& modelsDir) {
  // File removal only, but on the pool like the rest: a slow disk never stalls the GUI.
  run(m_transfers, [model, dir = modelsDir.toStdString()] {
    try {
      lan::hub::HubClient::discardPartial(model, dir);
    } catch (const std::exception&) {
      // What is left in .partial is harmless: the next download of the model resumes it.
    }
  });
}

}  // namespace shoal::gui
