#include "engine/runtime/local_chain.h"

#include <algorithm>
#include <vector>

#include "engine/error.h"

namespace shoal::runtime {
namespace {

std::string mib(uint64_t bytes) {
  return std::to_string((bytes + (uint64_t{1} << 20) - 1) >> 20) + " MiB";
}

// The spec of layers [first, last) of `whole`, with the embedding when it starts at 0.
StageSpec partSpec(const StageSpec& whole, int32_t first, int32_t last, bool head) {
  StageSpec s = whole;
  s.firstLayer = first;
  s.lastLayer = last;
  s.hasEmbedding = whole.hasEmbedding && first == 0;
  s.hasHead = head;
  return s;
}

}  // namespace

std::string LocalSplit::describe(int32_t layers) const {
  if (parts.size() == 1 && parts.front().hasHead) return {};
  if (parts.empty()) return "no layer on the GPU, the CPU runs the model";
  std::string line;
  uint64_t free = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const DevicePart& p = parts[i];
    line += (i == 0 ? "" : ", ") + p.device + " takes layers " + std::to_string(p.firstLayer) +
            "-" + std::to_string(p.lastLayer - 1) +
            (i == 0 ? " of " + std::to_string(layers) : "") + (p.hasHead ? " and the head" : "");
    free += p.freeBytes;
  }
  if (!parts.back().hasHead) {
    line += parts.back().lastLayer == layers ? ", the CPU the head" : ", the CPU the rest";
  }
  if (automatic) {
    line += " (the model needs " + mib(modelBytes) + ", the " +
            (parts.size() == 1 ? "device has " : "devices have ") + mib(free) + " free)";
  }
  return line;
}

std::vector<std::string> chainDevices(const Backend& backend, const std::string& asked) {
  if (!asked.empty()) return {asked};
  const std::vector<DeviceInfo> all = backend.devices();
  if (all.empty()) return {};
  std::vector<std::string> out{all.front().id};
  if (all.front().type != "discrete-gpu") return out;
  for (size_t i = 1; i < all.size(); ++i) {
    if (all[i].type == "discrete-gpu") out.push_back(all[i].id);
  }
  return out;
}

LocalSplit planLocalSplit(Backend& backend, const std::vector<std::string>& devices,
                          const ModelSource& model, const StageSpec& whole,
                          int32_t requestedLayers) {
  if (devices.empty()) throw Error("no device to run the model on");
  const int32_t layers = whole.lastLayer;
  LocalSplit split;
  split.modelBytes = backend.stageDeviceBytes(model, whole);
  const std::string& first = devices.front();
  if (split.modelBytes == 0) {  // a CPU backend: everything on its device
    if (requestedLayers >= 0 && requestedLayers != layers) {
      throw Error(
          "--gpu-layers needs a GPU backend that reports its memory (--backend vulkan or cuda)");
    }
    split.parts.push_back({first, 0, layers, true, 0});
    split.deviceLayers = layers;
    return split;
  }
  if (requestedLayers >= 0) {  // as asked, on the first device
    const int32_t n = std::min(requestedLayers, layers);
    if (n > 0) split.parts.push_back({first, 0, n, n == layers, backend.freeDeviceBytes(first)});
    split.deviceLayers = n;
    return split;
  }
  split.automatic = true;
  int32_t start = 0;
  for (size_t i = 0; i < devices.size() && start < layers; ++i) {
    const std::string& device = devices[i];
    const uint64_t free = backend.freeDeviceBytes(device);
    // The rest and the head here, if they fit.
    if (backend.stageDeviceBytes(model, partSpec(whole, start, layers, true)) <= free) {
      split.parts.push_back({device, start, layers, true, free});
      start = layers;
      break;
    }
    // Else the most layers that fit without the head (the next device or the CPU goes on, and
    // the CPU holds the head: a stage of no layer when this device took them all).
    int32_t end = start;
    for (int32_t fit = layers; fit > start; --fit) {
      if (backend.stageDeviceBytes(model, partSpec(whole, start, fit, false)) <= free) {
        end = fit;
        break;
      }
    }
    if (end == start) {
      if (i == 0) {
        throw Error(device + " has " + mib(free) +
                    " free, less than the embedding and one layer need (" +
                    mib(backend.stageDeviceBytes(model, partSpec(whole, 0, 1, false))) +
                    "); run on the CPU (--backend cpu)");
      }
      continue;  // no room for a layer here: the next device or the CPU goes on
    }
    split.parts.push_back({device, start, end, false, free});
    start = end;
  }
  split.deviceLayers = start;
  return split;
}

std::unique_ptr<Chain> buildLocalChain(Backend& backend, Backend* cpu, const ModelSource& model,
                                       const StageSpec& whole, const LocalSplit& split) {
  std::vector<std::unique_ptr<Stage>> stages;
  for (const DevicePart& p : split.parts) {
    stages.push_back(backend.createStage(p.device, model,
                                         partSpec(whole, p.firstLayer, p.lastLayer, p.hasHead)));
  }
  if (split.needsCpu()) {
    if (!cpu) throw Error("a split between the device and the CPU needs the CPU backend");
    stages.push_back(cpu->createStage(cpu->devices().front().id, model,
                                      partSpec(whole, split.deviceLayers, whole.lastLayer, true)));
  }
  return std::make_unique<Chain>(std::move(stages));
}

}  // namespace shoal::runtime
