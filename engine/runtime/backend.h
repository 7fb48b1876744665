#pragma once
// A backend is one kind of compute (cpu, vulkan, cuda). It lists its devices, says why it is
// unavailable when it is, and creates stages on its devices. Backends plug into the engine
// through this interface only.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/runtime/stage.h"

namespace shoal::gguf {
class File;
}
namespace shoal::model {
struct ModelConfig;
struct ModelWeights;
}  // namespace shoal::model

namespace shoal::runtime {

struct DeviceInfo {
  std::string id;            // unique among all backends of this machine: "cpu0", "vulkan0", ...
  std::string backend;       // "cpu", "vulkan", "cuda"
  std::string name;          // human-readable, e.g. "AMD Ryzen 7 5800X (8 threads)"
  std::string type;          // "cpu", "discrete-gpu", "integrated-gpu", "virtual-gpu", "other"
  uint64_t memoryTotal = 0;  // bytes usable for weights and KV cache
  uint64_t memoryFree = 0;   // bytes free now (best effort)
  double bandwidthBytesPerS = 0;  // measured memory bandwidth, 0 until profiled
  double flopsPerS = 0;           // measured throughput, 0 until profiled
  // Backend-specific facts for display, in order: {"vendor", "AMD"}, {"subgroup_size", "64"},
  // {"fp64", "yes"}, ... (shoal-cli devices prints them; nothing decides on them).
  std::vector<std::pair<std::string, std::string>> details;
};

struct Availability {
  bool available = false;
  std::string reason;  // why not, e.g. "no Vulkan ICD found"; empty when available
};

// The model a stage is built from. The file mapping must outlive every stage made from it.
struct ModelSource {
  const gguf::File* file = nullptr;
  const model::ModelConfig* config = nullptr;
  const model::ModelWeights* weights = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;  // "cpu", "vulkan", "cuda"
  virtual Availability availability() const = 0;
  virtual std::vector<DeviceInfo> devices() const = 0;  // empty when unavailable

  // Build a stage holding spec's layers on the device; loads (uploads) its weights now.
  // Throws shoal::Error when the device is unknown or the stage does not fit.
  virtual std::unique_ptr<Stage> createStage(const std::string& deviceId, const ModelSource& model,
                                             const StageSpec& spec) = 0;

  // Memory fit, for a backend whose stages live in a device's own memory (a GPU): the bytes a
  // stage of this spec would allocate there, and what the device has free for one now. 0 and 0
  // where stages live in host memory (the CPU backend), which these do not bound. A caller
  // splits a model that does not fit between this device and the CPU (cli: --gpu-layers).
  virtual uint64_t stageDeviceBytes(const ModelSource& /*model*/, const StageSpec& /*spec*/) const {
    return 0;
  }
  virtual uint64_t freeDeviceBytes(const std::string& /*deviceId*/) { return 0; }
};

}  // namespace shoal::runtime
