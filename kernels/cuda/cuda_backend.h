#pragma once
// The CUDA backend inside the plugin: one device per visible GPU ("cuda0", "cuda1", ...).
// Constructed by shoal_cuda_create_backend (cuda_plugin.cpp); never throws from the
// constructor: without a driver or a device it is unavailable with the CUDA runtime's reason.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/runtime/backend.h"
#include "kernels/cuda/cuda_memory_ledger.h"

namespace shoal::cuda {

class CudaBackend final : public runtime::Backend {
 public:
  // memoryLimit: the most device memory (bytes) the stages of each device may hold; 0: the
  // driver's free memory alone (cuda_memory_ledger.h).
  explicit CudaBackend(uint64_t memoryLimit = 0);

  std::string name() const override { return "cuda"; }
  runtime::Availability availability() const override { return m_availability; }
  // Name ("NVIDIA H200 (132 SMs, sm_90)"), memory free/total now, and the device-to-device copy
  // bandwidth, measured once per device on the first call.
  std::vector<runtime::DeviceInfo> devices() const override;
  std::unique_ptr<runtime::Stage> createStage(const std::string& deviceId,
                                              const runtime::ModelSource& model,
                                              const runtime::StageSpec& spec) override;
  // The memory fit (backend.h): CudaStage::footprint's total, and cudaMemGetInfo's free bytes
  // within the memory limit (0 for a device it cannot use).
  uint64_t stageDeviceBytes(const runtime::ModelSource& model,
                            const runtime::StageSpec& spec) const override;
  uint64_t freeDeviceBytes(const std::string& deviceId) override;

 private:
  runtime::Availability m_availability;
  int m_deviceCount = 0;
  std::vector<int> m_usable;  // devices whose architecture the plugin has code for
  std::string m_refused;      // why the others are left out ("" when none are)
  mutable std::mutex m_mutex;
  mutable std::vector<double> m_bandwidth;  // bytes/s per device, 0 until measured
  uint64_t m_memoryLimit = 0;
  // Per device: what its stages may take and hold; shared with them (a stage outlives nothing
  // of the backend's but this).
  std::vector<std::shared_ptr<MemoryLedger>> m_ledgers;

  // The device index of "cudaN", or -1 when the id names none.
  int indexOf(const std::string& deviceId) const;
};

// Copy bandwidth of a device (bytes read + written per second), from timed device-to-device
// copies of 256 MiB (less when memory is short). 0 when it cannot be measured.
double measureBandwidth(int device);

}  // namespace shoal::cuda
