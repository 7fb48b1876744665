#include "kernels/backend_registry.h"

#include "engine/error.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_loader.h"

namespace shoal::kernels {

std::vector<std::string> backendNames() { return {"cpu", "cuda"}; }

std::unique_ptr<runtime::Backend> createBackend(const std::string& name,
                                                const BackendOptions& options) {
  if (name == "cpu") return std::make_unique<cpu::CpuBackend>(options.cpuThreads);
  // The CUDA backend is a plugin loaded now; without it (or a driver) it is unavailable.
  if (name == "cuda") return cuda::loadCudaBackend();
  throw Error("unknown backend '" + name + "' (this build has: cpu, cuda)");
}

}  // namespace shoal::kernels
