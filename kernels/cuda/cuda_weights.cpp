#include "kernels/cuda/cuda_weights.h"

#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace shoal::cuda {

DeviceWeights::~DeviceWeights() {
  if (m_device) cudaFree(m_device);
}

void DeviceWeights::add(const gguf::TensorInfo* t) {
  if (!t || m_offsets.count(t)) return;
  if (!weightTypeSupported(t->type)) {
    throw Error(
        "CUDA stage: tensor " + t->name + " has ggml type " +
        std::to_string(static_cast<uint32_t>(t->type)) +
        ", which the CUDA backend does not handle (it reads f32, f16, bf16, q4_0, q4_1, q5_0, "
        "q5_1, q8_0, q2_K to q6_K, iq4_nl, iq4_xs and mxfp4)");
  }
  if (t->dims.empty() || (t->type != gguf::TensorType::F32 && t->dims[0] % 32 != 0)) {
    throw Error("CUDA stage: tensor " + t->name + " row length is not a multiple of 32");
  }
  m_offsets[t] = m_total;
  m_order.push_back(t);
  m_total += (t->nbytes + 255) / 256 * 256;  // 256-byte aligned starts for every tensor
}

void DeviceWeights::upload(cudaStream_t stream) {
  if (m_total == 0) return;
  const cudaError_t status = cudaMalloc(&m_device, m_total);
  if (status != cudaSuccess) {
    throw Error("CUDA stage: cannot allocate " + std::to_string(m_total) +
                " bytes of weights on the device: " + cudaGetErrorString(status));
  }
  for (const gguf::TensorInfo* t : m_order) {
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(m_device + m_offsets.at(t), t->data, t->nbytes,
                                     cudaMemcpyHostToDevice, stream));
  }
  SHOAL_CUDA_CHECK(cudaStreamSynchronize(stream));
}

DeviceMatrix DeviceWeights::get(const gguf::TensorInfo* t) const {
  if (!t) return {};
  const auto it = m_offsets.find(t);
  if (it == m_offsets.end() || !m_device) {
    throw Error("CUDA stage: tensor " + t->name + " was not uploaded");
  }
  DeviceMatrix m;
  m.type = t->type;
  m.k = t->dims[0];
  m.rows = 1;
  for (size_t i = 1; i < t->dims.size(); ++i) m.rows *= t->dims[i];
  m.rowBytes = m.k / typeBlockElements(t->type) * typeBlockBytes(t->type);
  m.data = m_device + it->second;
  return m;
}

}  // namespace shoal::cuda
