#include "kernels/vulkan/vk_device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "engine/error.h"
#include "kernels/vulkan/vk_shaders.h"

namespace shoal::vulkan {
namespace {

std::string vendorName(uint32_t vendorId, VkDriverId driver) {
  if (driver == VK_DRIVER_ID_MESA_LLVMPIPE) return "Mesa (llvmpipe)";
  switch (vendorId) {
    case 0x10DE:
      return "NVIDIA";
    case 0x1002:
    case 0x1022:
      return "AMD";
    case 0x8086:
      return "Intel";
    case 0x13B5:
      return "ARM";
    case 0x5143:
      return "Qualcomm";
    case 0x106B:
      return "Apple";
    case 0x10005:
      return "Mesa";
    default:
      return "vendor 0x" + [&] {
        char b[16];
        std::snprintf(b, sizeof b, "%04x", vendorId);
        return std::string(b);
      }();
  }
}

std::string typeName(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "cpu";
    default:
      return "other";
  }
}

std::set<std::string> deviceExtensions(const VkApi& api, VkPhysicalDevice pd) {
  uint32_t n = 0;
  api.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> ext(n);
  api.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, ext.data());
  std::set<std::string> out;
  for (const auto& e : ext) out.insert(e.extensionName);
  return out;
}

// SHOAL_VULKAN_MATH: "native" (or unset) runs the default shader variants, "exact" the
// bit-identical ones, which need shaderFloat64. Anything else is an error, not a silent default.
bool exactMathRequested(const PhysicalDevice& physical) {
  const char* mode = std::getenv("SHOAL_VULKAN_MATH");
  if (!mode || *mode == '\0' || std::strcmp(mode, "native") == 0) return false;
  if (std::strcmp(mode, "exact") != 0) {
    throw Error("SHOAL_VULKAN_MATH=" + std::string(mode) + ": expected native or exact");
  }
  if (!physical.fp64) {
    throw Error("SHOAL_VULKAN_MATH=exact needs shaderFloat64, which " + physical.info.name +
                " lacks");
  }
  return true;
}

}  // namespace

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw Error(std::string("Vulkan: ") + what + ": " + resultName(r));
}

std::vector<PhysicalDevice> enumerateDevices(const Instance& instance) {
  const VkApi& api = instance.api();
  uint32_t n = 0;
  if (api.vkEnumeratePhysicalDevices(instance.handle(), &n, nullptr) != VK_SUCCESS) return {};
  std::vector<VkPhysicalDevice> handles(n);
  api.vkEnumeratePhysicalDevices(instance.handle(), &n, handles.data());

  std::vector<PhysicalDevice> out;
  std::set<std::string> seen;
  for (VkPhysicalDevice h : handles) {
    PhysicalDevice d;
    d.handle = h;
    const std::set<std::string> ext = deviceExtensions(api, h);
    const bool pciInfo = ext.count(VK_EXT_PCI_BUS_INFO_EXTENSION_NAME) > 0;
    d.memoryBudget = ext.count(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME) > 0;

    VkPhysicalDevicePCIBusInfoPropertiesEXT pci{};
    pci.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT;
    VkPhysicalDeviceDriverProperties driver{};
    driver.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
    driver.pNext = pciInfo ? &pci : nullptr;
    VkPhysicalDeviceIDProperties ids{};
    ids.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES;
    ids.pNext = &driver;
    VkPhysicalDeviceSubgroupProperties subgroup{};
    subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
    subgroup.pNext = &ids;
    VkPhysicalDeviceMaintenance3Properties maint3{};
    maint3.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES;
    maint3.pNext = &subgroup;
    VkPhysicalDeviceProperties2 props{};
    props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    props.pNext = &maint3;
    api.vkGetPhysicalDeviceProperties2(h, &props);

    // The same GPU behind two drivers: same UUID, or same PCI address.
    std::string key(reinterpret_cast<const char*>(ids.deviceUUID), VK_UUID_SIZE);
    if (pciInfo) {
      key = "pci:" + std::to_string(pci.pciDomain) + ":" + std::to_string(pci.pciBus) + ":" +
            std::to_string(pci.pciDevice) + "." + std::to_string(pci.pciFunction);
    }
    if (!seen.insert(key).second) continue;

    VkPhysicalDeviceShaderIntegerDotProductFeatures dot{};
    dot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
    const bool hasDotExt = props.properties.apiVersion >= VK_API_VERSION_1_3 ||
                           ext.count(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME) > 0;
    VkPhysicalDeviceVulkan12Features f12{};
    f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    f12.pNext = hasDotExt ? &dot : nullptr;
    VkPhysicalDeviceVulkan11Features f11{};
    f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
    f11.pNext = &f12;
    VkPhysicalDeviceFeatures2 features{};
    features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    features.pNext = &f11;
    api.vkGetPhysicalDeviceFeatures2(h, &features);

    d.apiVersion = props.properties.apiVersion;
    d.vendor = vendorName(props.properties.vendorID, driver.driverID);
    d.driver = std::string(driver.driverName) + " " + driver.driverInfo;
    d.subgroupSize = subgroup.subgroupSize;
    d.subgroupArithmetic = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                           (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    d.fp16 = f12.shaderFloat16 == VK_TRUE;
    d.int16 = features.features.shaderInt16 == VK_TRUE;
    d.int8Dot = hasDotExt && dot.shaderIntegerDotProduct == VK_TRUE;
    d.int8DotExtension = ext.count(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME) > 0;
    d.maxAllocation = maint3.maxMemoryAllocationSize;
    d.maxSharedMemory = props.properties.limits.maxComputeSharedMemorySize;

    VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{};
    budget.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT;
    VkPhysicalDeviceMemoryProperties2 mem{};
    mem.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2;
    mem.pNext = d.memoryBudget ? &budget : nullptr;
    api.vkGetPhysicalDeviceMemoryProperties2(h, &mem);
    for (uint32_t i = 0; i < mem.memoryProperties.memoryHeapCount; ++i) {
      MemoryHeap heap;
      heap.size = mem.memoryProperties.memoryHeaps[i].size;
      heap.deviceLocal =
          mem.memoryProperties.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT;
      heap.budget = d.memoryBudget ? budget.heapBudget[i] : heap.size;
      heap.usage = d.memoryBudget ? budget.heapUsage[i] : 0;
      d.heaps.push_back(heap);
      if (heap.deviceLocal) {
        d.info.memoryTotal += heap.size;
        d.info.memoryFree += heap.budget > heap.usage ? heap.budget - heap.usage : 0;
      }
    }

    uint32_t qn = 0;
    api.vkGetPhysicalDeviceQueueFamilyProperties(h, &qn, nullptr);
    std::vector<VkQueueFamilyProperties> queues(qn);
    api.vkGetPhysicalDeviceQueueFamilyProperties(h, &qn, queues.data());
    for (uint32_t i = 0; i < qn && d.computeQueueFamily == UINT32_MAX; ++i) {
      if (queues[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
        d.computeQueueFamily = i;
        d.timestampBits = queues[i].timestampValidBits;
      }
    }
    d.timestampPeriod = props.properties.limits.timestampPeriod;

    // What the kernels need: raw GGUF blocks read as bytes and f16 through 8/16-bit storage,
    // buffers addressed by pointer from push constants.
    if (d.apiVersion < VK_API_VERSION_1_2) {
      d.unusable = "needs Vulkan 1.2 (device has " +
                   std::to_string(VK_API_VERSION_MAJOR(d.apiVersion)) + "." +
                   std::to_string(VK_API_VERSION_MINOR(d.apiVersion)) + ")";
    } else if (d.computeQueueFamily == UINT32_MAX) {
      d.unusable = "no compute queue";
    } else if (!f12.storageBuffer8BitAccess) {
      d.unusable = "lacks storageBuffer8BitAccess";
    } else if (!f11.storageBuffer16BitAccess) {
      d.unusable = "lacks storageBuffer16BitAccess";
    } else if (!f12.bufferDeviceAddress) {
      d.unusable = "lacks bufferDeviceAddress";
    } else if (!f12.shaderInt8) {
      d.unusable = "lacks shaderInt8";
    }
    // Only the opt-in exact-math shader variants need fp64 (shaders/math.glsl).
    d.fp64 = features.features.shaderFloat64 == VK_TRUE;

    d.info.id = "vulkan" + std::to_string(out.size());
    d.info.backend = "vulkan";
    d.info.name = props.properties.deviceName;
    d.info.type = typeName(props.properties.deviceType);
    auto yesNo = [](bool b) { return std::string(b ? "yes" : "no"); };
    std::string heaps;
    for (const MemoryHeap& heap : d.heaps) {
      heaps += (heaps.empty() ? "" : ", ") + std::to_string(heap.size >> 20) + " MiB" +
               (heap.deviceLocal ? " device-local" : "") +
               (d.memoryBudget ? " (budget " + std::to_string(heap.budget >> 20) + " MiB)" : "");
    }
    d.info.details = {{"vendor", d.vendor},
                      {"driver", d.driver},
                      {"vulkan", std::to_string(VK_API_VERSION_MAJOR(d.apiVersion)) + "." +
                                     std::to_string(VK_API_VERSION_MINOR(d.apiVersion))},
                      {"subgroup_size", std::to_string(d.subgroupSize)},
                      {"subgroup_arithmetic", yesNo(d.subgroupArithmetic)},
                      {"fp16", yesNo(d.fp16)},
                      {"int8_dot", yesNo(d.int8Dot)},
                      {"fp64", yesNo(d.fp64)},
                      {"memory_heaps", heaps},
                      {"memory_budget_ext", yesNo(d.memoryBudget)}};
    out.push_back(std::move(d));
  }
  return out;
}

uint64_t Device::freeMemory() const {
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{};
  budget.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT;
  VkPhysicalDeviceMemoryProperties2 mem{};
  mem.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2;
  mem.pNext = m_physical.memoryBudget ? &budget : nullptr;
  m_instance->api().vkGetPhysicalDeviceMemoryProperties2(m_physical.handle, &mem);
  uint64_t budgetLeft = 0, size = 0;
  for (uint32_t i = 0; i < mem.memoryProperties.memoryHeapCount; ++i) {
    if (!(mem.memoryProperties.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)) continue;
    size += mem.memoryProperties.memoryHeaps[i].size;
    if (m_physical.memoryBudget && budget.heapBudget[i] > budget.heapUsage[i]) {
      budgetLeft += budget.heapBudget[i] - budget.heapUsage[i];
    }
  }
  const uint64_t held = m_held;
  uint64_t free = m_physical.memoryBudget ? budgetLeft : (size > held ? size - held : 0);
  if (m_memoryLimit > 0) free = std::min(free, m_memoryLimit > held ? m_memoryLimit - held : 0);
  return free;
}

Device::Device(std::shared_ptr<Instance> instance, const PhysicalDevice& physical,
               uint64_t memoryLimit)
    : m_instance(std::move(instance)), m_physical(physical), m_memoryLimit(memoryLimit) {
  const VkApi& iapi = m_instance->api();
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qi{};
  qi.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  qi.queueFamilyIndex = physical.computeQueueFamily;
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  f12.storageBuffer8BitAccess = VK_TRUE;
  f12.bufferDeviceAddress = VK_TRUE;
  f12.shaderInt8 = VK_TRUE;
  VkPhysicalDeviceVulkan11Features f11{};
  f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  f11.pNext = &f12;
  f11.storageBuffer16BitAccess = VK_TRUE;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &f11;
  m_exactMath = exactMathRequested(physical);
  features.features.shaderFloat64 = m_exactMath ? VK_TRUE : VK_FALSE;
  features.features.shaderInt16 = physical.int16 ? VK_TRUE : VK_FALSE;
  std::vector<const char*> extensions;
  if (physical.memoryBudget) extensions.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  VkPhysicalDeviceShaderIntegerDotProductFeatures dot{};
  dot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES;
  if (physical.int8Dot && physical.int8DotExtension) {
    dot.shaderIntegerDotProduct = VK_TRUE;
    f12.pNext = &dot;
    extensions.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
    m_integerDotEnabled = true;
  }
  const char* noDot = std::getenv("SHOAL_VULKAN_NO_INT_DOT");
  m_useIntegerDot = m_integerDotEnabled && !(noDot && std::string(noDot) == "1");
  VkDeviceCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  ci.pNext = &features;
  ci.queueCreateInfoCount = 1;
  ci.pQueueCreateInfos = &qi;
  ci.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  ci.ppEnabledExtensionNames = extensions.data();
  check(iapi.vkCreateDevice(physical.handle, &ci, nullptr, &m_device), "vkCreateDevice");
  m_instance->loadDeviceFunctions(m_device, m_api);
  m_api.vkGetDeviceQueue(m_device, physical.computeQueueFamily, 0, &m_queue);

  VkCommandPoolCreateInfo pi{};
  pi.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = physical.computeQueueFamily;
  check(m_api.vkCreateCommandPool(m_device, &pi, nullptr, &m_pool), "vkCreateCommandPool");
  VkFenceCreateInfo fi{};
  fi.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  check(m_api.vkCreateFence(m_device, &fi, nullptr, &m_fence), "vkCreateFence");

  // Every kernel takes its buffers as device addresses and its sizes in push constants, so one
  // layout without descriptor sets serves them all.
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes};
  VkPipelineLayoutCreateInfo li{};
  li.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  li.pushConstantRangeCount = 1;
  li.pPushConstantRanges = &range;
  check(m_api.vkCreatePipelineLayout(m_device, &li, nullptr, &m_layout), "vkCreatePipelineLayout");
  const char* noSubgroup = std::getenv("SHOAL_VULKAN_NO_SUBGROUP");
  m_useSubgroups =
      physical.subgroupArithmetic && !(noSubgroup && std::strcmp(noSubgroup, "1") == 0);
}

Device::~Device() {
  if (m_device == VK_NULL_HANDLE) return;
  m_api.vkDeviceWaitIdle(m_device);
  for (auto& [key, p] : m_pipelines) m_api.vkDestroyPipeline(m_device, p.pipeline, nullptr);
  if (m_layout) m_api.vkDestroyPipelineLayout(m_device, m_layout, nullptr);
  if (m_fence) m_api.vkDestroyFence(m_device, m_fence, nullptr);
  if (m_pool) m_api.vkDestroyCommandPool(m_device, m_pool, nullptr);
  m_api.vkDestroyDevice(m_device, nullptr);
}

const Pipeline& Device::pipeline(const std::string& shader,
                                 const std::vector<uint32_t>& constants) {
  auto key = std::make_pair(shader, constants);
  if (auto it = m_pipelines.find(key); it != m_pipelines.end()) return it->second;
  const EmbeddedShader* found = nullptr;
  const std::string exact = shader + "_exact";
  for (const EmbeddedShader& s : embeddedShaders()) {
    if (m_exactMath && exact == s.name) {
      found = &s;
      break;
    }
    if (shader == s.name) found = &s;
  }
  if (!found) throw Error("Vulkan: no embedded shader named '" + shader + "'");

  VkShaderModuleCreateInfo mi{};
  mi.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
  mi.codeSize = found->words * 4;
  mi.pCode = found->code;
  VkShaderModule module = VK_NULL_HANDLE;
  check(m_api.vkCreateShaderModule(m_device, &mi, nullptr, &module), "vkCreateShaderModule");
  std::vector<VkSpecializationMapEntry> entries;
  for (uint32_t i = 0; i < constants.size(); ++i) entries.push_back({i, i * 4, 4});
  VkSpecializationInfo spec{};
  spec.mapEntryCount = static_cast<uint32_t>(entries.size());
  spec.pMapEntries = entries.data();
  spec.dataSize = constants.size() * 4;
  spec.pData = constants.data();
  VkComputePipelineCreateInfo ci{};
  ci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = constants.empty() ? nullptr : &spec;
  ci.layout = m_layout;
  Pipeline p;
  const VkResult r =
      m_api.vkCreateComputePipelines(m_device, VK_NULL_HANDLE, 1, &ci, nullptr, &p.pipeline);
  m_api.vkDestroyShaderModule(m_device, module, nullptr);
  check(r, ("vkCreateComputePipelines(" + shader + ")").c_str());
  // By convention constant 0 is the workgroup size of every kernel.
  p.localSizeX = constants.empty() ? 0 : constants[0];
  return m_pipelines.emplace(key, p).first->second;
}

VkCommandBuffer Device::allocateCommandBuffer() {
  VkCommandBufferAllocateInfo ai{};
  ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  ai.commandPool = m_pool;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb = VK_NULL_HANDLE;
  check(m_api.vkAllocateCommandBuffers(m_device, &ai, &cb), "vkAllocateCommandBuffers");
  return cb;
}

void Device::freeCommandBuffer(VkCommandBuffer commands) {
  m_api.vkFreeCommandBuffers(m_device, m_pool, 1, &commands);
}

void Device::submitAndWait(VkCommandBuffer commands) {
  VkSubmitInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &commands;
  check(m_api.vkQueueSubmit(m_queue, 1, &si, m_fence), "vkQueueSubmit");
  check(m_api.vkWaitForFences(m_device, 1, &m_fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
  check(m_api.vkResetFences(m_device, 1, &m_fence), "vkResetFences");
}

}  // namespace shoal::vulkan
