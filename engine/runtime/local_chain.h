#pragma once
// A model's chain on one machine: every layer on one device, or, on a GPU backend whose device
// lacks the memory for the model, the layers spread over the machine's GPUs of that backend in
// order (each as many as fit its free memory, the last also the head when the rest fits there),
// and whatever is left (and the head) on the CPU. The shoal-cli commands and the app's chat build
// their chains with it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/backend.h"
#include "engine/runtime/chain.h"

namespace shoal::runtime {

// One device's part of the chain: layers [firstLayer, lastLayer), the head too when hasHead.
struct DevicePart {
  std::string device;
  int32_t firstLayer = 0;
  int32_t lastLayer = 0;
  bool hasHead = false;
  uint64_t freeBytes = 0;  // the device's free memory when planned (0: not asked)
};

// Where the layers go.
struct LocalSplit {
  // The devices' parts in chain order, from layer 0; the CPU takes the layers after the last
  // one and the head when no part has it. Empty: the CPU runs the whole model.
  std::vector<DevicePart> parts;
  int32_t deviceLayers = 0;  // layers on the devices: [0, deviceLayers)
  uint64_t modelBytes = 0;   // device memory the whole model would take (0: a CPU backend)
  bool automatic = false;    // chosen by the fit (no layer count asked for)

  // Whether a CPU stage runs the end of the chain.
  bool needsCpu() const { return parts.empty() || !parts.back().hasHead; }
  // One line for the user, e.g. "vulkan0 takes layers 0-11 of 30, the CPU the rest (the model
  // needs 1.2 GiB, the device has 800 MiB free)"; empty when one device takes every layer.
  std::string describe(int32_t layers) const;
};

// The devices a chain of `backend` may spread over: `asked` alone when given (--device);
// otherwise the backend's first (best) device and, when that is a discrete GPU, every other
// discrete GPU it lists, in its order (a machine's GPUs of one kind; never a software device).
std::vector<std::string> chainDevices(const Backend& backend, const std::string& asked);

// requestedLayers < 0: as many layers as fit the devices' free memory, device after device (all
// on the first when the model fits it), by Backend::stageDeviceBytes and freeDeviceBytes; a device
// that cannot take the rest with the head takes what fits without it, and the CPU holds the head
// (a CPU stage of no layer when the devices took every layer);
// otherwise that many on the first device (at most every layer). A CPU backend takes every
// layer. Throws shoal::Error when the first device cannot hold even the embedding and one layer,
// and when a layer count is asked of a CPU backend. A later device without room for one layer is
// left out.
LocalSplit planLocalSplit(Backend& backend, const std::vector<std::string>& devices,
                          const ModelSource& model, const StageSpec& whole,
                          int32_t requestedLayers);

// The chain: the parts' stages on their devices, then a CPU stage on `cpu` when the split needs
// one (which must outlive the chain, as `backend` must). `whole` is the one-stage spec
// (embedding, head).
std::unique_ptr<Chain> buildLocalChain(Backend& backend, Backend* cpu, const ModelSource& model,
                                       const StageSpec& whole, const LocalSplit& split);

}  // namespace shoal::runtime
