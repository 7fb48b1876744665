#include "kernels/vulkan/vk_memory.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"

namespace shoal::vulkan {
namespace {

constexpr VkDeviceSize kBlockBytes = VkDeviceSize{256} << 20;
// Host-visible memory is (on a discrete GPU) pinned system memory: smaller blocks.
constexpr VkDeviceSize kHostBlockBytes = VkDeviceSize{16} << 20;
constexpr VkDeviceSize kStagingBytes = VkDeviceSize{16} << 20;
// Covers minStorageBufferOffsetAlignment and the 16-byte vector loads of every kernel.
constexpr VkDeviceSize kAlign = 256;

}  // namespace

MemoryPool::MemoryPool(Device& device) : m_device(device) {}

MemoryPool::~MemoryPool() {
  const VkApi& api = m_device.api();
  for (Block& b : m_blocks) {
    api.vkDestroyBuffer(m_device.handle(), b.buffer, nullptr);
    api.vkFreeMemory(m_device.handle(), b.memory, nullptr);
    if (b.kind == Kind::Device) m_device.addHeldMemory(-static_cast<int64_t>(b.size));
  }
}

MemoryPool::Block& MemoryPool::newBlock(VkDeviceSize bytes, Kind kind, VkDeviceSize exact) {
  const VkApi& api = m_device.api();
  const VkDevice dev = m_device.handle();
  const PhysicalDevice& pd = m_device.physical();
  const bool hostVisible = kind != Kind::Device;
  VkDeviceSize size = exact ? exact : std::max(bytes, hostVisible ? kHostBlockBytes : kBlockBytes);
  if (pd.maxAllocation) size = std::min(size, pd.maxAllocation);
  if (size < bytes) {
    throw Error("Vulkan: a buffer of " + std::to_string(bytes) +
                " bytes exceeds the device's maxMemoryAllocationSize (" +
                std::to_string(pd.maxAllocation) + ")");
  }
  Block b;
  b.size = size;
  b.kind = kind;
  VkBufferCreateInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  bi.size = size;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(api.vkCreateBuffer(dev, &bi, nullptr, &b.buffer), "vkCreateBuffer");
  VkMemoryRequirements req{};
  api.vkGetBufferMemoryRequirements(dev, b.buffer, &req);

  VkPhysicalDeviceMemoryProperties props{};
  api.vkGetPhysicalDeviceMemoryProperties(pd.handle, &props);
  const VkMemoryPropertyFlags want =
      hostVisible ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                  : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  auto firstType = [&](VkMemoryPropertyFlags flags) {
    for (uint32_t i = 0; i < props.memoryTypeCount; ++i) {
      if ((req.memoryTypeBits & (1u << i)) && (props.memoryTypes[i].propertyFlags & flags) == flags)
        return i;
    }
    return UINT32_MAX;
  };
  uint32_t type = UINT32_MAX;
  if (kind == Kind::HostRead) type = firstType(want | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  if (type == UINT32_MAX) type = firstType(want);
  if (type == UINT32_MAX) {
    api.vkDestroyBuffer(dev, b.buffer, nullptr);
    throw Error(std::string("Vulkan: no ") + (hostVisible ? "host-visible" : "device-local") +
                " memory type for a storage buffer");
  }
  VkMemoryAllocateFlagsInfo flags{};
  flags.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO;
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo ai{};
  ai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  ai.pNext = &flags;
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  const VkResult r = api.vkAllocateMemory(dev, &ai, nullptr, &b.memory);
  if (r != VK_SUCCESS) {
    api.vkDestroyBuffer(dev, b.buffer, nullptr);
    throw Error("Vulkan: allocating " + std::to_string(req.size) + " bytes of " +
                (hostVisible ? "host-visible" : "device") + " memory on " + pd.info.name +
                " failed: " + resultName(r));
  }
  check(api.vkBindBufferMemory(dev, b.buffer, b.memory, 0), "vkBindBufferMemory");
  if (!hostVisible) m_device.addHeldMemory(static_cast<int64_t>(b.size));
  if (hostVisible)
    check(api.vkMapMemory(dev, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped), "vkMapMemory");
  VkBufferDeviceAddressInfo di{};
  di.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO;
  di.buffer = b.buffer;
  b.address = api.vkGetBufferDeviceAddress(dev, &di);
  m_blocks.push_back(b);
  return m_blocks.back();
}

Allocation MemoryPool::allocate(VkDeviceSize bytes, bool hostVisible) {
  return allocate(bytes, hostVisible ? Kind::HostWrite : Kind::Device);
}

Allocation MemoryPool::allocateReadback(VkDeviceSize bytes) {
  return allocate(bytes, Kind::HostRead);
}

uint64_t MemoryPool::footprint(uint64_t bytes) {
  return (std::max<uint64_t>(bytes, 4) + kAlign - 1) / kAlign * kAlign;
}

void MemoryPool::reserve(uint64_t bytes) {
  const uint64_t piece = m_device.physical().maxAllocation
                             ? m_device.physical().maxAllocation / kAlign * kAlign
                             : uint64_t{4} << 30;
  for (uint64_t left = footprint(bytes); left > 0;) {
    const uint64_t n = std::min(left, piece);
    newBlock(n, Kind::Device, n);
    left -= n;
  }
}

Allocation MemoryPool::allocate(VkDeviceSize bytes, Kind kind) {
  bytes = std::max<VkDeviceSize>(bytes, 4);
  const VkDeviceSize rounded = footprint(bytes);
  // The first block with room: blocks made by reserve() fill in order.
  Block* block = nullptr;
  for (Block& b : m_blocks) {
    if (!block && b.kind == kind && b.size - b.used >= rounded) block = &b;
  }
  if (!block) block = &newBlock(rounded, kind);
  Allocation a;
  a.buffer = block->buffer;
  a.offset = block->used;
  a.size = bytes;
  a.address = block->address + block->used;
  a.mapped = block->mapped ? static_cast<uint8_t*>(block->mapped) + block->used : nullptr;
  block->used += rounded;
  m_used += rounded;
  if (kind == Kind::Device) m_usedDevice += rounded;
  return a;
}

Allocation MemoryPool::staging(VkDeviceSize) {
  if (!m_staging.buffer) m_staging = allocate(kStagingBytes, true);
  return m_staging;
}

void MemoryPool::upload(const Allocation& dst, const void* data, VkDeviceSize bytes,
                        const std::function<void(uint64_t, uint64_t)>& progress) {
  if (bytes > dst.size) throw Error("Vulkan: upload larger than its buffer");
  const Allocation st = staging(bytes);
  const VkApi& api = m_device.api();
  VkCommandBuffer cb = m_device.allocateCommandBuffer();
  for (VkDeviceSize done = 0; done < bytes;) {
    const VkDeviceSize n = std::min(kStagingBytes, bytes - done);
    std::memcpy(st.mapped, static_cast<const uint8_t*>(data) + done, n);
    VkCommandBufferBeginInfo bi{};
    bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(api.vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
    VkBufferCopy copy{st.offset, dst.offset + done, n};
    api.vkCmdCopyBuffer(cb, st.buffer, dst.buffer, 1, &copy);
    check(api.vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    m_device.submitAndWait(cb);
    done += n;
    if (progress) progress(done, bytes);
  }
  m_device.freeCommandBuffer(cb);
}

void MemoryPool::zero(const Allocation& dst) {
  const VkApi& api = m_device.api();
  VkCommandBuffer cb = m_device.allocateCommandBuffer();
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(api.vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
  api.vkCmdFillBuffer(cb, dst.buffer, dst.offset, (dst.size + 3) / 4 * 4, 0);
  check(api.vkEndCommandBuffer(cb), "vkEndCommandBuffer");
  m_device.submitAndWait(cb);
  m_device.freeCommandBuffer(cb);
}

void MemoryPool::download(const Allocation& src, void* data, VkDeviceSize bytes) {
  if (src.mapped) {
    std::memcpy(data, src.mapped, bytes);
    return;
  }
  const Allocation st = staging(bytes);
  const VkApi& api = m_device.api();
  VkCommandBuffer cb = m_device.allocateCommandBuffer();
  for (VkDeviceSize done = 0; done < bytes;) {
    const VkDeviceSize n = std::min(kStagingBytes, bytes - done);
    VkCommandBufferBeginInfo bi{};
    bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(api.vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
    VkBufferCopy copy{src.offset + done, st.offset, n};
    api.vkCmdCopyBuffer(cb, src.buffer, st.buffer, 1, &copy);
    check(api.vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    m_device.submitAndWait(cb);
    std::memcpy(static_cast<uint8_t*>(data) + done, st.mapped, n);
    done += n;
  }
  m_device.freeCommandBuffer(cb);
}

}  // namespace shoal::vulkan
