#pragma once
// A model's chain on one machine: every layer on one device, or, on a GPU backend whose device
// lacks the memory for the model, the first layers that fit there and the rest (and the head)
// on the CPU. The shoal-cli commands and the app's chat build their chains with it.

#include <cstdint>
#include <memory>
#include <string>

#include "engine/runtime/backend.h"
#include "engine/runtime/chain.h"

namespace shoal::runtime {

// Where the layers go.
struct LocalSplit {
  int32_t deviceLayers = 0;  // layers [0, deviceLayers) on the device, the rest on the CPU
  uint64_t modelBytes = 0;   // device memory the whole model would take (0: a CPU backend)
  uint64_t freeBytes = 0;    // the device's free memory when planned
  bool automatic = false;    // chosen by the fit (no layer count asked for)
  // One line for the user, e.g. "vulkan0 takes layers 0-11 of 30, the CPU the rest (the model
  // needs 1.2 GiB, the device has 800 MiB free)"; empty when the device takes every layer.
  std::string describe(const std::string& device, int32_t layers) const;
};

// requestedLayers < 0: as many layers as fit the device's free memory (all when the model
// fits), by Backend::stageDeviceBytes and freeDeviceBytes; otherwise that many (at most every
// layer). A CPU backend takes every layer. Throws shoal::Error when the device cannot hold even
// the embedding and one layer, and when a layer count is asked of a CPU backend.
LocalSplit planLocalSplit(Backend& backend, const std::string& device, const ModelSource& model,
                          const StageSpec& whole, int32_t requestedLayers);

// The chain: one stage on the device, or the device's layers then a CPU stage on `cpu` (which
// must outlive the chain, as `backend` must). `whole` is the one-stage spec (embedding, head).
std::unique_ptr<Chain> buildLocalChain(Backend& backend, const std::string& device, Backend* cpu,
                                       const ModelSource& model, const StageSpec& whole,
                                       const LocalSplit& split);

}  // namespace shoal::runtime
