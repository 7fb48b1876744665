#include "kernels/backend_registry.h"

#include "engine/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_loader.h"
#ifdef SHOAL_HAVE_VULKAN
#include "kernels/vulkan/vulkan_backend.h"
#endif

namespace shoal::kernels {
namespace {

#ifndef SHOAL_HAVE_VULKAN
// Stands in for the Vulkan backend in a build without it (-DSHOAL_VULKAN=OFF).
class VulkanNotBuilt final : public runtime::Backend {
 public:
  std::string name() const override { return "vulkan"; }
  runtime::Availability availability() const override {
    return {false, "this build has no Vulkan backend (configured with SHOAL_VULKAN=OFF)"};
  }
  std::vector<runtime::DeviceInfo> devices() const override { return {}; }
  std::unique_ptr<runtime::Stage> createStage(const std::string&, const runtime::ModelSource&,
                                              const runtime::StageSpec&) override {
    throw Error("Vulkan backend: " + availability().reason);
  }
};
#endif

}  // namespace

std::vector<std::string> backendNames() { return {"cpu", "vulkan", "cuda"}; }

std::unique_ptr<runtime::Backend> createBackend(const std::string& name,
                                                const BackendOptions& options) {
  if (name == "cpu") return std::make_unique<cpu::CpuBackend>(options.cpuThreads);
#ifdef SHOAL_HAVE_VULKAN
  if (name == "vulkan") return std::make_unique<vulkan::VulkanBackend>(options.gpuMemoryLimit);
#else
  if (name == "vulkan") return std::make_unique<VulkanNotBuilt>();
#endif
  // The CUDA backend is a plugin loaded now; without it (or a driver) it is unavailable.
  if (name == "cuda") return cuda::loadCudaBackend(options.gpuMemoryLimit);
  throw Error("unknown backend '" + name + "' (this build has: cpu, vulkan, cuda)");
}

}  // namespace shoal::kernels
