#include "kernels/backend_registry.h"

#include "engine/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace shoal::kernels {

std::vector<std::string> backendNames() { return {"cpu"}; }

std::unique_ptr<runtime::Backend> createBackend(const std::string& name,
                                                const BackendOptions& options) {
  if (name == "cpu") return std::make_unique<cpu::CpuBackend>(options.cpuThreads);
  throw Error("unknown backend '" + name + "' (this build has: cpu)");
}

}  // namespace shoal::kernels
