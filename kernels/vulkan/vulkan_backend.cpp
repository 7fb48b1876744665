#include "kernels/vulkan/vulkan_backend.h"

#include <algorithm>

#include "engine/error.h"
#include "kernels/vulkan/vulkan_stage.h"

namespace shoal::vulkan {

VulkanBackend::VulkanBackend(uint64_t memoryLimit) : m_memoryLimit(memoryLimit) {
  try {
    m_instance = Instance::create(m_reason);
    if (m_instance) m_physical = enumerateDevices(*m_instance);
  } catch (const std::exception& e) {
    m_instance.reset();
    m_reason = std::string("Vulkan initialisation failed: ") + e.what();
  }
}

VulkanBackend::~VulkanBackend() = default;

runtime::Availability VulkanBackend::availability() const {
  if (!m_instance) return {false, m_reason};
  if (m_physical.empty()) return {false, "no Vulkan device (the loader found no driver/ICD)"};
  std::string why;
  for (const PhysicalDevice& d : m_physical) {
    if (d.unusable.empty()) return {true, {}};
    why += (why.empty() ? "" : "; ") + d.info.id + " (" + d.info.name + ") " + d.unusable;
  }
  return {false, "no usable Vulkan device: " + why};
}

std::vector<runtime::DeviceInfo> VulkanBackend::devices() const {
  std::vector<runtime::DeviceInfo> out;
  for (const PhysicalDevice& d : m_physical)
    if (d.unusable.empty()) out.push_back(d.info);
  auto rank = [](const runtime::DeviceInfo& d) {
    if (d.type == "discrete-gpu") return 0;
    if (d.type == "integrated-gpu") return 1;
    if (d.type == "virtual-gpu") return 2;
    if (d.type == "cpu") return 4;
    return 3;
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  return out;
}

uint64_t VulkanBackend::stageDeviceBytes(const runtime::ModelSource& model,
                                         const runtime::StageSpec& spec) const {
  return VulkanStage::deviceBytes(model, spec);
}

uint64_t VulkanBackend::freeDeviceBytes(const std::string& deviceId) {
  return device(deviceId)->freeMemory();
}

std::shared_ptr<Device> VulkanBackend::device(const std::string& deviceId) {
  if (auto it = m_devices.find(deviceId); it != m_devices.end()) return it->second;
  for (const PhysicalDevice& d : m_physical) {
    if (d.info.id != deviceId) continue;
    if (!d.unusable.empty()) {
      throw Error("Vulkan device " + deviceId + " (" + d.info.name + ") " + d.unusable);
    }
    auto dev = std::make_shared<Device>(m_instance, d, m_memoryLimit);
    m_devices[deviceId] = dev;
    return dev;
  }
  throw Error("Vulkan backend: unknown device '" + deviceId + "'" +
              (m_instance ? "" : " (Vulkan unavailable: " + m_reason + ")"));
}

std::unique_ptr<runtime::Stage> VulkanBackend::createStage(const std::string& deviceId,
                                                           const runtime::ModelSource& model,
                                                           const runtime::StageSpec& spec) {
  return std::make_unique<VulkanStage>(device(deviceId), model, spec);
}

}  // namespace shoal::vulkan
