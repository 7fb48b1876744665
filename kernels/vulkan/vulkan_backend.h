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
  VulkanBackend();
  ~VulkanBackend() override;

  std::string name() const override { return "vulkan"; }
  runtime::Availability availability() const override;
  // The usable devices ("vulkan0", ...); unusable ones are named in availability()'s reason
  // when none is usable, and listed with their reason by physicalDevices().
  std::vector<runtime::DeviceInfo> devices() const override;
  std::unique_ptr<runtime::Stage> createStage(const std::string& deviceId,
                                              const runtime::ModelSource& model,
                                              const runtime::StageSpec& spec) override;

  // Every device found, with what it offers and (unusable) why Shoal cannot use it.
  const std::vector<PhysicalDevice>& physicalDevices() const { return m_physical; }
  // The logical device for an id, created on first use and shared by the stages on it.
  std::shared_ptr<Device> device(const std::string& deviceId);

 private:
  std::shared_ptr<Instance> m_instance;
  std::string m_reason;  // why the instance could not be created
  std::vector<PhysicalDevice> m_physical;
  std::map<std::string, std::shared_ptr<Device>> m_devices;
};

}  // namespace shoal::vulkan
