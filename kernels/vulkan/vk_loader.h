#pragma once
// The Vulkan loader, opened at run time (dlopen libvulkan.so.1) so that a machine without Vulkan
// starts normally and reports the backend unavailable. Every entry point Shoal calls is in the
// function table below; nothing links libvulkan.

#include <vulkan/vulkan.h>

#include <atomic>
#include <memory>
#include <string>

namespace shoal::vulkan {

// Entry points resolved through vkGetInstanceProcAddr / vkGetDeviceProcAddr.
#define SHOAL_VK_INSTANCE_FUNCS(X)            \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceMemoryProperties2)     \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)

#define SHOAL_VK_DEVICE_FUNCS(X)   \
  X(vkDestroyDevice)               \
  X(vkGetDeviceQueue)              \
  X(vkCreateBuffer)                \
  X(vkDestroyBuffer)               \
  X(vkGetBufferMemoryRequirements) \
  X(vkAllocateMemory)              \
  X(vkFreeMemory)                  \
  X(vkBindBufferMemory)            \
  X(vkMapMemory)                   \
  X(vkUnmapMemory)                 \
  X(vkGetBufferDeviceAddress)      \
  X(vkCreateShaderModule)          \
  X(vkDestroyShaderModule)         \
  X(vkCreatePipelineLayout)        \
  X(vkDestroyPipelineLayout)       \
  X(vkCreateComputePipelines)      \
  X(vkDestroyPipeline)             \
  X(vkCreateCommandPool)           \
  X(vkDestroyCommandPool)          \
  X(vkAllocateCommandBuffers)      \
  X(vkFreeCommandBuffers)          \
  X(vkBeginCommandBuffer)          \
  X(vkEndCommandBuffer)            \
  X(vkCmdBindPipeline)             \
  X(vkCmdPushConstants)            \
  X(vkCmdDispatch)                 \
  X(vkCmdPipelineBarrier)          \
  X(vkCmdCopyBuffer)               \
  X(vkCmdFillBuffer)               \
  X(vkQueueSubmit)                 \
  X(vkCreateFence)                 \
  X(vkDestroyFence)                \
  X(vkWaitForFences)               \
  X(vkResetFences)                 \
  X(vkDeviceWaitIdle)              \
  X(vkCreateQueryPool)             \
  X(vkDestroyQueryPool)            \
  X(vkCmdResetQueryPool)           \
  X(vkCmdWriteTimestamp)           \
  X(vkGetQueryPoolResults)

struct VkApi {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  PFN_vkCreateInstance vkCreateInstance = nullptr;
  PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion = nullptr;
  PFN_vkEnumerateInstanceLayerProperties vkEnumerateInstanceLayerProperties = nullptr;
  PFN_vkEnumerateInstanceExtensionProperties vkEnumerateInstanceExtensionProperties = nullptr;
  PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT = nullptr;
  PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT = nullptr;
#define SHOAL_VK_MEMBER(f) PFN_##f f = nullptr;
  SHOAL_VK_INSTANCE_FUNCS(SHOAL_VK_MEMBER)
  SHOAL_VK_DEVICE_FUNCS(SHOAL_VK_MEMBER)
#undef SHOAL_VK_MEMBER
};

// The loader, a VkInstance (Vulkan 1.2+) and, when SHOAL_VULKAN_VALIDATION=1, the Khronos
// validation layer with a debug messenger that counts the errors it reports (and prints them).
class Instance {
 public:
  // Never throws: on failure the result is null and `reason` says why ("libvulkan.so.1 not
  // found", "no Vulkan 1.2 instance", "vkCreateInstance failed: ...").
  static std::shared_ptr<Instance> create(std::string& reason);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  const VkApi& api() const { return m_api; }
  VkInstance handle() const { return m_instance; }
  bool validation() const { return m_messenger != VK_NULL_HANDLE; }

  // Load the device-level entry points for a device created from this instance.
  void loadDeviceFunctions(VkDevice device, VkApi& api) const;

 private:
  Instance() = default;
  void* m_library = nullptr;
  VkApi m_api;
  VkInstance m_instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT m_messenger = VK_NULL_HANDLE;
};

// Errors reported by the validation layer since the process started (0 without validation).
int validationErrorCount();

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" etc.
std::string resultName(VkResult result);

}  // namespace shoal::vulkan
