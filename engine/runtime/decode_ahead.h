#pragma once
// Stage::decodeAhead for a stage that computes where it is called (a pool node's hosted stage,
// lan/node/node_host.cpp; a test's stand-in for one): `count` one-token forwards, each one's
// logits sampled here and fed to the next. The j-th draw uses a fresh Sampler with seed
// params.seed + j — what a node does for each token a caller sends it (a caller seeds each draw
// by position, so the node's sampler is rebuilt every token), so decoding ahead gives the very
// tokens that decoding one by one gives.

#include <cstdint>
#include <vector>

#include "engine/runtime/sampler.h"
#include "engine/runtime/stage.h"

namespace shoal::runtime {

// Most tokens one decodeAhead call may ask for (a node's reply carries them all; the session
// sizes its bursts well below this).
inline constexpr int32_t kMaxDecodeAhead = 64;

// `stage` must hold the embedding and the head. Throws shoal::Error for a count outside
// 1..kMaxDecodeAhead or a stage without both ends; whatever the stage throws.
std::vector<int32_t> decodeAheadLocally(Stage& stage, int32_t sequence, int32_t position,
                                        int32_t token, int32_t count, const SamplerParams& params);

// The SamplerParams a SampleRequest stands for (no repetition penalty: the head has no history).
// Inline: the CUDA plugin, which links no engine library, draws with it too.
inline SamplerParams samplerParamsOf(const SampleRequest& sample) {
  SamplerParams p;
  p.temperature = sample.temperature;
  p.topP = sample.topP;
  p.topK = sample.topK;
  p.minP = sample.minP;
  p.repeatPenalty = 1.0f;
  p.seed = sample.seed;
  return p;
}
// The SampleRequest that draws the token at `position` as drawsByPosition does: p's chain, seed
// p.seed + position.
SampleRequest sampleRequestAt(const SamplerParams& p, uint64_t position);

}  // namespace shoal::runtime
