#pragma once
// Phase 2 of the planner: pick, for a new request, the chain of placed stages with the least
// expected latency under the current load. Stages of different replicas may be mixed wherever
// their layer ranges join (one ends where the next begins), so the placed stages form a DAG
// from layer 0 to layer L; the route is its cheapest path (DP in order of first layer).
//
// Expected cost of a chain = Σ stage cost + Σ hop between consecutive stages + token return
// from the last stage's node to the first's (cost_model.h), where a stage's cost is its time
// per token stretched by its load: secondsPerToken × (1 + queueDepth / kvSlots). A stage whose
// queue is full (queueDepth ≥ kvSlots) is overloaded and never used.

#include <span>
#include <vector>

#include "engine/plan/types.h"

namespace shoal::plan {

// A placed stage as the router sees it, with its live load.
struct RoutableStage {
  int device = -1;     // index into Pool::devices
  int firstLayer = 0;  // [firstLayer, lastLayer)
  int lastLayer = 0;
  double secondsPerToken = 0;  // measured time per decode step (the plan's stage_s until measured)
  int queueDepth = 0;          // sequences in flight on the stage
  int kvSlots = 1;             // sequences it can hold (KV slots); full at queueDepth ≥ kvSlots
};

struct Route {
  bool found = false;
  std::vector<size_t> stages;  // indices into the stages given to route(), in execution order
  double expectedLatencyS = 0;
};

// The stages of a plan with no load yet (secondsPerToken = stage_s, kvSlots = sequences).
std::vector<RoutableStage> routableStages(const Plan& plan, const Request& request);

// Cheapest chain covering [0, L). Not found when every chain crosses an overloaded stage or
// the ranges do not join up. Deterministic: ties go to lower stage indices.
Route route(const Pool& pool, const ModelCost& model, std::span<const RoutableStage> stages);

// Phase 2 where the runtime keeps each replica whole (a sequence's KV cache lives on the stages
// of one deployed pipeline, and one scheduler drives each): the replica a new request joins.
// Each entry is one replica's stages in execution order (covering [0, L) without gaps, as
// deployed); its cost is the chain cost above. A replica with a full stage (queueDepth ≥
// kvSlots) is chosen only when every replica is full: the request then waits where the
// expected latency with the whole queue counted is least. -1 when no replica is well formed.
// Ties go to the lower index.
int chooseReplica(const Pool& pool, const ModelCost& model,
                  std::span<const std::vector<RoutableStage>> replicas);

}  // namespace shoal::plan
