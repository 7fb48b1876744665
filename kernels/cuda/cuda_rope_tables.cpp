#include "kernels/cuda/cuda_rope_tables.h"

#include <string>

#include "engine/error.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cuda/cuda_check.h"

namespace shoal::cuda {

RopeTables::RopeTables(int32_t positions, const float* freqFactors)
    : m_positions(positions), m_freqFactors(freqFactors) {}

RopeTables::~RopeTables() {
  for (auto& table : m_tables) cudaFree(table.second);
}

RopeTable RopeTables::get(const model::RopeParams& params) {
  const size_t half = static_cast<size_t>(params.nRot / 2);
  const size_t count = static_cast<size_t>(m_positions) * half;
  for (const auto& [known, data] : m_tables) {
    if (known == params) return {data, data + count};
  }
  if (params.nRot <= 0 || params.nRot % 2 != 0) {
    throw Error("CUDA stage: RoPE over " + std::to_string(params.nRot) +
                " dimensions (must be even and positive)");
  }
  if (params.freqFactors && !m_freqFactors) {
    throw Error(
        "CUDA stage: the layer program asks for RoPE frequency factors "
        "(rope_freqs or rope_factors), which the model lacks");
  }
  std::vector<float> host(2 * count);
  for (int32_t p = 0; p < m_positions; ++p) {
    const size_t row = static_cast<size_t>(p) * half;
    cpu::ropeAngles(p, params, params.freqFactors ? m_freqFactors : nullptr, &host[row],
                    &host[count + row]);
  }
  float* device = nullptr;
  const cudaError_t status = cudaMalloc(&device, host.size() * sizeof(float));
  if (status != cudaSuccess) {
    throw Error("CUDA stage: cannot allocate " + std::to_string(host.size() * sizeof(float)) +
                " bytes of RoPE tables: " + cudaGetErrorString(status));
  }
  m_tables.emplace_back(params, device);
  SHOAL_CUDA_CHECK(
      cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return {device, device + count};
}

}  // namespace shoal::cuda
