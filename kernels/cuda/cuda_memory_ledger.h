#pragma once
// What one device's CUDA stages may take (--gpu-memory, BackendOptions::gpuMemoryLimit): the
// driver's free memory, capped by the limit less what this backend's live stages already hold.
// Host C++ only (no CUDA types), so the arithmetic is tested without a GPU.

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace shoal::cuda {

struct MemoryLedger {
  uint64_t limit = 0;             // bytes the stages of the device may hold; 0: no limit
  std::atomic<uint64_t> held{0};  // the footprints of the live stages (CudaStage::Footprint)

  // What a new stage may take, given what the driver reports free now. The limit counts what
  // this backend's stages hold, so a second stage sees the first one's share taken; the
  // driver's figure already has it taken (and whatever other processes hold).
  uint64_t available(uint64_t driverFree) const {
    if (limit == 0) return driverFree;
    const uint64_t h = held.load();
    return std::min(driverFree, limit > h ? limit - h : 0);
  }
};

}  // namespace shoal::cuda
