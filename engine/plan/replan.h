#pragma once
// Incremental re-planning when devices join or leave a pool. Moving weights costs minutes on a
// LAN, so among the candidate plans whose X is within `tolerance` (5%) of the best candidate,
// the one that moves the fewest weight bytes wins (ties: the larger X).
//
// Candidates: a fresh plan of the new pool; the previous plan's intact pipelines kept as they
// are, with everything else (devices of broken pipelines, unused and new devices) planned
// afresh beside them; the same with each broken pipeline re-split over its surviving devices;
// and the kept plan with one free device added to one kept pipeline. When devices only joined,
// no candidate below the kept plan's X qualifies: joining never lowers X.

#include "engine/plan/types.h"

namespace shoal::plan {

struct Replan {
  Plan plan;
  // Weight bytes the devices must load to go from the previous plan to this one: layers a
  // device holds now and did not hold before (W each), plus the embedding / head where a
  // device takes that role anew. KV caches are not counted: they start empty.
  double movedBytes = 0;
};

// Weight bytes moved going from `before` to `after` (devices matched by id).
double movedWeightBytes(const Plan& before, const Plan& after, const ModelCost& model);

// `previous` may refer to devices no longer in `pool` (they left); its device indices are
// ignored, ids are what count.
Replan replan(const Plan& previous, const Pool& pool, const ModelCost& model,
              const Request& request, const PlanOptions& options = {}, double tolerance = 0.05);

}  // namespace shoal::plan
