#include "engine/runtime/decode_ahead.h"

#include <span>
#include <string>

#include "engine/error.h"

namespace shoal::runtime {

std::vector<int32_t> decodeAheadLocally(Stage& stage, int32_t sequence, int32_t position,
                                        int32_t token, int32_t count, const SamplerParams& params) {
  const StageSpec& spec = stage.spec();
  if (!spec.hasEmbedding || !spec.hasHead) {
    throw Error("decode ahead: the stage must hold the embedding and the head");
  }
  if (count < 1 || count > kMaxDecodeAhead) {
    throw Error("decode ahead: " + std::to_string(count) + " tokens is outside 1.." +
                std::to_string(kMaxDecodeAhead));
  }
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(count));
  StageOutput result;
  for (int32_t j = 0; j < count; ++j) {
    const Segment segment{sequence, position + j, 1, LogitRows::Last};
    Batch batch;
    batch.tokens = std::span(&token, 1);
    batch.segments = std::span(&segment, 1);
    stage.forward(batch, result);
    SamplerParams p = params;
    p.seed = params.seed + static_cast<uint64_t>(j);
    Sampler sampler(p);
    token = sampler.sample(result.logits);
    out.push_back(token);
  }
  return out;
}

SampleRequest sampleRequestAt(const SamplerParams& p, uint64_t position) {
  SampleRequest r;
  r.temperature = p.temperature;
  r.topP = p.topP;
  r.topK = p.topK;
  r.minP = p.minP;
  r.seed = p.seed + position;
  return r;
}

}  // namespace shoal::runtime
