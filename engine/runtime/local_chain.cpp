#include "engine/runtime/local_chain.h"

#include <algorithm>
#include <vector>

#include "engine/error.h"

namespace shoal::runtime {
namespace {

std::string mib(uint64_t bytes) {
  return std::to_string((bytes + (uint64_t{1} << 20) - 1) >> 20) + " MiB";
}

}  // namespace

std::string LocalSplit::describe(const std::string& device, int32_t layers) const {
  if (deviceLayers >= layers) return {};
  if (deviceLayers == 0) return device + " takes no layer, the CPU runs the model";
  std::string line = device + " takes layers 0-" + std::to_string(deviceLayers - 1) + " of " +
                     std::to_string(layers) + ", the CPU the rest";
  if (automatic) {
    line +=
        " (the model needs " + mib(modelBytes) + ", the device has " + mib(freeBytes) + " free)";
  }
  return line;
}

LocalSplit planLocalSplit(Backend& backend, const std::string& device, const ModelSource& model,
                          const StageSpec& whole, int32_t requestedLayers) {
  const int32_t layers = whole.lastLayer;
  LocalSplit split;
  split.modelBytes = backend.stageDeviceBytes(model, whole);
  if (split.modelBytes == 0) {
    if (requestedLayers >= 0 && requestedLayers != layers) {
      throw Error(
          "--gpu-layers needs a GPU backend that reports its memory (--backend vulkan or cuda)");
    }
    split.deviceLayers = layers;
    return split;
  }
  split.freeBytes = backend.freeDeviceBytes(device);
  if (requestedLayers >= 0) {
    split.deviceLayers = std::min(requestedLayers, layers);
    return split;
  }
  split.automatic = true;
  if (split.modelBytes <= split.freeBytes) {
    split.deviceLayers = layers;
    return split;
  }
  StageSpec part = whole;
  part.hasHead = false;
  for (int32_t fit = layers - 1; fit > 0; --fit) {
    part.lastLayer = fit;
    if (backend.stageDeviceBytes(model, part) <= split.freeBytes) {
      split.deviceLayers = fit;
      return split;
    }
  }
  part.lastLayer = 1;
  throw Error(device + " has " + mib(split.freeBytes) +
              " free, less than the embedding and one layer need (" +
              mib(backend.stageDeviceBytes(model, part)) + "); run on the CPU (--backend cpu)");
}

std::unique_ptr<Chain> buildLocalChain(Backend& backend, const std::string& device, Backend* cpu,
                                       const ModelSource& model, const StageSpec& whole,
                                       const LocalSplit& split) {
  std::vector<std::unique_ptr<Stage>> stages;
  if (split.deviceLayers >= whole.lastLayer) {
    stages.push_back(backend.createStage(device, model, whole));
  } else {
    if (!cpu) throw Error("a split between the device and the CPU needs the CPU backend");
    StageSpec onDevice = whole, onCpu = whole;
    onDevice.lastLayer = onCpu.firstLayer = split.deviceLayers;
    onDevice.hasHead = false;
    onCpu.hasEmbedding = split.deviceLayers == 0;
    if (split.deviceLayers > 0) stages.push_back(backend.createStage(device, model, onDevice));
    stages.push_back(cpu->createStage(cpu->devices().front().id, model, onCpu));
  }
  return std::make_unique<Chain>(std::move(stages));
}

}  // namespace shoal::runtime
