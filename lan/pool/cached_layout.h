#pragma once
// Deploying a layout whose weights the nodes already hold. A node with the model file loads any
// layer range from it; one without streams the range's weights over the LAN, unless its shard
// cache holds that exact range (this coordinator streamed it there before: NodeInfo::shards,
// lan/node/shard_cache.h). Device profiles are measured afresh on every start and drift by a
// few percent, so a fresh plan often lands on slightly different ranges than the cached ones
// and would stream them all again (a 3-node SmolLM2 pool re-streamed ~94 MB for nothing). Among
// the layouts within a tolerance of the best plan's throughput, the one that streams the fewest
// bytes wins, as plan::replan does for re-plans.

#include <string>
#include <vector>

#include "engine/plan/types.h"
#include "lan/pool/node_info.h"

namespace shoal::lan {

// Weight bytes the nodes must be sent to deploy `plan`'s first pipeline: the layers (with the
// embedding or head where a stage has it) of every stage whose node has neither the model file
// `modelSha` nor that exact range cached. Devices are named as buildPool names them.
double streamedBytes(const plan::Plan& plan, const plan::ModelCost& model,
                     const plan::Request& request, const std::vector<NodeInfo>& nodes,
                     const std::string& modelSha);

// `best`, or else a one-pipeline plan whose every stage is a range cached on its node (on one
// of that node's devices), valid on `pool`, with a throughput at least (1 - tolerance) times
// best's: the one with the highest throughput among those. `best` stays when it streams
// nothing or no such layout exists.
plan::Plan preferCachedShards(const plan::Plan& best, const plan::Pool& pool,
                              const plan::ModelCost& model, const plan::Request& request,
                              const std::vector<NodeInfo>& nodes, const std::string& modelSha,
                              double tolerance = 0.05);

}  // namespace shoal::lan
