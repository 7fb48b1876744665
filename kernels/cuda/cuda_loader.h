#pragma once
// Finds and loads the CUDA backend plugin (libshoal-cuda.so). Part of shoal_backends, plain C++:
// neither the host nor this file links anything of CUDA.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/backend.h"

namespace shoal::cuda {

// Where the loader looks for the plugin, in order:
//   1. $SHOAL_CUDA_PLUGIN (a file path; when set, only this one is tried),
//   2. the directory of the running executable, then <exe dir>/../lib/shoal,
//   3. the build directory the plugin was built in (SHOAL_CUDA_PLUGIN_BUILD_DIR), if any.
std::vector<std::string> pluginCandidates();

// The CUDA backend. Never throws: when the plugin cannot be used the result is a backend whose
// availability() is false with the reason (not found and where it looked, the dlopen error, an
// ABI mismatch, or the plugin's own reason: no driver, no device). memoryLimit: the most device
// memory in bytes the stages of each device may hold (--gpu-memory); 0: no limit.
std::unique_ptr<runtime::Backend> loadCudaBackend(uint64_t memoryLimit = 0);

}  // namespace shoal::cuda
