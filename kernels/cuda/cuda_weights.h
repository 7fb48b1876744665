#pragma once
// The weights of a CUDA stage on the device: one allocation holding every tensor the stage needs
// (a tensor used twice, like a tied embedding and output, is uploaded once).

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <vector>

#include "engine/gguf/gguf_file.h"

namespace shoal::cuda {

struct DeviceMatrix {
  gguf::TensorType type = gguf::TensorType::F32;
  int64_t k = 0;  // row length (elements)
  int64_t rows = 0;
  int64_t rowBytes = 0;
  const void* data = nullptr;  // device
  explicit operator bool() const { return data != nullptr; }
};

class DeviceWeights {
 public:
  DeviceWeights() = default;
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  // Register a tensor to upload (nullptr is ignored). Throws shoal::Error naming the tensor for
  // a type the CUDA kernels do not handle or a row length that is not a multiple of 32.
  void add(const gguf::TensorInfo* tensor);
  // Allocate and copy everything added. Throws shoal::Error when the device is out of memory.
  void upload(cudaStream_t stream);
  // The device copy of a tensor added before upload() (empty for nullptr).
  DeviceMatrix get(const gguf::TensorInfo* tensor) const;
  const float* f32(const gguf::TensorInfo* tensor) const {
    return static_cast<const float*>(get(tensor).data);
  }
  uint64_t bytes() const { return m_total; }

 private:
  std::vector<const gguf::TensorInfo*> m_order;
  std::map<const gguf::TensorInfo*, uint64_t> m_offsets;
  uint64_t m_total = 0;
  uint8_t* m_device = nullptr;
};

}  // namespace shoal::cuda
