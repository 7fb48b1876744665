#pragma once
// "Will this Hub model run here?" before it is downloaded, for the Discover tab: Qt-side wrappers
// of lan::hub::estimateHeaderFit (a Range request for the header, plan::estimateFit) for this
// computer and for the current pool, and the words a table cell shows. Blocking (network, and a
// CPU probe the first time per run): call from a worker thread, never the GUI thread.

#include <QString>
#include <optional>

#include "engine/plan/fit.h"
#include "engine/plan/types.h"
#include "lan/hub/header_fit.h"
#include "lan/hub/hub_client.h"

namespace shoal::gui {

// The context the app loads with, so a verdict matches what Load then does.
inline constexpr int64_t kFitContextTokens = lan::hub::kFitContextTokens;

struct HubModelFit {
  QString error;                          // the header could not be fetched or read
  plan::FitEstimate thisComputer;         // valid when error is empty
  std::optional<plan::FitEstimate> pool;  // nullopt: no pool (no members)
};

// This computer as a one-device pool (lan::thisComputerPool), with the node profile cache in
// nodeConfigDir (the app's own shared-node config dir, so the figures are the ones the pool
// uses). Thread-safe.
plan::Pool thisComputerPool(const QString& nodeConfigDir);

// Fetches `model`'s header (its first part) from the Hub and estimates its fit on `local` and,
// when it has devices, on `pool`. Never throws: a failure is HubModelFit::error. A `control` that
// stops ends the fetch early.
HubModelFit estimateHubModelFit(const lan::hub::HubClient& client, const QString& repo,
                                const lan::hub::ModelFile& model, const plan::Pool& local,
                                const plan::Pool& pool,
                                const lan::hub::DownloadControl* control = nullptr);

// A verdict for a table cell: "runs" or "does not run", and the reason / facts for its tooltip.
QString fitVerdict(const plan::FitEstimate& fit);
QString fitDetails(const plan::FitEstimate& fit);

}  // namespace shoal::gui
