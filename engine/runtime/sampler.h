#pragma once
// Picks the next token from a row of logits. Deterministic for a given seed.
// Order of the chain (same as llama.cpp's common default order for the ones both have):
// repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw. temperature <= 0 is greedy
// (argmax after the penalty; ties go to the lowest id).

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <vector>

namespace shoal::runtime {

struct SamplerParams {
  float temperature = 0.8f;    // <= 0: greedy
  int32_t topK = 40;           // <= 0: off
  float topP = 0.95f;          // >= 1: off
  float minP = 0.05f;          // <= 0: off
  float repeatPenalty = 1.0f;  // 1: off; divides positive logits, multiplies negative ones
  int32_t repeatLastN = 64;    // how many recent tokens the penalty looks at
  uint64_t seed = 0;           // same seed, same output
};

class Sampler {
 public:
  explicit Sampler(SamplerParams params);

  int32_t sample(std::span<const float> logits);
  // Tell the sampler a token was accepted (prompt or generated) for the repetition penalty.
  void accept(int32_t token);
  void reset();  // forget history and re-seed

  const SamplerParams& params() const { return m_params; }

 private:
  SamplerParams m_params;
  std::mt19937_64 m_rng;
  std::deque<int32_t> m_recent;
  std::vector<std::pair<float, int32_t>> m_candidates;  // scratch, reused across calls
};

}  // namespace shoal::runtime
