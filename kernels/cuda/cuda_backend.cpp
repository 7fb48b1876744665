#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_stage.h"

namespace shoal::cuda {

CudaBackend::CudaBackend(uint64_t memoryLimit) : m_memoryLimit(memoryLimit) {
  // The static CUDA runtime loads the driver (libcuda.so) here; without it, or without a GPU,
  // this is where the reason comes from.
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    m_availability = {false,
                      std::string("no usable NVIDIA driver or device (cudaGetDeviceCount: ") +
                          cudaGetErrorName(status) + ": " + cudaGetErrorString(status) + ")"};
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return;
  }
  if (count == 0) {
    m_availability = {false, "the NVIDIA driver reports no CUDA device"};
    return;
  }
  // A device is usable when the plugin holds code it can run (kernel_image.cu); the others are
  // left out of devices() and named in the reason, so nothing fails mid-generation.
  std::string refused;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    const bool known = cudaGetDeviceProperties(&prop, i) == cudaSuccess;
    const cudaError_t image =
        cudaSetDevice(i) == cudaSuccess ? probeKernelImage() : cudaErrorInvalidDevice;
    if (known && image == cudaSuccess) {
      m_usable.push_back(i);
      continue;
    }
    cudaGetLastError();
    const std::string sm = known ? std::to_string(prop.major) + std::to_string(prop.minor) : "?";
    refused += (refused.empty() ? "" : "; ") + std::string("cuda") + std::to_string(i) + " (" +
               (known ? prop.name : "unknown device") + ", sm_" + sm +
               "): " + cudaGetErrorName(image) + ": this plugin holds code for " +
               SHOAL_CUDA_ARCHS_BUILT + " only (rebuild with -DSHOAL_CUDA_ARCHS=" + sm + ")";
  }
  m_refused = refused;
  m_deviceCount = count;
  m_bandwidth.assign(static_cast<size_t>(count), 0.0);
  for (int i = 0; i < count; ++i) {
    m_ledgers.push_back(std::make_shared<MemoryLedger>());
    m_ledgers.back()->limit = m_memoryLimit;
  }
  if (m_usable.empty()) {
    m_availability = {false, "no CUDA device this plugin can run on: " + refused};
    return;
  }
  m_availability = {true, {}};
}

std::vector<runtime::DeviceInfo> CudaBackend::devices() const {
  std::vector<runtime::DeviceInfo> out;
  std::lock_guard lock(m_mutex);
  for (const int i : m_usable) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    runtime::DeviceInfo d;
    d.id = "cuda" + std::to_string(i);
    d.backend = "cuda";
    d.name = std::string(prop.name) + " (" + std::to_string(prop.multiProcessorCount) +
             " SMs, sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
    d.type = prop.integrated ? "integrated-gpu" : "discrete-gpu";
    size_t freeBytes = 0, totalBytes = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&freeBytes, &totalBytes) == cudaSuccess) {
      d.memoryFree = m_ledgers[static_cast<size_t>(i)]->available(freeBytes);
      d.memoryTotal = totalBytes;
    } else {
      d.memoryTotal = prop.totalGlobalMem;
    }
    double& bw = m_bandwidth[static_cast<size_t>(i)];
    if (bw == 0) bw = measureBandwidth(i);
    d.bandwidthBytesPerS = bw;
    out.push_back(d);
  }
  return out;
}

std::unique_ptr<runtime::Stage> CudaBackend::createStage(const std::string& deviceId,
                                                         const runtime::ModelSource& model,
                                                         const runtime::StageSpec& spec) {
  if (!m_availability.available) throw Error("cuda backend unavailable: " + m_availability.reason);
  const int index = indexOf(deviceId);
  if (index < 0) {
    throw Error("CUDA backend: unknown device '" + deviceId + "' (" +
                std::to_string(m_deviceCount) + " devices)");
  }
  if (std::find(m_usable.begin(), m_usable.end(), index) == m_usable.end()) {
    throw Error("CUDA backend: " + deviceId + " cannot run this plugin's code: " + m_refused);
  }
  return std::make_unique<CudaStage>(index, model, spec, m_ledgers[static_cast<size_t>(index)]);
}

int CudaBackend::indexOf(const std::string& deviceId) const {
  if (deviceId.rfind("cuda", 0) != 0 || deviceId.size() < 5 || deviceId.size() > 8 ||
      deviceId.find_first_not_of("0123456789", 4) != std::string::npos) {
    return -1;
  }
  const int index = std::stoi(deviceId.substr(4));
  return index < m_deviceCount ? index : -1;
}

uint64_t CudaBackend::stageDeviceBytes(const runtime::ModelSource& model,
                                       const runtime::StageSpec& spec) const {
  return CudaStage::footprint(model, spec).total();
}

uint64_t CudaBackend::freeDeviceBytes(const std::string& deviceId) {
  const int index = indexOf(deviceId);
  if (index < 0 || std::find(m_usable.begin(), m_usable.end(), index) == m_usable.end()) return 0;
  std::lock_guard lock(m_mutex);
  size_t freeBytes = 0, totalBytes = 0;
  if (cudaSetDevice(index) != cudaSuccess ||
      cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return m_ledgers[static_cast<size_t>(index)]->available(freeBytes);
}

double measureBandwidth(int device) {
  if (cudaSetDevice(device) != cudaSuccess) return 0;
  size_t freeBytes = 0, totalBytes = 0;
  if (cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess) return 0;
  const size_t bytes = std::min<size_t>(size_t{256} << 20, freeBytes / 4);
  if (bytes < (size_t{1} << 20)) return 0;
  void* a = nullptr;
  void* b = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  double result = 0;
  if (cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess &&
      cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess) {
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);  // warm-up
    constexpr int kRepeats = 5;
    cudaEventRecord(start);
    for (int i = 0; i < kRepeats; ++i) cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    float ms = 0;
    if (cudaEventSynchronize(stop) == cudaSuccess &&
        cudaEventElapsedTime(&ms, start, stop) == cudaSuccess && ms > 0) {
      result = 2.0 * static_cast<double>(bytes) * kRepeats / (static_cast<double>(ms) * 1e-3);
    }
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  if (a) cudaFree(a);
  if (b) cudaFree(b);
  cudaGetLastError();
  return result;
}

}  // namespace shoal::cuda
