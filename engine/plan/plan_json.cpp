#include "engine/plan/plan_json.h"

#include <nlohmann/json.hpp>

namespace shoal::plan {

std::string planToJson(const Plan& plan, double planMs) {
  using Json = nlohmann::ordered_json;
  Json out;
  out["feasible"] = plan.feasible;
  Json pipelines = Json::array();
  for (const Pipeline& p : plan.pipelines) {
    Json stages = Json::array();
    for (const StageAssignment& s : p.stages) {
      stages.push_back({{"device", s.deviceId},
                        {"first_layer", s.firstLayer},
                        {"last_layer", s.lastLayer},
                        {"stage_s", s.stageS}});
    }
    pipelines.push_back(
        {{"stages", stages}, {"latency_s", p.latencyS}, {"throughput_tok_s", p.throughputTokS}});
  }
  out["pipelines"] = pipelines;
  out["throughput_tok_s"] = plan.throughputTokS;
  out["unused_devices"] = plan.unusedDevices;
  out["plan_ms"] = planMs;
  if (!plan.feasible) {
    out["reason"] = plan.infeasibleReason;
    out["missing_bytes"] = plan.missingBytes;
  }
  return out.dump(2);
}

}  // namespace shoal::plan
