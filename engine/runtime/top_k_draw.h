#pragma once
// The host's half of top-k sampling on a GPU: the device selects a row's k best logits (best
// first: higher first, lower id on ties, NaN as -inf), the host draws among them here. The CPU
// sampler's chain over the whole row starts with the same top k (sampler.h), and its order among
// them is theirs, so the draw gives the token it would give over the whole row. Inline (with
// sampler.cpp compiled in): the CUDA plugin links no engine library.

#include <cstdint>
#include <span>

#include "engine/error.h"
#include "engine/runtime/decode_ahead.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/stage.h"

namespace shoal::runtime {

// values/ids: the row's candidates, best first (an id < 0 marks none: a row shorter than k).
// No repetition penalty: a head stage samples only without one (it has no history).
inline int32_t drawAmongTopK(const SampleRequest& request, std::span<const float> values,
                             std::span<const int32_t> ids) {
  Sampler sampler(samplerParamsOf(request));
  const int32_t at = sampler.sample(values);
  if (ids[static_cast<size_t>(at)] < 0) throw Error("the top-k draw chose an empty candidate");
  return ids[static_cast<size_t>(at)];
}

}  // namespace shoal::runtime
