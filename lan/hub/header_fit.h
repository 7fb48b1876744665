#pragma once
// Fit before download, for a model on the Hub: its GGUF header is fetched with a Range request
// (4 MiB, then 32 MiB when the metadata is larger — a 262k-token vocabulary takes ~8 MB), read
// with gguf::File::fromHeader and estimated by plan::estimateFit on each pool the caller names
// (this computer, the current pool). The CLI's `models files` and the app's Discover tab both
// call it. Blocking (network): call from a worker thread.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/plan/fit.h"
#include "engine/plan/types.h"
#include "lan/hub/hub_client.h"

namespace shoal::lan::hub {

// The context the app and the CLI load with (min with the model's own): a verdict then matches
// what loading does.
inline constexpr int64_t kFitContextTokens = 4096;

struct HeaderFit {
  // One estimate per pool asked for, in order; empty when `error` is set.
  std::vector<plan::FitEstimate> estimates;
  // Why there is no estimate: the header could not be fetched (HubError's message), is not
  // GGUF, or is larger than the most this fetches.
  std::string error;
};

// Never throws: a failure is HeaderFit::error. A split model is estimated from its first part,
// which carries split.count (estimateFit refuses split models by name).
// A `control` that stops ends the fetch (HeaderFit::error says so).
HeaderFit estimateHeaderFit(const HubClient& client, const std::string& repo,
                            const ModelFile& model, const std::vector<plan::Pool>& pools,
                            int64_t contextTokens = kFitContextTokens,
                            const std::string& revision = "main",
                            const DownloadControl* control = nullptr);

}  // namespace shoal::lan::hub
