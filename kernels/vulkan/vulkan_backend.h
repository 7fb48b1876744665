#pragma once
// The Vulkan backend: every Vulkan device of this machine (de-duplicated), stages on them.
// Construction never throws: without a loader, an ICD or a usable device the backend is
// unavailable with the reason, and Shoal carries on with the other backends.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/backend.h"
#include "kernels/vulkan/vk_device.h"

namespace shoal::vulkan {

class VulkanBackend final : public runtime::Backend {
 public:
  // memoryLimit: the most device-local memory stages may hold per device (0: the budget alone).
  explicit VulkanBackend(uint64_t memoryLimit = 0);
  ~VulkanBackend() override;

  std::string name() const override { return "vulkan"; }
  runtime::Availability availability() const override;
  // The usable devices ("vulkan0", ...), the best first: discrete GPUs, then integrated, virtual
  // and other ones, a CPU implementation (lavapipe) last, so a caller that takes the first
  // device never gets lavapipe when a real GPU exists. Unusable ones are named in
  // availability()'s reason when none is usable, and listed with their reason by
  // physicalDevices().
  std::vector<runtime::DeviceInfo> devices() const override;
  std::unique_ptr<runtime::Stage> createStage(const std::string& deviceId,
                                              const runtime::ModelSource& model,
                                              const runtime::StageSpec& spec) override;
  uint64_t stageDeviceBytes(const runtime::ModelSource& model,
                            const runtime::StageSpec& spec) const override;
  uint64_t freeDeviceBytes(const std::string& deviceId) override;

  // Every device found, with what it offers and (unusable) why Shoal cannot use it.
  const std::vector<PhysicalDevice>& physicalDevices() const { return m_physical; }
  // The logical device for an id, created on first use and shared by the stages on it.
  std::shared_ptr<Device> device(const std::string& deviceId);

 private:
  std::shared_ptr<Instance> m_instance;
  std::string m_reason;  // why the instance could not be created
  uint64_t m_memoryLimit = 0;
  std::vector<PhysicalDevice> m_physical;
  std::map<std::string, std::shared_ptr<Device>> m_devices;
};

}  // namespace shoal::vulkan
