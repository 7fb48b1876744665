#include "app/gui/fit_estimator.h"

#include <QObject>
#include <vector>

#include "lan/hub/header_fit.h"
#include "lan/node/device_profile.h"

namespace shoal::gui {
namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

}  // namespace

plan::Pool thisComputerPool(const QString& nodeConfigDir) {
  return lan::thisComputerPool(nodeConfigDir.toStdString());
}

HubModelFit estimateHubModelFit(const lan::hub::HubClient& client, const QString& repo,
                                const lan::hub::ModelFile& model, const plan::Pool& local,
                                const plan::Pool& pool, const lan::hub::DownloadControl* control) {
  std::vector<plan::Pool> pools{local};
  if (!pool.devices.empty()) pools.push_back(pool);
  const lan::hub::HeaderFit fit = lan::hub::estimateHeaderFit(
      client, repo.toStdString(), model, pools, kFitContextTokens, "main", control);
  HubModelFit out;
  if (!fit.error.empty()) {
    out.error = qs(fit.error);
    return out;
  }
  out.thisComputer = fit.estimates.at(0);
  if (fit.estimates.size() > 1) out.pool = fit.estimates[1];
  return out;
}

QString fitVerdict(const plan::FitEstimate& fit) {
  return fit.runs ? QObject::tr("runs") : QObject::tr("does not run");
}

QString fitDetails(const plan::FitEstimate& fit) {
  if (!fit.runs) return qs(fit.reason);
  return QObject::tr("weights %1 + KV cache %2 at context %3, %4 available; %5 tok/s predicted")
      .arg(qs(plan::formatBytes(fit.weightBytes)), qs(plan::formatBytes(fit.kvCacheBytes)))
      .arg(fit.contextTokens)
      .arg(qs(plan::formatBytes(fit.availableBytes)))
      .arg(fit.tokensPerS, 0, 'f', 1);
}

}  // namespace shoal::gui
