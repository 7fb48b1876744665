#pragma once
// How much KV cache a model's layers take, from each layer's program (layer_program.h): keys and
// values of kvDim values each, in f16, per cached position of one sequence; a sliding-window
// layer's ring costs at most kvRingPositions(window) positions (kv_ring.h: the CPU and Vulkan
// stages keep one where that is below the context). The node's fit check and the planner's
// per-layer costs both compute KV here, so the two can not disagree.

#include <cstdint>

#include "engine/model/model_config.h"

namespace shoal::model {

// One layer's KV cache.
struct LayerKv {
  uint64_t bytesPerPosition = 0;  // K and V of one position of one sequence: 2 × 2 bytes × kvDim
  // 0: every position of the context; n: at most n positions' worth (a sliding-window layer's
  // ring, kvRingPositions; or LayerProgram::window)
  int32_t window = 0;
  bool operator==(const LayerKv&) const = default;
};

// Layer `layer`'s KV footprint (architectureOf(config).layerProgram(config, layer)). Throws
// shoal::Error when the layer is outside [0, nLayer) or the config has no known architecture.
LayerKv layerKv(const ModelConfig& config, int32_t layer);

// layerKv(config, layer).bytesPerPosition.
uint64_t kvBytesPerPosition(const ModelConfig& config, int32_t layer);

// Bytes of the KV cache of layers [firstLayer, lastLayer) for `sequences` sequences of
// `contextLength` positions each (a windowed layer holds min(contextLength, window) of them).
// Throws shoal::Error for a range outside [0, nLayer] or a negative length or count.
uint64_t kvCacheBytes(const ModelConfig& config, int32_t firstLayer, int32_t lastLayer,
                      int32_t contextLength, int32_t sequences);

}  // namespace shoal::model
