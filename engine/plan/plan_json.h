#pragma once
// The JSON form of a plan, as `shoal-cli plan --json` prints it:
//
// {"feasible": true,
//  "pipelines": [{"stages": [{"device": "pc-4090", "first_layer": 0, "last_layer": 20,
//                             "stage_s": 0.0101}, ...],
//                 "latency_s": 0.0213, "throughput_tok_s": 46.9}, ...],
//  "throughput_tok_s": 46.9, "unused_devices": ["laptop-igpu"], "plan_ms": 0.4}
//
// Layer ranges are half-open. An infeasible plan has "feasible": false, no pipelines, and
// "reason" and "missing_bytes".

#include <string>

#include "engine/plan/types.h"

namespace shoal::plan {

std::string planToJson(const Plan& plan, double planMs);

}  // namespace shoal::plan
