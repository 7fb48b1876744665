#pragma once
// The splits other pooling tools use, reimplemented to be scored by Shoal's cost model. Each
// puts every device of the pool in one pipeline (devices that get no layer drop out); the plan
// is infeasible, with the reason, when a device cannot hold what the rule gives it (the tool
// would run out of memory).
//
// - equal (distributed-llama): L / n layers each, in pool order.
// - memory-proportional, exo (RingMemoryWeightedPartitioningStrategy): devices by memory,
//   largest first; device i covers the fraction [Σ_{j<i} M_j, Σ_{j≤i} M_j) / Σ M of the
//   layers, rounded down (exo's map_partitions_to_shards).
// - memory-proportional, llama.cpp (--split-mode layer, default tensor split by free memory):
//   pool order; layer l goes to the first device whose cumulative memory share exceeds
//   l / (L + 1) (the output layer counts as layer L there).
//
// The first device holds the embedding and the last the head (llama.cpp keeps the embedding
// on the CPU; Shoal's cost model puts it on the first stage for every plan).

#include "engine/plan/types.h"

namespace shoal::plan_sim {

plan::Plan equalSplit(const plan::Pool& pool, const plan::ModelCost& model,
                      const plan::Request& request);
plan::Plan exoMemorySplit(const plan::Pool& pool, const plan::ModelCost& model,
                          const plan::Request& request);
plan::Plan llamaCppMemorySplit(const plan::Pool& pool, const plan::ModelCost& model,
                               const plan::Request& request);

// A plan from explicit pipelines (device index, layer count per stage; zero-layer stages are
// dropped), evaluated; infeasible with the first rule it breaks.
plan::Plan planFromCounts(const plan::Pool& pool, const plan::ModelCost& model,
                          const plan::Request& request,
                          const std::vector<std::vector<std::pair<int, int>>>& pipelines);

}  // namespace shoal::plan_sim
