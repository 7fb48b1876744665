#pragma once
// Phase 1 of the planner: place the layers of one or more model replicas (pipelines) on the
// devices of a pool. Pure and deterministic: the same inputs give the same plan.
//
// Objective (docs/planner.md): maximize the pool throughput X = Σ X_p; among plans within
// PlanOptions::latencyTolerance of the best X, minimize the largest pipeline latency T_p.
// Devices that would slow a pipeline are left out (Plan::unusedDevices).

#include "engine/plan/types.h"

namespace shoal::plan {

// Throws shoal::Error naming the offending field when an input is out of range (no layers, a
// device without bandwidth, ...). plan() calls it first.
void validateInputs(const Pool& pool, const ModelCost& model, const Request& request);

// Places the model. When nothing fits, the plan is infeasible and says why and how many bytes
// of memory are missing.
Plan plan(const Pool& pool, const ModelCost& model, const Request& request,
          const PlanOptions& options = {});

}  // namespace shoal::plan
