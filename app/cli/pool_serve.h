#pragma once
// `shoal-cli pool serve`: the OpenAI-compatible API (lan/api) over a pool the coordinator has
// deployed, so a coding agent, a chat UI and scripts share one pipeline of machines. Requests are
// continuously batched by the same scheduler as `shoal-node --api` (engine/runtime/scheduler.h),
// over the pool's chain: up to --parallel at once, the rest queued (429 beyond --max-queue), a
// node lost mid-reply re-planned around with every reply replaying its own tokens.

#include <string>

#include "lan/api/api_server.h"
#include "lan/pool/coordinator.h"

namespace shoal::cli {

// Serves until SIGINT or SIGTERM. `pipeline` describes the deployment for the start-up line.
// `drafter`: a draft model on this machine for speculative decoding (slots for every reply at
// once), or nullptr. Throws CliExit{1} when the API cannot bind.
void servePoolApi(lan::Coordinator& coordinator, const api::ApiServerOptions& options,
                  const std::string& pipeline, runtime::ModelDrafter* drafter = nullptr);

}  // namespace shoal::cli
