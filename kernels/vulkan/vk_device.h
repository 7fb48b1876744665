#pragma once
// Vulkan devices: what each physical device offers (probe), and a logical device ready for
// compute (Device): one queue, the embedded shaders as pipelines, a command pool and a fence.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/runtime/backend.h"
#include "kernels/vulkan/vk_loader.h"

namespace shoal::vulkan {

struct MemoryHeap {
  uint64_t size = 0;
  uint64_t budget = 0;  // VK_EXT_memory_budget's heapBudget; the size when the extension is absent
  uint64_t usage = 0;   // VK_EXT_memory_budget's heapUsage; 0 when absent
  bool deviceLocal = false;
};

// One physical device as the loader reports it.
struct PhysicalDevice {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  runtime::DeviceInfo info;  // id "vulkan<N>" in enumeration order after de-duplication
  std::string vendor;        // "NVIDIA", "AMD", "Intel", "Mesa (llvmpipe)", ...
  std::string driver;        // driverName + driverInfo (VkPhysicalDeviceDriverProperties)
  uint32_t apiVersion = 0;
  uint32_t subgroupSize = 0;
  bool subgroupArithmetic = false;  // subgroupAdd in compute shaders
  bool fp16 = false;                // shaderFloat16
  bool fp64 = false;                // shaderFloat64: the opt-in exact-math shaders usable
  bool int16 = false;               // shaderInt16
  bool int8Dot = false;             // shaderIntegerDotProduct (VK_KHR_shader_integer_dot_product)
  bool int8DotExtension = false;    // that extension listed (what the device enables for it)
  bool memoryBudget = false;        // VK_EXT_memory_budget present
  std::vector<MemoryHeap> heaps;
  uint64_t maxAllocation = 0;    // maxMemoryAllocationSize
  uint32_t maxSharedMemory = 0;  // maxComputeSharedMemorySize (bytes)
  uint32_t computeQueueFamily = UINT32_MAX;
  uint32_t timestampBits = 0;  // the compute queue's timestampValidBits (0: no timestamps)
  float timestampPeriod = 0;   // nanoseconds per timestamp tick
  std::string unusable;        // empty when Shoal can run on it, else the missing feature
};

// Every physical device, de-duplicated: the same GPU exposed by two drivers (e.g. RADV and
// AMDVLK) appears once, the first driver the loader lists winning. Identity is deviceUUID, or
// the PCI address when VK_EXT_pci_bus_info is present.
std::vector<PhysicalDevice> enumerateDevices(const Instance& instance);

struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
  uint32_t localSizeX = 0;
};

// A logical device for compute. Thread-compatible: one user at a time (a Stage).
class Device {
 public:
  // Throws shoal::Error with the Vulkan result when the device cannot be created, and for a
  // SHOAL_VULKAN_MATH other than native or exact, or exact on a device without shaderFloat64.
  // memoryLimit: the most device-local memory the stages on this device may hold (0: the
  // device's budget alone decides).
  Device(std::shared_ptr<Instance> instance, const PhysicalDevice& physical,
         uint64_t memoryLimit = 0);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const VkApi& api() const { return m_api; }
  VkDevice handle() const { return m_device; }
  const PhysicalDevice& physical() const { return m_physical; }
  VkPipelineLayout layout() const { return m_layout; }
  // Whether matvec uses subgroupAdd (SHOAL_VULKAN_NO_SUBGROUP=1 forces the shared-memory path).
  bool useSubgroups() const { return m_useSubgroups; }
  // Whether the 8-bit integer products use packed dot-product instructions (SPV_KHR_integer_dot_
  // product, enabled when the device has the extension and the feature): the same exact integer
  // sums either way. SHOAL_VULKAN_NO_INT_DOT=1, or setIntegerDot(false) (the tests), turns it off.
  bool useIntegerDot() const { return m_useIntegerDot; }
  void setIntegerDot(bool on) { m_useIntegerDot = on && m_integerDotEnabled; }
  // Whether the kernels round bit for bit as the CPU backend (the "<name>_exact" shader
  // variants, shaders/math.glsl; needs shaderFloat64). Off by default: the default variants use
  // the device's own arithmetic, held to the GPU accuracy contract. SHOAL_VULKAN_MATH=exact turns
  // it on (a debugging tool, e.g. on lavapipe); SHOAL_VULKAN_MATH=native is the default.
  bool exactMath() const { return m_exactMath; }

  // The pipeline of an embedded shader with its specialization constants (constant_id 0..n-1,
  // 32-bit each); created on first use and cached. With exactMath() the shader's "_exact"
  // variant is used where one exists. Throws for an unknown shader name.
  const Pipeline& pipeline(const std::string& shader, const std::vector<uint32_t>& constants = {});

  // Device-local memory a new stage may still take, now: VK_EXT_memory_budget's budget minus
  // usage over the device-local heaps (without the extension, their size minus what this Device
  // holds), and no more than the memory limit leaves.
  uint64_t freeMemory() const;
  // Device-local bytes the memory pools on this device hold (MemoryPool keeps it current).
  uint64_t heldMemory() const { return m_held; }
  void addHeldMemory(int64_t bytes) { m_held += static_cast<uint64_t>(bytes); }

  // A primary command buffer from the device's pool (freed with the device).
  VkCommandBuffer allocateCommandBuffer();
  void freeCommandBuffer(VkCommandBuffer commands);
  // Submit and wait until done. Throws on a Vulkan error (device lost, ...).
  void submitAndWait(VkCommandBuffer commands);

 private:
  std::shared_ptr<Instance> m_instance;
  PhysicalDevice m_physical;
  VkApi m_api;
  VkDevice m_device = VK_NULL_HANDLE;
  VkQueue m_queue = VK_NULL_HANDLE;
  VkCommandPool m_pool = VK_NULL_HANDLE;
  VkFence m_fence = VK_NULL_HANDLE;
  VkPipelineLayout m_layout = VK_NULL_HANDLE;
  bool m_useSubgroups = false;
  bool m_integerDotEnabled = false, m_useIntegerDot = false;
  bool m_exactMath = false;
  uint64_t m_memoryLimit = 0;
  std::atomic<uint64_t> m_held{0};
  std::map<std::pair<std::string, std::vector<uint32_t>>, Pipeline> m_pipelines;
};

// Push-constant bytes every pipeline layout reserves (the guaranteed minimum of Vulkan).
constexpr uint32_t kPushConstantBytes = 128;

// Throws shoal::Error("<what>: <VkResult name>") unless r is VK_SUCCESS.
void check(VkResult r, const char* what);

}  // namespace shoal::vulkan
