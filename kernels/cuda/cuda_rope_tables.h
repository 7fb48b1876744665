#pragma once
// RoPE angles for every position of a stage's context, one table per distinct model::RopeParams
// among its layers (layers that differ only in RoPE base get their own table). The angles are
// computed on the host by the CPU backend's cpu::ropeAngles, so the CUDA stage rotates by exactly
// the CPU's angles (ggml's rounding) and the rope kernel only reads them.

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/model/layer_program.h"

namespace shoal::cuda {

struct RopeTable {
  const float* cos = nullptr;  // device, positions x nRot/2
  const float* sin = nullptr;  // device, positions x nRot/2
};

class RopeTables {
 public:
  // `freqFactors`: the stage's RoPE frequency factors on the host (nRot/2 floats: rope_freqs,
  // or LongRoPE's long or short factors, ModelWeights::ropeFactors), or nullptr for none.
  RopeTables(int32_t positions, const float* freqFactors);
  ~RopeTables();
  RopeTables(const RopeTables&) = delete;
  RopeTables& operator=(const RopeTables&) = delete;

  // The table of `params`, built and uploaded on the first request for them. Throws
  // shoal::Error for parameters it cannot build (odd or non-positive nRot, frequency factors the
  // model lacks) or when the device is out of memory.
  RopeTable get(const model::RopeParams& params);

 private:
  int32_t m_positions;
  const float* m_freqFactors;
  std::vector<std::pair<model::RopeParams, float*>> m_tables;  // cos then sin, one allocation
};

}  // namespace shoal::cuda
