#pragma once
// Device memory for a stage: large blocks (at most maxMemoryAllocationSize each) with one buffer
// per block, sub-allocated in order and released together when the pool goes. Kernels see an
// allocation as its device address.

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/vulkan/vk_device.h"

namespace shoal::vulkan {

struct Allocation {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  VkDeviceSize size = 0;
  VkDeviceAddress address = 0;
  void* mapped = nullptr;  // host pointer for host-visible allocations, else null
};

class MemoryPool {
 public:
  explicit MemoryPool(Device& device);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // `bytes` of device-local memory (hostVisible: host-visible and coherent, mapped, for what the
  // host writes). Throws shoal::Error when the device has no room.
  Allocation allocate(VkDeviceSize bytes, bool hostVisible = false);
  // `bytes` of host-visible, coherent, mapped memory for what the host reads back: host-cached
  // where the device has such a type (uncached, often write-combined memory reads slowly).
  Allocation allocateReadback(VkDeviceSize bytes);

  // Copy bytes into a device-local allocation through a staging buffer, in chunks;
  // progress(done, total) after each.
  void upload(const Allocation& dst, const void* data, VkDeviceSize bytes,
              const std::function<void(uint64_t, uint64_t)>& progress = {});
  void zero(const Allocation& dst);
  void download(const Allocation& src, void* data, VkDeviceSize bytes);

  uint64_t bytesAllocated() const { return m_used; }
  // Of those, the device-local ones (what a stage's memory estimate counts).
  uint64_t deviceBytesAllocated() const { return m_usedDevice; }
  // What an allocation of `bytes` takes from its block (allocations are 256-byte aligned).
  static uint64_t footprint(uint64_t bytes);
  // Makes device-local blocks holding `bytes` in all (in pieces of at most
  // maxMemoryAllocationSize), so that allocations summing to `bytes` take exactly that much
  // device memory instead of 256 MiB blocks. Throws shoal::Error when the device has no room.
  void reserve(uint64_t bytes);

 private:
  enum class Kind { Device, HostWrite, HostRead };
  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceSize size = 0, used = 0;
    VkDeviceAddress address = 0;
    void* mapped = nullptr;
    Kind kind = Kind::Device;
  };
  // A block of at least `bytes` (a 256 MiB or 16 MiB minimum), or of exactly `exact` bytes.
  Block& newBlock(VkDeviceSize bytes, Kind kind, VkDeviceSize exact = 0);
  Allocation allocate(VkDeviceSize bytes, Kind kind);
  Allocation staging(VkDeviceSize bytes);

  Device& m_device;
  std::vector<Block> m_blocks;
  Allocation m_staging;
  uint64_t m_used = 0, m_usedDevice = 0;
};

}  // namespace shoal::vulkan
