#pragma once
// Creates the backends compiled into (or loadable by) this build, by name.

#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/backend.h"

namespace shoal::kernels {

struct BackendOptions {
  int cpuThreads = 0;  // <= 0: one per physical core
  // The most device memory a GPU backend's stages may hold per device, in bytes (0: the
  // device's budget alone). Leaves room for other programs on the GPU.
  uint64_t gpuMemoryLimit = 0;
};

// Names of every backend this build knows ("cpu" first), available or not.
std::vector<std::string> backendNames();

// The named backend; throws shoal::Error for a name this build does not know. An unavailable
// backend is still returned: ask availability() for the reason.
std::unique_ptr<runtime::Backend> createBackend(const std::string& name,
                                                const BackendOptions& options);

}  // namespace shoal::kernels
