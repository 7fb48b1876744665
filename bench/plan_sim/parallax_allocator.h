#pragma once
// A reimplementation of Parallax's layer allocator (GradientHQ/parallax,
// src/scheduling/layer_allocation.py at commit 162354a, "Phase 1" in src/scheduling/README.md),
// to compare Shoal's planner with it under Shoal's cost model:
//
// 1. Capacity: how many decoder layers a node can hold (parameter memory / layer bytes), less
//    the embedding on a pipeline's first node and the LM head on its last.
//    Here: engine/plan layerCapacity(), i.e. Shoal's memory rule with the KV cache counted,
//    where Parallax reserves a fixed share of memory (param_mem_ratio = 0.5) for parameters;
//    a Parallax node is a Shoal device.
// 2. DynamicProgrammingLayerAllocator: for every pipeline count k from 1 to
//    min(nodes, Σ capacity / L), a DP over the nodes (state: node index, sorted residual layers
//    of the open pipelines, pipelines closed; moves: skip a node, give it to an open pipeline,
//    or open a new one) finds s*(k), the fewest stages that build k pipelines. It picks the k
//    maximizing k² / s*(k) and backtracks the pipelines. Nodes are taken in descending
//    capacity (the docstring's "sort GPUs by layer capacity descending").
// 3. adjust_pipeline_layers: in each pipeline, nodes sorted by capacity (descending), layers
//    split in proportion to FLOPS by water-filling — λ bisected (40 iterations) so that
//    Σ min(cap_i, λ·F_i) = L — then floors plus largest remainders; nodes left with no layer
//    drop out.
// When the DP's state space passes a budget (it grows exponentially with the pipeline count),
// Parallax's GreedyLayerAllocator (capacity-sorted greedy with one-pipeline look-ahead, then
// the same water-filling) is used instead, as Parallax itself offers.

#include <cstddef>

#include "engine/plan/types.h"

namespace shoal::plan_sim {

struct ParallaxStats {
  bool usedDp = false;  // false: the greedy allocator (DP over budget or found nothing)
  size_t dpStates = 0;
  int pipelines = 0;
};

plan::Plan parallaxPlan(const plan::Pool& pool, const plan::ModelCost& model,
                        const plan::Request& request, ParallaxStats* stats = nullptr,
                        size_t dpStateBudget = 300000);

}  // namespace shoal::plan_sim
