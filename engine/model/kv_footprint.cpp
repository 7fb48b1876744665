#include "engine/model/kv_footprint.h"

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "engine/model/architecture.h"
#include "engine/model/kv_ring.h"
#include "engine/model/layer_program.h"

namespace shoal::model {

namespace {

constexpr uint64_t kF16Bytes = 2;

}  // namespace

LayerKv layerKv(const ModelConfig& config, int32_t layer) {
  if (layer < 0 || layer >= config.nLayer) {
    throw Error("layer " + std::to_string(layer) + " is outside the model's " +
                std::to_string(config.nLayer) + " layers");
  }
  const LayerProgram program = architectureOf(config).layerProgram(config, layer);
  LayerKv kv;
  kv.bytesPerPosition = 2 * kF16Bytes * static_cast<uint64_t>(std::max(program.kvDim, 0));
  // A sliding-window Attend: the backends keep a ring that costs kvRingPositions where that is
  // below the context (kv_ring.h), which min(context, window) in kvCacheBytes gives exactly.
  const int32_t window = attendWindow(program);
  kv.window = program.window > 0 ? program.window : window > 0 ? kvRingPositions(window) : 0;
  return kv;
}

uint64_t kvBytesPerPosition(const ModelConfig& config, int32_t layer) {
  return layerKv(config, layer).bytesPerPosition;
}

uint64_t kvCacheBytes(const ModelConfig& config, int32_t firstLayer, int32_t lastLayer,
                      int32_t contextLength, int32_t sequences) {
  if (firstLayer < 0 || lastLayer < firstLayer || lastLayer > config.nLayer) {
    throw Error("layers [" + std::to_string(firstLayer) + ", " + std::to_string(lastLayer) +
                ") are outside the model's " + std::to_string(config.nLayer) + " layers");
  }
  if (contextLength < 0 || sequences < 0) {
    throw Error("KV cache of " + std::to_string(sequences) + " sequences of " +
                std::to_string(contextLength) + " positions: both must be >= 0");
  }
  uint64_t bytes = 0;
  for (int32_t l = firstLayer; l < lastLayer; ++l) {
    const LayerKv kv = layerKv(config, l);
    const int32_t positions = kv.window > 0 ? std::min(contextLength, kv.window) : contextLength;
    bytes +=
        kv.bytesPerPosition * static_cast<uint64_t>(positions) * static_cast<uint64_t>(sequences);
  }
  return bytes;
}

}  // namespace shoal::model
