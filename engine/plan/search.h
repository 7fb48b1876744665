#pragma once
// Internal to the planner: the two phase-1 searches. Both return a set of disjoint pipelines
// over the given usable devices; plan() turns it into a Plan.

#include <vector>

#include "engine/plan/pipeline_builder.h"
#include "engine/plan/types.h"

namespace shoal::plan::detail {

struct Layout {
  std::vector<PipelineResult> pipelines;

  double throughput() const;
  double maxLatency() const;
};

// Every ordered sequence of distinct devices is split optimally; a subset DP then picks the
// disjoint pipelines (at most maxPipelines when > 0) with the largest total X, and among those
// within `tolerance` of it the one with the smallest largest T_p. Exponential: for a handful
// of devices only.
Layout exactSearch(const SearchContext& ctx, const std::vector<int>& usable, double tolerance,
                   int maxPipelines = 0);

// How many ordered device sequences exactSearch would split for these devices (devices of one
// order class, i.e. of one node when the layers are alike, are interchangeable in the middle of
// a pipeline, which shrinks it on few-node pools).
double exactSequenceCount(const SearchContext& ctx, const std::vector<int>& devices);

// Segment DP over several device orderings (contiguous runs become pipelines), then a local
// search (remove, insert, move, swap, merge, split) on the best seeds, then the latency
// tie-break. Polynomial; used above PlanOptions::exactDeviceLimit.
Layout heuristicSearch(const SearchContext& ctx, const std::vector<int>& usable,
                       const PlanOptions& options);

// The Plan for a layout: stages with layer ranges, evaluated with the cost model, pipelines
// fastest first, unused devices listed. Infeasible (without a diagnosis) when empty.
Plan toPlan(const SearchContext& ctx, const Layout& layout);

}  // namespace shoal::plan::detail
