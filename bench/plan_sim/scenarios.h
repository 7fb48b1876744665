#pragma once
// Generated pools for the planner simulator: home labs (2–8 devices on 1–4 machines of a LAN)
// and volunteer swarms (8–512 devices over a WAN), with real device specs (device_specs.h),
// real model shapes at Q4_K_M, and realistic links. Deterministic for a given seed.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "engine/plan/pool_file.h"
#include "engine/plan/types.h"

namespace shoal::plan_sim {

// A small, portable generator (splitmix64), so that a seed gives the same pools everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : m_state(seed) {}
  uint64_t next();
  double uniform(double lo, double hi);  // [lo, hi)
  int between(int lo, int hi);           // [lo, hi]
  bool chance(double p);

 private:
  uint64_t m_state;
};

// A transformer's shape; costs follow engine/plan/model_cost.h for a Q4_K_M file.
struct ModelPreset {
  std::string_view name;
  int layers;
  int embd;
  int feedForward;
  int heads;
  int kvHeads;
  int headDim;
  int vocab;
};

std::span<const ModelPreset> modelPresets();
plan::ModelCost modelCost(const ModelPreset& preset, int64_t contextTokens);

struct Scenario {
  std::string name;
  std::string modelName;
  plan::PoolFile file;         // pool, model costs and request
  bool heterogeneous = false;  // more than one kind of device
};

Scenario homeLab(Rng& rng, int index);
Scenario volunteer(Rng& rng, int devices, int index);

}  // namespace shoal::plan_sim
