#pragma once
// `shoal-cli pool serve`: the OpenAI-compatible API (lan/api) over a pool the coordinator has
// deployed, so a coding agent, a chat UI and scripts share one pipeline of machines. Requests are
// continuously batched by the same scheduler as `shoal-node --api` (engine/runtime/scheduler.h),
// over the pool's chain: up to --parallel at once, the rest queued (429 beyond --max-queue), a
// node lost mid-reply re-planned around with every reply replaying its own tokens.
//
// With several replicas deployed (--replicas), each has its own queue and scheduler thread, and
// each request goes to the replica the coordinator's phase-2 routing picks from their live load
// (lan/api/replica_router.h); GET /health then lists every replica's load.

#include <string>
#include <vector>

#include "lan/api/api_server.h"
#include "lan/pool/coordinator.h"

namespace shoal::cli {

// Serves until SIGINT or SIGTERM. `pipeline` describes the deployment for the start-up line.
// `drafters`: draft models on this machine for speculative decoding, one per replica (each with
// slots for every reply its replica runs at once: a drafter serves one scheduler), or empty.
// Throws CliExit{1} when the API cannot bind.
void servePoolApi(lan::Coordinator& coordinator, const api::ApiServerOptions& options,
                  const std::string& pipeline,
                  const std::vector<runtime::ModelDrafter*>& drafters = {});

}  // namespace shoal::cli
